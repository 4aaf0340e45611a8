//! The word language model's ARPA reader (`WordLm::parse`), then a few
//! look-ups as the beam search makes them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulsed::decode::WordLm;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(lm) = WordLm::parse(text, "fuzz.arpa") else {
        return;
    };
    let mut context = lm.start();
    for word in text.split_whitespace().take(16) {
        let _ = lm.is_prefix(word);
        if let Some(id) = lm.id(word) {
            let _ = lm.log_prob(&context, id);
            context.push(id);
        }
    }
});
