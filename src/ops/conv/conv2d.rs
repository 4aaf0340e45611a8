//! `Conv2d`: parameter and shape checks, facts, and its path (im2col into
//! `Scratch`, then one matrix product per group).

use super::{
    check_param, dilated_extent, group_sizes, out_dim, out_len, rank_in, valid_range,
    with_f32_buffers, Conv2d,
};
use crate::op_common;
use crate::ops::checks::{self, concrete, input_count_range, rank};
use crate::ops::matmul::{common_float_dtype, common_float_fact_dtype, gemm_f32, pack_len};
use crate::ops::{outputs_len, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

/// Concrete sizes of one Conv2d eval.
#[derive(Debug, Clone, Copy)]
struct Geo2 {
    n: usize,
    c: usize,
    hw: (usize, usize),
    o: usize,
    cg: usize,
    og: usize,
    k: (usize, usize),
    out: (usize, usize),
}

impl Conv2d {
    fn check_params(&self) -> OpResult<()> {
        check_param("stride", self.stride.0, 1)?;
        check_param("stride", self.stride.1, 1)?;
        check_param("dilation", self.dilation.0, 1)?;
        check_param("dilation", self.dilation.1, 1)?;
        check_param("groups", self.groups, 1)?;
        for p in self.pad {
            check_param("pad", p.0, 0)?;
            check_param("pad", p.1, 0)?;
        }
        Ok(())
    }

    fn geometry(&self, inputs: &[&Tensor]) -> OpResult<Geo2> {
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 3, 4, 0)?;
        if w.rank() != 4 {
            return Err(OpError::Rank {
                input: 1,
                expected: "4".into(),
                got: w.rank(),
            });
        }
        let r = x.rank();
        let n = if r == 4 { x.shape()[0] } else { 1 };
        let (c, h, wd) = (x.shape()[r - 3], x.shape()[r - 2], x.shape()[r - 1]);
        let ws = w.shape();
        let (o, w_in, k) = (ws[0], ws[1], (ws[2], ws[3]));
        let (cg, og) = group_sizes(self.groups, c, o, w_in, &[k.0, k.1])?;
        checks::bias_tensor(inputs, o)?;
        let ho = out_len(
            h,
            self.pad[0],
            dilated_extent(self.dilation.0, k.0),
            self.stride.0,
            "H",
        )?;
        let wo = out_len(
            wd,
            self.pad[1],
            dilated_extent(self.dilation.1, k.1),
            self.stride.1,
            "W",
        )?;
        Ok(Geo2 {
            n,
            c,
            hw: (h, wd),
            o,
            cg,
            og,
            k,
            out: (ho, wo),
        })
    }

    fn run(
        &self,
        g: &Geo2,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let p = g.out.0 * g.out.1;
        let kk = g.cg * g.k.0 * g.k.1;
        let (xn, on) = (g.c * g.hw.0 * g.hw.1, g.o * p);
        for i in 0..g.n {
            let (x, out) = (&x[i * xn..(i + 1) * xn], &mut out[i * on..(i + 1) * on]);
            match b {
                Some(b) => {
                    for (row, &bv) in out.chunks_exact_mut(p.max(1)).zip(b) {
                        row.fill(bv);
                    }
                }
                None => out.fill(0.0),
            }
            let (cols, pack) = work.split_at_mut(kk * p);
            for gi in 0..self.groups {
                self.im2col(g, x, gi * g.cg, cols);
                // cols is column-major [P, KK]; out is [O, P], i.e. (p, o) at o*P + p
                let dst = &mut out[gi * g.og * p..];
                gemm_f32(
                    p,
                    g.og,
                    kk,
                    dst,
                    (1, p),
                    cols,
                    (1, p),
                    &w[gi * g.og * kk..],
                    (1, kk),
                    true,
                    pack,
                )?;
            }
        }
        Ok(())
    }

    /// `cols[((ci*kh + i)*kw + j) * P + ho*W' + wo] = x[c0+ci, ho*sh + i*dh - ph, wo*sw + j*dw - pw]`.
    fn im2col(&self, g: &Geo2, x: &[f32], c0: usize, cols: &mut [f32]) {
        let ((h, wd), (ho_n, wo_n), (kh, kw)) = (g.hw, g.out, g.k);
        let p = ho_n * wo_n;
        let mut row = 0;
        for ci in 0..g.cg {
            let xc = &x[(c0 + ci) * h * wd..][..h * wd];
            for i in 0..kh {
                for j in 0..kw {
                    let dst = &mut cols[row * p..][..p];
                    row += 1;
                    let off_w = (j * self.dilation.1) as isize - self.pad[1].0 as isize;
                    let (lo, hi) = valid_range(off_w, self.stride.1, wd, wo_n);
                    for (ho, drow) in dst.chunks_exact_mut(wo_n.max(1)).enumerate().take(ho_n) {
                        let hi_in = (ho * self.stride.0 + i * self.dilation.0) as isize
                            - self.pad[0].0 as isize;
                        if hi_in < 0 || hi_in as usize >= h {
                            drow.fill(0.0);
                            continue;
                        }
                        let xr = &xc[hi_in as usize * wd..][..wd];
                        drow[..lo].fill(0.0);
                        drow[hi..].fill(0.0);
                        for (q, d) in drow[lo..hi].iter_mut().enumerate() {
                            *d = xr[(((lo + q) * self.stride.1) as isize + off_w) as usize];
                        }
                    }
                }
            }
        }
    }
}

impl Op for Conv2d {
    op_common!("Conv2d");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_fact_dtype(inputs)?;
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 3, 4, 0)?;
        rank(w, 1, 4)?;
        let r = x.rank();
        let c = concrete(&x.shape[r - 3], "conv input channels")?;
        let o = concrete(&w.shape[0], "conv output channels")?;
        let w_in = concrete(&w.shape[1], "conv weight channels")?;
        let kh = concrete(&w.shape[2], "conv kernel height")?;
        let kw = concrete(&w.shape[3], "conv kernel width")?;
        group_sizes(self.groups, c, o, w_in, &[kh, kw])?;
        checks::bias_fact(inputs, o)?;
        let ho = out_dim(
            &x.shape[r - 2],
            self.pad[0],
            dilated_extent(self.dilation.0, kh),
            self.stride.0,
            "H",
        )?;
        let wo = out_dim(
            &x.shape[r - 1],
            self.pad[1],
            dilated_extent(self.dilation.1, kw),
            self.stride.1,
            "W",
        )?;
        let mut shape = x.shape.clone();
        shape[r - 3] = Dim::from(o);
        shape[r - 2] = ho;
        shape[r - 1] = wo;
        Ok(vec![TypedFact::dt_shape(dt, &shape)])
    }

    fn eval(
        &self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_dtype(inputs)?;
        let g = self.geometry(inputs)?;
        let shape = [g.n, g.o, g.out.0, g.out.1];
        let shape = &shape[4 - inputs[0].rank()..];
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, shape);
        let (kk, p) = (g.cg * g.k.0 * g.k.1, g.out.0 * g.out.1);
        let work = kk * p + pack_len(p, kk);
        with_f32_buffers(
            inputs,
            &mut outputs[0],
            work,
            scratch,
            |x, w, b, out, work| self.run(&g, x, w, b, out, work),
        )
    }

    fn info(&self) -> String {
        format!(
            "stride {:?} dilation {:?} pad {:?} groups {}",
            self.stride, self.dilation, self.pad, self.groups
        )
    }
}
