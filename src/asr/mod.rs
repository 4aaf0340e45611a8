//! Speech recognition: [`Transcriber`] opens any model family (the CTC
//! conformer, Whisper checkpoints whole-window or chunked, a chunked
//! checkpoint's CTC head) and transcribes samples, files, pools of files
//! and live audio; [`Recognizer`] is the conformer underneath, streamed in
//! pulses (the default) or over the whole utterance.

mod family;
mod live_setup;
pub mod metrics;
mod options;
pub mod partial;
mod transcriber;
mod transcription;

pub use family::{Family, Requests};
pub use live_setup::{LivePolicy, LiveSettings, LiveSetup};
pub use options::{LmChoice, TranscriberOptions, WhisperDecoding, WhisperOptions};
pub use transcriber::Transcriber;
pub use transcription::{Segment, Transcription};

// Each family's own machinery, from its folder under `models`.
pub use crate::models::conformer::multi_stream::MultiStreamTranscriber;
pub use crate::models::conformer::recognizer::{Decoding, Lm, Mode, Recognizer, RecognizerOptions};
pub use crate::models::conformer::stream::StreamTranscriber;
pub use crate::models::conformer::worker::{default_streams, ConformerWorker, OPEN_FILES};
pub use crate::models::whisper::ctc_job::{CtcJob, CtcWorker};
pub use crate::models::whisper::job::WhisperJob;
pub use crate::models::whisper::worker::WhisperWorker;
