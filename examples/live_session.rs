//! A live session over the API: a WAV stands in for a sound card and is
//! pushed in 20 ms blocks from a thread of its own; partial and final lines
//! print as they come (the events `pulsed mic` prints).
//!
//! ```text
//! cargo run --release --example live_session -- [MODEL] [FILE.wav]
//! ```
//! `MODEL`: default `whisper-tiny.en` (Silero VAD ends its utterances:
//! `bash scripts/fetch_silero.sh`).

use std::path::PathBuf;

use pulsed::asr::{LiveSettings, Transcriber, TranscriberOptions};
use pulsed::engine::Engine;
use pulsed::live::LiveEvent;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = PathBuf::from(args.next().unwrap_or_else(|| "whisper-tiny.en".into()));
    let file = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "fixtures/whisper/librivox_dev00.wav".into()),
    );
    let t = Transcriber::open(Some(&model), &TranscriberOptions::default(), Engine::auto())?;
    let audio = pulsed::audio::load_wav(&file, t.sample_rate())?;
    let live = t.live(LiveSettings::default())?;
    let (mut session, mut input) = live.start()?;
    let block = t.sample_rate() as usize / 50;
    // a sound card's callback would call `input.write` instead
    let feeder = std::thread::spawn(move || {
        for b in audio.samples.chunks(block) {
            if !input.write_waiting(b) {
                break;
            }
        }
    });
    while !feeder.is_finished() {
        if let Ok(ev) = session
            .events()
            .recv_timeout(std::time::Duration::from_millis(20))
        {
            show(&ev);
        }
    }
    feeder.join().map_err(|_| "the feeder thread panicked")?;
    session.finish(); // the utterance in progress becomes final
    session.events().try_iter().for_each(|ev| show(&ev));
    Ok(())
}

fn show(ev: &LiveEvent) {
    match ev {
        LiveEvent::Partial { text, stable, .. } => println!("  ... {text} ({stable} words kept)"),
        LiveEvent::Final { text, words, .. } => {
            let (s, e) = (
                words.first().map_or(0.0, |w| w.start_s),
                words.last().map_or(0.0, |w| w.end_s),
            );
            println!("[{s:7.2} -> {e:7.2}] {text}");
        }
        LiveEvent::Overrun { dropped_total } => {
            eprintln!("overrun: {dropped_total} samples dropped")
        }
        LiveEvent::Failed(e) => eprintln!("error: {e}"),
    }
}
