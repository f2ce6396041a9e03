//! The purge cleanup obligation as a closed state machine whose states carry
//! their data.
//!
//! ```text
//! Requested{carried} ─requested_to_files_deleted─▶ FilesDeleted{removed}
//!     ▲  ▲                                              │
//!     │  └──── retry (a new attempt) ───────────────────┤ files_deleted_to_dirs_synced
//!     │                                                 ▼ (every dir in `removed` confirmed)
//!     │  ┌──── retry (only if recovery found dead files) DirsSynced
//!     │  │                                              │ dirs_synced_to_applied
//!     └──┴──── reopen (recovery found dead files) ◀──── Applied
//! ```
//!
//! Invariants:
//! - Only `Requested` and `FilesDeleted` name removals not yet confirmed
//!   durable; `DirsSynced` and `Applied` have none to name, so none can be
//!   left behind in them. The names are a `Removals`, bounded by construction.
//! - Each transition names its source and target and asserts the source (and
//!   `assert_internally_consistent` on both sides, as TigerBeetle's superblock
//!   does): an illegal transition is a programmer error and stops the process,
//!   it is never an error a caller could retry.
//! - Which directories were confirmed synced is known only inside one attempt
//!   (a sync after a failed one proves nothing about earlier changes), so it
//!   is an argument of `files_deleted_to_dirs_synced`, never a field.
//! - `Applied` is left only by `reopen`, never by `retry`, and holds no error.
//! - The only way in from disk is `TryFrom<ObligationRecord>` (record.rs).

use std::collections::BTreeSet;

use super::removals::{self, Removals};
use crate::layout::DirKind;

/// The four states the product names (status endpoint, metrics, snapshots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// Where an obligation stands, with the data that is meaningful there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Cleanup is owed. `carried`: names recorded for removal (planned in
    /// this attempt or an earlier one, perhaps by an earlier process) whose
    /// removal is not confirmed durable. Each was recorded before its unlink,
    /// so a listed unlink may never have happened.
    Requested { carried: Removals },
    /// In this attempt every dead file was unlinked; `removed` are the names
    /// whose removal still needs a confirmed directory sync.
    FilesDeleted { removed: Removals },
    /// In one attempt, all three directories got a successful sync issued
    /// after every change in them: no dead file's name is durable. This
    /// version passes through it to `Applied` at once and never writes it;
    /// it is read from files older versions wrote.
    DirsSynced,
    /// Cleanup for this generation is finished.
    Applied,
}

impl Phase {
    pub(crate) fn state(&self) -> PurgeState {
        match self {
            Phase::Requested { .. } => PurgeState::Requested,
            Phase::FilesDeleted { .. } => PurgeState::FilesDeleted,
            Phase::DirsSynced => PurgeState::DirsSynced,
            Phase::Applied => PurgeState::Applied,
        }
    }
}

/// Longest error text kept in the obligation (it must fit its slot).
pub(crate) const MAX_ERROR_LEN: usize = 512;

/// One partition's cleanup obligation for purge generation `generation`:
/// files of a lower generation are dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obligation {
    generation: u64,
    phase: Phase,
    attempts: u32,
    last_error: Option<String>,
}

/// Stops the process on a transition the state machine does not have.
#[track_caller]
fn illegal(from: PurgeState, via: &str) -> ! {
    unreachable!("purge obligation cannot go from {from:?} via {via} (a programmer error)")
}

impl Obligation {
    /// The obligation a purge commit creates.
    pub fn request(generation: u64) -> Obligation {
        let ob = Obligation {
            generation,
            phase: Phase::Requested {
                carried: Removals::new(),
            },
            attempts: 0,
            last_error: None,
        };
        ob.assert_internally_consistent();
        ob
    }

    /// Builds an obligation from its parts, checking what the types do not
    /// (record.rs, the door from disk).
    pub(super) fn from_parts(
        generation: u64,
        phase: Phase,
        attempts: u32,
        last_error: Option<String>,
    ) -> Result<Obligation, String> {
        if let Some(e) = &last_error
            && e.len() > MAX_ERROR_LEN
        {
            return Err(format!("error text of {} bytes", e.len()));
        }
        if phase == Phase::Applied && last_error.is_some() {
            return Err("Applied with an error".into());
        }
        let ob = Obligation {
            generation,
            phase,
            attempts,
            last_error,
        };
        ob.assert_internally_consistent();
        Ok(ob)
    }

    /// A newer purge supersedes this obligation; names recorded for removal
    /// but never confirmed are carried over (their removal must still be made
    /// durable). Files of this generation are dead under the new one too.
    pub(crate) fn superseded_by(&self, generation: u64) -> Obligation {
        self.assert_internally_consistent();
        assert!(
            generation > self.generation,
            "an obligation for generation {} superseded by {generation}",
            self.generation
        );
        let mut next = Obligation::request(generation);
        next.phase = Phase::Requested {
            carried: self.removed().clone(),
        };
        next.assert_internally_consistent();
        next
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    pub fn state(&self) -> PurgeState {
        self.phase.state()
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Names recorded for removal and not yet confirmed durable (none once
    /// the directories are synced).
    pub fn removed(&self) -> &Removals {
        match &self.phase {
            Phase::Requested { carried } => carried,
            Phase::FilesDeleted { removed } => removed,
            Phase::DirsSynced | Phase::Applied => &removals::NONE,
        }
    }

    pub fn is_applied(&self) -> bool {
        self.phase == Phase::Applied
    }

    /// What holds in every state; called on both sides of every transition.
    /// The phases carry their data, so little is left to check here; the
    /// count over the names runs in debug builds (simulations and tests).
    pub(crate) fn assert_internally_consistent(&self) {
        if let Some(e) = &self.last_error {
            assert!(e.len() <= MAX_ERROR_LEN, "obligation error text too long");
        }
        assert!(
            !(self.is_applied() && self.last_error.is_some()),
            "an Applied obligation holds an error"
        );
        if cfg!(debug_assertions) {
            self.removed().assert_internally_consistent();
        }
    }

    /// The `carried` names of `Requested`, for a transition that stays there.
    #[track_caller]
    fn carried_mut(&mut self, via: &str) -> &mut Removals {
        let from = self.state();
        match &mut self.phase {
            Phase::Requested { carried } => carried,
            _ => illegal(from, via),
        }
    }

    /// Requested → Requested: records a round's names before they are
    /// unlinked, so a crash in the middle of the unlinks leaves them known
    /// to the next process (which must make their removal durable).
    ///
    /// # Panics
    /// Outside `Requested`, or if the names would not fit one `Removals`
    /// (cleanup confirms carried names first, see `Partition::begin_attempt`).
    pub fn plan_removals(&mut self, round: &Removals) {
        self.assert_internally_consistent();
        self.carried_mut("plan_removals").extend(round);
        self.assert_internally_consistent();
    }

    /// Requested → Requested: the directories in `dirs` were synced
    /// successfully after every removal recorded in them, so those removals
    /// are durable and need not be carried any more.
    ///
    /// # Panics
    /// Outside `Requested`.
    pub(crate) fn round_confirmed(&mut self, dirs: &[DirKind]) {
        self.assert_internally_consistent();
        let carried = self.carried_mut("round_confirmed");
        for dir in dirs {
            carried.forget(*dir);
        }
        self.assert_internally_consistent();
    }

    /// Requested → FilesDeleted: every dead file was unlinked, each recorded
    /// by `plan_removals` first.
    ///
    /// # Panics
    /// Outside `Requested`.
    pub fn requested_to_files_deleted(&mut self) {
        self.assert_internally_consistent();
        let carried = std::mem::take(self.carried_mut("requested_to_files_deleted"));
        self.phase = Phase::FilesDeleted { removed: carried };
        self.assert_internally_consistent();
    }

    /// FilesDeleted → DirsSynced: `confirmed` are the directories a sync of
    /// *this attempt* confirmed, issued after every change in them. The
    /// removals are durable, so their names are dropped.
    ///
    /// # Panics
    /// Outside `FilesDeleted`, or if a directory that lost a name is not in
    /// `confirmed`.
    pub fn files_deleted_to_dirs_synced(&mut self, confirmed: &BTreeSet<DirKind>) {
        self.assert_internally_consistent();
        let Phase::FilesDeleted { removed } = &self.phase else {
            illegal(self.state(), "files_deleted_to_dirs_synced")
        };
        let unconfirmed: Vec<DirKind> = removed
            .dirs()
            .into_iter()
            .filter(|d| !confirmed.contains(d))
            .collect();
        assert!(
            unconfirmed.is_empty(),
            "DirsSynced with {unconfirmed:?} not confirmed in this attempt"
        );
        self.phase = Phase::DirsSynced;
        self.assert_internally_consistent();
    }

    /// DirsSynced → Applied.
    ///
    /// # Panics
    /// Outside `DirsSynced`.
    pub fn dirs_synced_to_applied(&mut self) {
        self.assert_internally_consistent();
        if self.phase != Phase::DirsSynced {
            illegal(self.state(), "dirs_synced_to_applied");
        }
        self.phase = Phase::Applied;
        self.last_error = None;
        self.assert_internally_consistent();
    }

    /// FilesDeleted or DirsSynced → Requested, for a new attempt that redoes
    /// the round, keeping every name not yet confirmed durable.
    ///
    /// # Panics
    /// From `Requested` (nothing to go back from) or `Applied` (`reopen`).
    pub(crate) fn retry(&mut self) {
        self.assert_internally_consistent();
        let from = self.state();
        let carried = match &mut self.phase {
            Phase::FilesDeleted { removed } => std::mem::take(removed),
            Phase::DirsSynced => Removals::new(),
            Phase::Requested { .. } | Phase::Applied => illegal(from, "retry"),
        };
        self.phase = Phase::Requested { carried };
        self.attempts = self.attempts.saturating_add(1);
        self.assert_internally_consistent();
    }

    /// Applied → Requested: dead files were found again (resurrected by a
    /// power loss that no sync covered, a gap in the model), so cleanup is
    /// owed again.
    ///
    /// # Panics
    /// Outside `Applied`.
    pub(crate) fn reopen(&mut self) {
        self.assert_internally_consistent();
        if self.phase != Phase::Applied {
            illegal(self.state(), "reopen");
        }
        self.phase = Phase::Requested {
            carried: Removals::new(),
        };
        self.attempts = self.attempts.saturating_add(1);
        self.assert_internally_consistent();
    }

    /// Keeps a failed attempt's error (cut to `MAX_ERROR_LEN` bytes).
    ///
    /// # Panics
    /// In `Applied`: nothing can fail there any more.
    pub fn record_error(&mut self, error: &str) {
        self.assert_internally_consistent();
        if self.is_applied() {
            illegal(PurgeState::Applied, "record_error");
        }
        let mut e = error.to_string();
        if e.len() > MAX_ERROR_LEN {
            let mut cut = MAX_ERROR_LEN;
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            e.truncate(cut);
        }
        self.last_error = Some(e);
        self.assert_internally_consistent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(base_offset: u64) -> String {
        crate::layout::segment_name(1, base_offset, crate::layout::LOG_EXT)
    }

    fn names(dir: DirKind, n: &[&str]) -> Removals {
        let mut r = Removals::new();
        for name in n {
            r.insert(dir, name.to_string());
        }
        r
    }

    fn panics(f: impl FnOnce()) -> bool {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
    }

    #[test]
    fn the_only_path_to_applied_is_through_every_state() {
        let mut o = Obligation::request(3);
        assert!(panics(|| o
            .clone()
            .files_deleted_to_dirs_synced(&BTreeSet::new())));
        assert!(panics(|| o.clone().dirs_synced_to_applied()));
        o.plan_removals(&names(DirKind::Consumers, &["7"]));
        o.requested_to_files_deleted();
        assert!(
            panics(|| o.clone().plan_removals(&names(DirKind::Groups, &["1"]))),
            "plans only while Requested"
        );
        assert!(panics(|| o.clone().dirs_synced_to_applied()));
        assert!(
            panics(|| o.clone().files_deleted_to_dirs_synced(&BTreeSet::new())),
            "consumers/ not confirmed yet"
        );
        o.files_deleted_to_dirs_synced(&BTreeSet::from([DirKind::Consumers]));
        assert!(o.removed().is_empty());
        o.dirs_synced_to_applied();
        assert!(o.is_applied());
    }

    #[test]
    fn a_retry_keeps_unconfirmed_names_and_counts_the_attempt() {
        let mut o = Obligation::request(1);
        o.plan_removals(&names(DirKind::Groups, &["1", "2"]));
        o.requested_to_files_deleted();
        o.retry();
        assert_eq!(o.state(), PurgeState::Requested);
        assert_eq!(o.attempts(), 1);
        assert_eq!(o.removed().len(), 2);
        o.requested_to_files_deleted();
        assert!(panics(|| o
            .clone()
            .files_deleted_to_dirs_synced(&BTreeSet::new())));
    }

    #[test]
    fn applied_is_left_only_by_reopen() {
        // Given: an applied obligation.
        let mut o = Obligation::request(1);
        o.requested_to_files_deleted();
        o.files_deleted_to_dirs_synced(&BTreeSet::new());
        o.dirs_synced_to_applied();
        // Then: a retry or an error is a programmer error there...
        assert!(panics(|| o.clone().retry()));
        assert!(panics(|| o.clone().record_error("late")));
        // ...and reopening is the named way back, counted as an attempt.
        o.reopen();
        assert_eq!(o.state(), PurgeState::Requested);
        assert_eq!(o.attempts(), 1);
        assert!(panics(|| o.clone().reopen()), "reopen only from Applied");
        assert!(panics(|| o.clone().retry()), "retry from Requested");
    }

    #[test]
    fn a_confirmed_round_forgets_only_its_directories() {
        let mut o = Obligation::request(2);
        o.plan_removals(&names(DirKind::Segments, &[&segment(0)]));
        o.plan_removals(&names(DirKind::Consumers, &["1"]));
        o.round_confirmed(&[DirKind::Segments]);
        assert_eq!(o.removed().dirs(), vec![DirKind::Consumers]);
    }

    #[test]
    fn a_superseding_obligation_carries_what_is_not_confirmed_and_starts_afresh() {
        let mut o = Obligation::request(2);
        o.plan_removals(&names(DirKind::Segments, &[&segment(0)]));
        o.requested_to_files_deleted();
        o.record_error("sync failed");
        let next = o.superseded_by(3);
        assert_eq!(next.generation(), 3);
        assert_eq!(next.state(), PurgeState::Requested);
        assert_eq!(next.removed(), o.removed());
        assert_eq!((next.attempts(), next.last_error()), (0, None));
        assert!(panics(|| drop(o.superseded_by(2))), "generations only grow");
    }

    #[test]
    fn an_error_is_cut_to_its_bound_on_a_char_boundary() {
        let mut o = Obligation::request(1);
        o.record_error(&"é".repeat(MAX_ERROR_LEN));
        let kept = o.last_error().map_or(0, str::len);
        assert!(
            (MAX_ERROR_LEN - 1..=MAX_ERROR_LEN).contains(&kept),
            "{kept}"
        );
    }
}
