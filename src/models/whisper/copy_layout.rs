//! Right-context copies (Emformer's right context) over a window of known
//! length: the frames `[0, t)` first, then for each chunk the copies of the
//! `right` frames after it (those inside the window). Every row, frame or
//! copy, sees the frames of its chunk and the `left` frames before it, and
//! the copies its own chunk carries; no row sees another chunk's copies.
//! So every layer of a chunk looks `right` frames ahead, and a chunk's
//! output depends on no input past its end plus `right`.

use super::EncoderContext;

/// The rows of a window of `t` frames under context `c` (its `right_copies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLayout {
    pub chunk: usize,
    pub left: usize,
    pub right: usize,
    pub t: usize,
}

impl CopyLayout {
    pub fn new(c: &EncoderContext, t: usize) -> CopyLayout {
        CopyLayout {
            chunk: c.chunk.max(1),
            left: c.left,
            right: c.right,
            t,
        }
    }

    /// Each row's source frame and the chunk it belongs to (a copy belongs
    /// to the chunk before the frame it copies): the `t` frames, then the
    /// copies chunk by chunk.
    pub fn rows(&self) -> Vec<(usize, usize)> {
        let (c, t) = (self.chunk, self.t);
        let mut rows: Vec<(usize, usize)> = (0..t).map(|i| (i, i / c)).collect();
        for b in 0..t.div_ceil(c) {
            let first = (b + 1) * c;
            rows.extend((first..(first + self.right).min(t)).map(|i| (i, b)));
        }
        rows
    }

    /// Where each row may look: `[n, n]` over [`CopyLayout::rows`].
    pub fn mask(&self) -> Vec<bool> {
        let rows = self.rows();
        let n = rows.len();
        let mut mask = vec![false; n * n];
        for (qi, &(_, qb)) in rows.iter().enumerate() {
            let start = qb * self.chunk;
            let lo = start.saturating_sub(self.left);
            let row = &mut mask[qi * n..(qi + 1) * n];
            for (kj, &(ks, kb)) in rows.iter().enumerate() {
                row[kj] = if kj < self.t {
                    ks >= lo && ks < start + self.chunk
                } else {
                    kb == qb
                };
            }
        }
        mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(chunk: usize, left: usize, right: usize, t: usize) -> CopyLayout {
        CopyLayout {
            chunk,
            left,
            right,
            t,
        }
    }

    #[test]
    fn copies_follow_the_frames_chunk_by_chunk() {
        let l = layout(2, 2, 1, 5);
        // frames 0..5, then chunk 0's copy of 2, chunk 1's of 4 (chunk 2's
        // would be frame 6, past the window)
        let src: Vec<usize> = l.rows().iter().map(|r| r.0).collect();
        assert_eq!(src, vec![0, 1, 2, 3, 4, 2, 4]);
        let chunks: Vec<usize> = l.rows().iter().map(|r| r.1).collect();
        assert_eq!(chunks, vec![0, 0, 1, 1, 2, 0, 1]);
    }

    #[test]
    fn a_row_sees_its_chunk_its_left_and_its_own_copies() {
        let l = layout(2, 2, 1, 5);
        let n = l.rows().len();
        let m = l.mask();
        let sees = |q: usize| (0..n).filter(|&k| m[q * n + k]).collect::<Vec<_>>();
        assert_eq!(sees(0), vec![0, 1, 5]);
        assert_eq!(sees(3), vec![0, 1, 2, 3, 6]);
        assert_eq!(sees(4), vec![2, 3, 4]);
        // a copy sees what its chunk sees
        assert_eq!(sees(5), sees(0));
        assert_eq!(sees(6), sees(2));
    }

    #[test]
    fn no_look_ahead_is_plain_chunks() {
        let l = layout(3, 3, 0, 7);
        assert_eq!(l.rows().len(), 7);
        let m = l.mask();
        for q in 0..7 {
            for k in 0..7 {
                let start = q / 3 * 3;
                let want = k + 3 >= start && k < start + 3;
                assert_eq!(m[q * 7 + k], want, "{q} {k}");
            }
        }
    }
}
