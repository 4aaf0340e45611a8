//! The server in this process, clients for it, and the library's answers
//! to compare with.

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
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub const CTC: &str = "pulsed-en-ctc";
pub const HELLO: &str = "fixtures/asr/hello.wav";
/// How long any one awaited answer may take on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A server running in this process; stopped when dropped.
pub struct Server {
    pub addr: SocketAddr,
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
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/v1/realtime?model=whatever", self.addr)
    }
}

pub fn open(model: &str) -> Arc<Transcriber> {
    let t = Transcriber::open(
        Some(Path::new(model)),
        &TranscriberOptions::default(),
        Engine::Cpu,
    )
    .expect("the model opens");
    Arc::new(t)
}

pub async fn start(
    t: Arc<Transcriber>,
    name: &str,
    tune: impl FnOnce(&mut ServeOptions),
) -> Server {
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

pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PATIENCE:?}"))
}

pub async fn post_file(
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

pub fn library_format(t: &pulsed::asr::Transcription, format: Format) -> String {
    let mut out = Vec::new();
    write_transcript(&mut out, format, "", &t.transcript, &Default::default()).unwrap();
    String::from_utf8(out).unwrap()
}

/// `/metrics` as name (with labels) -> value; every sample line must parse.
pub async fn scrape(server: &Server) -> std::collections::HashMap<String, f64> {
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
pub async fn next_event(ws: &mut Ws) -> Option<Value> {
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
pub async fn wait_for(ws: &mut Ws, kind: &str) -> Value {
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

pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

pub fn pcm16_b64(samples: &[f32]) -> String {
    let bytes: Vec<u8> = samples
        .iter()
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes())
        .collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Three synthetic-voice utterances with a second of silence after each.
pub fn utterances(rate: u32) -> Vec<f32> {
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
pub fn library_finals(t: &Transcriber, samples: &[f32]) -> Vec<String> {
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
