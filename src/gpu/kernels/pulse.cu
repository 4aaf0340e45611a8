// Pulse ops over zero-initialised device state. Per-step positions are
// derived from the plan's step counter in device memory (`step`: steps
// completed before this one), so the kernels replay unchanged in a graph.

// Delay: the ring holds the last b = delay + overlap frames of each of
// `outer` rows (oldest at pos = step * min(p, b) % b). The output is the
// first p + overlap frames of (ring ++ input); then the newest min(p, b)
// input frames overwrite the oldest ring slots (a second kernel, so every
// read of the ring by the first has happened).
#define DELAY(T, SZ)                                                                       \
    extern "C" __global__ void delay_out_##SZ(const T* x, const T* ring, T* out,          \
                                              const u64* step, u64 outer, u64 p,          \
                                              u64 inner, u64 b, u64 pout) {               \
        u64 pos = b == 0 ? 0 : (*step * (p < b ? p : b)) % b;                             \
        u64 n = outer * pout * inner;                                                     \
        GRID_STRIDE(i, n) {                                                               \
            u64 j = i % inner, k = (i / inner) % pout, o = i / (inner * pout);            \
            out[i] = k < b ? ring[(o * b + (pos + k) % b) * inner + j]                    \
                           : x[(o * p + (k - b)) * inner + j];                            \
        }                                                                                 \
    }                                                                                     \
    extern "C" __global__ void delay_ring_##SZ(const T* x, T* ring, const u64* step,      \
                                               u64 outer, u64 p, u64 inner, u64 b) {      \
        u64 m = p < b ? p : b;                                                            \
        u64 pos = b == 0 ? 0 : (*step * m) % b;                                           \
        u64 n = outer * m * inner;                                                        \
        GRID_STRIDE(i, n) {                                                               \
            u64 j = i % inner, k = (i / inner) % m, o = i / (inner * m);                  \
            ring[(o * b + (pos + k) % b) * inner + j] = x[(o * p + (p - m + k)) * inner + j]; \
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
    i64 s = *stream_len;
    i64 end = 0x7fffffffffffffffLL;
    if (has_end && s >= 0) {
        i64 num = ea * s + eb;
        i64 q = num / ed, r = num % ed;
        if (r < 0) q -= 1;  // div_euclid for ed > 0
        end = q + ec;
    }
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
