//! `--resume`: which files a JSON-lines output already covers, and reopening
//! it for appending without keeping a half-written last line.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

/// What an existing JSON-lines output holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Done {
    /// The `file` of every complete line (a transcript or an error line).
    pub files: HashSet<String>,
    /// Bytes up to the end of the last complete line; anything after it is a
    /// line cut short (a killed run) and is dropped before appending.
    pub complete_len: u64,
}

/// Reads the complete lines of `path`; a missing file holds nothing.
///
/// A line counts when it ends with a newline and is a JSON object with a
/// string `file` and a `text` or `error`: exactly what a finished file writes.
pub fn read_done(path: &Path) -> io::Result<Done> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Done::default()),
        Err(e) => return Err(e),
    };
    let mut r = BufReader::new(file);
    let mut done = Done::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        done.complete_len += n as u64;
        if let Some(f) = finished_file(&line) {
            done.files.insert(f);
        }
    }
    Ok(done)
}

fn finished_file(line: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let file = v.get("file")?.as_str()?;
    (v.get("text").is_some_and(|t| t.is_string()) || v.get("error").is_some_and(|e| e.is_string()))
        .then(|| file.to_string())
}

/// Opens `path` for appending after its last complete line (created if
/// missing) and returns what it already covers.
pub fn open_for_resume(path: &Path) -> io::Result<(File, Done)> {
    let done = read_done(path)?;
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)?;
    f.set_len(done.complete_len)?;
    f.seek(SeekFrom::End(0))?;
    Ok((f, done))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn complete_lines_count_and_a_cut_line_is_dropped() {
        let p = std::env::temp_dir().join(format!("pulsed-resume-{}.jsonl", std::process::id()));
        let body = concat!(
            "{\"file\":\"a.wav\",\"text\":\"hi\"}\n",
            "{\"file\":\"b.wav\",\"error\":\"b.wav: truncated\"}\n",
            "not json\n",
            "{\"file\":\"c.wav\",\"te"
        );
        std::fs::write(&p, body).unwrap();
        let (mut f, done) = open_for_resume(&p).unwrap();
        assert_eq!(
            done.files,
            HashSet::from(["a.wav".to_string(), "b.wav".to_string()])
        );
        f.write_all(b"{\"file\":\"c.wav\",\"text\":\"x\"}\n")
            .unwrap();
        drop(f);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.ends_with("not json\n{\"file\":\"c.wav\",\"text\":\"x\"}\n"),
            "{text}"
        );
        assert_eq!(read_done(&p).unwrap().files.len(), 3);
        std::fs::remove_file(&p).unwrap();
        assert_eq!(read_done(&p).unwrap(), Done::default());
    }
}
