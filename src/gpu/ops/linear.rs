//! Linear and MatMul. A Linear of few rows (a chunk step's) runs the skinny
//! kernel with everything fused into it; otherwise cuBLAS, then one
//! epilogue kernel for its bias, activation, residual or GLU.

use cudarc::driver::CudaFunction;

use crate::gpu::blas::{k_splits, Gemm};
use crate::gpu::op::{downcast, expect_io, launch, Arg, BuildCx, GpuOp, Grid, Io, LaunchCx};
use crate::gpu::ops::Builders;
use crate::gpu::GpuError;
use crate::ops::matmul::{Linear, MatMul};

/// Rows a skinny block holds (its largest compile-time row bound).
const SKINNY_GROUP: usize = 16;
/// Widest row whose layer norm the cuBLAS epilogue can take on (a thread
/// per column of one block).
const NORM_COPY_MAX_WIDTH: usize = 1024;
/// Siblings the skinny kernel computes besides its own output.
const MAX_SIBLINGS: usize = 2;
/// Rows up to which the skinny kernel, in groups of [`SKINNY_GROUP`] rows
/// (a batch of streams' pulses), is used instead of cuBLAS. Measured on the
/// H100 (batched shipped model, captured f32 step): 2 groups beat cuBLAS
/// (4 streams: 0.85 vs 0.96 ms), 4 groups lose (8 streams: 1.39 vs 1.02 ms),
/// since every group reads the weights again.
const SKINNY_ROWS: usize = 2 * SKINNY_GROUP;

#[derive(Debug)]
struct LinearGpu {
    gemm: Gemm,
    /// Whether input 2 is a bias.
    bias: bool,
    /// `linear_epilogue_*`, after cuBLAS, and `linear_epilogue_norm_*`
    /// in its place once the layer norm of the result is taken on.
    epilogue: CudaFunction,
    epilogue_norm: CudaFunction,
    /// That layer norm: (eps, index of gamma; then beta and the norm's
    /// buffer).
    norm_copy: Option<(f32, usize)>,
    /// `skinny_linear_r*` for few rows (bias fused), and its warps per column.
    skinny: Option<CudaFunction>,
    warps_per_col: usize,
    /// A fused activation's unary code, -1 for none.
    act: i32,
    /// A fused `residual + y * alpha`: (alpha, index of the residual input).
    residual: Option<(f32, usize)>,
    /// A fused GLU over the output's two halves.
    glu: bool,
    /// A fused layer norm of the input: (eps, index of the raw input, then
    /// gamma and beta).
    norm: Option<(f32, usize)>,
    /// Sibling Linears computed in this launch: (how many, index of the
    /// first's weights; then its bias if any, its output, the next's ...).
    siblings: Option<(usize, usize)>,
    /// Slices of k cuBLAS computes apart (in scratch), summed by the
    /// epilogue; 1: the product is written whole.
    splits: usize,
}

impl LinearGpu {
    fn fusable(&self) -> bool {
        !self.glu && self.siblings.is_none()
    }

    /// Whether the cuBLAS path needs its epilogue kernel.
    fn has_epilogue(&self) -> bool {
        self.splits > 1
            || self.bias
            || self.act >= 0
            || self.residual.is_some()
            || self.glu
            || self.norm_copy.is_some()
    }

    /// Whether `other` computes the same shape with the same epilogue, so
    /// one skinny launch can compute both.
    fn same_form(&self, other: &LinearGpu) -> bool {
        let (a, b) = (&self.gemm, &other.gemm);
        (a.m, a.n, a.k, a.dtype) == (b.m, b.n, b.k, b.dtype)
            && self.warps_per_col == other.warps_per_col
            && self.bias == other.bias
            && self.skinny.is_some()
            && other.skinny.is_some()
            && (self.act, self.residual, self.glu, self.norm)
                == (other.act, other.residual, other.glu, other.norm)
    }
}

impl GpuOp for LinearGpu {
    fn describe(&self) -> String {
        let g = &self.gemm;
        format!(
            "{} {}x{}x{} {}{}",
            if self.skinny.is_some() {
                "skinny linear"
            } else {
                "cuBLAS GEMM"
            },
            g.m,
            g.n,
            g.k,
            g.dtype,
            if self.bias { " + bias" } else { "" }
        ) + [
            (
                self.splits > 1,
                format!(" in {} slices of k", self.splits).as_str(),
            ),
            (self.norm.is_some(), " + fused layer norm before"),
            (self.act >= 0, " + fused activation"),
            (self.residual.is_some(), " + fused residual"),
            (self.glu, " + fused GLU"),
            (self.norm_copy.is_some(), " + the layer norm after it"),
        ]
        .iter()
        .filter(|f| f.0)
        .map(|f| f.1)
        .collect::<String>()
        .as_str()
            + &self.siblings.map_or(String::new(), |(n, _)| {
                format!(" + {n} sibling{}", if n == 1 { "" } else { "s" })
            })
    }

    fn scratch_bytes(&self) -> usize {
        // cuBLAS's full product (before the GLU halves it) or its slices
        if self.skinny.is_none() && (self.glu || self.splits > 1) {
            self.splits * self.gemm.m * self.gemm.n * self.gemm.dtype.size_of()
        } else {
            0
        }
    }

    fn fuse_residual(&mut self, alpha: f32, input: usize) -> bool {
        if !self.fusable() || self.residual.is_some() {
            return false;
        }
        self.residual = Some((alpha, input));
        true
    }

    fn fuse_glu(&mut self) -> bool {
        // a skinny block's columns must pair up, and nothing else in the
        // epilogue
        if !self.fusable()
            || self.act >= 0
            || self.residual.is_some()
            || !self.gemm.n.is_multiple_of(2)
            || (self.skinny.is_some() && self.warps_per_col > 4)
        {
            return false;
        }
        self.glu = true;
        true
    }

    fn fuse_norm(&mut self, eps: f32, input: usize) -> bool {
        if self.skinny.is_none() || self.norm.is_some() || self.siblings.is_some() {
            return false;
        }
        self.norm = Some((eps, input));
        true
    }

    fn fuse_norm_copy(&mut self, eps: f32, input: usize) -> bool {
        if self.skinny.is_some()
            || self.glu
            || self.siblings.is_some()
            || self.norm_copy.is_some()
            || self.gemm.n > NORM_COPY_MAX_WIDTH
        {
            return false;
        }
        self.norm_copy = Some((eps, input));
        true
    }

    fn fuse_siblings(&mut self, siblings: &[&dyn GpuOp], input: usize) -> bool {
        // a block's columns must all belong to one output
        let cols = 8 / self.warps_per_col;
        let ok = !siblings.is_empty()
            && siblings.len() <= MAX_SIBLINGS
            && self.skinny.is_some()
            && self.fusable()
            && self.residual.is_none()
            && self.gemm.n.is_multiple_of(cols)
            && siblings.iter().all(|s| {
                downcast::<LinearGpu>(*s).is_some_and(|s| s.siblings.is_none() && self.same_form(s))
            });
        if ok {
            self.siblings = Some((siblings.len(), input));
        }
        ok
    }

    fn fuse_activation(&mut self, code: i32) -> bool {
        // the skinny kernel applies it; after cuBLAS the epilogue does
        if self.siblings.is_some() || self.act >= 0 || self.glu {
            return false;
        }
        self.act = code;
        true
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("linear", io, 2, 1)?;
        let y = io.outs[0].ptr;
        if io.outs[0].is_empty() {
            return Ok(());
        }
        let extra = |i: usize| -> Result<u64, GpuError> {
            io.ins
                .get(i)
                .map(|t| t.ptr)
                .ok_or_else(|| GpuError::MissingInput {
                    op: "linear".into(),
                    index: i,
                })
        };
        // both kernels end their arguments with the residual and the GLU
        let tail = [
            Arg::F32(self.residual.map_or(1.0, |r| r.0)),
            Arg::Ptr(match self.residual {
                Some((_, i)) => extra(i)?,
                None => y,
            }),
            Arg::I32(self.residual.is_some() as i32),
            Arg::I32(self.glu as i32),
        ];
        // from the node's own inputs (fused extras come after them); any
        // valid address when there is no bias
        let bias = if self.bias {
            io.ins[2].ptr
        } else {
            io.ins[1].ptr
        };
        if let Some(f) = &self.skinny {
            let g = &self.gemm;
            // blocks of 8 warps, `warps_per_col` warps to a column
            let cols = 8 / self.warps_per_col;
            let blocks = if self.glu {
                (g.n / 2).div_ceil(cols / 2)
            } else {
                g.n.div_ceil(cols)
            };
            let (x, gamma, beta, eps) = match self.norm {
                Some((eps, i)) => (extra(i)?, extra(i + 1)?, extra(i + 2)?, eps),
                None => (io.ins[0].ptr, y, y, 0.0),
            };
            let groups = g.m.div_ceil(SKINNY_GROUP).max(1);
            // each sibling: its weights, its bias if any, its output
            let mut sib = [(0u64, 0u64, 0u64); MAX_SIBLINGS];
            let outs = match self.siblings {
                Some((count, first)) => {
                    let per = 2 + self.bias as usize;
                    for (j, s) in sib.iter_mut().take(count).enumerate() {
                        let at = first + j * per;
                        let w = extra(at)?;
                        let b = if self.bias { extra(at + 1)? } else { w };
                        *s = (w, b, extra(at + per - 1)?);
                    }
                    1 + count
                }
                None => 1,
            };
            return launch(
                cx,
                f,
                Grid {
                    grid: ((blocks * outs) as u32, groups as u32, 1),
                    block: (256, 1, 1),
                    shared_bytes: 0,
                },
                &[
                    Arg::Ptr(x),
                    Arg::Ptr(io.ins[1].ptr),
                    Arg::Ptr(bias),
                    Arg::Ptr(y),
                    Arg::I32(g.m as i32),
                    Arg::I32(g.n as i32),
                    Arg::I32(g.k as i32),
                    Arg::I32(self.act),
                    Arg::I32(self.bias as i32),
                    Arg::I32(self.warps_per_col as i32),
                    tail[0],
                    tail[1],
                    tail[2],
                    tail[3],
                    Arg::Ptr(gamma),
                    Arg::Ptr(beta),
                    Arg::F32(eps),
                    Arg::I32(self.norm.is_some() as i32),
                    Arg::I32(outs as i32),
                    Arg::Ptr(sib[0].0),
                    Arg::Ptr(sib[0].1),
                    Arg::Ptr(sib[0].2),
                    Arg::Ptr(sib[1].0),
                    Arg::Ptr(sib[1].1),
                    Arg::Ptr(sib[1].2),
                ],
            );
        }
        // a GLU's output is narrower than the product, and slices are
        // summed by the epilogue: those go to scratch
        let acc = if self.glu || self.splits > 1 {
            io.scratch
        } else {
            y
        };
        let g = &self.gemm;
        let gemm = g.split_k(self.splits);
        cx.blas.gemm(&gemm, io.ins[0].ptr, io.ins[1].ptr, acc)?;
        if !self.has_epilogue() {
            return Ok(());
        }
        let slices = [Arg::I32(self.splits as i32), Arg::U64(gemm.stride_c as u64)];
        if let Some((eps, at)) = self.norm_copy {
            return launch(
                cx,
                &self.epilogue_norm,
                Grid::blocks(g.m as u32, g.n.next_multiple_of(32) as u32),
                &[
                    Arg::Ptr(acc),
                    Arg::Ptr(bias),
                    Arg::Ptr(y),
                    Arg::I32(g.n as i32),
                    Arg::I32(self.bias as i32),
                    Arg::I32(self.act),
                    tail[0],
                    tail[1],
                    tail[2],
                    Arg::Ptr(extra(at)?),
                    Arg::Ptr(extra(at + 1)?),
                    Arg::F32(eps),
                    Arg::Ptr(extra(at + 2)?),
                    slices[0],
                    slices[1],
                ],
            );
        }
        let width = if self.glu { g.n / 2 } else { g.n };
        launch(
            cx,
            &self.epilogue,
            Grid::linear(g.m * width),
            &[
                Arg::Ptr(acc),
                Arg::Ptr(bias),
                Arg::Ptr(y),
                Arg::U64(g.m as u64),
                Arg::U64(g.n as u64),
                Arg::I32(self.bias as i32),
                Arg::I32(self.act),
                tail[0],
                tail[1],
                tail[2],
                tail[3],
                slices[0],
                slices[1],
            ],
        )
    }
}

#[derive(Debug)]
struct MatMulGpu {
    gemm: Gemm,
}

impl GpuOp for MatMulGpu {
    fn describe(&self) -> String {
        let g = &self.gemm;
        format!(
            "cuBLAS GEMM {}x{}x{} x{} {}",
            g.m, g.n, g.k, g.batch, g.dtype
        )
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        expect_io("matmul", io, 2, 1)?;
        if io.outs[0].is_empty() {
            return Ok(());
        }
        cx.blas
            .gemm(&self.gemm, io.ins[0].ptr, io.ins[1].ptr, io.outs[0].ptr)
    }
}

pub(super) fn register(r: &mut Builders) {
    r.add::<Linear>(|_, cx| build_linear(cx));
    r.add::<MatMul>(build_matmul);
}

fn build_linear(cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    let suffix = cx.suffix(0)?;
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    let k = *x
        .last()
        .ok_or_else(|| GpuError::refused("linear", "scalar input"))?;
    let m = x[..x.len() - 1].iter().product();
    let n = w[0];
    let bias = cx.inputs.len() > 2;
    let epilogue = cx
        .lib
        .function("linear", &format!("linear_epilogue_{suffix}"))?;
    let epilogue_norm = cx
        .lib
        .function("linear", &format!("linear_epilogue_norm_{suffix}"))?;
    let fits_i32 = [m, n, k].iter().all(|&v| v <= i32::MAX as usize);
    let skinny = if m <= SKINNY_ROWS && fits_i32 {
        let bound = m.clamp(1, SKINNY_GROUP).next_power_of_two();
        Some(
            cx.lib
                .function("linear", &format!("skinny_linear_r{bound}_{suffix}"))?,
        )
    } else {
        None
    };
    // long rows get more warps each, short rows share a block
    let warps_per_col = if k >= 512 { 8 } else { 4 };
    let dtype = cx.inputs[0].dtype;
    let splits = match skinny {
        None => k_splits(dtype, m, n, k),
        Some(_) => 1,
    };
    Ok(Box::new(LinearGpu {
        gemm: Gemm::linear(dtype, m, n, k),
        bias,
        epilogue,
        epilogue_norm,
        norm_copy: None,
        skinny,
        warps_per_col,
        act: -1,
        residual: None,
        glu: false,
        norm: None,
        siblings: None,
        splits,
    }))
}

fn build_matmul(op: &MatMul, cx: &BuildCx) -> Result<Box<dyn GpuOp>, GpuError> {
    cx.suffix(0)?;
    let (a, b) = (cx.shape(0)?, cx.shape(1)?);
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = if op.transpose_a {
        (a[ra - 1], a[ra - 2])
    } else {
        (a[ra - 2], a[ra - 1])
    };
    let n = if op.transpose_b { b[rb - 2] } else { b[rb - 1] };
    let batch_a: usize = a[..ra - 2].iter().product();
    let batch_b: usize = b[..rb - 2].iter().product();
    let out = cx.out_shape(0)?;
    let batch: usize = out[..out.len() - 2].iter().product();
    // Strided batches cover equal batch shapes and a shared (unbatched) B or A.
    let stride = |bat: usize, elems: usize, what: &str| -> Result<usize, GpuError> {
        if bat == batch {
            Ok(elems)
        } else if bat == 1 {
            Ok(0)
        } else {
            Err(GpuError::refused(
                "matmul",
                format!("{what} batch {bat} broadcasts in a way strided GEMM does not cover (output batch {batch})"),
            ))
        }
    };
    let gemm = Gemm {
        dtype: cx.inputs[0].dtype,
        m,
        n,
        k: ka,
        trans_a: op.transpose_a,
        trans_b: op.transpose_b,
        lda: a[ra - 1],
        ldb: b[rb - 1],
        ldc: n,
        batch,
        stride_a: stride(batch_a, m * ka, "A")?,
        stride_b: stride(batch_b, ka * n, "B")?,
        stride_c: m * n,
        alpha: 1.0,
        beta: 0.0,
    };
    Ok(Box::new(MatMulGpu { gemm }))
}
