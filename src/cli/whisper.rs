//! Whisper's flags on `transcribe`, `eval` and `mic`, turned into the
//! library's options ([`pulsed::asr::WhisperOptions`]); the shipped model
//! ignores them.

use pulsed::asr::{WhisperDecoding, WhisperOptions};
use pulsed::models::whisper::decode::{DecodeOptions, WindowPadding};
use pulsed::models::whisper::Task;
use pulsed::output::Format;

/// Whisper's own knobs on `transcribe` (ignored by the shipped model).
#[derive(clap::Args, Debug, Clone)]
pub struct WhisperArgs {
    #[command(flatten)]
    pub decode: DecodeArgs,
    /// Whisper: text the first window is conditioned on (names, spellings).
    #[arg(long)]
    pub initial_prompt: Option<String>,
    /// Whisper: do not condition a window on the text before it.
    #[arg(long)]
    pub no_condition: bool,
    /// Whisper: decode without timestamp tokens (segments are whole windows).
    #[arg(long)]
    pub without_timestamps: bool,
    /// Whisper: word times from the alignment heads (on by default for
    /// jsonl, srt and vtt; `--word-timestamps false` turns them off).
    #[arg(long)]
    pub word_timestamps: Option<bool>,
    /// Whisper: faster-whisper's batched pipeline: cut the recording on
    /// Silero VAD speech into chunks of at most 30 s, encode `--batch-size`
    /// chunks per encoder call and decode them together (no timestamps,
    /// no previous-text conditioning, unless asked for).
    #[arg(long)]
    pub vad: bool,
    /// Whisper: windows per encoder call, decoded together. With `--vad`,
    /// the chunks of a recording (default 8); without, the first windows
    /// of this many recordings (default 1: on the H100, more workers gain
    /// more than larger batches, and on the CPU batches are slower). A
    /// recording's text does not depend on it.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Whisper: write what the decoder writes where Silero VAD hears no
    /// speech. By default a recording without speech gives no text (Whisper
    /// makes up "You" on silence) and a segment over none of the VAD's
    /// speech is dropped.
    #[arg(long)]
    pub no_speech_gate: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PaddingArg {
    Silence,
    Zeros,
}

impl From<PaddingArg> for WindowPadding {
    fn from(p: PaddingArg) -> WindowPadding {
        match p {
            PaddingArg::Silence => WindowPadding::Silence,
            PaddingArg::Zeros => WindowPadding::Zeros,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TaskArg {
    Transcribe,
    Translate,
}

impl From<TaskArg> for Task {
    fn from(t: TaskArg) -> Task {
        match t {
            TaskArg::Transcribe => Task::Transcribe,
            TaskArg::Translate => Task::Translate,
        }
    }
}

/// The decoding flags `transcribe`, `eval` and `mic` share.
#[derive(clap::Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Whisper: spoken language code (e.g. `en`, `de`); detected when absent
    /// (multilingual checkpoints).
    #[arg(long)]
    pub language: Option<String>,
    /// Whisper: transcribe, or translate into English.
    #[arg(long, value_enum, default_value = "transcribe")]
    pub task: TaskArg,
    /// Whisper: decode at temperature 0 only (no fallback to sampling when a
    /// window's text is too repetitive or unlikely): each decoding's time is
    /// bounded, for slow machines.
    #[arg(long)]
    pub no_fallback: bool,
    /// Whisper: what fills a window after the audio's end: `silence`
    /// (what Whisper was trained on, and transformers' way) or `zeros`
    /// (faster-whisper's, to reproduce its output). Default: what the
    /// checkpoint asks for (`pulsed_window_padding` in its config.json),
    /// else silence.
    #[arg(long, value_enum)]
    pub padding: Option<PaddingArg>,
}

impl DecodeArgs {
    /// The library's decoding settings these flags choose.
    pub fn decoding(&self) -> WhisperDecoding {
        WhisperDecoding {
            language: self.language.clone(),
            task: self.task.into(),
            no_fallback: self.no_fallback,
            padding: self.padding.map(WindowPadding::from),
        }
    }

    /// The flags applied to `opts`, with `beam` (`None` keeps its width; 0
    /// is refused).
    pub fn apply(&self, beam: Option<usize>, opts: &mut DecodeOptions) -> Result<(), String> {
        self.decoding().apply(beam, opts).map_err(|e| e.to_string())
    }
}

impl WhisperArgs {
    /// The library's options; words get times by default in every format
    /// but plain text.
    pub fn options(&self, format: Format) -> WhisperOptions {
        WhisperOptions {
            decoding: self.decode.decoding(),
            initial_prompt: self.initial_prompt.clone(),
            no_condition: self.no_condition,
            without_timestamps: self.without_timestamps,
            word_timestamps: self.word_timestamps.unwrap_or(format != Format::Text),
            vad: self.vad,
            batch_size: self.batch_size,
            speech_gate: !self.no_speech_gate,
        }
    }
}
