//! Property tests: whatever a client sends (any text, any JSON, any
//! base64), the parsers answer with a value or a reason, never a panic.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::pcm::PcmInput;
use super::realtime_events::parse;
use super::session_config::SessionConfig;

/// Any JSON value, a few levels deep, with the keys the parsers look for
/// among the random ones.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("type".to_string()),
        Just("session".to_string()),
        Just("audio".to_string()),
        Just("input".to_string()),
        Just("format".to_string()),
        Just("rate".to_string()),
        Just("transcription".to_string()),
        Just("turn_detection".to_string()),
        Just("silence_duration_ms".to_string()),
        Just("input_audio_format".to_string()),
        Just("language".to_string()),
        "[a-z_.]{0,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("transcription".to_string()),
            Just("audio/pcm".to_string()),
            Just("server_vad".to_string()),
            Just("pcm16".to_string()),
            Just("input_audio_buffer.append".to_string()),
            Just("session.update".to_string()),
            ".{0,16}",
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_text_parses_or_is_refused(text in ".{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn any_json_event_parses_or_is_refused(v in any_json()) {
        let _ = parse(&v.to_string());
    }

    #[test]
    fn any_session_update_applies_or_is_refused(v in any_json()) {
        let mut c = SessionConfig::new("m", None, 600);
        if c.update_ga(&v).is_ok() {
            prop_assert!(super::session_config::RATES.contains(&c.rate));
            prop_assert!((100..=10_000).contains(&c.silence_ms));
        }
        let mut c = SessionConfig::new("m", None, 600);
        if c.update_beta(&v).is_ok() {
            prop_assert!(super::session_config::RATES.contains(&c.rate));
        }
        let wrapped = json!({"audio": {"input": v.clone()}});
        let _ = SessionConfig::new("m", None, 600).update_ga(&wrapped);
    }

    #[test]
    fn any_audio_decodes_or_is_refused(b64 in "[A-Za-z0-9+/=]{0,64}|.{0,64}") {
        let mut p = PcmInput::new(24_000, 16_000).unwrap();
        let mut out = Vec::new();
        if p.push(&b64, &mut out).is_ok() {
            p.flush(&mut out);
            prop_assert!(out.iter().all(|s| s.is_finite() && s.abs() <= 1.5));
        }
    }
}
