//! `pulsed serve` end to end: the server in this process on a free port,
//! spoken to by an HTTP client and a WebSocket client as OpenAI's clients
//! speak. Transcripts must equal the library's on the same files.
#![cfg(feature = "serve")]

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use pulsed::asr::{LiveSettings, Transcriber, TranscriberOptions};
use pulsed::engine::Engine;
use pulsed::live::LiveEvent;
use pulsed::output::{write_transcript, Format};
use pulsed::serve::ServeOptions;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const CTC: &str = "pulsed-en-ctc";
const HELLO: &str = "fixtures/asr/hello.wav";
/// How long any one awaited answer may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A server running in this process; stopped when dropped.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn ws_url(&self) -> String {
        format!("ws://{}/v1/realtime?model=whatever", self.addr)
    }
}

fn open(model: &str) -> Arc<Transcriber> {
    let t = Transcriber::open(
        Some(Path::new(model)),
        &TranscriberOptions::default(),
        Engine::Cpu,
    )
    .expect("the model opens");
    Arc::new(t)
}

async fn start(t: Arc<Transcriber>, name: &str, tune: impl FnOnce(&mut ServeOptions)) -> Server {
    let mut options = ServeOptions::new(name);
    options.language = Some("en".into());
    tune(&mut options);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(pulsed::serve::serve(listener, t, options, async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        stop: Some(stop),
    }
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PATIENCE:?}"))
}

async fn post_file(
    server: &Server,
    path: &str,
    fields: &[(&str, &str)],
    key: Option<&str>,
) -> reqwest::Response {
    let bytes = std::fs::read(path).unwrap();
    let name = Path::new(path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let mut form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name(name),
    );
    for (k, v) in fields {
        form = form.text(k.to_string(), v.to_string());
    }
    let mut req = reqwest::Client::new()
        .post(server.url("/v1/audio/transcriptions"))
        .multipart(form);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    within("transcription request", req.send()).await.unwrap()
}

fn library_format(t: &pulsed::asr::Transcription, format: Format) -> String {
    let mut out = Vec::new();
    write_transcript(&mut out, format, "", &t.transcript, &Default::default()).unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_formats_equal_the_library() {
    let t = open(CTC);
    let want = t.transcribe_file(Path::new(HELLO)).unwrap();
    assert!(!want.transcript.text.is_empty());
    let server = start(t, CTC, |_| {}).await;

    let r = post_file(&server, HELLO, &[("model", CTC)], None).await;
    assert_eq!(r.status(), 200);
    let json: Value = r.json().await.unwrap();
    assert_eq!(json["text"], want.transcript.text);

    let r = post_file(&server, HELLO, &[("response_format", "text")], None).await;
    assert_eq!(r.text().await.unwrap(), library_format(&want, Format::Text));

    for (name, format) in [("srt", Format::Srt), ("vtt", Format::Vtt)] {
        let fields = [("response_format", name), ("model", "default")];
        let r = post_file(&server, HELLO, &fields, None).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), library_format(&want, format));
    }

    let fields = [("response_format", "verbose_json"), ("language", "en")];
    let v: Value = post_file(&server, HELLO, &fields, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["text"], want.transcript.text);
    let words = v["words"].as_array().unwrap();
    assert_eq!(words.len(), want.transcript.words.len());
    for (got, w) in words.iter().zip(&want.transcript.words) {
        assert_eq!(got["word"], w.text);
        assert!((got["start"].as_f64().unwrap() - w.start_s).abs() < 1e-3);
        assert!((got["end"].as_f64().unwrap() - w.end_s).abs() < 1e-3);
    }
    let segments = v["segments"].as_array().unwrap();
    let joined: Vec<&str> = segments
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined.join(" "), want.transcript.text);

    // stream=true: server-sent deltas that add up to the text
    let r = post_file(&server, HELLO, &[("stream", "true")], None).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let body = r.text().await.unwrap();
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let (done, deltas) = events.split_last().unwrap();
    assert_eq!(done["type"], "transcript.text.done");
    assert_eq!(done["text"], want.transcript.text);
    let text: String = deltas
        .iter()
        .map(|d| {
            assert_eq!(d["type"], "transcript.text.delta");
            d["delta"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, want.transcript.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_refusals_are_openai_errors_and_the_server_goes_on() {
    let server = start(open(CTC), CTC, |o| o.max_upload_bytes = 80_000).await;
    let error_of = |v: &Value| {
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    let r = post_file(&server, HELLO, &[("model", "whisper-1")], None).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["param"], "model");

    let r = post_file(&server, "Cargo.toml", &[], None).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(error_of(&v).contains("audio"), "{v}");

    let r = post_file(&server, HELLO, &[("response_format", "docx")], None).await;
    assert_eq!(r.status(), 400);
    let r = post_file(&server, HELLO, &[("language", "de")], None).await;
    assert_eq!(r.status(), 400);

    // larger than --max-upload-mb
    let r = post_file(&server, "fixtures/asr/heldout/00.wav", &[], None).await;
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert!(error_of(&v).contains("larger"), "{v}");

    // no file at all, and a body that is not multipart
    let form = reqwest::multipart::Form::new().text("model", "default");
    let url = server.url("/v1/audio/transcriptions");
    let r = reqwest::Client::new()
        .post(&url)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = reqwest::Client::new()
        .post(&url)
        .body("hi")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error());
    let v: Value = r.json().await.unwrap();
    assert!(!error_of(&v).is_empty());

    let r = post_file(&server, HELLO, &[], None).await;
    assert_eq!(r.status(), 200, "the server still transcribes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_guards_every_route_but_health() {
    let server = start(open(CTC), CTC, |o| o.api_key = Some("s3cret".into())).await;
    let client = reqwest::Client::new();
    let r = client.get(server.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for path in ["/v1/models", "/metrics"] {
        let r = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_api_key");
        let r = client
            .get(server.url(path))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
        let r = client
            .get(server.url(path))
            .bearer_auth("s3cret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = post_file(&server, HELLO, &[], None).await;
    assert_eq!(r.status(), 401);
    let r = post_file(&server, HELLO, &[], Some("s3cret")).await;
    assert_eq!(r.status(), 200);

    // the WebSocket upgrade is refused before it upgrades
    match tokio_tungstenite::connect_async(server.ws_url()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 401)
        }
        other => panic!("expected a 401, got {:?}", other.map(|_| ())),
    }
    let mut req = server.ws_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("Authorization", "Bearer s3cret".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(
        wait_for(&mut ws, "session.created").await["type"],
        "session.created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_and_metrics() {
    let server = start(open(CTC), CTC, |_| {}).await;
    let client = reqwest::Client::new();
    let v: Value = client
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], CTC);
    assert_eq!(v["data"][0]["object"], "model");
    let r = client
        .get(server.url(&format!("/v1/models/{CTC}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .get(server.url("/v1/models/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    post_file(&server, HELLO, &[], None).await;
    let metrics = scrape(&server).await;
    assert_eq!(metrics["pulsed_requests_total"], 1.0);
    assert!((metrics["pulsed_audio_seconds_total{source=\"file\"}"] - 2.008).abs() < 1e-3);
    assert_eq!(metrics["pulsed_streams_active"], 0.0);
}

/// `/metrics` as name (with labels) -> value; every sample line must parse.
async fn scrape(server: &Server) -> std::collections::HashMap<String, f64> {
    let text = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut out = std::collections::HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, value) = line.rsplit_once(' ').expect("`name value`");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        assert!(
            name.chars().next().unwrap().is_ascii_alphabetic(),
            "bad name: {line}"
        );
        out.insert(name.to_string(), value);
    }
    for name in [
        "pulsed_streams_active",
        "pulsed_streams_rejected_total",
        "pulsed_streams_failed_total",
        "pulsed_requests_rejected_total",
        "pulsed_requests_failed_total",
        "pulsed_word_latency_seconds_count",
        "pulsed_word_latency_seconds_bucket{le=\"+Inf\"}",
    ] {
        assert!(out.contains_key(name), "{name} missing from\n{text}");
    }
    out
}

/// The next event (`None`: the server closed the connection).
async fn next_event(ws: &mut Ws) -> Option<Value> {
    loop {
        let msg = within("a realtime event", ws.next()).await?;
        match msg {
            Ok(Message::Text(t)) => return Some(serde_json::from_str(t.as_str()).unwrap()),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Events up to the first of type `kind` (which is returned).
async fn wait_for(ws: &mut Ws, kind: &str) -> Value {
    loop {
        let ev = next_event(ws)
            .await
            .unwrap_or_else(|| panic!("closed while waiting for {kind}"));
        if ev["type"] == kind {
            return ev;
        }
        assert_ne!(ev["type"], "error", "waiting for {kind}: {ev}");
    }
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

fn pcm16_b64(samples: &[f32]) -> String {
    let bytes: Vec<u8> = samples
        .iter()
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes())
        .collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Three synthetic-voice utterances with a second of silence after each.
fn utterances(rate: u32) -> Vec<f32> {
    let mut all = Vec::new();
    for f in [
        HELLO,
        "fixtures/asr/heldout/00.wav",
        "fixtures/asr/heldout/01.wav",
    ] {
        all.extend(pulsed::audio::load(Path::new(f), rate).unwrap().samples);
        all.extend(std::iter::repeat_n(0.0, rate as usize));
    }
    all
}

/// The library's final lines for `samples` (16 kHz) in a live session.
fn library_finals(t: &Transcriber, samples: &[f32]) -> Vec<String> {
    let (mut session, mut input) = t.live(LiveSettings::default()).unwrap().start().unwrap();
    for block in samples.chunks(320) {
        assert!(input.write_waiting(block));
    }
    session.finish();
    session
        .events()
        .try_iter()
        .filter_map(|e| match e {
            LiveEvent::Final { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

/// Streams `samples` at `rate` in 20 ms appends at twice real time, commits,
/// and gives the transcripts of the `completed` events (and checks each
/// item's deltas and events on the way).
async fn stream_and_collect(ws: &mut Ws, samples: &[f32], rate: u32) -> Vec<String> {
    for block in samples.chunks(rate as usize / 50) {
        send(
            ws,
            json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(block)}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    send(ws, json!({"type": "input_audio_buffer.commit"})).await;
    let mut finals = Vec::new();
    let mut started = 0;
    let mut committed = 0;
    let mut deltas = String::new();
    // after the commit the last line comes, or an empty one if the
    // endpointer had already ended every utterance
    loop {
        let ev = next_event(ws)
            .await
            .expect("open until the commit's answer");
        match ev["type"].as_str().unwrap() {
            "input_audio_buffer.speech_started" => started += 1,
            "input_audio_buffer.committed" => committed += 1,
            "conversation.item.input_audio_transcription.delta" => {
                deltas.push_str(ev["delta"].as_str().unwrap())
            }
            "conversation.item.input_audio_transcription.completed" => {
                let text = ev["transcript"].as_str().unwrap().to_string();
                if text.is_empty() {
                    assert!(finals.len() >= 2, "{finals:?}");
                    break;
                }
                // words carry times from the connection's first sample
                let words = ev["words"].as_array().unwrap();
                let joined: Vec<&str> = words.iter().map(|w| w["word"].as_str().unwrap()).collect();
                assert_eq!(joined.join(" "), text);
                assert!(words[0]["start"].as_f64().unwrap() <= words[0]["end"].as_f64().unwrap());
                // greedy CTC never revises a word it has ended: the deltas
                // add up to the line
                assert_eq!(deltas, text);
                deltas.clear();
                finals.push(text);
                if finals.len() >= 3 {
                    break;
                }
            }
            "error" => panic!("{ev}"),
            _ => {}
        }
    }
    assert_eq!(started, finals.len(), "one speech_started per line");
    assert!(committed >= finals.len());
    finals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_lines_equal_the_library_live_session() {
    let t = open(CTC);
    let samples = utterances(16_000);
    let want = library_finals(&t, &samples);
    assert!(
        want.len() >= 2,
        "the fixture has several utterances: {want:?}"
    );
    let server = start(t, CTC, |_| {}).await;

    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    let created = wait_for(&mut ws, "session.created").await;
    assert_eq!(created["session"]["type"], "transcription");
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000},
            "transcription": {"model": CTC, "language": "en"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 600}}}}}),
    )
    .await;
    let updated = wait_for(&mut ws, "session.updated").await;
    assert_eq!(
        updated["session"]["audio"]["input"]["format"]["rate"],
        16000
    );
    let got = stream_and_collect(&mut ws, &samples, 16_000).await;
    assert_eq!(got, want);

    // the same audio at OpenAI's 24 kHz, resampled by the server
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    let got = stream_and_collect(&mut ws, &utterances(24_000), 24_000).await;
    assert_eq!(got.join(" "), want.join(" "));

    let metrics = scrape(&server).await;
    assert!(metrics["pulsed_word_latency_seconds_count"] >= 10.0);
    assert!(metrics["pulsed_audio_seconds_total{source=\"live\"}"] > 2.0 * 8.0);
    assert_eq!(metrics["pulsed_streams_total"], 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_commit_without_turn_detection_gives_one_line() {
    let t = open(CTC);
    let want = t.transcribe_file(Path::new(HELLO)).unwrap().transcript.text;
    let server = start(t, CTC, |_| {}).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    // the beta form
    send(
        &mut ws,
        json!({"type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16", "turn_detection": null,
            "input_audio_transcription": {"model": "default"}}}),
    )
    .await;
    let updated = wait_for(&mut ws, "transcription_session.updated").await;
    assert_eq!(updated["session"]["turn_detection"], Value::Null);
    send(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
    let empty = wait_for(&mut ws, "error").await;
    assert_eq!(empty["error"]["code"], "input_audio_buffer_commit_empty");
    // 24 kHz by the beta format; silence after the words does not end the line
    let mut audio = pulsed::audio::load(Path::new(HELLO), 24_000)
        .unwrap()
        .samples;
    audio.extend(std::iter::repeat_n(0.0, 48_000));
    send(
        &mut ws,
        json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(&audio)}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    send(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
    let committed = wait_for(&mut ws, "input_audio_buffer.committed").await;
    let done = wait_for(
        &mut ws,
        "conversation.item.input_audio_transcription.completed",
    )
    .await;
    assert_eq!(done["item_id"], committed["item_id"]);
    assert_eq!(done["transcript"], want);
    // clear drops the audio not yet final
    send(
        &mut ws,
        json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(&audio)}),
    )
    .await;
    send(&mut ws, json!({"type": "input_audio_buffer.clear"})).await;
    wait_for(&mut ws, "input_audio_buffer.cleared").await;
    send(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
    let empty = wait_for(&mut ws, "error").await;
    assert_eq!(empty["error"]["code"], "input_audio_buffer_commit_empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_events_get_errors_and_the_session_goes_on() {
    let t = open(CTC);
    let want = t.transcribe_file(Path::new(HELLO)).unwrap().transcript.text;
    let server = start(t, CTC, |o| o.max_message_bytes = 256 << 10).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    let bad: [(Message, &str); 8] = [
        (Message::text("{not json"), "invalid_json"),
        (Message::text("[]"), "invalid_event"),
        (
            Message::text(r#"{"type":"response.create"}"#),
            "invalid_event",
        ),
        (
            Message::text(r#"{"type":"input_audio_buffer.append","audio":"%%%"}"#),
            "invalid_audio",
        ),
        (
            Message::text(r#"{"type":"input_audio_buffer.append","audio":"AAEC"}"#),
            "invalid_audio",
        ),
        (
            Message::text(r#"{"type":"input_audio_buffer.append"}"#),
            "missing_required_parameter",
        ),
        (
            Message::text(
                r#"{"type":"session.update","session":{"type":"transcription","audio":{"input":{"format":{"type":"audio/pcm","rate":44100}}}}}"#,
            ),
            "invalid_session",
        ),
        (Message::binary(vec![1u8, 2, 3]), "invalid_event"),
    ];
    for (msg, code) in bad {
        ws.send(msg).await.unwrap();
        let ev = next_event(&mut ws).await.expect("still open");
        assert_eq!(ev["type"], "error", "{ev}");
        assert_eq!(ev["error"]["code"], code, "{ev}");
    }
    // the session still transcribes
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}),
    )
    .await;
    wait_for(&mut ws, "session.updated").await;
    let samples = pulsed::audio::load(Path::new(HELLO), 16_000)
        .unwrap()
        .samples;
    send(
        &mut ws,
        json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(&samples)}),
    )
    .await;
    send(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
    let done = wait_for(
        &mut ws,
        "conversation.item.input_audio_transcription.completed",
    )
    .await;
    assert_eq!(done["transcript"], want);

    // a message over the limit closes this connection, not the server
    let huge = json!({"type": "input_audio_buffer.append", "audio": "A".repeat(300 << 10)});
    let _ = ws.send(Message::text(huge.to_string())).await;
    loop {
        match next_event(&mut ws).await {
            None => break,
            Some(ev) => assert_eq!(ev["type"], "error", "{ev}"),
        }
    }
    let (mut again, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut again, "session.created").await;
    assert_eq!(scrape(&server).await["pulsed_client_errors_total"], 8.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_streams_a_session_is_refused_and_a_slot_frees_on_disconnect() {
    let server = start(open(CTC), CTC, |o| o.max_streams = 1).await;
    let (mut first, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut first, "session.created").await;
    let (mut second, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    let ev = next_event(&mut second).await.expect("an error event");
    assert_eq!(ev["type"], "error");
    assert_eq!(ev["error"]["code"], "max_streams_reached");
    assert!(next_event(&mut second).await.is_none(), "then closed");
    assert_eq!(scrape(&server).await["pulsed_streams_rejected_total"], 1.0);

    first.close(None).await.unwrap();
    drop(first);
    let mut admitted = false;
    for _ in 0..100 {
        let (mut third, _) = tokio_tungstenite::connect_async(server.ws_url())
            .await
            .unwrap();
        if next_event(&mut third)
            .await
            .is_some_and(|e| e["type"] == "session.created")
        {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(admitted, "the slot was freed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_requests_a_transcription_gets_503_at_once() {
    use tokio::io::AsyncWriteExt;
    let server = start(open(CTC), CTC, |o| o.max_requests = 1).await;
    // a request whose upload never ends holds the only slot
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: 100000\r\n\r\n\
         --XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF",
        server.addr
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut refused = false;
    for _ in 0..100 {
        let started = std::time::Instant::now();
        let r = post_file(&server, HELLO, &[], None).await;
        if r.status() == 503 {
            assert!(started.elapsed() < Duration::from_secs(5));
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "server_busy");
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        refused,
        "a second request is refused while the slot is held"
    );
    drop(slow);
    let mut served = false;
    for _ in 0..100 {
        if post_file(&server, HELLO, &[], None).await.status() == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "the slot frees when the slow client leaves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whisper_http_equals_the_library() {
    let Ok(_) = pulsed::whisper::folder::resolve("whisper-tiny.en") else {
        eprintln!(
            "skipped: whisper-tiny.en is not fetched (scripts/fetch_whisper.sh whisper-tiny.en)"
        );
        return;
    };
    let file = "fixtures/whisper/librivox_dev00.wav";
    let t = tokio::task::spawn_blocking(|| open("whisper-tiny.en"))
        .await
        .unwrap();
    let t2 = t.clone();
    let want = tokio::task::spawn_blocking(move || t2.transcribe_file(Path::new(file)).unwrap())
        .await
        .unwrap();
    assert!(!want.transcript.text.is_empty());
    let server = start(t, "whisper-tiny.en", |_| {}).await;
    let r = post_file(&server, file, &[("model", "whisper-tiny.en")], None).await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["text"], want.transcript.text);
    let fields = [("response_format", "verbose_json")];
    let v: Value = post_file(&server, file, &fields, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["text"], want.transcript.text);
    assert_eq!(v["language"], "en");
    assert_eq!(v["segments"].as_array().unwrap().len(), want.segments.len());
    assert_eq!(
        v["words"].as_array().unwrap().len(),
        want.transcript.words.len()
    );
    let r = post_file(&server, file, &[("response_format", "srt")], None).await;
    assert_eq!(r.text().await.unwrap(), library_format(&want, Format::Srt));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whisper_realtime_line_equals_the_library_live_session() {
    let Ok(_) = pulsed::whisper::folder::resolve("whisper-tiny.en") else {
        eprintln!(
            "skipped: whisper-tiny.en is not fetched (scripts/fetch_whisper.sh whisper-tiny.en)"
        );
        return;
    };
    let file = "fixtures/whisper/librivox_dev00.wav";
    let samples = pulsed::audio::load(Path::new(file), 16_000)
        .unwrap()
        .samples;
    let t = tokio::task::spawn_blocking(|| open("whisper-tiny.en"))
        .await
        .unwrap();
    // the whole recording at once, one utterance until the end: what the
    // server does with turn detection off and one append before the commit
    let (t2, s2) = (t.clone(), samples.clone());
    let want = tokio::task::spawn_blocking(move || {
        let settings = LiveSettings {
            vad: false,
            end_silence_s: 24.0 * 3600.0,
            ..LiveSettings::default()
        };
        let (mut session, mut input) = t2.live(settings).unwrap().start().unwrap();
        assert!(input.write_waiting(&s2));
        session.finish();
        let finals: Vec<String> = session
            .events()
            .try_iter()
            .filter_map(|e| match e {
                LiveEvent::Final { text, .. } => Some(text),
                _ => None,
            })
            .collect();
        finals.join(" ")
    })
    .await
    .unwrap();
    assert!(!want.is_empty());
    let server = start(t, "whisper-tiny.en", |_| {}).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000},
        "transcription": {"model": "whisper-tiny.en", "language": "en"},
        "turn_detection": null}}}}),
    )
    .await;
    wait_for(&mut ws, "session.updated").await;
    send(
        &mut ws,
        json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(&samples)}),
    )
    .await;
    send(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
    let done = wait_for(
        &mut ws,
        "conversation.item.input_audio_transcription.completed",
    )
    .await;
    assert_eq!(done["transcript"], want.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed() {
    let server = start(open(CTC), CTC, |o| o.idle_timeout = Duration::from_secs(1)).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    let ev = wait_for(&mut ws, "error").await;
    assert_eq!(ev["error"]["code"], "idle_timeout");
    assert!(next_event(&mut ws).await.is_none(), "then closed");
    assert_eq!(scrape(&server).await["pulsed_streams_active"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_finishes_the_line_in_progress() {
    let t = open(CTC);
    let want = t.transcribe_file(Path::new(HELLO)).unwrap().transcript.text;
    let server = start(t, CTC, |_| {}).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    // no endpointing: only the stop ends the line
    send(&mut ws, json!({"type": "session.update", "session": {"type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": null}}}}))
    .await;
    wait_for(&mut ws, "session.updated").await;
    let samples = pulsed::audio::load(Path::new(HELLO), 16_000)
        .unwrap()
        .samples;
    send(
        &mut ws,
        json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(&samples)}),
    )
    .await;
    // the first partial says the session has the audio
    wait_for(&mut ws, "conversation.item.input_audio_transcription.delta").await;
    drop(server);
    let done = wait_for(
        &mut ws,
        "conversation.item.input_audio_transcription.completed",
    )
    .await;
    assert_eq!(done["transcript"], want);
    loop {
        match within("the close frame", ws.next()).await {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), 1001);
                break;
            }
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

/// `pulsed serve` itself: its flags, the address it prints, the routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_serves_and_refuses_an_open_host_without_a_key() {
    let bin = env!("CARGO_BIN_EXE_pulsed");
    let out = std::process::Command::new(bin)
        .args(["serve", "--model", CTC, "--host", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --api-key"), "{err}");

    /// Killed however the test ends.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Child(
        std::process::Command::new(bin)
            .args(["serve", "--model", CTC, "--device", "cpu", "--port", "0"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("serving"))
    });
    let line = within("the serving line", line).await.unwrap();
    let answers = async {
        let line = line.expect("a `serving ... on http://ADDR` line");
        assert!(
            line.contains(&format!("serving {CTC} on http://127.0.0.1:")),
            "{line}"
        );
        let url = line
            .split("on ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        let health = reqwest::get(format!("{url}/health")).await.unwrap();
        let models: Value = reqwest::get(format!("{url}/v1/models"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (health.status(), models)
    };
    let (health, models) = within("the served routes", answers).await;
    drop(child);
    assert_eq!(health, 200);
    assert_eq!(models["data"][0]["id"], CTC);
}
