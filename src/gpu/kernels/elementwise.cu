// Element-wise kernels: f32 and bf16 (stored as raw bits, computed in f32).
//
// Binary ops broadcast a trailing vector: `b` has `nb` elements, `nb` divides
// `n`, and element i of `a` meets element i % nb of `b` (nb == n: same shape;
// nb == 1: a scalar; otherwise a vector over the innermost axes, like a bias).
// Every kernel is a grid-stride loop, so any launch size covers any `n`.
//
// No headers: NVRTC needs no include path, and bf16 is converted by hand with
// round-to-nearest-even, exactly as the `half` crate does on the CPU.

typedef unsigned short bf16_t;

__device__ __forceinline__ float bf16_to_f32(bf16_t h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (bf16_t)((u >> 16) | 0x0040u);  // quiet NaN, sign kept
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float load_f32(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void store_f32(float* p, unsigned long long i, float v) { p[i] = v; }
__device__ __forceinline__ float load_bf16(const bf16_t* p, unsigned long long i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void store_bf16(bf16_t* p, unsigned long long i, float v) { p[i] = f32_to_bf16(v); }

__device__ __forceinline__ float op_add(float a, float b) { return a + b; }
__device__ __forceinline__ float op_mul(float a, float b) { return a * b; }
// Same formulas as pulsed::ops::Unary on the CPU (expf, not __expf).
__device__ __forceinline__ float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float op_silu(float x) { return x / (1.0f + expf(-x)); }

#define GRID_STRIDE(i, n) \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)

#define BINARY(NAME, OP, T, SUFFIX)                                              \
    extern "C" __global__ void NAME##_##SUFFIX(const T* a, const T* b, T* out,  \
                                               unsigned long long n,             \
                                               unsigned long long nb) {          \
        GRID_STRIDE(i, n) {                                                      \
            store_##SUFFIX(out, i, OP(load_##SUFFIX(a, i), load_##SUFFIX(b, i % nb))); \
        }                                                                        \
    }

#define UNARY(NAME, OP, T, SUFFIX)                                               \
    extern "C" __global__ void NAME##_##SUFFIX(const T* x, T* out,              \
                                               unsigned long long n) {           \
        GRID_STRIDE(i, n) { store_##SUFFIX(out, i, OP(load_##SUFFIX(x, i))); }   \
    }

BINARY(add, op_add, float, f32)
BINARY(mul, op_mul, float, f32)
BINARY(add, op_add, bf16_t, bf16)
BINARY(mul, op_mul, bf16_t, bf16)
UNARY(sigmoid, op_sigmoid, float, f32)
UNARY(silu, op_silu, float, f32)
UNARY(sigmoid, op_sigmoid, bf16_t, bf16)
UNARY(silu, op_silu, bf16_t, bf16)
