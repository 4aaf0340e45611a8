// Prelude prepended to every kernel module (see compile.rs): storage types,
// f32 <-> bf16 conversions and typed load/store (`ld`, `st`), so each kernel
// is written once as a template over its storage type and computes in f32;
// warp and block reductions; fused activations; the PDL entry.
//
// No headers: NVRTC needs no include path, and bf16 is converted by hand with
// round-to-nearest-even, exactly as the `half` crate does on the CPU.

typedef unsigned short bf16_t;
typedef unsigned long long u64;
typedef long long i64;

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

__device__ __forceinline__ float ld(const float* p, u64 i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16_t* p, u64 i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void st(float* p, u64 i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16_t* p, u64 i, float v) { p[i] = f32_to_bf16(v); }

#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); \
         i += (u64)blockDim.x * gridDim.x)

#define NEG_INF __int_as_float(0xff800000)

// Where a stream ends, in a pulsed op's frames, once its length `*stream_len`
// (in input samples, -1 while unknown) is known: the op's end Dim
// (ea * s + eb).div_euclid(ed) + ec (ed > 0); never while unknown or when
// `has_end` is 0.
__device__ __forceinline__ i64 stream_end(const i64* stream_len, int has_end, i64 ea, i64 eb,
                                          i64 ed, i64 ec) {
    const i64 s = *stream_len;
    if (!has_end || s < 0) return 0x7fffffffffffffffLL;
    const i64 num = ea * s + eb;
    i64 q = num / ed;
    if (num % ed < 0) q -= 1;
    return q + ec;
}

// Warp and block reductions, the one set every kernel uses. Lanes combine
// through __shfl_xor_sync at offsets 16, 8, 4, 2, 1, so every lane gets the
// result and the order of the operations is fixed (the same bits each run).
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Max where NaN wins (the CPU's Reduce Max, after PyTorch).
__device__ __forceinline__ float nan_max(float a, float b) {
    if (a != a) return a;
    if (b != b) return b;
    return fmaxf(a, b);
}
struct NanMaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return nan_max(a, b); }
};

// `op` over the 32 lanes of a (full) warp; every lane gets the result.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// `op` over one float per thread of the block (blockDim.x a multiple of 32,
// at most 1024); every thread gets the result. `scratch` holds 32 floats;
// `identity` fills the lanes past the last warp.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float* scratch, float identity, Op op) {
    v = warp_reduce(v, op);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? scratch[lane] : identity;
    return warp_reduce(v, op);
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp()); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, MaxOp()); }
__device__ __forceinline__ float warp_nan_max(float v) { return warp_reduce(v, NanMaxOp()); }
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    return block_reduce(v, scratch, 0.0f, SumOp());
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    return block_reduce(v, scratch, NEG_INF, MaxOp());
}
__device__ __forceinline__ float block_nan_max(float v, float* scratch) {
    return block_reduce(v, scratch, NEG_INF, NanMaxOp());
}

// A fused activation: an elementwise.cu unary code (5 relu, 6 sigmoid,
// 7 tanh, 8 silu, 9 gelu), anything else none.
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

// Every kernel calls this first. Launched with programmatic dependent launch
// (sm_90+), a kernel may start while its predecessor still runs: it waits
// here for that grid's completion and memory before touching any global
// memory (inputs it reads, buffers the predecessor may still read), then
// lets its own successor start launching. Without PDL both are no-ops.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Instantiates `extern "C"` entry points NAME_f32 and NAME_bf16 of a
// template kernel body `NAME##_impl<T>` taking PARAMS and forwarding ARGS.
#define FLOAT_KERNELS(NAME, PARAMS_F32, PARAMS_BF16, ARGS) \
    extern "C" __global__ void NAME##_f32 PARAMS_F32 { pdl_enter(); NAME##_impl<float> ARGS; } \
    extern "C" __global__ void NAME##_bf16 PARAMS_BF16 { pdl_enter(); NAME##_impl<bf16_t> ARGS; }
