//! `/v1/realtime`: lines equal to the library's live session, the
//! events around them, bad clients, admission, idle and stopping.

use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use pulsed::asr::LiveSettings;
use pulsed::live::LiveEvent;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::harness::*;

/// Sends `samples` (16 kHz) in one append, commits, and returns the
/// completed line's event.
async fn append_and_commit(ws: &mut Ws, samples: &[f32]) -> serde_json::Value {
    send(
        ws,
        json!({"type": "input_audio_buffer.append", "audio": pcm16_b64(samples)}),
    )
    .await;
    send(ws, json!({"type": "input_audio_buffer.commit"})).await;
    wait_for(ws, "conversation.item.input_audio_transcription.completed").await
}

/// The library's line for `samples` as one utterance (no VAD, no end of
/// speech until the stream ends): what the server gives with turn
/// detection off and one append before the commit.
fn library_line(t: &pulsed::asr::Transcriber, samples: &[f32]) -> String {
    let settings = LiveSettings {
        vad: false,
        end_silence_s: 24.0 * 3600.0,
        ..LiveSettings::default()
    };
    let (mut session, mut input) = t.live(settings).unwrap().start().unwrap();
    assert!(input.write_waiting(samples));
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
}

/// A transcription session of `model` at 16 kHz, turn detection off, fed
/// `samples` and committed: its `completed` event.
async fn session_line(server: &Server, model: &str, samples: &[f32]) -> Value {
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000},
        "transcription": {"model": model, "language": "en"},
        "turn_detection": null}}}}),
    )
    .await;
    wait_for(&mut ws, "session.updated").await;
    append_and_commit(&mut ws, samples).await
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
    // an error names the client's event
    let named = r#"{"type":"input_audio_buffer.append","audio":"%%%","event_id":"ev7"}"#;
    ws.send(Message::text(named)).await.unwrap();
    let ev = wait_for(&mut ws, "error").await;
    assert_eq!(ev["error"]["event_id"], "ev7");
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
    let done = append_and_commit(&mut ws, &samples).await;
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
    assert_eq!(scrape(&server).await["pulsed_client_errors_total"], 9.0);
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
async fn whisper_realtime_line_equals_the_library_live_session() {
    let Ok(_) = pulsed::models::whisper::folder::resolve("whisper-tiny.en") else {
        eprintln!("skipped: whisper-tiny.en is not fetched (pulsed fetch whisper-tiny.en)");
        return;
    };
    let file = "fixtures/whisper/librivox_dev00.wav";
    let samples = pulsed::audio::load(Path::new(file), 16_000)
        .unwrap()
        .samples;
    let t = tokio::task::spawn_blocking(|| open("whisper-tiny.en"))
        .await
        .unwrap();
    let (t2, s2) = (t.clone(), samples.clone());
    let want = tokio::task::spawn_blocking(move || library_line(&t2, &s2))
        .await
        .unwrap();
    assert!(!want.is_empty());
    let server = start(t, "whisper-tiny.en", |_| {}).await;
    let done = session_line(&server, "whisper-tiny.en", &samples).await;
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

/// Two sessions at once through one shared decoder (`pulsed serve
/// --shared-decoder`) each give the line the library gives the recording
/// through a network of its own, and /metrics counts the shared steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_through_a_shared_decoder_give_the_librarys_lines() {
    const STUDENT: &str = "whisper-base-streaming-640ms";
    let Ok(_) = pulsed::models::whisper::folder::resolve(STUDENT) else {
        eprintln!("skipped: {STUDENT} is not fetched (pulsed fetch {STUDENT})");
        return;
    };
    let file = "fixtures/whisper/librivox_dev00.wav";
    let samples = pulsed::audio::load(Path::new(file), 16_000)
        .unwrap()
        .samples;
    let s2 = samples.clone();
    let (t, want) = tokio::task::spawn_blocking(move || {
        let t = open(STUDENT);
        let want = library_line(&t, &s2);
        let mut t = std::sync::Arc::try_unwrap(t).ok().expect("one owner");
        assert!(t.share_live_decoder(2).unwrap());
        (std::sync::Arc::new(t), want)
    })
    .await
    .unwrap();
    assert!(!want.is_empty());
    let server = start(t, STUDENT, |_| {}).await;
    let session = || session_line(&server, STUDENT, &samples);
    let (a, b) = tokio::join!(session(), session());
    assert_eq!(a["transcript"], want.as_str());
    assert_eq!(b["transcript"], want.as_str());
    let metrics = scrape(&server).await;
    assert!(metrics["pulsed_decoder_steps_total"] > 0.0, "{metrics:?}");
    assert!(metrics["pulsed_decoder_rows_total"] >= metrics["pulsed_decoder_steps_total"]);
}

/// A client's close is answered with a close frame (the handshake's end):
/// a browser reads a connection dropped without one as abnormal (1006).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_close_is_answered_with_a_close_frame() {
    let server = start(open(CTC), CTC, |_| {}).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    wait_for(&mut ws, "session.created").await;
    ws.send(Message::Close(None)).await.unwrap();
    let reply = within("the close reply", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return Some(frame),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await;
    assert!(
        reply.is_some(),
        "the connection ended without a close frame"
    );
}
