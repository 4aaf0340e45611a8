//! `GET /v1/realtime`: live transcription over a WebSocket, the OpenAI
//! Realtime API's transcription events. Each connection has its own live
//! session of the shared model (its own inference thread); a commit or a
//! clear ends that session and the next audio starts another, its word
//! times carried on from the connection's first sample.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Value};

use super::deltas::settled_text;
use super::metrics::add_seconds;
use super::pcm::PcmInput;
use super::realtime_events::{parse, words_json, ClientEvent, Ids, Refusal};
use super::session_config::SessionConfig;
use super::state::AppState;
use crate::decode::Word;
use crate::live::{AudioInput, LiveEvent, LiveTranscriber};

/// How long a client may leave the server's events unread.
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the live session's events are collected.
const POLL: Duration = Duration::from_millis(20);
/// The arrival times kept for word latency (a few minutes of appends).
const MAX_ARRIVALS: usize = 20_000;
/// End of speech when the client turned turn detection off: never (the
/// utterance lasts until a commit).
const NO_ENDPOINT_S: f64 = 24.0 * 3600.0;

/// Upgrades to a WebSocket, or (over `--max-streams`) upgrades only to send
/// an `error` event and close.
pub async fn upgrade(State(state): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let slot = state.admit_stream();
    let max = state.options.max_message_bytes;
    // a browser that offers subprotocols (the page's `realtime`, beside
    // its key) closes a connection that takes none
    ws.protocols(["realtime"])
        .max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| async move {
            match slot {
                Some(slot) => {
                    Connection::new(state, socket).run().await;
                    drop(slot);
                }
                None => refuse(socket, state.options.max_streams).await,
            }
        })
}

async fn refuse(mut socket: WebSocket, max: usize) {
    let mut ids = Ids::new(0);
    let message = format!("the server is serving its {max} streams (--max-streams); retry later");
    let ev = ids.error("server_error", "max_streams_reached", &message, None);
    let _ = socket.send(Message::Text(ev.to_string().into())).await;
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: 1013, // try again later
            reason: "max streams reached".into(),
        })))
        .await;
}

/// Why a connection ends.
enum End {
    /// The client left, or the socket failed.
    Gone,
    /// The live session could not go on (reported to the client).
    Failed,
}

/// One running live session.
struct Live {
    lt: LiveTranscriber,
    input: AudioInput,
    /// Samples written to it (at the model's rate).
    fed: u64,
    /// Samples it reported dropped so far.
    dropped: u64,
    /// Whether its partial lines carry committed words (Whisper).
    commits_words: bool,
}

/// The utterance being transcribed.
struct Item {
    id: String,
    /// The text sent as deltas so far.
    sent: String,
}

struct Connection {
    state: Arc<AppState>,
    socket: WebSocket,
    ids: Ids,
    config: SessionConfig,
    pcm: PcmInput,
    rate: f64,
    live: Option<Live>,
    item: Option<Item>,
    previous_item: Option<String>,
    /// Samples (model rate) given to live sessions that have ended.
    base: u64,
    /// Samples received in all (model rate).
    received: u64,
    /// Samples since the last commit, clear or final line.
    uncommitted: u64,
    /// Final lines sent.
    finals: u64,
    /// (samples received through an append, when it arrived).
    arrivals: VecDeque<(u64, Instant)>,
    /// The `event_id` of the client event being handled.
    client_event: Option<String>,
}

impl Connection {
    fn new(state: Arc<AppState>, socket: WebSocket) -> Connection {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let o = &state.options;
        let config = SessionConfig::new(
            &o.model_name,
            o.language.clone(),
            (o.live.end_silence_s * 1000.0).round() as u64,
        );
        let model_rate = state.transcriber.sample_rate();
        let pcm = PcmInput::new(config.rate, model_rate).expect("both rates are above zero");
        Connection {
            ids: Ids::new(NEXT.fetch_add(1, Ordering::Relaxed)),
            config,
            pcm,
            rate: model_rate as f64,
            live: None,
            item: None,
            previous_item: None,
            base: 0,
            received: 0,
            uncommitted: 0,
            finals: 0,
            arrivals: VecDeque::new(),
            client_event: None,
            state,
            socket,
        }
    }

    async fn run(mut self) {
        let _ = self.serve().await;
        if let Some(live) = self.live.take() {
            // finishing joins the inference thread: not on the executor
            tokio::task::spawn_blocking(move || drop(live));
        }
    }

    async fn serve(&mut self) -> Result<(), End> {
        let session = self.config.ga(&self.ids.session());
        self.send_event("session.created", json!({ "session": session }))
            .await?;
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let idle = self.state.options.idle_timeout;
        let mut deadline = tokio::time::Instant::now() + idle;
        let mut shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                msg = self.socket.recv() => {
                    deadline = tokio::time::Instant::now() + idle;
                    match msg {
                        None => return Err(End::Gone),
                        Some(Ok(Message::Close(_))) => {
                            // the reply the close handshake queued goes out
                            // (a browser reads a dropped connection as 1006);
                            // sending after a close is refused, flushing is not
                            let _ = futures_util::SinkExt::flush(&mut self.socket).await;
                            return Err(End::Gone);
                        }
                        Some(Err(e)) => {
                            // too large a message, or a broken frame: say so if we can
                            let text = format!("the connection failed: {e}");
                            let ev = self.ids.error("invalid_request_error", "bad_message", &text, None);
                            let _ = self.send(ev).await;
                            return Err(End::Gone);
                        }
                        Some(Ok(Message::Text(t))) => self.on_text(t.as_str()).await?,
                        Some(Ok(Message::Binary(_))) => {
                            self.client_event = None;
                            self.client_error("invalid_event", "binary messages are not served: send JSON events as text", None).await?;
                        }
                        Some(Ok(_)) => {} // ping and pong
                    }
                }
                _ = poll.tick() => self.drain().await?,
                _ = tokio::time::sleep_until(deadline) => {
                    let text = format!("no message for {} s: closing", idle.as_secs());
                    let ev = self.ids.error("invalid_request_error", "idle_timeout", &text, None);
                    self.send(ev).await?;
                    self.close(1000, "idle").await;
                    return Ok(());
                }
                _ = shutdown.changed() => {
                    // the server stops: the line in progress becomes final
                    if self.live.is_some() {
                        self.end_live().await?;
                    }
                    self.close(1001, "server shutting down").await;
                    return Ok(());
                }
            }
        }
    }

    async fn close(&mut self, code: u16, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = self.socket.send(Message::Close(Some(frame))).await;
    }

    /// Sends one event; a client that has not read for [`SEND_TIMEOUT`]
    /// is dropped (its own session only: every connection has its task).
    async fn send(&mut self, v: Value) -> Result<(), End> {
        let sending = self.socket.send(Message::Text(v.to_string().into()));
        match tokio::time::timeout(SEND_TIMEOUT, sending).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(End::Gone),
        }
    }

    async fn send_event(&mut self, kind: &str, fields: Value) -> Result<(), End> {
        let ev = self.ids.event(kind, fields);
        self.send(ev).await
    }

    /// A refused client event: an `error` event, and the session goes on.
    async fn client_error(
        &mut self,
        code: &str,
        message: &str,
        event_id: Option<&str>,
    ) -> Result<(), End> {
        self.state
            .metrics
            .client_errors
            .fetch_add(1, Ordering::Relaxed);
        let event_id = event_id.or(self.client_event.as_deref());
        let ev = self
            .ids
            .error("invalid_request_error", code, message, event_id);
        self.send(ev).await
    }

    async fn on_text(&mut self, text: &str) -> Result<(), End> {
        let event = match parse(text) {
            Ok(incoming) => {
                self.client_event = incoming.event_id;
                incoming.event
            }
            Err(Refusal {
                code,
                message,
                event_id,
            }) => return self.client_error(code, &message, event_id.as_deref()).await,
        };
        match event {
            ClientEvent::Append(audio) => {
                let mut samples = Vec::new();
                match self.pcm.push(&audio, &mut samples) {
                    Ok(()) => self.feed(samples).await,
                    Err(e) => {
                        self.client_error("invalid_audio", &e.to_string(), None)
                            .await
                    }
                }
            }
            ClientEvent::Commit => self.commit().await,
            ClientEvent::Clear => self.clear().await,
            ClientEvent::SessionUpdate(s) => self.update(&s, false).await,
            ClientEvent::TranscriptionSessionUpdate(s) => self.update(&s, true).await,
        }
    }

    async fn update(&mut self, session: &Value, beta: bool) -> Result<(), End> {
        let mut next = self.config.clone();
        let checked = if beta {
            next.update_beta(session)
        } else {
            next.update_ga(session)
        }
        .and_then(|_| {
            if self.state.is_model(&next.model) {
                Ok(())
            } else {
                Err(format!(
                    "model `{}` is not served here: this server runs `{}` (or ask for `default`)",
                    next.model, self.state.options.model_name
                ))
            }
        })
        .and_then(|_| self.state.check_language(next.language.as_deref()));
        if let Err(e) = checked {
            return self.client_error("invalid_session", &e, None).await;
        }
        if next.rate != self.config.rate {
            // what was sent at the old rate goes through first
            let mut tail = Vec::new();
            self.pcm.flush(&mut tail);
            self.feed(tail).await?;
            match PcmInput::new(next.rate, self.rate as u32) {
                Ok(p) => self.pcm = p,
                Err(e) => return self.client_error("invalid_session", &e, None).await,
            }
        }
        self.config = next;
        let id = self.ids.session();
        if beta {
            let session = self.config.beta(&id);
            self.send_event(
                "transcription_session.updated",
                json!({ "session": session }),
            )
            .await
        } else {
            let session = self.config.ga(&id);
            self.send_event("session.updated", json!({ "session": session }))
                .await
        }
    }

    /// Writes samples (model rate) into the live session, starting one
    /// when none runs; a full buffer drops them (reported as an error).
    async fn feed(&mut self, samples: Vec<f32>) -> Result<(), End> {
        if samples.is_empty() {
            return Ok(());
        }
        if self.live.is_none() {
            self.live = Some(self.start_live().await?);
        }
        let n = samples.len() as u64;
        if let Some(live) = &mut self.live {
            live.input.write(&samples);
            live.fed += n;
        }
        self.received += n;
        self.uncommitted += n;
        self.arrivals.push_back((self.received, Instant::now()));
        if self.arrivals.len() > MAX_ARRIVALS {
            self.arrivals.pop_front();
        }
        add_seconds(&self.state.metrics.live_audio_us, n as f64 / self.rate);
        Ok(())
    }

    async fn start_live(&mut self) -> Result<Live, End> {
        let t = self.state.transcriber.clone();
        let mut settings = self.state.options.live.clone();
        if self.config.server_vad {
            settings.end_silence_s = self.config.silence_ms as f64 / 1000.0;
        } else {
            settings.end_silence_s = NO_ENDPOINT_S;
            settings.vad = false;
        }
        // a Whisper session builds its network: not on the executor
        let started = tokio::task::spawn_blocking(move || {
            let setup = t.live(settings)?;
            setup.start().map(|s| (s, setup.commits_words()))
        })
        .await;
        match started {
            Ok(Ok(((lt, input), commits_words))) => Ok(Live {
                lt,
                input,
                fed: 0,
                dropped: 0,
                commits_words,
            }),
            Ok(Err(e)) => {
                self.fail(&format!("the live session cannot start: {e}"))
                    .await
            }
            Err(e) => {
                self.fail(&format!("the live session cannot start: {e}"))
                    .await
            }
        }
    }

    async fn fail<T>(&mut self, message: &str) -> Result<T, End> {
        self.state
            .metrics
            .streams_failed
            .fetch_add(1, Ordering::Relaxed);
        let ev = self
            .ids
            .error("server_error", "transcription_failed", message, None);
        let _ = self.send(ev).await;
        self.close(1011, "transcription failed").await;
        Err(End::Failed)
    }

    /// Sends what the live session reported since the last look.
    async fn drain(&mut self) -> Result<(), End> {
        let events: Vec<LiveEvent> = match &self.live {
            Some(live) => live.lt.events().try_iter().collect(),
            None => return Ok(()),
        };
        for e in events {
            self.on_live(e).await?;
        }
        Ok(())
    }

    async fn on_live(&mut self, event: LiveEvent) -> Result<(), End> {
        match event {
            LiveEvent::Partial {
                text,
                words,
                stable,
                ..
            } => {
                self.open_item(&words).await?;
                let commits = self.live.as_ref().is_some_and(|l| l.commits_words);
                let settled = settled_text(&text, &words, stable, commits);
                self.send_delta(settled).await
            }
            LiveEvent::Final {
                text, words, at, ..
            } => self.final_line(text, words, at).await,
            LiveEvent::Overrun { dropped_total } => {
                let new = match &mut self.live {
                    Some(live) => {
                        let new = dropped_total.saturating_sub(live.dropped);
                        live.dropped = dropped_total;
                        new
                    }
                    None => 0,
                };
                self.state
                    .metrics
                    .dropped_samples
                    .fetch_add(new, Ordering::Relaxed);
                let message = format!(
                    "{:.2} s of audio dropped: it came faster than the model transcribes \
                     (send at real-time pace)",
                    new as f64 / self.rate
                );
                let ev = self
                    .ids
                    .error("invalid_request_error", "audio_dropped", &message, None);
                self.send(ev).await
            }
            LiveEvent::Failed(e) => self.fail(&format!("transcription failed: {e}")).await,
        }
    }

    /// Starts an item for the utterance `words` begin, if none is open.
    async fn open_item(&mut self, words: &[Word]) -> Result<(), End> {
        if self.item.is_some() {
            return Ok(());
        }
        let id = self.ids.item();
        self.item = Some(Item {
            id: id.clone(),
            sent: String::new(),
        });
        if self.config.server_vad {
            let start_s = words.first().map_or(0.0, |w| w.start_s) + self.offset_s();
            self.send_event(
                "input_audio_buffer.speech_started",
                json!({"audio_start_ms": ms(start_s), "item_id": id}),
            )
            .await?;
        }
        Ok(())
    }

    /// Seconds of audio before the live session now running.
    fn offset_s(&self) -> f64 {
        self.base as f64 / self.rate
    }

    /// Sends what `text` adds to the text already sent, when that is still
    /// its beginning (a revised word is left to `completed`).
    async fn send_delta(&mut self, text: &str) -> Result<(), End> {
        let Some(item) = &mut self.item else {
            return Ok(());
        };
        let text = text.trim_start();
        let Some(delta) = text
            .strip_prefix(item.sent.as_str())
            .filter(|d| !d.is_empty())
        else {
            return Ok(());
        };
        let delta = delta.to_string();
        item.sent.push_str(&delta);
        let id = item.id.clone();
        self.send_event(
            "conversation.item.input_audio_transcription.delta",
            json!({"item_id": id, "content_index": 0, "delta": delta}),
        )
        .await
    }

    async fn final_line(&mut self, text: String, words: Vec<Word>, at: Instant) -> Result<(), End> {
        self.open_item(&words).await?;
        self.send_delta(&text).await?;
        let Some(item) = self.item.take() else {
            return Ok(());
        };
        let offset = self.offset_s();
        if self.config.server_vad {
            let end_s = words.last().map_or(0.0, |w| w.end_s) + offset;
            self.send_event(
                "input_audio_buffer.speech_stopped",
                json!({"audio_end_ms": ms(end_s), "item_id": item.id}),
            )
            .await?;
        }
        let seconds = self.uncommitted as f64 / self.rate;
        self.completed(&item.id, &text, &words, seconds).await?;
        self.observe_latency(&words, at);
        self.uncommitted = 0;
        self.finals += 1;
        Ok(())
    }

    /// `committed` then `completed` for `item_id`.
    async fn completed(
        &mut self,
        item_id: &str,
        text: &str,
        words: &[Word],
        seconds: f64,
    ) -> Result<(), End> {
        let previous = self.previous_item.replace(item_id.to_string());
        self.send_event(
            "input_audio_buffer.committed",
            json!({"previous_item_id": previous, "item_id": item_id}),
        )
        .await?;
        let words = words_json(words, self.offset_s());
        self.send_event(
            "conversation.item.input_audio_transcription.completed",
            json!({
                "item_id": item_id,
                "content_index": 0,
                "transcript": text,
                "usage": {"type": "duration", "seconds": (seconds * 1000.0).round() / 1000.0},
                "words": words,
            }),
        )
        .await
    }

    /// Word latency: from the arrival of each word's last sample to `at`.
    fn observe_latency(&mut self, words: &[Word], at: Instant) {
        let mut last = 0;
        for w in words {
            let end = self.base + (w.end_s.max(0.0) * self.rate) as u64;
            let arrived = self
                .arrivals
                .iter()
                .find(|(through, _)| *through >= end)
                .or(self.arrivals.back());
            if let Some((_, when)) = arrived {
                let latency = at.saturating_duration_since(*when).as_secs_f64();
                self.state.metrics.word_latency.observe(latency);
            }
            last = last.max(end);
        }
        while self.arrivals.front().is_some_and(|(t, _)| *t < last) {
            self.arrivals.pop_front();
        }
    }

    /// Ends the running live session: its last line becomes final.
    async fn end_live(&mut self) -> Result<(), End> {
        let mut tail = Vec::new();
        self.pcm.flush(&mut tail);
        self.feed(tail).await?;
        let Some(live) = self.live.take() else {
            return Ok(());
        };
        let finished = tokio::task::spawn_blocking(move || {
            let mut live = live;
            live.lt.finish();
            live
        })
        .await;
        let live = match finished {
            Ok(live) => live,
            Err(e) => return self.fail(&format!("the live session failed: {e}")).await,
        };
        let events: Vec<LiveEvent> = live.lt.events().try_iter().collect();
        for e in events {
            self.on_live(e).await?;
        }
        self.base += live.fed;
        Ok(())
    }

    /// `input_audio_buffer.commit`: the utterance so far becomes final.
    async fn commit(&mut self) -> Result<(), End> {
        let finals = self.finals;
        let had_audio = self.uncommitted > 0 || self.item.is_some();
        self.end_live().await?;
        if self.finals > finals {
            return Ok(());
        }
        if !had_audio && self.uncommitted == 0 {
            return self
                .client_error(
                    "input_audio_buffer_commit_empty",
                    "the buffer holds no audio since the last commit",
                    None,
                )
                .await;
        }
        // audio without words: an empty transcript
        let id = match self.item.take() {
            Some(item) => item.id,
            None => self.ids.item(),
        };
        let seconds = self.uncommitted as f64 / self.rate;
        self.completed(&id, "", &[], seconds).await?;
        self.uncommitted = 0;
        Ok(())
    }

    /// `input_audio_buffer.clear`: the audio not yet final is dropped.
    async fn clear(&mut self) -> Result<(), End> {
        self.pcm.reset();
        if let Some(live) = self.live.take() {
            self.base += live.fed;
            tokio::task::spawn_blocking(move || drop(live));
        }
        self.item = None;
        self.uncommitted = 0;
        self.send_event("input_audio_buffer.cleared", json!({}))
            .await
    }
}

/// Seconds as whole milliseconds.
fn ms(s: f64) -> u64 {
    (s.max(0.0) * 1000.0).round() as u64
}
