// attention kernels: to be written.
