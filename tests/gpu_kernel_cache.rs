//! The on-disk kernel cache with no GPU: NVRTC (as in tests/gpu_nvrtc.rs)
//! compiles into a cache in a temporary folder, named explicitly so that no
//! test touches the user's cache or races on the environment.
#![cfg(feature = "cuda")]

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{nvrtc_or_fail, temp_dir};
use pulsed::gpu::kernel_cache::{compile_cached, compile_fresh, CacheKey};
use pulsed::gpu::library::compile_all;
use pulsed::gpu::{Compiled, Image, KernelCache, KERNEL_SOURCES};

const HOPPER: (i32, i32) = (9, 0);
const SRC: &str = r#"extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }"#;

fn cubin(c: &Compiled) -> &[u8] {
    match &c.image {
        Image::Cubin(b) => b,
        Image::Ptx(_) => panic!("{}: sm_90 should give a CUBIN", c.name),
    }
}

fn entry(cache: &KernelCache, name: &str) -> PathBuf {
    cache.path(&CacheKey::new(name, SRC, "sm_90").expect("NVRTC's version"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .expect("cache directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_compiled_module_comes_back_from_the_cache() {
    if !nvrtc_or_fail() {
        return;
    }
    let dir = temp_dir("kernel-cache-hit");
    let cache = KernelCache::new(dir.join("kernels"));
    let first = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect("compiles");
    assert!(!first.cached, "an empty cache cannot hold it");
    let path = entry(&cache, "scale");
    assert!(path.is_file(), "{} not written", path.display());
    let again = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect("read back");
    assert!(again.cached, "not taken from the cache");
    assert_eq!(cubin(&again), cubin(&first), "the cache changed the image");
    assert_eq!(again.arch, "sm_90");
    // another source is another entry, never the first one's image
    let other = SRC.replace("*= a", "+= a");
    let c = compile_cached("scale", &other, HOPPER, Some(&cache)).expect("compiles");
    assert!(!c.cached);
    assert_ne!(cubin(&c), cubin(&first));
    assert_eq!(
        files_in(cache.dir()).len(),
        2,
        "{:?}",
        files_in(cache.dir())
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_entry_is_compiled_again_and_replaced() {
    if !nvrtc_or_fail() {
        return;
    }
    let dir = temp_dir("kernel-cache-damaged");
    let cache = KernelCache::new(&dir);
    let good = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect("compiles");
    let path = entry(&cache, "scale");
    let whole = fs::read(&path).expect("written");
    let mut flipped = whole.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x55;
    let damaged: [(&str, Vec<u8>); 4] = [
        ("truncated", whole[..whole.len() / 2].to_vec()),
        ("one byte flipped", flipped),
        ("empty", Vec::new()),
        ("a bare CUBIN with no header", cubin(&good).to_vec()),
    ];
    for (what, bytes) in damaged {
        fs::write(&path, bytes).unwrap();
        let c = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect(what);
        assert!(!c.cached, "{what}: the damaged entry was used");
        assert_eq!(cubin(&c), cubin(&good), "{what}");
        assert_eq!(
            fs::read(&path).unwrap(),
            whole,
            "{what}: entry not rewritten"
        );
        let back = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect(what);
        assert!(back.cached, "{what}: the rewritten entry is not used");
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_cache_still_compiles() {
    if !nvrtc_or_fail() {
        return;
    }
    let dir = temp_dir("kernel-cache-unwritable");
    // a directory below a plain file cannot be made, not even by root
    let blocker = dir.join("file");
    fs::write(&blocker, b"not a directory").unwrap();
    let cache = KernelCache::new(blocker.join("kernels"));
    for _ in 0..2 {
        let c = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect("compiles anyway");
        assert!(!c.cached);
        assert!(cubin(&c).starts_with(b"\x7fELF"));
    }
    assert_eq!(
        files_in(&dir),
        ["file"],
        "nothing written beside the blocker"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_refused_image_is_replaced_by_a_fresh_compile() {
    if !nvrtc_or_fail() {
        return;
    }
    let dir = temp_dir("kernel-cache-fresh");
    let cache = KernelCache::new(&dir);
    let good = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect("compiles");
    let path = entry(&cache, "scale");
    let stored = fs::read(&path).unwrap();
    // a whole entry holding the wrong image stands for one the driver refuses
    let other = SRC.replace("*= a", "+= a");
    compile_cached("scale", &other, HOPPER, Some(&cache)).expect("compiles");
    let other_path = cache.path(&CacheKey::new("scale", &other, "sm_90").unwrap());
    fs::copy(&other_path, &path).unwrap();
    let wrong = compile_cached("scale", SRC, HOPPER, Some(&cache)).expect("reads");
    assert!(wrong.cached && cubin(&wrong) != cubin(&good), "setup");
    let fresh = compile_fresh("scale", SRC, HOPPER, Some(&cache)).expect("compiles");
    assert!(!fresh.cached, "compile_fresh never reads the cache");
    assert_eq!(cubin(&fresh), cubin(&good));
    assert_eq!(fs::read(&path).unwrap(), stored, "entry not rewritten");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_cache_means_compiling() {
    if !nvrtc_or_fail() {
        return;
    }
    let c = compile_cached("scale", SRC, HOPPER, None).expect("compiles");
    assert!(!c.cached);
    assert!(cubin(&c).starts_with(b"\x7fELF"));
}

#[test]
fn every_shipped_module_compiles_in_parallel_then_comes_from_the_cache() {
    if !nvrtc_or_fail() {
        return;
    }
    let dir = temp_dir("kernel-cache-all");
    let cache = KernelCache::new(&dir);
    let t = std::time::Instant::now();
    let cold = compile_all(HOPPER, Some(&cache)).expect("every module compiles");
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = std::time::Instant::now();
    let warm = compile_all(HOPPER, Some(&cache)).expect("every module reads back");
    let warm_ms = t.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "{} modules: compiled in parallel in {cold_ms:.0} ms, read back in {warm_ms:.1} ms",
        cold.len()
    );
    assert_eq!(cold.len(), KERNEL_SOURCES.len());
    for ((name, _), (c, w)) in KERNEL_SOURCES.iter().zip(cold.iter().zip(&warm)) {
        assert_eq!(
            (&c.name, &w.name),
            (&name.to_string(), &name.to_string()),
            "out of order"
        );
        assert!(
            !c.cached && w.cached,
            "{name}: cached {} then {}",
            c.cached,
            w.cached
        );
        assert_eq!(cubin(c), cubin(w), "{name}");
    }
    assert_eq!(files_in(&dir).len(), KERNEL_SOURCES.len());
    fs::remove_dir_all(&dir).unwrap();
}

/// On a GPU: an entry the driver refuses (a CUBIN for another architecture
/// under this device's key, its checksum intact, as after a driver or
/// hardware change the key did not see) is compiled again, loads, and
/// replaces the entry.
#[test]
#[ignore]
fn a_cached_image_the_driver_refuses_is_compiled_again() {
    let gpu = match pulsed::gpu::GpuContext::new(0) {
        Ok(g) => g,
        Err(e) if std::env::var_os("PULSED_REQUIRE_GPU").is_some() => panic!("no GPU: {e}"),
        Err(e) => return eprintln!("skipped: no GPU ({e})"),
    };
    let cc = gpu.compute_capability().expect("compute capability");
    let other = if cc.0 >= 9 { (8, 0) } else { (9, 0) };
    let dir = temp_dir("kernel-cache-refused");
    let cache = KernelCache::new(dir.join("kernels"));
    let key = CacheKey::new("scale", SRC, &pulsed::gpu::compile::device_arch(cc)).expect("key");
    let wrong = pulsed::gpu::compile_for_device("scale", SRC, other).expect("compiles");
    cache.put(&key, cubin(&wrong)).expect("written");
    let c = compile_cached("scale", SRC, cc, Some(&cache)).expect("read back");
    assert!(c.cached, "the planted entry was not read");
    assert_eq!(cubin(&c), cubin(&wrong));
    let (module, loaded) = gpu
        .load_compiled("scale", SRC, c, Some(&cache))
        .expect("compiled again after the driver refused the cached image");
    assert!(!loaded.cached, "the refused image was kept");
    assert_ne!(cubin(&loaded), cubin(&wrong));
    assert_eq!(
        cache.get(&key).as_deref(),
        Some(cubin(&loaded)),
        "entry not replaced"
    );
    module
        .load_function("scale")
        .expect("the kernel in the fresh module");
    let again = compile_cached("scale", SRC, cc, Some(&cache)).expect("read back");
    assert!(again.cached);
    gpu.load_compiled("scale", SRC, again, Some(&cache))
        .expect("the replaced entry loads");
    let _ = fs::remove_dir_all(dir);
}
