//! The names an obligation records for removal, bounded by construction.
//!
//! Invariants, true of every `Removals` whatever built it:
//! - it holds at most `MAX_NAMES_PER_ROUND` names in all;
//! - every name is non-empty and at most `MAX_DEAD_NAME_LEN` bytes long;
//! - no directory maps to an empty set, and `len` is the number of names.
//!
//! There are two ways in. `insert` asserts the bounds: cleanup plans at most
//! one round (carried names are confirmed first when a round would not fit
//! next to them) and `is_dead` accepts only sluice's own names, none longer
//! than a segment name, so a name past either bound is a programmer error.
//! `TryFrom<BTreeMap<..>>`, used only for a record read from disk, checks them
//! and refuses. So every obligation record fits its slot, which `record.rs`
//! asserts at compile time from the same two constants.

use std::collections::{BTreeMap, BTreeSet};

use crate::layout::DirKind;

/// Dead files removed per round, and the most names a `Removals` ever holds.
pub(crate) const MAX_NAMES_PER_ROUND: usize = 512;

/// The longest name cleanup removes: a segment name
/// (`<generation:020>-<base_offset:020>.log`); offset files are canonical
/// `u32` ids, at most 10 bytes.
pub(crate) const MAX_DEAD_NAME_LEN: usize = 20 + 1 + 20 + 4;

/// Names per directory, at most `MAX_NAMES_PER_ROUND` in all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Removals {
    names: BTreeMap<DirKind, BTreeSet<String>>,
    len: usize,
}

/// The empty set, for phases that record no removal.
pub(super) static NONE: Removals = Removals::new();

impl Removals {
    pub const fn new() -> Removals {
        Removals {
            names: BTreeMap::new(),
            len: 0,
        }
    }

    /// Names in all directories.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The directories with at least one name, in `DirKind` order.
    pub(crate) fn dirs(&self) -> Vec<DirKind> {
        self.names.keys().copied().collect()
    }

    /// Each directory with its names, in `DirKind` order.
    pub fn iter(&self) -> impl Iterator<Item = (DirKind, &BTreeSet<String>)> {
        self.names.iter().map(|(d, n)| (*d, n))
    }

    /// Each directory's names, in `DirKind` order.
    pub fn values(&self) -> impl Iterator<Item = &BTreeSet<String>> {
        self.names.values()
    }

    pub(crate) fn contains(&self, dir: DirKind, name: &str) -> bool {
        self.names.get(&dir).is_some_and(|n| n.contains(name))
    }

    /// The names as a map (what the obligation record stores).
    pub(crate) fn as_map(&self) -> &BTreeMap<DirKind, BTreeSet<String>> {
        &self.names
    }

    /// Whether `name` may be recorded at all.
    pub(crate) fn name_fits(name: &str) -> bool {
        !name.is_empty() && name.len() <= MAX_DEAD_NAME_LEN
    }

    /// Whether `insert` would still take `name` in `dir`: a new name fits
    /// while fewer than `MAX_NAMES_PER_ROUND` are held.
    pub(crate) fn has_room_for(&self, dir: DirKind, name: &str) -> bool {
        Removals::name_fits(name) && (self.len < MAX_NAMES_PER_ROUND || self.contains(dir, name))
    }

    /// Records `name` in `dir`; returns whether it was new.
    ///
    /// # Panics
    /// If `name` breaks the bounds (see the module comment): a programmer error.
    pub fn insert(&mut self, dir: DirKind, name: String) -> bool {
        assert!(
            self.has_room_for(dir, &name),
            "removals bounded to {MAX_NAMES_PER_ROUND} names of at most {MAX_DEAD_NAME_LEN} bytes: \
             cannot add {name:?} to {} names",
            self.len
        );
        let added = self.names.entry(dir).or_default().insert(name);
        if added {
            self.len += 1;
        }
        added
    }

    /// How many names the union with `other` holds.
    pub(crate) fn len_with(&self, other: &Removals) -> usize {
        self.len
            + other
                .iter()
                .flat_map(|(dir, names)| names.iter().map(move |n| (dir, n)))
                .filter(|(dir, n)| !self.contains(*dir, n))
                .count()
    }

    /// Adds every name of `other`.
    ///
    /// # Panics
    /// If the union holds more than `MAX_NAMES_PER_ROUND` names.
    pub(crate) fn extend(&mut self, other: &Removals) {
        assert!(
            self.len_with(other) <= MAX_NAMES_PER_ROUND,
            "removals bounded to {MAX_NAMES_PER_ROUND} names: {} planned next to {} carried",
            other.len,
            self.len
        );
        for (dir, names) in other.iter() {
            for name in names {
                self.insert(dir, name.clone());
            }
        }
    }

    /// Drops every name in `dir`.
    pub(crate) fn forget(&mut self, dir: DirKind) {
        if let Some(names) = self.names.remove(&dir) {
            self.len -= names.len();
        }
    }

    /// Checks the invariants by counting (O(names); the mutators keep them).
    pub(crate) fn assert_internally_consistent(&self) {
        let mut counted = 0;
        for (dir, names) in &self.names {
            assert!(!names.is_empty(), "removals: an empty set for {dir:?}");
            for name in names {
                assert!(
                    Removals::name_fits(name),
                    "removals: name {name:?} out of bounds"
                );
            }
            counted += names.len();
        }
        assert_eq!(counted, self.len, "removals: count out of step");
        assert!(
            self.len <= MAX_NAMES_PER_ROUND,
            "removals: {} names",
            self.len
        );
    }
}

/// The door from disk: a map read from an obligation record.
impl TryFrom<BTreeMap<DirKind, BTreeSet<String>>> for Removals {
    type Error = String;

    fn try_from(map: BTreeMap<DirKind, BTreeSet<String>>) -> Result<Removals, String> {
        let total: usize = map.values().map(BTreeSet::len).sum();
        if total > MAX_NAMES_PER_ROUND {
            return Err(format!(
                "{total} names recorded for removal, more than {MAX_NAMES_PER_ROUND}"
            ));
        }
        let mut out = Removals::new();
        for (dir, names) in map {
            for name in names {
                if !Removals::name_fits(&name) {
                    return Err(format!(
                        "name {name:?} in {} is not one cleanup removes",
                        dir.as_str()
                    ));
                }
                out.insert(dir, name);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(i: usize) -> String {
        crate::layout::segment_name(1, i as u64, crate::layout::LOG_EXT)
    }

    #[test]
    fn a_segment_name_is_the_longest_name_that_fits() {
        let name = segment(0);
        assert_eq!(name.len(), MAX_DEAD_NAME_LEN);
        assert!(Removals::name_fits(&name));
        assert!(Removals::name_fits(&u32::MAX.to_string()));
        assert!(!Removals::name_fits(&format!("{name}x")));
        assert!(!Removals::name_fits(""));
    }

    #[test]
    fn a_full_round_fits_and_one_name_more_does_not() {
        // Given: a full round of segment names.
        let mut r = Removals::new();
        for i in 0..MAX_NAMES_PER_ROUND {
            assert!(r.insert(DirKind::Segments, segment(i)));
        }
        // Then: a name it holds may be recorded again, a new one may not.
        assert!(r.has_room_for(DirKind::Segments, &segment(0)));
        assert!(!r.insert(DirKind::Segments, segment(0)));
        assert!(!r.has_room_for(DirKind::Segments, &segment(MAX_NAMES_PER_ROUND)));
        assert_eq!(r.len(), MAX_NAMES_PER_ROUND);
        r.assert_internally_consistent();
    }

    #[test]
    #[should_panic(expected = "removals bounded")]
    fn inserting_past_the_bound_is_a_programmer_error() {
        let mut r = Removals::new();
        for i in 0..=MAX_NAMES_PER_ROUND {
            r.insert(DirKind::Segments, segment(i));
        }
    }

    #[test]
    fn a_map_from_disk_past_either_bound_is_refused() {
        let names: BTreeSet<String> = (0..=MAX_NAMES_PER_ROUND).map(segment).collect();
        let too_many = BTreeMap::from([(DirKind::Segments, names)]);
        assert!(Removals::try_from(too_many).is_err());
        let too_long = BTreeMap::from([(DirKind::Consumers, BTreeSet::from(["1".repeat(46)]))]);
        assert!(Removals::try_from(too_long).is_err());
        let empty_set = BTreeMap::from([(DirKind::Groups, BTreeSet::new())]);
        assert_eq!(Removals::try_from(empty_set), Ok(Removals::new()));
    }

    #[test]
    fn forgetting_a_directory_keeps_the_count_in_step() {
        let mut r = Removals::new();
        r.insert(DirKind::Segments, segment(1));
        r.insert(DirKind::Consumers, "7".into());
        r.insert(DirKind::Consumers, "8".into());
        r.forget(DirKind::Consumers);
        assert_eq!(r.len(), 1);
        assert_eq!(r.dirs(), vec![DirKind::Segments]);
        r.assert_internally_consistent();
    }
}
