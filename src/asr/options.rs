//! What a [`super::Transcriber`] is opened with: one set of options for
//! every model family; each family reads the part that concerns it and
//! ignores the rest.

use std::path::PathBuf;
use std::sync::Arc;

use super::{Lm, Mode};
use crate::decode::{LmWeights, WordLm};
use crate::models::whisper::decode::{DecodeOptions, WindowPadding};
use crate::models::whisper::Task;
use crate::{Error, Result};

/// How a model is opened and decodes.
#[derive(Debug, Clone)]
pub struct TranscriberOptions {
    /// The conformer's encoder: streamed in pulses or whole (a Whisper
    /// checkpoint ignores it).
    pub mode: Mode,
    /// Beam search of this width: CTC prefix beam search (greedy when
    /// `None`), Whisper's beam search (`None`: 5).
    pub beam: Option<usize>,
    /// The word language model CTC beam search weighs prefixes with.
    pub lm: LmChoice,
    /// A chunked Whisper checkpoint's CTC head over its streamed encoder
    /// instead of its decoder.
    pub ctc_head: bool,
    /// How a Whisper checkpoint transcribes.
    pub whisper: WhisperOptions,
    /// Weight-only int8 on the CPU: a Whisper checkpoint's linear layers
    /// and output projection (a quarter of f32's bytes a decoder step
    /// reads). Other families and GPU engines refuse it.
    pub int8: bool,
}

impl Default for TranscriberOptions {
    fn default() -> Self {
        TranscriberOptions {
            mode: Mode::Streamed { pulse: 5120 },
            beam: None,
            lm: LmChoice::default(),
            ctc_head: false,
            whisper: WhisperOptions::default(),
            int8: false,
        }
    }
}

/// Which word language model beam search uses: by default the model's
/// own (`lm.arpa` in its folder), with its weights.
#[derive(Debug, Clone, Default)]
pub struct LmChoice {
    /// This ARPA file instead of the model's.
    pub path: Option<PathBuf>,
    /// None at all: the acoustics alone.
    pub none: bool,
    /// Overrides of the weights.
    pub weight: Option<f64>,
    pub word_bonus: Option<f64>,
    pub oov_penalty: Option<f64>,
}

impl LmChoice {
    /// Whether anything differs from the model's own language model.
    pub fn is_set(&self) -> bool {
        self.path.is_some()
            || self.none
            || self.weight.is_some()
            || self.word_bonus.is_some()
            || self.oov_penalty.is_some()
    }

    /// The language model chosen, over the model's own (`default`, with its
    /// weights) when no file is named.
    pub fn resolve(&self, default: Option<&Lm>) -> Result<Option<Lm>> {
        if self.none {
            return Ok(None);
        }
        let model = match &self.path {
            Some(p) => Arc::new(WordLm::load(p).map_err(|e| Error::Other(e.to_string()))?),
            None => match default {
                Some(lm) => lm.model.clone(),
                None if self.weight.is_some()
                    || self.word_bonus.is_some()
                    || self.oov_penalty.is_some() =>
                {
                    return Err(Error::Other(
                        "--lm-weight/--word-bonus need a language model: the model has no \
                         lm.arpa; give one with --lm FILE"
                            .into(),
                    ))
                }
                None => return Ok(None),
            },
        };
        let d = default.map_or(LmWeights::default(), |l| l.weights);
        Ok(Some(Lm {
            model,
            weights: LmWeights {
                weight: self.weight.unwrap_or(d.weight),
                word_bonus: self.word_bonus.unwrap_or(d.word_bonus),
                oov_penalty: self.oov_penalty.unwrap_or(d.oov_penalty),
            },
        }))
    }
}

/// How a Whisper checkpoint transcribes a recording.
#[derive(Debug, Clone)]
pub struct WhisperOptions {
    pub decoding: WhisperDecoding,
    /// Text the first window is conditioned on (names, spellings).
    pub initial_prompt: Option<String>,
    /// Do not condition a window on the text before it.
    pub no_condition: bool,
    /// Decode without timestamp tokens (segments are whole windows).
    pub without_timestamps: bool,
    /// Word times from the alignment heads.
    pub word_timestamps: bool,
    /// faster-whisper's batched pipeline: the recording cut on Silero VAD
    /// speech into chunks of at most 30 s, decoded together.
    pub vad: bool,
    /// Windows per encoder call (`None`: 8 with `vad`, else 1).
    pub batch_size: Option<usize>,
    /// No text where Silero VAD hears no speech: a recording without
    /// speech is not decoded, and a segment over none of its speech is
    /// dropped (Whisper writes "You" on silence). Needs Silero VAD's
    /// weights (`pulsed fetch silero-vad`); `vad` decodes VAD speech only
    /// and needs no gate.
    pub speech_gate: bool,
}

impl Default for WhisperOptions {
    /// faster-whisper's defaults, with word times and the speech gate.
    fn default() -> Self {
        WhisperOptions {
            decoding: WhisperDecoding::default(),
            initial_prompt: None,
            no_condition: false,
            without_timestamps: false,
            word_timestamps: true,
            vad: false,
            batch_size: None,
            speech_gate: true,
        }
    }
}

/// The decoding settings offline and live Whisper share.
#[derive(Debug, Clone, Default)]
pub struct WhisperDecoding {
    /// Spoken language code; detected when `None` (multilingual checkpoints).
    pub language: Option<String>,
    pub task: Task,
    /// Temperature 0 only: no fallback to sampling.
    pub no_fallback: bool,
    /// What fills a window after the audio's end (`None`: the checkpoint's
    /// choice).
    pub padding: Option<WindowPadding>,
}

impl WhisperDecoding {
    /// These settings applied to `opts`, with `beam` (`None` keeps its
    /// width; 0 is refused).
    pub fn apply(&self, beam: Option<usize>, opts: &mut DecodeOptions) -> Result<()> {
        match beam {
            Some(0) => return Err(Error::Other("--beam must be at least 1".into())),
            Some(b) => opts.beam_size = b,
            None => {}
        }
        opts.language = self.language.clone();
        opts.task = self.task;
        if self.no_fallback {
            opts.temperatures = vec![0.0];
        }
        opts.padding = self.padding;
        Ok(())
    }
}
