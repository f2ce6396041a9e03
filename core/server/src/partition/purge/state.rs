//! The purge cleanup obligation as a closed state machine.
//!
//! ```text
//! Requested ──files_deleted──▶ FilesDeleted ──dirs_synced──▶ DirsSynced ──applied──▶ Applied
//!     ▲                             │                            │
//!     └──────────── retry (any failure, any non-Applied state) ──┘
//! ```
//!
//! Invariants (checked by the transition functions, the only way to move):
//! - `FilesDeleted` is entered only from `Requested`, with the names removed.
//! - `DirsSynced` is entered only from `FilesDeleted`, and only if every
//!   directory that lost a name was confirmed synced *in this attempt*.
//! - `Applied` is entered only from `DirsSynced`.
//! - A retry goes back to `Requested` keeping the names removed so far: their
//!   removal is not known durable until a later attempt confirms it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The directories a purge cleans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DirKind {
    Segments,
    Consumers,
    Groups,
}

impl DirKind {
    pub const ALL: [DirKind; 3] = [DirKind::Segments, DirKind::Consumers, DirKind::Groups];

    pub fn as_str(self) -> &'static str {
        match self {
            DirKind::Segments => "segments",
            DirKind::Consumers => "consumers",
            DirKind::Groups => "groups",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PurgeState {
    Requested,
    FilesDeleted,
    DirsSynced,
    Applied,
}

impl PurgeState {
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeState::Requested => "requested",
            PurgeState::FilesDeleted => "files_deleted",
            PurgeState::DirsSynced => "dirs_synced",
            PurgeState::Applied => "applied",
        }
    }
}

/// A transition that the state machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("purge obligation cannot go from {from:?} via {via}")]
pub struct TransitionError {
    pub from: PurgeState,
    pub via: &'static str,
}

/// Longest error text kept in the obligation (it must fit its slot).
const MAX_ERROR_LEN: usize = 512;

/// One partition's cleanup obligation for purge generation `generation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Obligation {
    generation: u64,
    /// Files of a generation below this are dead (equal to `generation`).
    cutoff: u64,
    state: PurgeState,
    /// Names removed by this obligation's attempts whose removal is not yet
    /// confirmed durable (cleared on `DirsSynced`).
    removed: BTreeMap<DirKind, BTreeSet<String>>,
    /// Directories confirmed synced in the current attempt.
    confirmed: BTreeSet<DirKind>,
    attempts: u32,
    last_error: Option<String>,
}

impl Obligation {
    /// The obligation a purge commit creates.
    pub fn request(generation: u64) -> Obligation {
        Obligation {
            generation,
            cutoff: generation,
            state: PurgeState::Requested,
            removed: BTreeMap::new(),
            confirmed: BTreeSet::new(),
            attempts: 0,
            last_error: None,
        }
    }

    /// A newer purge supersedes this obligation; names it removed but never
    /// confirmed are carried over (their removal must still be made durable).
    pub fn superseded_by(&self, generation: u64) -> Obligation {
        let mut next = Obligation::request(generation);
        next.removed = self.removed.clone();
        next
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn cutoff(&self) -> u64 {
        self.cutoff
    }

    pub fn state(&self) -> PurgeState {
        self.state
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    pub fn removed(&self) -> &BTreeMap<DirKind, BTreeSet<String>> {
        &self.removed
    }

    pub fn confirmed(&self) -> &BTreeSet<DirKind> {
        &self.confirmed
    }

    pub fn is_applied(&self) -> bool {
        self.state == PurgeState::Applied
    }

    /// In `Requested`: records names about to be removed, *before* they are
    /// removed, so a crash in the middle of the removals leaves them known to
    /// the next process (which must make their removal durable).
    pub fn plan_removals(
        &mut self,
        names: &BTreeMap<DirKind, BTreeSet<String>>,
    ) -> Result<(), TransitionError> {
        if self.state != PurgeState::Requested {
            return Err(TransitionError {
                from: self.state,
                via: "plan_removals",
            });
        }
        for (dir, n) in names {
            self.removed
                .entry(*dir)
                .or_default()
                .extend(n.iter().cloned());
        }
        self.removed.retain(|_, n| !n.is_empty());
        Ok(())
    }

    /// How many names `removed` would hold with `names` planned too.
    pub fn removed_with(&self, names: &BTreeMap<DirKind, BTreeSet<String>>) -> usize {
        let mut total: usize = self.removed.values().map(BTreeSet::len).sum();
        for (dir, n) in names {
            let have = self.removed.get(dir);
            total += n
                .iter()
                .filter(|name| have.is_none_or(|h| !h.contains(*name)))
                .count();
        }
        total
    }

    /// In `Requested`: the directories in `dirs` were synced successfully after
    /// every removal recorded in them, so those removals are durable. Used by
    /// intermediate rounds when a partition has more dead files than one
    /// obligation slot can name.
    pub fn round_confirmed(&mut self, dirs: &[DirKind]) -> Result<(), TransitionError> {
        if self.state != PurgeState::Requested {
            return Err(TransitionError {
                from: self.state,
                via: "round_confirmed",
            });
        }
        for dir in dirs {
            self.removed.remove(dir);
        }
        Ok(())
    }

    /// Requested → FilesDeleted: every dead file was removed (each one was
    /// recorded by `plan_removals` first).
    pub fn files_deleted(&mut self) -> Result<(), TransitionError> {
        if self.state != PurgeState::Requested {
            return Err(TransitionError {
                from: self.state,
                via: "files_deleted",
            });
        }
        self.confirmed.clear();
        self.state = PurgeState::FilesDeleted;
        Ok(())
    }

    /// Records one directory confirmed synced in this attempt.
    pub fn dir_confirmed(&mut self, dir: DirKind) -> Result<(), TransitionError> {
        if self.state != PurgeState::FilesDeleted {
            return Err(TransitionError {
                from: self.state,
                via: "dir_confirmed",
            });
        }
        self.confirmed.insert(dir);
        Ok(())
    }

    /// The directories that still need a confirmed sync in this attempt.
    pub fn unconfirmed_dirs(&self) -> Vec<DirKind> {
        self.removed
            .keys()
            .filter(|d| !self.confirmed.contains(d))
            .copied()
            .collect()
    }

    /// FilesDeleted → DirsSynced: only when every directory that lost a name is confirmed.
    pub fn dirs_synced(&mut self) -> Result<(), TransitionError> {
        if self.state != PurgeState::FilesDeleted || !self.unconfirmed_dirs().is_empty() {
            return Err(TransitionError {
                from: self.state,
                via: "dirs_synced",
            });
        }
        self.removed.clear();
        self.state = PurgeState::DirsSynced;
        Ok(())
    }

    /// DirsSynced → Applied.
    pub fn applied(&mut self) -> Result<(), TransitionError> {
        if self.state != PurgeState::DirsSynced {
            return Err(TransitionError {
                from: self.state,
                via: "applied",
            });
        }
        self.state = PurgeState::Applied;
        self.last_error = None;
        Ok(())
    }

    /// Any non-Applied state → Requested, for a new attempt. Confirmations of
    /// the previous attempt count for nothing: on Linux a sync after a failed
    /// one proves nothing about the earlier changes.
    pub fn retry(&mut self) {
        self.state = PurgeState::Requested;
        self.confirmed.clear();
        self.attempts = self.attempts.saturating_add(1);
    }

    /// Reopens an Applied obligation because dead files were found again
    /// (for example resurrected by a power loss that a sync did not cover).
    pub fn reopen(&mut self) {
        self.retry();
    }

    pub fn record_error(&mut self, error: &str) {
        let mut e = error.to_string();
        if e.len() > MAX_ERROR_LEN {
            let mut cut = MAX_ERROR_LEN;
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            e.truncate(cut);
        }
        self.last_error = Some(e);
    }

    /// Checks a record read from disk against the invariants above.
    pub fn validate(&self) -> Result<(), String> {
        if self.cutoff != self.generation {
            return Err(format!(
                "cutoff {} differs from generation {}",
                self.cutoff, self.generation
            ));
        }
        match self.state {
            PurgeState::DirsSynced | PurgeState::Applied if !self.removed.is_empty() => {
                Err(format!("{:?} with unconfirmed removals", self.state))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: DirKind, n: &[&str]) -> BTreeMap<DirKind, BTreeSet<String>> {
        BTreeMap::from([(dir, n.iter().map(|s| s.to_string()).collect())])
    }

    #[test]
    fn the_only_path_to_applied_is_through_every_state() {
        let mut o = Obligation::request(3);
        assert!(o.dirs_synced().is_err());
        assert!(o.applied().is_err());
        o.plan_removals(&names(DirKind::Consumers, &["7"])).unwrap();
        o.files_deleted().unwrap();
        assert!(
            o.plan_removals(&names(DirKind::Groups, &["1"])).is_err(),
            "plans only while Requested"
        );
        assert!(o.applied().is_err());
        assert!(o.dirs_synced().is_err(), "consumers/ not confirmed yet");
        o.dir_confirmed(DirKind::Consumers).unwrap();
        o.dirs_synced().unwrap();
        o.applied().unwrap();
        assert!(o.is_applied());
    }

    #[test]
    fn a_retry_forgets_confirmations_but_keeps_unconfirmed_names() {
        let mut o = Obligation::request(1);
        o.plan_removals(&names(DirKind::Groups, &["1", "2"]))
            .unwrap();
        o.files_deleted().unwrap();
        o.dir_confirmed(DirKind::Groups).unwrap();
        o.retry();
        assert_eq!(o.state(), PurgeState::Requested);
        assert!(o.confirmed().is_empty());
        assert_eq!(o.removed()[&DirKind::Groups].len(), 2);
        o.files_deleted().unwrap();
        assert_eq!(o.unconfirmed_dirs(), vec![DirKind::Groups]);
    }

    #[test]
    fn a_confirmed_round_forgets_only_its_directories() {
        let mut o = Obligation::request(2);
        o.plan_removals(&names(DirKind::Segments, &["a.log"]))
            .unwrap();
        o.plan_removals(&names(DirKind::Consumers, &["1"])).unwrap();
        o.round_confirmed(&[DirKind::Segments]).unwrap();
        assert_eq!(
            o.removed().keys().copied().collect::<Vec<_>>(),
            vec![DirKind::Consumers]
        );
    }
}
