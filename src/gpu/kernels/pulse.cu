// Pulse ops over zero-initialised device state. Per-step positions are
// derived from the plan's step counter in device memory (`step`: steps
// completed before this one), so the kernels replay unchanged in a graph.

// Delay: each of `outer` rows keeps its last b = delay + overlap frames,
// oldest first, in one of two rings (ring `step & 1` is read, the other is
// written), so one kernel both reads the past and stores the new past
// without racing. With cat = ring ++ input (b + p frames), the output is
// cat[0 .. p + overlap] and the next ring is cat[p .. p + b].
#define DELAY(T, SZ)                                                                       \
    extern "C" __global__ void delay_##SZ(const T* x, T* rings, T* out, const u64* step,  \
                                          u64 outer, u64 p, u64 inner, u64 b, u64 pout) { \
        pdl_enter();                                                                      \
        const T* src = rings + (*step & 1) * outer * b * inner;                           \
        T* dst = rings + ((*step + 1) & 1) * outer * b * inner;                           \
        u64 span = pout > b ? pout : b;                                                   \
        u64 n = outer * span * inner;                                                     \
        GRID_STRIDE(i, n) {                                                               \
            u64 j = i % inner, k = (i / inner) % span, o = i / (inner * span);            \
            if (k < pout) {                                                               \
                out[(o * pout + k) * inner + j] =                                         \
                    k < b ? src[(o * b + k) * inner + j] : x[(o * p + (k - b)) * inner + j]; \
            }                                                                             \
            if (k < b) {                                                                  \
                u64 c = p + k;                                                            \
                dst[(o * b + k) * inner + j] =                                            \
                    c < b ? src[(o * b + c) * inner + j] : x[(o * p + (c - b)) * inner + j]; \
            }                                                                             \
        }                                                                                 \
    }

DELAY(unsigned char, 1)
DELAY(unsigned short, 2)
DELAY(unsigned int, 4)
DELAY(u64, 8)

// PulsePad: frame k of this pulse has logical index step * p - delay + k;
// frames before `begin`, or at/after end(S) once S is known, become `value`.
// end(S) = (ea * S + eb).div_euclid(ed) + ec; has_end 0 means no end padding.
template <typename T>
__device__ void pulse_pad_impl(const T* x, T* out, const u64* step, const i64* stream_len,
                               u64 outer, u64 p, u64 inner, i64 delay, i64 begin,
                               int has_end, i64 ea, i64 eb, i64 ed, i64 ec, float value) {
    i64 first = (i64)(*step) * (i64)p - delay;
    const i64 end = stream_end(stream_len, has_end, ea, eb, ed, ec);
    u64 n = outer * p * inner;
    GRID_STRIDE(i, n) {
        i64 k = (i64)((i / inner) % p);
        i64 at = first + k;
        bool pad = at < begin || at >= end;
        st(out, i, pad ? value : ld(x, i));
    }
}

FLOAT_KERNELS(pulse_pad,
    (const float* x, float* out, const u64* step, const i64* stream_len, u64 outer, u64 p,
     u64 inner, i64 delay, i64 begin, int has_end, i64 ea, i64 eb, i64 ed, i64 ec, float value),
    (const bf16_t* x, bf16_t* out, const u64* step, const i64* stream_len, u64 outer, u64 p,
     u64 inner, i64 delay, i64 begin, int has_end, i64 ea, i64 eb, i64 ed, i64 ec, float value),
    (x, out, step, stream_len, outer, p, inner, delay, begin, has_end, ea, eb, ed, ec, value))
