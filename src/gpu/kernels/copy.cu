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

// RightCopies (step == 0) and PulsedRightCopies (step = the device step
// counter), by element size, as ops/right_copies.rs `fill`: x [outer, have,
// d] -> out [outer, rows, 2, d]. Slot 0 of row r is x's row r; slot 1 is
// x's row r + chunk when frame first + r is among the first `right` of its
// chunk, that row is in x and its frame lies before the end; else zeros.
// Whole: first 0, the end is rows. Pulsed: first = step * pulse - back; the
// end once the stream's length is known, at least 0 as the CPU state has it.
template <typename T>
__device__ void right_copies_impl(const T* x, T* out, const u64* step, const i64* stream_len,
                                  u64 outer, u64 rows, u64 have, u64 d, i64 chunk, i64 right,
                                  i64 pulse, i64 back, int has_end, i64 ea, i64 eb, i64 ed,
                                  i64 ec) {
    i64 first = 0, end = (i64)rows;
    if (step != 0) {
        first = (i64)(*step) * pulse - back;
        end = max(stream_end(stream_len, has_end, ea, eb, ed, ec), (i64)0);
    }
    GRID_STRIDE(i, outer * rows * 2 * d) {
        const u64 c = i % d, slot = (i / d) & 1, r = (i / (2 * d)) % rows;
        const T* xo = x + i / (2 * d * rows) * have * d;
        const i64 pos = first + (i64)r;
        const i64 phase = (pos % chunk + chunk) % chunk;
        const u64 src = slot == 0 ? r : r + (u64)chunk;
        const bool copy = slot == 0 || (phase < right && src < have && pos + chunk < end);
        out[i] = copy ? xo[src * d + c] : (T)0;
    }
}

#define RIGHT_COPIES(T, SZ)                                                                \
    extern "C" __global__ void right_copies_##SZ(                                         \
        const T* x, T* out, const u64* step, const i64* stream_len, u64 outer, u64 rows,  \
        u64 have, u64 d, i64 chunk, i64 right, i64 pulse, i64 back, int has_end, i64 ea,   \
        i64 eb, i64 ed, i64 ec) {                                                          \
        pdl_enter();                                                                       \
        right_copies_impl<T>(x, out, step, stream_len, outer, rows, have, d, chunk, right, \
                             pulse, back, has_end, ea, eb, ed, ec);                        \
    }

RIGHT_COPIES(unsigned short, 2)
RIGHT_COPIES(unsigned int, 4)
RIGHT_COPIES(u64, 8)

// Gather along one axis, by element size: `data [outer, n, inner]` to
// `out [outer, m, inner]`, row j of each outer block from row idx[j]
// (negative: from the end). The builder takes constant indices alone and
// checks them in range, so no launch reads outside `data`.
#define GATHER_ROWS(T, SZ)                                                                 \
    extern "C" __global__ void gather_rows_##SZ(const T* data, const i64* idx, T* out,    \
                                                u64 outer, u64 n, u64 m, u64 inner) {      \
        pdl_enter();                                                                       \
        GRID_STRIDE(i, outer * m * inner) {                                                \
            const u64 c = i % inner, j = (i / inner) % m, o = i / (inner * m);             \
            const i64 k = idx[j] < 0 ? idx[j] + (i64)n : idx[j];                           \
            out[i] = data[(o * n + (u64)k) * inner + c];                                   \
        }                                                                                  \
    }

GATHER_ROWS(unsigned char, 1)
GATHER_ROWS(unsigned short, 2)
GATHER_ROWS(unsigned int, 4)
GATHER_ROWS(u64, 8)
