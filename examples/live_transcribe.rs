//! Live transcription with the public API: a WAV stands in for the
//! microphone and is fed at real-time pace; partial and final text print as
//! they come. `cargo run --release --example live_transcribe [FILE.wav]`

use std::sync::Arc;

use pulsed::asr::{Decoding, Mode, Recognizer, RecognizerOptions};
use pulsed::live::{feed_wav_realtime, LiveEvent, LiveOptions, LiveTranscriber};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fixtures/asr/hello.wav".into());
    let opts = RecognizerOptions {
        mode: Mode::Streamed { pulse: 2560 },
        decoding: Decoding::Greedy,
    };
    let rec = Arc::new(Recognizer::open(
        pulsed::models::ModelDir::default_path(),
        opts,
    )?);
    let rate = rec.sample_rate();
    let (mut live, mut input) = LiveTranscriber::start(rec, LiveOptions::default())?;
    // a sound card would call `input.write` from its callback instead
    let feeder =
        std::thread::spawn(move || feed_wav_realtime(file.as_ref(), rate, &mut input, 20, true));
    while !feeder.is_finished() {
        if let Ok(ev) = live
            .events()
            .recv_timeout(std::time::Duration::from_millis(50))
        {
            show(&ev);
        }
    }
    feeder.join().expect("feeder thread")?;
    live.finish();
    live.events().try_iter().for_each(|ev| show(&ev));
    Ok(())
}

fn show(ev: &LiveEvent) {
    match ev {
        LiveEvent::Partial { text, .. } => println!("  ... {text}"),
        LiveEvent::Final { text, words, .. } => {
            let (s, e) = (
                words.first().map_or(0.0, |w| w.start_s),
                words.last().map_or(0.0, |w| w.end_s),
            );
            println!("[{s:.2} - {e:.2}] {text}");
        }
        LiveEvent::Overrun { dropped_total } => {
            eprintln!("overrun: {dropped_total} samples dropped")
        }
        LiveEvent::Failed(e) => eprintln!("error: {e}"),
    }
}
