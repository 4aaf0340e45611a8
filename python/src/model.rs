//! `pulsed.Model`: a [`Transcriber`] opened as `pulsed transcribe` opens
//! one (the same short names, default model and fetching, options named as
//! the flags are), with a file, samples, many files and live sessions.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use pulsed::asr::{
    Family, LmChoice, Mode, Requests, Transcriber, TranscriberOptions, WhisperDecoding,
    WhisperOptions,
};
use pulsed::batch::{self, Control, Outcome};
use pulsed::models::fetch::{self, ModelChoice, DEFAULT_LANGUAGE};
use pulsed::models::whisper::decode::WindowPadding;
use pulsed::models::whisper::Task;

use crate::errors::{detached, error, f32_samples, panic_message, resampled};
use crate::live::{LiveOptions, LiveSession};
use crate::result::Transcription;

/// A speech-recognition model, opened once and shared by every call
/// (calls from several threads run side by side).
#[pyclass(module = "pulsed._pulsed", frozen)]
pub struct Model {
    t: Arc<Transcriber>,
    /// The name or folder opened (the shipped model's folder for it).
    name: String,
    /// The default model's short name, when that is what was opened
    /// (live sessions fetch Silero VAD for it, as `pulsed mic` does).
    default: Option<&'static str>,
    /// Whisper's decoding settings and beam, which live sessions decode with.
    decoding: WhisperDecoding,
    beam: Option<usize>,
    device: String,
}

#[pymethods]
impl Model {
    /// Opens `name_or_dir` (a short name such as `whisper-tiny.en` or
    /// `pulsed-en-ctc`, or a folder; `None`: the command line's default,
    /// fetched on first use, English unless `language` says otherwise).
    #[new]
    #[pyo3(signature = (
        name_or_dir = None, device = "auto", precision = "f32", language = None, *,
        beam = None, task = "transcribe", whole = false, pulse = 5120,
        word_timestamps = true, initial_prompt = None, no_condition = false,
        without_timestamps = false, vad = false, batch_size = None,
        no_speech_gate = false, no_fallback = false, padding = None, ctc = false, lm = None, no_lm = false,
        lm_weight = None, word_bonus = None, oov_penalty = None, tf32 = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name_or_dir: Option<PathBuf>,
        device: &str,
        precision: &str,
        language: Option<String>,
        beam: Option<usize>,
        task: &str,
        whole: bool,
        pulse: usize,
        word_timestamps: bool,
        initial_prompt: Option<String>,
        no_condition: bool,
        without_timestamps: bool,
        vad: bool,
        batch_size: Option<usize>,
        no_speech_gate: bool,
        no_fallback: bool,
        padding: Option<String>,
        ctc: bool,
        lm: Option<PathBuf>,
        no_lm: bool,
        lm_weight: Option<f64>,
        word_bonus: Option<f64>,
        oov_penalty: Option<f64>,
        tf32: bool,
    ) -> PyResult<Model> {
        let task = match task {
            "transcribe" => Task::Transcribe,
            "translate" => Task::Translate,
            other => {
                return Err(error(format!(
                    "task must be \"transcribe\" or \"translate\" (got {other:?})"
                )))
            }
        };
        let padding = match padding.as_deref() {
            None => None,
            Some("silence") => Some(WindowPadding::Silence),
            Some("zeros") => Some(WindowPadding::Zeros),
            Some(other) => {
                return Err(error(format!(
                    "padding must be \"silence\" or \"zeros\" (got {other:?})"
                )))
            }
        };
        let lm = LmChoice {
            path: lm,
            none: no_lm,
            weight: lm_weight,
            word_bonus,
            oov_penalty,
        };
        let device_arg = device.to_string();
        let precision = precision.to_string();
        detached(py, move || {
            let mut language = language;
            // what `pulsed transcribe --model` does with its argument
            let (spec, default) = if ctc && name_or_dir.is_none() {
                (None, None)
            } else {
                let choice = ModelChoice::of(name_or_dir.as_deref());
                choice.fetch(!no_speech_gate).map_err(|e| e.to_string())?;
                let default = match choice {
                    ModelChoice::Default(name) => {
                        language.get_or_insert_with(|| DEFAULT_LANGUAGE.to_string());
                        Some(name)
                    }
                    _ => None,
                };
                (Some(choice.spec()), default)
            };
            let family = Family::of(spec.as_deref(), ctc).map_err(|e| e.to_string())?;
            family
                .check(&Requests {
                    whole,
                    lm: lm.is_set(),
                    ..Requests::default()
                })
                .map_err(|e| e.to_string())?;
            let decoding = WhisperDecoding {
                language,
                task,
                no_fallback,
                padding,
            };
            let opts = TranscriberOptions {
                mode: if whole {
                    Mode::Whole
                } else {
                    Mode::Streamed { pulse }
                },
                beam,
                lm,
                ctc_head: ctc,
                whisper: WhisperOptions {
                    decoding: decoding.clone(),
                    initial_prompt,
                    no_condition,
                    without_timestamps,
                    word_timestamps,
                    vad,
                    batch_size,
                    speech_gate: !no_speech_gate,
                },
                int8: precision == "int8",
            };
            let engine = crate::engine::engine(&device_arg, &precision, tf32)?;
            let device = engine.describe();
            let t = Transcriber::open(spec.as_deref(), &opts, engine).map_err(|e| e.to_string())?;
            let name = spec.map_or_else(
                || fetch::SHIPPED_MODEL.to_string(),
                |p| p.display().to_string(),
            );
            Ok(Model {
                t: Arc::new(t),
                name,
                default,
                decoding,
                beam,
                device,
            })
        })
    }

    /// The name or folder this model was opened from.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// `"conformer"`, `"whisper"` or `"whisper-ctc"` (a chunked
    /// checkpoint's CTC head).
    #[getter]
    fn family(&self) -> &'static str {
        match self.t.family() {
            Family::Conformer => "conformer",
            Family::Whisper => "whisper",
            Family::WhisperCtc => "whisper-ctc",
        }
    }

    /// Where it runs, in one line: "CPU", or the GPU's name and precision.
    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    /// The rate (Hz) the model takes mono samples at; other rates are
    /// converted.
    #[getter]
    fn sample_rate(&self) -> u32 {
        self.t.sample_rate()
    }

    /// What runs where, in the line `pulsed transcribe` prints (`None`
    /// for the shipped conformer).
    fn describe(&self) -> Option<String> {
        self.t.describe()
    }

    fn __repr__(&self) -> String {
        format!(
            "Model({:?}, family={:?}, device={:?})",
            self.name,
            self.family(),
            self.device
        )
    }

    /// Transcribes an audio file (WAV, FLAC, MP3, OGG Vorbis, M4A; any
    /// rate and channel count).
    fn transcribe_file(&self, py: Python<'_>, path: PathBuf) -> PyResult<Transcription> {
        let t = self.t.clone();
        detached(py, move || {
            let r = t.transcribe_file(&path).map_err(|e| e.to_string())?;
            let duration = r.transcript.duration_s;
            Ok(Transcription::of(
                &r,
                duration,
                Some(path.display().to_string()),
            ))
        })
    }

    /// Transcribes mono samples (little-endian f32 bytes) at `sample_rate`
    /// Hz, converted to the model's rate as a file's are.
    fn transcribe_samples(
        &self,
        py: Python<'_>,
        samples: &[u8],
        sample_rate: u32,
    ) -> PyResult<Transcription> {
        let samples = checked_samples(samples)?;
        let t = self.t.clone();
        detached(py, move || {
            let duration = samples.len() as f64 / sample_rate.max(1) as f64;
            let samples = resampled(samples, sample_rate, t.sample_rate())?;
            let r = t.transcribe(&samples).map_err(|e| e.to_string())?;
            Ok(Transcription::of(&r, duration, None))
        })
    }

    /// Transcribes `paths` on `jobs` parallel workers (default: one per
    /// core), `streams` files per batched step where the model has one;
    /// one result per path, in their order, a failed file's with `error`
    /// set. `progress(result, done, total)` is called as each file finishes.
    #[pyo3(signature = (paths, jobs = None, streams = None, progress = None))]
    fn transcribe_many(
        &self,
        py: Python<'_>,
        paths: Vec<PathBuf>,
        jobs: Option<usize>,
        streams: Option<usize>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<Transcription>> {
        if jobs == Some(0) {
            return Err(error("jobs must be at least 1"));
        }
        if streams == Some(0) {
            return Err(error("streams must be at least 1"));
        }
        if streams.is_some() {
            let r = Requests {
                streams: true,
                ..Requests::default()
            };
            self.t.family().check(&r).map_err(error)?;
        }
        let jobs = jobs.unwrap_or_else(batch::default_jobs);
        let total = paths.len();
        let mut results: Vec<Option<Transcription>> = vec![None; total];
        let control = Control::new();
        let opts = self.t.batch_options(jobs, streams, total);
        let t = self.t.clone();
        let mut done = 0usize;
        let run = py.detach(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                t.run_files(&paths, opts, &control, |r| {
                    let name = r.path.display().to_string();
                    let result = match r.outcome {
                        Outcome::Done {
                            transcript,
                            duration_s,
                            extra,
                        } => Transcription::of_batch(transcript, duration_s, &extra, name),
                        Outcome::Failed(e) => Transcription::failed(name, e),
                        Outcome::Cancelled => return Ok(()),
                    };
                    done += 1;
                    Python::attach(|py| {
                        if let Some(cb) = &progress {
                            cb.call1(py, (result.clone(), done, total))?;
                        }
                        py.check_signals()
                    })
                    .inspect_err(|_| control.stop())?;
                    results[r.index] = Some(result);
                    Ok::<(), PyErr>(())
                })
            }))
        });
        match run {
            Err(panic) => Err(error(format!("internal error: {}", panic_message(&*panic)))),
            Ok(Err(e)) => Err(e),
            Ok(Ok(_summary)) => Ok(results
                .into_iter()
                .zip(&paths)
                .map(|(r, p)| {
                    r.unwrap_or_else(|| {
                        Transcription::failed(p.display().to_string(), "not transcribed".into())
                    })
                })
                .collect()),
        }
    }

    /// A live session: push samples as they come, read partial and final
    /// lines; the options are `pulsed mic`'s flags.
    #[pyo3(signature = (
        *, sample_rate = None, end_silence = 0.6, vad = true, step = 1.0, trim = 15.0,
        paced = true, window_encoder = false, second_pass = None, greedy_partials = None,
        policy = None, margin = None, backstep = 25, show = 2, refill = false, repeats = 3,
        untexted_speech = 1.5, final_beam = 1
    ))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        sample_rate: Option<u32>,
        end_silence: f64,
        vad: bool,
        step: f64,
        trim: f64,
        paced: bool,
        window_encoder: bool,
        second_pass: Option<bool>,
        greedy_partials: Option<bool>,
        policy: Option<String>,
        margin: Option<usize>,
        backstep: usize,
        show: usize,
        refill: bool,
        repeats: usize,
        untexted_speech: f64,
        final_beam: usize,
    ) -> PyResult<LiveSession> {
        let stream_text = match policy.as_deref() {
            None => None,
            Some("stream") => Some(true),
            Some("agreement") => Some(false),
            Some(other) => {
                return Err(error(format!(
                    "policy must be \"stream\" or \"agreement\" (got {other:?})"
                )))
            }
        };
        let opts = LiveOptions {
            source_rate: sample_rate.unwrap_or_else(|| self.t.sample_rate()),
            end_silence_s: end_silence,
            vad,
            step_s: step,
            trim_s: trim,
            paced,
            stream_encoder: !window_encoder,
            second_pass,
            greedy_partials,
            stream_text,
            margin,
            backstep,
            show,
            refill,
            repeats,
            untexted_speech_s: untexted_speech,
            final_beam,
            decoding: self.decoding.clone(),
            beam: self.beam,
        };
        let t = self.t.clone();
        let default = self.default;
        detached(py, move || {
            if let (Some(name), true) = (default, vad) {
                // `pulsed mic` with no --model fetches Silero VAD with it
                fetch::fetch(name, "a live session", true).map_err(|e| e.to_string())?;
            }
            LiveSession::start(&t, opts)
        })
    }
}

/// Samples from Python, refused where the model could not use them.
fn checked_samples(bytes: &[u8]) -> PyResult<Vec<f32>> {
    let samples = f32_samples(bytes)?;
    if samples.is_empty() {
        return Err(error("samples: no audio (0 samples)"));
    }
    if let Some(i) = samples.iter().position(|x| !x.is_finite()) {
        return Err(error(format!("samples: NaN or infinity at sample {i}")));
    }
    Ok(samples)
}
