// Fused attention: one block per (query row, head or batch), the row's scores
// in shared memory, softmax in f32. Same formulas as the CPU ops
// (ops/limited_attention.rs `attend`, ops/attention Geometry::run): scores
// q.k * scale (+ mask), max-subtracted expf, weights e / sum; a row with no
// key to attend to gives zeros.
//
// Shared memory (dynamic): 32 floats for block reductions, the query row
// (d floats), then one score per key of the row's window.

// Mask of one query row: none, bool bytes (0 = masked) or additive floats.
// `stride` steps from key j to key j + 1.
template <typename T>
struct RowMask {
    int kind;  // 0 none, 1 bool, 2 float
    const unsigned char* b;
    const T* f;
    i64 stride;
};

// Attends query row `qrow` (d values) to keys lo..=hi of `k` (rows ldk apart)
// and `v` (rows ldv apart, dv values each), writing `orow` (dv values).
template <typename T>
__device__ void attend_row(const T* qrow, const T* k, const T* v, T* orow, u64 ldk, u64 ldv,
                           int d, int dv, i64 lo, i64 hi, float scale, RowMask<T> mask,
                           float* sh) {
    float* red = sh;
    float* qs = sh + 32;
    float* sc = qs + d;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int n = hi >= lo ? (int)(hi - lo + 1) : 0;
    if (n == 0) {
        for (int c = tid; c < dv; c += nt) st(orow, c, 0.0f);
        return;
    }
    for (int c = tid; c < d; c += nt) qs[c] = ld(qrow, c);
    __syncthreads();
    // scores: one warp per key, lanes across the width
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int j = warp; j < n; j += nw) {
        const i64 key = lo + j;
        float add = 0.0f;
        bool masked = false;
        if (mask.kind == 1) {
            masked = mask.b[key * mask.stride] == 0;
        } else if (mask.kind == 2) {
            add = ld(mask.f, (u64)(key * mask.stride));
            masked = add == NEG_INF;
        }
        float s = NEG_INF;
        if (!masked) {
            const T* kr = k + (u64)key * ldk;
            float acc = 0.0f;
            for (int c = lane; c < d; c += 32) acc += qs[c] * ld(kr, c);
            acc = warp_sum(acc);
            s = acc * scale + add;
        }
        if (lane == 0) sc[j] = s;
    }
    __syncthreads();
    float m = NEG_INF;
    for (int j = tid; j < n; j += nt) m = fmaxf(m, sc[j]);
    m = block_max(m, red);
    if (m == NEG_INF) {  // every key masked: zeros, not 0/0
        for (int c = tid; c < dv; c += nt) st(orow, c, 0.0f);
        return;
    }
    float sum = 0.0f;
    for (int j = tid; j < n; j += nt) {
        float e = expf(sc[j] - m);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);  // its barriers publish sc[] too
    for (int j = tid; j < n; j += nt) sc[j] = sc[j] / sum;
    __syncthreads();
    // four independent partial sums, so the loads of several keys are in
    // flight at once instead of one dependent chain per column
    for (int c = tid; c < dv; c += nt) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        const T* vc = v + (u64)lo * ldv + c;
        int j = 0;
        for (; j + 3 < n; j += 4) {
            a0 += sc[j] * ld(vc, (u64)j * ldv);
            a1 += sc[j + 1] * ld(vc, (u64)(j + 1) * ldv);
            a2 += sc[j + 2] * ld(vc, (u64)(j + 2) * ldv);
            a3 += sc[j + 3] * ld(vc, (u64)(j + 3) * ldv);
        }
        for (; j < n; ++j) a0 += sc[j] * ld(vc, (u64)j * ldv);
        st(orow, c, (a0 + a1) + (a2 + a3));
    }
}

// The keys query row i attends to, lo..=hi (none when lo > hi); see
// limited_attention_impl.
__device__ __forceinline__ void limited_window(i64 i, const u64* step, i64 tk, i64 lc,
                                               i64 pulse, i64 delay, i64* lo, i64* hi) {
    if (step != 0) {
        const i64 first = (i64)(*step) * pulse - delay;
        if (first + i < 0) {
            *lo = 1;
            *hi = 0;
            return;
        }
        *lo = i > lc - first ? i : lc - first;
        *hi = i + lc;
    } else {
        *lo = i - lc;
        *hi = i;
    }
    if (*lo < 0) *lo = 0;
    if (*hi > tk - 1) *hi = tk - 1;
}

// LimitedAttention (step == 0) and PulsedLimitedAttention (step = the device
// step counter). q [tq, width], k and v [tk, width], heads side by side;
// block (row i, head h). Whole: row i sees keys max(i - lc, 0) ..= i.
// Pulsed: row i is stream position first + i with first = step * pulse -
// delay; key row m is position first - lc + m; rows before the stream start
// give zeros and keys before it are masked.
template <typename T>
__device__ void limited_attention_impl(const T* q, const T* k, const T* v, T* out,
                                       const u64* step, i64 tk, int width, int dh, i64 lc,
                                       float scale, i64 pulse, i64 delay) {
    extern __shared__ float sh[];
    const i64 i = blockIdx.x;
    const int h = blockIdx.y;
    // grid z: independent sequences of a batch, gridDim.x query rows each
    const u64 b = blockIdx.z;
    q += b * gridDim.x * width;
    out += b * gridDim.x * width;
    k += b * (u64)tk * width;
    v += b * (u64)tk * width;
    i64 lo, hi;
    limited_window(i, step, tk, lc, pulse, delay, &lo, &hi);
    RowMask<T> none = {0, 0, 0, 0};
    const u64 off = (u64)h * dh;
    attend_row(q + (u64)i * width + off, k + off, v + off, out + (u64)i * width + off,
               (u64)width, (u64)width, dh, dh, lo, hi, scale, none, sh);
}

FLOAT_KERNELS(limited_attention,
    (const float* q, const float* k, const float* v, float* out, const u64* step, i64 tk,
     int width, int dh, i64 lc, float scale, i64 pulse, i64 delay),
    (const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* out, const u64* step, i64 tk,
     int width, int dh, i64 lc, float scale, i64 pulse, i64 delay),
    (q, k, v, out, step, tk, width, dh, lc, scale, pulse, delay))

// ChunkedAttention (step == 0) and PulsedChunkedAttention (step = the device
// step counter), as ops/chunked_attention.rs and pulse/ops/chunked_attention.rs:
// frame i sees keys c(i) - left ..= c(i) + chunk - 1 + right, c(i) the first
// frame of its chunk. Whole: q, k, v of tk rows, row i is frame i. Pulsed:
// key row m is frame kfirst + m with kfirst = step * pulse - delay - overlap,
// query row r is frame kfirst + overlap - lag + r; a query before the stream
// start, or at or after its end once known, gives zeros, and keys there are
// masked. Block (row, head, sequence); shared as attend_row.
template <typename T>
__device__ void chunked_attention_impl(const T* q, const T* k, const T* v, T* out,
                                       const u64* step, const i64* stream_len, i64 tk,
                                       int width, int dh, i64 chunk, i64 left, i64 right,
                                       float scale, i64 pulse, i64 delay, i64 overlap, i64 lag,
                                       int has_end, i64 ea, i64 eb, i64 ed, i64 ec) {
    extern __shared__ float sh[];
    const i64 i = blockIdx.x;
    const int h = blockIdx.y;
    const u64 b = blockIdx.z;
    q += b * gridDim.x * width;
    out += b * gridDim.x * width;
    k += b * (u64)tk * width;
    v += b * (u64)tk * width;
    i64 pos = i, first = 0, end = 0x7fffffffffffffffLL;
    if (step != 0) {
        first = (i64)(*step) * pulse - delay - overlap;
        pos = first + overlap - lag + i;
        end = stream_end(stream_len, has_end, ea, eb, ed, ec);
    }
    i64 lo = 1, hi = 0;
    if (pos >= 0 && pos < end) {
        const i64 start = pos / chunk * chunk;  // pos >= 0
        lo = max(start - left, (i64)0) - first;
        hi = min(start + chunk - 1 + right, end - 1) - first;
        if (lo < 0) lo = 0;
        if (hi > tk - 1) hi = tk - 1;
    }
    RowMask<T> none = {0, 0, 0, 0};
    const u64 off = (u64)h * dh;
    attend_row(q + (u64)i * width + off, k + off, v + off, out + (u64)i * width + off,
               (u64)width, (u64)width, dh, dh, lo, hi, scale, none, sh);
}

FLOAT_KERNELS(chunked_attention,
    (const float* q, const float* k, const float* v, float* out, const u64* step,
     const i64* stream_len, i64 tk, int width, int dh, i64 chunk, i64 left, i64 right,
     float scale, i64 pulse, i64 delay, i64 overlap, i64 lag, int has_end, i64 ea, i64 eb,
     i64 ed, i64 ec),
    (const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* out, const u64* step,
     const i64* stream_len, i64 tk, int width, int dh, i64 chunk, i64 left, i64 right,
     float scale, i64 pulse, i64 delay, i64 overlap, i64 lag, int has_end, i64 ea, i64 eb,
     i64 ed, i64 ec),
    (q, k, v, out, step, stream_len, tk, width, dh, chunk, left, right, scale, pulse, delay,
     overlap, lag, has_end, ea, eb, ed, ec))

// Attends query row `qrow` (d values) to two spans of keys of `k` and `v`
// (rows `stride` apart): rows lo..=hi, then rows clo..=chi at `coff`
// further on, in that order (the CPU's); as attend_row without a mask.
template <typename T>
__device__ void attend_spans(const T* qrow, const T* k, const T* v, T* orow, u64 stride, int d,
                             i64 lo, i64 hi, i64 clo, i64 chi, u64 coff, float scale,
                             float* sh) {
    float* red = sh;
    float* qs = sh + 32;
    float* sc = qs + d;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int n0 = hi >= lo ? (int)(hi - lo + 1) : 0;
    const int n = n0 + (chi >= clo ? (int)(chi - clo + 1) : 0);
    if (n == 0) {
        for (int c = tid; c < d; c += nt) st(orow, c, 0.0f);
        return;
    }
    auto row = [&](int j) {
        return j < n0 ? (u64)(lo + j) * stride : (u64)(clo + j - n0) * stride + coff;
    };
    for (int c = tid; c < d; c += nt) qs[c] = ld(qrow, c);
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int j = warp; j < n; j += nw) {
        const T* kr = k + row(j);
        float acc = 0.0f;
        for (int c = lane; c < d; c += 32) acc += qs[c] * ld(kr, c);
        acc = warp_sum(acc);
        if (lane == 0) sc[j] = acc * scale;
    }
    __syncthreads();
    float m = NEG_INF;
    for (int j = tid; j < n; j += nt) m = fmaxf(m, sc[j]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int j = tid; j < n; j += nt) {
        float e = expf(sc[j] - m);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);  // its barriers publish sc[] too
    for (int j = tid; j < n; j += nt) sc[j] = sc[j] / sum;
    __syncthreads();
    for (int c = tid; c < d; c += nt) {
        float a0 = 0.0f, a1 = 0.0f;
        int j = 0;
        for (; j + 1 < n; j += 2) {
            a0 += sc[j] * ld(v + row(j), c);
            a1 += sc[j + 1] * ld(v + row(j + 1), c);
        }
        if (j < n) a0 += sc[j] * ld(v + row(j), c);
        st(orow, c, a0 + a1);
    }
}

// CopiesAttention (step == 0) and PulsedCopiesAttention (step = the device
// step counter), as ops/copies_attention.rs and pulse/ops/copies_attention.rs:
// q [tq, 2, width], k and v [tk, 2, width], slot 0 a frame and slot 1 its
// copy. Both slots of the row of frame pos see the frames c - left ..= c +
// chunk - 1 and the copies in the slots of rows c ..= c + right - 1 whose
// frame (a chunk later) is before the end, c the first frame of pos's chunk.
// Whole: tq == tk rows, row i is frame i, the end is tk. Pulsed: rows,
// positions and the end as chunked_attention_impl's. Block (2 * row + slot,
// head, sequence); shared as attend_row.
template <typename T>
__device__ void copies_attention_impl(const T* q, const T* k, const T* v, T* out,
                                      const u64* step, const i64* stream_len, i64 tk,
                                      int width, int dh, i64 chunk, i64 left, i64 right,
                                      float scale, i64 pulse, i64 delay, i64 overlap, i64 lag,
                                      int has_end, i64 ea, i64 eb, i64 ed, i64 ec) {
    extern __shared__ float sh[];
    const i64 i = blockIdx.x >> 1;
    const int h = blockIdx.y;
    const u64 b = blockIdx.z;
    q += b * gridDim.x * width;
    out += b * gridDim.x * width;
    k += b * (u64)tk * 2 * width;
    v += b * (u64)tk * 2 * width;
    i64 pos = i, first = 0, end = tk;
    if (step != 0) {
        first = (i64)(*step) * pulse - delay - overlap;
        pos = first + overlap - lag + i;
        end = stream_end(stream_len, has_end, ea, eb, ed, ec);
    }
    i64 lo = 1, hi = 0, clo = 1, chi = 0;
    if (pos >= 0 && pos < end) {
        const i64 start = pos / chunk * chunk;  // pos >= 0
        lo = max(max(start - left, (i64)0) - first, (i64)0);
        hi = min(min(start + chunk - 1, end - 1) - first, tk - 1);
        clo = max(start - first, (i64)0);
        chi = min(min(start + right - 1, end - 1 - chunk) - first, tk - 1);
    }
    const u64 row = (u64)blockIdx.x * width + (u64)h * dh;
    const u64 off = (u64)h * dh;
    attend_spans(q + row, k + off, v + off, out + row, 2 * (u64)width, dh, lo, hi, clo, chi,
                 (u64)width, scale, sh);
}

FLOAT_KERNELS(copies_attention,
    (const float* q, const float* k, const float* v, float* out, const u64* step,
     const i64* stream_len, i64 tk, int width, int dh, i64 chunk, i64 left, i64 right,
     float scale, i64 pulse, i64 delay, i64 overlap, i64 lag, int has_end, i64 ea, i64 eb,
     i64 ed, i64 ec),
    (const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* out, const u64* step,
     const i64* stream_len, i64 tk, int width, int dh, i64 chunk, i64 left, i64 right,
     float scale, i64 pulse, i64 delay, i64 overlap, i64 lag, int has_end, i64 ea, i64 eb,
     i64 ed, i64 ec),
    (q, k, v, out, step, stream_len, tk, width, dh, chunk, left, right, scale, pulse, delay,
     overlap, lag, has_end, ea, eb, ed, ec))

// LimitedAttention over a tile small enough for shared memory (a chunk
// step's few query rows and their window of keys): one block per (head,
// sequence, group of `rpb` query rows) reads the head's K and V, each
// element by one load, all in flight together, instead of a block per query
// row walking K and V in dependent rounds. A warp takes a query row's
// softmax with shuffles alone. Row groups spread a single stream's few heads
// over more SMs; a batch of streams needs none.
// Launched with 1024 threads: the work is a few short chains per thread.
// Rows, windows and formulas as limited_attention_impl.
//
// Shared memory: K [tk][dh + 1] (padded: lanes take consecutive keys),
// V [tk][dh], q [rpb][dh], scores then weights [rpb][tk].
template <typename T>
__device__ void limited_attention_tile_impl(const T* q, const T* k, const T* v, T* out,
                                            const u64* step, int tq, int rpb, i64 tk,
                                            int width, int dh, i64 lc, float scale, i64 pulse,
                                            i64 delay, T* rings, i64 ring) {
    extern __shared__ float sh[];
    const u64 off = (u64)blockIdx.x * dh;
    const u64 b = blockIdx.z;
    // this block's query rows, i0 .. i0 + rows
    const int i0 = blockIdx.y * rpb;
    const int rows = min(rpb, tq - i0);
    // With the K and V Delays fused (ring > 0), k and v hold this pulse's
    // tk - ring new frames: key row m < ring is frame m of ring `step & 1`,
    // row m >= ring is frame m - ring of k, v, and ring `(step + 1) & 1` gets
    // rows tq .. tq + ring for the next step (as the Delay kernel's two
    // rings). The state holds the K rings, then V's. Without, k and v hold
    // all tk rows.
    q += b * tq * width + off;
    out += b * tq * width + off;
    k += b * (u64)(tk - ring) * width + off;
    v += b * (u64)(tk - ring) * width + off;
    const u64 ring_len = (u64)gridDim.z * ring * width;
    const T* ksrc = 0;
    const T* vsrc = 0;
    T* kdst = 0;
    T* vdst = 0;
    if (ring > 0) {
        const u64 s = *step;
        const u64 at = b * ring * width + off;
        ksrc = rings + (s & 1) * ring_len + at;
        kdst = rings + ((s + 1) & 1) * ring_len + at;
        vsrc = ksrc + 2 * ring_len;
        vdst = kdst + 2 * ring_len;
    }
    const int kp = dh + 1;
    float* ks = sh;
    float* vs = ks + tk * kp;
    float* qs = vs + tk * dh;
    float* ps = qs + rpb * dh;
    const int tid = threadIdx.x, nt = blockDim.x;
    // Thread t reads column t % dh of rows t / dh, t / dh + nt / dh, ... (no
    // division per element); U rows of K and of V are loaded before any is
    // stored, so a tile of up to U * nt elements arrives in one round trip.
    constexpr int U = 8;
    const int c0 = tid % dh, r0 = tid / dh, rstep = nt / dh;
    if (rstep > 0 && r0 < rstep) {
        for (int base = r0; base < tk; base += U * rstep) {
            float kv[U], vv[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int m = base + u * rstep;
                if (m < ring) {
                    kv[u] = ld(ksrc, (u64)m * width + c0);
                    vv[u] = ld(vsrc, (u64)m * width + c0);
                } else if (m < tk) {
                    kv[u] = ld(k, (u64)(m - ring) * width + c0);
                    vv[u] = ld(v, (u64)(m - ring) * width + c0);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int m = base + u * rstep;
                if (m < tk) {
                    ks[m * kp + c0] = kv[u];
                    vs[m * dh + c0] = vv[u];
                }
            }
        }
        for (int r = r0; r < rows; r += rstep) qs[r * dh + c0] = ld(q, (u64)(i0 + r) * width + c0);
    }
    __syncthreads();
    if (ring > 0 && blockIdx.y == 0 && rstep > 0 && r0 < rstep) {
        for (int m = r0; m < ring; m += rstep) {
            st(kdst, (u64)m * width + c0, ks[(m + tq) * kp + c0]);
            st(vdst, (u64)m * width + c0, vs[(m + tq) * dh + c0]);
        }
    }
    for (int e = tid; e < rows * tk; e += nt) {
        const int r = e / tk, m = e - r * tk;
        i64 lo, hi;
        limited_window(i0 + r, step, tk, lc, pulse, delay, &lo, &hi);
        float s = NEG_INF;
        if (m >= lo && m <= hi) {
            const float* qr = qs + r * dh;
            const float* kr = ks + m * kp;
            // four partial sums: a shorter chain of dependent adds
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            int c = 0;
            for (; c + 3 < dh; c += 4) {
                a0 += qr[c] * kr[c];
                a1 += qr[c + 1] * kr[c + 1];
                a2 += qr[c + 2] * kr[c + 2];
                a3 += qr[c + 3] * kr[c + 3];
            }
            for (; c < dh; ++c) a0 += qr[c] * kr[c];
            s = ((a0 + a1) + (a2 + a3)) * scale;
        }
        ps[e] = s;
    }
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int r = warp; r < rows; r += nw) {
        float* pr = ps + r * tk;
        float m = NEG_INF;
        for (int j = lane; j < tk; j += 32) m = fmaxf(m, pr[j]);
        m = warp_max(m);
        float sum = 0.0f;
        for (int j = lane; j < tk; j += 32) {
            float e = m == NEG_INF || pr[j] == NEG_INF ? 0.0f : expf(pr[j] - m);
            pr[j] = e;
            sum += e;
        }
        sum = warp_sum(sum);
        // a row with no key to attend to keeps zero weights: zeros out
        if (sum > 0.0f) {
            for (int j = lane; j < tk; j += 32) pr[j] = pr[j] / sum;
        }
    }
    __syncthreads();
    for (int e = tid; e < rows * dh; e += nt) {
        const int r = e / dh, c = e - r * dh;
        i64 lo, hi;
        limited_window(i0 + r, step, tk, lc, pulse, delay, &lo, &hi);
        const float* pr = ps + r * tk;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        i64 j = lo;
        for (; j + 3 <= hi; j += 4) {
            a0 += pr[j] * vs[j * dh + c];
            a1 += pr[j + 1] * vs[(j + 1) * dh + c];
            a2 += pr[j + 2] * vs[(j + 2) * dh + c];
            a3 += pr[j + 3] * vs[(j + 3) * dh + c];
        }
        for (; j <= hi; ++j) a0 += pr[j] * vs[j * dh + c];
        st(out, (u64)(i0 + r) * width + c, (a0 + a1) + (a2 + a3));
    }
}

FLOAT_KERNELS(limited_attention_tile,
    (const float* q, const float* k, const float* v, float* out, const u64* step, int tq,
     int rpb, i64 tk, int width, int dh, i64 lc, float scale, i64 pulse, i64 delay,
     float* rings, i64 ring),
    (const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* out, const u64* step, int tq,
     int rpb, i64 tk, int width, int dh, i64 lc, float scale, i64 pulse, i64 delay,
     bf16_t* rings, i64 ring),
    (q, k, v, out, step, tq, rpb, tk, width, dh, lc, scale, pulse, delay, rings, ring))

// Scaled dot-product attention with broadcast batch axes, collapsed on the
// host to (outer, inner); strides count whole matrices for q, k, v and
// elements for the mask (over [batch.., tq, tk]). Block (row i, batch b).
template <typename T>
__device__ void sdpa_impl(const T* q, const T* k, const T* v, const void* mask, T* out,
                          int tq, i64 tk, int d, int dv, i64 inner, i64 sq0, i64 sq1,
                          i64 sk0, i64 sk1, i64 sv0, i64 sv1, i64 sm0, i64 sm1, i64 smq,
                          i64 smk, float scale, int mask_kind) {
    extern __shared__ float sh[];
    const i64 i = blockIdx.x;
    const i64 b = blockIdx.y;
    const i64 bo = b / inner, bi = b % inner;
    const i64 bq = bo * sq0 + bi * sq1, bk = bo * sk0 + bi * sk1, bv = bo * sv0 + bi * sv1;
    const i64 mrow = bo * sm0 + bi * sm1 + i * smq;
    RowMask<T> m = {mask_kind, 0, 0, smk};
    if (mask_kind == 1) m.b = (const unsigned char*)mask + mrow;
    if (mask_kind == 2) m.f = (const T*)mask + mrow;
    attend_row(q + (u64)(bq * tq + i) * d, k + (u64)(bk * tk) * d, v + (u64)(bv * tk) * dv,
               out + (u64)(b * tq + i) * dv, (u64)d, (u64)dv, d, dv, (i64)0, tk - 1, scale, m,
               sh);
}

FLOAT_KERNELS(sdpa,
    (const float* q, const float* k, const float* v, const void* mask, float* out, int tq,
     i64 tk, int d, int dv, i64 inner, i64 sq0, i64 sq1, i64 sk0, i64 sk1, i64 sv0, i64 sv1,
     i64 sm0, i64 sm1, i64 smq, i64 smk, float scale, int mask_kind),
    (const bf16_t* q, const bf16_t* k, const bf16_t* v, const void* mask, bf16_t* out, int tq,
     i64 tk, int d, int dv, i64 inner, i64 sq0, i64 sq1, i64 sk0, i64 sk1, i64 sv0, i64 sv1,
     i64 sm0, i64 sm1, i64 smq, i64 smk, float scale, int mask_kind),
    (q, k, v, mask, out, tq, tk, d, dv, inner, sq0, sq1, sk0, sk1, sv0, sv1, sm0, sm1, smq, smk,
     scale, mask_kind))

// A text decoder's key/value cache (gpu/ops/kv_cache.rs). Each sequence's
// filled length (`len`) and the sequence each row of a step feeds
// (`row_seq`) live in device memory, written by the host between steps, so
// a captured decoder step stays valid as the texts grow and as the rows it
// feeds change. Caches are [sequences][capacity][width]; a head is a column
// block of `dh`.

// Writes the step's n new key and value rows of each of b rows at their
// sequence's positions len .. len + n (element-wise; total = b * n * width).
template <typename T>
__device__ void kv_append_impl(const T* k, const T* v, T* ck, T* cv, const i64* len,
                               const int* row_seq, int n, int width, i64 capacity, i64 total) {
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (i64)gridDim.x * blockDim.x) {
        const i64 c = e % width, r = e / width;
        const i64 i = r % n, seq = row_seq[r / n];
        const u64 dst = ((u64)seq * capacity + len[seq] + i) * width + c;
        ck[dst] = k[e];
        cv[dst] = v[e];
    }
}

FLOAT_KERNELS(kv_append,
    (const float* k, const float* v, float* ck, float* cv, const i64* len, const int* row_seq,
     int n, int width, i64 capacity, i64 total),
    (const bf16_t* k, const bf16_t* v, bf16_t* ck, bf16_t* cv, const i64* len,
     const int* row_seq, int n, int width, i64 capacity, i64 total),
    (k, v, ck, cv, len, row_seq, n, width, capacity, total))

// Causal attention of new row i of step row s over its sequence's cached
// positions 0 ..= len + i: one block per (head, row, step row).
template <typename T>
__device__ void kv_self_attention_impl(const T* q, const T* ck, const T* cv, T* out,
                                       const i64* len, const int* row_seq, int n, int width,
                                       int dh, i64 capacity, float scale) {
    extern __shared__ float sh[];
    const int h = blockIdx.x, i = blockIdx.y;
    const u64 s = blockIdx.z;
    const u64 seq = (u64)row_seq[s];
    const u64 off = (u64)h * dh;
    const u64 row = (s * n + i) * width + off;
    const u64 base = seq * capacity * width + off;
    RowMask<T> none = {0, 0, 0, 0};
    attend_row(q + row, ck + base, cv + base, out + row, (u64)width, (u64)width, dh, dh, (i64)0,
               len[seq] + i, scale, none, sh);
}

FLOAT_KERNELS(kv_self_attention,
    (const float* q, const float* ck, const float* cv, float* out, const i64* len,
     const int* row_seq, int n, int width, int dh, i64 capacity, float scale),
    (const bf16_t* q, const bf16_t* ck, const bf16_t* cv, bf16_t* out, const i64* len,
     const int* row_seq, int n, int width, int dh, i64 capacity, float scale),
    (q, ck, cv, out, len, row_seq, n, width, dh, capacity, scale))

// Attention of new row i of sequence s over the encoder frames of the
// window it reads (seq_window[s]), split over the frames as flash decoding
// does: a block per (head, slice of `chunk` frames, row, sequence) leaves
// its slice's max score m, sum of exp(score - m) l and unnormalised output
// o (dh values) in `part` ([s][i][h][slice][dh + 2]); kv_cross_combine
// rescales the slices to the common max and divides. A step's few rows
// then spread over hundreds of blocks instead of one per head.
// Where rec_slot (this layer's row of the cache's map, a slot per head or
// -1) names a slot for head h, the scaled scores of query row s * n + i are
// also written to the buffer at *rec_at ([slot][row < rec_rows][frames]; an
// address kept in device memory, so that a captured step finds a buffer
// made after it): the host softmaxes them into the weights that word
// alignment and the streaming decoder read, with no pass of their own.
template <typename T>
__device__ void kv_cross_partial_impl(const T* q, const T* xk, const T* xv,
                                      const int* seq_window, const int* row_seq, float* part,
                                      int n, int width,
                                      int dh, i64 frames, float scale, int chunk, int slices,
                                      const int* rec_slot, const u64* rec_at, int rec_rows) {
    extern __shared__ float sh[];
    float* red = sh;
    float* qs = sh + 32;
    float* sc = qs + dh;
    const int h = blockIdx.x / slices, c = blockIdx.x % slices, i = blockIdx.y;
    const int heads = gridDim.x / slices;
    const u64 s = blockIdx.z;
    const u64 off = (u64)h * dh;
    const T* qrow = q + (s * n + i) * width + off;
    const u64 base = (u64)seq_window[row_seq[s]] * frames * width + off;
    const i64 lo = (i64)c * chunk;
    const int keys = (int)min((i64)chunk, frames - lo);
    float* dst = part + (((s * n + i) * heads + h) * slices + c) * (u64)(dh + 2);
    const int tid = threadIdx.x, nt = blockDim.x;
    if (keys <= 0) {
        for (int col = tid; col < dh + 2; col += nt) dst[col] = col == 0 ? NEG_INF : 0.0f;
        return;
    }
    for (int col = tid; col < dh; col += nt) qs[col] = ld(qrow, col);
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int j = warp; j < keys; j += nw) {
        const T* kr = xk + base + (u64)(lo + j) * width;
        float acc = 0.0f;
        for (int col = lane; col < dh; col += 32) acc += qs[col] * ld(kr, col);
        acc = warp_sum(acc);
        if (lane == 0) sc[j] = acc * scale;
    }
    __syncthreads();
    const u64 qr = s * n + i;
    if (qr < (u64)rec_rows) {
        const int slot = rec_slot[h];
        if (slot >= 0) {
            float* r = (float*)(*rec_at) + ((u64)slot * rec_rows + qr) * (u64)frames + lo;
            for (int j = tid; j < keys; j += nt) r[j] = sc[j];
        }
    }
    float m = NEG_INF;
    for (int j = tid; j < keys; j += nt) m = fmaxf(m, sc[j]);
    m = block_max(m, red);
    float l = 0.0f;
    for (int j = tid; j < keys; j += nt) {
        float e = expf(sc[j] - m);
        sc[j] = e;
        l += e;
    }
    l = block_sum(l, red);  // its barriers publish sc[] too
    for (int col = tid; col < dh; col += nt) {
        const T* vc = xv + base + (u64)lo * width + col;
        float a0 = 0.0f, a1 = 0.0f;
        int j = 0;
        for (; j + 1 < keys; j += 2) {
            a0 += sc[j] * ld(vc, (u64)j * width);
            a1 += sc[j + 1] * ld(vc, (u64)(j + 1) * width);
        }
        if (j < keys) a0 += sc[j] * ld(vc, (u64)j * width);
        dst[2 + col] = a0 + a1;
    }
    if (tid == 0) {
        dst[0] = m;
        dst[1] = l;
    }
}

FLOAT_KERNELS(kv_cross_partial,
    (const float* q, const float* xk, const float* xv, const int* seq_window,
     const int* row_seq, float* part, int n, int width, int dh, i64 frames, float scale,
     int chunk, int slices, const int* rec_slot, const u64* rec_at, int rec_rows),
    (const bf16_t* q, const bf16_t* xk, const bf16_t* xv, const int* seq_window,
     const int* row_seq, float* part, int n, int width, int dh, i64 frames, float scale,
     int chunk, int slices, const int* rec_slot, const u64* rec_at, int rec_rows),
    (q, xk, xv, seq_window, row_seq, part, n, width, dh, frames, scale, chunk, slices, rec_slot,
     rec_at, rec_rows))

// The slices of kv_cross_partial joined: block (head, row, sequence), a
// thread per output column.
template <typename T>
__device__ void kv_cross_combine_impl(const float* part, T* out, int n, int width, int dh,
                                      int slices) {
    const int h = blockIdx.x, i = blockIdx.y, heads = gridDim.x;
    const u64 s = blockIdx.z;
    const float* p = part + ((s * n + i) * heads + h) * (u64)slices * (dh + 2);
    float m = NEG_INF;
    for (int c = 0; c < slices; ++c) m = fmaxf(m, p[c * (dh + 2)]);
    for (int col = threadIdx.x; col < dh; col += blockDim.x) {
        float num = 0.0f, den = 0.0f;
        for (int c = 0; c < slices; ++c) {
            const float* pc = p + c * (dh + 2);
            const float w = pc[0] == NEG_INF ? 0.0f : expf(pc[0] - m);
            num += w * pc[2 + col];
            den += w * pc[1];
        }
        st(out, (s * n + i) * width + (u64)h * dh + col, den > 0.0f ? num / den : 0.0f);
    }
}

FLOAT_KERNELS(kv_cross_combine,
    (const float* part, float* out, int n, int width, int dh, int slices),
    (const float* part, bf16_t* out, int n, int width, int dh, int slices),
    (part, out, n, width, dh, slices))

// Beam search's reorder: sequence b of dst takes the first `rows` cached
// rows of sequence src[b] of `from` (total = b * rows * width).
template <typename T>
__device__ void kv_gather_impl(const T* from, T* dst, const int* src, i64 rows, int width,
                               i64 capacity, i64 total) {
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (i64)gridDim.x * blockDim.x) {
        const i64 c = e % width, r = e / width;
        const i64 p = r % rows, b = r / rows;
        dst[((u64)b * capacity + p) * width + c] = from[((u64)src[b] * capacity + p) * width + c];
    }
}

FLOAT_KERNELS(kv_gather,
    (const float* from, float* dst, const int* src, i64 rows, int width, i64 capacity, i64 total),
    (const bf16_t* from, bf16_t* dst, const int* src, i64 rows, int width, i64 capacity,
     i64 total),
    (from, dst, src, rows, width, capacity, total))

// Softmax of each row of `n` scores (f32, already scaled), written as T to
// `p` (which may be `s` itself for f32): the weights of the GEMM form of
// scaled dot-product attention (gpu/ops/attention_gemm.rs). One block per
// row; formulas as attend_row's.
template <typename T>
__device__ void softmax_rows_impl(const float* s, T* p, i64 n) {
    __shared__ float red[32];
    const u64 r = blockIdx.x;
    const float* sr = s + r * (u64)n;
    T* pr = p + r * (u64)n;
    float m = NEG_INF;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, sr[j]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) sum += m == NEG_INF ? 0.0f : expf(sr[j] - m);
    sum = block_sum(sum, red);
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
        float e = m == NEG_INF ? 0.0f : expf(sr[j] - m);
        st(pr, (u64)j, sum > 0.0f ? e / sum : 0.0f);
    }
}

FLOAT_KERNELS(softmax_rows,
    (const float* s, float* p, i64 n),
    (const float* s, bf16_t* p, i64 n),
    (s, p, n))
