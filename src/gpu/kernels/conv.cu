// conv kernels: to be written.
