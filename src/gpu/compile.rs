//! NVRTC compilation of the `.cu` kernel sources the crate ships.
//!
//! On a device each module is compiled to a CUBIN for the device's own
//! `sm_XY` (PTX from an NVRTC newer than the driver fails to load), falling
//! back to PTX; CUBINs are kept on disk by [`super::kernel_cache`], so a
//! later process reads them instead of compiling. CI, with no GPU, compiles
//! every source for [`CI_ARCH`] so that a broken kernel fails the build's
//! tests.

use std::ffi::CString;
use std::time::Instant;

use cudarc::nvrtc::{result, sys};

use super::GpuError;

/// Every kernel module the kernel library loads: (name, CUDA C source). A
/// new `.cu` file is added here and is then covered by the NVRTC test
/// automatically; a kernel only tests use goes in
/// [`super::test_util::TEST_KERNEL_SOURCES`] instead, which that test covers
/// too. Each is compiled after [`PRELUDE`].
pub const KERNEL_SOURCES: &[(&str, &str)] = &[
    ("elementwise", include_str!("kernels/elementwise.cu")),
    ("linear", include_str!("kernels/linear.cu")),
    ("copy", include_str!("kernels/copy.cu")),
    ("pulse", include_str!("kernels/pulse.cu")),
    ("norm", include_str!("kernels/norm.cu")),
    ("conv", include_str!("kernels/conv.cu")),
    ("stft", include_str!("kernels/stft.cu")),
    ("attention", include_str!("kernels/attention.cu")),
    ("ctc", include_str!("kernels/ctc.cu")),
    ("lstm", include_str!("kernels/lstm.cu")),
    ("top_tokens", include_str!("kernels/top_tokens.cu")),
];

/// Shared definitions (bf16 conversions, typed loads and stores, block
/// reductions) compiled in front of every module.
pub const PRELUDE: &str = include_str!("kernels/common.cuh");

/// The virtual architecture CI compiles for (Hopper, the GPU machine's H100).
pub const CI_ARCH: &str = "compute_90";

/// The source of the module `name`, if the crate ships one.
pub fn kernel_source(name: &str) -> Option<&'static str> {
    KERNEL_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Whether `libnvrtc` can be opened (cudarc panics on a call without it).
pub fn nvrtc_available() -> bool {
    unsafe { sys::is_culib_present() }
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    if !nvrtc_available() {
        return Err(GpuError::NoNvrtc);
    }
    let (mut major, mut minor) = (0, 0);
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| GpuError::Nvrtc(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// What NVRTC produced.
#[derive(Debug, Clone)]
pub enum Image {
    /// PTX text, JIT-compiled by the driver at load time.
    Ptx(String),
    /// Machine code for one `sm_XY`.
    Cubin(Vec<u8>),
}

/// One compiled module.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The module's name in [`KERNEL_SOURCES`].
    pub name: String,
    /// The `--gpu-architecture` it was compiled for.
    pub arch: String,
    /// PTX or CUBIN.
    pub image: Image,
    /// Wall time of the NVRTC compilation, or of reading the cached image.
    pub millis: f64,
    /// Whether the image came from the on-disk kernel cache rather than NVRTC.
    pub cached: bool,
}

impl Compiled {
    /// The image as cudarc's loadable form.
    pub fn to_cudarc(&self) -> cudarc::nvrtc::Ptx {
        match &self.image {
            Image::Ptx(s) => cudarc::nvrtc::Ptx::from_src(s.clone()),
            Image::Cubin(b) => cudarc::nvrtc::Ptx::from_binary(b.clone()),
        }
    }
}

/// Frees the NVRTC program however compilation ends.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // A failed destroy leaks one program; nothing better to do in drop.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn log_of(prog: &Program) -> String {
    match unsafe { result::get_program_log(prog.0) } {
        Ok(raw) => {
            let bytes: Vec<u8> = raw
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).trim_end().to_string()
        }
        Err(e) => format!("(no log: {e:?})"),
    }
}

/// What NVRTC compiles for module `name`: the prelude, then `src` with its
/// own file name and line numbers in the compiler's messages.
pub(crate) fn full_source(name: &str, src: &str) -> String {
    format!("{PRELUDE}\n#line 1 \"{name}.cu\"\n{src}")
}

/// NVRTC's options for `arch`.
pub(crate) fn nvrtc_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ]
}

/// The real architecture (`sm_XY`) of a device of compute capability
/// `(major, minor)`.
pub fn device_arch(cc: (i32, i32)) -> String {
    format!("sm_{}{}", cc.0, cc.1)
}

/// Compiles `src` for `arch`: `compute_XY` gives PTX, `sm_XY` a CUBIN. A
/// compile error carries NVRTC's log.
pub fn compile(name: &str, src: &str, arch: &str) -> Result<Compiled, GpuError> {
    if !nvrtc_available() {
        return Err(GpuError::NoNvrtc);
    }
    let cubin = arch.starts_with("sm_");
    let c_src = CString::new(full_source(name, src))
        .map_err(|_| GpuError::Nvrtc(format!("{name}: the source contains a NUL byte")))?;
    let c_name = CString::new(format!("{name}.cu"))
        .map_err(|_| GpuError::Nvrtc(format!("{name}: the name contains a NUL byte")))?;
    let start = Instant::now();
    let prog = Program(
        result::create_program(&c_src, Some(&c_name))
            .map_err(|e| GpuError::Nvrtc(format!("{name}: nvrtcCreateProgram: {e:?}")))?,
    );
    if let Err(e) = unsafe { result::compile_program(prog.0, &nvrtc_options(arch)) } {
        return Err(GpuError::Nvrtc(format!(
            "{name}.cu ({arch}): {e:?}\n{}",
            log_of(&prog)
        )));
    }
    let image = if cubin {
        let mut size = 0usize;
        unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
            .result()
            .map_err(|e| GpuError::Nvrtc(format!("{name}: nvrtcGetCUBINSize: {e:?}")))?;
        if size == 0 {
            return Err(GpuError::Nvrtc(format!(
                "{name}: NVRTC gave an empty CUBIN for {arch}"
            )));
        }
        let mut buf = vec![0u8; size];
        unsafe { sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr().cast()) }
            .result()
            .map_err(|e| GpuError::Nvrtc(format!("{name}: nvrtcGetCUBIN: {e:?}")))?;
        Image::Cubin(buf)
    } else {
        let raw = unsafe { result::get_ptx(prog.0) }
            .map_err(|e| GpuError::Nvrtc(format!("{name}: nvrtcGetPTX: {e:?}")))?;
        let bytes: Vec<u8> = raw
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Image::Ptx(String::from_utf8_lossy(&bytes).into_owned())
    };
    Ok(Compiled {
        name: name.to_string(),
        arch: arch.to_string(),
        image,
        millis: start.elapsed().as_secs_f64() * 1e3,
        cached: false,
    })
}

/// Compiles for a device of compute capability `(major, minor)`: CUBIN for its
/// `sm_XY` first, PTX for `compute_XY` if NVRTC cannot make that CUBIN (a
/// source error fails both ways and is reported from the PTX attempt).
pub fn compile_for_device(name: &str, src: &str, cc: (i32, i32)) -> Result<Compiled, GpuError> {
    compile(name, src, &device_arch(cc))
        .or_else(|_| compile(name, src, &format!("compute_{}{}", cc.0, cc.1)))
}

/// The names of the `extern "C" __global__` kernels a PTX text defines.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix(".visible .entry ")
                .or_else(|| l.strip_prefix(".entry "))?;
            Some(rest.split('(').next()?.trim().to_string())
        })
        .collect()
}
