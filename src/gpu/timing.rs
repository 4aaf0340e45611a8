//! `PULSED_GPU_TIMING=1`: one stderr line per expensive set-up step
//! (a runner planned, a segment captured, a cache made), to find where a
//! worker's first seconds go. Off, it costs one cached flag read.

use std::sync::OnceLock;
use std::time::Instant;

/// Environment variable: `1` reports set-up times on stderr.
pub const TIMING_ENV: &str = "PULSED_GPU_TIMING";

/// Whether set-up times are reported.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(TIMING_ENV).is_ok_and(|v| v == "1"))
}

/// Reports `what` as taking the time since `since`, when enabled.
pub fn report(what: impl FnOnce() -> String, since: Instant) {
    if enabled() {
        let ms = since.elapsed().as_secs_f64() * 1e3;
        eprintln!("pulsed gpu timing: {} {ms:.1} ms", what());
    }
}
