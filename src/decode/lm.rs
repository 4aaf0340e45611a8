//! A word n-gram language model (ARPA) for CTC prefix beam search.
//!
//! A character CTC model spells what it hears; many of its word errors are
//! spellings no English text has (`feelds`) or homophones the neighbours
//! settle (`whole`/`hole`). Shallow fusion adds `weight * ln P(word |
//! previous words) + bonus` to a prefix each time it completes a word, and
//! charges a partial word as soon as it leaves the vocabulary, so such
//! prefixes drop out of the beam before they crowd the right ones out.
//!
//! The file is standard ARPA (what SRILM, KenLM's `lmplz` or
//! `training/build_lm.py` write): log10 probabilities and back-off weights,
//! any order, `<s>`, `</s>` and `<unk>`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::{DecodeError, Tokens};

/// The n-grams of one order: word ids -> (ln p, ln back-off).
type Grams = HashMap<Box<[u32]>, (f32, f32)>;

/// An n-gram model over words, with back-off.
#[derive(Debug)]
pub struct WordLm {
    order: usize,
    ids: HashMap<String, u32>,
    /// Per order n (index n - 1).
    grams: Vec<Grams>,
    /// Vocabulary words (no `<s>`, `</s>`, `<unk>`), sorted, for prefix checks.
    sorted: Vec<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    /// ln p of a word outside the vocabulary.
    unk: f32,
}

/// Floor for a word the model has no `<unk>` for (log10 -10 per word).
const NO_UNK: f32 = -23.0;

fn bad(path: &str, line: usize, reason: impl Into<String>) -> DecodeError {
    DecodeError::BadLm {
        path: path.into(),
        line,
        reason: reason.into(),
    }
}

impl WordLm {
    /// Reads an ARPA file.
    pub fn load(path: &Path) -> Result<WordLm, DecodeError> {
        let text = std::fs::read_to_string(path).map_err(|source| DecodeError::Io {
            path: path.display().to_string(),
            source,
        })?;
        WordLm::parse(&text, &path.display().to_string())
    }

    /// Parses ARPA text; `name` labels errors.
    pub fn parse(text: &str, name: &str) -> Result<WordLm, DecodeError> {
        let ln10 = std::f32::consts::LN_10;
        let mut counts: Vec<usize> = Vec::new();
        let mut section = None::<usize>;
        let mut seen_data = false;
        let mut ended = false;
        let mut lm = WordLm {
            order: 0,
            ids: HashMap::new(),
            grams: Vec::new(),
            sorted: Vec::new(),
            bos: None,
            eos: None,
            unk: NO_UNK,
        };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let n = i + 1;
            if line.is_empty() || ended {
                continue;
            }
            if line == "\\data\\" {
                seen_data = true;
                continue;
            }
            if line == "\\end\\" {
                ended = true;
                continue;
            }
            if let Some(rest) = line.strip_prefix('\\') {
                let order: usize = rest
                    .strip_suffix("-grams:")
                    .and_then(|o| o.parse().ok())
                    .ok_or_else(|| bad(name, n, format!("unknown section {line}")))?;
                if order == 0 || order > counts.len() {
                    return Err(bad(
                        name,
                        n,
                        format!("{order}-grams not announced in \\data\\"),
                    ));
                }
                section = Some(order);
                continue;
            }
            match section {
                None => {
                    let count = line
                        .strip_prefix("ngram ")
                        .and_then(|r| r.split_once('='))
                        .and_then(|(o, c)| {
                            Some((
                                o.trim().parse::<usize>().ok()?,
                                c.trim().parse::<usize>().ok()?,
                            ))
                        });
                    match count {
                        Some((o, c)) if seen_data && o == counts.len() + 1 => counts.push(c),
                        _ => return Err(bad(name, n, format!("expected `ngram N=COUNT`: {line}"))),
                    }
                }
                Some(order) => {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    if f.len() != order + 1 && f.len() != order + 2 {
                        return Err(bad(
                            name,
                            n,
                            format!("a {order}-gram line has {} fields", f.len()),
                        ));
                    }
                    let num = |s: &str| -> Result<f32, DecodeError> {
                        s.parse::<f32>()
                            .ok()
                            .filter(|v| !v.is_nan() && *v <= 0.0 || *v == f32::NEG_INFINITY)
                            .ok_or_else(|| {
                                bad(name, n, format!("`{s}` is not a log10 probability"))
                            })
                    };
                    let p = num(f[0])?;
                    let bo = if f.len() == order + 2 {
                        f[order + 1]
                            .parse::<f32>()
                            .ok()
                            .filter(|v| v.is_finite())
                            .ok_or_else(|| {
                                bad(
                                    name,
                                    n,
                                    format!("`{}` is not a back-off weight", f[order + 1]),
                                )
                            })?
                    } else {
                        0.0
                    };
                    let mut key = Vec::with_capacity(order);
                    for w in &f[1..=order] {
                        let id = if order == 1 {
                            let next = lm.ids.len() as u32;
                            if lm.ids.insert(w.to_string(), next).is_some() {
                                return Err(bad(name, n, format!("`{w}` is listed twice")));
                            }
                            next
                        } else {
                            *lm.ids
                                .get(*w)
                                .ok_or_else(|| bad(name, n, format!("`{w}` is not a 1-gram")))?
                        };
                        key.push(id);
                    }
                    while lm.grams.len() < order {
                        lm.grams.push(HashMap::new());
                    }
                    lm.grams[order - 1].insert(key.into(), (p * ln10, bo * ln10));
                }
            }
        }
        if !ended || counts.is_empty() || lm.grams.is_empty() {
            return Err(bad(
                name,
                0,
                "not an ARPA file (no \\data\\, n-grams or \\end\\)",
            ));
        }
        for (o, &c) in counts.iter().enumerate() {
            let got = lm.grams.get(o).map_or(0, |g| g.len());
            if got != c {
                return Err(bad(
                    name,
                    0,
                    format!("\\data\\ announces {c} {}-grams, the file has {got}", o + 1),
                ));
            }
        }
        lm.order = counts.len();
        // An announced order may hold no n-grams (`ngram 2=0`): its table
        // must still exist for the back-off walk.
        lm.grams.resize_with(lm.order, HashMap::new);
        lm.bos = lm.ids.get("<s>").copied();
        lm.eos = lm.ids.get("</s>").copied();
        if let Some(&u) = lm.ids.get("<unk>") {
            lm.unk = lm.grams[0][&[u][..]].0;
        }
        lm.sorted = lm
            .ids
            .keys()
            .filter(|w| !matches!(w.as_str(), "<s>" | "</s>" | "<unk>"))
            .cloned()
            .collect();
        lm.sorted.sort_unstable();
        Ok(lm)
    }

    /// The model's order (2 for a bigram model).
    pub fn order(&self) -> usize {
        self.order
    }

    /// Vocabulary size, `<s>`, `</s>` and `<unk>` excluded.
    pub fn vocab_len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether some vocabulary word starts with `prefix`.
    pub fn is_prefix(&self, prefix: &str) -> bool {
        let i = self.sorted.partition_point(|w| w.as_str() < prefix);
        self.sorted.get(i).is_some_and(|w| w.starts_with(prefix))
    }

    /// The id of `word`, `None` outside the vocabulary.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.ids.get(word).copied()
    }

    /// ln P(`word` | `context`), `context` oldest first, backing off through
    /// shorter contexts to the unigram.
    pub fn log_prob(&self, context: &[u32], word: u32) -> f64 {
        let mut ctx = &context[context.len().saturating_sub(self.order - 1)..];
        let mut backoff = 0.0f64;
        let mut key = Vec::with_capacity(ctx.len() + 1);
        loop {
            key.clear();
            key.extend_from_slice(ctx);
            key.push(word);
            if let Some(&(p, _)) = self.grams[ctx.len()].get(&key[..]) {
                return backoff + p as f64;
            }
            if ctx.is_empty() {
                return backoff + self.unk as f64;
            }
            if let Some(&(_, bo)) = self.grams[ctx.len() - 1].get(ctx) {
                backoff += bo as f64;
            }
            ctx = &ctx[1..];
        }
    }

    /// The context a sentence starts with.
    pub fn start(&self) -> Vec<u32> {
        self.bos.into_iter().collect()
    }
}

/// How the beam search weighs the language model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LmWeights {
    /// Multiplies ln P(word | context).
    pub weight: f64,
    /// Added for every word (offsets the model's preference for few words).
    pub word_bonus: f64,
    /// Added to ln P(`<unk>`) for a word outside the vocabulary: `<unk>`
    /// stands for every unseen word together, far likelier than any one
    /// misspelling of a known word.
    pub oov_penalty: f64,
}

impl Default for LmWeights {
    /// Tuned for the shipped model and its `lm.arpa` on 79 held-out
    /// sentences in the held-out voice, disjoint from the test set (see
    /// its model card).
    fn default() -> Self {
        LmWeights {
            weight: 0.8,
            word_bonus: 2.0,
            oov_penalty: -20.0,
        }
    }
}

/// The language model's view of one prefix: the last words and the word
/// being spelt.
#[derive(Debug, Clone, Default)]
pub struct LmState {
    context: Vec<u32>,
    partial: String,
    /// The partial word has left the vocabulary (and was charged for it).
    oov: bool,
}

/// A [`WordLm`] applied to token sequences of a character model.
#[derive(Debug)]
pub struct LmScorer {
    lm: Arc<WordLm>,
    tokens: Tokens,
    weights: LmWeights,
}

impl LmScorer {
    /// Scores `tokens`' pieces as characters of words split at `<sp>`.
    pub fn new(lm: Arc<WordLm>, tokens: Tokens, weights: LmWeights) -> Result<Self, DecodeError> {
        if tokens.space().is_none() {
            return Err(DecodeError::Param(
                "a word language model needs a word boundary token (<sp>)".into(),
            ));
        }
        let w = weights;
        if !(w.weight.is_finite() && w.word_bonus.is_finite() && w.oov_penalty.is_finite())
            || w.weight < 0.0
            || w.oov_penalty > 0.0
        {
            return Err(DecodeError::Param(format!(
                "language model weight {}, word bonus {} and OOV penalty {} must be finite, \
                 the weight >= 0 and the penalty <= 0",
                w.weight, w.word_bonus, w.oov_penalty
            )));
        }
        Ok(LmScorer {
            lm,
            tokens,
            weights,
        })
    }

    /// ln-score of a word outside the vocabulary.
    fn oov(&self) -> f64 {
        self.lm.unk as f64 + self.weights.oov_penalty
    }

    /// The state before any token.
    pub fn start(&self) -> LmState {
        LmState {
            context: self.lm.start(),
            ..LmState::default()
        }
    }

    /// The score of completing the partial word of `s` (0 when there is none).
    fn complete(&self, s: &mut LmState) -> f64 {
        if s.partial.is_empty() {
            return 0.0;
        }
        let id = self.lm.id(&s.partial);
        let lp = match id {
            // charged when it left the vocabulary
            _ if s.oov => 0.0,
            Some(w) => self.lm.log_prob(&s.context, w),
            None => self.oov(),
        };
        if let Some(w) = id {
            s.context.push(w);
        } else {
            s.context.clear();
        }
        let keep = self.lm.order.saturating_sub(1);
        if s.context.len() > keep {
            s.context.drain(..s.context.len() - keep);
        }
        s.partial.clear();
        s.oov = false;
        self.weights.weight * lp + self.weights.word_bonus
    }

    /// The state after token `tok`, and the score it adds.
    pub fn extend(&self, state: &LmState, tok: usize) -> (LmState, f64) {
        let mut s = state.clone();
        if self.tokens.is_space(tok) {
            let d = self.complete(&mut s);
            return (s, d);
        }
        let Some(piece) = self.tokens.piece(tok) else {
            return (s, 0.0);
        };
        s.partial.push_str(piece);
        let mut d = 0.0;
        if !s.oov && !self.lm.is_prefix(&s.partial) {
            s.oov = true;
            d = self.weights.weight * self.oov();
        }
        (s, d)
    }

    /// The score of ending the utterance in `state`: its last word, then `</s>`.
    pub fn finish(&self, state: &LmState) -> f64 {
        let mut s = state.clone();
        let mut d = self.complete(&mut s);
        if let Some(eos) = self.lm.eos {
            d += self.weights.weight * self.lm.log_prob(&s.context, eos);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by `training/build_lm.py --order 2 --prune 0` from four lines.
    const ARPA: &str = "\\data\\
ngram 1=10
ngram 2=13

\\1-grams:
-0.60206\t</s>
-99.00000\t<s>\t-0.44716
-0.72700\t<unk>
-1.20412\tare\t-0.14613
-0.90309\tfields\t-0.32222
-0.90309\tgreen\t-0.14613
-1.20412\tthe\t-0.32222
-1.20412\twhole\t-0.14613
-1.20412\twide\t-0.14613
-1.20412\tworld\t-0.14613

\\2-grams:
-0.93527\t<s> green
-0.22640\t<s> the
-0.63424\tare green
-0.72700\tare wide
-0.66901\tfields </s>
-0.33882\tfields are
-0.49292\tgreen </s>
-0.63424\tgreen fields
-0.31150\tthe fields
-0.90309\tthe whole
-0.48102\twhole world
-0.33321\twide </s>
-0.33321\tworld </s>

\\end\\
";

    fn lm() -> WordLm {
        WordLm::parse(ARPA, "test.arpa").unwrap()
    }

    fn tokens() -> Tokens {
        let syms = ["<blk>", "<sp>"]
            .into_iter()
            .map(String::from)
            .chain(('a'..='z').map(String::from));
        Tokens::from_lines(syms).unwrap()
    }

    #[test]
    fn probabilities_back_off_to_shorter_contexts() {
        let lm = lm();
        let (the, fields, world) = (
            lm.id("the").unwrap(),
            lm.id("fields").unwrap(),
            lm.id("world").unwrap(),
        );
        let ln = |p10: f64| p10 * std::f64::consts::LN_10;
        assert!((lm.log_prob(&[the], fields) - ln(-0.31150)).abs() < 1e-5);
        // unseen bigram: bo(the) + p(world)
        assert!((lm.log_prob(&[the], world) - ln(-0.32222 - 1.20412)).abs() < 1e-5);
        // a longer context than the order uses its last word
        assert!((lm.log_prob(&[world, the], fields) - ln(-0.31150)).abs() < 1e-5);
        assert_eq!(lm.order(), 2);
        assert_eq!(lm.vocab_len(), 7);
        assert!(lm.is_prefix("fie") && lm.is_prefix("w") && !lm.is_prefix("fee"));
    }

    #[test]
    fn an_order_announced_empty_backs_off_to_the_unigram() {
        // The fuzz target's input: 3-grams announced, 2- and 3-grams empty.
        let text = "\\data\\\nngram 1=2\nngram 2=0\nngram 3=0\n\n\\1-grams:\n-1.0\t<s>\t-0.5\n-0.3\tworld\n\n\\2-grams:\n\n\\end\\\n";
        let lm = WordLm::parse(text, "empty.arpa").unwrap();
        let (bos, world) = (lm.id("<s>").unwrap(), lm.id("world").unwrap());
        let ln10 = std::f64::consts::LN_10;
        let got = lm.log_prob(&[bos, world], world);
        assert_eq!(lm.order(), 3);
        assert!((got - -0.3 * ln10).abs() < 1e-5, "{got}");
        let got = lm.log_prob(&[world, bos], world);
        assert!((got - (-0.5 - 0.3) * ln10).abs() < 1e-5, "{got}");
    }

    #[test]
    fn a_known_spelling_outscores_an_unknown_one() {
        let (lm, tokens) = (lm(), tokens());
        let sc = LmScorer::new(Arc::new(lm), tokens.clone(), LmWeights::default()).unwrap();
        let spell = |text: &str| -> f64 {
            let mut s = sc.start();
            let mut total = 0.0;
            for ch in text.chars() {
                let id = if ch == ' ' {
                    tokens.space().unwrap()
                } else {
                    (2 + ch as u8 - b'a') as usize
                };
                let (next, d) = sc.extend(&s, id);
                s = next;
                total += d;
            }
            total + sc.finish(&s)
        };
        assert!(spell("the fields") > spell("the feelds"));
        assert!(spell("the whole world") > spell("the hole world"));
        // the unknown word is charged once, when it leaves the vocabulary
        let s = sc.start();
        let (s, d1) = sc.extend(&s, 2 + 5); // f
        let (s, d2) = sc.extend(&s, 2 + 4); // e
        let (_, d3) = sc.extend(&s, 2 + 4); // e
        assert_eq!(d1, 0.0);
        assert!(d2 < 0.0);
        assert_eq!(d3, 0.0);
    }

    #[test]
    fn bad_files_are_typed_errors_with_the_line() {
        let cases = [
            ("", "not an ARPA file"),
            ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\ta\n", "not an ARPA file"),
            ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\ta\n\\end\\\n", "announces 2 1-grams"),
            ("\\data\\\nngram 1=1\n\n\\1-grams:\nx\ta\n\\end\\\n", "line 5"),
            ("\\data\\\nngram 1=1\n\n\\1-grams:\n0.5\ta\n\\end\\\n", "not a log10"),
            (
                "\\data\\\nngram 1=1\nngram 2=1\n\n\\1-grams:\n-1\ta\n\n\\2-grams:\n-1\ta b\n\\end\\\n",
                "`b` is not a 1-gram",
            ),
            ("\\data\\\nngram 1=1\n\n\\3-grams:\n", "not announced"),
        ];
        for (text, want) in cases {
            let e = WordLm::parse(text, "x.arpa").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let (lm, tokens) = (lm(), tokens());
        let bad = LmWeights {
            weight: f64::NAN,
            ..LmWeights::default()
        };
        assert!(LmScorer::new(Arc::new(lm), tokens, bad).is_err());
    }

    #[test]
    fn beam_search_with_the_model_picks_the_known_word() {
        use crate::decode::prefix_beam_search_lm;
        let (lm, tokens) = (lm(), tokens());
        let vocab = tokens.len();
        let id = |c: char| match c {
            ' ' => tokens.space().unwrap(),
            '_' => tokens.blank(),
            c => (2 + c as u8 - b'a') as usize,
        };
        // "the f?elds": the second letter is `e` (0.55) or `i` (0.45)
        let mut rows = Vec::new();
        for frame in [
            "t",
            "h",
            "e",
            " ",
            "f",
            "e:0.55 i:0.45",
            "_",
            "e",
            "l",
            "d",
            "s",
        ] {
            let mut row = vec![1e-4f32; vocab];
            for part in frame.split(' ').filter(|p| !p.is_empty()) {
                let (c, p) = part.split_once(':').unwrap_or((part, "0.99"));
                row[id(c.chars().next().unwrap())] = p.parse().unwrap();
            }
            if frame == " " {
                row[id(' ')] = 0.99;
            }
            rows.extend(row.iter().map(|p| p.ln()));
        }
        let frames = rows.len() / vocab;
        let text = |scorer: Option<Arc<LmScorer>>| {
            let h = prefix_beam_search_lm(&rows, frames, vocab, tokens.blank(), 8, scorer).unwrap();
            tokens.text_of(&h[0].tokens).unwrap()
        };
        assert_eq!(text(None), "the feelds");
        let sc = LmScorer::new(Arc::new(lm), tokens.clone(), LmWeights::default()).unwrap();
        assert_eq!(text(Some(Arc::new(sc))), "the fields");
    }
}
