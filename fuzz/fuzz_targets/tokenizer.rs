//! Whisper's `tokenizer.json` (`WhisperTokenizer::from_bytes`, what
//! `from_file` reads it with), then a round trip and the tables decoding
//! builds from it.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pulsed::models::whisper::tokenizer::WhisperTokenizer;

fuzz_target!(|data: &[u8]| {
    let Ok(tok) = WhisperTokenizer::from_bytes(data, Path::new("tokenizer.json")) else {
        return;
    };
    if let Ok(ids) = tok.encode(" hello world") {
        let _ = tok.decode(&ids);
        let _ = tok.decode_with_timestamps(&ids);
    }
    let _ = tok.non_speech_tokens();
    let vocab = tok.special().no_speech as usize + 2;
    let _ = tok.word_starts(vocab.min(1 << 16));
});
