//! The forced part of a simulator's fault schedule, shared by every simulator
//! (`SimStorage` here, `SimRemote` in `sluice-remote`): faults forced at a
//! call's trace index, and matcher rules ("the second sync of
//! `.../consumers`"), each with its own fault type and call kind. A seeded
//! plan, whose draws differ per simulator, is consulted by the caller after
//! this answers `None`.
//!
//! Invariants:
//! - Sources are consulted in one order and the first that fires decides: by
//!   index, then rules in insertion order, each skipping `skip` matching calls
//!   before it fires `times` times. So a schedule prints and replays.
//! - A fault forced at an index fires once, at that index only.
//!
//! Also here: the trace hash both simulators print beside a seed.

use std::collections::BTreeMap;
use std::fmt::Display;

/// What a rule's matcher looks at: a call of kind `K` on a name (a path, a key).
pub trait CallMatcher<K> {
    fn matches(&self, kind: K, name: &str) -> bool;
}

#[derive(Debug, Clone)]
struct Rule<M, F> {
    matcher: M,
    fault: F,
    skip: u32,
    remaining: u32,
}

/// Faults forced by index and by rule.
#[derive(Debug, Clone)]
pub struct Forced<M, F> {
    at: BTreeMap<u64, F>,
    rules: Vec<Rule<M, F>>,
}

impl<M, F> Default for Forced<M, F> {
    fn default() -> Self {
        Forced {
            at: BTreeMap::new(),
            rules: Vec::new(),
        }
    }
}

impl<M, F: Copy> Forced<M, F> {
    /// The call with trace index `index` fails with `fault`.
    pub fn fail_at(&mut self, index: u64, fault: F) {
        self.at.insert(index, fault);
    }

    /// After `skip` calls that `matcher` matches, the next `times` fail with `fault`.
    pub fn fail_when(&mut self, matcher: M, fault: F, skip: u32, times: u32) {
        self.rules.push(Rule {
            matcher,
            fault,
            skip,
            remaining: times,
        });
    }

    /// The fault forced on call `index` of `kind` on `name`, if any (and
    /// counts it against the rule that fired).
    pub fn decide<K: Copy>(&mut self, index: u64, kind: K, name: &str) -> Option<F>
    where
        M: CallMatcher<K>,
    {
        if let Some(f) = self.at.remove(&index) {
            return Some(f);
        }
        for rule in self.rules.iter_mut() {
            if rule.remaining == 0 || !rule.matcher.matches(kind, name) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            rule.remaining -= 1;
            return Some(rule.fault);
        }
        None
    }
}

/// FNV-1a over the rendered entries, each followed by a newline: equal
/// hashes mean equal traces, stable across platforms and builds.
pub fn trace_hash<T: Display>(entries: impl IntoIterator<Item = T>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for e in entries {
        for b in e.to_string().bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);
    impl CallMatcher<u8> for Named {
        fn matches(&self, _kind: u8, name: &str) -> bool {
            name == self.0
        }
    }

    #[test]
    fn an_index_wins_over_a_rule_and_fires_once() {
        let mut f: Forced<Named, char> = Forced::default();
        f.fail_when(Named("a"), 'r', 0, 10);
        f.fail_at(1, 'i');
        assert_eq!(f.decide(0, 0, "a"), Some('r'));
        assert_eq!(f.decide(1, 0, "a"), Some('i'));
        assert_eq!(f.decide(1, 0, "b"), None);
    }

    #[test]
    fn a_rule_skips_then_fires_its_times() {
        let mut f: Forced<Named, char> = Forced::default();
        f.fail_when(Named("a"), 'x', 1, 2);
        let got: Vec<_> = (0..5).map(|i| f.decide(i, 0, "a")).collect();
        assert_eq!(got, [None, Some('x'), Some('x'), None, None]);
        assert_eq!(f.decide(9, 0, "b"), None);
    }

    #[test]
    fn the_trace_hash_tells_traces_apart() {
        assert_eq!(trace_hash(["a", "b"]), trace_hash(["a", "b"]));
        assert_ne!(trace_hash(["a", "b"]), trace_hash(["ab"]));
        assert_ne!(trace_hash(["a", "b"]), trace_hash(["b", "a"]));
    }
}
