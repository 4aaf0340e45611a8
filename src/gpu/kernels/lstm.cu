// Silero VAD's ops: LSTM (whole and pulsed) and Unfold.
//
// LSTM, PyTorch layout and gate order (i, f, g, o), as ops/lstm.rs: per row
//   gate[r] = b_ih[r] + b_hh[r] + W_ih[r].x_t + W_hh[r].h
//   c = sigmoid(f) c + sigmoid(i) tanh(g),  h = sigmoid(o) tanh(c).
// The pulsed form's (h, c) live in the op's state as f32, double-buffered
// by the step counter's parity: step s reads buffer s & 1 (or the inputs h0,
// c0 when s = 0: a fresh stream) and writes buffer (s + 1) & 1, so blocks
// that each update a slice of h never race with blocks still reading it.
// State layout: [2 buffers][h | c][hidden] floats. Stream frames before
// `delay` are warm-up: zeros out, state carried unchanged (pulse.rs rule).
// `step == 0` (a null pointer) is the whole-sequence op: no state, no warm-up.

__device__ __forceinline__ float lstm_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Where this launch's (h, c) come from and go to, and how many leading rows
// of the pulse are warm-up.
struct LstmIo {
    const float* src;  // state buffer to read (null: h0, c0)
    float* dst;        // state buffer to write (null: none)
    i64 skip;
};

__device__ __forceinline__ LstmIo lstm_io(const u64* step, float* state, int hid, i64 rows,
                                          i64 delay) {
    LstmIo io = {0, 0, 0};
    if (step == 0) return io;
    const u64 s = *step;
    io.src = s == 0 ? (const float*)0 : state + (s & 1) * 2 * (u64)hid;
    io.dst = state + ((s + 1) & 1) * 2 * (u64)hid;
    const i64 seen = (i64)s * rows;
    i64 skip = delay - seen;
    io.skip = skip < 0 ? 0 : (skip > rows ? rows : skip);
    return io;
}

// One time row (T = 1), every block a slice of `units` hidden units: its
// 4 * units gate rows are dot products with x and the previous h (both in
// shared memory), one warp per gate row. Dynamic shared: in + hid + 4 * units floats.
template <typename T>
__device__ void lstm_cell_impl(const T* x, const T* w_ih, const T* w_hh, const T* b_ih,
                               const T* b_hh, const T* h0, const T* c0, T* y, T* h_out, T* c_out,
                               float* state, const u64* step, int in, int hid, int units,
                               i64 delay) {
    extern __shared__ float sh[];
    float* xs = sh;
    float* hs = xs + in;
    float* gs = hs + hid;
    const LstmIo io = lstm_io(step, state, hid, 1, delay);
    const int tid = threadIdx.x, nt = blockDim.x;
    const int u0 = blockIdx.x * units;
    const int nu = hid - u0 < units ? hid - u0 : units;
    if (io.skip > 0) {  // warm-up frame: zeros out, state carried
        for (int j = tid; j < nu; j += nt) {
            const int u = u0 + j;
            const float hv = io.src ? io.src[u] : ld(h0, u);
            const float cv = io.src ? io.src[hid + u] : ld(c0, u);
            st(y, u, 0.0f);
            st(h_out, u, hv);
            st(c_out, u, cv);
            io.dst[u] = hv;
            io.dst[hid + u] = cv;
        }
        return;
    }
    for (int j = tid; j < in; j += nt) xs[j] = ld(x, j);
    for (int j = tid; j < hid; j += nt) hs[j] = io.src ? io.src[j] : ld(h0, j);
    __syncthreads();
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int g = warp; g < 4 * nu; g += nw) {
        const int r = (g / nu) * hid + u0 + g % nu;
        const T* wi = w_ih + (u64)r * in;
        const T* wh = w_hh + (u64)r * hid;
        float a = 0.0f, b = 0.0f;
        for (int c = lane; c < in; c += 32) a += ld(wi, c) * xs[c];
        for (int c = lane; c < hid; c += 32) b += ld(wh, c) * hs[c];
        a = warp_sum(a);
        b = warp_sum(b);
        if (lane == 0) gs[g] = ld(b_ih, r) + ld(b_hh, r) + a + b;
    }
    __syncthreads();
    for (int j = tid; j < nu; j += nt) {
        const int u = u0 + j;
        const float ig = lstm_sigmoid(gs[j]);
        const float fg = lstm_sigmoid(gs[nu + j]);
        const float gg = tanhf(gs[2 * nu + j]);
        const float og = lstm_sigmoid(gs[3 * nu + j]);
        const float cp = io.src ? io.src[hid + u] : ld(c0, u);
        const float cv = fg * cp + ig * gg;
        const float hv = og * tanhf(cv);
        st(y, u, hv);
        st(h_out, u, hv);
        st(c_out, u, cv);
        if (io.dst) {
            io.dst[u] = hv;
            io.dst[hid + u] = cv;
        }
    }
}

FLOAT_KERNELS(lstm_cell,
    (const float* x, const float* w_ih, const float* w_hh, const float* b_ih, const float* b_hh,
     const float* h0, const float* c0, float* y, float* h_out, float* c_out, float* state,
     const u64* step, int in, int hid, int units, i64 delay),
    (const bf16_t* x, const bf16_t* w_ih, const bf16_t* w_hh, const bf16_t* b_ih,
     const bf16_t* b_hh, const bf16_t* h0, const bf16_t* c0, bf16_t* y, bf16_t* h_out,
     bf16_t* c_out, float* state, const u64* step, int in, int hid, int units, i64 delay),
    (x, w_ih, w_hh, b_ih, b_hh, h0, c0, y, h_out, c_out, state, step, in, hid, units, delay))

// The input half of every row's gates, all rows at once (f32 out):
// gx[t][r] = W_ih[r].x_t, one warp per (t, r).
template <typename T>
__device__ void lstm_proj_impl(const T* x, const T* w_ih, float* gx, u64 rows, int in, int g4) {
    const int lane = threadIdx.x & 31;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    const u64 n = rows * (u64)g4;
    for (u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < n; w += warps) {
        const u64 t = w / g4, r = w % g4;
        const T* wi = w_ih + r * in;
        const T* xt = x + t * in;
        float a = 0.0f;
        for (int c = lane; c < in; c += 32) a += ld(wi, c) * ld(xt, c);
        a = warp_sum(a);
        if (lane == 0) gx[w] = a;
    }
}

FLOAT_KERNELS(lstm_proj,
    (const float* x, const float* w_ih, float* gx, u64 rows, int in, int g4),
    (const bf16_t* x, const bf16_t* w_ih, float* gx, u64 rows, int in, int g4),
    (x, w_ih, gx, rows, in, g4))

// The recurrence over `rows` time rows in one block (the rows depend on each
// other): h and c in shared memory, gates from gx plus W_hh h, one warp per
// gate row. Dynamic shared: 6 * hid floats.
template <typename T>
__device__ void lstm_seq_impl(const float* gx, const T* w_hh, const T* b_ih, const T* b_hh,
                              const T* h0, const T* c0, T* y, T* h_out, T* c_out, float* state,
                              const u64* step, i64 rows, int hid, i64 delay) {
    extern __shared__ float sh[];
    float* hs = sh;
    float* cs = hs + hid;
    float* gs = cs + hid;
    const LstmIo io = lstm_io(step, state, hid, rows, delay);
    const int tid = threadIdx.x, nt = blockDim.x;
    const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int u = tid; u < hid; u += nt) {
        hs[u] = io.src ? io.src[u] : ld(h0, u);
        cs[u] = io.src ? io.src[hid + u] : ld(c0, u);
    }
    for (u64 j = tid; j < (u64)io.skip * hid; j += nt) st(y, j, 0.0f);
    __syncthreads();
    const int g4 = 4 * hid;
    for (i64 t = io.skip; t < rows; ++t) {
        const float* gt = gx + (u64)t * g4;
        for (int r = warp; r < g4; r += nw) {
            const T* wh = w_hh + (u64)r * hid;
            float b = 0.0f;
            for (int c = lane; c < hid; c += 32) b += ld(wh, c) * hs[c];
            b = warp_sum(b);
            if (lane == 0) gs[r] = ld(b_ih, r) + ld(b_hh, r) + gt[r] + b;
        }
        __syncthreads();
        for (int u = tid; u < hid; u += nt) {
            const float ig = lstm_sigmoid(gs[u]);
            const float fg = lstm_sigmoid(gs[hid + u]);
            const float gg = tanhf(gs[2 * hid + u]);
            const float og = lstm_sigmoid(gs[3 * hid + u]);
            const float cv = fg * cs[u] + ig * gg;
            const float hv = og * tanhf(cv);
            cs[u] = cv;
            hs[u] = hv;
            st(y, (u64)t * hid + u, hv);
        }
        __syncthreads();
    }
    for (int u = tid; u < hid; u += nt) {
        st(h_out, u, hs[u]);
        st(c_out, u, cs[u]);
        if (io.dst) {
            io.dst[u] = hs[u];
            io.dst[hid + u] = cs[u];
        }
    }
}

FLOAT_KERNELS(lstm_seq,
    (const float* gx, const float* w_hh, const float* b_ih, const float* b_hh, const float* h0,
     const float* c0, float* y, float* h_out, float* c_out, float* state, const u64* step,
     i64 rows, int hid, i64 delay),
    (const float* gx, const bf16_t* w_hh, const bf16_t* b_ih, const bf16_t* b_hh,
     const bf16_t* h0, const bf16_t* c0, bf16_t* y, bf16_t* h_out, bf16_t* c_out, float* state,
     const u64* step, i64 rows, int hid, i64 delay),
    (gx, w_hh, b_ih, b_hh, h0, c0, y, h_out, c_out, state, step, rows, hid, delay))

// Unfold: out[n][s] = x[n * step - pad_before + s], zero before the signal.
template <typename T>
__device__ void unfold_impl(const T* x, T* out, u64 total, u64 size, u64 step, i64 pad_before) {
    GRID_STRIDE(i, total) {
        const i64 src = (i64)((i / size) * step + i % size) - pad_before;
        st(out, i, src < 0 ? 0.0f : ld(x, (u64)src));
    }
}

FLOAT_KERNELS(unfold,
    (const float* x, float* out, u64 total, u64 size, u64 step, i64 pad_before),
    (const bf16_t* x, bf16_t* out, u64 total, u64 size, u64 step, i64 pad_before),
    (x, out, total, size, step, pad_before))
