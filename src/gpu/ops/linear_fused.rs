//! A Linear with what the rewrites (`gpu::rewrite`) fused into it: an
//! activation, `residual + y * alpha`, a GLU over its two halves, the layer
//! norm of its input (skinny kernel) or of its result (cuBLAS epilogue),
//! sibling Linears on the same input (skinny kernel). One type,
//! [`FusedLinearGpu`]: a [`LinearGpu`] and an [`Epilogue`] saying what was
//! fused. Its inputs and outputs follow one layout, derived from the
//! epilogue (no stored indices):
//!
//! - inputs: `x` (the raw input when the norm before is fused), `w`, the
//!   bias if any; then the residual; gamma and beta of the norm before;
//!   gamma and beta of the norm after; each sibling's weights and bias.
//! - outputs: `y`; then the norm after's output, or each sibling's output.
//!
//! A rewrite asks for the fused form with `with_*`, which answers `None`
//! when the kernels cannot take it; the plain Linear launches through the
//! same code with [`Epilogue::NONE`].

use super::linear::LinearGpu;
use super::linear_launch::launch_linear;
use crate::gpu::op::{downcast, GpuOp, Io, LaunchCx};
use crate::gpu::GpuError;

/// Siblings the skinny kernel computes besides its own output.
pub(crate) const MAX_SIBLINGS: usize = 2;
/// Widest row whose layer norm the cuBLAS epilogue can take on (a thread
/// per column of one block).
const NORM_AFTER_MAX_WIDTH: usize = 1024;

/// What is fused into a Linear, in the order its kernels apply it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Epilogue {
    /// A layer norm of the input over its last axis, with this eps.
    pub norm_before: Option<f32>,
    /// An `elementwise.cu` unary code, -1 for none.
    pub act: i32,
    /// `residual + y * alpha`, with this alpha.
    pub residual: Option<f32>,
    /// `a * sigmoid(b)` over the two halves of the last axis.
    pub glu: bool,
    /// A layer norm of the result, with this eps, written as output 1.
    pub norm_after: Option<f32>,
    /// Sibling Linears computed by the same launch (outputs 1, 2, ...).
    pub siblings: usize,
}

impl Epilogue {
    pub const NONE: Epilogue = Epilogue {
        norm_before: None,
        act: -1,
        residual: None,
        glu: false,
        norm_after: None,
        siblings: 0,
    };

    /// Where each fused input goes, for a Linear with or without a bias.
    pub(crate) fn layout(&self, bias: bool) -> Layout {
        let residual = 2 + bias as usize;
        let norm_before = residual + self.residual.is_some() as usize;
        let norm_after = norm_before + 2 * self.norm_before.is_some() as usize;
        let siblings = norm_after + 2 * self.norm_after.is_some() as usize;
        let per_sibling = 1 + bias as usize;
        Layout {
            residual,
            norm_before,
            norm_after,
            siblings,
            per_sibling,
            inputs: siblings + self.siblings * per_sibling,
            outputs: 1 + self.norm_after.is_some() as usize + self.siblings,
        }
    }
}

/// Input indices of a fused Linear's parts (see the module doc).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub residual: usize,
    /// Gamma, then beta.
    pub norm_before: usize,
    /// Gamma, then beta.
    pub norm_after: usize,
    /// The first sibling's weights.
    pub siblings: usize,
    pub per_sibling: usize,
    pub inputs: usize,
    pub outputs: usize,
}

/// A Linear and what was fused into it.
#[derive(Debug, Clone)]
pub(crate) struct FusedLinearGpu {
    pub(crate) linear: LinearGpu,
    pub(crate) ep: Epilogue,
}

impl FusedLinearGpu {
    /// `op` as a fused Linear, when it is a Linear's GPU form (fused
    /// already or not).
    pub(crate) fn of(op: &dyn GpuOp) -> Option<FusedLinearGpu> {
        if let Some(l) = downcast::<LinearGpu>(op) {
            return Some(FusedLinearGpu {
                linear: l.clone(),
                ep: Epilogue::NONE,
            });
        }
        downcast::<FusedLinearGpu>(op).cloned()
    }

    /// Index of the residual input.
    pub(crate) fn residual_input(&self) -> usize {
        self.ep.layout(self.linear.bias).residual
    }

    /// Index of the norm before's gamma (beta next).
    pub(crate) fn norm_before_input(&self) -> usize {
        self.ep.layout(self.linear.bias).norm_before
    }

    /// Index of the norm after's gamma (beta next).
    pub(crate) fn norm_after_input(&self) -> usize {
        self.ep.layout(self.linear.bias).norm_after
    }

    /// Index of the first sibling's weights; each sibling has
    /// [`Layout::per_sibling`] inputs.
    pub(crate) fn siblings_input(&self) -> usize {
        self.ep.layout(self.linear.bias).siblings
    }

    /// Inputs of each sibling: its weights, and its bias if any.
    pub(crate) fn sibling_inputs(&self) -> usize {
        self.ep.layout(self.linear.bias).per_sibling
    }

    fn fusable(&self) -> bool {
        !self.ep.glu && self.ep.siblings == 0
    }

    /// With an activation: the skinny kernel applies it, after cuBLAS the
    /// epilogue does.
    pub(crate) fn with_activation(mut self, code: i32) -> Option<Self> {
        if self.ep.siblings > 0 || self.ep.act >= 0 || self.ep.glu {
            return None;
        }
        self.ep.act = code;
        Some(self)
    }

    /// With `residual + y * alpha`.
    pub(crate) fn with_residual(mut self, alpha: f32) -> Option<Self> {
        if !self.fusable() || self.ep.residual.is_some() {
            return None;
        }
        self.ep.residual = Some(alpha);
        Some(self)
    }

    /// With a GLU: a skinny block's columns must pair up, and nothing else
    /// may be in the epilogue.
    pub(crate) fn with_glu(mut self) -> Option<Self> {
        let l = &self.linear;
        if !self.fusable()
            || self.ep.act >= 0
            || self.ep.residual.is_some()
            || !l.gemm.n.is_multiple_of(2)
            || (l.skinny.is_some() && l.warps_per_col > 4)
        {
            return None;
        }
        self.ep.glu = true;
        Some(self)
    }

    /// With the layer norm of its input: only the skinny kernel normalises
    /// rows as it loads them.
    pub(crate) fn with_norm_before(mut self, eps: f32) -> Option<Self> {
        if self.linear.skinny.is_none() || self.ep.norm_before.is_some() || self.ep.siblings > 0 {
            return None;
        }
        self.ep.norm_before = Some(eps);
        Some(self)
    }

    /// With the layer norm of its result: only the cuBLAS epilogue, a block
    /// per row, writes it.
    pub(crate) fn with_norm_after(mut self, eps: f32) -> Option<Self> {
        if self.linear.skinny.is_some()
            || self.ep.glu
            || self.ep.siblings > 0
            || self.ep.norm_after.is_some()
            || self.linear.gemm.n > NORM_AFTER_MAX_WIDTH
        {
            return None;
        }
        self.ep.norm_after = Some(eps);
        Some(self)
    }

    /// Computing `siblings` too (Linears of its shape and epilogue on the
    /// same input): a skinny block's columns must all belong to one output.
    pub(crate) fn with_siblings(mut self, siblings: &[FusedLinearGpu]) -> Option<Self> {
        let l = &self.linear;
        let cols = 8 / l.warps_per_col;
        let ok = !siblings.is_empty()
            && siblings.len() <= MAX_SIBLINGS
            && l.skinny.is_some()
            && self.fusable()
            && self.ep.residual.is_none()
            && l.gemm.n.is_multiple_of(cols)
            && siblings
                .iter()
                .all(|s| s.ep.siblings == 0 && self.same_form(s));
        if !ok {
            return None;
        }
        self.ep.siblings = siblings.len();
        Some(self)
    }

    /// Whether `other` computes the same shape with the same epilogue, so
    /// one skinny launch can compute both.
    fn same_form(&self, other: &FusedLinearGpu) -> bool {
        let (a, b) = (&self.linear, &other.linear);
        let (ga, gb) = (&a.gemm, &b.gemm);
        (ga.m, ga.n, ga.k, ga.dtype) == (gb.m, gb.n, gb.k, gb.dtype)
            && a.warps_per_col == b.warps_per_col
            && a.bias == b.bias
            && a.skinny.is_some()
            && b.skinny.is_some()
            && self.ep == other.ep
    }
}

impl GpuOp for FusedLinearGpu {
    fn describe(&self) -> String {
        describe(&self.linear, &self.ep)
    }

    fn scratch_bytes(&self) -> usize {
        scratch_bytes(&self.linear, &self.ep)
    }

    fn launch(&self, cx: &LaunchCx, io: &Io) -> Result<(), GpuError> {
        launch_linear(&self.linear, &self.ep, cx, io)
    }
}

/// The kernel names and what was fused, for `inspect --device cuda`.
pub(super) fn describe(l: &LinearGpu, ep: &Epilogue) -> String {
    let g = &l.gemm;
    let kind = if l.skinny.is_some() {
        "skinny linear"
    } else {
        "cuBLAS GEMM"
    };
    let mut d = format!("{kind} {}x{}x{} {}", g.m, g.n, g.k, g.dtype);
    if l.bias {
        d += " + bias";
    }
    if l.splits > 1 {
        d += &format!(" in {} slices of k", l.splits);
    }
    for (on, what) in [
        (ep.norm_before.is_some(), " + fused layer norm before"),
        (ep.act >= 0, " + fused activation"),
        (ep.residual.is_some(), " + fused residual"),
        (ep.glu, " + fused GLU"),
        (ep.norm_after.is_some(), " + the layer norm after it"),
    ] {
        if on {
            d += what;
        }
    }
    if ep.siblings > 0 {
        let s = if ep.siblings == 1 { "" } else { "s" };
        d += &format!(" + {} sibling{s}", ep.siblings);
    }
    d
}

/// cuBLAS's full product (before the GLU halves it) or its slices.
pub(super) fn scratch_bytes(l: &LinearGpu, ep: &Epilogue) -> usize {
    if l.skinny.is_none() && (ep.glu || l.splits > 1) {
        l.splits * l.gemm.m * l.gemm.n * l.gemm.dtype.size_of()
    } else {
        0
    }
}
