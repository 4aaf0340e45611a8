//! Which segments of a live decoding count as speech: Whisper's own
//! no-speech and repetition signals, weighed against the VAD's.

use crate::whisper::decode::{DecodeOptions, Segment};

/// A segment Whisper itself thinks is silence is left out of a hypothesis
/// (whisper_streaming's cut-off).
const NO_SPEECH_CUTOFF: f64 = 0.9;

/// The segments of one decoding of the buffer that go into the hypothesis.
///
/// A too repetitive segment (a decoding loop, which the fallback to
/// sampling would have retried) is left out: the next step tries again.
/// Past the last segment under [`NO_SPEECH_CUTOFF`] (Whisper's no-speech
/// probability is a window's, and a later window starts where the last
/// one's text ended), one over it is the decoding going on into the
/// silence after speech with words it makes up: left out. Before that one,
/// or where none is under it but the VAD heard speech in the buffer
/// (`vad_heard_speech`), a segment over it is kept when likely (Whisper's
/// own rule: above `log_prob_threshold`; `transcribe` has already skipped
/// the unlikely ones where `no_speech_threshold` is set). A distilled
/// student's no-speech probability runs high on the whole of an utterance
/// after a long pause (realdev's dev03: 0.93-0.95 on a clear sentence
/// decoded at -0.3 a token). Without the VAD's word for it, a decoding
/// heard as silence throughout gives nothing.
pub(super) fn spoken<'a>(
    segments: &'a [Segment],
    opts: &DecodeOptions,
    vad_heard_speech: bool,
) -> Vec<&'a Segment> {
    let repetitive = |s: &Segment| {
        opts.compression_ratio_threshold
            .is_some_and(|t| s.compression_ratio > t)
    };
    let likely = |s: &Segment| opts.log_prob_threshold.is_some_and(|t| s.avg_logprob > t);
    let heard = |s: &Segment| s.no_speech_prob <= NO_SPEECH_CUTOFF;
    let candidates: Vec<&Segment> = segments.iter().filter(|s| !repetitive(s)).collect();
    let kept = match candidates.iter().rposition(|s| heard(s)) {
        Some(last_heard) => last_heard + 1,
        None if vad_heard_speech => candidates.len(),
        None => 0,
    };
    candidates
        .into_iter()
        .take(kept)
        .filter(|s| heard(s) || likely(s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::spoken;
    use crate::whisper::decode::{DecodeOptions, Segment};

    fn segment(
        id: usize,
        no_speech_prob: f64,
        avg_logprob: f64,
        compression_ratio: f64,
    ) -> Segment {
        Segment {
            id,
            seek: 0,
            start: 0.0,
            end: 1.0,
            text: format!("segment {id}"),
            tokens: Vec::new(),
            avg_logprob,
            compression_ratio,
            no_speech_prob,
            temperature: 0.0,
            words: None,
        }
    }

    fn ids(segments: &[Segment], opts: &DecodeOptions) -> Vec<usize> {
        spoken(segments, opts, true).iter().map(|s| s.id).collect()
    }

    #[test]
    fn a_silent_tail_after_speech_is_left_out() {
        let opts = DecodeOptions::default();
        // dev09's last line: a sentence, then "No. No. No." past the speech
        let s = [segment(1, 0.85, -0.2, 0.8), segment(2, 0.92, -0.8, 1.9)];
        assert_eq!(ids(&s, &opts), vec![1]);
    }

    #[test]
    fn an_utterance_heard_as_silence_throughout_keeps_its_likely_segments() {
        let opts = DecodeOptions::default();
        let s = [segment(1, 0.93, -0.3, 0.9), segment(2, 0.95, -1.6, 1.0)];
        assert_eq!(ids(&s, &opts), vec![1]);
        // without a log-probability threshold nothing vouches for them
        let strict = DecodeOptions {
            log_prob_threshold: None,
            ..opts.clone()
        };
        assert!(ids(&s, &strict).is_empty());
        // nor, without a VAD, anything but Whisper itself
        assert!(spoken(&s, &opts, false).is_empty());
    }

    #[test]
    fn a_likely_window_before_a_heard_one_is_kept() {
        let opts = DecodeOptions::default();
        // the speech in a first window over the cut-off, its last words in
        // a second one under it, then a tail
        let s = [
            segment(1, 0.95, -0.3, 0.9),
            segment(2, 0.95, -1.5, 0.9),
            segment(3, 0.7, -0.4, 1.0),
            segment(4, 0.96, -0.2, 1.0),
        ];
        assert_eq!(ids(&s, &opts), vec![1, 3]);
        assert_eq!(spoken(&s, &opts, false).len(), 2);
    }

    #[test]
    fn repetitive_segments_never_count() {
        let opts = DecodeOptions::default();
        let s = [segment(1, 0.1, -0.1, 3.0), segment(2, 0.95, -0.1, 4.0)];
        assert!(ids(&s, &opts).is_empty());
        let lenient = DecodeOptions {
            compression_ratio_threshold: None,
            ..opts
        };
        assert_eq!(ids(&s, &lenient), vec![1]);
    }
}
