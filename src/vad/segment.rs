//! Speech segments from per-chunk probabilities, as silero-vad's
//! `get_speech_timestamps` computes them (without its maximum-duration
//! split), but fed one probability at a time: a segment comes out as soon as
//! no later probability can change it.

/// Segmenter settings (the official defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentOptions {
    /// Probabilities at or above this start (or continue) speech.
    pub threshold: f32,
    /// In speech, probabilities below this count as silence; `None` means
    /// `max(threshold - 0.15, 0.01)`.
    pub neg_threshold: Option<f32>,
    /// Segments this short or shorter are dropped.
    pub min_speech_ms: u32,
    /// Silence this long ends a segment.
    pub min_silence_ms: u32,
    /// Padding added on each side of a segment (halved between close ones).
    pub speech_pad_ms: u32,
    pub sample_rate: u32,
    /// Samples per probability.
    pub chunk: usize,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            threshold: 0.5,
            neg_threshold: None,
            min_speech_ms: 250,
            min_silence_ms: 100,
            speech_pad_ms: 30,
            sample_rate: super::SAMPLE_RATE,
            chunk: super::CHUNK,
        }
    }
}

/// A speech segment in samples, `start .. end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
}

impl Segment {
    /// Start and end in seconds at `rate`.
    pub fn seconds(&self, rate: u32) -> (f64, f64) {
        (
            self.start as f64 / rate as f64,
            self.end as f64 / rate as f64,
        )
    }
}

/// Incremental `get_speech_timestamps`.
#[derive(Debug, Clone)]
pub struct Segmenter {
    o: SegmentOptions,
    neg: f32,
    min_speech: f64,
    min_silence: f64,
    pad: f64,
    /// Probabilities seen.
    i: u64,
    /// Raw start of the segment in progress.
    start: Option<u64>,
    temp_end: Option<u64>,
    /// A closed segment (start padded) whose end padding waits on the next one.
    pending: Option<Segment>,
    /// Where the last speech ended (raw, before padding).
    speech_end: Option<u64>,
}

impl Segmenter {
    pub fn new(o: SegmentOptions) -> Segmenter {
        let sr = o.sample_rate as f64;
        Segmenter {
            neg: o.neg_threshold.unwrap_or((o.threshold - 0.15).max(0.01)),
            min_speech: sr * o.min_speech_ms as f64 / 1000.0,
            min_silence: sr * o.min_silence_ms as f64 / 1000.0,
            pad: sr * o.speech_pad_ms as f64 / 1000.0,
            o,
            i: 0,
            start: None,
            temp_end: None,
            pending: None,
            speech_end: None,
        }
    }

    /// Whether the last probabilities put us in speech (for live endpointing).
    pub fn in_speech(&self) -> bool {
        self.start.is_some()
    }

    /// The sample where the last speech ended (its last probability above
    /// the threshold, before padding), once enough silence followed it;
    /// `None` before any.
    pub fn speech_end(&self) -> Option<u64> {
        self.speech_end
    }

    /// Takes the next chunk's probability; returns segments now final.
    pub fn push(&mut self, prob: f32) -> Vec<Segment> {
        let mut out = Vec::new();
        let cur = self.i * self.o.chunk as u64;
        self.i += 1;
        if prob >= self.o.threshold && self.temp_end.is_some() {
            self.temp_end = None;
        }
        if prob >= self.o.threshold && self.start.is_none() {
            self.start = Some(cur);
        } else if let (true, Some(start)) = (prob < self.neg, self.start) {
            let t = *self.temp_end.get_or_insert(cur);
            if (cur - t) as f64 >= self.min_silence {
                self.start = None;
                self.temp_end = None;
                self.speech_end = Some(t);
                if (t - start) as f64 > self.min_speech {
                    self.close(Segment { start, end: t }, &mut out);
                }
            }
        }
        // a pending end is final once no later segment can start within 2
        // pads, and its padding cannot pass the end of the audio (which lies
        // beyond the start of the chunk just seen)
        let earliest_next = self.start.unwrap_or(self.i * self.o.chunk as u64);
        if let Some(p) = self.pending {
            let gap = earliest_next.saturating_sub(p.end) as f64;
            if gap >= 2.0 * self.pad && p.end as f64 + self.pad <= cur as f64 {
                self.pending = None;
                out.push(Segment {
                    end: (p.end as f64 + self.pad) as u64,
                    ..p
                });
            }
        }
        out
    }

    /// A raw segment closed: settle the padding between it and the pending one.
    fn close(&mut self, mut s: Segment, out: &mut Vec<Segment>) {
        match self.pending.take() {
            Some(mut p) => {
                let gap = s.start - p.end;
                if (gap as f64) < 2.0 * self.pad {
                    p.end += gap / 2;
                    s.start -= gap / 2;
                } else {
                    p.end = (p.end as f64 + self.pad) as u64;
                    s.start = (s.start as f64 - self.pad).max(0.0) as u64;
                }
                out.push(p);
            }
            None => s.start = (s.start as f64 - self.pad).max(0.0) as u64,
        }
        self.pending = Some(s);
    }

    /// Ends the stream of `total_samples` audio samples; returns the last
    /// segments and starts over.
    pub fn finish(&mut self, total_samples: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        if let Some(start) = self.start.take() {
            if total_samples.saturating_sub(start) as f64 > self.min_speech {
                self.close(
                    Segment {
                        start,
                        end: total_samples,
                    },
                    &mut out,
                );
            }
        }
        if let Some(p) = self.pending.take() {
            let end = (p.end as f64 + self.pad).min(total_samples as f64) as u64;
            out.push(Segment {
                end: end.max(p.start),
                ..p
            });
        }
        *self = Segmenter::new(self.o);
        out
    }

    /// All segments of a whole list of probabilities.
    pub fn segments(o: SegmentOptions, probs: &[f32], total_samples: u64) -> Vec<Segment> {
        let mut s = Segmenter::new(o);
        let mut out: Vec<Segment> = probs.iter().flat_map(|&p| s.push(p)).collect();
        out.extend(s.finish(total_samples));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct port of the official function (no max-duration split), for comparison.
    fn reference(o: SegmentOptions, probs: &[f32], total: u64) -> Vec<Segment> {
        let sr = o.sample_rate as f64;
        let (min_speech, min_sil, pad) = (
            sr * o.min_speech_ms as f64 / 1000.0,
            sr * o.min_silence_ms as f64 / 1000.0,
            sr * o.speech_pad_ms as f64 / 1000.0,
        );
        let neg = o.neg_threshold.unwrap_or((o.threshold - 0.15).max(0.01));
        let (mut triggered, mut start, mut temp_end) = (false, 0i64, 0i64);
        let mut sp: Vec<(i64, i64)> = Vec::new();
        for (i, &p) in probs.iter().enumerate() {
            let cur = (i * o.chunk) as i64;
            if p >= o.threshold && temp_end != 0 {
                temp_end = 0;
            }
            if p >= o.threshold && !triggered {
                triggered = true;
                start = cur;
                continue;
            }
            if p < neg && triggered {
                if temp_end == 0 {
                    temp_end = cur;
                }
                if ((cur - temp_end) as f64) < min_sil {
                    continue;
                }
                if ((temp_end - start) as f64) > min_speech {
                    sp.push((start, temp_end));
                }
                temp_end = 0;
                triggered = false;
            }
        }
        if triggered && ((total as i64 - start) as f64) > min_speech {
            sp.push((start, total as i64));
        }
        let n = sp.len();
        for i in 0..n {
            if i == 0 {
                sp[i].0 = (sp[i].0 as f64 - pad).max(0.0) as i64;
            }
            if i + 1 != n {
                let sil = sp[i + 1].0 - sp[i].1;
                if (sil as f64) < 2.0 * pad {
                    sp[i].1 += sil / 2;
                    sp[i + 1].0 = (sp[i + 1].0 - sil / 2).max(0);
                } else {
                    sp[i].1 = (total as f64).min(sp[i].1 as f64 + pad) as i64;
                    sp[i + 1].0 = (sp[i + 1].0 as f64 - pad).max(0.0) as i64;
                }
            } else {
                sp[i].1 = (total as f64).min(sp[i].1 as f64 + pad) as i64;
            }
        }
        sp.into_iter()
            .map(|(s, e)| Segment {
                start: s as u64,
                end: e as u64,
            })
            .collect()
    }

    fn probs(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed | 1;
        let mut level = 0.0f32;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if s.is_multiple_of(7) {
                    level = 1.0 - level;
                }
                (level * 0.8 + (s % 100) as f32 / 400.0).min(1.0)
            })
            .collect()
    }

    #[test]
    fn incremental_matches_the_official_rules() {
        for seed in 1..200u64 {
            for (pad, sil) in [(30, 100), (100, 20), (0, 0), (200, 300)] {
                let o = SegmentOptions {
                    speech_pad_ms: pad,
                    min_silence_ms: sil,
                    min_speech_ms: 64,
                    ..Default::default()
                };
                let p = probs(seed, 120);
                let total = (p.len() * 512) as u64 - (seed % 500);
                assert_eq!(
                    Segmenter::segments(o, &p, total),
                    reference(o, &p, total),
                    "seed {seed} pad {pad} sil {sil}"
                );
            }
        }
    }

    #[test]
    fn segments_come_out_early() {
        let o = SegmentOptions::default();
        let mut s = Segmenter::new(o);
        let mut got = Vec::new();
        for _ in 0..20 {
            got.extend(s.push(0.9));
        }
        assert!(s.in_speech());
        assert_eq!(s.speech_end(), None);
        for _ in 0..10 {
            got.extend(s.push(0.0));
        }
        // the first silent chunk's start
        assert_eq!(s.speech_end(), Some(20 * 512));
        assert_eq!(
            got,
            vec![Segment {
                start: 0,
                end: 20 * 512 + 480
            }]
        );
        assert!(!s.in_speech());
    }
}
