//! A Whisper checkpoint opened for transcription: what every worker
//! shares (the checkpoint, its tokenizer, the decoding options) and the
//! networks ready for workers.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::speech_gate::SpeechGate;
use super::worker::{Net, WhisperWorker};
use crate::asr::WhisperOptions;
use crate::batch::{Control, Outcome};
use crate::engine::Engine;
use crate::models::whisper::decode::{BatchedOptions, DecodeOptions, InitialPrompt, WindowPadding};
use crate::models::whisper::shared::SharedDecoder;
use crate::models::whisper::{GenerationConfig, WhisperModel, WhisperTokenizer};
use crate::vad::Vad;
use crate::{Error, Result};

/// Everything the workers share: the loaded checkpoint and how to decode.
pub struct WhisperJob {
    pub(crate) model: Arc<WhisperModel>,
    pub(super) tokenizer: Arc<WhisperTokenizer>,
    pub(crate) gen: Arc<GenerationConfig>,
    opts: DecodeOptions,
    /// `vad`: the batched pipeline's settings and its voice detector.
    batched: Option<(BatchedOptions, Arc<Vad>)>,
    /// `speech_gate` (without `vad`): no text where the VAD hears no speech.
    gate: Option<SpeechGate>,
    /// Windows per encoder call.
    batch_size: usize,
    /// Files a worker takes at once.
    group_files: usize,
    /// Where the networks run.
    pub(crate) engine: Engine,
    /// Networks ready for workers and live policies: the one built while
    /// checking the folder, those [`WhisperJob::warm_up`] made, and those
    /// workers and policies gave back.
    spare: Arc<Mutex<Vec<Net>>>,
    /// The decoder live sessions share ([`WhisperJob::share_live_decoder`]).
    pub(crate) shared: Option<Arc<SharedDecoder>>,
}

impl WhisperJob {
    /// Loads the checkpoint `model` names and turns `a` into decoding
    /// options (`beam`: `None` is faster-whisper's default of 5); its
    /// networks run on `engine`, with int8 linear layers when `int8`.
    pub fn open(
        model: &Path,
        beam: Option<usize>,
        a: &WhisperOptions,
        int8: bool,
        engine: Engine,
    ) -> Result<WhisperJob> {
        let spec = model
            .to_str()
            .ok_or_else(|| Error::Other("--model: not a UTF-8 path".into()))?;
        let mut model = WhisperModel::open(spec)?;
        if int8 {
            model = model.with_int8()?;
        }
        let tokenizer = WhisperTokenizer::from_file(&model.dir.join("tokenizer.json"))?;
        let gen = GenerationConfig::load(&model.dir)?;
        let mut opts = if a.vad {
            BatchedOptions::decode_defaults()
        } else {
            DecodeOptions::default()
        };
        a.decoding.apply(beam, &mut opts)?;
        opts.initial_prompt = a.initial_prompt.clone().map(InitialPrompt::Text);
        if !a.vad {
            opts.condition_on_previous_text = !a.no_condition;
        }
        opts.without_timestamps |= a.without_timestamps;
        let on_cpu = matches!(engine, Engine::Cpu);
        let batch_size = match a.batch_size {
            Some(0) => return Err(Error::Other("--batch-size must be at least 1".into())),
            Some(n) => n,
            None if a.vad => BatchedOptions::default().batch_size,
            // measured (gpu-notes §14): -j 8 one file at a time gave 357-424
            // audio s/s at beam 5 on the H100, 8 files at a time 189-263
            None => 1,
        };
        let batched = match a.vad {
            true => {
                let vad = Vad::load_default().map_err(|e| {
                    Error::Other(format!(
                        "--vad needs Silero VAD (`pulsed fetch silero-vad`): {e}"
                    ))
                })?;
                let b = BatchedOptions {
                    batch_size,
                    ..BatchedOptions::default()
                };
                Some((b, Arc::new(vad)))
            }
            false => None,
        };
        let gate = match a.speech_gate && !a.vad {
            true => Some(SpeechGate::new(Vad::load_default().map_err(|e| {
                Error::Other(format!(
                    "the speech gate (no text on silence) needs Silero VAD: bash \
                     `pulsed fetch silero-vad`, or turn the gate off (--no-speech-gate): {e}"
                ))
            })?)),
            false => None,
        };
        opts.word_timestamps = a.word_timestamps;
        // building the graphs checks every weight's shape: a bad folder is
        // refused here, once, rather than by every file
        let first = crate::models::whisper::network(&model, &engine)?;
        Ok(WhisperJob {
            model: Arc::new(model),
            tokenizer: Arc::new(tokenizer),
            gen: Arc::new(gen),
            opts,
            batched,
            gate,
            batch_size,
            // the CPU decodes no faster in larger batches (realdev, -j 2:
            // 20.2 s against 12.7 s with --vad when workers took 8 files)
            group_files: if a.vad && on_cpu { 1 } else { batch_size },
            engine,
            spare: Arc::new(Mutex::new(vec![first])),
            shared: None,
        })
    }

    /// Live sessions decode through one decoder of `slots` slots from now
    /// on; false, changing nothing, where the checkpoint's encoder does not
    /// stream (its live policy decodes whole windows).
    pub(crate) fn share_live_decoder(&mut self, slots: usize) -> Result<bool> {
        if self.model.config.encoder_context.is_none() {
            return Ok(false);
        }
        self.shared = Some(Arc::new(SharedDecoder::new(
            &self.model,
            &self.engine,
            slots,
        )?));
        Ok(true)
    }

    /// A spare network, or a new one when none is spare.
    pub(crate) fn take_net(&self) -> Result<Net> {
        let spare = self.spare.lock().ok().and_then(|mut f| f.pop());
        match spare {
            Some(net) => Ok(net),
            None => crate::models::whisper::network(&self.model, &self.engine),
        }
    }

    /// Keeps a network for the next worker or live policy.
    pub(crate) fn give_back_net(&self, net: Net) {
        if let Ok(mut spare) = self.spare.lock() {
            spare.push(net);
        }
    }

    /// Networks ready for the next worker or live policy.
    pub(crate) fn spare_count(&self) -> usize {
        self.spare.lock().map_or(0, |s| s.len())
    }

    /// Where a threaded live session leaves its network when it ends.
    pub(crate) fn net_pool(&self) -> Arc<Mutex<Vec<Net>>> {
        self.spare.clone()
    }

    /// One worker's network.
    pub fn worker(&self) -> Result<WhisperWorker> {
        let net = self.take_net()?;
        Ok(WhisperWorker {
            batched: self.batched.clone(),
            gate: self.gate.clone(),
            batch_size: self.batch_size,
            group_files: self.group_files,
            net,
            tokenizer: self.tokenizer.clone(),
            gen: self.gen.clone(),
            opts: self.opts.clone(),
        })
    }

    /// Keeps a worker's network for the next worker.
    pub fn give_back(&self, worker: WhisperWorker) {
        self.give_back_net(worker.net);
    }

    /// Makes `workers` networks at once and runs each over `files`
    /// (untimed; each worker as it would take them), so that the workers of
    /// a run that follows find their runners planned and their graphs
    /// captured: a throughput figure taken after a warm-up pass, as peers
    /// report theirs. A file that fails fails the warm-up.
    pub fn warm_up(&self, workers: usize, files: &[PathBuf]) -> Result<()> {
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let panicked = || Error::Other("warm-up: a worker panicked".into());
        let warmed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let paths = &paths;
                    s.spawn(move || -> Result<Net> {
                        let mut w = self.worker()?;
                        let control = Control::new();
                        for o in w.transcribe_group(paths, &control, &mut |_, _| {}) {
                            if let Outcome::Failed(e) = o {
                                return Err(Error::Other(format!("warm-up: {e}")));
                            }
                        }
                        Ok(w.net)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(panicked())))
                .collect::<Result<Vec<Net>>>()
        })?;
        self.spare.lock().map_err(|_| panicked())?.extend(warmed);
        Ok(())
    }

    /// Files a worker takes at once.
    pub fn group_files(&self) -> usize {
        self.group_files
    }

    /// What runs where, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} layers, d {}), beam {}, windows padded with {}{}, on {}",
            self.model.dir.display(),
            self.model.config.encoder_layers,
            self.model.config.d_model,
            self.opts.beam_size,
            match self.opts.padding.unwrap_or(self.model.config.padding()) {
                WindowPadding::Zeros => "zeros",
                WindowPadding::Silence => "silence",
            },
            if self.gate.is_some() {
                ", speech gate (Silero VAD)"
            } else {
                ""
            },
            self.engine.describe()
        )
    }
}
