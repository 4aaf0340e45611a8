//! Speech recognition: [`Transcriber`] opens any model family (the CTC
//! conformer, Whisper checkpoints whole-window or chunked, a chunked
//! checkpoint's CTC head) and transcribes samples, files, pools of files
//! and live audio; [`Recognizer`] is the conformer underneath, streamed in
//! pulses (the default) or over the whole utterance.

mod cohort;
mod conformer_worker;
mod family;
mod live_setup;
pub mod metrics;
mod multi_stream;
mod options;
pub mod partial;
mod recognizer;
mod stream;
mod transcriber;
mod transcription;

pub use crate::models::whisper::ctc_job::{CtcJob, CtcWorker};
pub use crate::models::whisper::job::WhisperJob;
pub use crate::models::whisper::worker::WhisperWorker;
pub use conformer_worker::{default_streams, ConformerWorker, OPEN_FILES};
pub use family::{Family, Requests};
pub use live_setup::{LivePolicy, LiveSettings, LiveSetup};
pub use multi_stream::MultiStreamTranscriber;
pub use options::{LmChoice, TranscriberOptions, WhisperDecoding, WhisperOptions};
pub use recognizer::{Decoding, Lm, Mode, Recognizer, RecognizerOptions};
pub use stream::StreamTranscriber;
pub use transcriber::Transcriber;
pub use transcription::{Segment, Transcription};
