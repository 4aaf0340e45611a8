//! `POST /v1/audio/transcriptions` bodies (`serve::fuzzing::transcription_form`):
//! the first line is the request's `Content-Type`, the rest its multipart body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (content_type, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let _ = pulsed::serve::fuzzing::transcription_form(content_type, body.to_vec());
});
