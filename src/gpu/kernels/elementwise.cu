// Element-wise kernels over float storage (f32, or bf16 computed in f32).
//
// Binary ops broadcast trailing blocks: output element i meets a[i % na] and
// b[i % nb], where na and nb divide n (n: same shape; 1: a scalar; otherwise
// a vector over the innermost axes, like a bias). The op is a code (the
// `BIN_*` / `UN_*` numbers in gpu/ops/elementwise.rs) so one kernel serves
// every op; the switch is uniform across a launch and costs nothing next to
// the memory traffic. Same formulas as pulsed::ops on the CPU (expf, not
// __expf; erff for GELU).

__device__ __forceinline__ float bin_op(int code, float a, float b) {
    switch (code) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        case 3: return a / b;
        case 4: return fminf(a, b);
        case 5: return fmaxf(a, b);
        default: return powf(a, b);
    }
}

__device__ __forceinline__ float un_op(int code, float x) {
    switch (code) {
        case 0: return sqrtf(x);
        case 1: return expf(x);
        case 2: return logf(x);
        case 3: return fabsf(x);
        case 4: return -x;
        case 5: return fmaxf(x, 0.0f);
        case 6: return 1.0f / (1.0f + expf(-x));
        case 7: return tanhf(x);
        case 8: return x / (1.0f + expf(-x));
        case 9: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        case 10: return 1.0f / x;
        default: return x * x;
    }
}

template <typename T>
__device__ void binary_impl(const T* a, const T* b, T* out, u64 n, u64 na, u64 nb, int code) {
    GRID_STRIDE(i, n) { st(out, i, bin_op(code, ld(a, i % na), ld(b, i % nb))); }
}

template <typename T>
__device__ void unary_impl(const T* x, T* out, u64 n, int code) {
    GRID_STRIDE(i, n) { st(out, i, un_op(code, ld(x, i))); }
}

FLOAT_KERNELS(binary,
    (const float* a, const float* b, float* out, u64 n, u64 na, u64 nb, int code),
    (const bf16_t* a, const bf16_t* b, bf16_t* out, u64 n, u64 na, u64 nb, int code),
    (a, b, out, n, na, nb, code))
FLOAT_KERNELS(unary,
    (const float* x, float* out, u64 n, int code),
    (const bf16_t* x, bf16_t* out, u64 n, int code),
    (x, out, n, code))
