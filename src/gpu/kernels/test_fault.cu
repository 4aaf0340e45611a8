// Fault injection for tests only (gpu::test_util::fault): from chunk step
// `from` on, corrupts a node's output, so the comparison tools can be shown
// to pin it. A module of its own that only the test helper loads: the kernel
// library, and so every production run, never compiles it.

template <typename T>
__device__ void fault_impl(T* x, u64 n, const u64* step, u64 from) {
    if (*step < from) return;
    GRID_STRIDE(i, n) { st(x, i, ld(x, i) * 1.5f + 0.25f); }
}

FLOAT_KERNELS(fault,
    (float* x, u64 n, const u64* step, u64 from),
    (bf16_t* x, u64 n, const u64* step, u64 from),
    (x, n, step, from))
