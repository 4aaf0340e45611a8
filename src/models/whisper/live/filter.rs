//! Which segments of a live decoding count as speech: Whisper's own
//! no-speech and repetition signals, weighed against the VAD's.

use super::policy::same_word;
use crate::decode::Word;
use crate::models::whisper::decode::{DecodeOptions, Segment};

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

/// A word shorter than this has no audio of its own: the word alignment
/// squeezed it between two others.
const SQUEEZED_S: f64 = 0.02;
/// The fewest words of a span said twice for [`said_once`] to look at it.
const TWICE_WORDS: usize = 3;

/// `words` with a span that a decoding gave twice, back to back, where
/// the audio holds it once, given once. Into the silence after speech a
/// decoding may read the utterance again; the word alignment then puts
/// one copy's words on the audio and squeezes the rest to no time
/// (long10's IVR prompt: "... your standard greetings. There is a
/// temporary greeting ... your standard greetings.", nine words at 4.024 s).
/// A span counts as said once when its two copies hold, between them,
/// squeezed words as many as half a copy; each word of the copy kept takes
/// the times of whichever copy gave it some.
pub(super) fn said_once(mut words: Vec<Word>) -> Vec<Word> {
    let squeezed = |w: &Word| w.end_s - w.start_s < SQUEEZED_S;
    let mut i = 0;
    while i < words.len() {
        let most = (words.len() - i) / 2;
        let twice = (TWICE_WORDS..=most).rev().find(|&n| {
            let (a, b) = (&words[i..i + n], &words[i + n..i + 2 * n]);
            a.iter().zip(b).all(|(x, y)| same_word(&x.text, &y.text))
                && 2 * a.iter().chain(b).filter(|w| squeezed(w)).count() >= n
        });
        let Some(n) = twice else {
            i += 1;
            continue;
        };
        for k in i..i + n {
            let later = &words[k + n];
            if squeezed(&words[k]) && !squeezed(later) {
                (words[k].start_s, words[k].end_s) = (later.start_s, later.end_s);
            }
        }
        words.drain(i + n..i + 2 * n);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::{said_once, spoken};
    use crate::decode::Word;
    use crate::models::whisper::decode::{DecodeOptions, Segment};

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

    fn timed(words: &[(&str, f64, f64)]) -> Vec<Word> {
        words
            .iter()
            .map(|&(text, start_s, end_s)| Word {
                text: text.into(),
                start_s,
                end_s,
                confidence: 1.0,
            })
            .collect()
    }

    fn text(words: &[Word]) -> Vec<(&str, f64, f64)> {
        words
            .iter()
            .map(|w| (w.text.as_str(), w.start_s, w.end_s))
            .collect()
    }

    #[test]
    fn a_span_read_twice_into_no_time_is_given_once_on_the_audio() {
        // long10's prompt as the second pass aligned it (shortened)
        let words = timed(&[
            ("There", 0.52, 1.20),
            ("is", 1.20, 1.40),
            ("your", 3.78, 3.98),
            ("standard", 3.98, 4.024),
            ("greetings.", 4.024, 4.024),
            ("There", 4.024, 4.024),
            ("is", 4.024, 4.024),
            ("your", 4.024, 4.024),
            ("standard", 4.024, 4.44),
            ("greetings.", 4.44, 4.92),
        ]);
        assert_eq!(
            text(&said_once(words)),
            vec![
                ("There", 0.52, 1.20),
                ("is", 1.20, 1.40),
                ("your", 3.78, 3.98),
                ("standard", 3.98, 4.024),
                ("greetings.", 4.44, 4.92),
            ]
        );
    }

    #[test]
    fn words_said_twice_on_the_audio_stay() {
        // a prompt said twice, each copy with its time
        let twice = timed(&[
            ("do", 0.0, 0.2),
            ("not", 0.2, 0.4),
            ("disturb", 0.4, 0.9),
            ("do", 1.5, 1.7),
            ("not", 1.7, 1.9),
            ("disturb", 1.9, 2.4),
        ]);
        assert_eq!(said_once(twice.clone()), twice);
        // squeezed words that repeat nothing stay too (they are text the
        // other rules judge), and so does a word said twice
        let other = timed(&[
            ("yes", 0.0, 0.3),
            ("a", 0.3, 0.3),
            ("b", 0.3, 0.3),
            ("c", 0.3, 0.3),
            ("tango", 0.3, 0.3),
            ("tango", 0.3, 0.3),
        ]);
        assert_eq!(said_once(other.clone()), other);
    }
}
