// stft kernels: to be written.
