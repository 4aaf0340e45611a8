//! Device and pinned host memory, every allocation counted.
//!
//! The backend allocates device memory only through [`DeviceBuffer::alloc`],
//! which counts each attempt and refuses (with an error, never a panic) any
//! attempt made while a CUDA graph is being captured: capture-time allocations
//! either fail the capture or bake a temporary address into the graph.
//!
//! Allocating or freeing synchronises implicitly with every stream, so one
//! thread's allocation would invalidate another thread's capture (seen with
//! 32 lanes). A process-wide lock keeps them apart: memory changes hold it
//! exclusively (`memory_change`), captures hold it shared (`capture_guard`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use cudarc::driver::{result, sys};

use super::context::no_panic;
use super::{GpuContext, GpuError};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static CAPTURE_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static CAPTURING: AtomicBool = const { AtomicBool::new(false) };
    /// This thread holds a [`CaptureGuard`] (its memory changes must not
    /// wait for the lock it holds itself).
    static GUARDED: AtomicBool = const { AtomicBool::new(false) };
}

/// Device allocations attempted by this process (all threads).
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Device allocations attempted while a capture was open on the calling
/// thread's streams; tests assert it stays zero.
pub fn capture_allocations() -> u64 {
    CAPTURE_ALLOCATIONS.load(Ordering::Relaxed)
}

/// Marks the calling thread as capturing (or not); see [`capture_allocations`].
pub(crate) fn set_capturing(on: bool) {
    CAPTURING.with(|c| c.store(on, Ordering::Relaxed));
}

fn capturing() -> bool {
    CAPTURING.with(|c| c.load(Ordering::Relaxed))
}

static MEMORY_LOCK: RwLock<()> = RwLock::new(());

/// Runs `f`, which allocates or frees device or pinned memory (or makes or
/// destroys a handle that does), while no other thread is capturing. On a
/// thread that holds the capture guard itself it runs at once: waiting
/// would deadlock, and a capture it breaks fails on its own.
pub(crate) fn memory_change<T>(f: impl FnOnce() -> T) -> T {
    if GUARDED.with(|g| g.load(Ordering::Relaxed)) {
        return f();
    }
    let _g = MEMORY_LOCK.write().unwrap_or_else(|e| e.into_inner());
    f()
}

/// Held for the whole of a capture: memory changes on other threads wait.
pub(crate) struct CaptureGuard {
    _lock: RwLockReadGuard<'static, ()>,
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        GUARDED.with(|g| g.store(false, Ordering::Relaxed));
    }
}

pub(crate) fn capture_guard() -> CaptureGuard {
    let lock = MEMORY_LOCK.read().unwrap_or_else(|e| e.into_inner());
    GUARDED.with(|g| g.store(true, Ordering::Relaxed));
    CaptureGuard { _lock: lock }
}

/// Rounds a byte offset up so every buffer starts 256-byte aligned (what
/// cuBLAS and vector loads like).
pub fn align(bytes: usize) -> usize {
    bytes.div_ceil(256) * 256
}

/// An owned block of device memory.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

// The pointer is a device address owned by this value alone.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Allocates `bytes` (at least 1) of device memory, zeroed.
    pub fn alloc(gpu: &GpuContext, bytes: usize) -> Result<DeviceBuffer, GpuError> {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        if capturing() {
            CAPTURE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            return Err(GpuError::Driver(format!(
                "refused to allocate {bytes} bytes during CUDA-graph capture"
            )));
        }
        let bytes = bytes.max(1);
        no_panic(|| {
            gpu.ctx().bind_to_thread()?;
            let ptr = memory_change(|| unsafe { result::malloc_sync(bytes) })?;
            // Zeroed on the work stream and waited for: the legacy stream's
            // memset would not be ordered before a non-blocking stream's work.
            let s = gpu.stream().cu_stream();
            unsafe { result::memset_d8_async(ptr, 0, bytes, s) }?;
            unsafe { result::stream::synchronize(s) }?;
            Ok(DeviceBuffer { ptr, bytes })
        })
    }

    /// Allocates and fills with `data`.
    pub fn from_bytes(gpu: &GpuContext, data: &[u8]) -> Result<DeviceBuffer, GpuError> {
        let b = DeviceBuffer::alloc(gpu, data.len())?;
        if !data.is_empty() {
            // A "synchronous" copy from pageable memory may return before its
            // DMA lands, and on the legacy stream: copy on the work stream and wait.
            no_panic(|| {
                let s = gpu.stream().cu_stream();
                unsafe { result::memcpy_htod_async(b.ptr, data, s) }?;
                unsafe { result::stream::synchronize(s) }?;
                Ok(())
            })?;
        }
        Ok(b)
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // A failed free (context already gone) leaks; nothing better in drop.
        let _ = memory_change(|| unsafe { result::free_sync(self.ptr) });
    }
}

/// Page-locked host memory, so copies to and from the device are real DMA
/// and can sit inside a captured graph.
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut u8,
    bytes: usize,
}

unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub fn alloc(gpu: &GpuContext, bytes: usize) -> Result<PinnedBuffer, GpuError> {
        let bytes = bytes.max(1);
        no_panic(|| {
            gpu.ctx().bind_to_thread()?;
            let ptr = memory_change(|| unsafe { result::malloc_host(bytes, 0) })? as *mut u8;
            unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
            Ok(PinnedBuffer { ptr, bytes })
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = memory_change(|| unsafe { result::free_host(self.ptr.cast()) });
    }
}

/// Copies device memory into `dst` and waits for it.
pub fn copy_to_host(gpu: &GpuContext, src: u64, dst: &mut [u8]) -> Result<(), GpuError> {
    if dst.is_empty() {
        return Ok(());
    }
    no_panic(|| {
        let s = gpu.stream().cu_stream();
        unsafe { result::memcpy_dtoh_async(dst, src, s) }?;
        unsafe { result::stream::synchronize(s) }?;
        Ok(())
    })
}

/// Queues a copy of device memory into `dst` without waiting: `dst` must be
/// pinned memory left untouched until the stream is synchronised.
pub fn copy_to_host_async(gpu: &GpuContext, src: u64, dst: &mut [u8]) -> Result<(), GpuError> {
    if dst.is_empty() {
        return Ok(());
    }
    no_panic(|| {
        unsafe { result::memcpy_dtoh_async(dst, src, gpu.stream().cu_stream()) }?;
        Ok(())
    })
}

/// Copies `src` to device memory at `dst` (stream-ordered; `src` must stay
/// alive and unchanged until the stream reaches the copy, or be pageable
/// memory, which the driver stages before returning).
pub fn copy_to_device(gpu: &GpuContext, src: &[u8], dst: u64) -> Result<(), GpuError> {
    if src.is_empty() {
        return Ok(());
    }
    no_panic(|| {
        unsafe { result::memcpy_htod_async(dst, src, gpu.stream().cu_stream()) }?;
        Ok(())
    })
}

/// Stream-ordered device-to-device copy.
pub fn copy_device(gpu: &GpuContext, src: u64, dst: u64, bytes: usize) -> Result<(), GpuError> {
    if bytes == 0 || src == dst {
        return Ok(());
    }
    no_panic(|| {
        unsafe { result::memcpy_dtod_async(dst, src, bytes, gpu.stream().cu_stream()) }?;
        Ok(())
    })
}

/// Stream-ordered zeroing of `bytes` at `ptr`.
pub fn zero(gpu: &GpuContext, ptr: u64, bytes: usize) -> Result<(), GpuError> {
    if bytes == 0 {
        return Ok(());
    }
    no_panic(|| {
        unsafe { result::memset_d8_async(ptr, 0, bytes, gpu.stream().cu_stream()) }?;
        Ok(())
    })
}
