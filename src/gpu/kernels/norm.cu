// Normalisations and reductions along one axis: LayerNorm, BatchNorm,
// Softmax / LogSoftmax, Reduce (sum, mean, max) and ArgMax.
//
// Each op sees its input as (outer, n, inner): the reduced axis is n long
// and its elements lie `inner` apart. Two shapes of kernel:
// - `*_rows` (inner == 1, the common case): a group of threads per row, a
//   warp (`wide` 0, n up to ~1k) or the whole block (`wide` 1, longer rows),
//   with lanes reading the row coalesced and a shuffle / block reduction;
// - `*_cols` (inner > 1): one thread per (outer, inner) lane, reading the n
//   values one after the other, as the CPU does; neighbouring threads read
//   neighbouring addresses, so the loads stay coalesced.
// Same formulas as pulsed::ops on the CPU, computed in f32 (expf, logf,
// sqrtf; the CPU's 1/n and 1/sqrt placements).

// The threads that share one row: a warp, or the block when `wide`.
struct RowGroup {
    u64 row;
    unsigned lane;
    unsigned width;
    int wide;
};

__device__ __forceinline__ RowGroup row_group(int wide) {
    RowGroup g;
    g.wide = wide;
    if (wide) {
        g.row = blockIdx.x;
        g.lane = threadIdx.x;
        g.width = blockDim.x;
    } else {
        g.row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        g.lane = threadIdx.x & 31;
        g.width = 32;
    }
    return g;
}

__device__ __forceinline__ float group_sum(const RowGroup& g, float v, float* sh) {
    return g.wide ? block_sum(v, sh) : warp_sum(v);
}

__device__ __forceinline__ float group_max(const RowGroup& g, float v, float* sh) {
    return g.wide ? block_max(v, sh) : warp_max(v);
}

__device__ __forceinline__ float group_nan_max(const RowGroup& g, float v, float* sh) {
    return g.wide ? block_nan_max(v, sh) : warp_nan_max(v);
}

// First element of the column lane `idx` of an (outer, n, inner) tensor.
__device__ __forceinline__ u64 col_base(u64 idx, u64 n, u64 inner) {
    return (idx / inner) * n * inner + idx % inner;
}

// ------------------------------------------------------------- LayerNorm
// (x - mean) * (1 / sqrt(var + eps)) [* gamma + beta], biased variance,
// two passes. gamma/beta are null when the op has no affine parameters.

// A row of at most 32 * V held in registers, read once (same sums, same
// order as the loops below). V is a compile-time bound so no unroll step is
// wasted on a shorter row: a warp's whole chain is a few dozen instructions,
// which is what a chunk step's 8-row norm costs.
template <typename T, int V>
__device__ __forceinline__ void layer_norm_row_regs(const T* xr, const T* gamma, const T* beta,
                                                    T* yr, unsigned n, unsigned lane,
                                                    float inv_n, float eps, int act) {
    float v[V], ga[V], be[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const unsigned i = lane + 32 * j;
        const bool in = i < n;
        v[j] = in ? ld(xr, i) : 0.0f;
        ga[j] = in && gamma ? ld(gamma, i) : 1.0f;
        be[j] = in && gamma ? ld(beta, i) : 0.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) s += v[j];
    const float mean = warp_sum(s) * inv_n;
    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        if (lane + 32 * j < n) {
            const float d = v[j] - mean;
            q += d * d;
        }
    }
    const float rstd = 1.0f / sqrtf(warp_sum(q) * inv_n + eps);
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const unsigned i = lane + 32 * j;
        if (i < n) {
            float o = (v[j] - mean) * rstd;
            if (gamma) o = o * ga[j] + be[j];
            st(yr, i, act_op(act, o));
        }
    }
}

template <typename T>
__device__ void layer_norm_rows_impl(const T* x, const T* gamma, const T* beta, T* y,
                                     u64 rows, u64 n, float eps, int wide, int act) {
    __shared__ float sh[32];
    RowGroup g = row_group(wide);
    if (g.row >= rows) return;
    const T* xr = x + g.row * n;
    T* yr = y + g.row * n;
    float inv_n = 1.0f / (float)n;
    if (!g.wide && n <= 32 * 16) {
        const unsigned nn = (unsigned)n;
        if (n <= 32 * 4) {
            layer_norm_row_regs<T, 4>(xr, gamma, beta, yr, nn, g.lane, inv_n, eps, act);
        } else if (n <= 32 * 8) {
            layer_norm_row_regs<T, 8>(xr, gamma, beta, yr, nn, g.lane, inv_n, eps, act);
        } else {
            layer_norm_row_regs<T, 16>(xr, gamma, beta, yr, nn, g.lane, inv_n, eps, act);
        }
        return;
    }
    float s = 0.0f;
    for (u64 i = g.lane; i < n; i += g.width) s += ld(xr, i);
    float mean = group_sum(g, s, sh) * inv_n;
    float q = 0.0f;
    for (u64 i = g.lane; i < n; i += g.width) {
        float d = ld(xr, i) - mean;
        q += d * d;
    }
    float var = group_sum(g, q, sh) * inv_n;
    float rstd = 1.0f / sqrtf(var + eps);
    for (u64 i = g.lane; i < n; i += g.width) {
        float v = (ld(xr, i) - mean) * rstd;
        if (gamma) v = v * ld(gamma, i) + ld(beta, i);
        st(yr, i, act_op(act, v));
    }
}

template <typename T>
__device__ void layer_norm_cols_impl(const T* x, const T* gamma, const T* beta, T* y,
                                     u64 outer, u64 n, u64 inner, float eps, int act) {
    float inv_n = 1.0f / (float)n;
    GRID_STRIDE(idx, outer * inner) {
        u64 base = col_base(idx, n, inner);
        float s = 0.0f;
        for (u64 i = 0; i < n; i++) s += ld(x, base + i * inner);
        float mean = s * inv_n;
        float q = 0.0f;
        for (u64 i = 0; i < n; i++) {
            float d = ld(x, base + i * inner) - mean;
            q += d * d;
        }
        float rstd = 1.0f / sqrtf(q * inv_n + eps);
        for (u64 i = 0; i < n; i++) {
            float v = (ld(x, base + i * inner) - mean) * rstd;
            if (gamma) v = v * ld(gamma, i) + ld(beta, i);
            st(y, base + i * inner, act_op(act, v));
        }
    }
}

FLOAT_KERNELS(layer_norm_rows,
    (const float* x, const float* gamma, const float* beta, float* y, u64 rows, u64 n,
     float eps, int wide, int act),
    (const bf16_t* x, const bf16_t* gamma, const bf16_t* beta, bf16_t* y, u64 rows, u64 n,
     float eps, int wide, int act),
    (x, gamma, beta, y, rows, n, eps, wide, act))
FLOAT_KERNELS(layer_norm_cols,
    (const float* x, const float* gamma, const float* beta, float* y, u64 outer, u64 n,
     u64 inner, float eps, int act),
    (const bf16_t* x, const bf16_t* gamma, const bf16_t* beta, bf16_t* y, u64 outer, u64 n,
     u64 inner, float eps, int act),
    (x, gamma, beta, y, outer, n, inner, eps, act))

// ------------------------------------------------------------- BatchNorm
// Per channel c = (i / inner) % n: scale = gamma / sqrt(var + eps),
// shift = beta - mean * scale, y = x * scale + shift (the CPU's folding).

template <typename T>
__device__ void batch_norm_impl(const T* x, const T* gamma, const T* beta, const T* mean,
                                const T* var, T* y, u64 outer, u64 n, u64 inner, float eps) {
    GRID_STRIDE(i, outer * n * inner) {
        u64 c = (i / inner) % n;
        float scale = ld(gamma, c) / sqrtf(ld(var, c) + eps);
        float shift = ld(beta, c) - ld(mean, c) * scale;
        st(y, i, ld(x, i) * scale + shift);
    }
}

FLOAT_KERNELS(batch_norm,
    (const float* x, const float* gamma, const float* beta, const float* mean,
     const float* var, float* y, u64 outer, u64 n, u64 inner, float eps),
    (const bf16_t* x, const bf16_t* gamma, const bf16_t* beta, const bf16_t* mean,
     const bf16_t* var, bf16_t* y, u64 outer, u64 n, u64 inner, float eps),
    (x, gamma, beta, mean, var, y, outer, n, inner, eps))

// ------------------------------------------------------- (Log)Softmax
// softmax: expf(x - max) * (1 / sum); log-softmax: x - (max + logf(sum)).

template <typename T>
__device__ void softmax_rows_impl(const T* x, T* y, u64 rows, u64 n, int log, int wide) {
    __shared__ float sh[32];
    RowGroup g = row_group(wide);
    if (g.row >= rows) return;
    const T* xr = x + g.row * n;
    T* yr = y + g.row * n;
    float m = NEG_INF;
    for (u64 i = g.lane; i < n; i += g.width) m = fmaxf(m, ld(xr, i));
    m = group_max(g, m, sh);
    float s = 0.0f;
    for (u64 i = g.lane; i < n; i += g.width) s += expf(ld(xr, i) - m);
    s = group_sum(g, s, sh);
    if (log) {
        float lse = m + logf(s);
        for (u64 i = g.lane; i < n; i += g.width) st(yr, i, ld(xr, i) - lse);
    } else {
        float inv = 1.0f / s;
        for (u64 i = g.lane; i < n; i += g.width) st(yr, i, expf(ld(xr, i) - m) * inv);
    }
}

template <typename T>
__device__ void softmax_cols_impl(const T* x, T* y, u64 outer, u64 n, u64 inner, int log) {
    GRID_STRIDE(idx, outer * inner) {
        u64 base = col_base(idx, n, inner);
        float m = NEG_INF;
        for (u64 i = 0; i < n; i++) m = fmaxf(m, ld(x, base + i * inner));
        float s = 0.0f;
        for (u64 i = 0; i < n; i++) s += expf(ld(x, base + i * inner) - m);
        if (log) {
            float lse = m + logf(s);
            for (u64 i = 0; i < n; i++) st(y, base + i * inner, ld(x, base + i * inner) - lse);
        } else {
            float inv = 1.0f / s;
            for (u64 i = 0; i < n; i++) {
                st(y, base + i * inner, expf(ld(x, base + i * inner) - m) * inv);
            }
        }
    }
}

FLOAT_KERNELS(softmax_rows,
    (const float* x, float* y, u64 rows, u64 n, int log, int wide),
    (const bf16_t* x, bf16_t* y, u64 rows, u64 n, int log, int wide),
    (x, y, rows, n, log, wide))
FLOAT_KERNELS(softmax_cols,
    (const float* x, float* y, u64 outer, u64 n, u64 inner, int log),
    (const bf16_t* x, bf16_t* y, u64 outer, u64 n, u64 inner, int log),
    (x, y, outer, n, inner, log))

// --------------------------------------------------------------- Reduce
// op 0 sum, 1 mean (sum / n), 2 max (NaN wins). An empty sum is 0.

template <typename T>
__device__ void reduce_rows_impl(const T* x, T* y, u64 rows, u64 n, int op, int wide) {
    __shared__ float sh[32];
    RowGroup g = row_group(wide);
    if (g.row >= rows) return;
    const T* xr = x + g.row * n;
    float a;
    if (op == 2) {
        a = NEG_INF;
        for (u64 i = g.lane; i < n; i += g.width) a = nan_max(a, ld(xr, i));
        a = group_nan_max(g, a, sh);
    } else {
        a = 0.0f;
        for (u64 i = g.lane; i < n; i += g.width) a += ld(xr, i);
        a = group_sum(g, a, sh);
        if (op == 1) a = a / (float)n;
    }
    if (g.lane == 0) st(y, g.row, a);
}

template <typename T>
__device__ void reduce_cols_impl(const T* x, T* y, u64 outer, u64 n, u64 inner, int op) {
    GRID_STRIDE(idx, outer * inner) {
        u64 base = col_base(idx, n, inner);
        float a;
        if (op == 2) {
            a = NEG_INF;
            for (u64 i = 0; i < n; i++) a = nan_max(a, ld(x, base + i * inner));
        } else {
            a = 0.0f;
            for (u64 i = 0; i < n; i++) a += ld(x, base + i * inner);
            if (op == 1) a = a / (float)n;
        }
        st(y, idx, a);
    }
}

FLOAT_KERNELS(reduce_rows,
    (const float* x, float* y, u64 rows, u64 n, int op, int wide),
    (const bf16_t* x, bf16_t* y, u64 rows, u64 n, int op, int wide),
    (x, y, rows, n, op, wide))
FLOAT_KERNELS(reduce_cols,
    (const float* x, float* y, u64 outer, u64 n, u64 inner, int op),
    (const bf16_t* x, bf16_t* y, u64 outer, u64 n, u64 inner, int op),
    (x, y, outer, n, inner, op))

// i64 sum (wrapping, as the CPU) and max: one thread per output.
extern "C" __global__ void reduce_i64(const i64* x, i64* y, u64 outer, u64 n, u64 inner, int op) {
    pdl_enter();
    GRID_STRIDE(idx, outer * inner) {
        u64 base = col_base(idx, n, inner);
        if (op == 2) {
            i64 a = (i64)0x8000000000000000ull;
            for (u64 i = 0; i < n; i++) {
                i64 v = x[base + i * inner];
                a = v > a ? v : a;
            }
            y[idx] = a;
        } else {
            u64 a = 0;
            for (u64 i = 0; i < n; i++) a += (u64)x[base + i * inner];
            y[idx] = (i64)a;
        }
    }
}

// --------------------------------------------------------------- ArgMax
// Index of the first NaN if any, else of the first largest value.

// Whether (v, i) beats (best, at): NaN beats numbers, then larger values,
// then (on equal values or two NaNs) the smaller index. `at` < 0: nothing yet.
__device__ __forceinline__ bool arg_better(float v, long long i, float best, long long at) {
    if (i < 0) return false;
    if (at < 0) return true;
    bool vn = v != v, bn = best != best;
    if (vn != bn) return vn;
    if (vn || v == best) return i < at;
    return v > best;
}

template <typename T>
__device__ void argmax_rows_impl(const T* x, i64* y, u64 rows, u64 n, int wide) {
    __shared__ float shv[32];
    __shared__ long long shi[32];
    RowGroup g = row_group(wide);
    if (g.row >= rows) return;
    const T* xr = x + g.row * n;
    float best = 0.0f;
    long long at = -1;
    for (u64 i = g.lane; i < n; i += g.width) {
        float v = ld(xr, i);
        if (arg_better(v, (long long)i, best, at)) {
            best = v;
            at = (long long)i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        long long oi = __shfl_xor_sync(0xffffffffu, at, o);
        if (arg_better(ov, oi, best, at)) {
            best = ov;
            at = oi;
        }
    }
    if (wide) {
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) {
            shv[warp] = best;
            shi[warp] = at;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int nw = (blockDim.x + 31) >> 5;
            for (int w = 1; w < nw; w++) {
                if (arg_better(shv[w], shi[w], best, at)) {
                    best = shv[w];
                    at = shi[w];
                }
            }
            y[g.row] = at;
        }
    } else if (g.lane == 0) {
        y[g.row] = at;
    }
}

template <typename T>
__device__ void argmax_cols_impl(const T* x, i64* y, u64 outer, u64 n, u64 inner) {
    GRID_STRIDE(idx, outer * inner) {
        u64 base = col_base(idx, n, inner);
        float best = ld(x, base);
        u64 at = 0;
        if (best == best) {
            for (u64 i = 1; i < n; i++) {
                float v = ld(x, base + i * inner);
                if (v != v || v > best) {
                    best = v;
                    at = i;
                    if (v != v) break;
                }
            }
        }
        y[idx] = (i64)at;
    }
}

FLOAT_KERNELS(argmax_rows,
    (const float* x, i64* y, u64 rows, u64 n, int wide),
    (const bf16_t* x, i64* y, u64 rows, u64 n, int wide),
    (x, y, rows, n, wide))
FLOAT_KERNELS(argmax_cols,
    (const float* x, i64* y, u64 outer, u64 n, u64 inner),
    (const bf16_t* x, i64* y, u64 outer, u64 n, u64 inner),
    (x, y, outer, n, inner))
