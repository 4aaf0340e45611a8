//! Compressed formats against the WAV they were made from, WAVs with sizes a
//! pipe leaves unrecorded, and cut files read up to where they end.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn dev00() -> Vec<f32> {
    load(&fixture("fixtures/whisper/librivox_dev00.wav"), 16_000)
        .unwrap()
        .samples
}

/// Normalised cross-correlation at the best lag within `max_lag` samples.
fn best_correlation(a: &[f32], b: &[f32], max_lag: usize) -> f64 {
    let dot = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(&p, &q)| p as f64 * q as f64)
            .sum::<f64>()
    };
    let mut best = f64::MIN;
    for lag in 0..=2 * max_lag {
        let (x, y) = if lag < max_lag {
            (&a[max_lag - lag..], b)
        } else {
            (a, &b[lag - max_lag..])
        };
        let n = x.len().min(y.len());
        let (x, y) = (&x[..n], &y[..n]);
        best = best.max(dot(x, y) / (dot(x, x) * dot(y, y)).sqrt());
    }
    best
}

#[test]
fn flac_gives_the_wav_samples_exactly() {
    let a = load(&fixture("fixtures/audio/dev00.flac"), 16_000).unwrap();
    assert_eq!(a.samples, dev00());
    assert_eq!((a.source_rate, a.source_channels), (16_000, 1));
    assert!((a.duration_s - 2.99).abs() < 0.01, "{}", a.duration_s);
    assert_eq!(a.source_format, "flac");
}

#[test]
fn lossy_formats_follow_the_wav() {
    let wav = dev00();
    for (name, rate, channels) in [
        ("dev00_44k_stereo.mp3", 44_100, 2),
        ("dev00_22k.ogg", 22_050, 1),
        ("dev00.m4a", 16_000, 1),
    ] {
        let a = load(&fixture(&format!("fixtures/audio/{name}")), 16_000).unwrap();
        assert_eq!(
            (a.source_rate, a.source_channels),
            (rate, channels),
            "{name}"
        );
        assert_eq!(a.sample_rate, 16_000);
        let ratio = a.samples.len() as f64 / wav.len() as f64;
        assert!(
            (0.97..1.05).contains(&ratio),
            "{name}: {} samples",
            a.samples.len()
        );
        let c = best_correlation(&wav, &a.samples, 1_600);
        assert!(c > 0.9, "{name}: correlation {c}");
        // the stream gives what the whole read gives
        let mut s = WavStream::open(&fixture(&format!("fixtures/audio/{name}")), 16_000).unwrap();
        let mut streamed = Vec::new();
        while let Some(chunk) = s.next_chunk(3_000).unwrap() {
            streamed.extend(chunk);
        }
        assert_eq!(streamed, a.samples, "{name}");
    }
}

#[test]
fn opus_and_unknown_bytes_are_named() {
    let e = load(&fixture("fixtures/audio/dev00.opus"), 16_000).unwrap_err();
    assert!(matches!(e, AudioError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("Opus"), "{e}");
    let d = std::env::temp_dir().join(format!("pulsed-formats-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let text = d.join("notes.mp3");
    std::fs::write(&text, "these are notes, not sound\n".repeat(20)).unwrap();
    let e = load(&text, 16_000).unwrap_err();
    assert!(matches!(e, AudioError::NotAudio { .. }), "{e}");
    assert_eq!(e.to_string().lines().count(), 1);
}

/// The fixture's bytes with the RIFF and data sizes set to `size`.
fn with_sizes(size: u32) -> Vec<u8> {
    let mut b = std::fs::read(fixture("fixtures/whisper/librivox_dev00.wav")).unwrap();
    let at = b.windows(4).position(|w| w == b"data").unwrap();
    b[4..8].copy_from_slice(&size.to_le_bytes());
    b[at + 4..at + 8].copy_from_slice(&size.to_le_bytes());
    b
}

#[test]
fn unrecorded_wav_sizes_are_read_to_the_end() {
    let want = dev00();
    for size in [u32::MAX, 0x7FFF_FFFF, 0x7FFF_F000, 0] {
        let a = decode_wav(Cursor::new(with_sizes(size)), 16_000, "pipe").unwrap();
        assert_eq!(a.samples, want, "size {size:#x}");
        assert!((a.duration_s - 2.99).abs() < 0.01, "size {size:#x}");
        // and at another rate, through the resampler
        let a = decode_wav(Cursor::new(with_sizes(size)), 8_000, "pipe").unwrap();
        assert_eq!(a.samples.len(), want.len() / 2, "size {size:#x}");
    }
    // a pipe that ends before any sample: no audio, not a hang or a panic
    let mut header = with_sizes(u32::MAX);
    let at = header.windows(4).position(|w| w == b"data").unwrap();
    header.truncate(at + 8);
    let e = decode_wav(Cursor::new(header), 16_000, "pipe").unwrap_err();
    assert!(matches!(e, AudioError::Empty { .. }), "{e}");
}

#[test]
fn a_cut_wav_decodes_what_is_there_when_asked() {
    let full = dev00();
    let bytes = std::fs::read(fixture("fixtures/whisper/librivox_dev00.wav")).unwrap();
    let d = std::env::temp_dir().join(format!("pulsed-cut-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let cut = d.join("cut.wav");
    // mid-data, and mid-sample
    for keep in [bytes.len() / 2, bytes.len() / 2 + 1] {
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let e = load_with(&cut, 16_000, Truncation::Refuse).unwrap_err();
        assert!(matches!(e, AudioError::Truncated { .. }), "{e}");
        let a = load_with(&cut, 16_000, Truncation::Warn).unwrap();
        let n = (keep - 44) / 2;
        assert_eq!(a.samples, full[..n], "keep {keep}");
        assert!((a.duration_s - n as f64 / 16_000.0).abs() < 1e-9);
        let mut s = WavStream::open_with(&cut, 16_000, Truncation::Warn).unwrap();
        let mut streamed = Vec::new();
        while let Some(chunk) = s.next_chunk(1_000).unwrap() {
            streamed.extend(chunk);
        }
        assert_eq!(streamed, a.samples);
        assert!((s.source_duration_s() - a.duration_s).abs() < 1e-9);
    }
}

#[test]
fn a_cut_flac_decodes_what_is_there_when_asked() {
    let bytes = std::fs::read(fixture("fixtures/audio/dev00.flac")).unwrap();
    let d = std::env::temp_dir().join(format!("pulsed-cutflac-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let cut = d.join("cut.flac");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_with(&cut, 16_000, Truncation::Refuse).unwrap_err();
    assert!(matches!(e, AudioError::Truncated { .. }), "{e}");
    let a = load_with(&cut, 16_000, Truncation::Warn).unwrap();
    let full = dev00();
    assert!(a.samples.len() > full.len() / 4 && a.samples.len() < full.len());
    assert_eq!(a.samples, full[..a.samples.len()]);
}

/// An M4A whose `stts` declares 4 billion entries in 32 bytes (found by the
/// `audio` fuzz target): symphonia would reserve 34 GB for them and abort
/// the process; it is refused as damaged first, from a file and from bytes.
#[test]
fn an_m4a_table_larger_than_its_box_is_refused_before_decoding() {
    table_refused("fixtures/audio/stts_count_overflow.m4a", "stts");
    // a `minf` box that declares 7 MB inside a 333-byte `mdia`, its
    // `stsc` 68 GB of entries (found by the fuzz target in a later run)
    table_refused("fixtures/audio/minf_overruns_its_parent.m4a", "stsc");
    // an ALAC configuration declaring frames of 2^31 samples (2 GB of
    // buffers in symphonia; the fuzz target again)
    table_refused("fixtures/audio/alac_frame_overflow.m4a", "ALAC");
}

fn table_refused(file: &str, table: &str) {
    let path = fixture(file);
    for e in [
        load(&path, 16_000).unwrap_err(),
        crate::audio::decode_bytes(
            std::fs::read(&path).unwrap(),
            Some("m4a"),
            16_000,
            crate::audio::Truncation::Warn,
        )
        .unwrap_err(),
    ] {
        assert!(
            matches!(e, AudioError::Corrupt { .. }) && e.to_string().contains(table),
            "{e}"
        );
    }
}
