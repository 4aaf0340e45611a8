//! `--lm FILE | --no-lm`, `--lm-weight`, `--word-bonus`: the word language
//! model beam search weighs prefixes with.

use std::path::PathBuf;
use std::sync::Arc;

use pulsed::asr::{Lm, Recognizer};
use pulsed::decode::{LmWeights, WordLm};

#[derive(clap::Args, Debug, Clone)]
pub struct LmArgs {
    /// Word language model (ARPA) for beam search (default: the model's
    /// `lm.arpa`, when it has one).
    #[arg(long, conflicts_with = "no_lm")]
    lm: Option<PathBuf>,
    /// Beam search on the acoustics alone.
    #[arg(long)]
    no_lm: bool,
    /// How much the language model counts (ln-probability multiplier).
    #[arg(long)]
    lm_weight: Option<f64>,
    /// Score added per word (offsets the language model's taste for few words).
    #[arg(long)]
    word_bonus: Option<f64>,
    /// Added to the ln-probability of a word outside the model's vocabulary.
    #[arg(long, allow_hyphen_values = true)]
    oov_penalty: Option<f64>,
}

impl LmArgs {
    /// Whether any language-model flag was given.
    pub fn is_set(&self) -> bool {
        self.lm.is_some()
            || self.no_lm
            || self.lm_weight.is_some()
            || self.word_bonus.is_some()
            || self.oov_penalty.is_some()
    }

    /// The recogniser with the language model these flags ask for.
    pub fn apply(&self, rec: Recognizer) -> Result<Recognizer, String> {
        let lm = self.resolve(rec.lm())?;
        Ok(rec.with_lm(lm))
    }

    /// The language model these flags ask for, over the model's own
    /// (`default`, with its weights) when they name none.
    pub fn resolve(&self, default: Option<&Lm>) -> Result<Option<Lm>, String> {
        if self.no_lm {
            return Ok(None);
        }
        let model = match &self.lm {
            Some(p) => Arc::new(WordLm::load(p).map_err(|e| e.to_string())?),
            None => match default {
                Some(lm) => lm.model.clone(),
                None if self.lm_weight.is_some()
                    || self.word_bonus.is_some()
                    || self.oov_penalty.is_some() =>
                {
                    return Err(
                        "--lm-weight/--word-bonus need a language model: the model has no \
                         lm.arpa; give one with --lm FILE"
                            .into(),
                    )
                }
                None => return Ok(None),
            },
        };
        let d = default.map_or(LmWeights::default(), |l| l.weights);
        Ok(Some(Lm {
            model,
            weights: LmWeights {
                weight: self.lm_weight.unwrap_or(d.weight),
                word_bonus: self.word_bonus.unwrap_or(d.word_bonus),
                oov_penalty: self.oov_penalty.unwrap_or(d.oov_penalty),
            },
        }))
    }
}
