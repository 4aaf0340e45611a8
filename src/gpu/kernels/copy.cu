// Data movement by element size, whatever the dtype: a strided N-d copy
// (slices that are not contiguous, permutations, concat into a block of the
// output), up to rank 6. dims/strides are in elements; the destination index
// is strided too, so one kernel writes into any sub-block of a tensor.

#define STRIDED_COPY(NAME, T)                                                              \
    extern "C" __global__ void NAME(const T* src, T* dst, u64 n, int rank,                \
                                    u64 d0, u64 d1, u64 d2, u64 d3, u64 d4, u64 d5,       \
                                    i64 s0, i64 s1, i64 s2, i64 s3, i64 s4, i64 s5,       \
                                    i64 t0, i64 t1, i64 t2, i64 t3, i64 t4, i64 t5) {     \
        pdl_enter();                                                                      \
        const u64 d[6] = {d0, d1, d2, d3, d4, d5};                                        \
        const i64 s[6] = {s0, s1, s2, s3, s4, s5};                                        \
        const i64 t[6] = {t0, t1, t2, t3, t4, t5};                                        \
        GRID_STRIDE(i, n) {                                                               \
            u64 rest = i;                                                                 \
            i64 from = 0, to = 0;                                                         \
            for (int a = rank - 1; a >= 0; --a) {                                         \
                u64 idx = rest % d[a];                                                    \
                rest /= d[a];                                                             \
                from += (i64)idx * s[a];                                                  \
                to += (i64)idx * t[a];                                                    \
            }                                                                             \
            dst[to] = src[from];                                                          \
        }                                                                                 \
    }

STRIDED_COPY(strided_copy_1, unsigned char)
STRIDED_COPY(strided_copy_2, unsigned short)
STRIDED_COPY(strided_copy_4, unsigned int)
STRIDED_COPY(strided_copy_8, u64)

// Advances the plan's step counter once every kernel of a step is queued:
// captured into the graph, so a replay needs no host-side update.
extern "C" __global__ void advance_step(u64* step) {
    pdl_enter();
    if (blockIdx.x == 0 && threadIdx.x == 0) *step += 1;
}

// N-d padding (rank <= 6) of float storage: out element -> its source
// index per axis; constant mode writes `value` outside the input, reflect
// mode mirrors without repeating the edge (as pulsed::ops::Pad on the CPU).
template <typename T>
__device__ void pad_impl(const T* src, T* dst, u64 n, int rank, const u64* od, const u64* id,
                         const u64* before, int reflect, float value) {
    GRID_STRIDE(i, n) {
        u64 rest = i;
        i64 from = 0, stride = 1;
        bool inside = true;
        for (int a = rank - 1; a >= 0; --a) {
            i64 o = (i64)(rest % od[a]);
            rest /= od[a];
            i64 j = o - (i64)before[a];
            i64 len = (i64)id[a];
            if (j < 0 || j >= len) {
                if (reflect) {
                    j = j < 0 ? -j : 2 * (len - 1) - j;
                } else {
                    inside = false;
                }
            }
            from += j * stride;
            stride *= len;
        }
        st(dst, i, inside ? ld(src, (u64)from) : value);
    }
}

#define PAD_KERNEL(T, SUFFIX)                                                              \
    extern "C" __global__ void pad_##SUFFIX(const T* src, T* dst, u64 n, int rank,        \
                                            u64 o0, u64 o1, u64 o2, u64 o3, u64 o4, u64 o5, \
                                            u64 i0, u64 i1, u64 i2, u64 i3, u64 i4, u64 i5, \
                                            u64 b0, u64 b1, u64 b2, u64 b3, u64 b4, u64 b5, \
                                            int reflect, float value) {                    \
        pdl_enter();                                                                       \
        const u64 od[6] = {o0, o1, o2, o3, o4, o5};                                        \
        const u64 id[6] = {i0, i1, i2, i3, i4, i5};                                        \
        const u64 b[6] = {b0, b1, b2, b3, b4, b5};                                         \
        pad_impl<T>(src, dst, n, rank, od, id, b, reflect, value);                         \
    }

PAD_KERNEL(float, f32)
PAD_KERNEL(bf16_t, bf16)
