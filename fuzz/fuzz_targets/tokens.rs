//! A CTC alphabet file (`tokens.txt`, `Tokens::load`'s lines), then the
//! text of every id, as greedy decoding writes it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulsed::decode::Tokens;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(tokens) = Tokens::from_lines(text.lines()) else {
        return;
    };
    let ids: Vec<usize> = (0..tokens.len().min(256)).collect();
    let _ = tokens.text_of(&ids);
});
