// ctc kernels: to be written.
