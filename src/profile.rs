//! `PULSED_PROFILE=1`: where a live stream's compute goes, phase by phase,
//! summed over every stream of the process and printed by whoever ends
//! the run (`pulsed eval --live`, `pulsed mic`). Off, a phase costs one
//! cached flag read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Environment variable: `1` sums the phases' times.
pub const PROFILE_ENV: &str = "PULSED_PROFILE";

/// The phases of a live Whisper pulse.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    /// Features and the streamed encoder's chunk steps.
    Encoder,
    /// The new frames' cross-attention keys and values.
    Frames,
    /// The streaming decoder's greedy steps.
    Decode,
    /// Its separate alignment pass (backends whose steps keep no attention).
    Align,
    /// The final line's word alignment.
    Words,
}

const PHASES: [(&str, Phase); 5] = [
    ("encoder", Phase::Encoder),
    ("frames", Phase::Frames),
    ("decode", Phase::Decode),
    ("align", Phase::Align),
    ("words", Phase::Words),
];

static NANOS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
static CALLS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Whether phases are timed.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(PROFILE_ENV).is_ok_and(|v| v == "1"))
}

/// Runs `f`, its time added to `phase` when enabled.
pub fn time<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    let _t = Timer::new(phase);
    f()
}

/// Adds the time until it is dropped to its phase, when enabled.
pub struct Timer(Option<(Phase, Instant)>);

impl Timer {
    pub fn new(phase: Phase) -> Timer {
        Timer(enabled().then(|| (phase, Instant::now())))
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((phase, t0)) = self.0 {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            NANOS[phase as usize].fetch_add(ns, Ordering::Relaxed);
            CALLS[phase as usize].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One line per phase that ran (total seconds, calls, mean ms), when
/// enabled.
pub fn report() -> Option<String> {
    if !enabled() {
        return None;
    }
    let lines: Vec<String> = PHASES
        .iter()
        .filter_map(|&(name, p)| {
            let calls = CALLS[p as usize].load(Ordering::Relaxed);
            let s = NANOS[p as usize].load(Ordering::Relaxed) as f64 * 1e-9;
            (calls > 0).then(|| {
                format!(
                    "pulsed profile: {name:8} {s:8.2} s over {calls:6} calls, {:.2} ms each",
                    s * 1e3 / calls as f64
                )
            })
        })
        .collect();
    Some(lines.join("\n"))
}
