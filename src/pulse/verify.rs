//! Checks of the streaming invariants for one graph and input: streaming
//! equivalence (invariant 1) and per-step fact consistency (invariant 2).
//! Tests use it; so can anyone who writes a new graph.

use super::{pulsify, StreamingSession};
use crate::graph::{Graph, OutletId, Runner};
use crate::ops::{DType, Tensor};
use crate::{Error, Result};

/// What [`check_streaming`] measured.
#[derive(Debug, Clone)]
pub struct StreamingReport {
    /// Largest absolute difference per output, pulsed vs whole.
    pub max_abs_diff: Vec<f32>,
    /// Output delays in frames.
    pub delays: Vec<usize>,
    /// Steps run.
    pub steps: u64,
}

/// Pulsifies `graph` with `pulse`, runs `input` (a rank-1 f32 signal, or
/// frames of `input_frame` values) through it in pushes of the given sizes
/// (cycled), and compares with the whole-utterance run. At every step,
/// every node's output shape must equal its pulsed fact. Fails when an
/// output differs by more than `tol` (absolute, plus `tol` relative).
pub fn check_streaming(
    graph: &Graph,
    pulse: usize,
    input: &Tensor,
    pushes: &[usize],
    tol: f32,
) -> Result<StreamingReport> {
    let mut whole = Runner::new(graph.clone())?;
    let expected = whole.run(std::slice::from_ref(input))?;
    let model = pulsify(graph, pulse)?;
    let mut session = StreamingSession::new(model)?;
    let values = input.cast(DType::F32).to_vec::<f32>()?;
    let frame = input.len() / input.shape().first().copied().unwrap_or(1).max(1);
    let mut chunks = Vec::new();
    let mut at = 0;
    let mut k = 0;
    while at < values.len() {
        let n = (pushes
            .get(k % pushes.len().max(1))
            .copied()
            .unwrap_or(pulse)
            .max(1)
            * frame)
            .min(values.len() - at);
        k += 1;
        let before = session.steps();
        chunks.extend(session.push(&values[at..at + n])?);
        if session.steps() > before {
            check_step_facts(&session)?;
        }
        at += n;
    }
    chunks.extend(session.finish()?);
    check_step_facts(&session)?;
    let mut report = StreamingReport {
        max_abs_diff: Vec::new(),
        delays: Vec::new(),
        steps: session.steps(),
    };
    for (i, exp) in expected.iter().enumerate() {
        let st = session
            .model()
            .output_stream(i)
            .ok_or_else(|| Error::Graph(format!("output {i} does not stream")))?;
        let mut got: Vec<f32> = Vec::new();
        let mut next = 0u64;
        let mut frames = 0usize;
        for c in chunks.iter().filter(|c| c.output == i) {
            if c.start != next {
                return Err(Error::Graph(format!(
                    "output {i}: chunk starts at {} but {next} frames came before",
                    c.start
                )));
            }
            next += c.data.shape()[st.axis] as u64;
            frames += c.data.shape()[st.axis];
            got.extend(c.data.move_axis(st.axis, 0)?.to_f32_vec());
        }
        let want = exp.move_axis(st.axis, 0)?;
        if frames != want.shape()[0] {
            return Err(Error::Graph(format!(
                "output {i}: pulsed run gave {frames} frames, whole run {}",
                want.shape()[0]
            )));
        }
        let want = want.to_f32_vec();
        let mut worst = 0f32;
        for (j, (a, b)) in got.iter().zip(&want).enumerate() {
            let d = (a - b).abs();
            if d.is_nan() || d > tol + tol * b.abs() {
                return Err(Error::Graph(format!(
                    "output {i}: element {j} (frame {}) pulsed {a} vs whole {b}",
                    j / (want.len() / frames.max(1)).max(1)
                )));
            }
            worst = worst.max(d);
        }
        report.max_abs_diff.push(worst);
        report.delays.push(st.delay);
    }
    Ok(report)
}

/// Invariant 2 at run time: every node output of the last step has exactly
/// the shape and dtype of its pulsed fact.
pub fn check_step_facts(session: &StreamingSession) -> Result<()> {
    let model = session.model();
    for (id, node) in model.graph.nodes.iter().enumerate() {
        for slot in 0..node.facts.len() {
            let o = OutletId::new(id, slot);
            let pf = model.fact(o)?;
            let Some(v) = session.runner().value(o) else {
                continue;
            };
            let want = pf.fact.concrete_shape();
            if want.as_deref() != Some(v.shape()) || pf.fact.dtype != v.dtype() {
                return Err(Error::Graph(format!(
                    "step {}: node `{}` produced {}{:?}, its pulsed fact is {}",
                    session.steps(),
                    node.name,
                    v.dtype(),
                    v.shape(),
                    pf.fact
                )));
            }
        }
    }
    Ok(())
}
