//! Whisper tiny.en fixtures shared by the CPU and GPU parity tests: the
//! checkpoint (fetched by the test command), the LibriVox clip, its encoder
//! window and CTranslate2's goldens for it (`scripts/whisper/golden.py`).

use std::path::{Path, PathBuf};

use pulsed::models::whisper::{WhisperBackend, WhisperModel};
use safetensors::SafeTensors;

pub const MODEL: &str = "whisper-tiny.en";

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/whisper")
}

pub fn model() -> WhisperModel {
    WhisperModel::open(MODEL)
        .unwrap_or_else(|e| panic!("{e}\n(the test command fetches it: pulsed fetch {MODEL})"))
}

pub struct Golden {
    bytes: Vec<u8>,
    json: serde_json::Value,
}

impl Golden {
    pub fn load() -> Golden {
        let bytes = std::fs::read(fixtures().join(format!("{MODEL}_dev00.safetensors"))).unwrap();
        let json = std::fs::read_to_string(fixtures().join(format!("{MODEL}_dev00.json"))).unwrap();
        Golden {
            bytes,
            json: serde_json::from_str(&json).unwrap(),
        }
    }

    pub fn tensor<T: bytemuck::Pod>(&self, name: &str) -> (Vec<usize>, Vec<T>) {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st.tensor(name).unwrap();
        (t.shape().to_vec(), bytemuck::pod_collect_to_vec(t.data()))
    }

    pub fn ids(&self, path: &[&str]) -> Vec<u32> {
        let mut v = &self.json;
        for p in path {
            v = &v[p];
        }
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn clip() -> Vec<f32> {
    pulsed::audio::load_wav(&fixtures().join("librivox_dev00.wav"), 16_000)
        .unwrap()
        .samples
}

/// The encoder's window: the features without their last frame, padded
/// with zeros to 3000 frames (as `transcribe` gives them).
pub fn window(mel: &[f32], n_mels: usize, frames: usize) -> Vec<f32> {
    let mut w = vec![0f32; n_mels * 3000];
    for m in 0..n_mels {
        let keep = (frames - 1).min(3000);
        w[m * 3000..m * 3000 + keep].copy_from_slice(&mel[m * frames..m * frames + keep]);
    }
    w
}

/// Forks the clip's decoding into three beams fed different tokens and
/// checks that each equals a lone run of its tokens (the cache's reorder).
pub fn check_beams_share_a_window(w: &mut dyn WhisperBackend) {
    let mel = w.log_mel(&clip()).unwrap();
    let win = window(&mel, 80, mel.len() / 80);
    w.encode(&[&win]).unwrap();
    let prefix = [50257u32, 50362];
    // room for the three beams, as a search makes before it starts
    w.reserve(3).unwrap();
    w.start(&[0]).unwrap();
    let mut one = Vec::new();
    w.feed(&prefix, 2, &[1], &mut one).unwrap();
    w.reorder(&[0, 0, 0]).unwrap();
    let next = [679u32, 314, 1119];
    let mut three = Vec::new();
    w.feed(&next, 1, &[0], &mut three).unwrap();
    let vocab = w.vocab_size();
    for (b, &t) in next.iter().enumerate() {
        w.start(&[0]).unwrap();
        let mut lone = Vec::new();
        w.feed(&[prefix[0], prefix[1], t], 3, &[2], &mut lone)
            .unwrap();
        let d = max_abs_diff(&three[b * vocab..(b + 1) * vocab], &lone);
        assert!(d < 1e-3, "beam {b} differs from a lone run by {d}");
    }
}

/// tiny.en with its encoder restricted to chunks of 16 frames, 8 frames of
/// look-ahead in the first layer (512.5 ms), fed through the live policy on
/// `engine` without VAD in 20 ms blocks, greedy, the final line as agreed
/// (the encoder is what this compares; `whisper_live` tests the final
/// line's policy): whether it streamed its encoder, its final lines joined
/// and how many partial updates it gave.
pub fn chunked_live(engine: pulsed::engine::Engine, stream_encoder: bool) -> (bool, String, usize) {
    let (live, updates) = chunked_live_run(engine, &clip(), |o| {
        o.stream_encoder = stream_encoder;
        o.second_pass = Some(false);
    });
    let finals: Vec<&str> = updates
        .iter()
        .filter(|u| u.is_final)
        .map(|u| u.text.as_str())
        .collect();
    let partials = updates.iter().filter(|u| !u.is_final).count();
    (live.streams_encoder(), finals.join(" "), partials)
}

/// tiny.en with its encoder restricted as [`chunked_live`]'s.
pub fn chunked_model() -> pulsed::models::whisper::WhisperModel {
    let mut m = model();
    m.config.encoder_context = Some(pulsed::models::whisper::EncoderContext {
        chunk: 16,
        left: 1500,
        right: 8,
        right_all_layers: false,
        right_copies: false,
    });
    m
}

/// [`chunked_live`]'s run over `audio` with the options `set` leaves: the
/// policy after it and every update it gave.
pub fn chunked_live_run(
    engine: pulsed::engine::Engine,
    audio: &[f32],
    set: impl FnOnce(&mut pulsed::live::WhisperLiveOptions),
) -> (pulsed::live::WhisperLive, Vec<pulsed::live::Update>) {
    use pulsed::live::{WhisperLive, WhisperLiveOptions};
    let m = chunked_model();
    let mut opts = WhisperLiveOptions {
        engine,
        ..WhisperLiveOptions::default()
    };
    opts.decode.beam_size = 1;
    opts.decode.temperatures = vec![0.0];
    // the rolling buffer's policy unless `set` asks for the streamed text
    opts.stream_text = Some(false);
    set(&mut opts);
    let mut live = WhisperLive::new(&m, None, opts).unwrap();
    let mut updates = Vec::new();
    for block in audio.chunks(320) {
        updates.extend(live.push(block).unwrap());
    }
    updates.extend(live.finish().unwrap());
    (live, updates)
}

/// `streams` padded with silence to the longest, so that threads can push
/// them a block at a time together.
pub fn in_step(streams: [Vec<f32>; 3]) -> [Vec<f32>; 3] {
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    streams.map(|mut s| {
        s.resize(longest, 0.0);
        s
    })
}

/// Every update of `live` over `samples` in 20 ms blocks, then its end;
/// with `step`, each block waits for the other streams' (their pulses
/// then meet in a shared decoder).
pub fn run_live(
    mut live: pulsed::live::WhisperLive,
    samples: &[f32],
    step: Option<&std::sync::Barrier>,
) -> Vec<pulsed::live::Update> {
    let mut out = Vec::new();
    for block in samples.chunks(320) {
        if let Some(b) = step {
            b.wait();
        }
        out.extend(live.push(block).unwrap());
    }
    out.extend(live.finish().unwrap());
    out
}
