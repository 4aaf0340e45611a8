//! Which family of model a name or folder holds, and the requests a family
//! cannot serve: the one place that knows, so that front ends never branch
//! on it.

use std::path::Path;

use crate::{Error, Result};

/// The model families a [`super::Transcriber`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A streaming CTC conformer (the shipped `pulsed-en-ctc`, or a folder
    /// of the same layout).
    Conformer,
    /// A Whisper checkpoint: whole windows, or a chunked student whose
    /// encoder streams.
    Whisper,
    /// A chunked Whisper checkpoint's CTC head over its streamed encoder.
    WhisperCtc,
}

/// What a caller asks for beyond transcripts, to be refused by a family
/// that has no such thing (each `true` is a request).
#[derive(Debug, Clone, Copy, Default)]
pub struct Requests {
    /// The conformer's whole-utterance encoder.
    pub whole: bool,
    /// Several streams batched through one chunk step.
    pub streams: bool,
    /// Language-model options.
    pub lm: bool,
    /// The pool's throughput bench.
    pub bench: bool,
    /// A synchronous live policy over files.
    pub live: bool,
    /// A device other than the family's default.
    pub device: bool,
}

impl Family {
    /// The family of the model `spec` names (`None`: the shipped model);
    /// `ctc_head` asks for a chunked checkpoint's CTC head.
    pub fn of(spec: Option<&Path>, ctc_head: bool) -> Result<Family> {
        let whisper = spec
            .and_then(|m| m.to_str())
            .is_some_and(crate::models::whisper::folder::is_whisper);
        match (whisper, ctc_head) {
            (true, true) => Ok(Family::WhisperCtc),
            (true, false) => Ok(Family::Whisper),
            (false, true) => Err(Error::Other(
                "--ctc is for chunked Whisper checkpoints with a CTC head (--model DIR)".into(),
            )),
            (false, false) => Ok(Family::Conformer),
        }
    }

    /// Refuses what this family cannot do, naming the option.
    pub fn check(self, r: &Requests) -> Result<()> {
        let refuse = |why: &str| Err(Error::Other(why.into()));
        match self {
            Family::Whisper if r.whole || r.streams || r.lm => refuse(
                "--whole, --streams and the LM options are for the shipped model (--model pulsed-en-ctc), not Whisper",
            ),
            Family::Whisper if r.bench => {
                refuse("--bench is for the shipped model (--model pulsed-en-ctc); time Whisper with `pulsed bench --model`")
            }
            Family::WhisperCtc if r.whole || r.streams || r.bench => {
                refuse("--whole, --streams and --bench are for the shipped model (--model pulsed-en-ctc), not --ctc")
            }
            Family::Conformer if r.live => {
                refuse("--live is for Whisper checkpoints (--model whisper-*)")
            }
            Family::Conformer if r.device => {
                refuse("--device is for Whisper checkpoints (--model whisper-*)")
            }
            _ => Ok(()),
        }
    }

    /// The language a run of this family reads, `asked` or the family's
    /// own where it has one (the shipped conformer reads English only).
    pub fn language(self, asked: Option<String>) -> Option<String> {
        match self {
            Family::Conformer => Some(asked.unwrap_or_else(|| "en".into())),
            _ => asked,
        }
    }

    /// Whether a run without an explicit device takes a GPU when there is
    /// one: a Whisper decoder is slow on a CPU, where the conformer is not
    /// (evaluation runs it on the CPU unless told).
    pub fn gpu_by_default(self) -> bool {
        self != Family::Conformer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conformer_reads_english_and_whisper_what_is_asked() {
        assert_eq!(Family::Conformer.language(None).as_deref(), Some("en"));
        assert_eq!(
            Family::Conformer.language(Some("en".into())).as_deref(),
            Some("en")
        );
        assert_eq!(Family::Whisper.language(None), None);
        assert_eq!(
            Family::Whisper.language(Some("de".into())).as_deref(),
            Some("de")
        );
    }
}
