//! `Conv1d`: parameter and shape checks, facts, and the dense path (im2col
//! into `Scratch`, then one matrix product per group). Depthwise kernels
//! live in `depthwise`.

use super::depthwise::dw_stride;
use super::{
    check_param, dilated_extent, group_sizes, out_dim, out_len, rank_in, valid_range,
    with_f32_buffers, Conv1d, ConvLayout, Geo1,
};
use crate::op_common;
use crate::ops::checks::{self, concrete, input_count_range, rank};
use crate::ops::matmul::{
    common_float_dtype, common_float_fact_dtype, gemm_f32, gemm_rows, pack_len, rows_work_len,
    Strides,
};
use crate::ops::{outputs_len, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};

impl Conv1d {
    /// Frames one output frame sees: `dilation * (k - 1) + 1` (for `k >= 1`).
    pub fn extent(&self, k: usize) -> usize {
        dilated_extent(self.dilation, k)
    }

    fn check_params(&self) -> OpResult<()> {
        check_param("stride", self.stride, 1)?;
        check_param("dilation", self.dilation, 1)?;
        check_param("groups", self.groups, 1)?;
        check_param("pad before", self.pad.0, 0)?;
        check_param("pad after", self.pad.1, 0)
    }

    /// (channel axis, time axis) of `x` of this rank.
    pub(super) fn axes(&self, rank: usize) -> (usize, usize) {
        match self.layout {
            ConvLayout::ChannelsFirst => (rank - 2, rank - 1),
            ConvLayout::ChannelsLast => (rank - 1, rank - 2),
        }
    }

    fn is_depthwise(&self, g: &Geo1) -> bool {
        self.groups == g.c && g.o == g.c
    }

    pub(super) fn geometry(&self, inputs: &[&Tensor]) -> OpResult<Geo1> {
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 2, 3, 0)?;
        if w.rank() != 3 {
            return Err(OpError::Rank {
                input: 1,
                expected: "3".into(),
                got: w.rank(),
            });
        }
        let (c_ax, t_ax) = self.axes(x.rank());
        let (c, t) = (x.shape()[c_ax], x.shape()[t_ax]);
        let n = if x.rank() == 3 { x.shape()[0] } else { 1 };
        let (o, w_in, k) = (w.shape()[0], w.shape()[1], w.shape()[2]);
        let (cg, og) = group_sizes(self.groups, c, o, w_in, &[k])?;
        checks::bias_tensor(inputs, o)?;
        let t_out = out_len(t, self.pad, self.extent(k), self.stride, "time")?;
        Ok(Geo1 {
            n,
            c,
            t,
            o,
            cg,
            og,
            k,
            t_out,
        })
    }

    pub(super) fn work_len(&self, g: &Geo1) -> usize {
        if self.is_depthwise(g) {
            if self.layout == ConvLayout::ChannelsLast {
                (g.k + self.padded_rows(g)) * dw_stride(g.c)
            } else {
                0
            }
        } else {
            self.cols_len(g) + self.gemm_work_len(g)
        }
    }

    /// im2col buffer of the dense path (none for unpadded pointwise kernels).
    fn cols_len(&self, g: &Geo1) -> usize {
        if g.k == 1 && self.pad == (0, 0) {
            0
        } else {
            g.t_out * g.cg * g.k
        }
    }

    /// gemm scratch of one group: packing, plus the column-major product
    /// that `gemm_rows` transposes into a time-major output.
    fn gemm_work_len(&self, g: &Geo1) -> usize {
        match self.layout {
            ConvLayout::ChannelsLast => rows_work_len(g.t_out, g.og, g.cg * g.k),
            ConvLayout::ChannelsFirst => pack_len(g.t_out, g.cg * g.k),
        }
    }

    fn run(
        &self,
        g: &Geo1,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let (xn, on) = (g.c * g.t, g.o * g.t_out);
        for i in 0..g.n {
            let (x, out) = (&x[i * xn..(i + 1) * xn], &mut out[i * on..(i + 1) * on]);
            if self.is_depthwise(g) {
                match self.layout {
                    ConvLayout::ChannelsLast => self.depthwise_last(g, x, w, b, out, work),
                    ConvLayout::ChannelsFirst => self.depthwise_first(g, x, w, b, out),
                }
            } else {
                self.dense(g, x, w, b, out, work)?;
            }
        }
        Ok(())
    }
    /// im2col (`cols[t, ci*k + j]`) then one gemm per group.
    fn dense(
        &self,
        g: &Geo1,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        out: &mut [f32],
        work: &mut [f32],
    ) -> OpResult<()> {
        let last = self.layout == ConvLayout::ChannelsLast;
        let (cg, og, kk, t_out) = (g.cg, g.og, g.cg * g.k, g.t_out);
        let (xt, xc): Strides = if last { (g.c, 1) } else { (1, g.t) };
        if let (Some(b), false) = (b, last) {
            for (row, &bv) in out.chunks_exact_mut(t_out).zip(b) {
                row.fill(bv);
            }
        }
        let (cols, tmp) = work.split_at_mut(self.cols_len(g));
        for gi in 0..self.groups {
            let (c0, wg) = (gi * cg, &w[gi * og * kk..]);
            let (a, a_s): (&[f32], Strides) = if cols.is_empty() {
                // unpadded pointwise: gemm reads x through strides
                (&x[c0 * xc..], (self.stride * xt, xc))
            } else if last {
                self.im2col_last(g, x, c0, cols);
                (cols, (kk, 1))
            } else {
                self.im2col_first(g, x, c0, cols);
                (cols, (1, t_out))
            };
            if last {
                let bias = b.map(|b| &b[gi * og..(gi + 1) * og]);
                gemm_rows(
                    (t_out, og, kk),
                    &mut out[gi * og..],
                    g.o,
                    a,
                    a_s,
                    wg,
                    (1, kk),
                    bias,
                    tmp,
                )?;
            } else {
                let dst = &mut out[gi * og * t_out..];
                gemm_f32(
                    t_out,
                    og,
                    kk,
                    dst,
                    (1, t_out),
                    a,
                    a_s,
                    wg,
                    (1, kk),
                    b.is_some(),
                    tmp,
                )?;
            }
        }
        Ok(())
    }

    /// Row-major `cols[t, ci*k + j] = x[t*stride + j*dilation - pad.0, c0 + ci]`.
    fn im2col_last(&self, g: &Geo1, x: &[f32], c0: usize, cols: &mut [f32]) {
        let (cg, k) = (g.cg, g.k);
        for (t, crow) in cols
            .chunks_exact_mut((cg * k).max(1))
            .enumerate()
            .take(g.t_out)
        {
            for j in 0..k {
                let src = (t * self.stride + j * self.dilation) as isize - self.pad.0 as isize;
                if src < 0 || src as usize >= g.t {
                    for ci in 0..cg {
                        crow[ci * k + j] = 0.0;
                    }
                    continue;
                }
                let xr = &x[src as usize * g.c + c0..][..cg];
                for (ci, &v) in xr.iter().enumerate() {
                    crow[ci * k + j] = v;
                }
            }
        }
    }

    /// Column-major `cols` (`cols[(ci*k + j) * t_out + t]`), filled one
    /// contiguous run per (channel, tap).
    fn im2col_first(&self, g: &Geo1, x: &[f32], c0: usize, cols: &mut [f32]) {
        let (k, t_out, s) = (g.k, g.t_out, self.stride);
        for ci in 0..g.cg {
            let xr = &x[(c0 + ci) * g.t..][..g.t];
            for j in 0..k {
                let dst = &mut cols[(ci * k + j) * t_out..][..t_out];
                let off = (j * self.dilation) as isize - self.pad.0 as isize;
                let (lo, hi) = valid_range(off, s, g.t, t_out);
                dst[..lo].fill(0.0);
                dst[hi..].fill(0.0);
                for (i, d) in dst[lo..hi].iter_mut().enumerate() {
                    *d = xr[(((lo + i) * s) as isize + off) as usize];
                }
            }
        }
    }
}

impl Op for Conv1d {
    op_common!("Conv1d");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        input_count_range(inputs, 2, 3)?;
        self.check_params()?;
        let dt = common_float_fact_dtype(inputs)?;
        let (x, w) = (inputs[0], inputs[1]);
        rank_in(x.rank(), 2, 3, 0)?;
        rank(w, 1, 3)?;
        let (c_ax, t_ax) = self.axes(x.rank());
        let c = concrete(&x.shape[c_ax], "conv input channels")?;
        let o = concrete(&w.shape[0], "conv output channels")?;
        let w_in = concrete(&w.shape[1], "conv weight channels")?;
        let k = concrete(&w.shape[2], "conv kernel size")?;
        group_sizes(self.groups, c, o, w_in, &[k])?;
        checks::bias_fact(inputs, o)?;
        let t = out_dim(
            &x.shape[t_ax],
            self.pad,
            self.extent(k),
            self.stride,
            "time",
        )?;
        let mut shape = x.shape.clone();
        shape[c_ax] = Dim::from(o);
        shape[t_ax] = t;
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
        let mut shape = [g.n, g.o, g.t_out];
        let (c_ax, t_ax) = self.axes(3);
        shape[c_ax] = g.o;
        shape[t_ax] = g.t_out;
        let shape = &shape[3 - inputs[0].rank()..];
        outputs_len(outputs, 1);
        outputs[0].ensure(dt, shape);
        let work = self.work_len(&g);
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
            "stride {} dilation {} pad {:?} groups {} {:?}",
            self.stride, self.dilation, self.pad, self.groups, self.layout
        )
    }
}
