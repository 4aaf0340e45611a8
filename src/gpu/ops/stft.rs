//! The spectral front end (`kernels/stft.cu`): Stft as a direct DFT with
//! exact twiddles (every output mode, centred or not, with or without a
//! batch axis), LogMel and Log.

use cudarc::driver::CudaFunction;

use crate::gpu::op::{expect_io, int, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx, MAX_SHARED};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::mel::{Log, LogMel};
use crate::ops::stft::{Stft, StftOutput};

/// Warps of an STFT block (`STFT_WARPS` in stft.cu).
const STFT_WARPS: u32 = 8;
/// Rows of a LogMel block (`MEL_ROWS`) and its warps (`MEL_WARPS`).
const MEL_ROWS: usize = 4;
const MEL_WARPS: u32 = 8;
/// Largest `n_fft`: its frame and twiddle table live in a block's shared memory.
const MAX_N_FFT: usize = 2048;
/// Frames a block of `stft4` takes (`STFT_GROUP` in stft.cu).
const STFT_GROUP: usize = 4;
/// Frames (all streams') from which blocks take `STFT_GROUP` frames each:
/// once the GPU is full of blocks the loop's instructions are the limit,
/// and a twiddle read then serves several frames (H100, 128 streams x 32
/// frames: 291 us a step with one frame a block, ncu).
const STFT_GROUP_ROWS: usize = 1024;

/// The kernel suffix when `n` inputs and the one output share a float dtype.
fn common_suffix(cx: &BuildCx, n: usize, what: &str) -> Result<&'static str, GpuError> {
    if cx.inputs.len() != n || cx.outputs.len() != 1 {
        return Err(GpuError::arity(
            what,
            format!("{n} and 1"),
            cx.inputs.len(),
            cx.outputs.len(),
        ));
    }
    let suffix = cx.suffix(0)?;
    let dt = cx.inputs[0].dtype;
    if cx.inputs.iter().any(|f| f.dtype != dt) || cx.outputs[0].dtype != dt {
        return Err(GpuError::mixed_dtypes(what));
    }
    Ok(suffix)
}

#[derive(Debug)]
struct StftGpu {
    f: CudaFunction,
    grid: Grid,
    /// s, frames, n_fft, hop, pad, bins, mode.
    ints: [i32; 7],
    /// All streams' frames, and how many a block takes.
    rows: usize,
    group: usize,
    empty: bool,
}

impl GpuOp for StftGpu {
    fn describe(&self) -> String {
        let [s, frames, n_fft, hop, ..] = self.ints;
        format!(
            "stft direct DFT n_fft {n_fft} hop {hop}: {s} samples -> {frames} frames ({} blocks of {} frame{})",
            self.grid.grid.0,
            self.group,
            if self.group == 1 { "" } else { "s" }
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("stft", io, 2, 1)?;
        if self.empty {
            return Ok(());
        }
        let [s, frames, n_fft, hop, pad, bins, mode] = self.ints;
        launch(
            cx,
            &self.f,
            self.grid,
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::I32(s),
                Arg::I32(frames),
                Arg::I32(n_fft),
                Arg::I32(hop),
                Arg::I32(pad),
                Arg::I32(bins),
                Arg::I32(mode),
                Arg::U64(self.rows as u64),
            ],
        )
    }
}

/// LogMel's GPU form; fused with a fixed feature normalisation after it
/// (`gpu::rewrite`), `(y - a) * b` with `a` and `b` read as inputs 2 and 3.
#[derive(Debug, Clone)]
pub(crate) struct LogMelGpu {
    f: CudaFunction,
    grid: Grid,
    rows: usize,
    bins: usize,
    mels: usize,
    eps: f32,
    /// Whether `(y - a) * b` is fused.
    affine: bool,
}

impl LogMelGpu {
    /// With `(y - a) * b` after it (`a`, `b` vectors over the mels, read as
    /// inputs 2 and 3).
    pub(crate) fn with_affine(&self) -> Option<LogMelGpu> {
        (!self.affine).then(|| LogMelGpu {
            affine: true,
            ..self.clone()
        })
    }
}

impl GpuOp for LogMelGpu {
    fn describe(&self) -> String {
        format!(
            "logmel {} rows x {} bins -> {} mels{}",
            self.rows,
            self.bins,
            self.mels,
            if self.affine {
                " + fused normalisation"
            } else {
                ""
            }
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("logmel", io, 2 + 2 * self.affine as usize, 1)?;
        if self.rows == 0 {
            return Ok(());
        }
        let (sub, mul) = match self.affine {
            true => (io.ins[2].ptr, io.ins[3].ptr),
            false => (io.outs[0].ptr, io.outs[0].ptr),
        };
        launch(
            cx,
            &self.f,
            self.grid,
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.ins[1].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::U64(self.rows as u64),
                Arg::I32(self.bins as i32),
                Arg::I32(self.mels as i32),
                Arg::F32(self.eps),
                Arg::Ptr(sub),
                Arg::Ptr(mul),
                Arg::I32(self.affine as i32),
            ],
        )
    }
}

#[derive(Debug)]
struct LogGpu {
    f: CudaFunction,
    n: usize,
    eps: f32,
}

impl GpuOp for LogGpu {
    fn describe(&self) -> String {
        format!("ln(x + {}) ({} elements)", self.eps, self.n)
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("log", io, 1, 1)?;
        if self.n == 0 {
            return Ok(());
        }
        launch(
            cx,
            &self.f,
            Grid::linear(self.n),
            &[
                Arg::Ptr(io.ins[0].ptr),
                Arg::Ptr(io.outs[0].ptr),
                Arg::U64(self.n as u64),
                Arg::F32(self.eps),
            ],
        )
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<Stft>(|s, cx| Ok(Box::new(build_stft(s, cx)?)));
    r.add::<LogMel>(|m, cx| Ok(Box::new(build_logmel(m, cx)?)));
    r.add::<Log>(|l, cx| Ok(Box::new(build_log(l, cx)?)));
}

fn build_stft(op: &Stft, cx: &BuildCx) -> Result<StftGpu, GpuError> {
    let suffix = common_suffix(cx, 2, "stft")?;
    let (sig, win) = (cx.shape(0)?, cx.shape(1)?);
    let n_fft = op.n_fft();
    if !(1..=2).contains(&sig.len()) || win != [n_fft] {
        return Err(GpuError::refused(
            "stft",
            format!(
                "signal {} and window {} (rank 1-2 and [{n_fft}])",
                cx.inputs[0], cx.inputs[1]
            ),
        ));
    }
    if n_fft > MAX_N_FFT {
        return Err(GpuError::refused(
            "stft",
            format!("n_fft {n_fft} is above the {MAX_N_FFT} a block's shared memory holds"),
        ));
    }
    let s = sig[sig.len() - 1];
    let batch = if sig.len() == 2 { sig[0] } else { 1 };
    let pad = if op.center() { n_fft / 2 } else { 0 };
    // the CPU op's own length rules: one reflection must stay in the signal
    if (op.center() && s <= pad) || s + 2 * pad < n_fft {
        return Err(GpuError::refused(
            "stft",
            format!(
                "{s} samples are too few for n_fft {n_fft}{}",
                if op.center() { " centred" } else { "" }
            ),
        ));
    }
    let frames = (s + 2 * pad - n_fft) / op.hop() + 1;
    let bins = op.bins();
    let mut want = sig[..sig.len() - 1].to_vec();
    want.extend([frames, bins]);
    let mode = match op.output() {
        StftOutput::Complex => {
            want.push(2);
            0
        }
        StftOutput::Magnitude => 1,
        StftOutput::Power => 2,
    };
    let out = cx.out_shape(0)?;
    if out != want {
        return Err(GpuError::refused(
            "stft",
            format!("output {out:?}, the STFT gives {want:?}"),
        ));
    }
    let rows = batch * frames;
    // the frames and the skewed cos and sin tables (`tw_at` in stft.cu)
    let table = (n_fft - 1) + (n_fft - 1) / 32 + 1;
    let shared = |group: usize| (group * n_fft + 2 * table) * 4;
    let group = if rows >= STFT_GROUP_ROWS && shared(STFT_GROUP) <= MAX_SHARED {
        STFT_GROUP
    } else {
        1
    };
    let blocks = rows.div_ceil(group) * bins.div_ceil(32);
    if blocks > i32::MAX as usize {
        return Err(GpuError::refused("stft", format!("{blocks} blocks")));
    }
    let ints = [
        int("stft: signal length", s)?,
        int("stft: frames", frames)?,
        n_fft as i32,
        int("stft: hop", op.hop())?,
        pad as i32,
        bins as i32,
        mode,
    ];
    // frame starts t * hop must fit an int too
    int(
        "stft: last frame start",
        (frames - 1).saturating_mul(op.hop()),
    )?;
    let name = if group == 1 { "stft" } else { "stft4" };
    Ok(StftGpu {
        f: cx.lib.function("stft", &format!("{name}_{suffix}"))?,
        grid: Grid::blocks(blocks as u32, STFT_WARPS * 32).with_shared(shared(group) as u32),
        ints,
        rows,
        group,
        empty: blocks == 0,
    })
}

fn build_logmel(op: &LogMel, cx: &BuildCx) -> Result<LogMelGpu, GpuError> {
    let suffix = common_suffix(cx, 2, "logmel")?;
    if !op.eps.is_finite() {
        return Err(GpuError::refused("logmel", format!("epsilon {}", op.eps)));
    }
    let (p, fb) = (cx.shape(0)?, cx.shape(1)?);
    let (Some(&bins), [fb_bins, mels]) = (p.last(), fb.as_slice()) else {
        return Err(GpuError::refused(
            "logmel",
            format!(
                "power {} and filterbank {} (rank >= 1 and 2)",
                cx.inputs[0], cx.inputs[1]
            ),
        ));
    };
    let (fb_bins, mels) = (*fb_bins, *mels);
    if bins != fb_bins || bins == 0 || mels == 0 {
        return Err(GpuError::refused(
            "logmel",
            format!("power {p:?} through filterbank {fb:?}"),
        ));
    }
    let mut want = p.clone();
    if let Some(l) = want.last_mut() {
        *l = mels;
    }
    let out = cx.out_shape(0)?;
    if out != want {
        return Err(GpuError::refused(
            "logmel",
            format!("output {out:?}, expected {want:?}"),
        ));
    }
    int("logmel: bins", bins)?;
    int("logmel: mels", mels)?;
    let rows: usize = p[..p.len() - 1].iter().product();
    let blocks = rows.div_ceil(MEL_ROWS) * mels.div_ceil(32);
    if blocks > i32::MAX as usize {
        return Err(GpuError::refused("logmel", format!("{blocks} blocks")));
    }
    Ok(LogMelGpu {
        f: cx.lib.function("stft", &format!("logmel_{suffix}"))?,
        grid: Grid::blocks(blocks as u32, MEL_WARPS * 32),
        rows,
        bins,
        mels,
        eps: op.eps,
        affine: false,
    })
}

fn build_log(op: &Log, cx: &BuildCx) -> Result<LogGpu, GpuError> {
    let suffix = common_suffix(cx, 1, "log")?;
    if !op.eps.is_finite() {
        return Err(GpuError::refused("log", format!("epsilon {}", op.eps)));
    }
    let n = cx.shape(0)?.iter().product();
    if cx.out_shape(0)?.iter().product::<usize>() != n {
        return Err(GpuError::refused(
            "log",
            "output size differs from the input's",
        ));
    }
    Ok(LogGpu {
        f: cx.lib.function("stft", &format!("log_eps_{suffix}"))?,
        n,
        eps: op.eps,
    })
}
