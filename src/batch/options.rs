//! How a pool run is laid out: workers, chunk size, order, streams.

/// Settings of a batch run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Worker threads (at least 1; more than the files is pointless).
    pub jobs: usize,
    /// Samples read from a file and pushed per step: bounds a worker's audio
    /// memory and how long a stop request waits.
    pub chunk_samples: usize,
    /// Start the largest files first (by size on disk), so that a long file
    /// met last does not leave the other workers idle; results then come in
    /// roughly that order.
    pub longest_first: bool,
    /// Streams each worker runs in one chunk step (a batched session; 1:
    /// one stream per worker). Files go in cohorts of this many; a cohort
    /// lasts as long as its longest file, so with `longest_first` cohorts
    /// hold files of similar lengths and little time is spent on silence.
    pub streams: usize,
}

impl Default for BatchOptions {
    /// One worker per core, 1.28 s chunks (four 320 ms pulses), files in the given order.
    fn default() -> Self {
        BatchOptions {
            jobs: default_jobs(),
            chunk_samples: 20_480,
            longest_first: false,
            streams: 1,
        }
    }
}

/// The number of cores this process may use (1 if unknown).
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
