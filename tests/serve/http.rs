//! The HTTP routes: formats equal to the library's, errors, the key,
//! admission, the command itself.

use std::path::Path;
use std::time::Duration;

use pulsed::output::Format;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::harness::*;

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

/// The page at `/` and its scripts come without the key (they hold no
/// data); its WebSocket sends the key as a subprotocol, the one way a
/// browser can, and gets `realtime` back (a browser that offered
/// subprotocols closes a connection that takes none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_and_its_websocket_sends_the_key_as_a_subprotocol() {
    let server = start(open(CTC), CTC, |o| o.api_key = Some("s3cret".into())).await;
    let client = reqwest::Client::new();
    for (path, kind, holds) in [
        ("/", "text/html", "/app.js"),
        ("/app.js", "text/javascript", "/v1/realtime"),
        ("/worklet.js", "text/javascript", "registerProcessor"),
    ] {
        let r = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with(kind), "{path}: {ct}");
        assert!(r.text().await.unwrap().contains(holds), "{path}");
    }
    let offer = |key: &str| {
        let mut req = server.ws_url().into_client_request().unwrap();
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            format!("realtime, openai-insecure-api-key.{key}")
                .parse()
                .unwrap(),
        );
        req
    };
    match tokio_tungstenite::connect_async(offer("wrong")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 401)
        }
        other => panic!("expected a 401, got {:?}", other.map(|_| ())),
    }
    let (mut ws, resp) = tokio_tungstenite::connect_async(offer("s3cret"))
        .await
        .unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "realtime");
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
    let Ok(_) = pulsed::models::whisper::folder::resolve("whisper-tiny.en") else {
        eprintln!("skipped: whisper-tiny.en is not fetched (pulsed fetch whisper-tiny.en)");
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
