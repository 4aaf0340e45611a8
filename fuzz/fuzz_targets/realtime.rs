//! The Realtime WebSocket's client events (`serve::fuzzing::realtime_messages`,
//! what a connection does with its text messages): one message per line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // a WebSocket text message is UTF-8 (the server refuses others)
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = pulsed::serve::fuzzing::realtime_messages(text.lines());
});
