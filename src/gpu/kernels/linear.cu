// Skinny Linear for chunk steps: y[m, n] = act(sum_k x[m, k] * w[n, k] + b[n])
// with few rows (m <= 16, a pulse's frames). Lanes stride along k, so each
// weight row is read once, coalesced, and x (a few KiB, shared by every
// warp) stays in cache. f32 accumulation;
// cuBLAS takes the large-m case (whole utterances). `act` is an
// elementwise.cu unary code, -1 for none; without a bias, `has_bias` is 0
// and `bias` any valid address.

__device__ __forceinline__ float act_op(int code, float x) {
    switch (code) {
        case 5: return fmaxf(x, 0.0f);
        case 6: return 1.0f / (1.0f + expf(-x));
        case 7: return tanhf(x);
        case 8: return x / (1.0f + expf(-x));
        case 9: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        default: return x;
    }
}

// A block of 8 warps takes 8 / wpc columns; the `wpc` warps of a column
// split k, so even a 256-column layer fills the GPU and each warp's chain
// of dependent loads stays short (at these sizes the kernel is bound by
// latency, not bandwidth). R, the row bound, is a compile-time constant so
// the per-row accumulators stay in registers and the loads of a k step can
// all be in flight together.
template <typename T, int R>
__device__ void skinny_linear_impl(const T* x, const T* w, const T* bias, T* y, int m, int n,
                                   int k, int act, int has_bias, int wpc, float alpha,
                                   const T* residual, int has_residual) {
    __shared__ float part[8][R];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int cols = 8 / wpc;
    int col = blockIdx.x * cols + warp / wpc;
    int slice = warp % wpc;
    int per = (k + wpc - 1) / wpc;
    int k0 = slice * per, k1 = min(k, k0 + per);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    if (col < n) {
        const T* wr = w + (u64)col * k;
#pragma unroll 2
        for (int i = k0 + lane; i < k1; i += 32) {
            float wv = ld(wr, i);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r < m) acc[r] += wv * ld(x, (u64)r * k + i);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) part[warp][r] = v;
    }
    __syncthreads();
    int t = threadIdx.x;
    if (t < cols * m) {
        int c = t / m, r = t % m;
        int oc = blockIdx.x * cols + c;
        if (oc < n) {
            float v = 0.0f;
            for (int s2 = 0; s2 < wpc; ++s2) v += part[c * wpc + s2][r];
            if (has_bias) v += ld(bias, oc);
            if (act >= 0) v = act_op(act, v);
            // a fused `residual + v * alpha` (the graph's Mul and Add, same order)
            if (has_residual) v = ld(residual, (u64)r * n + oc) + v * alpha;
            st(y, (u64)r * n + oc, v);
        }
    }
}

#define SKINNY(R)                                                                           \
    extern "C" __global__ void skinny_linear_r##R##_f32(                                   \
        const float* x, const float* w, const float* bias, float* y, int m, int n, int k,  \
        int act, int has_bias, int wpc, float alpha, const float* residual,                 \
        int has_residual) {                                                                 \
        skinny_linear_impl<float, R>(x, w, bias, y, m, n, k, act, has_bias, wpc, alpha,     \
                                     residual, has_residual);                               \
    }                                                                                       \
    extern "C" __global__ void skinny_linear_r##R##_bf16(                                  \
        const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, int m, int n,     \
        int k, int act, int has_bias, int wpc, float alpha, const bf16_t* residual,         \
        int has_residual) {                                                                 \
        skinny_linear_impl<bf16_t, R>(x, w, bias, y, m, n, k, act, has_bias, wpc, alpha,    \
                                      residual, has_residual);                              \
    }

SKINNY(1)
SKINNY(2)
SKINNY(4)
SKINNY(8)
SKINNY(16)
