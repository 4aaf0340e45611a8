//! Whether a fetched folder is whole: `SHA256SUMS` (the `sha256sum` format)
//! is written once its files are, and checked before they are trusted; a
//! file is written under a temporary name and renamed, so that a folder cut
//! off mid-write never looks whole.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// The list of checksums in a fetched folder.
pub const SUMS: &str = "SHA256SUMS";

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file, in hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Writes `bytes` to `path` through `path.part`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = part_path(path);
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// `path` with `.part` appended to its file name.
pub fn part_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    path.with_file_name(name)
}

/// Records the checksums of `files` in `dir/SHA256SUMS`.
pub fn seal(dir: &Path, files: &[&str]) -> io::Result<()> {
    let mut out = String::new();
    for f in files {
        out.push_str(&format!("{}  {f}\n", sha256_file(&dir.join(f))?));
    }
    write_atomic(&dir.join(SUMS), out.as_bytes())
}

/// What is wrong with a fetched folder, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// No folder, or no `SHA256SUMS` (never finished).
    Missing,
    /// A file the folder needs is not there.
    NoFile(String),
    /// A file differs from its recorded checksum.
    Changed(String),
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Missing => write!(f, "not fetched, or never finished"),
            Damage::NoFile(name) => write!(f, "{name} is missing"),
            Damage::Changed(name) => write!(f, "{name} differs from its recorded checksum"),
        }
    }
}

/// Checks `files` against `dir/SHA256SUMS`. `full`: every byte hashed;
/// otherwise only that each file is there and listed (cheap enough for
/// every start).
pub fn check(dir: &Path, files: &[&str], full: bool) -> Result<(), Damage> {
    let Ok(sums) = std::fs::read_to_string(dir.join(SUMS)) else {
        return Err(Damage::Missing);
    };
    for f in files {
        let listed = sums
            .lines()
            .find_map(|l| l.split_once("  ").filter(|(_, name)| name == f));
        let Some((want, _)) = listed else {
            return Err(Damage::Missing);
        };
        let path = dir.join(f);
        if !path.is_file() {
            return Err(Damage::NoFile(f.to_string()));
        }
        if full && sha256_file(&path).ok().as_deref() != Some(want) {
            return Err(Damage::Changed(f.to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_or_missing_file_is_found() {
        let dir = std::env::temp_dir().join(format!("pulsed-seal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_atomic(&dir.join("a"), b"hello").unwrap();
        write_atomic(&dir.join("b"), b"world").unwrap();
        assert_eq!(check(&dir, &["a", "b"], true), Err(Damage::Missing));
        seal(&dir, &["a", "b"]).unwrap();
        assert_eq!(check(&dir, &["a", "b"], true), Ok(()));
        // sha256sum's own format
        let sums = std::fs::read_to_string(dir.join(SUMS)).unwrap();
        assert!(sums
            .starts_with("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824  a\n"));
        std::fs::write(dir.join("b"), b"worle").unwrap();
        assert_eq!(check(&dir, &["a", "b"], false), Ok(()));
        assert_eq!(
            check(&dir, &["a", "b"], true),
            Err(Damage::Changed("b".into()))
        );
        std::fs::remove_file(dir.join("a")).unwrap();
        assert_eq!(
            check(&dir, &["a", "b"], false),
            Err(Damage::NoFile("a".into()))
        );
        assert_eq!(check(&dir, &["c"], false), Err(Damage::Missing));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
