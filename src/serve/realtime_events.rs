//! The Realtime API's events on one connection: client events parsed
//! (with a reason for each refusal), server events built with fresh ids.

use serde_json::{json, Value};

use crate::decode::Word;

/// What a client sent.
#[derive(Debug, PartialEq)]
pub enum ClientEvent {
    /// `session.update` (GA form): the `session` object.
    SessionUpdate(Value),
    /// `transcription_session.update` (beta form).
    TranscriptionSessionUpdate(Value),
    /// `input_audio_buffer.append`: base64 PCM16.
    Append(String),
    Commit,
    Clear,
}

/// A client event and the id the client gave it (errors it causes name
/// that id).
#[derive(Debug, PartialEq)]
pub struct Incoming {
    pub event: ClientEvent,
    pub event_id: Option<String>,
}

/// A refused client event: OpenAI's error `code` and a message.
#[derive(Debug, PartialEq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    /// The client's `event_id`, when it gave one.
    pub event_id: Option<String>,
}

/// Parses one text message.
pub fn parse(text: &str) -> Result<Incoming, Refusal> {
    let refuse = |code, message: String, event_id: Option<String>| Refusal {
        code,
        message,
        event_id,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        refuse(
            "invalid_json",
            format!("the message is not JSON: {e}"),
            None,
        )
    })?;
    let event_id = v.get("event_id").and_then(Value::as_str).map(String::from);
    let Some(kind) = v.get("type").and_then(Value::as_str) else {
        return Err(refuse(
            "invalid_event",
            "the message has no string `type`".into(),
            event_id,
        ));
    };
    let session = || {
        v.get("session").cloned().ok_or_else(|| {
            refuse(
                "missing_required_parameter",
                format!("`{kind}` needs a `session` object"),
                event_id.clone(),
            )
        })
    };
    let event = match kind {
        "session.update" => ClientEvent::SessionUpdate(session()?),
        "transcription_session.update" => ClientEvent::TranscriptionSessionUpdate(session()?),
        "input_audio_buffer.append" => match v.get("audio").and_then(Value::as_str) {
            Some(a) => ClientEvent::Append(a.to_string()),
            None => {
                return Err(refuse(
                    "missing_required_parameter",
                    "input_audio_buffer.append needs a string `audio` (base64 PCM16)".into(),
                    event_id,
                ))
            }
        },
        "input_audio_buffer.commit" => ClientEvent::Commit,
        "input_audio_buffer.clear" => ClientEvent::Clear,
        other => {
            return Err(refuse(
                "invalid_event",
                format!(
                    "event type `{other}` is not served (a transcription session takes \
                     session.update, transcription_session.update and \
                     input_audio_buffer.append / commit / clear)"
                ),
                event_id,
            ))
        }
    };
    Ok(Incoming { event, event_id })
}

/// Ids of one connection's events, items and session.
pub struct Ids {
    connection: u64,
    next_event: u64,
    next_item: u64,
}

impl Ids {
    pub fn new(connection: u64) -> Ids {
        Ids {
            connection,
            next_event: 0,
            next_item: 0,
        }
    }

    pub fn session(&self) -> String {
        format!("sess_pulsed{}", self.connection)
    }

    pub fn item(&mut self) -> String {
        self.next_item += 1;
        format!("item_pulsed{}_{}", self.connection, self.next_item)
    }

    /// A server event of `kind` with `fields`.
    pub fn event(&mut self, kind: &str, fields: Value) -> Value {
        self.next_event += 1;
        let mut v = json!({
            "type": kind,
            "event_id": format!("event_pulsed{}_{}", self.connection, self.next_event),
        });
        if let (Some(obj), Value::Object(f)) = (v.as_object_mut(), fields) {
            obj.extend(f);
        }
        v
    }

    /// An `error` event: `kind` is OpenAI's error type, `code` its code.
    pub fn error(
        &mut self,
        kind: &str,
        code: &str,
        message: &str,
        client_event: Option<&str>,
    ) -> Value {
        self.event(
            "error",
            json!({"error": {
                "type": kind,
                "code": code,
                "message": message,
                "param": null,
                "event_id": client_event,
            }}),
        )
    }
}

/// Words with times `offset_s` later (from the connection's first sample),
/// as `completed` events carry them.
pub fn words_json(words: &[Word], offset_s: f64) -> Value {
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    words
        .iter()
        .map(|w| {
            json!({
                "word": w.text,
                "start": r3(w.start_s + offset_s),
                "end": r3(w.end_s + offset_s),
                "confidence": (w.confidence as f64 * 1e4).round() / 1e4,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_or_say_why_not() {
        assert_eq!(
            parse(r#"{"type":"input_audio_buffer.append","audio":"AAA=","event_id":"e0"}"#),
            Ok(Incoming {
                event: ClientEvent::Append("AAA=".into()),
                event_id: Some("e0".into())
            })
        );
        assert_eq!(
            parse(r#"{"type":"input_audio_buffer.commit"}"#).map(|i| i.event),
            Ok(ClientEvent::Commit)
        );
        assert_eq!(parse("{nope").unwrap_err().code, "invalid_json");
        assert_eq!(parse("[1]").unwrap_err().code, "invalid_event");
        let r = parse(r#"{"type":"response.create","event_id":"e1"}"#).unwrap_err();
        assert_eq!(
            (r.code, r.event_id.as_deref()),
            ("invalid_event", Some("e1"))
        );
        assert_eq!(
            parse(r#"{"type":"input_audio_buffer.append","audio":3}"#)
                .unwrap_err()
                .code,
            "missing_required_parameter"
        );
        assert_eq!(
            parse(r#"{"type":"session.update"}"#).unwrap_err().code,
            "missing_required_parameter"
        );
    }

    #[test]
    fn server_events_have_type_and_fresh_ids() {
        let mut ids = Ids::new(7);
        let a = ids.event("session.created", json!({"session": {}}));
        let b = ids.error("invalid_request_error", "invalid_json", "bad", None);
        assert_eq!(a["type"], "session.created");
        assert_ne!(a["event_id"], b["event_id"]);
        assert_eq!(b["error"]["code"], "invalid_json");
        assert_ne!(ids.item(), ids.item());
    }
}
