//! Helpers shared by the whole-flow tests.
#![allow(dead_code)]

use pulsed::ops::Tensor;

/// A small deterministic generator (xorshift), so tests need no extra crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    pub fn tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), self.vec(n)).unwrap()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Runs the `pulsed` binary: exit code, stdout, stderr.
pub fn pulsed(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pulsed"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A fresh, empty temporary folder for one test.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pulsed-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// False (after saying so) when the run asked to skip; panics when NVRTC is
/// missing otherwise, so that a missing library never passes silently.
#[cfg(feature = "cuda")]
pub fn nvrtc_or_fail() -> bool {
    if pulsed::gpu::nvrtc_available() {
        return true;
    }
    if std::env::var("PULSED_SKIP_NVRTC").as_deref() == Ok("1") {
        eprintln!("PULSED_SKIP_NVRTC=1: NVRTC not found, kernel compile check skipped");
        return false;
    }
    panic!(
        "libnvrtc.so.13 not found: run scripts/test.sh (it installs PyPI's nvidia-cuda-nvrtc \
         into third_party/nvrtc and sets LD_LIBRARY_PATH), or set PULSED_SKIP_NVRTC=1 to skip"
    );
}
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod whisper;
