//! How the live Whisper policy ([`super::WhisperLive`]) steps, cuts, ends
//! utterances and decodes: its options, and what they resolve to for a
//! model.

use crate::engine::Engine;
use crate::models::whisper::decode::{DecodeOptions, StreamOptions};
use crate::models::whisper::WhisperModel;
use crate::Result;

/// How the policy steps, cuts and ends utterances.
#[derive(Debug, Clone)]
pub struct WhisperLiveOptions {
    /// New audio (seconds) between two decodings of the buffer.
    pub step_s: f64,
    /// A buffer longer than this is cut at a committed segment's end.
    pub trim_s: f64,
    /// A buffer longer than this is cut at the last committed word even
    /// inside a segment (or, with nothing committed, its text made final).
    pub max_buffer_s: f64,
    /// VAD silence (seconds) that ends an utterance.
    pub end_silence_s: f64,
    /// Audio kept before the VAD's start of speech.
    pub pre_roll_s: f64,
    /// Most characters of committed text in the prompt.
    pub prompt_chars: usize,
    /// Decode at every step of audio even when behind (a simulation of
    /// unlimited compute: the result does not depend on the machine's speed);
    /// `false` decodes once per push, over all the audio it brought, and
    /// runs the streamed text's second passes beside the stream (on a
    /// network of their own) rather than in its way.
    pub paced: bool,
    /// Decoding of each buffer (word timestamps are always on).
    pub decode: DecodeOptions,
    /// A chunked checkpoint streams its encoder; `false` re-encodes the
    /// whole buffer at every decoding, as for any other.
    pub stream_encoder: bool,
    /// Where the network runs.
    pub engine: Engine,
    /// At the end of speech the buffer's decoding replaces the words agreed
    /// on in it (those before its last cut stay), instead of adding to them.
    /// `None`: where the encoder streams. There the partial decodings read a
    /// fixed tail past the last streamed frame, and words agreed on early
    /// stay wrong (realdev: x2 at 8 +6 and 16 +14, bc2 and bc3 at 16 +14,
    /// the final lines 0, 7, 3 and 13 words better with it); a whole-window
    /// checkpoint's agreed words were better (tiny.en: 3 words), so it
    /// keeps them.
    pub second_pass: Option<bool>,
    /// Partial decodings greedy at temperature 0 (the final pass keeps
    /// [`Self::decode`]). `None`: where a second pass makes the final
    /// lines, so the partial text is shown and then replaced (but for the
    /// words before a cut of the buffer, in an utterance longer than
    /// `trim_s`, which stay as agreed); there it is what lets a base-sized
    /// student keep up on a small CPU.
    pub greedy_partials: Option<bool>,
    /// The text streams as the encoder does: at every encoder pulse the
    /// decoder continues from the tokens it committed and commits by where
    /// they attend ([`crate::models::whisper::decode::StreamDecoder`], AlignAtt);
    /// each final line is its committed text and the rest decoded at the
    /// end of speech. `Some(false)`: the rolling buffer with
    /// LocalAgreement. `None`: where the encoder streams.
    pub stream_text: Option<bool>,
    /// How the streaming decoder commits and feeds.
    pub stream: StreamOptions,
    /// With the streamed text and a VAD: speech this long (seconds) with no
    /// word timed in it (at the utterance's start, between two words or
    /// before its end) sends the utterance to the second pass. Greedy
    /// decoding without timestamps skips speech it is unsure of (a name, a
    /// second voice) or ends early, where the second pass's beam search
    /// over timestamped segments reads on; an utterance's own pauses are
    /// shorter than [`Self::end_silence_s`].
    pub untexted_speech_s: f64,
}

impl WhisperLiveOptions {
    /// Whether a policy over `model` streams its encoder: a chunked
    /// checkpoint does unless [`Self::stream_encoder`] is off.
    pub fn streams_encoder(&self, model: &WhisperModel) -> bool {
        self.stream_encoder && model.config.encoder_context.is_some()
    }

    /// Refuses steps and cuts the policy cannot run with.
    pub fn check(&self) -> Result<()> {
        let finite = self.step_s.is_finite() && self.max_buffer_s.is_finite();
        let pre_roll = self.pre_roll_s.is_finite() && self.pre_roll_s >= 0.0;
        if finite
            && pre_roll
            && self.step_s > 0.0
            && self.trim_s > 0.0
            && self.max_buffer_s >= self.trim_s
        {
            return Ok(());
        }
        Err(crate::Error::Other(format!(
            "live Whisper: needs a finite step > 0, 0 < trim <= max buffer and a finite pre-roll >= 0 \
             (got step {} s, trim {} s, max {} s, pre-roll {} s)",
            self.step_s, self.trim_s, self.max_buffer_s, self.pre_roll_s
        )))
    }

    /// Cuts the buffer past `trim_s` (the hard limit rises with it).
    pub fn with_trim(self, trim_s: f64) -> Self {
        WhisperLiveOptions {
            trim_s,
            max_buffer_s: self.max_buffer_s.max(trim_s),
            ..self
        }
    }

    /// How a decoding of the buffer runs: word timestamps always; a partial
    /// one (`last` false) greedy at temperature 0 when `greedy_partials`.
    pub(super) fn decoding(&self, last: bool, greedy_partials: bool) -> DecodeOptions {
        let mut opts = self.decode.clone();
        opts.word_timestamps = true;
        if !last && greedy_partials {
            opts.beam_size = 1;
            opts.temperatures = vec![0.0];
        }
        opts
    }

    /// [`Self::stream_text`], resolved for a policy over `model`.
    pub fn stream_text_for(&self, model: &WhisperModel) -> bool {
        self.streams_encoder(model) && self.stream_text != Some(false)
    }

    /// [`Self::second_pass`], resolved for a policy over `model`.
    pub fn second_pass_for(&self, model: &WhisperModel) -> bool {
        self.second_pass
            .unwrap_or_else(|| self.streams_encoder(model) && !self.stream_text_for(model))
    }

    /// The streaming decoder's margin ([`StreamOptions::margin`]), resolved
    /// for a policy over `model`.
    pub fn margin_for(&self, model: &WhisperModel) -> usize {
        self.stream
            .margin
            .or(model.config.stream_margin)
            .unwrap_or(crate::models::whisper::decode::DEFAULT_MARGIN)
    }

    /// [`Self::greedy_partials`], resolved for a policy over `model`.
    pub fn greedy_partials_for(&self, model: &WhisperModel) -> bool {
        self.greedy_partials
            .unwrap_or_else(|| self.second_pass_for(model))
    }
}

impl Default for WhisperLiveOptions {
    fn default() -> Self {
        WhisperLiveOptions {
            step_s: 1.0,
            trim_s: 15.0,
            max_buffer_s: 25.0,
            end_silence_s: 0.6,
            pre_roll_s: 0.5,
            prompt_chars: 200,
            paced: true,
            decode: DecodeOptions::default(),
            stream_encoder: true,
            engine: Engine::Cpu,
            second_pass: None,
            greedy_partials: None,
            stream_text: None,
            stream: StreamOptions::default(),
            untexted_speech_s: 1.5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WhisperLiveOptions;

    #[test]
    fn partial_decodings_alone_go_greedy() {
        let mut o = WhisperLiveOptions::default();
        o.decode.beam_size = 5;
        let beam = (5, o.decode.temperatures.clone());
        assert!(beam.1.len() > 1, "the default falls back to sampling");
        let of = |d: crate::models::whisper::decode::DecodeOptions| {
            assert!(d.word_timestamps);
            (d.beam_size, d.temperatures)
        };
        assert_eq!(of(o.decoding(false, true)), (1, vec![0.0]));
        assert_eq!(of(o.decoding(true, true)), beam);
        assert_eq!(of(o.decoding(false, false)), beam);
    }

    #[test]
    fn a_trim_past_the_hard_limit_raises_it() {
        let o = WhisperLiveOptions::default();
        let longer = o.clone().with_trim(o.max_buffer_s + 3.0);
        assert_eq!(longer.trim_s, o.max_buffer_s + 3.0);
        assert_eq!(longer.max_buffer_s, longer.trim_s);
        assert!(o.clone().with_trim(f64::INFINITY).check().is_err());
        for pre_roll_s in [f64::INFINITY, -0.5, f64::NAN] {
            let bad = WhisperLiveOptions {
                pre_roll_s,
                ..o.clone()
            };
            assert!(bad.check().is_err(), "pre-roll {pre_roll_s}");
        }
        let shorter = o.clone().with_trim(5.0);
        assert_eq!(
            (shorter.trim_s, shorter.max_buffer_s),
            (5.0, o.max_buffer_s)
        );
    }
}
