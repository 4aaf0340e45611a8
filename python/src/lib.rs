//! `pulsed._pulsed`: the native half of the `pulsed` Python package, a thin
//! layer over [`pulsed::asr::Transcriber`]. The pure-Python half
//! (`python/pulsed/`) turns numpy arrays into f32 samples and adds
//! iteration sugar; everything that transcribes is here, run with the GIL
//! released, every error and panic turned into `pulsed.PulsedError`.

mod engine;
mod errors;
mod live;
mod model;
mod result;

use std::path::PathBuf;

use pyo3::prelude::*;

/// The native module; `pulsed/__init__.py` re-exports it.
#[pymodule]
fn _pulsed(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The command line's default for a file that ends before its header
    // says: the audio that is there, with a warning (`--strict` refuses).
    pulsed::audio::set_truncation(pulsed::audio::Truncation::Warn);
    m.add("PulsedError", m.py().get_type::<errors::PulsedError>())?;
    m.add("DEFAULT_MODEL", pulsed::models::fetch::DEFAULT_MODEL)?;
    m.add("DEFAULT_LANGUAGE", pulsed::models::fetch::DEFAULT_LANGUAGE)?;
    m.add("SHIPPED_MODEL", pulsed::models::fetch::SHIPPED_MODEL)?;
    m.add_class::<model::Model>()?;
    m.add_class::<live::LiveSession>()?;
    m.add_class::<live::LiveEvent>()?;
    m.add_class::<result::Transcription>()?;
    m.add_class::<result::Word>()?;
    m.add_class::<result::Segment>()?;
    m.add_function(wrap_pyfunction!(resample, m)?)?;
    m.add_function(wrap_pyfunction!(set_strict, m)?)?;
    m.add_function(wrap_pyfunction!(read_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(resume_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    Ok(())
}

/// `samples` (little-endian f32 bytes, mono) from `from_rate` to
/// `to_rate` Hz with the resampler files are read with; f32 bytes back.
#[pyfunction]
fn resample(py: Python<'_>, samples: &[u8], from_rate: u32, to_rate: u32) -> PyResult<Vec<u8>> {
    let samples = errors::f32_samples(samples)?;
    let out = errors::detached(py, move || errors::resampled(samples, from_rate, to_rate))?;
    Ok(out.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// Whether a file that ends before its header says is refused (`True`, the
/// command line's `--strict`) or read as far as it goes with a warning.
#[pyfunction]
fn set_strict(strict: bool) {
    pulsed::audio::set_truncation(if strict {
        pulsed::audio::Truncation::Refuse
    } else {
        pulsed::audio::Truncation::Warn
    });
}

/// The audio files a manifest lists, as `pulsed transcribe --manifest`
/// reads it: one path per line, or JSON lines with `audio_filepath` (NeMo)
/// or `file`; relative paths from the manifest's folder.
#[pyfunction]
fn read_manifest(path: PathBuf) -> PyResult<Vec<String>> {
    let files = pulsed::batch::read_manifest(&path).map_err(errors::error)?;
    Ok(files.iter().map(|f| f.display().to_string()).collect())
}

/// Readies a JSON-lines output for appending as `pulsed transcribe
/// --resume` does (a line cut short by a killed run is dropped; the file is
/// created if missing) and returns the files it already has a line for.
#[pyfunction]
fn resume_jsonl(path: PathBuf) -> PyResult<Vec<String>> {
    let (_file, done) = pulsed::batch::open_for_resume(&path)
        .map_err(|e| errors::error(format!("{}: {e}", path.display())))?;
    let mut files: Vec<String> = done.files.into_iter().collect();
    files.sort();
    Ok(files)
}

/// Panics inside the guard every engine call runs in, so that a test can
/// check a Rust panic reaches Python as a `PulsedError`.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>, message: String) -> PyResult<()> {
    errors::detached(py, move || -> Result<(), String> { panic!("{message}") })
}
