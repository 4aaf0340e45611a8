//! `pulsed.PulsedError`, and running library calls without the GIL so that
//! neither an error nor a panic escapes as anything else.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

create_exception!(
    pulsed,
    PulsedError,
    PyRuntimeError,
    "What went wrong, in the one line the command line prints."
);

/// A one-line reason as a [`PulsedError`].
pub fn error(reason: impl std::fmt::Display) -> PyErr {
    PulsedError::new_err(reason.to_string())
}

/// Runs `f` with the GIL released; its error and any panic come back as a
/// [`PulsedError`] (a panic must not unwind into Python's frames).
pub fn detached<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> Result<T, String> + Send,
{
    py.detach(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|panic| error(format!("internal error: {}", panic_message(&*panic))))?
        .map_err(error)
}

/// What a panic said, when it said it with a string.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

/// Little-endian f32 bytes (the Python side's `ndarray.tobytes()`) as samples.
pub fn f32_samples(bytes: &[u8]) -> PyResult<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(error(format!(
            "samples: {} bytes is not a whole number of f32 samples",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// `samples` at `to` Hz, converted as files are ([`pulsed::audio::load`]).
pub fn resampled(samples: Vec<f32>, from: u32, to: u32) -> Result<Vec<f32>, String> {
    if from == to {
        return Ok(samples);
    }
    let why =
        |e: pulsed::audio::ResampleError| format!("cannot resample {from} Hz to {to} Hz: {e}");
    let mut r = pulsed::audio::StreamResampler::new(from, to).map_err(why)?;
    let mut out = Vec::new();
    r.push(&samples, &mut out).map_err(why)?;
    r.finish(&mut out).map_err(why)?;
    Ok(out)
}
