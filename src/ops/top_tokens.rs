//! TopTokens: a decoder step's choice of next tokens where its logits are,
//! so that a GPU step hands back `k` candidates a row instead of the whole
//! vocabulary (51,864 floats a row for Whisper). Each row's logits go
//! through the token rules CTranslate2 applies to Whisper (tokens
//! suppressed always or at the first free step, ranges the timestamp rules
//! disable, and the check that moves to timestamps when their total
//! probability beats every text token's), then a log-softmax; the `k`
//! best entries plus the row's running score come out, best first.
//!
//! [`choose_row`] is the host's form of one row: the op's CPU evaluation,
//! and the reference the GPU kernel is held to. It equals the decoder's
//! host path (`LogitRules::apply`, `log_softmax`, `top_k`) entry for entry
//! (`whisper::decode::logits` tests).

use super::checks::input_count;
use super::shape::{exact_dtype, Shaped};
use super::{outputs_len, DType, Dim, Op, OpError, OpResult, Scratch, Tensor, TypedFact};
use crate::op_common;

/// What a suppressed token's logit becomes: the lowest finite float, as
/// CTranslate2 does, so sums over suppressed entries stay finite.
pub const DISABLED: f32 = f32::MIN;

/// Disabled ranges a row may carry.
pub const RANGES: usize = 4;
/// `i64` values per row of the rules input.
pub const ROW_PARAMS: usize = 2 * RANGES + 6;

/// The rules of one row.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RowRules {
    /// Inclusive id ranges set to [`DISABLED`] (empty when `lo > hi`).
    pub ranges: [(u32, u32); RANGES],
    /// The first-free-step list applies (mask bit 1).
    pub begin: bool,
    /// Timestamp ids `begin ..= end`: after the ranges, when their summed
    /// probability beats every token below `begin`, those are disabled.
    pub check: Option<(u32, u32)>,
    /// The softmax probability of this id in the raw logits is wanted (the
    /// no-speech probability).
    pub no_speech: Option<u32>,
    /// Draw the row's token instead of taking the best: `(temperature,
    /// u)`, `u` uniform in [0, 1) from the caller's generator, so that the
    /// draw is the one the host's sampler makes with it.
    pub sample: Option<(f32, f64)>,
}

impl RowRules {
    /// A row with no rule but the masks' always-suppressed bit.
    pub const NONE: RowRules = RowRules {
        ranges: [(1, 0); RANGES],
        begin: false,
        check: None,
        no_speech: None,
        sample: None,
    };

    /// The row as the op's rules input holds it ([`ROW_PARAMS`] values).
    pub fn encode(&self) -> [i64; ROW_PARAMS] {
        let mut v = [0i64; ROW_PARAMS];
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            v[2 * i] = lo as i64;
            v[2 * i + 1] = hi as i64;
        }
        let r = 2 * RANGES;
        v[r] = i64::from(self.begin) | (i64::from(self.check.is_some()) << 1);
        v[r + 1] = self.no_speech.map_or(-1, i64::from);
        let (b, e) = self.check.unwrap_or((0, 0));
        v[r + 2] = b as i64;
        v[r + 3] = e as i64;
        // bit patterns: a temperature of 0 is no sampling
        let (t, u) = self.sample.unwrap_or((0.0, 0.0));
        v[r + 4] = i64::from(t.to_bits());
        v[r + 5] = u.to_bits() as i64;
        v
    }

    /// The inverse of [`RowRules::encode`]; `None` for values it never makes.
    pub fn decode(v: &[i64]) -> Option<RowRules> {
        if v.len() != ROW_PARAMS {
            return None;
        }
        let id = |x: i64| u32::try_from(x).ok();
        let mut ranges = [(1, 0); RANGES];
        for (i, r) in ranges.iter_mut().enumerate() {
            *r = (id(v[2 * i])?, id(v[2 * i + 1])?);
        }
        let r = 2 * RANGES;
        let flags = v[r];
        Some(RowRules {
            ranges,
            begin: flags & 1 != 0,
            check: if flags & 2 != 0 {
                Some((id(v[r + 2])?, id(v[r + 3])?))
            } else {
                None
            },
            no_speech: if v[r + 1] < 0 {
                None
            } else {
                Some(id(v[r + 1])?)
            },
            sample: {
                let t = f32::from_bits(u32::try_from(v[r + 4]).ok()?);
                (t > 0.0).then(|| (t, f64::from_bits(v[r + 5] as u64)))
            },
        })
    }
}

/// Mask bits: suppressed in every row, and in rows whose `begin` is set.
pub const MASK_ALWAYS: u8 = 1;
pub const MASK_BEGIN: u8 = 2;

/// The op's `masks [2, vocab]` as one byte per id ([`MASK_ALWAYS`],
/// [`MASK_BEGIN`]), as [`choose_row`] reads them.
pub fn mask_bytes(masks: &[bool], vocab: usize) -> Vec<u8> {
    (0..vocab)
        .map(|j| {
            let bit = |row: usize, b: u8| if masks[row * vocab + j] { b } else { 0 };
            bit(0, MASK_ALWAYS) | bit(1, MASK_BEGIN)
        })
        .collect()
}

/// Sum of `exp(v - max)` accumulated in f64: CTranslate2's vectorised f32
/// reductions are close to exact, a sequential f32 sum over 51865 entries
/// is not.
fn sum_exp(x: &[f32], max: f32) -> f32 {
    x.iter().map(|&v| (v - max).exp() as f64).sum::<f64>() as f32
}

fn max_of(x: impl Iterator<Item = f32>) -> f32 {
    x.fold(f32::NEG_INFINITY, f32::max)
}

/// In-place log-softmax in f32 (`x - max - ln(sum(exp(x - max)))`).
pub fn log_softmax(x: &mut [f32]) {
    let max = max_of(x.iter().copied());
    let shift = max + sum_exp(x, max).ln();
    for v in x.iter_mut() {
        *v -= shift;
    }
}

/// Softmax probability of entry `id` in `logits` (the no-speech probability).
pub fn softmax_at(logits: &[f32], id: u32) -> f32 {
    let max = max_of(logits.iter().copied());
    let sum = sum_exp(logits, max);
    logits
        .get(id as usize)
        .map_or(0.0, |&v| (v - max).exp() / sum)
}

/// Whether the timestamps' (`begin ..= end`) total probability is above
/// every text token's (ids below `begin`), on log-probabilities as
/// CTranslate2 compares them.
pub fn timestamps_outweigh_text(logits: &[f32], begin: usize, end: usize) -> bool {
    let max = max_of(logits.iter().copied());
    let shift = max + sum_exp(logits, max).ln();
    let max_text = max_of(logits[..begin].iter().map(|&v| v - shift));
    let ts = &logits[begin..=end];
    let ts_max = max_of(ts.iter().map(|&v| v - shift));
    let timestamp = if ts_max == f32::NEG_INFINITY {
        ts_max
    } else {
        let sum: f64 = ts
            .iter()
            .map(|&v| ((v - shift) - ts_max).exp() as f64)
            .sum();
        ts_max + (sum as f32).ln()
    };
    timestamp > max_text
}

/// The `k` largest entries of `x` as `(index, value)`, best first (the
/// lower index first on ties).
pub fn top_k(x: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut top: Vec<(usize, f32)> = Vec::with_capacity(k + 1);
    for (i, &v) in x.iter().enumerate() {
        if top.len() == k && top.last().is_some_and(|&(_, w)| v <= w) {
            continue;
        }
        let pos = top.partition_point(|&(_, w)| w >= v);
        top.insert(pos, (i, v));
        top.truncate(k);
    }
    top
}

/// The likeliest entry and its value (the lowest id on ties).
pub fn argmax(x: &[f32]) -> (u32, f32) {
    let mut best = (0u32, f32::NEG_INFINITY);
    for (i, &v) in x.iter().enumerate() {
        if v > best.1 {
            best = (i as u32, v);
        }
    }
    best
}

/// One row: `logits` with the rules `r` and the masks `mask` (a byte per
/// id, [`MASK_ALWAYS`] / [`MASK_BEGIN`]) applied, log-softmaxed, `cum`
/// added; returns the `k` best `(id, score)`, best first (the lower id on
/// ties), or the row's draw when `r` samples, and the no-speech
/// probability when `r` asks for it.
pub fn choose_row(
    logits: &[f32],
    r: &RowRules,
    mask: &[u8],
    cum: f32,
    k: usize,
) -> (Vec<(u32, f32)>, Option<f32>) {
    let vocab = logits.len();
    let no_speech = r.no_speech.map(|id| softmax_at(logits, id));
    let mut l = logits.to_vec();
    let bits = MASK_ALWAYS | if r.begin { MASK_BEGIN } else { 0 };
    for (v, &m) in l.iter_mut().zip(mask) {
        if m & bits != 0 {
            *v = DISABLED;
        }
    }
    let disable = |l: &mut [f32], lo: usize, hi: usize| {
        let hi = hi.min(vocab.saturating_sub(1));
        if lo <= hi && lo < vocab {
            l[lo..=hi].fill(DISABLED);
        }
    };
    for &(lo, hi) in &r.ranges {
        disable(&mut l, lo as usize, hi as usize);
    }
    if let Some((b, e)) = r.check {
        let (b, e) = (b as usize, (e as usize).min(vocab.saturating_sub(1)));
        if b > 0 && b <= e && timestamps_outweigh_text(&l, b, e) {
            disable(&mut l, 0, b - 1);
        }
    }
    log_softmax(&mut l);
    if let Some((t, u)) = r.sample {
        let (id, lp) = draw(&l, t, u);
        return (vec![(id, lp + cum)], no_speech);
    }
    l.iter_mut().for_each(|v| *v += cum);
    let best = top_k(&l, k).into_iter().map(|(i, s)| (i as u32, s));
    (best.collect(), no_speech)
}

/// A token drawn from `softmax(log_probs / temperature)` by inverse CDF
/// with the uniform `u` (the lowest id whose running weight passes `u`
/// times the total), with its log-probability; the best on the rare float
/// miss at the top.
pub fn draw(log_probs: &[f32], temperature: f32, u: f64) -> (u32, f32) {
    let max = max_of(log_probs.iter().copied());
    let weights: Vec<f64> = log_probs
        .iter()
        .map(|&v| (((v - max) / temperature) as f64).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut left = u * total;
    for (i, &w) in weights.iter().enumerate() {
        if left < w && w > 0.0 {
            return (i as u32, log_probs[i]);
        }
        left -= w;
    }
    argmax(log_probs)
}

/// Inputs: `logits [rows, vocab]` f32, `rules [rows, ROW_PARAMS]` i64
/// ([`RowRules::encode`]), `cum [rows]` f32 (each row's running score) and
/// `masks [2, vocab]` bool (row 0: suppressed always, row 1: at the first
/// free step). Outputs: `ids [rows, k]` i64 and `scores [rows, k]` f32,
/// best first, and `no_speech [rows]` f32 (0 where not asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopTokens {
    pub k: usize,
}

impl TopTokens {
    fn check<S: Shaped>(&self, inputs: &[&S]) -> OpResult<()> {
        input_count(inputs, 4)?;
        exact_dtype(inputs[0], 0, DType::F32)?;
        exact_dtype(inputs[1], 1, DType::I64)?;
        exact_dtype(inputs[2], 2, DType::F32)?;
        exact_dtype(inputs[3], 3, DType::Bool)?;
        if self.k == 0 {
            return Err(OpError::Param("top tokens: k must be at least 1".into()));
        }
        let ranks = [2, 2, 1, 2];
        if let Some(i) = (0..4).find(|&i| inputs[i].ndim() != ranks[i]) {
            return Err(OpError::Shape(format!(
                "top tokens: input {i} has rank {}, expected {}",
                inputs[i].ndim(),
                ranks[i]
            )));
        }
        Ok(())
    }
}

impl Op for TopTokens {
    op_common!("TopTokens");

    fn output_facts(&self, inputs: &[&TypedFact]) -> OpResult<Vec<TypedFact>> {
        self.check(inputs)?;
        let rows = inputs[0].shape[0];
        let k = Dim::n(self.k as i64);
        Ok(vec![
            TypedFact::new(DType::I64, [rows, k]),
            TypedFact::new(DType::F32, [rows, k]),
            TypedFact::new(DType::F32, [rows]),
        ])
    }

    fn eval(&self, inputs: &[&Tensor], outputs: &mut Vec<Tensor>, _: &mut Scratch) -> OpResult<()> {
        self.check(inputs)?;
        let (rows, vocab) = (inputs[0].shape()[0], inputs[0].shape()[1]);
        let shapes_ok = inputs[1].shape() == [rows, ROW_PARAMS]
            && inputs[2].shape() == [rows]
            && inputs[3].shape() == [2, vocab];
        if !shapes_ok {
            return Err(OpError::Shape(format!(
                "top tokens: logits {:?} with rules {:?}, scores {:?} and masks {:?}",
                inputs[0].shape(),
                inputs[1].shape(),
                inputs[2].shape(),
                inputs[3].shape()
            )));
        }
        let logits = inputs[0].as_slice::<f32>()?;
        let rules = inputs[1].as_slice::<i64>()?;
        let cum = inputs[2].as_slice::<f32>()?;
        let masks = inputs[3].as_slice::<bool>()?;
        let mask = mask_bytes(masks, vocab);
        let k = self.k;
        outputs_len(outputs, 3);
        let mut ids = vec![0i64; rows * k];
        let mut scores = vec![f32::NEG_INFINITY; rows * k];
        let mut no_speech = vec![0f32; rows];
        for row in 0..rows {
            let r = RowRules::decode(&rules[row * ROW_PARAMS..(row + 1) * ROW_PARAMS]).ok_or_else(
                || OpError::Other(format!("top tokens: row {row}'s rules are not valid")),
            )?;
            let (best, ns) = choose_row(
                &logits[row * vocab..(row + 1) * vocab],
                &r,
                &mask,
                cum[row],
                k,
            );
            for (j, (id, s)) in best.into_iter().enumerate() {
                ids[row * k + j] = id as i64;
                scores[row * k + j] = s;
            }
            no_speech[row] = ns.unwrap_or(0.0);
        }
        outputs[0] = Tensor::from_vec(vec![rows, k], ids)?;
        outputs[1] = Tensor::from_vec(vec![rows, k], scores)?;
        outputs[2] = Tensor::from_vec(vec![rows], no_speech)?;
        Ok(())
    }

    fn info(&self) -> String {
        format!("k {}", self.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_round_trip_through_the_input_row() {
        let r = RowRules {
            ranges: [(0, 9), (12, 12), (1, 0), (20, 30)],
            begin: true,
            check: Some((20, 40)),
            no_speech: Some(7),
            sample: Some((0.4, 0.625)),
        };
        assert_eq!(RowRules::decode(&r.encode()), Some(r));
        assert_eq!(
            RowRules::decode(&RowRules::NONE.encode()),
            Some(RowRules::NONE)
        );
        assert_eq!(RowRules::decode(&[0; 3]), None);
    }

    #[test]
    fn the_op_chooses_per_row_after_its_rules() {
        // vocab 6; row 0: id 4 suppressed always, so 3 then 5 lead; row 1:
        // begin list (id 3) and a range 0..=1 off, running score 2
        let logits = Tensor::from_vec(
            vec![2, 6],
            vec![0.0, 1.0, 2.0, 3.0, 9.0, 2.5, 5.0, 1.0, 0.0, 4.0, 9.0, 0.5],
        )
        .unwrap();
        let mut row1 = RowRules::NONE;
        row1.begin = true;
        row1.ranges[0] = (0, 1);
        let rules: Vec<i64> = [RowRules::NONE, row1]
            .iter()
            .flat_map(|r| r.encode())
            .collect();
        let rules = Tensor::from_vec(vec![2, ROW_PARAMS], rules).unwrap();
        let cum = Tensor::from_vec(vec![2], vec![0.0f32, 2.0]).unwrap();
        let mut m = vec![false; 12];
        m[4] = true; // always
        m[6 + 3] = true; // at the first free step
        let masks = Tensor::from_vec(vec![2, 6], m).unwrap();
        let mut out = Vec::new();
        TopTokens { k: 2 }
            .eval(
                &[&logits, &rules, &cum, &masks],
                &mut out,
                &mut Scratch::default(),
            )
            .unwrap();
        assert_eq!(out[0].as_slice::<i64>().unwrap(), &[3, 5, 5, 2]);
        let s = out[1].as_slice::<f32>().unwrap();
        assert!(s[0] > s[1] && s[2] > s[3] && s[2] > 0.0, "{s:?}");
        assert_eq!(out[2].as_slice::<f32>().unwrap(), &[0.0, 0.0]);
    }

    #[test]
    fn ties_go_to_the_lower_id_and_k_can_exceed_what_is_left() {
        let l = [1.0f32, 3.0, 3.0, 0.0];
        let (best, _) = choose_row(&l, &RowRules::NONE, &[0; 4], 0.0, 3);
        assert_eq!(best.iter().map(|b| b.0).collect::<Vec<_>>(), vec![1, 2, 0]);
        let (best, _) = choose_row(&l, &RowRules::NONE, &[0; 4], 0.0, 9);
        assert_eq!(best.len(), 4);
    }
}
