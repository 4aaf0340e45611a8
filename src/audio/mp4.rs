//! A check of an MP4 (M4A) file's sample tables before symphonia reads
//! them: symphonia 0.5 reserves memory for a table's declared entry count
//! before reading its entries, so a damaged count (4 billion in a 32-byte
//! `stts`, found by the `audio` fuzz target) asks for tens of gigabytes and
//! aborts the process, which no error or `catch_unwind` can stop.

use std::io::{Read, Seek, SeekFrom};

/// Boxes that hold other boxes on the way to the sample tables.
const CONTAINERS: [&[u8; 4]; 9] = [
    b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"mvex", b"moof", b"traf",
];

/// Deepest nesting followed (the sample tables sit at depth 5).
const MAX_DEPTH: usize = 8;

/// Longest ALAC frame taken, in samples: encoders write 4096, and
/// symphonia sizes its buffers from the declared length (2^31 in a fuzzed
/// file asked for 2 GB).
const MAX_ALAC_FRAME: u64 = 1 << 16;

/// Most bytes of an `stsd` box read to find its ALAC configuration.
const MAX_STSD: u64 = 1 << 12;

/// Where the boxes of an MP4 file start in `head` (its first bytes): at
/// the first `ftyp` box. symphonia's probe looks for it past leading
/// junk too.
pub(crate) fn mp4_start(head: &[u8]) -> Option<u64> {
    head.windows(4)
        .position(|w| w == b"ftyp")
        .filter(|&i| i >= 4)
        .map(|i| (i - 4) as u64)
}

/// Walks the boxes of `r` (`len` bytes) from `start` and returns what is
/// wrong with the first sample table whose entries cannot fit in its box;
/// `Ok(None)` where every table fits (or the box structure ends early:
/// symphonia then says what is wrong). A box that declares more bytes
/// than its parent holds is walked as far as the parent goes: symphonia
/// reads its children all the same (a `minf` of 7 MB in a 333-byte
/// `mdia`, its `stsc` asking for 68 GB, found by the fuzz target). Leaves
/// `r` anywhere.
pub(crate) fn oversized_table<R: Read + Seek>(
    r: &mut R,
    start: u64,
    len: u64,
) -> std::io::Result<Option<String>> {
    walk(r, start, len, 0)
}

fn walk<R: Read + Seek>(
    r: &mut R,
    start: u64,
    end: u64,
    depth: usize,
) -> std::io::Result<Option<String>> {
    let mut pos = start;
    while pos + 8 <= end {
        r.seek(SeekFrom::Start(pos))?;
        let mut head = [0u8; 8];
        if r.read_exact(&mut head).is_err() {
            return Ok(None);
        }
        let kind: [u8; 4] = [head[4], head[5], head[6], head[7]];
        let (size, header) = match u32::from_be_bytes([head[0], head[1], head[2], head[3]]) {
            0 => (end - pos, 8),
            1 => {
                let mut large = [0u8; 8];
                if r.read_exact(&mut large).is_err() {
                    return Ok(None);
                }
                (u64::from_be_bytes(large), 16)
            }
            s => (u64::from(s), 8),
        };
        // what of the box is there: no more than its parent holds
        let held = size.min(end - pos);
        if held < header {
            return Ok(None);
        }
        if CONTAINERS.contains(&&kind) && depth < MAX_DEPTH {
            if let Some(e) = walk(r, pos + header, pos + held, depth + 1)? {
                return Ok(Some(e));
            }
        } else if &kind == b"stsd" {
            let mut body = vec![0u8; (held - header).min(MAX_STSD) as usize];
            if r.read_exact(&mut body).is_ok() {
                if let Some(n) = alac_frame(&body).filter(|&n| n > MAX_ALAC_FRAME) {
                    return Ok(Some(format!(
                        "its ALAC configuration declares frames of {n} samples (at most {MAX_ALAC_FRAME})"
                    )));
                }
            }
        } else if let Some(entry) = entry_bytes(&kind) {
            // version and flags, then the count (stsz: a sample size first,
            // entries only where it is 0)
            let mut fields = [0u8; 12];
            let want = if &kind == b"stsz" { 12 } else { 8 };
            if held - header >= want as u64 && r.read_exact(&mut fields[..want]).is_ok() {
                let word = |i: usize| {
                    u64::from(u32::from_be_bytes([
                        fields[i],
                        fields[i + 1],
                        fields[i + 2],
                        fields[i + 3],
                    ]))
                };
                let (count, entry) = if &kind == b"stsz" {
                    (if word(4) == 0 { word(8) } else { 0 }, entry)
                } else {
                    (word(4), entry)
                };
                let room = held - header - want as u64;
                if count.saturating_mul(entry) > room {
                    let name = String::from_utf8_lossy(&kind).into_owned();
                    return Ok(Some(format!(
                        "its `{name}` table declares {count} entries in a box of {size} bytes"
                    )));
                }
            }
        }
        if size > held {
            break; // it ran to its parent's end: no box follows it there
        }
        pos += size;
    }
    Ok(None)
}

/// The frame length an `stsd` body's first sample entry declares, where
/// that entry is ALAC: after the entry's 36 bytes (its box header and 28
/// bytes of audio fields), its `alac` box holds version and flags, then
/// the length.
fn alac_frame(stsd: &[u8]) -> Option<u64> {
    let at = |i: usize| -> Option<u32> {
        Some(u32::from_be_bytes(stsd.get(i..i + 4)?.try_into().ok()?))
    };
    // version and flags, entry count, then the entry's size and kind
    if stsd.get(12..16)? != b"alac" {
        return None;
    }
    let cookie = 8 + 36;
    if stsd.get(cookie + 4..cookie + 8)? != b"alac" {
        return None;
    }
    at(cookie + 12).map(u64::from)
}

/// Bytes per entry of the sample tables symphonia sizes from their counts.
fn entry_bytes(kind: &[u8; 4]) -> Option<u64> {
    match kind {
        b"stts" | b"ctts" | b"co64" => Some(8),
        b"stsc" => Some(12),
        b"stco" | b"stss" | b"stsz" => Some(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn bx(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(body);
        b
    }

    /// An MP4 whose one `stts` declares `count` entries and holds `held`.
    fn file(count: u32, held: usize) -> Vec<u8> {
        let mut stts = vec![0u8; 4];
        stts.extend_from_slice(&count.to_be_bytes());
        stts.extend(std::iter::repeat_n(1u8, held * 8));
        let stbl = bx(b"stbl", &bx(b"stts", &stts));
        let moov = bx(b"moov", &bx(b"trak", &bx(b"mdia", &bx(b"minf", &stbl))));
        let mut f = bx(b"ftyp", b"M4A \0\0\0\0");
        f.extend(moov);
        f.extend(bx(b"mdat", &[7; 16]));
        f
    }

    fn check(f: &[u8]) -> Option<String> {
        let start = mp4_start(f).expect("an ftyp box");
        oversized_table(&mut Cursor::new(f), start, f.len() as u64).unwrap()
    }

    #[test]
    fn a_table_whose_count_exceeds_its_box_is_found() {
        let ok = file(3, 3);
        assert_eq!(mp4_start(&ok), Some(0));
        assert_eq!(check(&ok), None);
        let bad = file(4_293_216_580, 1);
        let e = check(&bad).expect("an oversized stts");
        assert!(e.contains("stts") && e.contains("4293216580"), "{e}");
    }

    #[test]
    fn a_table_inside_a_box_that_overruns_its_parent_is_checked() {
        // `minf` declares a megabyte inside a `mdia` of a few dozen bytes;
        // its `stsc` declares a billion entries and holds one
        let mut stsc = vec![0u8; 4];
        stsc.extend_from_slice(&1_000_000_000u32.to_be_bytes());
        stsc.extend([1u8; 12]);
        let mut minf = bx(b"minf", &bx(b"stbl", &bx(b"stsc", &stsc)));
        minf[..4].copy_from_slice(&1_000_000u32.to_be_bytes());
        let moov = bx(b"moov", &bx(b"trak", &bx(b"mdia", &minf)));
        let mut f = bx(b"ftyp", b"M4A \0\0\0\0");
        f.extend(moov);
        let e = check(&f).expect("an oversized stsc");
        assert!(e.contains("stsc") && e.contains("1000000000"), "{e}");
    }

    #[test]
    fn an_alac_frame_too_long_for_any_encoder_is_found() {
        // stsd: one ALAC entry (36 bytes of audio fields), its `alac` box
        // with the frame length (found by the fuzz target: 2^31)
        let stsd = |frame: u32| {
            let mut cookie = vec![0u8; 4];
            cookie.extend(frame.to_be_bytes());
            cookie.extend([0u8; 16]);
            let mut entry = vec![0u8; 28];
            entry.extend(bx(b"alac", &cookie));
            let mut body = vec![0, 0, 0, 0, 0, 0, 0, 1];
            body.extend(bx(b"alac", &entry));
            bx(b"stsd", &body)
        };
        let mp4 = |frame: u32| {
            let moov = bx(
                b"moov",
                &bx(
                    b"trak",
                    &bx(b"mdia", &bx(b"minf", &bx(b"stbl", &stsd(frame)))),
                ),
            );
            let mut f = bx(b"ftyp", b"M4A \0\0\0\0");
            f.extend(moov);
            f
        };
        assert_eq!(check(&mp4(4096)), None);
        let e = check(&mp4(0x7883_c475)).expect("an oversized ALAC frame");
        assert!(e.contains("ALAC") && e.contains("2021901429"), "{e}");
    }

    #[test]
    fn a_box_as_large_as_a_u64_ends_the_walk() {
        // a 64-bit size of 2^64 - 1 after `ftyp` (found by the fuzz target:
        // the walk's next position overflowed)
        let mut f = bx(b"ftyp", b"M4A \0\0\0\0");
        f.extend(1u32.to_be_bytes());
        f.extend(b"free");
        f.extend(u64::MAX.to_be_bytes());
        f.extend([0xff; 32]);
        assert_eq!(check(&f), None);
    }

    #[test]
    fn a_box_structure_that_ends_early_is_left_to_the_decoder() {
        let mut f = file(3, 3);
        f.truncate(30);
        assert_eq!(check(&f), None);
        assert_eq!(mp4_start(b"RIFF....WAVE"), None);
    }
}
