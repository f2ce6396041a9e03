//! The retention obligation of one partition as a closed state machine.
//!
//! ```text
//!                 commit(mark)            files_deleted              applied
//!   (none) ──────────────────▶ LowWaterCommitted ──────▶ FilesDeleted ──────▶ Applied
//!                                 ▲    ▲                     │                  │
//!                                 │    └─ retry/next_round ──┘                  │
//!                                 └──────── raised_to(higher mark) ─────────────┘
//!                                          (from any phase)
//! ```
//!
//! Invariants:
//! - Every phase carries the low-water mark it is about, and the mark is
//!   committed (its record written and synced, its name durable) before the
//!   obligation exists: nothing here can claim removals below a mark the disk
//!   may not hold.
//! - Each transition names its source and asserts it; a wrong one is a
//!   programmer error and stops the process (never an error to retry).
//!   `Retention` has no public constructor but `committed`, and its phase
//!   changes only through the transitions, so an illegal phase is
//!   unrepresentable outside this module.
//! - `Applied` means one attempt listed `segments/`, removed every file of
//!   the served generation below the mark, a sync of `segments/` issued
//!   after those removals (with the tracker's redo of any change a failed
//!   sync dropped) succeeded, and the record's list of removals in flight
//!   was cleared.
//! - The mark only grows: `raised_to` asserts it.

/// Where a retention obligation stands, with the mark it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionPhase {
    /// The mark is durable; segment files below it may still be on disk
    /// (they are never served). The next attempt lists and removes them.
    LowWaterCommitted { low_water_mark: u64 },
    /// Every file below the mark was removed (in the page cache); the sync of
    /// `segments/` that makes it durable has not succeeded yet.
    FilesDeleted { low_water_mark: u64 },
    /// The removals are durable: nothing below the mark can come back.
    Applied { low_water_mark: u64 },
}

impl RetentionPhase {
    /// The phase's name as the product shows it (`/status/obligations`
    /// snake-cases it, metrics label it).
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionPhase::LowWaterCommitted { .. } => "LowWaterCommitted",
            RetentionPhase::FilesDeleted { .. } => "FilesDeleted",
            RetentionPhase::Applied { .. } => "Applied",
        }
    }
}

/// A partition's retention obligation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    phase: RetentionPhase,
}

impl Retention {
    /// A mark was just committed (or recovery found files below the
    /// committed one): its cleanup is owed.
    pub(crate) fn committed(low_water_mark: u64) -> Retention {
        assert!(low_water_mark > 0, "invariant: a mark of 0 expires nothing");
        Retention {
            phase: RetentionPhase::LowWaterCommitted { low_water_mark },
        }
    }

    pub fn phase(self) -> RetentionPhase {
        self.phase
    }

    pub fn low_water_mark(self) -> u64 {
        match self.phase {
            RetentionPhase::LowWaterCommitted { low_water_mark }
            | RetentionPhase::FilesDeleted { low_water_mark }
            | RetentionPhase::Applied { low_water_mark } => low_water_mark,
        }
    }

    pub fn is_applied(self) -> bool {
        matches!(self.phase, RetentionPhase::Applied { .. })
    }

    /// A higher mark was committed: more files are owed, and the next attempt
    /// lists the directory afresh, whatever this one had done.
    pub(crate) fn raised_to(self, low_water_mark: u64) -> Retention {
        assert!(
            low_water_mark > self.low_water_mark(),
            "invariant: the low-water mark only grows ({} -> {low_water_mark})",
            self.low_water_mark()
        );
        Retention {
            phase: RetentionPhase::LowWaterCommitted { low_water_mark },
        }
    }

    /// Every file below the mark is removed from the page cache.
    pub(crate) fn files_deleted(self) -> Retention {
        let RetentionPhase::LowWaterCommitted { low_water_mark } = self.phase else {
            panic!("invariant: files_deleted from {:?}", self.phase);
        };
        Retention {
            phase: RetentionPhase::FilesDeleted { low_water_mark },
        }
    }

    /// A sync of `segments/` issued after the removals succeeded.
    pub(crate) fn applied(self) -> Retention {
        let RetentionPhase::FilesDeleted { low_water_mark } = self.phase else {
            panic!("invariant: applied from {:?}", self.phase);
        };
        Retention {
            phase: RetentionPhase::Applied { low_water_mark },
        }
    }

    /// A round's removals are confirmed and its record's list cleared, but
    /// more files lie below the mark than one round records: the next round
    /// lists and removes them.
    pub(crate) fn next_round(self) -> Retention {
        let RetentionPhase::FilesDeleted { low_water_mark } = self.phase else {
            panic!("invariant: next_round from {:?}", self.phase);
        };
        Retention {
            phase: RetentionPhase::LowWaterCommitted { low_water_mark },
        }
    }

    /// The sync failed: under Linux semantics a retried sync proves nothing,
    /// so the next attempt goes back through a fresh listing and removal
    /// (and the tracker redoes the dropped removals before its next sync).
    pub(crate) fn retry(self) -> Retention {
        let RetentionPhase::FilesDeleted { low_water_mark } = self.phase else {
            panic!("invariant: retry from {:?}", self.phase);
        };
        Retention {
            phase: RetentionPhase::LowWaterCommitted { low_water_mark },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_attempt_goes_committed_then_files_deleted_then_applied() {
        let r = Retention::committed(7);
        assert_eq!(
            r.phase(),
            RetentionPhase::LowWaterCommitted { low_water_mark: 7 }
        );
        let r = r.files_deleted();
        assert_eq!(
            r.phase(),
            RetentionPhase::FilesDeleted { low_water_mark: 7 }
        );
        let r = r.applied();
        assert!(r.is_applied());
        assert_eq!(r.low_water_mark(), 7);
    }

    #[test]
    fn a_failed_sync_retries_from_committed_and_a_higher_mark_restarts_the_round() {
        let r = Retention::committed(3).files_deleted().retry();
        assert_eq!(
            r.phase(),
            RetentionPhase::LowWaterCommitted { low_water_mark: 3 }
        );
        let r = r.files_deleted().raised_to(9);
        assert_eq!(
            r.phase(),
            RetentionPhase::LowWaterCommitted { low_water_mark: 9 }
        );
        let r = r.files_deleted().applied().raised_to(12);
        assert!(!r.is_applied());
        assert_eq!(r.low_water_mark(), 12);
    }

    #[test]
    fn a_full_round_goes_on_to_the_next_at_the_same_mark() {
        let r = Retention::committed(600).files_deleted().next_round();
        assert_eq!(
            r.phase(),
            RetentionPhase::LowWaterCommitted {
                low_water_mark: 600
            }
        );
    }

    #[test]
    #[should_panic(expected = "invariant: next_round from")]
    fn a_round_is_not_followed_before_its_files_are_deleted() {
        let _ = Retention::committed(1).next_round();
    }

    #[test]
    #[should_panic(expected = "invariant: applied from")]
    fn applied_straight_from_committed_is_refused() {
        let _ = Retention::committed(1).applied();
    }

    #[test]
    #[should_panic(expected = "invariant: retry from")]
    fn an_applied_obligation_is_not_retried() {
        let _ = Retention::committed(1).files_deleted().applied().retry();
    }

    #[test]
    #[should_panic(expected = "invariant: files_deleted from")]
    fn files_are_not_deleted_twice_without_a_retry() {
        let _ = Retention::committed(1).files_deleted().files_deleted();
    }

    #[test]
    #[should_panic(expected = "only grows")]
    fn the_mark_never_goes_back() {
        let _ = Retention::committed(5).raised_to(5);
    }
}
