//! The launch of a Linear with what was fused into it ([`Epilogue`]): the
//! skinny kernel for few rows, or cuBLAS and one epilogue kernel. The
//! plain Linear launches here too, with [`Epilogue::NONE`]. Inputs and
//! outputs follow the layout of `linear_fused.rs`.

use super::linear::{LinearGpu, SKINNY_GROUP};
use super::linear_fused::{Epilogue, MAX_SIBLINGS};
use crate::gpu::op::{expect_io, launch, Arg, Grid, Io, LaunchCx};
use crate::gpu::GpuError;

/// Whether the cuBLAS path needs its epilogue kernel.
fn has_epilogue(l: &LinearGpu, ep: &Epilogue) -> bool {
    l.splits > 1
        || l.bias
        || ep.act >= 0
        || ep.residual.is_some()
        || ep.glu
        || ep.norm_after.is_some()
}

/// Launches a Linear with `ep` fused: the skinny kernel, or cuBLAS and its
/// epilogue.
pub(crate) fn launch_linear(
    l: &LinearGpu,
    ep: &Epilogue,
    cx: &LaunchCx,
    io: &Io,
) -> Result<(), GpuError> {
    let at = ep.layout(l.bias);
    let outs = at.outputs;
    expect_io("linear", io, at.inputs, outs)?;
    let y = io.outs[0].ptr;
    if io.outs[0].is_empty() {
        return Ok(());
    }
    let input = |i: usize| io.ins[i].ptr;
    // both kernels end their arguments with the residual and the GLU
    let tail = [
        Arg::F32(ep.residual.unwrap_or(1.0)),
        Arg::Ptr(match ep.residual {
            Some(_) => input(at.residual),
            None => y,
        }),
        Arg::I32(ep.residual.is_some() as i32),
        Arg::I32(ep.glu as i32),
    ];
    // any valid address when there is no bias
    let bias = if l.bias { input(2) } else { input(1) };
    let g = &l.gemm;
    if let Some(kernel) = &l.skinny {
        // blocks of 8 warps, `warps_per_col` warps to a column
        let cols = 8 / l.warps_per_col;
        let blocks = if ep.glu {
            (g.n / 2).div_ceil(cols / 2)
        } else {
            g.n.div_ceil(cols)
        };
        let (gamma, beta, eps) = match ep.norm_before {
            Some(eps) => (input(at.norm_before), input(at.norm_before + 1), eps),
            None => (y, y, 0.0),
        };
        let groups = g.m.div_ceil(SKINNY_GROUP).max(1);
        // each sibling: its weights, its bias if any, its output
        let mut sib = [(0u64, 0u64, 0u64); MAX_SIBLINGS];
        for (j, s) in sib.iter_mut().take(ep.siblings).enumerate() {
            let first = at.siblings + j * at.per_sibling;
            let w = input(first);
            let b = if l.bias { input(first + 1) } else { w };
            *s = (w, b, io.outs[1 + j].ptr);
        }
        return launch(
            cx,
            kernel,
            Grid {
                grid: ((blocks * outs) as u32, groups as u32, 1),
                block: (256, 1, 1),
                shared_bytes: 0,
            },
            &[
                Arg::Ptr(input(0)),
                Arg::Ptr(input(1)),
                Arg::Ptr(bias),
                Arg::Ptr(y),
                Arg::I32(g.m as i32),
                Arg::I32(g.n as i32),
                Arg::I32(g.k as i32),
                Arg::I32(ep.act),
                Arg::I32(l.bias as i32),
                Arg::I32(l.warps_per_col as i32),
                tail[0],
                tail[1],
                tail[2],
                tail[3],
                Arg::Ptr(gamma),
                Arg::Ptr(beta),
                Arg::F32(eps),
                Arg::I32(ep.norm_before.is_some() as i32),
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
    // a GLU's output is narrower than the product, and slices are summed
    // by the epilogue: those go to scratch
    let acc = if ep.glu || l.splits > 1 {
        io.scratch
    } else {
        y
    };
    let gemm = g.split_k(l.splits);
    cx.blas.gemm(&gemm, input(0), input(1), acc)?;
    if !has_epilogue(l, ep) {
        return Ok(());
    }
    let slices = [Arg::I32(l.splits as i32), Arg::U64(gemm.stride_c as u64)];
    if let Some(eps) = ep.norm_after {
        return launch(
            cx,
            &l.epilogue_norm,
            Grid::blocks(g.m as u32, g.n.next_multiple_of(32) as u32),
            &[
                Arg::Ptr(acc),
                Arg::Ptr(bias),
                Arg::Ptr(y),
                Arg::I32(g.n as i32),
                Arg::I32(l.bias as i32),
                Arg::I32(ep.act),
                tail[0],
                tail[1],
                tail[2],
                Arg::Ptr(input(at.norm_after)),
                Arg::Ptr(input(at.norm_after + 1)),
                Arg::F32(eps),
                Arg::Ptr(io.outs[1].ptr),
                slices[0],
                slices[1],
            ],
        );
    }
    let width = if ep.glu { g.n / 2 } else { g.n };
    launch(
        cx,
        &l.epilogue,
        Grid::linear(g.m * width),
        &[
            Arg::Ptr(acc),
            Arg::Ptr(bias),
            Arg::Ptr(y),
            Arg::U64(g.m as u64),
            Arg::U64(g.n as u64),
            Arg::I32(l.bias as i32),
            Arg::I32(ep.act),
            tail[0],
            tail[1],
            tail[2],
            tail[3],
            slices[0],
            slices[1],
        ],
    )
}
