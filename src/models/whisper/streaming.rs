//! Whisper's encoder as a stream. A checkpoint whose encoder attends in
//! chunks (`pulsed_encoder_context` in its `config.json`, see
//! `docs/notes/streaming-whisper.md`) is written here over a feature stream
//! `[S, n_mels]` and pulsified: each encoder frame comes out as soon as the
//! frames its chunk looks ahead to have arrived, with the same numbers as
//! the whole-window encoder ([`super::graphs::encoder`]) gives for it.

use super::graphs::HOP;
use super::layers::Net;
use super::{EncoderContext, WhisperConfig, WhisperError};
use crate::graph::{Graph, GraphBuilder};
use crate::ops::gather::Gather;
use crate::ops::range::Range;
use crate::ops::{Binary, DType, Dim, TypedFact};
use crate::pulse::{pulsify, PulsedModel};
use crate::weights::Weights;
use crate::{Error, Result};

/// The encoder over a stream of feature frames: input `features [S,
/// n_mels]` (time-major, as the front end gives them); output `encoder
/// [ceil(S / 2), d]`. Positions count from the stream start, so a stream
/// holds at most one window (3000 feature frames).
pub fn encoder(cfg: &WhisperConfig, w: &Weights) -> Result<Graph> {
    context(cfg)?;
    let (d, m) = (cfg.d_model, cfg.num_mel_bins);
    let mut b = GraphBuilder::new();
    let x = b.input(
        "features",
        TypedFact::new(DType::F32, [Dim::s(), Dim::n(m as i64)]),
    )?;
    let mut n = Net { b: &mut b, w, d };
    let x = n.conv_stem(x, m)?;
    let table = n.weight(
        "model.encoder.embed_positions.weight",
        &[cfg.max_source_positions, d],
    )?;
    let at = n.b.op(
        "model.encoder.positions.index",
        Range { axis: 0, offset: 0 },
        &[x],
    )?;
    let pos = n.b.op(
        "model.encoder.positions.rows",
        Gather { axis: 0 },
        &[table, at],
    )?;
    let x = n.b.op("model.encoder.positions", Binary::Add, &[x, pos])?;
    let enc = n.encoder_blocks(x, cfg, None)?;
    b.output("encoder", enc);
    b.build()
}

/// The checkpoint's chunked context; a whole-window encoder cannot stream.
pub fn context(cfg: &WhisperConfig) -> Result<EncoderContext> {
    cfg.encoder_context
        .ok_or(Error::Whisper(WhisperError::NotStreaming))
}

/// [`encoder`] pulsified with one chunk per step (`2 * chunk` feature
/// frames in, `chunk` encoder frames out).
pub fn pulsed_encoder(cfg: &WhisperConfig, w: &Weights) -> Result<PulsedModel> {
    let ctx = context(cfg)?;
    pulsify(&encoder(cfg, w)?, 2 * ctx.chunk)
}

/// Algorithmic latency of the streamed encoder in milliseconds: from the
/// moment a chunk's first sample is spoken until its encoder frames are
/// known, with no compute time: the chunk, the first layer's look-ahead
/// (a look-ahead in every layer adds a chunk per further layer), the STFT's
/// half window and the two convolutions' look-ahead.
pub fn latency_ms(cfg: &WhisperConfig) -> Result<f64> {
    let ctx = context(cfg)?;
    let frame_ms = 2.0 * HOP as f64 / 16.0; // one encoder frame: 20 ms
    let stem_ms = (200.0 + 2.0 * HOP as f64) / 16.0; // n_fft / 2, conv1 + conv2
    let more = if ctx.right_all_layers && ctx.right > 0 {
        (cfg.encoder_layers - 1) * ctx.chunk
    } else {
        0
    };
    Ok(stem_ms + frame_ms * (ctx.chunk + ctx.right + more) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ctx: Option<EncoderContext>) -> WhisperConfig {
        let text = r#"{"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6,
            "decoder_layers": 4, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
            "decoder_ffn_dim": 1536, "num_mel_bins": 80, "vocab_size": 51864,
            "max_source_positions": 1500, "max_target_positions": 448}"#;
        let mut c = WhisperConfig::parse(text).unwrap();
        c.encoder_context = ctx;
        c
    }

    #[test]
    fn latency_is_the_chunk_the_first_look_ahead_and_the_stem() {
        let ctx = |chunk, right, all| EncoderContext {
            chunk,
            left: 1500,
            right,
            right_all_layers: all,
            right_copies: false,
        };
        let ms = |c| latency_ms(&cfg(Some(c))).unwrap();
        assert_eq!(ms(ctx(16, 8, false)), 512.5);
        assert_eq!(ms(ctx(12, 0, false)), 272.5);
        // a look-ahead in every layer costs a chunk per further layer
        assert_eq!(ms(ctx(16, 3, true)), 32.5 + 20.0 * (16 + 3 + 48) as f64);
        assert_eq!(ms(ctx(16, 0, true)), ms(ctx(16, 0, false)));
        assert!(latency_ms(&cfg(None)).is_err());
    }

    #[test]
    fn config_json_names_the_context() {
        let text = r#"{"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6,
            "decoder_layers": 4, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
            "decoder_ffn_dim": 1536, "num_mel_bins": 80, "vocab_size": 51864,
            "max_source_positions": 1500, "max_target_positions": 448,
            "pulsed_encoder_context": {"chunk": 16, "left": 1500, "right": 8}}"#;
        let c = WhisperConfig::parse(text).unwrap();
        let e = c.encoder_context.unwrap();
        assert_eq!(
            (e.chunk, e.left, e.right, e.right_all_layers),
            (16, 1500, 8, false)
        );
        assert_eq!(e.right_of(0), 8);
        assert_eq!(e.right_of(3), 0);
        let zero = text.replace("\"chunk\": 16", "\"chunk\": 0");
        let err = WhisperConfig::parse(&zero).unwrap_err();
        assert!(
            matches!(
                err,
                crate::models::whisper::WhisperConfigError::Chunk { max: 1500, got: 0 }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("pulsed_encoder_context.chunk"));
    }
}
