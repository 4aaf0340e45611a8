//! A small load check for `pulsed serve`: N Realtime clients, each
//! replaying a WAV (looped, a second of silence after each replay) at
//! real-time pace in 20 ms appends for a given
//! time, then committing. Prints word latency (the append that held a
//! word's last sample -> the `completed` event holding the word),
//! completed lines, and errors by code.
//!
//! ```sh
//! pulsed serve --model pulsed-en-ctc --max-streams 64 &
//! cargo run --release --example realtime_load -- ws://127.0.0.1:8000/v1/realtime 8 30 fixtures/asr/heldout/00.wav
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// What all clients saw.
#[derive(Default)]
struct Tally {
    /// Word end -> the `completed` event holding the word.
    latencies: Vec<f64>,
    /// Word end -> the first delta holding the word.
    delta_latencies: Vec<f64>,
    lines: usize,
    errors: BTreeMap<String, usize>,
    failed_clients: usize,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, clients, seconds, wav] = &args[..] else {
        return Err("usage: realtime_load WS_URL CLIENTS SECONDS FILE.wav".into());
    };
    let clients: usize = clients.parse()?;
    let seconds: f64 = seconds.parse()?;
    let mut samples = pulsed::audio::load(std::path::Path::new(wav), 16_000)?.samples;
    // a pause after each replay, so that the endpointer ends the line
    samples.extend(std::iter::repeat_n(0.0, 16_000));
    let blocks: Arc<Vec<String>> = Arc::new(
        samples
            .chunks(320)
            .map(|b| {
                let bytes: Vec<u8> = b
                    .iter()
                    .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
                    .collect();
                base64::engine::general_purpose::STANDARD.encode(bytes)
            })
            .collect(),
    );
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (url, blocks, tally) = (url.clone(), blocks.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            // start the clients over the first second, as people arrive
            tokio::time::sleep(Duration::from_millis((i * 1000 / clients.max(1)) as u64)).await;
            if let Err(e) = client(&url, &blocks, seconds, &tally).await {
                eprintln!("client {i}: {e}");
                tally.lock().unwrap().failed_clients += 1;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let mut t = tally.lock().unwrap();
    let quantiles = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)));
        match (q(0.5), q(0.9), q(0.99), v.last()) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                format!("p50 {a:.3} s, p90 {b:.3} s, p99 {c:.3} s, max {d:.3} s")
            }
            _ => "none".to_string(),
        }
    };
    let completed = quantiles(&mut t.latencies);
    let delta = quantiles(&mut t.delta_latencies);
    println!(
        "{clients} clients x {seconds} s: {} lines, {} words; word end -> delta: {delta}; \
         word end -> completed: {completed}; failed clients {}; errors {:?}",
        t.lines,
        t.latencies.len(),
        t.failed_clients,
        t.errors
    );
    Ok(())
}

async fn client(
    url: &str,
    blocks: &[String],
    seconds: f64,
    tally: &Mutex<Tally>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (ws, _) = tokio_tungstenite::connect_async(url).await?;
    let (mut tx, mut rx) = ws.split();
    let update = json!({"type": "session.update", "session": {"type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}});
    tx.send(Message::text(update.to_string())).await?;
    // when each 20 ms block was sent, by its index from the stream's start
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let committed = std::sync::atomic::AtomicBool::new(false);
    let reader = {
        let sent = sent.clone();
        // when each word of the open item first came in a delta
        let mut shown: Vec<Instant> = Vec::new();
        let committed = &committed;
        async move {
            while let Some(msg) = rx.next().await {
                let Ok(Message::Text(t)) = msg else { break };
                let ev: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                let now = Instant::now();
                match ev["type"].as_str().unwrap_or_default() {
                    "conversation.item.input_audio_transcription.delta" => {
                        let n = ev["delta"]
                            .as_str()
                            .unwrap_or_default()
                            .split_whitespace()
                            .count();
                        shown.extend(std::iter::repeat_n(now, n));
                    }
                    "conversation.item.input_audio_transcription.completed" => {
                        let sent = sent.lock().unwrap();
                        let mut t = tally.lock().unwrap();
                        t.lines += 1;
                        for (i, w) in ev["words"].as_array().into_iter().flatten().enumerate() {
                            let end = w["end"].as_f64().unwrap_or(0.0);
                            let block = ((end * 50.0).ceil() as usize).saturating_sub(1);
                            if let Some(at) = sent.get(block.min(sent.len().saturating_sub(1))) {
                                t.latencies.push(now.duration_since(*at).as_secs_f64());
                                if let Some(d) = shown.get(i) {
                                    t.delta_latencies
                                        .push(d.saturating_duration_since(*at).as_secs_f64());
                                }
                            }
                        }
                        shown.clear();
                        if committed.load(std::sync::atomic::Ordering::SeqCst) {
                            break; // the commit's answer
                        }
                    }
                    "error" => {
                        let code = ev["error"]["code"].as_str().unwrap_or("?").to_string();
                        *tally.lock().unwrap().errors.entry(code).or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
    };
    let writer = async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let n = (seconds * 50.0) as usize;
        for i in 0..n {
            tick.tick().await;
            let append =
                json!({"type": "input_audio_buffer.append", "audio": blocks[i % blocks.len()]});
            sent.lock().unwrap().push(Instant::now());
            tx.send(Message::text(append.to_string())).await?;
        }
        committed.store(true, std::sync::atomic::Ordering::SeqCst);
        tx.send(Message::text(r#"{"type":"input_audio_buffer.commit"}"#))
            .await?;
        Ok::<_, tokio_tungstenite::tungstenite::Error>(tx)
    };
    let (tx, ()) = tokio::join!(writer, async {
        // the reader ends at the commit's answer, or when the server closes
        let _ = tokio::time::timeout(Duration::from_secs_f64(seconds + 60.0), reader).await;
    });
    let mut tx = tx?;
    let _ = tx.close().await;
    Ok(())
}
