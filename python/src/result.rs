//! What a transcription gives Python: `Transcription` (text, words,
//! segments, language, duration; or, from `transcribe_many`, the reason a
//! file failed), `Word` and `Segment`. Plain read-only values.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use pulsed::asr;
use pulsed::decode::Transcript;

/// A word with its times (seconds from the start of the audio) and how
/// sure the model was (`exp` of its mean log-probability, in [0, 1]).
#[pyclass(module = "pulsed", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct Word {
    pub text: String,
    pub start: f64,
    pub end: f64,
    pub confidence: f32,
}

#[pymethods]
impl Word {
    fn __repr__(&self) -> String {
        format!(
            "Word({:?}, start={:.2}, end={:.2}, confidence={:.2})",
            self.text, self.start, self.end, self.confidence
        )
    }

    /// `{"word", "start", "end", "confidence"}`, as `pulsed transcribe
    /// --format jsonl` writes a word.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("word", &self.text)?;
        d.set_item("start", round3(self.start))?;
        d.set_item("end", round3(self.end))?;
        d.set_item("confidence", round4(self.confidence as f64))?;
        Ok(d)
    }
}

impl Word {
    pub fn of(w: &pulsed::decode::Word) -> Word {
        Word {
            text: w.text.clone(),
            start: w.start_s,
            end: w.end_s,
            confidence: w.confidence,
        }
    }
}

/// A stretch of text Whisper's decoder gave at once, with its scores.
#[pyclass(module = "pulsed", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct Segment {
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub avg_logprob: f64,
    pub no_speech_prob: f64,
    pub compression_ratio: f64,
    pub temperature: f64,
}

#[pymethods]
impl Segment {
    fn __repr__(&self) -> String {
        format!(
            "Segment({:.2} -> {:.2}: {:?})",
            self.start, self.end, self.text
        )
    }
}

impl Segment {
    fn of(s: &asr::Segment) -> Segment {
        Segment {
            start: s.start_s,
            end: s.end_s,
            text: s.text.trim().to_string(),
            avg_logprob: s.avg_logprob,
            no_speech_prob: s.no_speech_prob,
            compression_ratio: s.compression_ratio,
            temperature: s.temperature,
        }
    }

    /// A segment as the batch pool reports it (its JSON-lines fields).
    fn of_json(v: &serde_json::Value) -> Segment {
        let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
        Segment {
            start: f("start"),
            end: f("end"),
            text: v
                .get("text")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string(),
            avg_logprob: f("avg_logprob"),
            no_speech_prob: f("no_speech_prob"),
            compression_ratio: f("compression_ratio"),
            temperature: f("temperature"),
        }
    }
}

/// A recording's transcription: `text`, `words` (times, confidence),
/// `segments` and `language` (Whisper; empty and `None` for CTC models),
/// `duration` (seconds of audio). From `transcribe_many`, `path` names the
/// file and a file that failed has `error` set (and no text).
#[pyclass(module = "pulsed", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct Transcription {
    pub text: String,
    pub words: Vec<Word>,
    pub segments: Vec<Segment>,
    pub language: Option<String>,
    pub duration: f64,
    pub path: Option<String>,
    pub error: Option<String>,
}

#[pymethods]
impl Transcription {
    /// True unless the file failed.
    #[getter]
    fn ok(&self) -> bool {
        self.error.is_none()
    }

    fn __repr__(&self) -> String {
        let path = self
            .path
            .as_ref()
            .map_or(String::new(), |p| format!("{p:?}, "));
        match &self.error {
            Some(e) => format!("Transcription({path}error={e:?})"),
            None => format!(
                "Transcription({path}{:?}, duration={:.2})",
                self.text, self.duration
            ),
        }
    }

    fn __str__(&self) -> String {
        self.error.clone().unwrap_or_else(|| self.text.clone())
    }

    /// The JSON-lines row `pulsed transcribe --format jsonl` writes: `file`,
    /// `text`, `duration_s`, `words` (and Whisper's `language`,
    /// `segments`); a failed file: `file` and `error`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("file", &self.path)?;
        if let Some(e) = &self.error {
            d.set_item("error", e)?;
            return Ok(d);
        }
        d.set_item("text", &self.text)?;
        d.set_item("duration_s", round3(self.duration))?;
        let words = self
            .words
            .iter()
            .map(|w| w.to_dict(py))
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("words", words)?;
        if let Some(lang) = &self.language {
            d.set_item("language", lang)?;
            let segs = self
                .segments
                .iter()
                .map(|s| {
                    let e = PyDict::new(py);
                    e.set_item("start", round3(s.start))?;
                    e.set_item("end", round3(s.end))?;
                    e.set_item("text", &s.text)?;
                    e.set_item("avg_logprob", round3(s.avg_logprob))?;
                    e.set_item("no_speech_prob", round3(s.no_speech_prob))?;
                    e.set_item("compression_ratio", round3(s.compression_ratio))?;
                    e.set_item("temperature", s.temperature)?;
                    Ok(e)
                })
                .collect::<PyResult<Vec<_>>>()?;
            d.set_item("segments", segs)?;
        }
        Ok(d)
    }
}

impl Transcription {
    /// The library's transcription of a recording of `duration_s` seconds.
    pub fn of(t: &asr::Transcription, duration_s: f64, path: Option<String>) -> Transcription {
        Transcription {
            text: t.transcript.text.clone(),
            words: t.transcript.words.iter().map(Word::of).collect(),
            segments: t.segments.iter().map(Segment::of).collect(),
            language: t.language.clone(),
            duration: duration_s,
            path,
            error: None,
        }
    }

    /// A file the batch pool transcribed; its language and segments come
    /// as the pool's JSON-lines fields.
    pub fn of_batch(
        t: Transcript,
        duration_s: f64,
        extra: &serde_json::Map<String, serde_json::Value>,
        path: String,
    ) -> Transcription {
        let segments = extra
            .get("segments")
            .and_then(serde_json::Value::as_array)
            .map_or(Vec::new(), |a| a.iter().map(Segment::of_json).collect());
        Transcription {
            text: t.text,
            words: t.words.iter().map(Word::of).collect(),
            segments,
            language: extra
                .get("language")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            duration: duration_s,
            path: Some(path),
            error: None,
        }
    }

    /// A file that failed, with its one-line reason.
    pub fn failed(path: String, error: String) -> Transcription {
        Transcription {
            text: String::new(),
            words: Vec::new(),
            segments: Vec::new(),
            language: None,
            duration: 0.0,
            path: Some(path),
            error: Some(error),
        }
    }
}

/// What `pulsed transcribe --format jsonl` rounds times to.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}
