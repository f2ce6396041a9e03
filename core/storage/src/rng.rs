//! A tiny seeded PRNG (SplitMix64), the one random source of every crate:
//! the simulator and its storage faults, the power-cut file system's
//! writeback coins, the soak's schedules, and the engine's message-id seed.
//!
//! Invariants, and why they hold:
//! - The stream drawn from a seed never changes: a simulator run must be a
//!   pure function of its seed *forever*, so a seed in an old bug report
//!   still reproduces. A general-purpose crate is free to change its output
//!   stream between versions; these lines are not, and
//!   `the_stream_of_a_seed_is_pinned` below pins them.
//! - `from_parts` is the only way to seed from several numbers (a seed and a
//!   cycle, or recovery's findings): order matters, unlike a plain XOR, so
//!   `(seed, 1, 2)` and `(seed, 2, 1)` draw different streams.

/// SplitMix64's increment (the golden ratio in 64 bits).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng { state: seed }
    }

    /// A generator seeded by `seed` and then each of `parts`, in order: one
    /// round of SplitMix64's finaliser per number, so every part changes the
    /// whole stream and their order matters.
    pub fn from_parts(seed: u64, parts: &[u64]) -> Self {
        let state = parts.iter().fold(Self::mix(seed), |h, &x| {
            Self::mix(h ^ x.wrapping_add(GOLDEN))
        });
        SimRng { state }
    }

    /// SplitMix64's finaliser: a bijection of `u64` whose every output bit
    /// depends on every input bit.
    pub(crate) const fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        Self::mix(self.state)
    }

    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-shift: unbiased enough for fault schedules, and branch-free.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `ppm` parts per million.
    pub fn chance_ppm(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < u64::from(ppm)
    }

    /// True with probability one half.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// Uniform in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo.saturating_add(self.below(hi.saturating_sub(lo).saturating_add(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_different_seed_different_stream() {
        let a: Vec<u64> = (0..8)
            .scan(SimRng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .scan(SimRng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .scan(SimRng::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn the_stream_of_a_seed_is_pinned() {
        // Given SplitMix64's published first outputs for seed 0,
        let mut r = SimRng::new(0);
        // when drawn, then they are exactly these (a changed constant or
        // order would break every recorded seed).
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn from_parts_depends_on_every_part_and_their_order() {
        // Given one seed and two parts,
        let draw = |parts: &[u64]| SimRng::from_parts(7, parts).next_u64();
        // when the parts differ or are swapped, then the streams differ;
        assert_ne!(draw(&[1, 2]), draw(&[2, 1]));
        assert_ne!(draw(&[1]), draw(&[1, 0]));
        // and the same parts give the same stream.
        assert_eq!(draw(&[1, 2]), draw(&[1, 2]));
        // With no part it is the seed mixed once.
        assert_eq!(SimRng::from_parts(7, &[]).state, SimRng::mix(7));
    }

    #[test]
    fn range_is_inclusive_and_saturates() {
        let mut r = SimRng::new(3);
        for _ in 0..200 {
            let x = r.range(5, 8);
            assert!((5..=8).contains(&x));
        }
        assert_eq!(r.range(4, 4), 4);
        assert_eq!(r.range(9, 2), 9);
        assert!(r.range(u64::MAX - 1, u64::MAX) >= u64::MAX - 1);
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SimRng::new(1);
        for n in [1u64, 2, 3, 10, 1000] {
            for _ in 0..200 {
                assert!(r.below(n) < n);
            }
        }
        assert_eq!(r.below(0), 0);
    }
}
