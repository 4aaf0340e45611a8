// Skinny Linear for chunk steps: y[m, n] = act(sum_k x[m, k] * w[n, k] + b[n])
// with few rows (a pulse's frames: at most R = 16 per block, more rows, from
// batched streams, in groups along grid y). Lanes stride along k, so each
// weight row is read once, coalesced, and x (a few KiB, shared by every
// warp) stays in cache. f32 accumulation; cuBLAS takes the large-m case
// (whole utterances). Without a bias, `has_bias` is 0 and `bias` any valid
// address.
//
// The translator folds neighbours in, each saving a launch of its own:
// - `act`: an activation (an elementwise.cu unary code, -1 for none);
// - `has_residual`: `residual + y * alpha` (the graph's Mul and Add);
// - `glu`: GLU over the output's halves, y[m, n/2] = a * sigmoid(b) with
//   a = columns [0, n/2) and b = [n/2, n) (the graph's two Slices, Sigmoid
//   and Mul); a block's columns then come in (a, b) pairs;
// - `has_norm`: a layer norm of x over k (eps, gamma, beta) before it: each
//   block computes the row statistics itself (x is a few KiB), so the
//   normalised x is never stored;
// - `outs` > 1: sibling Linears of the same input and shape (attention's q,
//   k and v) in the same launch: blocks [o * n / cols, (o + 1) * n / cols)
//   compute output o from (w, bias, y), (w1, b1, y1) or (w2, b2, y2).

// A block of 8 warps takes 8 / wpc columns; the `wpc` warps of a column
// split k, so even a 256-column layer fills the GPU and each warp's chain
// of dependent loads stays short (at these sizes the kernel is bound by
// latency, not bandwidth). R, the row bound, is a compile-time constant so
// the per-row accumulators stay in registers and the loads of a k step can
// all be in flight together.
template <typename T, int R>
__device__ void skinny_linear_impl(const T* x, const T* w, const T* bias, T* y, int m, int n,
                                   int k, int act, int has_bias, int wpc, float alpha,
                                   const T* residual, int has_residual, int glu,
                                   const T* gamma, const T* beta, float eps, int has_norm,
                                   int outs, const T* w1, const T* b1, T* y1, const T* w2,
                                   const T* b2, T* y2) {
    __shared__ float part[8][R];
    int bx = blockIdx.x;
    if (outs > 1) {
        const int per_out = n / (8 / wpc);
        const int o = bx / per_out;
        bx -= o * per_out;
        if (o == 1) {
            w = w1, bias = b1, y = y1;
        } else if (o == 2) {
            w = w2, bias = b2, y = y2;
        }
    }
    __shared__ float mean[R], rstd[R];
    // grid y walks groups of R rows (a batch of streams' frames): each group
    // reads the weights again, from L2, and keeps every epilogue fusion
    {
        const int g0 = blockIdx.y * R;
        const int width = glu ? n / 2 : n;
        x += (u64)g0 * k;
        y += (u64)g0 * width;
        if (has_residual) residual += (u64)g0 * n;
        m = min(R, m - g0);
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int cols = 8 / wpc;
    int local = warp / wpc;
    int half = n / 2;
    // with glu, local columns 2p and 2p + 1 are output p's a and b
    int col = glu ? bx * (cols / 2) + local / 2 + (local & 1) * half : bx * cols + local;
    bool live = glu ? bx * (cols / 2) + local / 2 < half : col < n;
    int slice = warp % wpc;
    int per = (k + wpc - 1) / wpc;
    int k0 = slice * per, k1 = min(k, k0 + per);
    // Weights are constants, so they are fetched into L2 before waiting for
    // the kernel before this one (programmatic dependent launch).
    if (live) {
        for (int i = k0 + lane * 32; i < k1; i += 32 * 32) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(w + (u64)col * k + i));
        }
    }
    pdl_enter();
    if (has_norm) {
        // as the layer norm kernel: mean, then the biased variance about it
        float inv_k = 1.0f / (float)k;
        for (int r = warp; r < m; r += 8) {
            const T* xr = x + (u64)r * k;
            float s = 0.0f;
            for (int i = lane; i < k; i += 32) s += ld(xr, i);
            s = warp_sum(s);
            float mu = s * inv_k;
            float q = 0.0f;
            for (int i = lane; i < k; i += 32) {
                float d = ld(xr, i) - mu;
                q += d * d;
            }
            q = warp_sum(q);
            if (lane == 0) {
                mean[r] = mu;
                rstd[r] = 1.0f / sqrtf(q * inv_k + eps);
            }
        }
        __syncthreads();
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    if (live) {
        const T* wr = w + (u64)col * k;
        if (has_norm) {
            for (int i = k0 + lane; i < k1; i += 32) {
                float wv = ld(wr, i), g = ld(gamma, i), b = ld(beta, i);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r < m) acc[r] += wv * ((ld(x, (u64)r * k + i) - mean[r]) * rstd[r] * g + b);
                }
            }
        } else {
#pragma unroll 2
            for (int i = k0 + lane; i < k1; i += 32) {
                float wv = ld(wr, i);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r < m) acc[r] += wv * ld(x, (u64)r * k + i);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r];
        v = warp_sum(v);
        if (lane == 0) part[warp][r] = v;
    }
    __syncthreads();
    int t = threadIdx.x;
    if (glu) {
        if (t < (cols / 2) * m) {
            int pc = t / m, r = t % m;
            int p = bx * (cols / 2) + pc;
            if (p < half) {
                float a = 0.0f, b = 0.0f;
                for (int s2 = 0; s2 < wpc; ++s2) {
                    a += part[(2 * pc) * wpc + s2][r];
                    b += part[(2 * pc + 1) * wpc + s2][r];
                }
                if (has_bias) {
                    a += ld(bias, p);
                    b += ld(bias, p + half);
                }
                st(y, (u64)r * half + p, a * (1.0f / (1.0f + expf(-b))));
            }
        }
        return;
    }
    if (t < cols * m) {
        int c = t / m, r = t % m;
        int oc = bx * cols + c;
        if (oc < n) {
            float v = 0.0f;
            for (int s2 = 0; s2 < wpc; ++s2) v += part[c * wpc + s2][r];
            if (has_bias) v += ld(bias, oc);
            if (act >= 0) v = act_op(act, v);
            if (has_residual) v = ld(residual, (u64)r * n + oc) + v * alpha;
            st(y, (u64)r * n + oc, v);
        }
    }
}

#define SKINNY(R)                                                                           \
    extern "C" __global__ void skinny_linear_r##R##_f32(                                   \
        const float* x, const float* w, const float* bias, float* y, int m, int n, int k,  \
        int act, int has_bias, int wpc, float alpha, const float* residual,                 \
        int has_residual, int glu, const float* gamma, const float* beta, float eps,        \
        int has_norm, int outs, const float* w1, const float* b1, float* y1,                \
        const float* w2, const float* b2, float* y2) {                                      \
        skinny_linear_impl<float, R>(x, w, bias, y, m, n, k, act, has_bias, wpc, alpha,     \
                                     residual, has_residual, glu, gamma, beta, eps,         \
                                     has_norm, outs, w1, b1, y1, w2, b2, y2);               \
    }                                                                                       \
    extern "C" __global__ void skinny_linear_r##R##_bf16(                                  \
        const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, int m, int n,     \
        int k, int act, int has_bias, int wpc, float alpha, const bf16_t* residual,         \
        int has_residual, int glu, const bf16_t* gamma, const bf16_t* beta, float eps,      \
        int has_norm, int outs, const bf16_t* w1, const bf16_t* b1, bf16_t* y1,             \
        const bf16_t* w2, const bf16_t* b2, bf16_t* y2) {                                   \
        skinny_linear_impl<bf16_t, R>(x, w, bias, y, m, n, k, act, has_bias, wpc, alpha,    \
                                      residual, has_residual, glu, gamma, beta, eps,        \
                                      has_norm, outs, w1, b1, y1, w2, b2, y2);              \
    }

SKINNY(1)
SKINNY(2)
SKINNY(4)
SKINNY(8)
SKINNY(16)

// What a Linear's cuBLAS GEMM leaves to do, in one pass over its output
// `acc` [m, n]: y = residual + alpha * act(acc + bias) (each part optional),
// or with `glu` y [m, n / 2] = a * sigmoid(b) over acc's two column halves
// (bias added first); the same epilogue as the skinny kernel's. With glu,
// acc is scratch (y is narrower, so it cannot be written in place).
// Element i of a product cuBLAS wrote as `splits` partial products over
// slices of k, `stride` elements apart, summed in slice order.
template <typename T>
__device__ __forceinline__ float ld_sum(const T* acc, u64 i, int splits, u64 stride) {
    float v = ld(acc, i);
    for (int s = 1; s < splits; ++s) v += ld(acc, i + (u64)s * stride);
    return v;
}

template <typename T>
__device__ void linear_epilogue_impl(const T* acc, const T* bias, T* y, u64 m, u64 n,
                                     int has_bias, int act, float alpha, const T* residual,
                                     int has_residual, int glu, int splits, u64 stride) {
    const u64 width = glu ? n / 2 : n;
    GRID_STRIDE(i, m * width) {
        const u64 r = i / width, c = i - r * width;
        float v = ld_sum(acc, r * n + c, splits, stride) + (has_bias ? ld(bias, c) : 0.0f);
        if (glu) {
            const float b = ld_sum(acc, r * n + c + width, splits, stride) +
                            (has_bias ? ld(bias, c + width) : 0.0f);
            v = v * (1.0f / (1.0f + expf(-b)));
        } else {
            if (act >= 0) v = act_op(act, v);
            if (has_residual) v = ld(residual, i) + v * alpha;
        }
        st(y, i, v);
    }
}

FLOAT_KERNELS(linear_epilogue,
    (const float* acc, const float* bias, float* y, u64 m, u64 n, int has_bias, int act,
     float alpha, const float* residual, int has_residual, int glu, int splits, u64 stride),
    (const bf16_t* acc, const bf16_t* bias, bf16_t* y, u64 m, u64 n, int has_bias, int act,
     float alpha, const bf16_t* residual, int has_residual, int glu, int splits, u64 stride),
    (acc, bias, y, m, n, has_bias, act, alpha, residual, has_residual, glu, splits, stride))

// The epilogue when a layer norm of the result follows and reads nothing
// else's (batched streams' cuBLAS Linears: the residual stream, then the
// next sublayer's norm): a block per row and a thread per column (n <=
// 1024), so the row's statistics are two block sums. Writes y as
// linear_epilogue does, then z = norm(y) over the row (gamma, beta, eps),
// from y as stored, as the norm's own kernel would read it.
template <typename T>
__device__ void linear_epilogue_norm_impl(const T* acc, const T* bias, T* y, int n, int has_bias,
                                          int act, float alpha, const T* residual,
                                          int has_residual, const T* gamma, const T* beta,
                                          float eps, T* z, int splits, u64 stride) {
    __shared__ float red[32];
    const u64 row = (u64)blockIdx.x * n;
    const int c = threadIdx.x;
    float v = 0.0f;
    if (c < n) {
        v = ld_sum(acc, row + c, splits, stride) + (has_bias ? ld(bias, c) : 0.0f);
        if (act >= 0) v = act_op(act, v);
        if (has_residual) v = ld(residual, row + c) + v * alpha;
        st(y, row + c, v);
        v = ld(y, row + c);
    }
    const float inv_n = 1.0f / (float)n;
    const float mean = block_sum(v, red) * inv_n;
    const float d = c < n ? v - mean : 0.0f;
    const float var = block_sum(d * d, red) * inv_n;
    const float rstd = 1.0f / sqrtf(var + eps);
    if (c < n) st(z, row + c, d * rstd * ld(gamma, c) + ld(beta, c));
}

FLOAT_KERNELS(linear_epilogue_norm,
    (const float* acc, const float* bias, float* y, int n, int has_bias, int act, float alpha,
     const float* residual, int has_residual, const float* gamma, const float* beta, float eps,
     float* z, int splits, u64 stride),
    (const bf16_t* acc, const bf16_t* bias, bf16_t* y, int n, int has_bias, int act,
     float alpha, const bf16_t* residual, int has_residual, const bf16_t* gamma,
     const bf16_t* beta, float eps, bf16_t* z, int splits, u64 stride),
    (acc, bias, y, n, has_bias, act, alpha, residual, has_residual, gamma, beta, eps, z, splits,
     stride))
