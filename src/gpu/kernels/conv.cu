// Convolutions (pulsed::ops::conv): Conv1d in both layouts, Conv2d
// channels-first. Zero padding is read as zeros (no padded copy); every sum
// is accumulated in f32.
//
// At the streaming sizes (8-16 output frames, K = Cin/groups * k of 240-768)
// a dense 1-D convolution is a few million multiply-adds: too little work to
// fill the GPU one output per thread, too much latency for one block. So the
// dense kernel is an implicit GEMM with the reduction spread over lanes and
// warps: a block owns a 4 output channels x `tq` frames tile, each of its
// `blockDim.x / 32` warps takes an interleaved share of the K taps (lanes on
// consecutive taps, so weight rows are read coalesced), and the partial sums
// meet through warp shuffles and shared memory.

#define DENSE_OW 4   // output channels per block
#define DENSE_TQ 8   // most frames per block (the runtime `tq` is 1, 2, 4 or 8)
#define DENSE_MAX_WARPS 8

// One halving step of the reduce-scatter below: lanes with bit H set keep
// values H..2H-1, the others 0..H-1, each summed with its partner lane's.
template <int H>
__device__ __forceinline__ void scatter_step(float* v, int lane) {
    const bool upper = (lane & H) != 0;
#pragma unroll
    for (int i = 0; i < H; i++) {
        float keep = upper ? v[i + H] : v[i];
        float send = upper ? v[i] : v[i + H];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, H);
    }
}

// Reduce-scatter of 32 per-lane values over the warp: lane l ends with the
// warp-wide sum of v[l] (31 shuffles instead of 32 x 5).
__device__ __forceinline__ float warp_reduce_scatter32(float* v) {
    const int lane = threadIdx.x & 31;
    scatter_step<16>(v, lane);
    scatter_step<8>(v, lane);
    scatter_step<4>(v, lane);
    scatter_step<2>(v, lane);
    scatter_step<1>(v, lane);
    return v[0];
}

// y[n, o, t] (layout as x) = bias[o] + sum_{ci, j} w[o, ci, j] * x[n, g*cg + ci, t*stride + j*dil - pad0]
// for o in group g. Grid: one block per (n, g, output-channel tile, frame tile),
// frame tile fastest so that neighbouring blocks share weight rows.
template <typename T>
__device__ void conv1d_dense_impl(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ bias, T* __restrict__ y, int c, int t_in,
                                  int o, int t_out, int groups, int k, int stride, int dil,
                                  int pad0, int last, int tq, int act) {
    __shared__ float red[DENSE_MAX_WARPS][32];
    const int cg = c / groups, og = o / groups, kk_n = cg * k;
    const int o_tiles = (og + DENSE_OW - 1) / DENSE_OW, t_tiles = (t_out + tq - 1) / tq;
    u64 b = blockIdx.x;
    const int ti = (int)(b % t_tiles);
    b /= t_tiles;
    const int oi = (int)(b % o_tiles);
    b /= o_tiles;
    const int g = (int)(b % groups);
    const u64 n = b / groups;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int t0 = ti * tq, o0 = oi * DENSE_OW;

    const T* xn = x + n * (u64)c * t_in;
    // tap kk = ci * k + j (the weight's own order), moved on by `step` per
    // round without dividing
    const int step = nwarps * 32;
    const int dq = step / k, dr = step % k;
    int kk = warp * 32 + lane;
    int ci = kk / k, j = kk - ci * k;

    float acc[DENSE_OW][DENSE_TQ];
#pragma unroll
    for (int a = 0; a < DENSE_OW; a++)
#pragma unroll
        for (int q = 0; q < DENSE_TQ; q++) acc[a][q] = 0.0f;

    for (; kk < kk_n; kk += step) {
        float wv[DENSE_OW], xv[DENSE_TQ];
#pragma unroll
        for (int a = 0; a < DENSE_OW; a++) {
            int oc = o0 + a;
            wv[a] = oc < og ? ld(w, (u64)(g * og + oc) * kk_n + kk) : 0.0f;
        }
        const int ch = g * cg + ci;
#pragma unroll
        for (int q = 0; q < DENSE_TQ; q++) {
            int ts = (t0 + q) * stride + j * dil - pad0;
            bool ok = q < tq && t0 + q < t_out && ts >= 0 && ts < t_in;
            xv[q] = ok ? ld(xn, last ? (u64)ts * c + ch : (u64)ch * t_in + ts) : 0.0f;
        }
#pragma unroll
        for (int a = 0; a < DENSE_OW; a++)
#pragma unroll
            for (int q = 0; q < DENSE_TQ; q++) acc[a][q] = fmaf(wv[a], xv[q], acc[a][q]);
        j += dr;
        ci += dq;
        if (j >= k) {
            j -= k;
            ci++;
        }
    }

    float v[32];
#pragma unroll
    for (int a = 0; a < DENSE_OW; a++)
#pragma unroll
        for (int q = 0; q < DENSE_TQ; q++) v[a * DENSE_TQ + q] = acc[a][q];
    red[warp][lane] = warp_reduce_scatter32(v);
    __syncthreads();
    if (warp == 0) {
        float s = 0.0f;
        for (int i = 0; i < nwarps; i++) s += red[i][lane];
        const int a = lane / DENSE_TQ, q = lane % DENSE_TQ;
        const int oc = o0 + a, t = t0 + q;
        if (q < tq && oc < og && t < t_out) {
            const int och = g * og + oc;
            if (bias) s += ld(bias, och);
            if (act >= 0) s = act_op(act, s);
            st(y, n * (u64)o * t_out + (last ? (u64)t * o + och : (u64)och * t_out + t), s);
        }
    }
}

// A fused input Delay's rings ([2][nb][ring][c], time-major): returns this
// step's ring (`step & 1`) and writes the next step's, the window's last
// `ring` frames (window = ring ++ the t_new frames of x), spread over the
// whole grid.
template <typename T>
__device__ const T* advance_ring(const T* __restrict__ x, T* rings, const u64* step,
                                 unsigned nb, int ring, int c, int t_new) {
    const u64 s = *step;
    const unsigned len = nb * ring * c;
    const T* src = rings + (s & 1) * len;
    T* dst = rings + ((s + 1) & 1) * len;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += blockDim.x * gridDim.x) {
        const unsigned ch = i % c, r = i / c;
        const unsigned j = r % ring, n = r / ring;
        const int ts = t_new + (int)j;
        dst[i] = ts < ring ? src[(n * ring + ts) * c + ch] : x[(n * t_new + ts - ring) * c + ch];
    }
    return src;
}

// Many frames (batched streams): a dense, ungrouped, time-major Conv1d as a
// GEMM, which the host runs through cuBLAS on the columns written here,
// cols [n * t_out, c * k] in the weight's tap order (ci * k + j), zero where
// a tap falls in the padding; bias and activation follow in linear.cu's
// epilogue.
template <typename T>
__device__ void conv1d_im2col_impl(const T* __restrict__ x, T* __restrict__ cols, u64 rows,
                                   int c, int t_in, int t_out, int k, int stride, int dil,
                                   int pad0) {
    const int ck = c * k;
    GRID_STRIDE(i, rows * ck) {
        const int tap = (int)(i % ck);
        const u64 r = i / ck;
        const int ci = tap / k, j = tap - ci * k;
        const int t = (int)(r % t_out);
        const u64 n = r / t_out;
        const int ts = t * stride + j * dil - pad0;
        st(cols, i, ts >= 0 && ts < t_in ? ld(x, (n * t_in + ts) * (u64)c + ci) : 0.0f);
    }
}

// Depthwise (groups == C == O): one thread per output; consecutive threads on
// consecutive channels (time-major) or frames (channels-first).
//
// With its input's Delay fused (`ring` > 0, time-major only): x holds this
// pulse's t_in - ring new frames, and frame ts < ring of the window comes
// from ring `step & 1` of `rings` ([2][N][ring][C], as the Delay kernel's);
// the threads also write ring `(step + 1) & 1`, the window's last `ring`
// frames, for the next step.
template <typename T>
__device__ void conv1d_depthwise_impl(const T* __restrict__ x, const T* __restrict__ w,
                                      const T* __restrict__ bias, T* __restrict__ y, u64 n_out,
                                      int c, int t_in, int t_out, int k, int stride, int dil,
                                      int pad0, int last, int act, T* rings, int ring,
                                      const u64* step) {
    // the host keeps n_out and the rings under 2^31: 32-bit index arithmetic
    const int t_new = t_in - ring;
    const T* src =
        ring > 0 ? advance_ring(x, rings, step, (unsigned)(n_out / ((u64)t_out * c)), ring, c, t_new)
                 : 0;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n_out;
         i += blockDim.x * gridDim.x) {
        int ch, t;
        u64 n, xrow;
        if (last) {
            ch = (int)(i % c);
            unsigned r = i / c;
            t = (int)(r % t_out);
            n = r / t_out;
        } else {
            t = (int)(i % t_out);
            unsigned r = i / t_out;
            ch = (int)(r % c);
            n = r / c;
        }
        xrow = last ? n * (u64)t_new * c + ch : (n * c + ch) * (u64)t_in;
        const u64 tstep = last ? (u64)c : 1;
        float s = bias ? ld(bias, ch) : 0.0f;
        const int base = t * stride - pad0;
        for (int jj = 0; jj < k; jj++) {
            int ts = base + jj * dil;
            if (ts < 0 || ts >= t_in) continue;
            const float xv = ts < ring ? ld(src, (n * ring + ts) * c + ch)
                                       : ld(x, xrow + (ts - ring) * tstep);
            s = fmaf(ld(w, (u64)ch * k + jj), xv, s);
        }
        if (act >= 0) s = act_op(act, s);
        st(y, i, s);
    }
}

// A time-major depthwise Conv1d followed by a layer norm over the channels
// (gamma, beta, eps) and an activation (`act`, -1 none): a block per output
// frame and a thread per channel (blockDim.x >= c, a multiple of 32), so the
// frame's statistics are two block sums and the convolution's own output is
// never stored. Its arguments are conv1d_depthwise's (`last` is always 1)
// followed by the norm's; rings and x as there.
template <typename T>
__device__ void conv1d_depthwise_norm_impl(const T* __restrict__ x, const T* __restrict__ w,
                                           const T* __restrict__ bias, T* __restrict__ y,
                                           u64 n_out, int c, int t_in, int t_out, int k,
                                           int stride, int dil, int pad0, int act, T* rings,
                                           int ring, const u64* step, const T* gamma,
                                           const T* beta, float eps) {
    __shared__ float red[32];
    const unsigned rows = (unsigned)(n_out / c);
    const int t_new = t_in - ring;
    const T* src =
        ring > 0 ? advance_ring(x, rings, step, rows / t_out, ring, c, t_new) : 0;
    const int row = blockIdx.x, ch = threadIdx.x;
    const int t = row % t_out, n = row / t_out;
    float v = 0.0f;
    if (ch < c) {
        v = bias ? ld(bias, ch) : 0.0f;
        const int base = t * stride - pad0;
        for (int jj = 0; jj < k; jj++) {
            const int ts = base + jj * dil;
            if (ts < 0 || ts >= t_in) continue;
            const float xv = ts < ring ? ld(src, (n * ring + ts) * c + ch)
                                       : ld(x, (n * t_new + ts - ring) * c + ch);
            v = fmaf(ld(w, ch * k + jj), xv, v);
        }
    }
    const float inv_c = 1.0f / (float)c;
    const float mean = block_sum(v, red) * inv_c;
    const float d = ch < c ? v - mean : 0.0f;
    const float var = block_sum(d * d, red) * inv_c;
    const float rstd = 1.0f / sqrtf(var + eps);
    if (ch < c) st(y, row * c + ch, act_op(act, d * rstd * ld(gamma, ch) + ld(beta, ch)));
}

// Conv2d, channels-first x [N, C, H, W], w [O, C/groups, kh, kw]: one thread
// per output, taps read directly (no model streams a 2-D convolution).
template <typename T>
__device__ void conv2d_direct_impl(const T* __restrict__ x, const T* __restrict__ w,
                                   const T* __restrict__ bias, T* __restrict__ y, u64 n_out, int c,
                                   int h, int wd, int o, int ho_n, int wo_n, int groups, int kh,
                                   int kw, int sh, int sw, int dh, int dw, int ph, int pw) {
    const int cg = c / groups, og = o / groups;
    GRID_STRIDE(i, n_out) {
        const int wo = (int)(i % wo_n);
        u64 r = i / wo_n;
        const int ho = (int)(r % ho_n);
        r /= ho_n;
        const int oc = (int)(r % o);
        const u64 n = r / o;
        const int g = oc / og;
        float s = bias ? ld(bias, oc) : 0.0f;
        for (int ci = 0; ci < cg; ci++) {
            const u64 xc = (n * c + g * cg + ci) * (u64)h * wd;
            const u64 wc = ((u64)oc * cg + ci) * kh * kw;
            for (int a = 0; a < kh; a++) {
                int hi = ho * sh + a * dh - ph;
                if (hi < 0 || hi >= h) continue;
                for (int bb = 0; bb < kw; bb++) {
                    int wi = wo * sw + bb * dw - pw;
                    if (wi < 0 || wi >= wd) continue;
                    s = fmaf(ld(w, wc + a * kw + bb), ld(x, xc + (u64)hi * wd + wi), s);
                }
            }
        }
        st(y, i, s);
    }
}

FLOAT_KERNELS(conv1d_dense,
    (const float* x, const float* w, const float* bias, float* y, int c, int t_in, int o,
     int t_out, int groups, int k, int stride, int dil, int pad0, int last, int tq, int act),
    (const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, int c, int t_in, int o,
     int t_out, int groups, int k, int stride, int dil, int pad0, int last, int tq, int act),
    (x, w, bias, y, c, t_in, o, t_out, groups, k, stride, dil, pad0, last, tq, act))
FLOAT_KERNELS(conv1d_im2col,
    (const float* x, float* cols, u64 rows, int c, int t_in, int t_out, int k, int stride,
     int dil, int pad0),
    (const bf16_t* x, bf16_t* cols, u64 rows, int c, int t_in, int t_out, int k, int stride,
     int dil, int pad0),
    (x, cols, rows, c, t_in, t_out, k, stride, dil, pad0))
FLOAT_KERNELS(conv1d_depthwise,
    (const float* x, const float* w, const float* bias, float* y, u64 n_out, int c, int t_in,
     int t_out, int k, int stride, int dil, int pad0, int last, int act, float* rings, int ring,
     const u64* step),
    (const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, u64 n_out, int c,
     int t_in, int t_out, int k, int stride, int dil, int pad0, int last, int act,
     bf16_t* rings, int ring, const u64* step),
    (x, w, bias, y, n_out, c, t_in, t_out, k, stride, dil, pad0, last, act, rings, ring, step))
FLOAT_KERNELS(conv1d_depthwise_norm,
    (const float* x, const float* w, const float* bias, float* y, u64 n_out, int c, int t_in,
     int t_out, int k, int stride, int dil, int pad0, int last, int act, float* rings, int ring,
     const u64* step, const float* gamma, const float* beta, float eps),
    (const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, u64 n_out, int c,
     int t_in, int t_out, int k, int stride, int dil, int pad0, int last, int act,
     bf16_t* rings, int ring, const u64* step, const bf16_t* gamma, const bf16_t* beta,
     float eps),
    (x, w, bias, y, n_out, c, t_in, t_out, k, stride, dil, pad0, act, rings, ring, step, gamma,
     beta, eps))
FLOAT_KERNELS(conv2d_direct,
    (const float* x, const float* w, const float* bias, float* y, u64 n_out, int c, int h,
     int wd, int o, int ho_n, int wo_n, int groups, int kh, int kw, int sh, int sw, int dh,
     int dw, int ph, int pw),
    (const bf16_t* x, const bf16_t* w, const bf16_t* bias, bf16_t* y, u64 n_out, int c, int h,
     int wd, int o, int ho_n, int wo_n, int groups, int kh, int kw, int sh, int sw, int dh,
     int dw, int ph, int pw),
    (x, w, bias, y, n_out, c, h, wd, o, ho_n, wo_n, groups, kh, kw, sh, sw, dh, dw, ph, pw))
