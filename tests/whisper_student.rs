//! The streaming student a user fetches, `whisper-base-streaming-640ms`
//! (`pulsed fetch whisper-base-streaming-640ms`: whisper-base
//! and the delta committed in `models/`, rebuilt and checked against its
//! checksum), run as a user runs it: its encoder streams exactly at
//! 632.5 ms, and it transcribes a person reading, offline and live; the
//! same weights at 312.5 ms are `whisper-base-streaming-320ms`.
//! `scripts/test.sh` fetches both.

mod common;

use std::path::Path;

use common::pulsed;
use pulsed::asr::metrics::{normalize, ErrorCounts};
use pulsed::graph::Runner;
use pulsed::models::whisper::{graphs, streaming, WhisperModel};
use pulsed::ops::Tensor;
use pulsed::pulse::verify::check_streaming;
use serde_json::Value;

const MODEL: &str = "whisper-base-streaming-640ms";
const MODEL_320: &str = "whisper-base-streaming-320ms";
const CLIP: &str = "fixtures/whisper/librivox_dev00.wav";
/// The clip's human transcript (`fixtures/whisper/README.md`).
const SAID: &str = "he was not an ill disposed young man";

fn model(name: &str) -> WhisperModel {
    WhisperModel::open(name)
        .unwrap_or_else(|e| panic!("{e}\n(the test command fetches it: pulsed fetch {name})"))
}

fn clip() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CLIP)
        .display()
        .to_string()
}

fn word_errors(reference: &str, hypothesis: &str) -> usize {
    let mut e = ErrorCounts::default();
    e.add(&normalize(reference), &normalize(hypothesis));
    e.word_edits
}

/// `m`'s encoder streams in chunks of `chunk` frames, every layer looking
/// `right` frames ahead through copies, and waits no more than that.
fn assert_streams(m: &WhisperModel, chunk: usize, right: usize) {
    let ctx = streaming::context(&m.config).unwrap();
    assert_eq!(
        (ctx.chunk, ctx.right, ctx.right_copies),
        (chunk, right, true)
    );
    let p = streaming::pulsed_encoder(&m.config, &m.f32_weights).unwrap();
    assert_eq!(p.input_stream().unwrap().pulse, 2 * chunk);
    let out = p.output_stream(0).unwrap();
    assert_eq!(out.pulse, chunk);
    assert!(out.delay <= chunk + right + 2, "delay {}", out.delay);
    p.check_facts().unwrap();
}

#[test]
fn the_student_streams_in_chunks_of_320_ms_with_280_ms_of_look_ahead() {
    assert_streams(&model(MODEL), 16, 14);
}

/// The trained weights, not only the mask, stream exactly: on the clip's
/// features, pulse by pulse, within float rounding of the stream graph.
#[test]
fn the_students_pulsed_encoder_gives_its_stream_graphs_frames() {
    let m = model(MODEL);
    let n_mels = m.config.num_mel_bins;
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000)
        .unwrap()
        .samples;
    let mut mel = Runner::new(graphs::log_mel_frames(n_mels).unwrap()).unwrap();
    mel.step(&[&Tensor::from_slice(&audio)]).unwrap();
    let mut x = mel.output(0).to_f32_vec();
    let top = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in &mut x {
        *v = (v.max(top - 8.0) + 4.0) / 4.0;
    }
    let frames = x.len() / n_mels;
    let x = Tensor::from_vec(vec![frames, n_mels], x).unwrap();
    let g = streaming::encoder(&m.config, &m.f32_weights).unwrap();
    for pulse in [32, 20] {
        check_streaming(&g, pulse, &x, &[7, 32, 61, 1], 1e-4)
            .unwrap_or_else(|e| panic!("pulse {pulse}: {e}"));
    }
}

#[test]
fn the_student_transcribes_a_person_reading() {
    for name in [MODEL, MODEL_320] {
        let (code, out, err) =
            pulsed(&["transcribe", "--model", name, "--language", "en", &clip()]);
        assert_eq!(code, 0, "{err}");
        assert!(word_errors(SAID, &out) <= 1, "{name}: {out:?}");
    }
}

/// The README's first command: no `--model` runs this student (English),
/// which reads the shipped synthetic clip exactly and the real one within a
/// word; nothing is fetched when it is in the model cache.
#[test]
fn the_default_model_is_the_student() {
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/asr/hello.wav");
    let (code, out, err) = pulsed(&["transcribe", hello.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        normalize(&out),
        "if anything can go wrong it will",
        "{out:?}"
    );
    assert!(err.contains(MODEL), "{err}");
    assert!(!err.contains("fetching"), "{err}");
    let (code, out, err) = pulsed(&["transcribe", &clip()]);
    assert_eq!(code, 0, "{err}");
    assert!(word_errors(SAID, &out) <= 1, "{out:?}");
}

/// The 320 ms variant is the same weights (one delta, two configs) at
/// chunks of 160 ms with 120 ms of look-ahead.
#[test]
fn the_320_ms_variant_streams_the_same_weights_in_chunks_of_160_ms() {
    let (m, m640) = (model(MODEL_320), model(MODEL));
    let name = "model.encoder.layers.3.fc1.weight";
    assert_eq!(
        m.f32_weights.tensor(name).unwrap().to_f32_vec(),
        m640.f32_weights.tensor(name).unwrap().to_f32_vec()
    );
    assert_streams(&m, 8, 6);
}

#[test]
fn each_student_streams_its_text_at_its_own_margin_unless_told() {
    use pulsed::live::WhisperLiveOptions;
    let (m320, m640) = (model(MODEL_320), model(MODEL));
    let mut o = WhisperLiveOptions::default();
    // the 320 ms student commits 80 ms later than the 640 ms one (its
    // final lines 1 point better on held-out real speech)
    assert_eq!((o.margin_for(&m320), o.margin_for(&m640)), (24, 20));
    o.stream.margin = Some(14);
    assert_eq!((o.margin_for(&m320), o.margin_for(&m640)), (14, 14));
}

#[test]
fn live_the_students_final_line_is_what_was_said() {
    let (code, out, err) = pulsed(&[
        "mic",
        "--model",
        MODEL,
        "--language",
        "en",
        "--input",
        &clip(),
        "--format",
        "jsonl",
    ]);
    assert_eq!(code, 0, "{err}");
    let finals: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|e| e["type"] == "final")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    let text = finals.join(" ");
    assert!(word_errors(SAID, &text) <= 1, "{text:?}");
}

/// Fed the whole clip as one pulse, the streaming decoder over the streamed
/// encoder's window gives offline greedy decoding's tokens (no timestamps,
/// the same window), and commits them all.
#[test]
fn the_streaming_decoder_fed_the_whole_clip_at_once_decodes_as_offline_greedy() {
    use pulsed::engine::Engine;
    use pulsed::models::whisper::decode::{
        suppressed_tokens, transcribe, DecodeOptions, Network, StreamDecoder, StreamOptions,
        StreamSpec,
    };
    use pulsed::models::whisper::encoder_stream::{EncoderStream, FirstWindowFrames};
    use pulsed::models::whisper::{GenerationConfig, WhisperTokenizer};

    let m = model(MODEL);
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000).unwrap();
    let tokenizer = WhisperTokenizer::from_file(&m.dir.join("tokenizer.json")).unwrap();
    let gen = GenerationConfig::load(&m.dir).unwrap();
    let mut net = pulsed::models::whisper::network(&m, &Engine::Cpu).unwrap();
    let mut stream = EncoderStream::new(&m, net.window_padding(), &Engine::Cpu).unwrap();
    stream.push(&audio.samples).unwrap();
    stream.finish().unwrap();
    let (heard, window) = (stream.frames(), stream.window());

    let opts = DecodeOptions {
        beam_size: 1,
        temperatures: vec![0.0],
        without_timestamps: true,
        language: Some("en".into()),
        ..DecodeOptions::default()
    };
    let mut offline = Vec::new();
    let mut frames = FirstWindowFrames::new(&mut *net, window.clone());
    transcribe(
        Network::Aligned(&mut frames),
        &tokenizer,
        &gen,
        &audio.samples,
        &opts,
        |s| {
            offline.extend(s.tokens);
            Ok(())
        },
    )
    .unwrap();
    let sp = *tokenizer.special();
    offline.retain(|&t| t < sp.eot);
    assert!(offline.len() > 5, "offline gave {offline:?}");

    let mut prompt = tokenizer.sot_sequence(true, "en", opts.task).unwrap();
    prompt.push(sp.no_timestamps);
    let suppress = suppressed_tokens(&tokenizer, opts.suppress_tokens.as_deref()).unwrap();
    let spec = StreamSpec {
        prompt,
        eot: sp.eot,
        suppress,
        suppress_begin: gen.begin_suppress_tokens.clone(),
        heads: gen.alignment_heads.clone(),
        word_starts: None,
        keys: None,
    };
    // the guards against loops off: offline greedy repeats this clip's
    // sentence, which they stop (asserted below)
    let unguarded = StreamOptions {
        backstep: usize::MAX,
        stop_past_audio: false,
        ..StreamOptions::default()
    };
    let mut d = StreamDecoder::new(spec.clone(), unguarded).unwrap();
    net.encode_frames(&[&window]).unwrap();
    d.pulse(&mut *net, heard, true).unwrap();
    assert!(d.ended());
    assert_eq!(d.committed(), offline.as_slice());
    assert_eq!(d.fed_single, offline.len(), "each token fed once");

    let mut guarded = StreamDecoder::new(spec, StreamOptions::default()).unwrap();
    guarded.pulse(&mut *net, heard, true).unwrap();
    let said = tokenizer.decode(guarded.committed()).unwrap();
    assert!(word_errors(SAID, &said) <= 1, "guarded: {said}");
}

/// Live with the stream policy (the default over a streamed encoder), fed
/// in 20 ms blocks: the final line is what was said, it starts with every
/// token committed before it, and committed text arrives while the audio
/// does.
#[test]
fn live_the_streamed_text_commits_before_the_end_and_keeps_it() {
    use pulsed::live::{WhisperLive, WhisperLiveOptions};
    let m = model(MODEL);
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000).unwrap();
    let mut o = WhisperLiveOptions::default();
    o.decode.language = Some("en".into());
    assert!(o.stream_text_for(&m));
    let mut live = WhisperLive::new(&m, None, o).unwrap();
    let mut partial = Vec::new();
    for block in audio.samples.chunks(320) {
        partial.extend(live.push(block).unwrap());
    }
    let last = live.finish().unwrap();
    assert_eq!(last.len(), 1, "{partial:?}\n{last:?}");
    let fin = &last[0];
    assert!(fin.is_final);
    assert!(word_errors(SAID, &fin.text) <= 1, "final: {}", fin.text);
    assert!(!partial.is_empty());
    let stable = partial
        .iter()
        .rev()
        .find(|u| u.stable > 0)
        .expect("words committed before the end");
    let committed: Vec<&str> = stable.words[..stable.stable]
        .iter()
        .map(|w| w.text.as_str())
        .collect();
    let final_words: Vec<&str> = fin.words.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(
        committed,
        final_words[..committed.len()],
        "committed text taken back"
    );
    assert_eq!(fin.committed_at_s.len(), fin.words.len());
    assert!(
        fin.committed_at_s[0] < audio.duration_s,
        "the first word committed at {} s of {} s ({fin:?})",
        fin.committed_at_s[0],
        audio.duration_s
    );
}

/// With a VAD (its pre-roll puts the stream's chunk grid anywhere), a
/// pulse decodes as soon as the streamed encoder has new frames: words are
/// shown and committed within a chunk, its look-ahead and the margin of
/// their end (compute not counted), not a chunk later.
#[test]
fn live_the_streamed_text_decodes_as_soon_as_frames_come() {
    use pulsed::live::{WhisperLive, WhisperLiveOptions};
    let m = model(MODEL);
    let vad = pulsed::vad::Vad::load_default().expect("Silero weights (scripts/fetch_silero.sh)");
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000).unwrap();
    let mut o = WhisperLiveOptions::default();
    o.decode.language = Some("en".into());
    let mut live = WhisperLive::new(&m, Some(&vad), o).unwrap();
    // half a second of silence first: the speech starts off the grid
    let mut samples = vec![0f32; 8_000];
    samples.extend(&audio.samples);
    let mut updates = Vec::new();
    for block in samples.chunks(320) {
        updates.extend(live.push(block).unwrap());
    }
    updates.extend(live.finish().unwrap());
    let mut committed = Vec::new();
    let mut shown = Vec::new();
    for u in updates.iter().filter(|u| u.is_final) {
        for (i, w) in u.words.iter().enumerate() {
            committed.push(u.committed_at_s[i] - w.end_s);
            shown.push(u.shown_at_s[i] - w.end_s);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    assert!(committed.len() >= 6, "{updates:?}");
    let (c, s) = (median(&mut committed), median(&mut shown));
    assert!(c <= 0.9 && s <= 0.6, "median committed {c} s, shown {s} s");
    // punctuation rides with its word, as in offline transcripts
    let finals: Vec<&pulsed::live::Update> = updates.iter().filter(|u| u.is_final).collect();
    assert!(
        finals.iter().any(|u| u.text.contains([',', '.'])),
        "{finals:?}"
    );
    for u in &finals {
        for w in &u.words {
            assert!(
                w.text.chars().any(char::is_alphanumeric),
                "a word of punctuation alone: {:?} in {:?}",
                w.text,
                u.text
            );
        }
    }
}

/// With a VAD, an utterance whose streamed words leave speech without a
/// word (here any: the limit at 0 s) is decoded again whole: its final line
/// is the second pass's.
#[test]
fn live_an_utterance_whose_streamed_text_leaves_speech_untexted_is_decoded_again() {
    use pulsed::live::{WhisperLive, WhisperLiveOptions};
    let m = model(MODEL);
    let vad = pulsed::vad::Vad::load_default().expect("Silero weights (scripts/fetch_silero.sh)");
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000).unwrap();
    let finals = |set: &dyn Fn(&mut WhisperLiveOptions)| {
        let mut o = WhisperLiveOptions::default();
        o.decode.language = Some("en".into());
        set(&mut o);
        let mut live = WhisperLive::new(&m, Some(&vad), o).unwrap();
        let mut out = Vec::new();
        for block in audio.samples.chunks(320) {
            out.extend(live.push(block).unwrap());
        }
        out.extend(live.finish().unwrap());
        out.into_iter().filter(|u| u.is_final).collect::<Vec<_>>()
    };
    let text = |u: &[pulsed::live::Update]| u.iter().map(|u| u.text.clone()).collect::<Vec<_>>();
    // words committed as they were heard, or all at the end of speech
    let spread = |u: &[pulsed::live::Update]| {
        u.iter()
            .any(|u| u.committed_at_s.first() < u.committed_at_s.last())
    };
    let streamed = finals(&|_| {});
    let redone = finals(&|o| o.untexted_speech_s = 0.0);
    let second = finals(&|o| o.second_pass = Some(true));
    assert!(!second.is_empty());
    assert_eq!(text(&redone), text(&second));
    assert!(!spread(&second), "{second:?}");
    // the streamed words the second pass kept (from the start) keep the
    // times they were committed at; the others are committed at the end
    let fold = |w: &str| w.to_lowercase().replace(|c: char| !c.is_alphanumeric(), "");
    for (r, s) in redone.iter().zip(&streamed) {
        let same = r
            .words
            .iter()
            .zip(&s.words)
            .take_while(|(a, b)| fold(&a.text) == fold(&b.text))
            .count();
        assert_eq!(r.committed_at_s[..same], s.committed_at_s[..same]);
        let end = r.committed_at_s.last().copied().unwrap();
        assert!(r.committed_at_s[same..].iter().all(|&t| t == end), "{r:?}");
    }
    // unpaced (a live source), the second pass runs beside the stream: the
    // push that ends the utterance (silence after it) gives no final line
    // while the pass runs, and its line comes later, as a paced policy's
    let mut samples = audio.samples.clone();
    samples.extend(vec![0f32; 24_000]);
    samples.extend(&audio.samples);
    samples.extend(vec![0f32; 24_000]);
    let run = |paced: bool| {
        let mut o = WhisperLiveOptions::default();
        o.decode.language = Some("en".into());
        o.untexted_speech_s = 0.0;
        o.paced = paced;
        let mut live = WhisperLive::new(&m, Some(&vad), o).unwrap();
        let (mut finals, mut sent) = (Vec::new(), 0);
        for block in samples.chunks(320) {
            let waiting = live.second_passes_waiting();
            let got = live.push(block).unwrap();
            if live.second_passes_waiting() > waiting {
                sent += 1;
                assert!(got.iter().all(|u| !u.is_final), "{got:?}");
            }
            finals.extend(got);
        }
        finals.extend(live.finish().unwrap());
        assert_eq!(live.second_passes_waiting(), 0);
        // each line says whose it is: no partial line of an utterance
        // after its final line
        for (i, u) in finals.iter().enumerate() {
            let late = finals[i + 1..]
                .iter()
                .any(|l| !l.is_final && l.utterance == u.utterance);
            assert!(!(u.is_final && late), "{finals:?}");
        }
        finals.retain(|u| u.is_final);
        let whose: Vec<u64> = finals.iter().map(|u| u.utterance).collect();
        assert_eq!(whose, (0..finals.len() as u64).collect::<Vec<_>>());
        (finals, sent)
    };
    let (paced, none) = (run(true), 0);
    let beside = run(false);
    assert_eq!(paced.1, none);
    assert!(beside.1 > 0, "no second pass ran beside the stream");
    assert_eq!(paced.0.len(), 2, "{:?}", paced.0);
    // the second line's prompt holds the first's streamed words or its
    // second pass's, as the pass is done before the line starts or not
    let (b, p) = (text(&beside.0), text(&paced.0));
    assert_eq!(b[0], p[0]);
    assert!(word_errors(&p[1], &b[1]) <= 1, "{b:?} {p:?}");
    // a person reading leaves no such gap: the streamed text stands
    assert!(spread(&streamed), "{streamed:?}");
    assert!(
        word_errors(SAID, &text(&streamed).join(" ")) <= 1,
        "{streamed:?}"
    );
}

/// Every partial line's committed words are the final line's first words,
/// punctuation included ("man." once the next sentence is heard, not
/// "man" and "."): a client that times words by matching them sees the
/// same words twice.
#[test]
fn live_partial_lines_commit_the_final_lines_words_punctuation_included() {
    use pulsed::live::{WhisperLive, WhisperLiveOptions};
    let m = model(MODEL);
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000).unwrap();
    // the sentence twice: the first one's full stop comes mid-line
    let mut samples = audio.samples.clone();
    samples.extend(vec![0f32; 4_800]);
    samples.extend(&audio.samples);
    let mut o = WhisperLiveOptions::default();
    o.decode.language = Some("en".into());
    let mut live = WhisperLive::new(&m, None, o).unwrap();
    let mut updates = Vec::new();
    for block in samples.chunks(320) {
        updates.extend(live.push(block).unwrap());
    }
    updates.extend(live.finish().unwrap());
    let fin = updates.pop().expect("a final line");
    assert!(
        fin.is_final && updates.iter().all(|u| !u.is_final),
        "{updates:?}"
    );
    let final_words: Vec<&str> = fin.words.iter().map(|w| w.text.as_str()).collect();
    assert!(
        final_words.iter().any(|w| w.ends_with('.')) && final_words.len() > 9,
        "{final_words:?}"
    );
    let mut longest = 0;
    for u in &updates {
        let committed: Vec<&str> = u.words[..u.stable]
            .iter()
            .map(|w| w.text.as_str())
            .collect();
        assert_eq!(committed, final_words[..committed.len()], "{u:?}");
        longest = longest.max(committed.len());
    }
    let stop = final_words.iter().position(|w| w.ends_with('.')).unwrap();
    assert!(
        longest > stop,
        "the full stop was committed before the end: {longest}"
    );
}

/// Streams through one shared decoder (their steps batched, a row each)
/// give the lines each gives through a network of its own: the same
/// partial and final lines, words and commit times, at every pulse. The
/// streams start apart and differ (one clip, one a second in, one twice
/// with a pause), so the steps mix sequences of different lengths, and
/// one has its second pass forced (a network of its own).
#[test]
fn live_streams_through_one_shared_decoder_give_what_each_gives_alone() {
    use pulsed::engine::Engine;
    use pulsed::live::{Update, WhisperLive, WhisperLiveOptions};
    use pulsed::models::whisper::shared::SharedDecoder;
    use std::sync::Barrier;
    let m = model(MODEL);
    let vad = pulsed::vad::Vad::load_default().expect("Silero weights (scripts/fetch_silero.sh)");
    let audio = pulsed::audio::load_wav(Path::new(&clip()), 16_000)
        .unwrap()
        .samples;
    let mut twice = audio.clone();
    twice.extend(vec![0.0; 16_000]);
    twice.extend(&audio);
    let streams = [audio.clone(), audio[16_000..].to_vec(), twice];
    let options = |k: usize| {
        let mut o = WhisperLiveOptions::default();
        o.decode.language = Some("en".into());
        o.paced = true;
        if k == 1 {
            o.untexted_speech_s = 0.0;
        }
        o
    };
    let streams = common::whisper::in_step(streams);
    let run = common::whisper::run_live;
    let alone: Vec<Vec<Update>> = streams
        .iter()
        .enumerate()
        .map(|(k, s)| {
            run(
                WhisperLive::new(&m, Some(&vad), options(k)).unwrap(),
                s,
                None,
            )
        })
        .collect();
    let shared = SharedDecoder::new(&m, &Engine::Cpu, 3).unwrap();
    let step = Barrier::new(streams.len());
    let together: Vec<Vec<Update>> = std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let live =
                    WhisperLive::with_shared(&m, shared.slot().unwrap(), Some(&vad), options(k))
                        .unwrap();
                let step = &step;
                scope.spawn(move || run(live, s, Some(step)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let c = shared.counts();
    assert!(c.rows > c.steps, "no step served two streams: {c:?}");
    for (k, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert!(a.iter().any(|u| u.is_final), "stream {k}: {a:?}");
        assert_eq!(a, t, "stream {k}");
    }
}

/// A shared decoder's slots are its streams' places: one more is refused
/// with a reason, a dropped one is free again, and what a slot cannot do
/// (beam search, whole windows) is refused, not done wrong.
#[test]
fn a_shared_decoder_lends_its_slots_and_takes_them_back() {
    use pulsed::engine::Engine;
    use pulsed::models::whisper::shared::SharedDecoder;
    use pulsed::models::whisper::WhisperBackend;
    let m = model(MODEL);
    let shared = SharedDecoder::new(&m, &Engine::Cpu, 2).unwrap();
    let a = shared.slot().unwrap();
    let mut b = shared.slot().unwrap();
    let Err(e) = shared.slot() else {
        panic!("a third slot of two")
    };
    assert!(e.to_string().contains("2 slots are all taken"), "{e}");
    assert!(b
        .reserve(5)
        .unwrap_err()
        .to_string()
        .contains("beam search"));
    assert!(b.encode(&[&[0.0; 10]]).is_err());
    drop(a);
    // the release is the decoder thread's: it frees the slot in turn
    let t0 = std::time::Instant::now();
    while shared.free_slots() == 0 && t0.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(shared.slot().is_ok());
}
