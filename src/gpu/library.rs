//! Every shipped kernel module compiled (NVRTC) and loaded once per device,
//! with its functions looked up by name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaModule};

use super::compile::KERNEL_SOURCES;
use super::context::no_panic;
use super::{GpuContext, GpuError};

/// The loaded kernel modules of one device.
#[derive(Debug)]
pub struct KernelLibrary {
    modules: HashMap<&'static str, Arc<CudaModule>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// Wall time to compile and load every module.
    pub load_millis: f64,
}

impl KernelLibrary {
    /// Compiles and loads every module in [`KERNEL_SOURCES`].
    pub fn load(gpu: &GpuContext) -> Result<KernelLibrary, GpuError> {
        let start = Instant::now();
        let mut modules = HashMap::new();
        for (name, _) in KERNEL_SOURCES {
            let (m, _) = gpu.load_module(name)?;
            modules.insert(*name, m);
        }
        Ok(KernelLibrary {
            modules,
            functions: Mutex::new(HashMap::new()),
            load_millis: start.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// The kernel `function` of module `module`.
    pub fn function(&self, module: &str, function: &str) -> Result<CudaFunction, GpuError> {
        let key = format!("{module}::{function}");
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(&key) {
            return Ok(f.clone());
        }
        let m = self
            .modules
            .get(module)
            .ok_or_else(|| GpuError::Kernel(format!("no kernel module named {module}")))?;
        let f = no_panic(|| Ok(m.load_function(function)?))
            .map_err(|e| GpuError::Kernel(format!("{module}.cu has no kernel {function}: {e}")))?;
        cache.insert(key, f.clone());
        Ok(f)
    }
}
