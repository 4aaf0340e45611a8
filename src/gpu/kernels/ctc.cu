// The fused CTC head: per frame, logits l_k = x . w_k + b_k over the
// vocabulary, reduced on the fly to log-sum-exp and the first arg-max, so the
// [T, V] logits never reach global memory.
//
// A block takes CTC_FRAMES frames (their features staged in shared memory as
// f32) and its warps (up to 16: a token or two each for a small vocabulary)
// share out the vocabulary: warp j computes the logits of
// tokens j, j + warps, ... for all its frames at once (each weight row is
// read once per block, coalesced), keeping per frame the CPU's online state
// (max m, sum s of exp(l - m), best token and logit). Thread f then merges
// the warps' states for frame f in warp order (ties: the lower token id).

#define CTC_FRAMES 4
#define CTC_MAX_WARPS 32

// x [t, d], w [v, d], b [v]; score mode (targets non-null, ids already
// validated on the host): logp[f] = l_{targets[f]} - lse. Greedy mode:
// best_id[f] = first arg-max, logp[f] = l_best - lse. Dynamic shared memory:
// CTC_FRAMES * d floats.
template <typename T>
__device__ void ctc_head_impl(const T* x, const T* w, const T* b, const i64* targets,
                              i64* best_id, T* logp, u64 t, u64 d, u64 v) {
    extern __shared__ float xs[];
    __shared__ float wm[CTC_MAX_WARPS][CTC_FRAMES];
    __shared__ float wsum[CTC_MAX_WARPS][CTC_FRAMES];
    __shared__ float wl[CTC_MAX_WARPS][CTC_FRAMES];
    __shared__ u64 wk[CTC_MAX_WARPS][CTC_FRAMES];
    __shared__ float target_l[CTC_FRAMES];

    u64 f0 = (u64)blockIdx.x * CTC_FRAMES;
    int nf = (int)(t - f0 < CTC_FRAMES ? t - f0 : CTC_FRAMES);
    for (u64 i = threadIdx.x; i < (u64)CTC_FRAMES * d; i += blockDim.x) {
        u64 f = i / d;
        xs[i] = f < (u64)nf ? ld(x, (f0 + f) * d + i % d) : 0.0f;
    }
    if (threadIdx.x < CTC_FRAMES) target_l[threadIdx.x] = NEG_INF;
    __syncthreads();

    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    i64 tgt[CTC_FRAMES];
    float m[CTC_FRAMES], s[CTC_FRAMES], best_l[CTC_FRAMES];
    u64 best[CTC_FRAMES];
#pragma unroll
    for (int f = 0; f < CTC_FRAMES; f++) {
        m[f] = NEG_INF;
        s[f] = 0.0f;
        best_l[f] = NEG_INF;
        best[f] = 0;
        tgt[f] = (targets && f < nf) ? targets[f0 + f] : -1;
    }
    for (u64 k = warp; k < v; k += warps) {
        const T* wr = w + k * d;
        float acc[CTC_FRAMES];
#pragma unroll
        for (int f = 0; f < CTC_FRAMES; f++) acc[f] = 0.0f;
#pragma unroll 8
        for (int i = lane; i < (int)d; i += 32) {
            float wv = ld(wr, i);
#pragma unroll
            for (int f = 0; f < CTC_FRAMES; f++) acc[f] += xs[f * d + i] * wv;
        }
        float bk = ld(b, k);
#pragma unroll
        for (int f = 0; f < CTC_FRAMES; f++) {
            float l = warp_sum(acc[f]) + bk;
            if (l > best_l[f]) {
                best_l[f] = l;
                best[f] = k;
            }
            if (l > m[f]) {
                s[f] = s[f] * expf(m[f] - l) + 1.0f;
                m[f] = l;
            } else {
                s[f] += expf(l - m[f]);
            }
            if (tgt[f] == (i64)k && lane == 0) target_l[f] = l;
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int f = 0; f < CTC_FRAMES; f++) {
            wm[warp][f] = m[f];
            wsum[warp][f] = s[f];
            wl[warp][f] = best_l[f];
            wk[warp][f] = best[f];
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < nf) {
        int f = threadIdx.x;
        float mm = NEG_INF;
        for (int j = 0; j < warps; j++) mm = fmaxf(mm, wm[j][f]);
        float ss = 0.0f, bl = NEG_INF;
        u64 bi = 0;
        for (int j = 0; j < warps; j++) {
            if (wsum[j][f] > 0.0f) ss += wsum[j][f] * expf(wm[j][f] - mm);
            if (wl[j][f] > bl || (wl[j][f] == bl && wk[j][f] < bi)) {
                bl = wl[j][f];
                bi = wk[j][f];
            }
        }
        float lse = mm + logf(ss);
        if (targets) {
            st(logp, f0 + f, target_l[f] - lse);
        } else {
            best_id[f0 + f] = (i64)bi;
            st(logp, f0 + f, bl - lse);
        }
    }
}

FLOAT_KERNELS(ctc_head,
    (const float* x, const float* w, const float* b, const i64* targets, i64* best_id,
     float* logp, u64 t, u64 d, u64 v),
    (const bf16_t* x, const bf16_t* w, const bf16_t* b, const i64* targets, i64* best_id,
     bf16_t* logp, u64 t, u64 d, u64 v),
    (x, w, b, targets, best_id, logp, t, d, v))
