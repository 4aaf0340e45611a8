//! CI's kernel check, with no GPU: every `.cu` source the crate ships (the
//! kernel library's and the test helpers') compiles through NVRTC (PyPI's `nvidia-cuda-nvrtc`; scripts/test.sh installs it and
//! puts it on LD_LIBRARY_PATH). Without NVRTC these tests fail, unless
//! PULSED_SKIP_NVRTC=1 says explicitly to skip them.
#![cfg(feature = "cuda")]

mod common;

use common::nvrtc_or_fail;
use pulsed::gpu::compile::{compile, ptx_entries, CI_ARCH, KERNEL_SOURCES};
use pulsed::gpu::test_util::TEST_KERNEL_SOURCES;
use pulsed::gpu::{GpuError, Image};

/// Every module: the library's, then the test helpers'.
fn every_source() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    KERNEL_SOURCES.iter().chain(TEST_KERNEL_SOURCES)
}

/// The kernel entries of module `name`'s PTX.
fn entries_of(name: &str, src: &str) -> Vec<String> {
    let c = compile(name, src, CI_ARCH).expect("compiles");
    let Image::Ptx(ptx) = &c.image else {
        panic!("PTX expected")
    };
    ptx_entries(ptx)
}

/// The `extern "C" __global__` names a source declares (macro-made ones excepted).
fn declared_kernels(src: &str) -> usize {
    src.matches("__global__").count()
}

#[test]
fn every_kernel_source_compiles_to_ptx() {
    if !nvrtc_or_fail() {
        return;
    }
    assert!(!KERNEL_SOURCES.is_empty());
    let mut failures = Vec::new();
    for (name, src) in every_source() {
        match compile(name, src, CI_ARCH) {
            Ok(c) => {
                let Image::Ptx(ptx) = &c.image else {
                    panic!("{name}: {CI_ARCH} should give PTX");
                };
                let entries = ptx_entries(ptx);
                assert!(
                    entries.len() >= declared_kernels(src).min(1),
                    "{name}: no kernel entry in the PTX"
                );
                eprintln!(
                    "{name}.cu: {} kernels, {:.0} ms ({})",
                    entries.len(),
                    c.millis,
                    entries.join(" ")
                );
            }
            Err(e) => failures.push(format!("{name}.cu: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "NVRTC failed:\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn every_kernel_source_compiles_to_hopper_cubin() {
    if !nvrtc_or_fail() {
        return;
    }
    for (name, src) in every_source() {
        match compile(name, src, "sm_90") {
            Ok(c) => match &c.image {
                Image::Cubin(b) => assert!(b.starts_with(b"\x7fELF"), "{name}: not an ELF CUBIN"),
                Image::Ptx(_) => panic!("{name}: sm_90 should give a CUBIN"),
            },
            Err(e) => panic!("{name}.cu (sm_90): {e}"),
        }
    }
}

#[test]
fn elementwise_module_has_every_kernel() {
    if !nvrtc_or_fail() {
        return;
    }
    let src = pulsed::gpu::compile::kernel_source("elementwise").expect("shipped");
    let entries = entries_of("elementwise", src);
    for op in ["binary", "unary"] {
        for t in ["f32", "bf16"] {
            let k = format!("{op}_{t}");
            assert!(entries.contains(&k), "{k} missing from {entries:?}");
        }
    }
}

#[test]
fn fault_kernels_are_in_the_test_module_only() {
    if !nvrtc_or_fail() {
        return;
    }
    let &(name, src) = TEST_KERNEL_SOURCES
        .iter()
        .find(|(n, _)| *n == "test_fault")
        .expect("test_util's fault module");
    let entries = entries_of(name, src);
    for t in ["f32", "bf16"] {
        let k = format!("fault_{t}");
        assert!(entries.contains(&k), "{k} missing from {entries:?}");
    }
    // production modules carry no test code
    for (name, src) in KERNEL_SOURCES {
        assert!(
            !src.contains("fault_impl"),
            "{name}.cu holds the fault kernel"
        );
    }
}

#[test]
fn a_broken_source_gives_the_compiler_log() {
    if !nvrtc_or_fail() {
        return;
    }
    let broken = "extern \"C\" __global__ void k(float* x) { x[0] = undefined_thing; }";
    let err = compile("broken", broken, CI_ARCH).expect_err("must not compile");
    let GpuError::Nvrtc(msg) = &err else {
        panic!("expected an NVRTC error, got {err:?}")
    };
    assert!(msg.contains("broken.cu"), "no file name in: {msg}");
    assert!(msg.contains("undefined_thing"), "no compiler log in: {msg}");
    assert!(msg.contains("error"), "no error line in: {msg}");
    // the same from the device path (CUBIN, then PTX)
    let err = pulsed::gpu::compile_for_device("broken", broken, (9, 0)).expect_err("broken");
    assert!(err.to_string().contains("undefined_thing"), "{err}");
}
