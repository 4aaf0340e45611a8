// The spectral front end (pulsed::ops::stft, pulsed::ops::mel): STFT as a
// direct DFT, the log-mel projection and ln(x + eps).
//
// The STFT needs no FFT at these sizes (32 frames x 201 bins x 400 samples a
// chunk): a block takes one frame (or four, for many streams) and 32 bins
// (one per lane), its warps split the samples, and the twiddles come from a
// per-block table of
// e^{-2 pi i m / n_fft}, m = k*n reduced mod n_fft in integers, each entry
// computed in double and rounded once (as rustfft's twiddles are).

#define STFT_WARPS 8
#define STFT_GROUP 4  // frames of a block in stft4

// Table index of m, skewed by one bank per 32 entries: lanes on consecutive
// bins read entries m, m + n, m + 2n, ... which, unskewed, pile onto a few
// banks when n shares factors with 32.
__device__ __forceinline__ int tw_at(int m) { return m + (m >> 5); }

// y[b, t, k] for k < bins: power (mode 2), magnitude (1) or (re, im) (0) of
// sum_n x[b, t*hop + n - pad] * win[n] * e^{-2 pi i k n / n_fft}, the signal
// reflected at its ends (one reflection; pad < s is checked at build).
//
// A block takes F consecutive frames of all streams' (rows = batch *
// frames): each twiddle read then serves F frames, which matters once the
// GPU is full of blocks (many streams), where the loop's instructions are
// the limit. Every frame's sum runs in the same order whatever F, so the
// results do not depend on it.
template <typename T, int F>
__device__ void stft_rows_impl(const T* __restrict__ x, const T* __restrict__ win,
                               T* __restrict__ y, int s, int frames, int n_fft, int hop, int pad,
                               int bins, int mode, u64 rows) {
    extern __shared__ float sm[];
    __shared__ float red_re[STFT_WARPS][F][32], red_im[STFT_WARPS][F][32];
    const int tw_len = tw_at(n_fft - 1) + 1;
    float* fr = sm;
    float* cs = fr + F * n_fft;
    float* sn = cs + tw_len;
    const int bin_tiles = (bins + 31) / 32;
    const int bt = (int)(blockIdx.x % bin_tiles);
    const u64 r0 = (u64)(blockIdx.x / bin_tiles) * F;
    const int last = s - 1;
    for (int i = threadIdx.x; i < F * n_fft; i += blockDim.x) {
        const int q = i / n_fft, n = i - q * n_fft;
        const u64 r = r0 + q;
        float v = 0.0f;
        if (r < rows) {
            const int t = (int)(r % frames);
            const u64 b = r / frames;
            int src = t * hop - pad + n;
            if (src < 0) src = -src;
            else if (src > last) src = 2 * last - src;
            v = ld(x, b * (u64)s + src) * ld(win, n);
        }
        fr[i] = v;
    }
    for (int i = threadIdx.x; i < n_fft; i += blockDim.x) {
        double sd, cd;
        sincospi(2.0 * (double)i / (double)n_fft, &sd, &cd);
        cs[tw_at(i)] = (float)cd;
        sn[tw_at(i)] = (float)sd;
    }
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int k = bt * 32 + lane;
    const int per = (n_fft + STFT_WARPS - 1) / STFT_WARPS;
    const int n0 = min(n_fft, warp * per), n1 = min(n_fft, n0 + per);
    float re[F], im[F];
#pragma unroll
    for (int q = 0; q < F; q++) re[q] = im[q] = 0.0f;
    if (k < bins) {
        int m = (int)(((long long)k * n0) % n_fft);
#pragma unroll 4
        for (int n = n0; n < n1; n++) {
            const int a = tw_at(m);
            const float c = cs[a], sv = sn[a];
#pragma unroll
            for (int q = 0; q < F; q++) {
                const float v = fr[q * n_fft + n];
                re[q] = fmaf(v, c, re[q]);
                im[q] = fmaf(v, sv, im[q]);
            }
            m += k;
            if (m >= n_fft) m -= n_fft;
        }
    }
#pragma unroll
    for (int q = 0; q < F; q++) {
        red_re[warp][q][lane] = re[q];
        red_im[warp][q][lane] = -im[q];
    }
    __syncthreads();
    // warp q sums frame q's partials, in warp order
    if (warp < F && k < bins && r0 + warp < rows) {
        float r = 0.0f, i = 0.0f;
#pragma unroll
        for (int w = 0; w < STFT_WARPS; w++) {
            r += red_re[w][warp][lane];
            i += red_im[w][warp][lane];
        }
        const u64 row = (r0 + warp) * (u64)bins + k;
        if (mode == 0) {
            st(y, 2 * row, r);
            st(y, 2 * row + 1, i);
        } else {
            const float p = r * r + i * i;
            st(y, row, mode == 1 ? sqrtf(p) : p);
        }
    }
}

template <typename T>
__device__ void stft_impl(const T* x, const T* win, T* y, int s, int frames, int n_fft, int hop,
                          int pad, int bins, int mode, u64 rows) {
    stft_rows_impl<T, 1>(x, win, y, s, frames, n_fft, hop, pad, bins, mode, rows);
}

template <typename T>
__device__ void stft4_impl(const T* x, const T* win, T* y, int s, int frames, int n_fft,
                           int hop, int pad, int bins, int mode, u64 rows) {
    stft_rows_impl<T, STFT_GROUP>(x, win, y, s, frames, n_fft, hop, pad, bins, mode, rows);
}

#define MEL_ROWS 4
#define MEL_WARPS 8

// y[r, m] = ln(sum_k p[r, k] * fb[k, m] + eps): a block takes MEL_ROWS rows
// and 32 mels (one per lane); its warps split the bins and meet in shared
// memory.
template <typename T>
__device__ void logmel_impl(const T* __restrict__ p, const T* __restrict__ fb,
                            T* __restrict__ y, u64 rows, int bins, int mels, float eps,
                            const T* __restrict__ sub, const T* __restrict__ mul,
                            int has_affine) {
    __shared__ float red[MEL_WARPS][MEL_ROWS][32];
    const int mel_tiles = (mels + 31) / 32;
    const int mt = (int)(blockIdx.x % mel_tiles);
    const u64 r0 = (u64)(blockIdx.x / mel_tiles) * MEL_ROWS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int m = mt * 32 + lane;
    float acc[MEL_ROWS];
#pragma unroll
    for (int q = 0; q < MEL_ROWS; q++) acc[q] = 0.0f;
    if (m < mels) {
#pragma unroll 2
        for (int k = warp; k < bins; k += MEL_WARPS) {
            const float f = ld(fb, (u64)k * mels + m);
#pragma unroll
            for (int q = 0; q < MEL_ROWS; q++) {
                if (r0 + q < rows) acc[q] = fmaf(ld(p, (r0 + q) * bins + k), f, acc[q]);
            }
        }
    }
#pragma unroll
    for (int q = 0; q < MEL_ROWS; q++) red[warp][q][lane] = acc[q];
    __syncthreads();
    if (warp < MEL_ROWS && m < mels && r0 + warp < rows) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < MEL_WARPS; w++) s += red[w][warp][lane];
        float v = logf(s + eps);
        // a fused feature normalisation: (log-mel - mean) * inv_std
        if (has_affine) v = (v - ld(sub, m)) * ld(mul, m);
        st(y, (r0 + warp) * mels + m, v);
    }
}

template <typename T>
__device__ void log_eps_impl(const T* __restrict__ x, T* __restrict__ y, u64 n, float eps) {
    GRID_STRIDE(i, n) { st(y, i, logf(ld(x, i) + eps)); }
}

FLOAT_KERNELS(stft,
    (const float* x, const float* win, float* y, int s, int frames, int n_fft, int hop, int pad,
     int bins, int mode, u64 rows),
    (const bf16_t* x, const bf16_t* win, bf16_t* y, int s, int frames, int n_fft, int hop,
     int pad, int bins, int mode, u64 rows),
    (x, win, y, s, frames, n_fft, hop, pad, bins, mode, rows))
FLOAT_KERNELS(stft4,
    (const float* x, const float* win, float* y, int s, int frames, int n_fft, int hop, int pad,
     int bins, int mode, u64 rows),
    (const bf16_t* x, const bf16_t* win, bf16_t* y, int s, int frames, int n_fft, int hop,
     int pad, int bins, int mode, u64 rows),
    (x, win, y, s, frames, n_fft, hop, pad, bins, mode, rows))
FLOAT_KERNELS(logmel,
    (const float* p, const float* fb, float* y, u64 rows, int bins, int mels, float eps,
     const float* sub, const float* mul, int has_affine),
    (const bf16_t* p, const bf16_t* fb, bf16_t* y, u64 rows, int bins, int mels, float eps,
     const bf16_t* sub, const bf16_t* mul, int has_affine),
    (p, fb, y, rows, bins, mels, eps, sub, mul, has_affine))
FLOAT_KERNELS(log_eps,
    (const float* x, float* y, u64 n, float eps),
    (const bf16_t* x, bf16_t* y, u64 n, float eps),
    (x, y, n, eps))
