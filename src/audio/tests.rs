//! WAVs written with hound (and by hand for formats hound cannot write) into
//! the temp dir, read back in every format, rate and failure mode.

use std::f64::consts::PI;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

use super::*;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh path in the temp dir, removed when dropped.
struct TempWav(PathBuf);

impl TempWav {
    fn new(tag: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        TempWav(std::env::temp_dir().join(format!(
            "pulsed-audio-{}-{n}-{nanos}-{tag}.wav",
            std::process::id()
        )))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempWav {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[derive(Clone, Copy, Debug)]
enum Fmt {
    I8,
    I16,
    I24,
    I24In32,
    I32,
    F32,
}

const ALL_FORMATS: [Fmt; 6] = [
    Fmt::I8,
    Fmt::I16,
    Fmt::I24,
    Fmt::I24In32,
    Fmt::I32,
    Fmt::F32,
];

/// Writes `frames` (each a slice of per-channel values in [-1, 1]) with hound;
/// integers are `round(x * 2^(bits-1))` clamped to the type's range.
fn write_wav(fmt: Fmt, rate: u32, channels: u16, frames: &[Vec<f64>]) -> TempWav {
    let t = TempWav::new(&format!("{fmt:?}-{rate}-{channels}"));
    let (bits, bytes, float) = match fmt {
        Fmt::I8 => (8, 1, false),
        Fmt::I16 => (16, 2, false),
        Fmt::I24 => (24, 3, false),
        Fmt::I24In32 => (24, 4, false),
        Fmt::I32 => (32, 4, false),
        Fmt::F32 => (32, 4, true),
    };
    let spec = hound::WavSpecEx {
        spec: hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: bits,
            sample_format: if float {
                hound::SampleFormat::Float
            } else {
                hound::SampleFormat::Int
            },
        },
        bytes_per_sample: bytes,
    };
    let file = std::io::BufWriter::new(std::fs::File::create(t.path()).unwrap());
    let mut w = hound::WavWriter::new_with_spec_ex(file, spec).unwrap();
    for frame in frames {
        assert_eq!(frame.len(), channels as usize);
        for &x in frame {
            if float {
                w.write_sample(x as f32).unwrap();
            } else {
                w.write_sample(int_of(x, bits)).unwrap();
            }
        }
    }
    w.finalize().unwrap();
    t
}

fn int_of(x: f64, bits: u16) -> i32 {
    let full = (1i64 << (bits - 1)) as f64;
    (x * full).round().clamp(-full, full - 1.0) as i32
}

fn sine(rate: u32, seconds: f64, freq: f64, amp: f64) -> Vec<f64> {
    let n = (rate as f64 * seconds).round() as usize;
    (0..n)
        .map(|i| amp * (2.0 * PI * freq * i as f64 / rate as f64).sin())
        .collect()
}

fn mono(x: &[f64]) -> Vec<Vec<f64>> {
    x.iter().map(|&v| vec![v]).collect()
}

/// A WAV built byte by byte: RIFF header, a fmt chunk with `fmt` as body, data.
fn raw_wav(fmt: &[u8], data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&((4 + 8 + fmt.len() + 8 + data.len()) as u32).to_le_bytes());
    b.extend_from_slice(b"WAVE");
    b.extend_from_slice(b"fmt ");
    b.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
    b.extend_from_slice(fmt);
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(data);
    b
}

/// The 16-byte PCMWAVEFORMAT body (+ `extra` bytes).
fn fmt_body(
    tag: u16,
    channels: u16,
    rate: u32,
    block_align: u16,
    bits: u16,
    extra: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&tag.to_le_bytes());
    f.extend_from_slice(&channels.to_le_bytes());
    f.extend_from_slice(&rate.to_le_bytes());
    f.extend_from_slice(&(rate * block_align as u32).to_le_bytes());
    f.extend_from_slice(&block_align.to_le_bytes());
    f.extend_from_slice(&bits.to_le_bytes());
    f.extend_from_slice(extra);
    f
}

fn decode_bytes(bytes: &[u8]) -> Result<Audio, AudioError> {
    decode_wav(Cursor::new(bytes), 16_000, "mem.wav")
}

fn assert_one_line(e: &AudioError, path: &str) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "multi-line message: {msg}");
    assert!(
        msg.starts_with(path),
        "message does not start with the path: {msg}"
    );
    assert_eq!(e.path(), path);
}

#[test]
fn every_format_at_16k_is_passed_through_exactly() {
    let xs: Vec<f64> = vec![0.0, 0.5, -0.5, 0.25, -1.0, 0.999, -0.123456, 0.75];
    for fmt in ALL_FORMATS {
        let t = write_wav(fmt, 16_000, 1, &mono(&xs));
        let a = load_wav(t.path(), 16_000).unwrap();
        let (bits, name) = match fmt {
            Fmt::I8 => (8, "8-bit int"),
            Fmt::I16 => (16, "16-bit int"),
            Fmt::I24 | Fmt::I24In32 => (24, "24-bit int"),
            Fmt::I32 => (32, "32-bit int"),
            Fmt::F32 => (0, "32-bit float"),
        };
        assert_eq!(a.source_format, name, "{fmt:?}");
        assert_eq!(a.source_rate, 16_000);
        assert_eq!(a.sample_rate, 16_000);
        assert_eq!(a.source_channels, 1);
        assert_eq!(a.samples.len(), xs.len());
        assert!((a.duration_s - xs.len() as f64 / 16_000.0).abs() < 1e-12);
        for (i, (&got, &x)) in a.samples.iter().zip(&xs).enumerate() {
            let want = if bits == 0 {
                x as f32
            } else {
                (int_of(x, bits) as f64 / (1u64 << (bits - 1)) as f64) as f32
            };
            assert_eq!(got, want, "{fmt:?} sample {i}");
            assert!((-1.0..1.0).contains(&got), "{fmt:?} sample {i} = {got}");
        }
    }
}

#[test]
fn full_scale_32_bit_stays_below_one() {
    let t = write_wav(Fmt::I32, 16_000, 1, &mono(&[1.0, -1.0]));
    let a = load_wav(t.path(), 16_000).unwrap();
    assert!(a.samples[0] < 1.0 && a.samples[0] > 0.9999);
    assert_eq!(a.samples[1], -1.0);
}

#[test]
fn channels_are_averaged() {
    let frames: Vec<Vec<f64>> = (0..100)
        .map(|i| vec![0.5, -0.25, i as f64 / 200.0])
        .collect();
    for fmt in [Fmt::I16, Fmt::F32] {
        let t = write_wav(fmt, 16_000, 3, &frames);
        let a = load_wav(t.path(), 16_000).unwrap();
        assert_eq!(a.source_channels, 3);
        assert_eq!(a.samples.len(), 100);
        for (i, &v) in a.samples.iter().enumerate() {
            let want = (0.5 - 0.25 + i as f64 / 200.0) / 3.0;
            assert!((v as f64 - want).abs() < 1e-4, "{fmt:?} {i}: {v} vs {want}");
        }
    }
    let stereo: Vec<Vec<f64>> = (0..10).map(|_| vec![0.5, -0.25]).collect();
    let t = write_wav(Fmt::I16, 16_000, 2, &stereo);
    let a = load_wav(t.path(), 16_000).unwrap();
    assert!(a.samples.iter().all(|&v| v == 0.125));
}

/// Max |resampled - ideal sine| away from the edges, where the abrupt start
/// and end of the signal ring.
fn sine_error(rate: u32, freq: f64, channels: u16, fmt: Fmt) -> (usize, usize, f64) {
    let x = sine(rate, 1.0, freq, 0.5);
    let frames: Vec<Vec<f64>> = x.iter().map(|&v| vec![v; channels as usize]).collect();
    let t = write_wav(fmt, rate, channels, &frames);
    let a = load_wav(t.path(), 16_000).unwrap();
    let expected_len = (x.len() as f64 * 16_000.0 / rate as f64).round() as usize;
    let ideal: Vec<f64> = (0..a.samples.len())
        .map(|j| 0.5 * (2.0 * PI * freq * j as f64 / 16_000.0).sin())
        .collect();
    let margin = 1600;
    let err = a.samples[margin..a.samples.len() - margin]
        .iter()
        .zip(&ideal[margin..])
        .map(|(&g, &w)| (g as f64 - w).abs())
        .fold(0.0, f64::max);
    (a.samples.len(), expected_len, err)
}

#[test]
fn resampled_sine_keeps_length_amplitude_and_phase() {
    for (rate, fmt, channels) in [
        (8_000, Fmt::I16, 1),
        (44_100, Fmt::I24, 2),
        (48_000, Fmt::F32, 1),
        (22_050, Fmt::I16, 1),
        (11_025, Fmt::I8, 1),
        (32_000, Fmt::I32, 2),
    ] {
        for freq in [440.0, 1000.0, 3000.0] {
            let (len, want, err) = sine_error(rate, freq, channels, fmt);
            assert_eq!(len, want, "{rate} Hz");
            // An 8-bit source is only good to ~4e-3; a quarter-sample phase
            // slip at 3 kHz would be an error of ~0.15.
            let tol = if matches!(fmt, Fmt::I8) { 1e-2 } else { 2e-4 };
            assert!(err < tol, "{rate} Hz {freq} Hz sine: max error {err}");
        }
    }
}

#[test]
fn output_length_is_round_n_times_ratio() {
    for rate in [8_000u32, 11_025, 22_050, 44_100, 48_000, 7_919] {
        for n in [1usize, 2, 3, 7, 100, 441, 1234, 5000] {
            let x = vec![0.1f32; n];
            let bytes = {
                let mut c = Cursor::new(Vec::new());
                let spec = hound::WavSpec {
                    channels: 1,
                    sample_rate: rate,
                    bits_per_sample: 32,
                    sample_format: hound::SampleFormat::Float,
                };
                let mut w = hound::WavWriter::new(&mut c, spec).unwrap();
                for &v in &x {
                    w.write_sample(v).unwrap();
                }
                w.finalize().unwrap();
                c.into_inner()
            };
            let a = decode_bytes(&bytes).unwrap();
            let want = (n as f64 * 16_000.0 / rate as f64).round() as usize;
            assert_eq!(a.samples.len(), want, "{n} samples at {rate} Hz");
        }
    }
}

#[test]
fn stream_matches_load_for_any_chunk_size() {
    let x = sine(44_100, 3.3, 523.0, 0.4);
    let frames: Vec<Vec<f64>> = x.iter().map(|&v| vec![v, -0.5 * v]).collect();
    let t = write_wav(Fmt::I24, 44_100, 2, &frames);
    let whole = load_wav(t.path(), 16_000).unwrap();
    for max in [1usize, 999, 16_000, 1 << 20] {
        let mut s = WavStream::open(t.path(), 16_000).unwrap();
        assert!((s.source_duration_s() - whole.duration_s).abs() < 1e-12);
        assert_eq!(s.total_samples(), whole.samples.len() as u64);
        assert_eq!(s.source_format(), "24-bit int");
        let mut got = Vec::new();
        let mut chunks = 0;
        while let Some(c) = s.next_chunk(max).unwrap() {
            assert!(!c.is_empty() && c.len() <= max);
            got.extend(c);
            chunks += 1;
        }
        assert_eq!(chunks, whole.samples.len().div_ceil(max));
        assert_eq!(got.len(), whole.samples.len());
        let err = got
            .iter()
            .zip(&whole.samples)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(err <= 1e-6, "chunk {max}: max diff {err}");
        assert!(s.next_chunk(max).unwrap().is_none());
    }
}

/// The public resampler, fed samples from elsewhere in blocks of any size,
/// gives the samples a file at that rate is read as.
#[test]
fn stream_resampler_on_samples_equals_load() {
    let x = sine(48_000, 2.1, 440.0, 0.5);
    let t = write_wav(Fmt::F32, 48_000, 1, &mono(&x));
    let want = load_wav(t.path(), 16_000).unwrap().samples;
    let source: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    for block in [1usize, 320, 7_777, source.len()] {
        let mut r = StreamResampler::new(48_000, 16_000).unwrap();
        let mut got = Vec::new();
        for b in source.chunks(block) {
            r.push(b, &mut got).unwrap();
        }
        r.finish(&mut got).unwrap();
        assert_eq!(got, want, "blocks of {block}");
    }
}

#[test]
fn stream_at_source_rate_is_pass_through() {
    let x = sine(16_000, 0.7, 200.0, 0.3);
    let t = write_wav(Fmt::I16, 16_000, 1, &mono(&x));
    let whole = load_wav(t.path(), 16_000).unwrap();
    let mut s = WavStream::open(t.path(), 16_000).unwrap();
    let mut got = Vec::new();
    while let Some(c) = s.next_chunk(4000).unwrap() {
        got.extend(c);
    }
    assert_eq!(got, whole.samples);
}

#[test]
fn decode_from_reader_matches_load() {
    let x = sine(48_000, 0.5, 300.0, 0.3);
    let t = write_wav(Fmt::I16, 48_000, 1, &mono(&x));
    let bytes = std::fs::read(t.path()).unwrap();
    let a = decode_bytes(&bytes).unwrap();
    let b = load_wav(t.path(), 16_000).unwrap();
    assert_eq!(a.samples, b.samples);
    assert_eq!(a.source_rate, 48_000);
}

#[test]
fn empty_wav_is_empty() {
    let t = write_wav(Fmt::I16, 16_000, 1, &[]);
    let e = load_wav(t.path(), 16_000).unwrap_err();
    assert!(matches!(e, AudioError::Empty { .. }), "{e}");
    assert_one_line(&e, &t.path().display().to_string());
    assert!(matches!(
        WavStream::open(t.path(), 16_000),
        Err(AudioError::Empty { .. })
    ));
}

#[test]
fn truncated_data_is_an_error() {
    let x = sine(44_100, 0.5, 440.0, 0.5);
    let t = write_wav(
        Fmt::I16,
        44_100,
        2,
        &x.iter().map(|&v| vec![v, v]).collect::<Vec<_>>(),
    );
    let full = std::fs::read(t.path()).unwrap();
    // Cut mid-data, mid-sample, one byte short, and inside the header.
    for keep in [full.len() / 2, full.len() / 2 + 1, full.len() - 1, 30, 44] {
        std::fs::write(t.path(), &full[..keep]).unwrap();
        let e = load_wav(t.path(), 16_000).unwrap_err();
        assert!(
            matches!(e, AudioError::Truncated { .. }),
            "keep {keep}: {e}"
        );
        assert_one_line(&e, &t.path().display().to_string());
        // The stream notices too, at the chunk where the data runs out.
        match WavStream::open(t.path(), 16_000) {
            Err(e) => assert!(matches!(e, AudioError::Truncated { .. }), "{e}"),
            Ok(mut s) => {
                let mut res = Ok(None);
                for _ in 0..10_000 {
                    res = s.next_chunk(1000);
                    if !matches!(res, Ok(Some(_))) {
                        break;
                    }
                }
                assert!(
                    matches!(res, Err(AudioError::Truncated { .. })),
                    "keep {keep}"
                );
                assert!(matches!(s.next_chunk(1000), Ok(None)));
            }
        }
    }
}

#[test]
fn not_wav_inputs_are_rejected() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("zero bytes", vec![]),
        (
            "text",
            b"hello, this is a text file\nwith two lines\n".to_vec(),
        ),
        (
            "garbage",
            (0..1000u32).map(|i| (i * 7919 % 251) as u8).collect(),
        ),
        ("avi", {
            let mut b = b"RIFF\x10\x00\x00\x00AVI ".to_vec();
            b.extend_from_slice(&[0; 8]);
            b
        }),
    ];
    for (what, bytes) in cases {
        let e = decode_bytes(&bytes).unwrap_err();
        assert!(matches!(e, AudioError::NotWav { .. }), "{what}: {e}");
        assert_one_line(&e, "mem.wav");
    }
    // A header that starts like RIFF but stops is truncated, not "not a WAV".
    let e = decode_bytes(b"RIF").unwrap_err();
    assert!(matches!(e, AudioError::Truncated { .. }), "{e}");
}

#[test]
fn unsupported_formats_are_named() {
    let alaw = raw_wav(&fmt_body(6, 1, 8000, 1, 8, &[0, 0]), &[0x55; 100]);
    let e = decode_bytes(&alaw).unwrap_err();
    assert!(matches!(e, AudioError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("A-law"), "{e}");

    let twelve = raw_wav(&fmt_body(1, 1, 16000, 2, 12, &[]), &[0; 100]);
    let e = decode_bytes(&twelve).unwrap_err();
    assert!(e.to_string().contains("12-bit int"), "{e}");
    assert!(matches!(e, AudioError::Unsupported { .. }), "{e}");

    let f64wav = raw_wav(&fmt_body(3, 1, 16000, 8, 64, &[]), &[0; 80]);
    let e = decode_bytes(&f64wav).unwrap_err();
    assert!(e.to_string().contains("64-bit float"), "{e}");

    // WAVE_FORMAT_EXTENSIBLE with 12 valid bits in 16-bit containers.
    let mut ext = vec![22, 0, 12, 0, 4, 0, 0, 0];
    ext.extend_from_slice(&[
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b,
        0x71,
    ]);
    let ext12 = raw_wav(&fmt_body(0xFFFE, 1, 16000, 2, 16, &ext), &[0; 100]);
    let e = decode_bytes(&ext12).unwrap_err();
    assert!(matches!(e, AudioError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("12-bit"), "{e}");

    for magic in [&b"RIFX"[..], b"RF64"] {
        let mut b = raw_wav(&fmt_body(1, 1, 16000, 2, 16, &[]), &[0; 10]);
        b[..4].copy_from_slice(magic);
        assert!(matches!(
            decode_bytes(&b),
            Err(AudioError::Unsupported { .. })
        ));
    }
}

#[test]
fn corrupt_headers_and_nan_samples_are_errors() {
    // Byte rate that contradicts block align * rate.
    let mut f = fmt_body(1, 1, 16000, 2, 16, &[]);
    f[8] ^= 0xff;
    let e = decode_bytes(&raw_wav(&f, &[0; 100])).unwrap_err();
    assert!(matches!(e, AudioError::Corrupt { .. }), "{e}");
    // Zero channels.
    let e = decode_bytes(&raw_wav(&fmt_body(1, 0, 16000, 2, 16, &[]), &[0; 100])).unwrap_err();
    assert!(matches!(e, AudioError::Corrupt { .. }), "{e}");
    // Zero sample rate.
    let e = decode_bytes(&raw_wav(&fmt_body(1, 1, 0, 2, 16, &[]), &[0; 100])).unwrap_err();
    assert!(matches!(e, AudioError::Corrupt { .. }), "{e}");
    // A rate no speech fits in: each sample would become 16 or more.
    let e = decode_bytes(&raw_wav(&fmt_body(1, 1, 999, 2, 16, &[]), &[0; 100])).unwrap_err();
    assert!(matches!(e, AudioError::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("sample rate 999 Hz (at least 1000)"),
        "{e}"
    );
    assert!(decode_bytes(&raw_wav(&fmt_body(1, 1, 1000, 2, 16, &[]), &[0; 100])).is_ok());
    // NaN in a float file.
    let mut data = Vec::new();
    for v in [0.1f32, f32::NAN, 0.2] {
        data.extend_from_slice(&v.to_le_bytes());
    }
    let e = decode_bytes(&raw_wav(&fmt_body(3, 1, 16000, 4, 32, &[]), &data)).unwrap_err();
    assert!(matches!(e, AudioError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("frame 1"), "{e}");
}

#[test]
fn missing_file_and_zero_target_rate() {
    let t = TempWav::new("missing");
    let e = load_wav(t.path(), 16_000).unwrap_err();
    assert!(matches!(e, AudioError::Io { .. }), "{e}");
    assert_one_line(&e, &t.path().display().to_string());
    let ok = write_wav(Fmt::I16, 8_000, 1, &mono(&[0.1, 0.2]));
    let e = load_wav(ok.path(), 0).unwrap_err();
    assert!(
        matches!(
            e,
            AudioError::Resample {
                from: 8_000,
                to: 0,
                source: ResampleError::ZeroRate { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .ends_with(": cannot resample 8000 Hz to 0 Hz: sample rates must be positive"),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Flipped, cut or appended bytes anywhere in a valid WAV: an error or
    /// audio, never a panic; and audio only when the data is all there.
    #[test]
    fn mangled_wavs_never_panic(
        rate in prop::sample::select(vec![8_000u32, 16_000, 44_100]),
        fmt_i in 0usize..6,
        flips in prop::collection::vec((0usize..400, any::<u8>()), 0..4),
        cut in prop::option::of(0usize..400),
    ) {
        let fmt = [Fmt::I8, Fmt::I16, Fmt::I24, Fmt::I24In32, Fmt::I32, Fmt::F32][fmt_i];
        let t = write_wav(fmt, rate, 2, &sine(rate, 0.01, 440.0, 0.5).iter().map(|&v| vec![v, v]).collect::<Vec<_>>());
        let mut bytes = std::fs::read(t.path()).unwrap();
        for (at, v) in flips {
            let at = at % bytes.len();
            bytes[at] = v;
        }
        if let Some(c) = cut {
            bytes.truncate(c.min(bytes.len()));
        }
        if let Err(e) = decode_bytes(&bytes) {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }

    /// Same through the streaming reader.
    #[test]
    fn mangled_wavs_never_panic_streaming(
        flips in prop::collection::vec((0usize..200, any::<u8>()), 1..4),
        cut in prop::option::of(0usize..200),
    ) {
        let t = write_wav(Fmt::I16, 22_050, 1, &mono(&sine(22_050, 0.005, 440.0, 0.5)));
        let mut bytes = std::fs::read(t.path()).unwrap();
        for (at, v) in flips {
            let at = at % bytes.len();
            bytes[at] = v;
        }
        if let Some(c) = cut {
            bytes.truncate(c.min(bytes.len()));
        }
        std::fs::write(t.path(), &bytes).unwrap();
        if let Ok(mut s) = WavStream::open(t.path(), 16_000) {
            for _ in 0..100_000 {
                if !matches!(s.next_chunk(64), Ok(Some(_))) {
                    break;
                }
            }
        }
    }
}

/// Every layout decoded from raw bytes equals hound's own decoding, sample
/// for sample and bit for bit, in blocks that do not line up with anything.
#[test]
fn raw_decoding_equals_hounds_bit_for_bit() {
    let x = sine(16_000, 0.3, 440.0, 0.9);
    for fmt in ALL_FORMATS {
        for channels in [1u16, 2, 3] {
            let frames: Vec<Vec<f64>> = x
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    (0..channels)
                        .map(|c| v * (1.0 - 0.3 * c as f64) * if i % 7 == 0 { -1.0 } else { 1.0 })
                        .collect()
                })
                .collect();
            let t = write_wav(fmt, 16_000, channels, &frames);
            let read = |hound_only: bool| {
                let f = std::io::BufReader::new(std::fs::File::open(t.path()).unwrap());
                let mut s = wav::WavSource::open_with(f, "t.wav", hound_only).unwrap();
                let mut out = Vec::new();
                while s.read_frames(1013, &mut out).unwrap() > 0 {}
                out
            };
            let (raw, hound) = (read(false), read(true));
            assert_eq!(raw.len(), x.len(), "{fmt:?} x{channels}");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&raw), bits(&hound), "{fmt:?} x{channels}");
        }
    }
}

/// A header claiming thousands of channels and a huge data chunk, over a
/// few bytes: a typed truncation error, and each read bounded in size (the
/// block buffer never grows past what one frame or a 1 MiB block needs).
#[test]
fn a_lying_header_gets_a_truncation_error_from_bounded_reads() {
    let (channels, bytes) = (16_383u16, 4u16);
    let mut wav = raw_wav(
        &fmt_body(1, channels, 16_000, channels * bytes, 32, &[]),
        &[7; 96],
    );
    // the data chunk (and the RIFF) now declare 60,000 frames, ~4 GB, that
    // the file does not have
    let data = 60_000u32 * (channels * bytes) as u32;
    let at = wav.len() - 96 - 4;
    wav[at..at + 4].copy_from_slice(&data.to_le_bytes());
    let riff = (wav.len() - 8 - 96) as u32 + data;
    wav[4..8].copy_from_slice(&riff.to_le_bytes());
    let mut s = wav::WavSource::open(Cursor::new(wav), "liar.wav").unwrap();
    let mut out = Vec::new();
    let e = s.read_frames(16_384, &mut out).unwrap_err();
    assert!(matches!(e, AudioError::Truncated { .. }), "{e}");
    assert_one_line(&e, "liar.wav");
    assert!(s.raw_capacity() <= (1 << 20) + 4 * channels as usize);
}

#[test]
fn every_16_bit_mono_value_reads_exactly() {
    // the vectorised 16-bit mono path against the general formula
    let xs: Vec<f64> = (i16::MIN..=i16::MAX).map(|v| v as f64 / 32768.0).collect();
    let t = write_wav(Fmt::I16, 16_000, 1, &mono(&xs));
    let a = load_wav(t.path(), 16_000).unwrap();
    assert_eq!(a.samples.len(), xs.len());
    for (&got, v) in a.samples.iter().zip(i16::MIN..=i16::MAX) {
        let want = ((v as f64 / 32768.0) as f32).min(1.0 - f32::EPSILON / 2.0);
        assert_eq!(got, want, "sample {v}");
    }
}
