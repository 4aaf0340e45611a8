// copy kernels: to be written.
