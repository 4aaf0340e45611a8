//! [`WavStream`]: a long audio file read and resampled chunk by chunk.

use std::path::Path;

use super::policy::{truncation, Truncation};
use super::resample::{resampled_len, StreamResampler};
use super::source::Source;
use super::{new_resampler, AudioError, READ_FRAMES};

/// An audio file (any format [`super::load`] reads; `-` is standard input,
/// read as it arrives) read incrementally as mono f32 at a target rate; memory stays
/// bounded by the chunk size whatever the file's length, and the samples are
/// those [`super::load_wav`] would give.
///
/// ```no_run
/// let mut s = pulsed::audio::WavStream::open(std::path::Path::new("long.wav"), 16_000)?;
/// while let Some(chunk) = s.next_chunk(16_000)? {
///     // feed `chunk` (at most one second) to the model
/// #   let _ = chunk;
/// }
/// # Ok::<(), pulsed::audio::AudioError>(())
/// ```
pub struct WavStream {
    source: Source,
    resampler: StreamResampler,
    target_rate: u32,
    /// Resampled samples not handed out yet, from `ready_pos`.
    ready: Vec<f32>,
    ready_pos: usize,
    block: Vec<f32>,
    finished: bool,
}

impl WavStream {
    /// Opens `path` and checks its header; no samples are read yet. An
    /// early end is treated as the process's [`truncation`] says.
    pub fn open(path: &Path, target_rate: u32) -> Result<Self, AudioError> {
        Self::open_with(path, target_rate, truncation())
    }

    /// [`Self::open`] with its own choice for a file that ends early.
    pub fn open_with(path: &Path, target_rate: u32, t: Truncation) -> Result<Self, AudioError> {
        let source = Source::open(path, t)?;
        let resampler = new_resampler(&source, target_rate)?;
        Ok(WavStream {
            source,
            resampler,
            target_rate,
            ready: Vec::new(),
            ready_pos: 0,
            block: Vec::with_capacity(READ_FRAMES),
            finished: false,
        })
    }

    /// The next at most `max_samples` (at least 1) samples, or `None` at the
    /// end. Only the last chunk is shorter than `max_samples`. After an error
    /// the stream is over (later calls return `None`).
    pub fn next_chunk(&mut self, max_samples: usize) -> Result<Option<Vec<f32>>, AudioError> {
        let max = max_samples.max(1);
        while self.ready.len() - self.ready_pos < max && !self.finished {
            if let Err(e) = self.refill() {
                self.finished = true;
                self.ready.clear();
                self.ready_pos = 0;
                return Err(e);
            }
        }
        let available = self.ready.len() - self.ready_pos;
        if available == 0 {
            return Ok(None);
        }
        let n = available.min(max);
        let chunk = self.ready[self.ready_pos..self.ready_pos + n].to_vec();
        self.ready_pos += n;
        if self.ready_pos == self.ready.len() {
            self.ready.clear();
            self.ready_pos = 0;
        }
        Ok(Some(chunk))
    }

    /// Reads one block of the file into `ready`, flushing the resampler at the end.
    fn refill(&mut self) -> Result<(), AudioError> {
        if self.ready_pos > 0 {
            self.ready.drain(..self.ready_pos);
            self.ready_pos = 0;
        }
        self.block.clear();
        let n = self.source.read_frames(READ_FRAMES, &mut self.block)?;
        let (from, to) = (self.source.rate(), self.target_rate);
        let err = |source| AudioError::Resample {
            path: self.source.name().to_string(),
            from,
            to,
            source,
        };
        if n > 0 {
            self.resampler
                .push(&self.block, &mut self.ready)
                .map_err(err)?;
        }
        if self.source.at_end() || n == 0 {
            if self.source.frames_held() == 0 {
                return Err(AudioError::Empty {
                    path: self.source.name().to_string(),
                });
            }
            self.resampler.finish(&mut self.ready).map_err(err)?;
            self.finished = true;
        }
        Ok(())
    }

    /// Length of the file's audio in seconds: as its header declares until
    /// the end is read, then as read (a cut file, a pipe's unrecorded length).
    pub fn source_duration_s(&self) -> f64 {
        self.source.frames_held() as f64 / self.source.rate() as f64
    }

    /// Sample rate stored in the file.
    pub fn source_rate(&self) -> u32 {
        self.source.rate()
    }

    /// Channel count stored in the file.
    pub fn source_channels(&self) -> u16 {
        self.source.channels()
    }

    /// Sample encoding of the file, e.g. "24-bit int".
    pub fn source_format(&self) -> String {
        self.source.format()
    }

    /// Rate of the samples this stream gives.
    pub fn sample_rate(&self) -> u32 {
        self.target_rate
    }

    /// How many samples the whole stream gives (if the file is not
    /// truncated); until the end is read, 0 where the header does not say.
    pub fn total_samples(&self) -> u64 {
        resampled_len(
            self.source.frames_held(),
            self.source.rate(),
            self.target_rate,
        )
    }
}
