//! Live sessions over a [`Transcriber`]: a threaded session fed from any
//! thread ([`LiveSetup::start`], the events `pulsed mic` prints), or the
//! same policy driven step by step ([`LiveSetup::policy`], for replaying
//! files as if compute were free).

use super::transcriber::Model;
use super::{Transcriber, WhisperJob};
use crate::live::{
    AudioInput, CtcLive, LiveEvent, LiveOptions, LiveTranscriber, Update, WhisperLive,
    WhisperLiveOptions,
};
use crate::models::whisper::WhisperModel;
use crate::vad::Vad;
use crate::{Error, Result};

/// How live text is committed and utterances end.
#[derive(Debug, Clone)]
pub struct LiveSettings {
    /// Seconds of silence that end an utterance (CTC blanks; with Whisper,
    /// Silero VAD's silence).
    pub end_silence_s: f64,
    /// Whisper: Silero VAD ends utterances and skips silence (`false`: the
    /// whole stream is one utterance).
    pub vad: bool,
    /// Whisper's policy (its engine and end silence are the transcriber's
    /// and [`LiveSettings::end_silence_s`]).
    pub whisper: WhisperLiveOptions,
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            end_silence_s: 0.6,
            vad: true,
            whisper: WhisperLiveOptions::default(),
        }
    }
}

/// Live sessions ready to start, sharing the transcriber's model.
pub struct LiveSetup<'a> {
    t: &'a Transcriber,
    settings: LiveSettings,
    vad: Option<Vad>,
}

/// A live policy driven directly: samples in, the partial and final
/// lines they caused out.
pub struct LivePolicy<'a>(Policy<'a>);

enum Policy<'a> {
    Whisper(Lent<'a>),
    /// With the samples taken, to stamp its final lines.
    Ctc(Box<CtcLive>, u64),
}

/// A Whisper policy over one of the job's networks, which goes back to the
/// job when the policy is dropped: policies run one after another (a file
/// each, in `pulsed eval --live`) build no network after the first.
struct Lent<'a> {
    live: Option<Box<WhisperLive>>,
    job: &'a WhisperJob,
}

impl Lent<'_> {
    fn get(&mut self) -> &mut WhisperLive {
        self.live.as_mut().expect("taken only when dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // a shared decoder's slot is freed, not kept
        if let Some(live) = self.live.take().filter(|l| !l.is_shared()) {
            self.job.give_back_net(live.into_network());
        }
    }
}

impl<'a> LiveSetup<'a> {
    pub(super) fn new(t: &'a Transcriber, mut settings: LiveSettings) -> Result<LiveSetup<'a>> {
        let mut vad = None;
        if let Model::Whisper(job) = &t.model {
            settings.whisper.engine = job.engine.clone();
            settings.whisper.end_silence_s = settings.end_silence_s;
            settings.whisper.check()?;
            if settings.vad {
                vad = Some(Vad::load_default().map_err(|e| {
                    Error::Other(format!(
                        "live Whisper needs Silero VAD (`pulsed fetch silero-vad`): {e}"
                    ))
                })?);
            }
        }
        Ok(LiveSetup { t, settings, vad })
    }

    /// Whether partial lines carry committed words (`stable` > 0) that a
    /// later line keeps.
    pub fn commits_words(&self) -> bool {
        matches!(self.t.model, Model::Whisper(_))
    }

    /// What runs live, in one line (`None`: nothing worth a line).
    pub fn describe(&self) -> Option<String> {
        match &self.t.model {
            Model::Conformer(_) => None,
            Model::WhisperCtc(job) => Some(format!("live {}", job.describe())),
            Model::Whisper(job) => Some(describe_whisper(
                &job.model,
                job.gen.is_multilingual,
                &self.settings.whisper,
            )),
        }
    }

    /// Starts the inference thread; feed audio (mono, at the transcriber's
    /// rate) through the [`AudioInput`] from any thread and read the events.
    pub fn start(&self) -> Result<(LiveTranscriber, AudioInput)> {
        let opts = LiveOptions {
            end_silence_s: self.settings.end_silence_s,
            ..LiveOptions::default()
        };
        match &self.t.model {
            Model::Conformer(rec) => LiveTranscriber::start(rec.clone(), opts),
            Model::WhisperCtc(job) => LiveTranscriber::start_ctc(job.stream()?, opts),
            Model::Whisper(job) => {
                let live = self.whisper()?;
                let buffer = LiveOptions {
                    buffer_s: 30.0, // decodings take a while: room for the audio meanwhile
                    ..LiveOptions::default()
                };
                // a server's next session takes this one's network: a
                // network is graphs, runners and (on a GPU) captured steps
                let pool = job.net_pool();
                let keep = Box::new(move |live: WhisperLive| {
                    if live.is_shared() {
                        return;
                    }
                    if let Ok(mut spare) = pool.lock() {
                        spare.push(live.into_network());
                    }
                });
                LiveTranscriber::start_whisper_kept(live, buffer, keep)
            }
        }
    }

    /// The policy alone, to drive step by step (a Whisper checkpoint or a
    /// CTC head; the conformer's lives on the live thread only).
    pub fn policy(&self) -> Result<LivePolicy<'a>> {
        match &self.t.model {
            Model::Whisper(job) => Ok(LivePolicy(Policy::Whisper(Lent {
                live: Some(Box::new(self.whisper()?)),
                job,
            }))),
            Model::WhisperCtc(job) => {
                let live = CtcLive::new(job.stream()?, self.settings.end_silence_s);
                Ok(LivePolicy(Policy::Ctc(Box::new(live), 0)))
            }
            Model::Conformer(_) => Err(Error::Other(
                "--live is for Whisper checkpoints (--model whisper-*)".into(),
            )),
        }
    }

    fn whisper(&self) -> Result<WhisperLive> {
        let Model::Whisper(job) = &self.t.model else {
            return Err(Error::Other("not a Whisper checkpoint".into()));
        };
        let o = &self.settings.whisper;
        let slot = match &job.shared {
            Some(shared) if o.stream_text_for(&job.model) && o.stream.final_beam <= 1 => {
                // all taken: a network of its own, as without sharing
                shared.slot().ok()
            }
            _ => None,
        };
        if let Some(slot) = slot {
            return WhisperLive::with_shared(&job.model, slot, self.vad.as_ref(), o.clone());
        }
        // the network the transcriber built when it opened the checkpoint
        // (or one a policy gave back): a live session builds no other
        let net = job.take_net()?;
        WhisperLive::with_network(
            &job.model,
            net,
            self.vad.as_ref(),
            self.settings.whisper.clone(),
        )
    }
}

impl LivePolicy<'_> {
    /// Takes samples (16 kHz mono); the lines they caused.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<Update>> {
        match &mut self.0 {
            Policy::Whisper(live) => live.get().push(samples),
            Policy::Ctc(live, fed) => {
                *fed += samples.len() as u64;
                let at_s = *fed as f64 / 16_000.0;
                Ok(updates(live.push_samples(samples)?, at_s))
            }
        }
    }

    /// The stream ended: the utterance in progress as a final line.
    pub fn finish(&mut self) -> Result<Vec<Update>> {
        match &mut self.0 {
            Policy::Whisper(live) => live.get().finish(),
            Policy::Ctc(live, fed) => {
                let at_s = *fed as f64 / 16_000.0;
                Ok(updates(live.end()?, at_s))
            }
        }
    }
}

/// A CTC policy's events as updates: a final line's words committed at
/// stream position `at_s`, when it was given.
fn updates(events: Vec<LiveEvent>, at_s: f64) -> Vec<Update> {
    events
        .into_iter()
        .filter_map(|e| match e {
            LiveEvent::Partial {
                text,
                words,
                stable,
                utterance,
                ..
            } => Some(Update {
                text,
                words,
                stable,
                is_final: false,
                committed_at_s: Vec::new(),
                shown_at_s: Vec::new(),
                utterance,
            }),
            LiveEvent::Final {
                text,
                words,
                utterance,
                ..
            } => Some(Update {
                text,
                stable: words.len(),
                committed_at_s: vec![at_s; words.len()],
                words,
                is_final: true,
                shown_at_s: Vec::new(),
                utterance,
            }),
            LiveEvent::Overrun { .. } | LiveEvent::Failed(_) => None,
        })
        .collect()
}

/// The live Whisper policy's settings for `model`, in one line.
fn describe_whisper(model: &WhisperModel, multilingual: bool, o: &WhisperLiveOptions) -> String {
    let language = match (&o.decode.language, multilingual) {
        (Some(l), _) => l.as_str(),
        (None, true) => "detected",
        (None, false) => "English only",
    };
    let encoder = if o.streams_encoder(model) {
        "the encoder streamed"
    } else if model.config.encoder_context.is_some() {
        "the window encoder (--window-encoder)"
    } else {
        "the window encoder"
    };
    let final_line = if o.second_pass_for(model) {
        "a second pass".to_string()
    } else if o.stream_text_for(model) {
        format!(
            "streamed (AlignAtt, margin {} frames{})",
            o.margin_for(model),
            if o.stream.refill { ", refill" } else { "" }
        )
    } else {
        "as agreed".to_string()
    };
    format!(
        "live whisper {} on {}, step {} s, trim {} s, beam {}, language {}, {}, final line {}{}",
        model.dir.display(),
        o.engine.describe(),
        o.step_s,
        o.trim_s,
        o.decode.beam_size,
        language,
        encoder,
        final_line,
        if o.greedy_partials_for(model) {
            ", partials greedy"
        } else {
            ""
        }
    )
}
