//! A set of half-open byte ranges: which bytes of a file are not yet durable.
//!
//! Invariant: the map holds disjoint, non-touching ranges keyed by their start,
//! each with `start < end`; `insert` and `clip` restore it before returning, so
//! iteration is always in ascending byte order.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges {
    by_start: BTreeMap<u64, u64>,
}

impl Ranges {
    /// Adds `start..end`, merging it with every range it overlaps or touches.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut lo, mut hi) = (start, end);
        let touching: Vec<u64> = self
            .by_start
            .range(..=end)
            .filter(|&(_, &e)| e >= start)
            .map(|(&s, _)| s)
            .collect();
        for s in touching {
            if let Some(e) = self.by_start.remove(&s) {
                lo = lo.min(s);
                hi = hi.max(e);
            }
        }
        self.by_start.insert(lo, hi);
    }

    /// Forgets every byte at or beyond `len` (the file was cut to `len`).
    pub fn clip(&mut self, len: u64) {
        let beyond: Vec<u64> = self.by_start.range(len..).map(|(&s, _)| s).collect();
        for s in beyond {
            self.by_start.remove(&s);
        }
        if let Some((_, e)) = self.by_start.range_mut(..len).next_back()
            && *e > len
        {
            *e = len;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    pub fn clear(&mut self) {
        self.by_start.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_start.iter().map(|(&s, &e)| (s, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(r: &Ranges) -> Vec<(u64, u64)> {
        r.iter().collect()
    }

    #[test]
    fn overlapping_and_touching_ranges_merge() {
        let mut r = Ranges::default();
        r.insert(10, 20);
        r.insert(0, 5);
        r.insert(20, 25);
        assert_eq!(all(&r), vec![(0, 5), (10, 25)]);
        r.insert(5, 10);
        assert_eq!(all(&r), vec![(0, 25)]);
        r.insert(30, 31);
        r.insert(3, 3);
        assert_eq!(all(&r), vec![(0, 25), (30, 31)]);
    }

    #[test]
    fn clip_drops_and_shortens() {
        let mut r = Ranges::default();
        r.insert(0, 4);
        r.insert(6, 10);
        r.insert(12, 14);
        r.clip(8);
        assert_eq!(all(&r), vec![(0, 4), (6, 8)]);
        r.clip(6);
        assert_eq!(all(&r), vec![(0, 4)]);
    }
}
