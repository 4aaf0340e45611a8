//! A Whisper encoder with chunked attention, streamed: the encoder written
//! over a feature stream equals the whole-window encoder graph with the
//! same mask, and its pulsified form equals the stream graph frame for
//! frame (invariants 1 and 2 on real weights). The checkpoint is tiny.en
//! (fetched by the test command); streaming needs no trained student to
//! be exact, only the mask.

use pulsed::graph::Runner;
use pulsed::models::whisper::{graphs, streaming, EncoderContext, WhisperModel};
use pulsed::ops::Tensor;
use pulsed::pulse::verify::check_streaming;

const MODEL: &str = "whisper-tiny.en";

fn model(ctx: EncoderContext) -> WhisperModel {
    let mut m = WhisperModel::open(MODEL)
        .unwrap_or_else(|e| panic!("{e}\n(the test command fetches it: pulsed fetch {MODEL})"));
    m.config.encoder_context = Some(ctx);
    m
}

/// Speech-like features: `[frames, n_mels]`, smooth in time and frequency.
fn features(frames: usize, content: usize, m: usize) -> Vec<f32> {
    let mut x = vec![0f32; frames * m];
    for t in 0..content {
        for k in 0..m {
            let (tf, kf) = (t as f32, k as f32);
            x[t * m + k] = 0.4 * (tf * 0.07 + kf * 0.3).sin()
                + 0.3 * (tf * 0.013 * (1.0 + kf * 0.05)).cos()
                - 0.2;
        }
    }
    x
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn context(chunk: usize, left: usize, right: usize, right_copies: bool) -> EncoderContext {
    EncoderContext {
        chunk,
        left,
        right,
        right_all_layers: false,
        right_copies,
    }
}

#[test]
fn stream_graph_equals_the_window_encoder() {
    // the first layer's look-ahead, and every layer's through copies (the
    // window gathers them into extra rows, the stream into a slot a frame)
    // (the window's copies are 1,300 rows more in each blocked sum: its
    // rounding is coarser, largest at frames of padding near the end)
    for (ctx, tol) in [
        (context(16, 1500, 8, false), 5e-5),
        (context(16, 1500, 14, true), 1e-4),
    ] {
        stream_equals_window(ctx, tol);
    }
}

fn stream_equals_window(ctx: EncoderContext, tol: f32) {
    let m = model(ctx);
    let (n_mels, frames) = (m.config.num_mel_bins, 3000);
    let x = features(frames, 700, n_mels);
    // the window graph takes [1, n_mels, 3000]
    let mut window = vec![0f32; frames * n_mels];
    for t in 0..frames {
        for k in 0..n_mels {
            window[k * frames + t] = x[t * n_mels + k];
        }
    }
    let mut whole = Runner::new(graphs::encoder(&m.config, &m.f32_weights).unwrap()).unwrap();
    whole
        .step(&[&Tensor::from_vec(vec![1, n_mels, frames], window).unwrap()])
        .unwrap();
    let want = whole.output(0).to_f32_vec();
    let mut stream = Runner::new(streaming::encoder(&m.config, &m.f32_weights).unwrap()).unwrap();
    stream
        .step(&[&Tensor::from_vec(vec![frames, n_mels], x).unwrap()])
        .unwrap();
    let got = stream.output(0).to_f32_vec();
    // the window runs the mask as blocked matrix products, the stream one
    // dot product at a time: float rounding, relative to the values' size
    let d = max_diff(&got, &want);
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    assert!(
        d < tol * scale,
        "{ctx:?}: stream graph vs window encoder: {d} (values up to {scale})"
    );
}

#[test]
fn pulsed_encoder_streams_exactly_and_waits_one_chunk() {
    // pulses in feature frames: two per encoder frame; the last is not a
    // whole number of chunks (exact all the same, with the worst-case wait)
    for (ctx, pulse) in [
        ((16, 1500, 8, false), 32),
        ((12, 40, 0, false), 24),
        ((8, 1500, 6, false), 16),
        ((8, 1500, 6, false), 20),
        // every layer looks ahead through copies, at the same latency
        ((16, 1500, 14, true), 32),
        ((8, 40, 6, true), 16),
        ((8, 1500, 6, true), 20),
    ] {
        let ctx = context(ctx.0, ctx.1, ctx.2, ctx.3);
        let m = model(ctx);
        let n_mels = m.config.num_mel_bins;
        let frames = 523;
        let x = Tensor::from_vec(vec![frames, n_mels], features(frames, 400, n_mels)).unwrap();
        let g = streaming::encoder(&m.config, &m.f32_weights).unwrap();
        let r = check_streaming(&g, pulse, &x, &[7, 32, 61, 1], 1e-4)
            .unwrap_or_else(|e| panic!("{ctx:?} pulse {pulse}: {e}"));
        // later layers start on their chunk's end: the encoder waits for
        // at most one chunk plus the first layer's look-ahead (in encoder
        // frames), never a chunk per layer
        let whole_chunks = pulse % (2 * ctx.chunk) == 0;
        assert!(
            !whole_chunks || r.delays[0] <= ctx.chunk + ctx.right + 2,
            "{ctx:?} pulse {pulse}: delay {:?}",
            r.delays
        );
    }
}

/// The library's pulsed encoder steps one chunk (twice as many feature
/// frames) at a time and waits no more than that chunk plus the look-ahead.
#[test]
fn pulsed_encoder_steps_a_chunk() {
    let ctx = EncoderContext {
        chunk: 16,
        left: 1500,
        right: 8,
        right_all_layers: false,
        right_copies: false,
    };
    let m = model(ctx);
    let p = streaming::pulsed_encoder(&m.config, &m.f32_weights).unwrap();
    assert_eq!(p.input_stream().unwrap().pulse, 32);
    let out = p.output_stream(0).unwrap();
    assert_eq!(out.pulse, 16);
    assert!(out.delay <= 16 + 8 + 2, "delay {}", out.delay);
    p.check_facts().unwrap();
}

#[test]
fn a_whole_window_checkpoint_cannot_stream() {
    let m = WhisperModel::open(MODEL).unwrap();
    let e = streaming::encoder(&m.config, &m.f32_weights).err().unwrap();
    assert!(e.to_string().contains("pulsed_encoder_context"), "{e}");
}

fn clip() -> Vec<f32> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/whisper/librivox_dev00.wav");
    pulsed::audio::load_wav(&p, 16_000).unwrap().samples
}

/// The features a live stream gives `audio`: the whole recording's floored
/// log10 mel frames (160 zero samples appended, the last frame dropped),
/// each clamped at the running maximum less 8, then `(x + 4) / 4`;
/// `[frames, n_mels]`.
fn running_max_features(audio: &[f32], n_mels: usize) -> Vec<f32> {
    let mut padded = audio.to_vec();
    padded.extend_from_slice(&[0.0; 160]);
    let mut r = Runner::new(graphs::log_mel_frames(n_mels).unwrap()).unwrap();
    r.step(&[&Tensor::from_slice(&padded)]).unwrap();
    let frames = audio.len() / 160 + 1;
    let mut max = f32::NEG_INFINITY;
    let mut out = Vec::new();
    for row in r.output(0).to_f32_vec().chunks_exact(n_mels).take(frames) {
        max = row.iter().copied().fold(max, f32::max);
        out.extend(row.iter().map(|&x| (x.max(max - 8.0) + 4.0) / 4.0));
    }
    assert_eq!(out.len(), frames * n_mels);
    out
}

fn stream_graph(m: &WhisperModel, x: Vec<f32>) -> Vec<f32> {
    let n_mels = m.config.num_mel_bins;
    let mut g = Runner::new(streaming::encoder(&m.config, &m.f32_weights).unwrap()).unwrap();
    g.step(&[&Tensor::from_vec(vec![x.len() / n_mels, n_mels], x).unwrap()])
        .unwrap();
    g.output(0).to_f32_vec()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    let d = max_diff(got, want);
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    assert!(d < 1e-4 * scale, "{what}: {d} (values up to {scale})");
}

/// The live path's streamed encoder: while audio comes, the frames it has
/// given are the stream graph's over the running-maximum features; at the
/// end, the window encoder's over those features padded with zeros; after
/// its frames, the decoder reads the encoder's output for a window of
/// padding alone.
#[test]
fn encoder_stream_gives_the_stream_graphs_frames_then_a_fixed_tail() {
    use pulsed::models::whisper::decode::WindowPadding;
    use pulsed::models::whisper::encoder_stream::EncoderStream;
    let m = model(EncoderContext {
        chunk: 16,
        left: 1500,
        right: 8,
        right_all_layers: false,
        right_copies: false,
    });
    let (n_mels, d) = (m.config.num_mel_bins, m.config.d_model);
    let audio = clip();
    let x = running_max_features(&audio, n_mels);
    let content = x.len() / n_mels;
    let mut s = EncoderStream::new(&m, WindowPadding::Zeros, &pulsed::engine::Engine::Cpu).unwrap();
    for piece in audio.chunks(7_777) {
        s.push(piece).unwrap();
    }
    let n = s.frames();
    // the last chunk waits for its look-ahead
    assert!(n > 0 && n + 16 <= content / 2, "{n} of {content} / 2");
    let open = stream_graph(&m, x.clone());
    let w = s.window();
    assert_close(&w[..n * d], &open[..n * d], "frames while streaming");

    let mut padded = x;
    padded.resize(3000 * n_mels, 0.0);
    let at_end = stream_graph(&m, padded);
    let tail = stream_graph(&m, vec![0.0; 3000 * n_mels]);
    assert_close(&w[n * d..], &tail[n * d..], "the tail after them");
    s.finish().unwrap();
    let last = content.div_ceil(2);
    assert_eq!(s.frames(), last);
    let w = s.window();
    assert_close(&w[..last * d], &at_end[..last * d], "frames at the end");
    assert_close(&w[last * d..], &tail[last * d..], "the tail at the end");
    assert!(
        s.push(&audio[..160]).is_err(),
        "a finished stream takes nothing"
    );
    s.reset();
    s.push(&audio).unwrap();
    assert_eq!(s.frames(), n);
}

/// A backend fed a streamed encoder's frames decodes as one fed the
/// window those frames came from.
#[test]
fn encoder_frames_decode_as_their_window() {
    use pulsed::models::whisper::{CpuWhisper, WhisperBackend};
    let m = model(EncoderContext {
        chunk: 16,
        left: 1500,
        right: 8,
        right_all_layers: false,
        right_copies: false,
    });
    let n_mels = m.config.num_mel_bins;
    let mut a = CpuWhisper::new(&m).unwrap();
    let mut window = a.log_mel(&clip()).unwrap();
    let frames = window.len() / n_mels;
    let mut padded = vec![0f32; n_mels * 3000];
    for k in 0..n_mels {
        padded[k * 3000..k * 3000 + frames].copy_from_slice(&window[k * frames..(k + 1) * frames]);
    }
    window = padded;
    a.encode(&[&window]).unwrap();
    let enc = a.encoder_output().to_f32_vec();
    let mut b = CpuWhisper::new(&m).unwrap();
    b.encode_frames(&[&enc]).unwrap();
    let tokens = [50257u32, 50362, 440, 1110];
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for (net, logits) in [(&mut a, &mut la), (&mut b, &mut lb)] {
        net.start(&[0]).unwrap();
        net.feed(&tokens, tokens.len(), &[1, 3], logits).unwrap();
    }
    assert_close(&lb, &la, "logits");
    let e = b.encode_frames(&[&enc[1..]]).unwrap_err();
    assert!(e.to_string().contains("1500 x 384"), "{e}");
}

/// A stream filled to its capacity still finishes (its last chunk's
/// look-ahead, read from padding, has positions in the window), and takes
/// no sample more, for first-layer and copies look-ahead.
#[test]
fn a_full_stream_finishes_and_takes_no_more() {
    use pulsed::models::whisper::decode::WindowPadding;
    use pulsed::models::whisper::encoder_stream::EncoderStream;
    for (ctx, secs) in [
        (context(8, 1500, 6, true), 29.55),
        (context(16, 1500, 8, false), 29.19),
    ] {
        let m = model(ctx);
        let mut s =
            EncoderStream::new(&m, WindowPadding::Zeros, &pulsed::engine::Engine::Cpu).unwrap();
        assert!(
            (s.capacity() as f64 / 16_000.0 - secs).abs() < 1e-9,
            "{}",
            s.capacity()
        );
        let audio: Vec<f32> = clip().iter().cycle().take(s.capacity()).copied().collect();
        s.push(&audio[..s.capacity() - 1]).unwrap();
        let e = s.push(&audio[..2]).unwrap_err();
        assert!(e.to_string().contains("holds 29."), "{e}");
        s.push(&audio[..1]).unwrap();
        s.finish().unwrap();
        assert_eq!(s.frames(), (s.capacity() / 160 + 1).div_ceil(2));
    }
}

/// A chunk's frames come as soon as its audio, its look-ahead and the
/// front end's own reach (the STFT's half window, the convolutions) have
/// arrived: fed 10 ms at a time, within 100 ms of that, not a chunk later
/// (features in pulses of a chunk held every chunk back a whole pulse).
#[test]
fn a_chunks_frames_come_once_its_look_ahead_is_heard() {
    use pulsed::models::whisper::decode::WindowPadding;
    use pulsed::models::whisper::encoder_stream::EncoderStream;
    for (chunk, right) in [(16, 14), (8, 6)] {
        let m = model(context(chunk, 1500, right, false));
        let mut s =
            EncoderStream::new(&m, WindowPadding::Zeros, &pulsed::engine::Engine::Cpu).unwrap();
        let audio: Vec<f32> = clip().iter().cycle().take(16_000 * 3).copied().collect();
        let mut came = Vec::new();
        for (i, piece) in audio.chunks(160).enumerate() {
            let before = s.frames();
            s.push(piece).unwrap();
            if s.frames() > before {
                came.push(((i + 1) * 160, s.frames()));
            }
        }
        // encoder frames are 320 samples apart
        let needed = |frames: usize| (frames + right) * 320;
        assert!(came.len() >= 3, "{came:?}");
        for &(at, frames) in &came {
            assert_eq!(frames % chunk, 0, "{came:?}");
            assert!(at >= needed(frames), "frames {frames} at {at}: {came:?}");
            assert!(
                at <= needed(frames) + 1_600,
                "frames {frames} at {at}: {came:?}"
            );
        }
    }
}
