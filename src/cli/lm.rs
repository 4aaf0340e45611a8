//! `--lm FILE | --no-lm`, `--lm-weight`, `--word-bonus`: the word language
//! model beam search weighs prefixes with.

use std::path::PathBuf;

use pulsed::asr::LmChoice;

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
        self.choice().is_set()
    }

    /// The library's choice these flags make.
    pub fn choice(&self) -> LmChoice {
        LmChoice {
            path: self.lm.clone(),
            none: self.no_lm,
            weight: self.lm_weight,
            word_bonus: self.word_bonus,
            oov_penalty: self.oov_penalty,
        }
    }
}
