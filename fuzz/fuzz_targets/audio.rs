//! Every audio reader (`audio::decode_bytes`, as `pulsed transcribe` and the
//! server's uploads read a file): the first byte picks the file's extension
//! (a hint to the format probe), the rest is the file; a file that ends
//! early is decoded up to its end, as the command does by default.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulsed::audio::{decode_bytes, Truncation};

const EXTENSIONS: [Option<&str>; 8] = [
    None,
    Some("wav"),
    Some("flac"),
    Some("mp3"),
    Some("ogg"),
    Some("m4a"),
    Some("opus"),
    Some("bin"),
];

fuzz_target!(
    // The library catches symphonia's panics (a damaged file is an error);
    // libFuzzer's hook would abort on them before, so the default hook is
    // put back: a panic the library lets through still aborts the run.
    init: {
        let _ = std::panic::take_hook();
    },
    |data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else {
        return;
    };
    let ext = EXTENSIONS[usize::from(pick) % EXTENSIONS.len()];
    let _ = decode_bytes(file.to_vec(), ext, 16_000, Truncation::Warn);
    }
);
