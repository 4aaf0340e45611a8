//! `pulsed load`'s library side against a server in this process: every
//! stream's lines equal the library's, word latencies are measured, and a
//! refusing server's streams are counted as failures, not crashes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pulsed::serve::load::{self, LoadOptions, Outcome, Role};

use super::harness::*;

fn options(server: &Server, clients: usize) -> LoadOptions {
    LoadOptions {
        ramp: Duration::from_millis(200),
        final_timeout: PATIENCE,
        ..LoadOptions::new(format!("ws://{}/v1/realtime", server.addr), clients)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_clients_get_the_library_lines_and_word_latencies() {
    let t = open(CTC);
    let files = [HELLO, "fixtures/asr/heldout/00.wav"];
    let want: Vec<String> = files
        .iter()
        .map(|f| {
            let samples = pulsed::audio::load(Path::new(f), 16_000).unwrap().samples;
            library_finals(&t, &samples).join(" ")
        })
        .collect();
    assert!(want.iter().all(|w| w.split(' ').count() >= 2), "{want:?}");
    let server = start(t, CTC, |_| {}).await;
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    let report = within("the load run", load::run(&options(&server, 3), &files))
        .await
        .unwrap();

    assert_eq!(
        (
            report.clients,
            report.streams_started,
            report.streams_completed
        ),
        (3, 3, 3),
        "{}",
        report.text()
    );
    assert!(report.failures.is_empty() && report.error_events.is_empty());
    for (i, s) in report.streams.iter().enumerate() {
        // round-robin: client i replays file i mod 2
        assert_eq!(s.outcome, Outcome::Completed);
        assert_eq!(s.lines.join(" "), want[i % 2], "client {i}");
        assert_eq!(s.words.len(), want[i % 2].split(' ').count());
        for w in &s.words {
            assert!(w.first_shown_s >= 0.0, "client {i}: {w:?}");
            assert!(w.first_shown_s <= w.committed_s, "client {i}: {w:?}");
            // a line is final 0.6 s of silence after its last word at most
            // a few seconds later, not minutes
            assert!(w.committed_s < 30.0, "client {i}: {w:?}");
        }
        // deltas show a line's early words before the line is final
        assert!(
            s.words
                .iter()
                .any(|w| w.first_shown_s + 0.1 < w.committed_s),
            "client {i}: {:?}",
            s.words
        );
        let seconds = pulsed::audio::load(Path::new(&s.file), 16_000)
            .unwrap()
            .samples
            .len() as f64
            / 16_000.0;
        assert!(
            (s.audio_s - seconds).abs() < 1e-6,
            "{} vs {seconds}",
            s.audio_s
        );
    }
    assert_eq!(report.words_without_times, 0);
    assert!(report.words_first_in_completed < report.words);
    let (shown, committed) = (report.first_shown.unwrap(), report.committed.unwrap());
    assert_eq!(shown.count, report.words);
    assert!(shown.median >= 0.0 && shown.median <= shown.p90 && shown.p90 <= shown.max);
    assert!(committed.median >= shown.median && committed.max >= shown.max);
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(json["streams_completed"], 3);
    assert!(json["committed"]["p99"].as_f64().unwrap() >= 0.0);

    // the server counted the same streams
    let metrics = scrape(&server).await;
    assert_eq!(metrics["pulsed_streams_total"], 3.0);
}

/// Beside two clients, one of each misbehaving kind: the two get the
/// library's lines, each misbehaving one is told off or closed as it asks
/// for, and the server goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_clients_leave_the_others_their_lines() {
    let t = open(CTC);
    let samples = pulsed::audio::load(Path::new(HELLO), 16_000)
        .unwrap()
        .samples;
    let want = library_finals(&t, &samples).join(" ");
    let server = start(t, CTC, |_| {}).await;
    let files = vec![PathBuf::from(HELLO)];
    let run = LoadOptions {
        misbehaving: 4,
        final_timeout: Duration::from_secs(6),
        ..options(&server, 2)
    };
    let report = within("the load run", load::run(&run, &files))
        .await
        .unwrap();
    let text = report.text();
    // the figures are the two well-behaved streams'
    assert_eq!((report.clients, report.streams_completed), (2, 2), "{text}");
    assert!(
        report.failures.is_empty() && report.error_events.is_empty(),
        "{text}"
    );
    for s in report.streams.iter().filter(|s| s.role == Role::Normal) {
        assert_eq!(s.lines.join(" "), want);
    }
    let role = |r: Role| report.streams.iter().find(|s| s.role == r).unwrap();
    // malformed messages are answered with error events, not a close
    let garbage = role(Role::Garbage);
    assert!(
        garbage.errors.iter().any(|c| c == "invalid_json") && garbage.errors.len() >= 2,
        "{:?}",
        garbage.errors
    );
    assert!(
        garbage.audio_s > 0.9 * report.streams[0].audio_s,
        "it streamed to its end"
    );
    assert_eq!(role(Role::Stall).outcome, Outcome::Failed("stalled".into()));
    assert_eq!(role(Role::Drop).outcome, Outcome::Failed("dropped".into()));
    assert_eq!(
        role(Role::Huge).outcome,
        Outcome::Failed("closed by the server".into())
    );
    assert_eq!(report.misbehaving.values().sum::<usize>(), 4, "{text}");
    assert!(
        text.contains("misbehaving clients (not in the figures above): 4"),
        "{text}"
    );

    // the server still serves, and holds no stream of theirs
    let again = within("the load run", load::run(&options(&server, 1), &files))
        .await
        .unwrap();
    assert_eq!(again.streams_completed, 1, "{}", again.text());
    let metrics = scrape(&server).await;
    assert_eq!(metrics["pulsed_streams_active"], 0.0, "{metrics:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_streams_are_counted_as_failures() {
    let files = vec![PathBuf::from(HELLO)];
    let t = open(CTC);

    // a wrong key: refused before the upgrade
    let guarded = start(t.clone(), CTC, |o| o.api_key = Some("s3cret".into())).await;
    let wrong_key = LoadOptions {
        api_key: Some("guess".into()),
        ..options(&guarded, 2)
    };
    let report = within("the load run", load::run(&wrong_key, &files))
        .await
        .unwrap();
    assert_eq!((report.streams_started, report.streams_failed), (2, 2));
    assert_eq!(
        report.failures["connect: HTTP 401"], 2,
        "{:?}",
        report.failures
    );
    assert_eq!(report.words, 0);
    assert!(report.first_shown.is_none() && report.committed.is_none());
    // the right key gets through the same server
    let right_key = LoadOptions {
        api_key: Some("s3cret".into()),
        ..options(&guarded, 1)
    };
    let report = within("the load run", load::run(&right_key, &files))
        .await
        .unwrap();
    assert_eq!(report.streams_completed, 1, "{}", report.text());

    // one stream at most: the others get `max_streams_reached` and a close
    let full = start(t, CTC, |o| o.max_streams = 1).await;
    let crowd = LoadOptions {
        ramp: Duration::ZERO,
        ..options(&full, 3)
    };
    let report = within("the load run", load::run(&crowd, &files))
        .await
        .unwrap();
    assert_eq!(
        (report.streams_completed, report.streams_failed),
        (1, 2),
        "{}",
        report.text()
    );
    assert_eq!(report.failures["error: max_streams_reached"], 2);
    assert_eq!(report.error_events["max_streams_reached"], 2);
    assert!(report.committed.unwrap().count >= 2);

    // nothing listening at all
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let nobody = LoadOptions::new(format!("ws://{closed}/v1/realtime"), 2);
    let report = load::run(&nobody, &files).await.unwrap();
    assert_eq!(report.failures["connect: connection refused"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duration_cap_closes_running_streams_as_unfinished() {
    let server = start(open(CTC), CTC, |_| {}).await;
    let capped = LoadOptions {
        duration: Some(Duration::from_millis(700)),
        ..options(&server, 2)
    };
    let files = vec![PathBuf::from(HELLO)];
    let report = within("the load run", load::run(&capped, &files))
        .await
        .unwrap();
    assert_eq!(report.streams_unfinished, 2, "{}", report.text());
    assert!(report.wall_seconds < 5.0);
    assert!(report.audio_seconds_sent > 0.0);
}
