// pulse kernels: to be written.
