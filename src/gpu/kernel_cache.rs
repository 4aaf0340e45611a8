//! CUBINs kept on disk between processes, so that a start reads the kernels
//! (milliseconds) instead of compiling them with NVRTC (seconds).
//!
//! An entry is named by a hash of everything that changes the image (the
//! full source, the architecture, NVRTC's version and options, the crate's
//! version), so a changed kernel or compiler never meets a stale image. Each
//! entry carries its length and SHA-256, checked on every read: a truncated
//! or damaged file is compiled again and overwritten. The cache never makes
//! loading fail; at worst every start compiles, as it would without it.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use super::compile::{
    compile_for_device, device_arch, full_source, nvrtc_options, nvrtc_version, Compiled, Image,
};
use super::GpuError;

/// Environment variable: the cache's directory, or `0`, `off` or nothing
/// for no cache.
pub const CACHE_ENV: &str = "PULSED_KERNEL_CACHE";

/// The start of every entry; its last byte is the entry format's version.
const MAGIC: &[u8; 8] = b"PULSEDK1";
/// Magic, image length (u64 LE), SHA-256 of the image.
const HEADER_LEN: usize = MAGIC.len() + 8 + 32;
const ELF_MAGIC: &[u8] = b"\x7fELF";
/// How long an entry of an older kernel version may go unused before a new
/// version's write removes it.
pub const STALE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The cache directory given the values of [`CACHE_ENV`], `XDG_CACHE_HOME`
/// and `HOME`, or `None` for no cache.
///
/// ```
/// use pulsed::gpu::kernel_cache::resolve_dir;
/// use std::{ffi::OsStr, path::PathBuf};
/// let home = Some(OsStr::new("/home/a"));
/// assert_eq!(resolve_dir(None, None, home), Some(PathBuf::from("/home/a/.cache/pulsed/kernels")));
/// assert_eq!(resolve_dir(Some(OsStr::new("off")), None, home), None);
/// ```
pub fn resolve_dir(
    setting: Option<&OsStr>,
    xdg_cache_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> Option<PathBuf> {
    if let Some(s) = setting {
        let off = s.is_empty() || s == "0" || s.eq_ignore_ascii_case("off");
        return (!off).then(|| PathBuf::from(s));
    }
    // the XDG base directory spec says to ignore a relative path
    if let Some(xdg) = xdg_cache_home.map(Path::new).filter(|p| p.is_absolute()) {
        return Some(xdg.join("pulsed").join("kernels"));
    }
    let home = home.filter(|h| !h.is_empty())?;
    Some(
        Path::new(home)
            .join(".cache")
            .join("pulsed")
            .join("kernels"),
    )
}

/// What names one cached image: the module and architecture (for people
/// reading the directory) and the hash of everything that changes the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    file_name: String,
}

impl CacheKey {
    /// The key of module `name` (source `src`) compiled for `arch` by the
    /// NVRTC on the library path and this build of the crate.
    pub fn new(name: &str, src: &str, arch: &str) -> Result<CacheKey, GpuError> {
        Ok(CacheKey::from_parts(
            name,
            &full_source(name, src),
            arch,
            nvrtc_version()?,
            &nvrtc_options(arch),
            env!("CARGO_PKG_VERSION"),
        ))
    }

    fn from_parts(
        name: &str,
        full_source: &str,
        arch: &str,
        nvrtc: (i32, i32),
        options: &[String],
        crate_version: &str,
    ) -> CacheKey {
        // SHA-256 rather than std's hasher, whose output may change between
        // Rust releases and would then silently empty everyone's cache
        let mut h = Sha256::new();
        let nvrtc = format!("{}.{}", nvrtc.0, nvrtc.1);
        let options = options.join("\0");
        for part in [full_source, arch, &nvrtc, &options, crate_version] {
            // length-prefixed, so that no two lists of parts hash alike
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let hex: String = h.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        CacheKey {
            file_name: format!("{}-{}-{hex}.cubin", file_safe(name), file_safe(arch)),
        }
    }

    /// The entry's file name: `<module>-<arch>-<hash>.cubin`.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }
}

/// `s` with anything but ASCII letters, digits and `_` replaced, so that a
/// caller's module name cannot leave the cache directory.
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One cache directory (made on the first write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCache {
    dir: PathBuf,
}

impl KernelCache {
    /// The cache in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> KernelCache {
        KernelCache { dir: dir.into() }
    }

    /// The cache the environment names ([`CACHE_ENV`], else
    /// `$XDG_CACHE_HOME/pulsed/kernels`, else `$HOME/.cache/pulsed/kernels`),
    /// or `None` when it is turned off or no directory can be named.
    pub fn from_env() -> Option<KernelCache> {
        let var = std::env::var_os;
        resolve_dir(
            var(CACHE_ENV).as_deref(),
            var("XDG_CACHE_HOME").as_deref(),
            var("HOME").as_deref(),
        )
        .map(KernelCache::new)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `key`'s entry.
    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The CUBIN stored under `key`, or `None` when there is none or the
    /// entry is unreadable, cut short or damaged. A hit marks the entry as
    /// used now, so that pruning keeps it.
    pub fn get(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let path = self.path(key);
        let cubin = decode(fs::read(&path).ok()?)?;
        // best effort: a read-only cache still serves its entries
        if let Ok(f) = fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Some(cubin)
    }

    /// Removes the entries of `key`'s module and architecture made for
    /// other sources or versions, and temporary files left by a crash, when
    /// unused for [`STALE`]: each new version of a kernel leaves a new
    /// entry, and without this the directory would only grow. Entries in use
    /// (by another installed version, say) are read, so stay fresh.
    fn prune(&self, key: &CacheKey, now: SystemTime) {
        let Some((stem, _)) = key.file_name().rsplit_once('-') else {
            return;
        };
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let sibling = name.starts_with(&format!("{stem}-")) && name.ends_with(".cubin");
            let orphan = name.starts_with(&format!(".{stem}-")) && name.ends_with(".tmp");
            if name == key.file_name() || !(sibling || orphan) {
                continue;
            }
            let unused = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > STALE);
            if unused {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// Stores `cubin` under `key`, replacing any entry there. Readers see
    /// the old entry or the new one, never a part: it is written under a
    /// temporary name in the same directory and renamed.
    pub fn put(&self, key: &CacheKey, cubin: &[u8]) -> io::Result<()> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        fs::create_dir_all(&self.dir)?;
        // unique to this process and call, so concurrent writers never share one
        let tmp = self.dir.join(format!(
            ".{}.{}-{}.tmp",
            key.file_name(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // no fsync: a file cut short by a crash fails its checksum and is
        // compiled again
        let written =
            write_new(&tmp, &encode(cubin)).and_then(|()| fs::rename(&tmp, self.path(key)));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        } else {
            self.prune(key, SystemTime::now());
        }
        written
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)
}

fn encode(cubin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + cubin.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(cubin));
    out.extend_from_slice(cubin);
    out
}

/// The image in an entry, if the entry is whole.
fn decode(mut entry: Vec<u8>) -> Option<Vec<u8>> {
    let (header, image) = entry.split_at_checked(HEADER_LEN)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    let (len, sum) = rest.split_at(8);
    let whole = magic == MAGIC
        && u64::from_le_bytes(len.try_into().ok()?) == image.len() as u64
        && Sha256::digest(image).as_slice() == sum
        && image.starts_with(ELF_MAGIC);
    if !whole {
        return None;
    }
    entry.drain(..HEADER_LEN);
    Some(entry)
}

/// Says once per process that the cache cannot be written, so that a
/// read-only home costs one line rather than one per module.
fn warn_unwritable(dir: &Path, e: &io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "pulsed: kernel cache {} not writable ({e}); {CACHE_ENV}=off turns it off",
            dir.display()
        );
    }
}

/// Module `name` for a device of compute capability `cc`, as
/// [`compile_for_device`] makes it, read from `cache` when a whole entry is
/// there (`cached` is then true) and stored there when NVRTC makes a CUBIN.
/// Any trouble with the cache falls back to compiling.
///
/// ```no_run
/// use pulsed::gpu::compile::kernel_source;
/// use pulsed::gpu::kernel_cache::{compile_cached, KernelCache};
/// let cache = KernelCache::new("/tmp/pulsed-kernels");
/// let src = kernel_source("copy").unwrap();
/// let c = compile_cached("copy", src, (9, 0), Some(&cache))?;
/// println!("{} from the cache: {}", c.name, c.cached);
/// # Ok::<(), pulsed::gpu::GpuError>(())
/// ```
pub fn compile_cached(
    name: &str,
    src: &str,
    cc: (i32, i32),
    cache: Option<&KernelCache>,
) -> Result<Compiled, GpuError> {
    compile_through(name, src, cc, cache, true)
}

/// Like [`compile_cached`] but never reading the cache: for an image the
/// driver refused, which the fresh one replaces.
pub fn compile_fresh(
    name: &str,
    src: &str,
    cc: (i32, i32),
    cache: Option<&KernelCache>,
) -> Result<Compiled, GpuError> {
    compile_through(name, src, cc, cache, false)
}

fn compile_through(
    name: &str,
    src: &str,
    cc: (i32, i32),
    cache: Option<&KernelCache>,
    read: bool,
) -> Result<Compiled, GpuError> {
    let arch = device_arch(cc);
    // without a key (NVRTC's version unknown) the cache is skipped
    let entry = cache.and_then(|c| Some((c, CacheKey::new(name, src, &arch).ok()?)));
    if let (true, Some((cache, key))) = (read, &entry) {
        let start = Instant::now();
        if let Some(cubin) = cache.get(key) {
            return Ok(Compiled {
                name: name.to_string(),
                arch,
                image: Image::Cubin(cubin),
                millis: start.elapsed().as_secs_f64() * 1e3,
                cached: true,
            });
        }
    }
    let compiled = compile_for_device(name, src, cc)?;
    if let (Some((cache, key)), Image::Cubin(cubin)) = (&entry, &compiled.image) {
        if let Err(e) = cache.put(key, cubin) {
            warn_unwritable(cache.dir(), &e);
        }
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str, arch: &str, nvrtc: (i32, i32), version: &str) -> CacheKey {
        CacheKey::from_parts("linear", src, arch, nvrtc, &nvrtc_options(arch), version)
    }

    #[test]
    fn the_key_is_stable_for_the_same_input() {
        let a = key("kernel", "sm_90", (13, 0), "0.1.0");
        assert_eq!(a, key("kernel", "sm_90", (13, 0), "0.1.0"));
        let name = a.file_name();
        assert!(name.starts_with("linear-sm_90-"), "{name}");
        assert!(name.ends_with(".cubin"), "{name}");
        assert_eq!(name.len(), "linear-sm_90-".len() + 32 + ".cubin".len());
    }

    #[test]
    fn the_key_changes_with_source_arch_and_versions() {
        let base = key("kernel", "sm_90", (13, 0), "0.1.0");
        for other in [
            key("kernel ", "sm_90", (13, 0), "0.1.0"),
            key("kernel", "sm_89", (13, 0), "0.1.0"),
            key("kernel", "sm_90", (13, 1), "0.1.0"),
            key("kernel", "sm_90", (13, 0), "0.1.1"),
        ] {
            assert_ne!(base, other);
        }
        let fewer = ["--gpu-architecture=sm_90".to_string()];
        let opts = CacheKey::from_parts("linear", "kernel", "sm_90", (13, 0), &fewer, "0.1.0");
        assert_ne!(base, opts);
    }

    #[test]
    fn parts_do_not_run_together() {
        let hash = |k: &CacheKey| k.file_name().rsplit('-').next().map(str::to_string);
        let a = CacheKey::from_parts("m", "ab", "c", (13, 0), &[], "v");
        let b = CacheKey::from_parts("m", "a", "bc", (13, 0), &[], "v");
        assert_ne!(hash(&a), hash(&b));
    }

    #[test]
    fn a_module_name_cannot_leave_the_directory() {
        let k = CacheKey::from_parts("../../etc/x", "s", "sm_90", (13, 0), &[], "v");
        assert!(
            k.file_name().starts_with("______etc_x-sm_90-"),
            "{}",
            k.file_name()
        );
        assert!(!k.file_name().contains('/'));
    }

    #[test]
    fn the_directory_comes_from_the_setting_then_xdg_then_home() {
        let s = |v: &'static str| Some(OsStr::new(v));
        let p = |v: &str| Some(PathBuf::from(v));
        assert_eq!(resolve_dir(s("/c/k"), s("/x"), s("/h")), p("/c/k"));
        assert_eq!(resolve_dir(None, s("/x"), s("/h")), p("/x/pulsed/kernels"));
        assert_eq!(
            resolve_dir(None, None, s("/h")),
            p("/h/.cache/pulsed/kernels")
        );
        // a relative or empty XDG_CACHE_HOME is ignored
        assert_eq!(
            resolve_dir(None, s("rel"), s("/h")),
            p("/h/.cache/pulsed/kernels")
        );
        assert_eq!(
            resolve_dir(None, s(""), s("/h")),
            p("/h/.cache/pulsed/kernels")
        );
        assert_eq!(resolve_dir(None, None, None), None);
        assert_eq!(resolve_dir(None, None, s("")), None);
    }

    #[test]
    fn the_setting_turns_the_cache_off() {
        for off in ["0", "off", "OFF", ""] {
            let home = Some(OsStr::new("/h"));
            assert_eq!(
                resolve_dir(Some(OsStr::new(off)), None, home),
                None,
                "{off:?}"
            );
        }
    }

    #[test]
    fn an_entry_reads_back_only_when_whole() {
        let cubin = b"\x7fELF and the rest of an image".to_vec();
        let entry = encode(&cubin);
        assert_eq!(decode(entry.clone()), Some(cubin.clone()));
        assert_eq!(decode(entry[..entry.len() - 1].to_vec()), None, "truncated");
        assert_eq!(decode(entry[..HEADER_LEN - 1].to_vec()), None, "header cut");
        let mut flipped = entry.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(decode(flipped), None, "damaged");
        let mut longer = entry.clone();
        longer.push(0);
        assert_eq!(decode(longer), None, "trailing bytes");
        assert_eq!(decode(encode(b"not an ELF file")), None, "not a CUBIN");
        assert_eq!(decode(Vec::new()), None, "empty");
    }

    #[test]
    fn put_then_get_in_a_fresh_directory() {
        let tmp = std::env::temp_dir().join(format!("pulsed-unit-cache-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let cache = KernelCache::new(tmp.join("a").join("b"));
        let k = key("kernel", "sm_90", (13, 0), "0.1.0");
        assert_eq!(cache.get(&k), None);
        let cubin = b"\x7fELF image".to_vec();
        cache.put(&k, &cubin).expect("writable");
        assert_eq!(cache.get(&k), Some(cubin));
        let names: Vec<_> = fs::read_dir(cache.dir())
            .expect("made")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, [k.file_name()], "no temporary file left behind");
        fs::remove_dir_all(&tmp).expect("cleaned up");
    }

    #[test]
    fn a_new_version_prunes_old_unused_ones_of_its_module() {
        let tmp = std::env::temp_dir().join(format!("pulsed-unit-prune-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let cache = KernelCache::new(&tmp);
        let old = SystemTime::now() - STALE - Duration::from_secs(3600);
        let aged = |name: &str, when: SystemTime| {
            let path = tmp.join(name);
            fs::write(&path, b"x").expect("written");
            let f = fs::File::options()
                .append(true)
                .open(&path)
                .expect("opened");
            f.set_modified(when).expect("mtime set");
        };
        fs::create_dir_all(&tmp).expect("made");
        // versions of module "linear" (see `key`), another module, another arch
        let v1 = key("src", "sm_90", (13, 0), "0.1.0");
        let v2 = key("src", "sm_90", (13, 0), "0.2.0");
        let recent = key("src", "sm_90", (13, 1), "0.1.0");
        let other = CacheKey::from_parts("norm", "src", "sm_90", (13, 0), &[], "0.1.0");
        let other_arch = key("src", "sm_80", (13, 0), "0.1.0");
        aged(v1.file_name(), old);
        aged(recent.file_name(), SystemTime::now());
        aged(other.file_name(), old);
        aged(other_arch.file_name(), old);
        let orphan = format!(".{}.123-0.tmp", v1.file_name());
        aged(&orphan, old);
        cache.put(&v2, b"\x7fELF v2").expect("writable");
        let mut left: Vec<String> = fs::read_dir(&tmp)
            .expect("listed")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        left.sort();
        let mut want = vec![
            v2.file_name().to_string(),
            recent.file_name().to_string(),
            other.file_name().to_string(),
            other_arch.file_name().to_string(),
        ];
        want.sort();
        assert_eq!(
            left, want,
            "the old version and the crash's temporary file go"
        );
        // reading an entry marks it used: it survives the next pruning
        aged(recent.file_name(), old);
        fs::write(cache.path(&recent), encode(b"\x7fELF recent")).expect("written");
        let f = fs::File::options()
            .append(true)
            .open(cache.path(&recent))
            .expect("opened");
        f.set_modified(old).expect("mtime set");
        assert!(cache.get(&recent).is_some());
        cache.put(&v1, b"\x7fELF v1").expect("writable");
        assert!(cache.path(&recent).exists(), "a used entry is kept");
        assert!(cache.path(&v2).exists(), "a fresh entry is kept");
        fs::remove_dir_all(&tmp).expect("cleaned up");
    }
}
