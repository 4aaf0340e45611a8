//! A Realtime transcription session's settings, as `session.update` (the
//! GA form, `session.type = "transcription"`) and the beta
//! `transcription_session.update` set them, and as `session.created` /
//! `session.updated` report them.

use serde_json::{json, Value};

/// What a client may set; fields an update leaves out keep their value.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    /// Input PCM16 rate: 24000 (OpenAI's only rate) or 16000.
    pub rate: u32,
    /// Server VAD on: utterances end at the model's end of speech, with
    /// `speech_started` / `speech_stopped`; off (`turn_detection: null`):
    /// an utterance lasts until the client commits.
    pub server_vad: bool,
    /// Silence that ends an utterance with server VAD, in ms.
    pub silence_ms: u64,
    /// The model named (checked against the loaded one).
    pub model: String,
    pub language: Option<String>,
    /// Accepted and reported; the loaded model's prompt is fixed at start.
    pub prompt: Option<String>,
}

/// Rates the input may have.
pub const RATES: [u32; 2] = [24_000, 16_000];

impl SessionConfig {
    /// The settings a new connection starts with.
    pub fn new(model: &str, language: Option<String>, silence_ms: u64) -> SessionConfig {
        SessionConfig {
            rate: 24_000,
            server_vad: true,
            silence_ms,
            model: model.to_string(),
            language,
            prompt: None,
        }
    }

    /// Applies a GA `session.update`'s `session` object.
    pub fn update_ga(&mut self, session: &Value) -> Result<(), String> {
        let obj = session.as_object().ok_or("`session` must be an object")?;
        match obj.get("type").and_then(Value::as_str) {
            None | Some("transcription") => {}
            Some(other) => {
                return Err(format!(
                    "session.type `{other}` is not served: this server only transcribes \
                     (session.type = \"transcription\")"
                ))
            }
        }
        let Some(input) = session.pointer("/audio/input") else {
            return Ok(());
        };
        if let Some(format) = input.get("format") {
            self.rate = parse_format(format)?;
        }
        if let Some(t) = input.get("transcription") {
            self.update_transcription(t)?;
        }
        if let Some(td) = input.get("turn_detection") {
            self.update_turn_detection(td)?;
        }
        Ok(())
    }

    /// Applies a beta `transcription_session.update`'s `session` object.
    pub fn update_beta(&mut self, session: &Value) -> Result<(), String> {
        let obj = session.as_object().ok_or("`session` must be an object")?;
        if let Some(f) = obj.get("input_audio_format") {
            match f.as_str() {
                Some("pcm16") => self.rate = 24_000,
                _ => {
                    return Err(format!(
                        "input_audio_format {f} is not served: only \"pcm16\" (24 kHz)"
                    ))
                }
            }
        }
        if let Some(t) = obj.get("input_audio_transcription") {
            self.update_transcription(t)?;
        }
        if let Some(td) = obj.get("turn_detection") {
            self.update_turn_detection(td)?;
        }
        Ok(())
    }

    fn update_transcription(&mut self, t: &Value) -> Result<(), String> {
        if t.is_null() {
            return Ok(());
        }
        let obj = t.as_object().ok_or("`transcription` must be an object")?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("transcription.{key} must be a string")),
            }
        };
        if let Some(m) = text("model")? {
            self.model = m;
        }
        if let Some(l) = text("language")? {
            self.language = Some(l).filter(|l| !l.is_empty());
        }
        if let Some(p) = text("prompt")? {
            self.prompt = Some(p).filter(|p| !p.is_empty());
        }
        Ok(())
    }

    fn update_turn_detection(&mut self, td: &Value) -> Result<(), String> {
        if td.is_null() {
            self.server_vad = false;
            return Ok(());
        }
        match td.get("type").and_then(Value::as_str) {
            // semantic VAD is served as server VAD: the model's end of speech
            None | Some("server_vad" | "semantic_vad") => self.server_vad = true,
            Some(other) => return Err(format!("turn_detection.type `{other}` is not served")),
        }
        if let Some(ms) = td.get("silence_duration_ms").filter(|v| !v.is_null()) {
            match ms.as_u64() {
                Some(ms) if (100..=10_000).contains(&ms) => self.silence_ms = ms,
                _ => return Err("silence_duration_ms must be 100 to 10000".into()),
            }
        }
        Ok(())
    }

    fn turn_detection(&self) -> Value {
        if self.server_vad {
            json!({"type": "server_vad", "silence_duration_ms": self.silence_ms})
        } else {
            Value::Null
        }
    }

    fn transcription(&self) -> Value {
        json!({"model": self.model, "language": self.language, "prompt": self.prompt})
    }

    /// The GA session object (`session.created`, `session.updated`).
    pub fn ga(&self, id: &str) -> Value {
        json!({
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": id,
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": self.rate},
                "transcription": self.transcription(),
                "turn_detection": self.turn_detection(),
                "noise_reduction": null,
            }},
        })
    }

    /// The beta session object (`transcription_session.updated`).
    pub fn beta(&self, id: &str) -> Value {
        json!({
            "object": "realtime.transcription_session",
            "id": id,
            "input_audio_format": if self.rate == 24_000 { "pcm16" } else { "pcm16-16khz" },
            "input_audio_transcription": self.transcription(),
            "turn_detection": self.turn_detection(),
        })
    }
}

/// `{type: "audio/pcm", rate}`: the rate.
fn parse_format(format: &Value) -> Result<u32, String> {
    match format.get("type").and_then(Value::as_str) {
        Some("audio/pcm") => {}
        Some(other) => {
            return Err(format!(
                "audio format `{other}` is not served: only \"audio/pcm\" (PCM16 mono)"
            ))
        }
        None => return Err("audio.input.format.type is missing".into()),
    }
    match format.get("rate") {
        None | Some(Value::Null) => Ok(24_000),
        Some(r) => match r.as_u64() {
            Some(r) if RATES.contains(&(r as u32)) => Ok(r as u32),
            _ => Err(format!(
                "audio.input.format.rate {r} is not served: 24000 or 16000"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_update_sets_rate_vad_and_language() {
        let mut c = SessionConfig::new("pulsed-en-ctc", None, 600);
        c.update_ga(&json!({"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000},
            "transcription": {"model": "default", "language": "en", "prompt": "names"},
            "turn_detection": null}}}))
            .unwrap();
        assert_eq!(c.rate, 16_000);
        assert!(!c.server_vad);
        assert_eq!(c.model, "default");
        assert_eq!(c.language.as_deref(), Some("en"));
        assert_eq!(c.prompt.as_deref(), Some("names"));
        c.update_ga(&json!({"audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 800}}}}))
            .unwrap();
        assert!(c.server_vad);
        assert_eq!(c.silence_ms, 800);
        assert_eq!(c.rate, 16_000, "a field left out keeps its value");
    }

    #[test]
    fn what_is_not_served_is_refused() {
        let mut c = SessionConfig::new("m", None, 600);
        let before = c.clone();
        for bad in [
            json!({"type": "realtime"}),
            json!({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}),
            json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}}),
            json!({"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": -1}}}}),
            json!({"audio": {"input": {"transcription": {"language": 3}}}}),
            json!("not an object"),
        ] {
            assert!(c.update_ga(&bad).is_err(), "{bad}");
        }
        assert!(c
            .update_beta(&json!({"input_audio_format": "g711_ulaw"}))
            .is_err());
        assert_eq!(c.rate, before.rate);
    }

    #[test]
    fn beta_update_sets_turn_detection() {
        let mut c = SessionConfig::new("m", None, 600);
        c.update_beta(
            &json!({"input_audio_format": "pcm16", "turn_detection": null,
            "input_audio_transcription": {"model": "m"}}),
        )
        .unwrap();
        assert!(!c.server_vad);
        assert_eq!(c.beta("s")["turn_detection"], Value::Null);
    }
}
