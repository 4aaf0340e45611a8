//! Model configuration files: a Whisper `config.json`
//! (`WhisperConfig::parse`), the same text as `generation_config.json` and
//! `config.json` (`GenerationConfig::from_json`), and the shipped
//! conformer's `config.json` (parsed and checked as `ConformerConfig::load`).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pulsed::models::ConformerConfig;
use pulsed::models::whisper::generation::GenerationConfig;
use pulsed::models::whisper::WhisperConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = WhisperConfig::parse(text);
    if let Ok(cfg) = serde_json::from_str::<ConformerConfig>(text) {
        let _ = cfg.validate();
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let path = Path::new("config.json");
        let _ = GenerationConfig::from_json(None, (&v, path));
        let _ = GenerationConfig::from_json(
            Some((&v, Path::new("generation_config.json"))),
            (&v, path),
        );
    }
});
