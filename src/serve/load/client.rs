//! One load client: a Realtime stream that replays a recording at
//! real-time pace and times each word the server sends back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::misbehave::{Role, HUGE_BYTES};
use super::stats::{Outcome, StreamResult, WordLatency};
use super::{Counters, Recording, RATE};

/// Names our commit, so that its refusal for an empty buffer (every line
/// already ended by the server's endpointer) is told from real errors.
const COMMIT_ID: &str = "pulsed_load_commit";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DELTA: &str = "conversation.item.input_audio_transcription.delta";
const COMPLETED: &str = "conversation.item.input_audio_transcription.completed";

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Tx = futures_util::stream::SplitSink<Ws, Message>;
type Rx = futures_util::stream::SplitStream<Ws>;

/// What one client does.
pub struct Plan {
    pub url: String,
    pub api_key: Option<String>,
    pub recording: Arc<Recording>,
    /// How long the last line may take after the commit.
    pub final_timeout: Duration,
    /// `--duration`'s end.
    pub deadline: Option<Instant>,
    pub role: Role,
}

/// The words of an open item as deltas showed them, with when each came.
#[derive(Default)]
struct Shown {
    text: String,
    /// The text's length after each delta, and when it came.
    arrivals: Vec<(usize, Instant)>,
}

impl Shown {
    /// When the deltas first held `word`, looked for from byte `from` of
    /// their text on; the byte after it. By text, not by count: the
    /// completed event's words need not split as the deltas' spaces do
    /// ("non", "-administrator").
    fn find(&self, word: &str, from: usize) -> Option<(Instant, usize)> {
        let word = word.trim();
        let at = from + self.text.get(from..)?.find(word)?;
        let end = at + word.len();
        let i = self.arrivals.partition_point(|&(len, _)| len < end);
        self.arrivals.get(i).map(|&(_, t)| (t, end))
    }
}

/// Runs one stream to its end, `--duration`'s end or its failure.
pub async fn run(plan: Plan, counters: &Counters) -> StreamResult {
    let mut r = StreamResult::new(&plan.recording.name);
    r.role = plan.role;
    let outcome = match plan.deadline {
        // dropping the stream at the deadline closes its connection
        Some(d) => timeout_at(d, stream(&plan, counters, &mut r))
            .await
            .unwrap_or(Outcome::Unfinished),
        None => stream(&plan, counters, &mut r).await,
    };
    r.outcome = outcome;
    r
}

/// Counts a stream as streaming while it lives, however it ends.
struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn stream(plan: &Plan, counters: &Counters, r: &mut StreamResult) -> Outcome {
    r.started = true;
    counters.started.fetch_add(1, Ordering::Relaxed);
    let ws = match connect(plan).await {
        Ok(ws) => ws,
        Err(why) => return Outcome::Failed(why),
    };
    counters.active.fetch_add(1, Ordering::Relaxed);
    let _active = Active(&counters.active);
    let (mut tx, mut rx) = ws.split();
    let update = json!({"type": "session.update", "session": {"type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE}}}}});
    if tx.send(Message::text(update.to_string())).await.is_err() {
        return Outcome::Failed("disconnected".into());
    }
    let rec = &plan.recording;
    let block = Duration::from_secs_f64(rec.block_samples as f64 / RATE as f64);
    // the client's start: word times count from here, block by block
    let t0 = Instant::now();
    let mut items: HashMap<String, Shown> = HashMap::new();
    let mut sent = 0usize;
    let mut error: Option<String> = None;
    let mut end_by: Option<Instant> = None;
    // where the last item ended in the audio, for words without times
    let mut item_end_s = 0.0;
    let outcome = loop {
        let wake = end_by.unwrap_or(t0 + block * (sent as u32 + 1));
        tokio::select! {
            msg = rx.next() => {
                let now = Instant::now();
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                        return Outcome::Failed(error.map_or("disconnected".into(), |c| format!("error: {c}")));
                    }
                    Some(Ok(_)) => continue,
                };
                let Ok(ev) = serde_json::from_str::<Value>(text.as_str()) else {
                    error.get_or_insert_with(|| "unparsable event".into());
                    continue;
                };
                match ev["type"].as_str().unwrap_or_default() {
                    DELTA => on_delta(&ev, now, &mut items),
                    COMPLETED => {
                        let sent_s = rec.seconds(sent);
                        on_completed(&ev, now, t0, sent_s, &mut item_end_s, &mut items, r);
                    }
                    "error" => {
                        let code = ev["error"]["code"].as_str().unwrap_or("(no code)").to_string();
                        let ours = ev["error"]["event_id"] == COMMIT_ID;
                        if !(ours && code == "input_audio_buffer_commit_empty") {
                            error.get_or_insert_with(|| code.clone());
                        }
                        r.errors.push(code);
                    }
                    // the answer to our clear, after the commit's events
                    "input_audio_buffer.cleared" if end_by.is_some() => {
                        break error.map_or(Outcome::Completed, |c| Outcome::Failed(format!("error: {c}")));
                    }
                    _ => {}
                }
            }
            _ = sleep_until(wake) => {
                if end_by.is_some() {
                    return Outcome::Failed("timeout".into());
                }
                if let Some(bad) = plan.role.garbage(sent) {
                    if tx.send(Message::text(bad.to_string())).await.is_err() {
                        return Outcome::Failed("disconnected".into());
                    }
                }
                if plan.role.turns_at(sent, rec.blocks.len()) {
                    return misbehave(plan, tx, rx).await;
                }
                let append = json!({"type": "input_audio_buffer.append", "audio": rec.blocks[sent]});
                if tx.send(Message::text(append.to_string())).await.is_err() {
                    return Outcome::Failed("disconnected".into());
                }
                sent += 1;
                r.audio_s = rec.seconds(sent);
                counters.samples.fetch_add(rec.samples_through(sent) - rec.samples_through(sent - 1), Ordering::Relaxed);
                if sent == rec.blocks.len() {
                    // The server answers a commit with its last line (or an
                    // empty-buffer error) and a clear with `cleared`, in
                    // order: `cleared` marks the end of the commit's events.
                    let commit = json!({"type": "input_audio_buffer.commit", "event_id": COMMIT_ID});
                    let clear = json!({"type": "input_audio_buffer.clear"});
                    for m in [commit, clear] {
                        if tx.send(Message::text(m.to_string())).await.is_err() {
                            return Outcome::Failed("disconnected".into());
                        }
                    }
                    end_by = Some(Instant::now() + plan.final_timeout);
                }
            }
        }
    };
    let _ = timeout(Duration::from_secs(1), tx.send(Message::Close(None))).await;
    outcome
}

/// What a misbehaving client does halfway through its recording.
async fn misbehave(plan: &Plan, mut tx: Tx, mut rx: Rx) -> Outcome {
    match plan.role {
        Role::Stall => {
            // holds the socket open, reading nothing, for as long as a
            // line may take (or to the run's end)
            let until = Instant::now() + plan.final_timeout;
            let until = plan.deadline.map_or(until, |d| d.min(until));
            sleep_until(until).await;
            Outcome::Failed("stalled".into())
        }
        Role::Huge => {
            let audio = "A".repeat(HUGE_BYTES);
            let m = json!({"type": "input_audio_buffer.append", "audio": audio});
            let _ = tx.send(Message::text(m.to_string())).await;
            // the server closes the connection; wait for it a while
            let closed = timeout(plan.final_timeout, async {
                while let Some(Ok(m)) = rx.next().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
            })
            .await;
            match closed {
                Ok(()) => Outcome::Failed("closed by the server".into()),
                Err(_) => Outcome::Failed("not closed by the server".into()),
            }
        }
        // dropping both halves closes the socket with no close frame
        _ => Outcome::Failed("dropped".into()),
    }
}

async fn connect(plan: &Plan) -> Result<Ws, String> {
    let mut req = plan
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("connect: {e}"))?;
    if let Some(key) = &plan.api_key {
        let v = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| "connect: the API key is not a valid header value".to_string())?;
        req.headers_mut().insert(AUTHORIZATION, v);
    }
    match timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(req)).await {
        Err(_) => Err("connect: timeout".into()),
        Ok(Err(e)) => Err(connect_failure(&e)),
        Ok(Ok((ws, _))) => Ok(ws),
    }
}

/// A short reason that groups alike failures (the report counts by it).
fn connect_failure(e: &WsError) -> String {
    match e {
        WsError::Http(resp) => format!("connect: HTTP {}", resp.status().as_u16()),
        WsError::Io(io) => format!("connect: {}", io.kind()),
        other => format!("connect: {other}"),
    }
}

fn on_delta(ev: &Value, now: Instant, items: &mut HashMap<String, Shown>) {
    let id = ev["item_id"].as_str().unwrap_or_default().to_string();
    let shown = items.entry(id).or_default();
    shown
        .text
        .push_str(ev["delta"].as_str().unwrap_or_default());
    shown.arrivals.push((shown.text.len(), now));
}

/// Times the words of a `completed` event. Word ends come from its `words`
/// (seconds from the stream's first sample); without them, every word
/// ends where its utterance does (the server's `usage.seconds` after the
/// previous line, else the audio sent so far).
fn on_completed(
    ev: &Value,
    now: Instant,
    t0: Instant,
    sent_s: f64,
    item_end_s: &mut f64,
    items: &mut HashMap<String, Shown>,
    r: &mut StreamResult,
) {
    let shown = items
        .remove(ev["item_id"].as_str().unwrap_or_default())
        .unwrap_or_default();
    let transcript = ev["transcript"].as_str().unwrap_or_default();
    *item_end_s = match ev["usage"]["seconds"].as_f64() {
        Some(s) => *item_end_s + s,
        None => sent_s,
    };
    let timed: Vec<(String, f64)> = match ev["words"].as_array() {
        Some(words) => words
            .iter()
            .map(|w| {
                let text = w["word"].as_str().unwrap_or_default().to_string();
                (text, w["end"].as_f64().unwrap_or(*item_end_s))
            })
            .collect(),
        None => {
            let words: Vec<(String, f64)> = transcript
                .split_whitespace()
                .map(|w| (w.to_string(), *item_end_s))
                .collect();
            r.words_without_times += words.len();
            words
        }
    };
    let since = |at: Instant, end_s: f64| {
        let end = t0 + Duration::from_secs_f64(end_s.max(0.0));
        if at >= end {
            at.duration_since(end).as_secs_f64()
        } else {
            -end.duration_since(at).as_secs_f64()
        }
    };
    let mut cursor = 0;
    for (text, end_s) in &timed {
        let first = match shown.find(text, cursor) {
            Some((at, after)) => {
                cursor = after;
                at
            }
            None => {
                r.words_first_in_completed += 1;
                now
            }
        };
        r.words.push(WordLatency {
            first_shown_s: since(first, *end_s),
            committed_s: since(now, *end_s),
        });
    }
    if !transcript.is_empty() {
        r.lines.push(transcript.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_is_shown_by_the_first_delta_that_holds_its_text() {
        let (t0, t1) = (Instant::now(), Instant::now() + Duration::from_millis(300));
        let mut items = HashMap::new();
        let delta = |d: &str| json_delta(d);
        on_delta(&delta("Kick all non-administrator"), t0, &mut items);
        on_delta(&delta(" users, three"), t1, &mut items);
        let shown = &items["item"];
        // the completed event splits what the deltas hold as one word
        let mut cursor = 0;
        let mut at = Vec::new();
        for w in ["Kick", "all", "non", "-administrator", "users,", "three"] {
            let (t, after) = shown.find(w, cursor).expect(w);
            cursor = after;
            at.push(t);
        }
        assert_eq!(at, [t0, t0, t0, t0, t1, t1]);
        assert!(shown.find("four", cursor).is_none());
        // a word said twice is found where it comes next
        assert_eq!(shown.find("all", 0).map(|s| s.0), Some(t0));
        assert!(shown.find("all", cursor).is_none());
    }

    fn json_delta(d: &str) -> Value {
        serde_json::json!({"item_id": "item", "delta": d})
    }
}
