// norm kernels: to be written.
