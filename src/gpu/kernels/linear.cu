// Skinny Linear for chunk steps: y[m, n] = act(sum_k x[m, k] * w[n, k] + b[n])
// with few rows (m <= 16, a pulse's frames). One warp per output column n:
// its lanes stride along k, so the weight row is read once, coalesced, and
// x (a few KiB, shared by every warp) stays in cache. f32 accumulation;
// cuBLAS takes the large-m case (whole utterances). `act` is an
// elementwise.cu unary code, -1 for none; `bias` may be null.

#define MAX_ROWS 16

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

template <typename T>
__device__ void skinny_linear_impl(const T* x, const T* w, const T* bias, T* y, int m, int n,
                                   int k, int act) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= n) return;
    float acc[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.0f;
    const T* wr = w + (u64)warp * k;
    for (int i = lane; i < k; i += 32) {
        float wv = ld(wr, i);
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            if (r < m) acc[r] += wv * ld(x, (u64)r * k + i);
        }
    }
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
        if (r < m) {
            float v = acc[r];
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            acc[r] = v;
        }
    }
    if (lane < m) {
        float v = 0.0f;
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) if (r == lane) v = acc[r];
        if (bias) v += ld(bias, warp);
        st(y, (u64)lane * n + warp, act < 0 ? v : act_op(act, v));
    }
}

FLOAT_KERNELS(skinny_linear,
    (const float* x, const float* w, const float* bias, float* y, int m, int n, int k, int act),
    (const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, int m, int n, int k, int act),
    (x, w, bias, y, m, n, k, act))
