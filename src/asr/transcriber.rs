//! [`Transcriber`]: one API over every model family. Open a model by short
//! name or folder on an [`Engine`]; transcribe samples or a file; run many
//! files in the worker pool; open a live session
//! ([`Transcriber::live`]). Front ends call this and never ask which
//! family they run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    default_streams, ConformerWorker, CtcJob, Decoding, Family, LiveSettings, LiveSetup, Mode,
    Recognizer, RecognizerOptions, TranscriberOptions, Transcription, WhisperJob,
};
use crate::batch::{self, BatchOptions, Control, FileResult, Summary};
use crate::engine::Engine;
use crate::Result;

/// A model opened for transcription, whatever its family.
pub struct Transcriber {
    pub(super) model: Model,
}

/// The family's own machinery.
pub(super) enum Model {
    Conformer(Arc<Recognizer>),
    Whisper(Box<WhisperJob>),
    WhisperCtc(CtcJob),
}

/// Samples a whole-recording worker reads from a file at a time.
const WHOLE_CHUNK: usize = 1 << 16;

impl Transcriber {
    /// Opens the model `spec` names (a folder, or a short name in the model
    /// cache such as `whisper-tiny.en`; `pulsed-en-ctc` or `None`: the
    /// shipped conformer; nothing is fetched here, see
    /// [`crate::models::fetch`]) with
    /// `opts`, running on `engine`. A Whisper checkpoint builds one network
    /// here, so that a bad folder is refused before any file is read.
    pub fn open(
        spec: Option<&Path>,
        opts: &TranscriberOptions,
        engine: Engine,
    ) -> Result<Transcriber> {
        let family = Family::of(spec, opts.ctc_head)?;
        if opts.int8 && family != Family::Whisper {
            return Err(crate::Error::Other(
                "int8 weights are for Whisper checkpoints (their decoders); use f32".into(),
            ));
        }
        let model = match family {
            Family::Conformer => {
                let dir = crate::models::ModelDir::find(spec);
                let decoding = opts
                    .beam
                    .map_or(Decoding::Greedy, |width| Decoding::Beam { width });
                let options = RecognizerOptions {
                    mode: opts.mode,
                    decoding,
                };
                let rec = Recognizer::open(dir, options)?.with_engine(engine);
                let lm = opts.lm.resolve(rec.lm())?;
                Model::Conformer(Arc::new(rec.with_lm(lm)))
            }
            Family::Whisper => Model::Whisper(Box::new(WhisperJob::open(
                spec.unwrap_or(Path::new("")),
                opts.beam,
                &opts.whisper,
                opts.int8,
                engine,
            )?)),
            Family::WhisperCtc => Model::WhisperCtc(CtcJob::open(
                spec.unwrap_or(Path::new("")),
                opts.beam,
                &opts.lm,
                engine,
            )?),
        };
        Ok(Transcriber { model })
    }

    pub fn family(&self) -> Family {
        match self.model {
            Model::Conformer(_) => Family::Conformer,
            Model::Whisper(_) => Family::Whisper,
            Model::WhisperCtc(_) => Family::WhisperCtc,
        }
    }

    /// What runs where, in one line; `None` where the model says nothing
    /// worth a line (the shipped conformer).
    pub fn describe(&self) -> Option<String> {
        match &self.model {
            Model::Conformer(_) => None,
            Model::Whisper(job) => Some(format!("whisper {}", job.describe())),
            Model::WhisperCtc(job) => Some(job.describe().to_string()),
        }
    }

    /// The rate samples are given at (mono).
    pub fn sample_rate(&self) -> u32 {
        match &self.model {
            Model::Conformer(rec) => rec.sample_rate(),
            Model::Whisper(_) | Model::WhisperCtc(_) => 16_000,
        }
    }

    /// The conformer's recogniser, for what only a CTC conformer has (its
    /// log-probs, its streaming bench).
    pub fn recognizer(&self) -> Option<&Recognizer> {
        match &self.model {
            Model::Conformer(rec) => Some(rec),
            _ => None,
        }
    }

    /// Transcribes a recording (mono, at [`Transcriber::sample_rate`]).
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcription> {
        match &self.model {
            Model::Conformer(rec) => rec.transcribe(samples).map(Transcription::of_transcript),
            Model::Whisper(job) => {
                let mut w = job.worker()?;
                let t = w.transcribe_samples(samples);
                job.give_back(w);
                t
            }
            Model::WhisperCtc(job) => job.transcribe_samples(samples),
        }
    }

    /// Transcribes a WAV file (any rate and channel count: converted).
    pub fn transcribe_file(&self, path: &Path) -> Result<Transcription> {
        let audio = crate::audio::load_wav(path, self.sample_rate())?;
        let mut t = self.transcribe(&audio.samples)?;
        t.transcript.duration_s = audio.duration_s;
        Ok(t)
    }

    /// The pool's settings for `files` files on `jobs` workers, with
    /// `streams` files per batched step where the model has one (`None`:
    /// enough for every worker to have a full cohort).
    pub fn batch_options(&self, jobs: usize, streams: Option<usize>, files: usize) -> BatchOptions {
        match &self.model {
            Model::Conformer(rec) => {
                let (chunk_samples, streams) = match rec.options().mode {
                    // four pulses per read
                    Mode::Streamed { pulse } => (
                        pulse * 4,
                        streams.unwrap_or_else(|| default_streams(rec.engine(), files, jobs)),
                    ),
                    // a whole utterance has no batched form
                    Mode::Whole => (WHOLE_CHUNK, 1),
                };
                BatchOptions {
                    jobs,
                    chunk_samples,
                    longest_first: true,
                    streams,
                }
            }
            Model::Whisper(_) | Model::WhisperCtc(_) => BatchOptions {
                jobs,
                chunk_samples: WHOLE_CHUNK,
                longest_first: true,
                streams: 1,
            },
        }
    }

    /// Transcribes `files` in the worker pool (see [`batch::run`]),
    /// calling `on_result` on this thread as each file finishes; `control`
    /// stops the run and counts its progress.
    pub fn run_files<E>(
        &self,
        files: &[PathBuf],
        opts: BatchOptions,
        control: &Control,
        on_result: impl FnMut(FileResult) -> std::result::Result<(), E>,
    ) -> std::result::Result<Summary, E> {
        match &self.model {
            Model::Conformer(rec) => batch::run(
                files,
                opts,
                control,
                &|| ConformerWorker::new(rec, opts),
                on_result,
            ),
            Model::Whisper(job) => batch::run(files, opts, control, &|| job.worker(), on_result),
            Model::WhisperCtc(job) => batch::run(files, opts, control, &|| job.worker(), on_result),
        }
    }

    /// Files a worker takes at once.
    pub fn group_files(&self) -> usize {
        match &self.model {
            Model::Whisper(job) => job.group_files(),
            _ => 1,
        }
    }

    /// Makes `workers` workers and runs each over `files` untimed, so that
    /// a run that follows finds them built, planned and captured; false
    /// when the model has nothing to warm up.
    pub fn warm_up(&self, workers: usize, files: &[PathBuf]) -> Result<bool> {
        match &self.model {
            Model::Whisper(job) => job.warm_up(workers, files).map(|_| true),
            _ => Ok(false),
        }
    }

    /// Whisper networks built and idle, ready for the next worker or live
    /// session (0 for other families).
    pub fn spare_networks(&self) -> usize {
        match &self.model {
            Model::Whisper(job) => job.spare_count(),
            _ => 0,
        }
    }

    /// Live sessions of a chunked Whisper checkpoint decode through one
    /// shared decoder of `slots` slots from now on: their decoder steps run
    /// batched, a row each (a server's streams; see
    /// [`crate::models::whisper::shared`]). A session finding every slot taken
    /// gets a network of its own. False, changing nothing, for other
    /// models.
    pub fn share_live_decoder(&mut self, slots: usize) -> Result<bool> {
        match &mut self.model {
            Model::Whisper(job) => job.share_live_decoder(slots),
            _ => Ok(false),
        }
    }

    /// The shared live decoder's steps and the rows they fed, where there
    /// is one ([`Transcriber::share_live_decoder`]).
    pub fn shared_steps(&self) -> Option<crate::models::whisper::shared::StepCounts> {
        match &self.model {
            Model::Whisper(job) => job.shared.as_ref().map(|s| s.counts()),
            _ => None,
        }
    }

    /// Prepares live sessions with `settings` (loads the voice detector a
    /// Whisper policy uses).
    pub fn live(&self, settings: LiveSettings) -> Result<LiveSetup<'_>> {
        LiveSetup::new(self, settings)
    }
}
