//! Every shipped kernel module compiled (NVRTC, all at once) or read from the
//! kernel cache, and loaded once per device, with its functions looked up by
//! name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaModule};

use super::compile::{Compiled, KERNEL_SOURCES};
use super::context::no_panic;
use super::kernel_cache::{compile_cached, KernelCache};
use super::{GpuContext, GpuError};

/// The loaded kernel modules of one device.
#[derive(Debug)]
pub struct KernelLibrary {
    modules: HashMap<&'static str, Arc<CudaModule>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// Wall time to compile (or read) and load every module.
    pub load_millis: f64,
    /// How many modules came from the kernel cache rather than NVRTC.
    pub from_cache: usize,
}

impl KernelLibrary {
    /// Compiles (or reads from the kernel cache) and loads every module in
    /// [`KERNEL_SOURCES`].
    pub fn load(gpu: &GpuContext) -> Result<KernelLibrary, GpuError> {
        let start = Instant::now();
        let cache = KernelCache::from_env();
        let compiled = compile_all(gpu.compute_capability()?, cache.as_ref())?;
        let mut modules = HashMap::new();
        let mut from_cache = 0;
        for ((name, src), c) in KERNEL_SOURCES.iter().zip(compiled) {
            let (m, c) = gpu.load_compiled(name, src, c, cache.as_ref())?;
            from_cache += usize::from(c.cached);
            modules.insert(*name, m);
        }
        Ok(KernelLibrary {
            modules,
            functions: Mutex::new(HashMap::new()),
            load_millis: start.elapsed().as_secs_f64() * 1e3,
            from_cache,
        })
    }

    /// How long the kernels took and where they came from, e.g. "kernels
    /// ready in 35 ms (10 of 10 from the cache)".
    pub fn describe_load(&self) -> String {
        match self.from_cache {
            0 => format!("kernels compiled in {:.0} ms", self.load_millis),
            n => format!(
                "kernels ready in {:.0} ms ({n} of {} from the cache)",
                self.load_millis,
                self.modules.len()
            ),
        }
    }

    /// The kernel `function` of module `module`.
    pub fn function(&self, module: &str, function: &str) -> Result<CudaFunction, GpuError> {
        let key = format!("{module}::{function}");
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(&key) {
            return Ok(f.clone());
        }
        let m = self.modules.get(module).ok_or_else(|| GpuError::NoModule {
            module: module.to_string(),
        })?;
        let f = module_function(module, m, function)?;
        cache.insert(key, f.clone());
        Ok(f)
    }
}

/// The kernel `function` of the loaded module `m`, named `module` in errors.
pub fn module_function(
    module: &str,
    m: &Arc<CudaModule>,
    function: &str,
) -> Result<CudaFunction, GpuError> {
    no_panic(|| Ok(m.load_function(function)?)).map_err(|e| GpuError::NoFunction {
        module: module.to_string(),
        function: function.to_string(),
        why: e.to_string(),
    })
}

/// Every module in [`KERNEL_SOURCES`], in that order, for a device of compute
/// capability `cc`: read from `cache` or compiled, one thread per module
/// (NVRTC compiles separate programs concurrently, and a start waits for the
/// slowest module rather than the sum of them).
pub fn compile_all(cc: (i32, i32), cache: Option<&KernelCache>) -> Result<Vec<Compiled>, GpuError> {
    std::thread::scope(|s| {
        let threads: Vec<_> = KERNEL_SOURCES
            .iter()
            .map(|(name, src)| {
                std::thread::Builder::new()
                    .name(format!("nvrtc-{name}"))
                    .spawn_scoped(s, move || compile_cached(name, src, cc, cache))
            })
            .collect();
        // every thread is joined before any error returns, so none is left
        // for the scope to join (it would panic on one that panicked)
        let results: Vec<_> = threads
            .into_iter()
            .zip(KERNEL_SOURCES)
            .map(|(thread, (name, src))| match thread {
                Ok(t) => t.join().unwrap_or_else(|_| {
                    Err(GpuError::Nvrtc(format!(
                        "{name}: the compiling thread panicked"
                    )))
                }),
                // no thread to be had: compile here
                Err(_) => compile_cached(name, src, cc, cache),
            })
            .collect();
        results.into_iter().collect()
    })
}
