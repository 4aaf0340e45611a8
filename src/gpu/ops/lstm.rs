//! Silero VAD's ops (`kernels/lstm.cu`): the LSTM, whole and pulsed, and
//! Unfold (the pulsed graph's Unfold is the whole op with no padding behind a
//! Delay, so one form serves both).
//!
//! One time row (Silero's pulse, and T = 1) is one fused kernel with a block
//! per slice of hidden units; more rows are an input projection over all
//! rows (many blocks) then the recurrence in one block. The pulsed LSTM's
//! (h, c) are f32 in the op's state, double-buffered by the step counter's
//! parity (`kernels/lstm.cu` says how); step 0 starts from the inputs h0, c0.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{
    expect_io, int, launch, long, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx, MAX_SHARED,
};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::lstm::Lstm;
use crate::pulse::{PulsedLstm, Unfold};

/// Hidden units per block of the one-row kernel.
const CELL_UNITS: usize = 8;
/// Threads of the one-row kernel: a warp per gate row of its 4 x 8.
const CELL_THREADS: u32 = 256;
/// Threads of the recurrence block.
const SEQ_THREADS: u32 = 512;
/// Threads of a projection block.
const PROJ_THREADS: u32 = 256;

#[derive(Debug)]
enum Plan {
    /// One row: `lstm_cell`.
    Cell { f: CudaFunction, grid: Grid },
    /// `lstm_proj` over every row into scratch (none when there are no
    /// rows), then `lstm_seq`.
    Seq {
        proj: Option<(CudaFunction, Grid)>,
        seq: CudaFunction,
        grid: Grid,
    },
}

#[derive(Debug)]
struct LstmGpu {
    plan: Plan,
    pulsed: bool,
    rows: usize,
    input: i32,
    hidden: i32,
    delay: i64,
}

impl LstmGpu {
    fn hid(&self) -> usize {
        self.hidden as usize
    }
}

impl GpuOp for LstmGpu {
    fn describe(&self) -> String {
        let how = match &self.plan {
            Plan::Cell { .. } => "lstm_cell",
            Plan::Seq { proj: Some(_), .. } => "lstm_proj + lstm_seq",
            Plan::Seq { proj: None, .. } => "lstm_seq",
        };
        format!(
            "{}{how} {} rows, input {}, hidden {}",
            if self.pulsed { "pulsed " } else { "" },
            self.rows,
            self.input,
            self.hidden
        )
    }

    fn state_bytes(&self) -> usize {
        if self.pulsed {
            // two buffers of (h, c), f32
            16 * self.hid()
        } else {
            0
        }
    }

    fn scratch_bytes(&self) -> usize {
        match self.plan {
            Plan::Seq { proj: Some(_), .. } => self.rows * 4 * self.hid() * 4,
            _ => 0,
        }
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("lstm", io, 7, 3)?;
        let p = |i: usize| Arg::Ptr(io.ins[i].ptr);
        let o = |i: usize| Arg::Ptr(io.outs[i].ptr);
        let (state, step) = if self.pulsed {
            (io.state, cx.step)
        } else {
            (0, 0)
        };
        match &self.plan {
            Plan::Cell { f, grid } => launch(
                cx,
                f,
                *grid,
                &[
                    p(0),
                    p(1),
                    p(2),
                    p(3),
                    p(4),
                    p(5),
                    p(6),
                    o(0),
                    o(1),
                    o(2),
                    Arg::Ptr(state),
                    Arg::Ptr(step),
                    Arg::I32(self.input),
                    Arg::I32(self.hidden),
                    Arg::I32(CELL_UNITS as i32),
                    Arg::I64(self.delay),
                ],
            ),
            Plan::Seq { proj, seq, grid } => {
                if let Some((f, g)) = proj {
                    launch(
                        cx,
                        f,
                        *g,
                        &[
                            p(0),
                            p(1),
                            Arg::Ptr(io.scratch),
                            Arg::U64(self.rows as u64),
                            Arg::I32(self.input),
                            Arg::I32(4 * self.hidden),
                        ],
                    )?;
                }
                launch(
                    cx,
                    seq,
                    *grid,
                    &[
                        Arg::Ptr(io.scratch),
                        p(2),
                        p(3),
                        p(4),
                        p(5),
                        p(6),
                        o(0),
                        o(1),
                        o(2),
                        Arg::Ptr(state),
                        Arg::Ptr(step),
                        Arg::I64(self.rows as i64),
                        Arg::I32(self.hidden),
                        Arg::I64(self.delay),
                    ],
                )
            }
        }
    }
}

#[derive(Debug)]
struct UnfoldGpu {
    f: CudaFunction,
    op: Unfold,
    total: usize,
}

impl GpuOp for UnfoldGpu {
    fn describe(&self) -> String {
        format!(
            "unfold size {} step {} pad_before {} ({} values)",
            self.op.size, self.op.step, self.op.pad_before, self.total
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("unfold", io, 1, 1)?;
        if self.total == 0 {
            return Ok(());
        }
        launch(
            cx,
            &self.f,
            Grid::linear(self.total),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::U64(self.total as u64),
                Arg::U64(self.op.size as u64),
                Arg::U64(self.op.step as u64),
                Arg::I64(self.op.pad_before as i64),
            ],
        )
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<PulsedLstm>(|p, cx| build_lstm(p.lstm.hidden, Some(p.delay), cx));
    r.add::<Lstm>(|l, cx| build_lstm(l.hidden, None, cx));
    r.add::<Unfold>(|&u, cx| build_unfold(u, cx));
}

/// `delay`: the stream delay of a [`PulsedLstm`], `None` for the whole op.
fn build_lstm(
    hidden: usize,
    delay: Option<usize>,
    cx: &BuildCx,
) -> Result<Box<dyn GpuOp>, GpuError> {
    if cx.inputs.len() != 7 || cx.outputs.len() != 3 {
        return Err(GpuError::arity(
            "lstm",
            "7 and 3",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let suffix = cx.suffix(0)?;
    let dt = cx.inputs[0].dtype;
    if cx.inputs.iter().chain(cx.outputs).any(|f| f.dtype != dt) {
        return Err(GpuError::mixed_dtypes("lstm"));
    }
    let x = cx.shape(0)?;
    if x.len() != 2 || x[1] == 0 || hidden == 0 {
        return Err(GpuError::refused(
            "lstm",
            format!("x {x:?} is not [T, I > 0] or hidden {hidden} is 0"),
        ));
    }
    let (rows, input) = (x[0], x[1]);
    let h4 = hidden
        .checked_mul(4)
        .ok_or_else(|| GpuError::refused("lstm", format!("hidden {hidden} too large")))?;
    let want: [&[usize]; 7] = [
        &x,
        &[h4, input],
        &[h4, hidden],
        &[h4],
        &[h4],
        &[hidden],
        &[hidden],
    ];
    for (i, w) in want.iter().enumerate() {
        let s = cx.shape(i)?;
        if s != *w {
            return Err(GpuError::refused(
                "lstm",
                format!("input {i} is {s:?}, expected {w:?}"),
            ));
        }
    }
    let outs: [&[usize]; 3] = [&[rows, hidden], &[hidden], &[hidden]];
    for (i, w) in outs.iter().enumerate() {
        let s = cx.out_shape(i)?;
        if s != *w {
            return Err(GpuError::refused(
                "lstm",
                format!("output {i} is {s:?}, expected {w:?}"),
            ));
        }
    }
    let (input_i, hidden_i) = (int("input size", input)?, int("hidden size", h4)? / 4);
    let plan = if rows == 1 {
        let shared = (input + hidden + 4 * CELL_UNITS) * 4;
        if shared > MAX_SHARED {
            return Err(GpuError::refused(
                "lstm",
                format!(
                    "input {input} and hidden {hidden} need {shared} bytes of shared memory \
                 (at most {MAX_SHARED})"
                ),
            ));
        }
        Plan::Cell {
            f: cx.lib.function("lstm", &format!("lstm_cell_{suffix}"))?,
            grid: Grid::blocks(hidden.div_ceil(CELL_UNITS) as u32, CELL_THREADS)
                .with_shared(shared as u32),
        }
    } else {
        let shared = 6 * hidden * 4;
        if shared > MAX_SHARED {
            return Err(GpuError::refused(
                "lstm",
                format!(
                    "hidden {hidden} needs {shared} bytes of shared memory (at most {MAX_SHARED})"
                ),
            ));
        }
        let warps = rows
            .checked_mul(h4)
            .ok_or_else(|| GpuError::refused("lstm", format!("{rows} rows too many")))?;
        let proj = if rows > 0 {
            let per_block = (PROJ_THREADS / 32) as usize;
            let blocks = warps.div_ceil(per_block).min(65_535) as u32;
            Some((
                cx.lib.function("lstm", &format!("lstm_proj_{suffix}"))?,
                Grid::blocks(blocks, PROJ_THREADS),
            ))
        } else {
            None
        };
        Plan::Seq {
            proj,
            seq: cx.lib.function("lstm", &format!("lstm_seq_{suffix}"))?,
            grid: Grid::blocks(1, SEQ_THREADS).with_shared(shared as u32),
        }
    };
    Ok(Box::new(LstmGpu {
        plan,
        pulsed: delay.is_some(),
        rows,
        input: input_i,
        hidden: hidden_i,
        delay: long("delay", delay.unwrap_or(0))?,
    }))
}

fn build_unfold(op: Unfold, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    if cx.inputs.len() != 1 || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            "unfold",
            "1 and 1",
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let suffix = cx.suffix(0)?;
    if cx.outputs[0].dtype != cx.inputs[0].dtype {
        return Err(GpuError::mixed_dtypes("unfold"));
    }
    if op.size == 0 || op.step == 0 || op.pad_before >= op.size {
        return Err(GpuError::refused(
            "unfold",
            format!("bad parameters {op:?}"),
        ));
    }
    let x = cx.shape(0)?;
    let out = cx.out_shape(0)?;
    let [t] = x[..] else {
        return Err(GpuError::refused(
            "unfold",
            format!("input {x:?} is not rank 1"),
        ));
    };
    let n = (t + op.pad_before)
        .checked_sub(op.size)
        .map(|r| r / op.step + 1)
        .ok_or_else(|| {
            GpuError::refused("unfold", format!("{t} samples are fewer than one window"))
        })?;
    if out != [n, op.size] {
        return Err(GpuError::refused(
            "unfold",
            format!("output {out:?}, expected {:?}", [n, op.size]),
        ));
    }
    Ok(Box::new(UnfoldGpu {
        f: cx.lib.function("lstm", &format!("unfold_{suffix}"))?,
        op,
        total: n * op.size,
    }))
}
