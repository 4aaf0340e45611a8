//! The pulsed LSTM: the recurrent state (h, c) lives in the op's state and is
//! carried from pulse to pulse; `reset()` brings back the graph's `h0`, `c0`.

use crate::op_common;
use crate::ops::lstm::Lstm;
use crate::ops::{outputs_len, Op, OpError, OpResult, OpState, Scratch, Tensor, TypedFact};

/// An [`Lstm`] over one pulse of a stream, starting from the state the
/// previous pulse left (the inputs `h0`, `c0` on the first pulse and after
/// a reset). Inputs and outputs are the `Lstm`'s: `y [P, H]`, `h [H]`, `c [H]`
/// (the state after this pulse). The first `delay` frames of the stream are
/// warm-up: they leave the state alone and give zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulsedLstm {
    pub lstm: Lstm,
    pub delay: usize,
}

impl Op for PulsedLstm {
    op_common!("PulsedLstm");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.lstm.output_facts(inputs)
    }

    fn eval(&self, _: &[&Tensor], _: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        Err(OpError::Other(
            "PulsedLstm keeps state: run it through its state".into(),
        ))
    }

    fn state(&self) -> Option<Box<dyn OpState>> {
        Some(Box::new(LstmState {
            op: self.clone(),
            h: None,
            c: None,
            seen: 0,
            outs: Vec::new(),
        }))
    }

    fn info(&self) -> String {
        format!("hidden {} delay {}", self.lstm.hidden, self.delay)
    }
}

/// The carried (h, c) of a [`PulsedLstm`]; `None` until the first pulse.
#[derive(Debug)]
pub struct LstmState {
    op: PulsedLstm,
    h: Option<Tensor>,
    c: Option<Tensor>,
    /// Stream frames seen so far, warm-up included.
    seen: usize,
    outs: Vec<Tensor>,
}

impl OpState for LstmState {
    fn eval(
        &mut self,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        scratch: &mut Scratch,
    ) -> OpResult<()> {
        crate::ops::checks::input_count(inputs, 7)?;
        let x = inputs[0];
        if x.rank() != 2 {
            return Err(OpError::Rank {
                input: 0,
                expected: "2".into(),
                got: x.rank(),
            });
        }
        let p = x.shape()[0];
        let skip = self.op.delay.saturating_sub(self.seen).min(p);
        self.seen += p;
        let (h, c) = match (&self.h, &self.c) {
            (Some(h), Some(c)) => (h, c),
            _ => (inputs[5], inputs[6]),
        };
        let narrowed;
        let x_real = if skip > 0 {
            narrowed = x.narrow(0, skip, p - skip)?;
            &narrowed
        } else {
            x
        };
        let ins = [x_real, inputs[1], inputs[2], inputs[3], inputs[4], h, c];
        self.op.lstm.eval(&ins, &mut self.outs, scratch)?;
        let (dt, hid) = (self.outs[0].dtype(), self.op.lstm.hidden);
        outputs_len(outputs, 3);
        outputs[0].ensure(dt, &[p, hid]);
        if skip > 0 {
            // warm-up frames give zeros; the real frames follow them
            outputs[0].copy_from(&zero_front(&self.outs[0], skip)?);
        } else {
            outputs[0].copy_from(&self.outs[0]);
        }
        outputs[1].copy_from(&self.outs[1]);
        outputs[2].copy_from(&self.outs[2]);
        match (&mut self.h, &mut self.c) {
            (Some(h), Some(c)) => {
                h.copy_from(&self.outs[1]);
                c.copy_from(&self.outs[2]);
            }
            _ => {
                self.h = Some(self.outs[1].contiguous());
                self.c = Some(self.outs[2].contiguous());
            }
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.h = None;
        self.c = None;
        self.seen = 0;
    }
}

/// `y` with `skip` zero frames in front (warm-up pulses only; allocates).
fn zero_front(y: &Tensor, skip: usize) -> OpResult<Tensor> {
    let f = y.cast(crate::ops::DType::F32);
    let h = y.shape()[1];
    let mut v = vec![0f32; skip * h];
    v.extend_from_slice(f.as_slice::<f32>()?);
    Ok(Tensor::from_vec(vec![skip + y.shape()[0], h], v)?.cast(y.dtype()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::ops::{DType, Dim};
    use crate::pulse::{pulsify, StreamingSession};

    fn seeded(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect()
    }

    /// x [S, I] -> LSTM -> y [S, H], h_T, c_T.
    fn graph(i: usize, h: usize) -> crate::graph::Graph {
        let mut b = GraphBuilder::new();
        let x = b
            .input("x", TypedFact::new(DType::F32, [Dim::s(), Dim::from(i)]))
            .unwrap();
        let t = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, seed| {
            let n = shape.iter().product();
            b.constant(name, Tensor::from_vec(shape, seeded(n, seed)).unwrap())
                .unwrap()
        };
        let ins = [
            x,
            t(&mut b, "w_ih", vec![4 * h, i], 1),
            t(&mut b, "w_hh", vec![4 * h, h], 2),
            t(&mut b, "b_ih", vec![4 * h], 3),
            t(&mut b, "b_hh", vec![4 * h], 4),
            t(&mut b, "h0", vec![h], 5),
            t(&mut b, "c0", vec![h], 6),
        ];
        let outs = b.op_multi("lstm", Lstm { hidden: h }, &ins).unwrap();
        b.output("y", outs[0]);
        b.output("h", outs[1]);
        b.output("c", outs[2]);
        b.build().unwrap()
    }

    #[test]
    fn pulsed_equals_whole_and_resets() {
        let (i, h, steps) = (3, 4, 7);
        let g = graph(i, h);
        let x = seeded(steps * i, 9);
        let whole = crate::graph::Runner::new(g.clone())
            .unwrap()
            .run(&[Tensor::from_vec(vec![steps, i], x.clone()).unwrap()])
            .unwrap();
        for pulse in [1, 2, 7] {
            let model = pulsify(&g, pulse).unwrap();
            let mut s = StreamingSession::new(model).unwrap();
            for _round in 0..2 {
                let outs = s.run_all(&x).unwrap();
                assert!(
                    outs[0].close_to(&whole[0], 1e-6, 1e-5),
                    "pulse {pulse}: y differs"
                );
                if steps % pulse == 0 {
                    assert!(
                        outs[1].close_to(&whole[1], 1e-6, 1e-5),
                        "pulse {pulse}: h differs"
                    );
                    assert!(
                        outs[2].close_to(&whole[2], 1e-6, 1e-5),
                        "pulse {pulse}: c differs"
                    );
                }
            }
        }
    }

    #[test]
    fn warm_up_frames_leave_the_state_alone() {
        let (i, h) = (2, 3);
        let g = graph(i, h);
        let n = g.nodes.iter().position(|n| n.name == "lstm").unwrap();
        let op = *g.nodes[n].op.as_any().downcast_ref::<Lstm>().unwrap();
        let consts: Vec<Tensor> = g.nodes[n].inputs[1..]
            .iter()
            .map(|o| {
                g.nodes[o.node]
                    .op
                    .as_any()
                    .downcast_ref::<crate::ops::Const>()
                    .unwrap()
                    .value
                    .clone()
            })
            .collect();
        let x = Tensor::from_vec(vec![3, i], seeded(3 * i, 4)).unwrap();
        let mut refs: Vec<&Tensor> = vec![&x];
        refs.extend(consts.iter());
        let direct = crate::ops::eval_op(&op, &refs).unwrap();
        // two warm-up frames, then the same three frames
        let mut padded = vec![0f32; 2 * i];
        padded.extend(x.to_vec::<f32>().unwrap());
        let xp = Tensor::from_vec(vec![5, i], padded).unwrap();
        let mut refs: Vec<&Tensor> = vec![&xp];
        refs.extend(consts.iter());
        let pulsed = crate::ops::eval_op(&PulsedLstm { lstm: op, delay: 2 }, &refs).unwrap();
        let y = pulsed[0].narrow(0, 2, 3).unwrap().contiguous();
        assert!(y.close_to(&direct[0], 1e-6, 1e-5));
        assert!(pulsed[1].close_to(&direct[1], 1e-6, 1e-5));
        assert_eq!(
            pulsed[0]
                .narrow(0, 0, 2)
                .unwrap()
                .contiguous()
                .to_vec::<f32>()
                .unwrap(),
            vec![0f32; 2 * h]
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let op = PulsedLstm {
            lstm: Lstm { hidden: 2 },
            delay: 0,
        };
        let x = Tensor::from_vec(vec![3], vec![0f32; 3]).unwrap();
        assert!(crate::ops::eval_op(&op, &[&x]).is_err());
        let mut st = op.state().unwrap();
        let mut outs = Vec::new();
        let w = Tensor::zeros(DType::F32, &[8, 1]);
        assert!(st
            .eval(
                &[&x, &w, &w, &w, &w, &w, &w],
                &mut outs,
                &mut Scratch::default()
            )
            .is_err());
    }
}
