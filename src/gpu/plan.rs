//! The memory plan: one arena for every activation on the device, offsets
//! from liveness over the execution order, so buffers are reused and nothing
//! is allocated after planning. Views (reshapes, contiguous slices) share
//! their root's memory and keep it alive as long as they are used.

use super::memory::align;

/// One value to place: its size and the execution steps between which it
/// must stay intact (`first` = written, `last` = last read, inclusive).
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub bytes: usize,
    pub first: usize,
    pub last: usize,
}

impl Interval {
    fn overlaps(&self, o: &Interval) -> bool {
        self.first <= o.last && o.first <= self.last
    }
}

/// Offsets for `values` in one arena, and the arena's size: no two values
/// live at the same time share a byte. Greedy by decreasing size, each at
/// the lowest offset that fits (good enough for a few hundred values).
pub fn place(values: &[Interval]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(values[i].bytes));
    let mut offsets = vec![0usize; values.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0usize;
    for &i in &order {
        let v = values[i];
        let size = align(v.bytes.max(1));
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| values[j].overlaps(&v))
            .map(|&j| (offsets[j], offsets[j] + align(values[j].bytes.max(1))))
            .collect();
        busy.sort_unstable();
        let mut at = 0usize;
        for (lo, hi) in busy {
            if at + size <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        total = total.max(at + size);
        placed.push(i);
    }
    (offsets, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(values: &[Interval]) {
        let (off, total) = place(values);
        for i in 0..values.len() {
            assert!(off[i] + values[i].bytes <= total);
            assert_eq!(off[i] % 256, 0);
            for j in 0..i {
                if values[i].overlaps(&values[j]) && values[i].bytes > 0 && values[j].bytes > 0 {
                    let (a, b) = (off[i], off[i] + values[i].bytes);
                    let (c, d) = (off[j], off[j] + values[j].bytes);
                    assert!(b <= c || d <= a, "values {i} and {j} collide");
                }
            }
        }
    }

    #[test]
    fn live_values_never_share_memory_and_dead_ones_do() {
        let chain: Vec<Interval> = (0..10)
            .map(|i| Interval {
                bytes: 1000 + i * 10,
                first: i,
                last: i + 1,
            })
            .collect();
        check(&chain);
        let (_, total) = place(&chain);
        // a chain needs two buffers at a time, not ten
        assert!(total <= 3 * 1280, "total {total}");
        let mut rng = 7u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let random: Vec<Interval> = (0..200)
            .map(|_| {
                let first = (next() % 100) as usize;
                Interval {
                    bytes: (next() % 5000) as usize,
                    first,
                    last: first + (next() % 20) as usize,
                }
            })
            .collect();
        check(&random);
    }
}
