// lstm kernels: to be written.
