//! The WAV reader (`audio::decode_wav`): any bytes as a WAV, to 16 kHz mono;
//! a file that ends early is refused, as the library's default.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = pulsed::audio::decode_wav(data, 16_000, "fuzz");
});
