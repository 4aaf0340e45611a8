// TopTokens (ops/top_tokens.rs, `choose_row`): one block per row of a
// decoder step's logits. The row's rules (ranges disabled, the first-step
// list, the timestamp check) are applied on the fly as the row is read, the
// log-softmax shift is a max and a sum of exponentials (accumulated in
// double, as the host does), and the k best entries come out one round at
// a time: round r takes the best entry strictly after round r - 1's in the
// order (score descending, id ascending), so no list of chosen ids is kept.
//
// rules [rows, 14] i64: four inclusive ranges (lo, hi), flags (1: the
// first-step mask applies, 2: timestamp check), the no-speech id (-1: none),
// the timestamp range (begin, end), then a sampling temperature (f32 bits;
// 0: no sampling) and its uniform draw (f64 bits). masks [2, vocab] bool.
// Outputs ids [rows, k] i64, scores [rows, k] f32 (log-probability + cum),
// no_speech [rows]. A sampling row's draw is its first candidate (the
// others: id 0, -inf), by inverse CDF as `draw` in ops/top_tokens.rs.

#define TT_RANGES 4
#define TT_PARAMS 14
#define TT_DISABLED (-3.40282347e+38f)

struct TtRow {
    i64 lo[TT_RANGES + 1], hi[TT_RANGES + 1];
    int begin;
};

// The logit of entry j after the row's masks and ranges.
__device__ __forceinline__ float tt_value(const float* x, const unsigned char* masks, int vocab,
                                          const TtRow& r, int j) {
    if (masks[j] || (r.begin && masks[vocab + j])) return TT_DISABLED;
#pragma unroll
    for (int i = 0; i < TT_RANGES + 1; ++i) {
        if (j >= r.lo[i] && j <= r.hi[i]) return TT_DISABLED;
    }
    return x[j];
}

__device__ __forceinline__ double tt_block_sum(double v, double* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? scratch[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// (v, i) better than (w, j): larger, or equal with the lower id; id -1
// (none) is never better.
__device__ __forceinline__ bool tt_better(float v, int i, float w, int j) {
    if (i < 0) return false;
    if (j < 0) return true;
    return v > w || (v == w && i < j);
}

__device__ __forceinline__ void tt_block_best(float* v, int* i, float* fs, int* is) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffff, *v, o);
        const int j = __shfl_xor_sync(0xffffffff, *i, o);
        if (tt_better(w, j, *v, *i)) {
            *v = w;
            *i = j;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
        fs[warp] = *v;
        is[warp] = *i;
    }
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    *v = lane < nw ? fs[lane] : NEG_INF;
    *i = lane < nw ? is[lane] : -1;
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffff, *v, o);
        const int j = __shfl_xor_sync(0xffffffff, *i, o);
        if (tt_better(w, j, *v, *i)) {
            *v = w;
            *i = j;
        }
    }
}

extern "C" __global__ void top_tokens(const float* logits, const i64* rules, const float* cum,
                                      const unsigned char* masks, i64* ids, float* scores,
                                      float* no_speech, int vocab, int k) {
    pdl_enter();
    __shared__ float fred[32];
    __shared__ int ired[32];
    __shared__ double dred[32];
    __shared__ double seg_sums[1024];
    __shared__ int drawn;
    const u64 row = blockIdx.x;
    const float* x = logits + row * (u64)vocab;
    const i64* p = rules + row * TT_PARAMS;
    const int tid = threadIdx.x, nt = blockDim.x;
    TtRow r;
    for (int i = 0; i < TT_RANGES; ++i) {
        r.lo[i] = p[2 * i];
        r.hi[i] = p[2 * i + 1];
    }
    r.lo[TT_RANGES] = 1;  // the timestamp check's range, off until it fires
    r.hi[TT_RANGES] = 0;
    const i64 flags = p[2 * TT_RANGES];
    r.begin = (flags & 1) != 0;
    const i64 ns = p[2 * TT_RANGES + 1];
    const i64 tb = p[2 * TT_RANGES + 2];
    const i64 te = min(p[2 * TT_RANGES + 3], (i64)vocab - 1);

    // the no-speech probability, on the raw logits
    if (ns >= 0) {
        float m = NEG_INF;
        for (int j = tid; j < vocab; j += nt) m = fmaxf(m, x[j]);
        m = block_max(m, fred);
        double s = 0.0;
        for (int j = tid; j < vocab; j += nt) s += (double)expf(x[j] - m);
        s = tt_block_sum(s, dred);
        if (tid == 0) no_speech[row] = ns < vocab ? expf(x[ns] - m) / (float)s : 0.0f;
    } else if (tid == 0) {
        no_speech[row] = 0.0f;
    }

    // the timestamp check: their total probability against the best text's
    if ((flags & 2) && tb < vocab && tb <= te) {
        float m = NEG_INF;
        for (int j = tid; j < vocab; j += nt) m = fmaxf(m, tt_value(x, masks, vocab, r, j));
        m = block_max(m, fred);
        double s = 0.0;
        for (int j = tid; j < vocab; j += nt)
            s += (double)expf(tt_value(x, masks, vocab, r, j) - m);
        s = tt_block_sum(s, dred);
        const float shift = m + logf((float)s);
        float text = NEG_INF, ts = NEG_INF;
        for (int j = tid; j < vocab; j += nt) {
            const float v = tt_value(x, masks, vocab, r, j) - shift;
            if (j < tb) text = fmaxf(text, v);
            else if (j <= te) ts = fmaxf(ts, v);
        }
        text = block_max(text, fred);
        ts = block_max(ts, fred);
        if (ts != NEG_INF) {
            double t = 0.0;
            for (int j = (int)tb + tid; j <= te; j += nt)
                t += (double)expf((tt_value(x, masks, vocab, r, j) - shift) - ts);
            t = tt_block_sum(t, dred);
            ts = ts + logf((float)t);
        }
        if (ts > text && tb > 0) {
            r.lo[TT_RANGES] = 0;
            r.hi[TT_RANGES] = tb - 1;
        }
    }

    // the log-softmax shift after every rule
    float m = NEG_INF;
    for (int j = tid; j < vocab; j += nt) m = fmaxf(m, tt_value(x, masks, vocab, r, j));
    m = block_max(m, fred);
    double s = 0.0;
    for (int j = tid; j < vocab; j += nt) s += (double)expf(tt_value(x, masks, vocab, r, j) - m);
    s = tt_block_sum(s, dred);
    const float shift = m + logf((float)s);
    const float c = cum[row];

    const float temp = __int_as_float((int)p[2 * TT_RANGES + 4]);
    if (temp > 0.0f) {
        // weights exp((lp - max lp) / T) in double; the first id whose
        // running sum passes u times the total (contiguous segments a
        // thread, their sums scanned in order by thread 0)
        const float top = m - shift;
        const double u = __longlong_as_double(p[2 * TT_RANGES + 5]);
        const int seg = (vocab + nt - 1) / nt;
        const int lo = min(tid * seg, vocab), hi = min(lo + seg, vocab);
        double own = 0.0;
        for (int j = lo; j < hi; ++j)
            own += exp((double)(((tt_value(x, masks, vocab, r, j) - shift) - top) / temp));
        seg_sums[tid] = own;
        if (tid == 0) drawn = 0x7fffffff;
        __syncthreads();
        if (tid == 0) {
            double acc = 0.0;
            for (int t = 0; t < nt; ++t) {
                const double v = seg_sums[t];
                seg_sums[t] = acc;
                acc += v;
            }
            dred[0] = acc;
        }
        __syncthreads();
        const double target = u * dred[0];
        double run = seg_sums[tid];
        for (int j = lo; j < hi; ++j) {
            const double w =
                exp((double)(((tt_value(x, masks, vocab, r, j) - shift) - top) / temp));
            if (target < run + w && w > 0.0) {
                atomicMin(&drawn, j);
                break;
            }
            run += w;
        }
        __syncthreads();
        int id = drawn;
        if (id == 0x7fffffff) {
            // the float miss at the top: the best, as the host
            float bv = NEG_INF;
            int bi = -1;
            for (int j = tid; j < vocab; j += nt) {
                const float v = tt_value(x, masks, vocab, r, j) - shift;
                if (tt_better(v, j, bv, bi)) {
                    bv = v;
                    bi = j;
                }
            }
            tt_block_best(&bv, &bi, fred, ired);
            id = bi < 0 ? 0 : bi;
        }
        if (tid == 0) {
            ids[row * k] = id;
            scores[row * k] = (tt_value(x, masks, vocab, r, id) - shift) + c;
        }
        for (int rest = 1 + tid; rest < k; rest += nt) {
            ids[row * k + rest] = 0;
            scores[row * k + rest] = NEG_INF;
        }
        return;
    }

    // k rounds, each the best entry after the last one taken
    float last_v = 0.0f;
    int last_i = -1;
    for (int round = 0; round < k; ++round) {
        float bv = NEG_INF;
        int bi = -1;
        for (int j = tid; j < vocab; j += nt) {
            const float v = (tt_value(x, masks, vocab, r, j) - shift) + c;
            const bool after = last_i < 0 || v < last_v || (v == last_v && j > last_i);
            if (after && tt_better(v, j, bv, bi)) {
                bv = v;
                bi = j;
            }
        }
        tt_block_best(&bv, &bi, fred, ired);
        if (tid == 0) {
            ids[row * k + round] = bi < 0 ? 0 : bi;
            scores[row * k + round] = bi < 0 ? NEG_INF : bv;
        }
        if (bi < 0) {
            for (int rest = round + 1 + tid; rest < k; rest += nt) {
                ids[row * k + rest] = 0;
                scores[row * k + rest] = NEG_INF;
            }
            break;
        }
        last_v = bv;
        last_i = bi;
    }
}
