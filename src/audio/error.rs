//! Why an audio file could not be turned into model input, naming the file, and why
//! the resampler under it failed.

use thiserror::Error;

/// An audio file that could not be read; every message is one line that starts with
/// the file's path (or the name given to [`super::decode_wav`]).
#[derive(Debug, Error)]
pub enum AudioError {
    /// The bytes are not a RIFF/WAVE file at all (text, another container, garbage).
    #[error("{path}: not a WAV file: {reason}")]
    NotWav { path: String, reason: String },
    /// A file that is neither a WAV nor a format the decoders recognise.
    #[error("{path}: not an audio file: {reason}")]
    NotAudio { path: String, reason: String },
    /// An encoding we do not decode (WAV A-law, ADPCM, 12-bit, 64-bit float; Opus...).
    #[error("{path}: unsupported audio format: {format}")]
    Unsupported { path: String, format: String },
    /// The file ends before the header or the data chunk says it should.
    #[error("{path}: truncated: {detail}")]
    Truncated { path: String, detail: String },
    /// A WAV header or sample that contradicts itself (bad sizes, NaN samples...).
    #[error("{path}: corrupt WAV: {reason}")]
    Corrupt { path: String, reason: String },
    /// A well-formed WAV with no samples.
    #[error("{path}: no audio (0 samples)")]
    Empty { path: String },
    /// The operating system failed to open or read the file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The resampler refused the rates or failed mid-way.
    #[error("{path}: cannot resample {from} Hz to {to} Hz: {source}")]
    Resample {
        path: String,
        from: u32,
        to: u32,
        #[source]
        source: ResampleError,
    },
}

impl AudioError {
    /// The file path (or stream name) the error is about.
    pub fn path(&self) -> &str {
        match self {
            AudioError::NotWav { path, .. }
            | AudioError::NotAudio { path, .. }
            | AudioError::Unsupported { path, .. }
            | AudioError::Truncated { path, .. }
            | AudioError::Corrupt { path, .. }
            | AudioError::Empty { path }
            | AudioError::Io { path, .. }
            | AudioError::Resample { path, .. } => path,
        }
    }
}

/// Why the resampler refused two rates or failed on a block; the caller
/// names the stream ([`AudioError::Resample`] adds the file and the rates).
#[derive(Debug, Error)]
pub enum ResampleError {
    #[error("sample rates must be positive")]
    ZeroRate { source_rate: u32, target_rate: u32 },
    /// A block longer than this machine's addresses.
    #[error(transparent)]
    BlockLength(#[from] std::num::TryFromIntError),
    /// rubato refused the rates or the block length.
    #[error(transparent)]
    Construction(#[from] rubato::ResamplerConstructionError),
    /// rubato's blocks are not an exact multiple of the rate ratio, so its
    /// delay and the output length could not be cut exactly.
    #[error("block sizes {chunk_in}/{chunk_out} do not match the rate ratio")]
    BlockSizes { chunk_in: usize, chunk_out: usize },
    /// A block buffer of the wrong length for rubato.
    #[error(transparent)]
    Buffer(#[from] rubato::audioadapter_buffers::SizeError),
    /// A sample beyond ±[`super::resample::MAX_AMPLITUDE`] or NaN: not
    /// audio (a damaged file), and it would overflow the FFT.
    #[error("sample {value} is beyond ±{max:e}: not audio, which is nominally within ±1", max = super::resample::MAX_AMPLITUDE)]
    Amplitude { value: f32 },
    /// rubato failed on a block.
    #[error(transparent)]
    Process(#[from] rubato::ResampleError),
}
