//! Test-only switches that turn one safety mechanism off, so a test can show
//! that the simulator's checks catch its absence ("teeth", docs/simulation.md).
//!
//! Invariants:
//! - Without the `teeth` cargo feature, [`enabled`] is a constant `true`: every
//!   call site compiles to its production path and no switch exists. Only the
//!   integration test package (`sluice-integration`) enables the feature, like
//!   `naive-purge` (ADR 0014), so the shipped binary cannot turn a mechanism
//!   off.
//! - Each mechanism has exactly one call site: turning it off changes that one
//!   decision and nothing else.
//! - Switches are per thread: the simulator runs the engine on the calling
//!   thread, so tests running in parallel do not see each other's switches.

/// A safety mechanism that a teeth test may turn off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    /// `DirTracker::sync` redoes a removal a failed directory sync may have
    /// dropped before the next sync confirms it (ADR 0002 §2.4, ADR 0003 P3).
    RedoDroppedRemovals,
    /// Recovery ignores segments and offset records of a generation below
    /// the committed one (ADR 0003 §2).
    GenerationFilter,
    /// Cleanup persists the names it will remove before unlinking them
    /// (`plan_removals`, ADR 0003 §3.1).
    PersistPlanBeforeUnlink,
    /// The first store into an offset file of an older generation replaces
    /// the file whole instead of writing into it (ADR 0008 finding B).
    ReplaceDeadOffsetFile,
    /// Recovery re-dirties the newest segment's recovered tail, so a later
    /// sync really persists it (ADR 0003, the recovered-tail gap).
    RedirtyRecoveredTail,
    /// Under `buffered`, recovery counts no recovered byte of a segment as
    /// carried (dirty or on disk), so the next flush writes it again before
    /// its sync: an earlier process's failed sync may have left it clean in
    /// the page cache and not on disk (session 12, `sim run` seed 2997).
    CarryRecoveredBuffered,
    /// A redo of a removal whose create reported an error after taking
    /// effect removes the empty file it made (`dirsync::redo`; session 12,
    /// `sim run` seed 3535).
    RedoCleansItsLeftover,
    /// After a failed offset write the next write targets the slot that does
    /// not hold the newest acknowledged record (`slots.rs`, issue 12 defect 1).
    OffsetSlotSequence,
    /// A send that tried to start a new segment notes the segment's names
    /// for the next `segments/` sync even when the roll itself failed (its
    /// opens created the files; issue 12, `sim run` seed 3707).
    NoteFailedRollNames,
    /// After a failed segment sync (and before carrying unsure bytes), the
    /// batches not known durable are validated again and the segment is cut
    /// at the first one the kernel evicted (issue 12, `sim run` seed 260).
    RecheckEvictedTail,
    /// A restart re-dirties the name of every deletion the metadata records
    /// before the sync that completes it: the earlier process's removal may
    /// have been dropped by a failed sync (ADR 0015 §4).
    RedoRecordedDeletions,
    /// A restart re-dirties every segment name `retention.lwm` records as
    /// being removed before the next sync of `segments/` counts: the earlier
    /// process's removal may have been dropped by a failed sync while its
    /// page cache hides the name (ADR 0016, crash table row 5).
    RedoRecordedRetention,
    /// A purge cleanup's unlink step checks again, under the engine lock,
    /// that each planned name is still dead: a consumer may have stored a
    /// fresh offset into the file since the scan (ADR 0019, hazard 1).
    RecheckDeadBeforeUnlink,
    /// A directory's tracker takes in a failed sync of the directory it did
    /// not make (a cleanup's, without the engine lock): its unconfirmed
    /// changes are redone before its next sync (ADR 0019, hazard 2).
    SeeOthersSyncFailures,
    /// A redo that fails half way counts as a failed sync of its directory,
    /// so a cleanup's sync begun before it confirms nothing (ADR 0019,
    /// `sim run` seed 35 at harsh rates).
    FailedRedoFailsTheDirectory,
    /// A purge cleanup's unlink of a `<name>.purged`, made without the engine
    /// lock, counts as performed (no redo) only if no sync of the directory
    /// failed between its note and its report (ADR 0020).
    UnlinkOffLockSeesFailures,
    /// A pending sync that succeeded confirms nothing if a failure of its
    /// directory (a failed sync, or a redo that failed half way) came
    /// after it ran and before the tracker took it in (`sim run` seed 234
    /// of session 9).
    KeepNotesAfterALaterFailure,
    /// Work planned for a partition and run without the engine lock (a
    /// cleanup's plan sync, unlinks and directory syncs) does no I/O once
    /// the partition was dropped: a partition created again under the same
    /// id has new directories at the same paths (ADR 0022, issue 27).
    FenceEndedIncarnations,
    /// Recovery that finds a dead file under a purge recorded as done
    /// (`Applied` or `DirsSynced`) reopens the purge, so its cleanup removes
    /// the file: the level-triggered half of "done means removed". A
    /// re-dirty's empty leftover made durable by a power loss is such a file
    /// (`sim run` seeds 2945 and 3363 of session 12).
    ReopenOnStaleFiles,
    /// A consumer-group join does not move a partition whose holder was
    /// served messages it has not committed: the partition is revoked, and
    /// moves once the holder committed them (Iggy's cooperative handover).
    /// Without it the new member is served them again (issue 28).
    RevokeInFlightPartitions,
    /// A deletion round with dead generations reaches `Applied` only after a
    /// fresh listing of each dead generation's prefix, issued after its
    /// deletes, found nothing (`Partition::finish_round`, ADR 0027 §3).
    /// Without it the round applies right after its deletes, whatever the
    /// listing found.
    ListDeadGenerationsBeforeApplied,
    /// Local segments of a tiered partition are released only over segments
    /// whose upload is durably recorded (`Partition::releasable_mark`).
    ReleaseOnlyUploaded,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::RedoDroppedRemovals => "redo-dropped-removals",
            Mechanism::GenerationFilter => "generation-filter",
            Mechanism::PersistPlanBeforeUnlink => "persist-plan-before-unlink",
            Mechanism::ReplaceDeadOffsetFile => "replace-dead-offset-file",
            Mechanism::RedirtyRecoveredTail => "redirty-recovered-tail",
            Mechanism::CarryRecoveredBuffered => "carry-recovered-buffered",
            Mechanism::RedoCleansItsLeftover => "redo-cleans-its-leftover",
            Mechanism::OffsetSlotSequence => "offset-slot-sequence",
            Mechanism::NoteFailedRollNames => "note-failed-roll-names",
            Mechanism::RecheckEvictedTail => "recheck-evicted-tail",
            Mechanism::RedoRecordedDeletions => "redo-recorded-deletions",
            Mechanism::RedoRecordedRetention => "redo-recorded-retention",
            Mechanism::RecheckDeadBeforeUnlink => "recheck-dead-before-unlink",
            Mechanism::SeeOthersSyncFailures => "see-others-sync-failures",
            Mechanism::FailedRedoFailsTheDirectory => "failed-redo-fails-the-directory",
            Mechanism::UnlinkOffLockSeesFailures => "unlink-off-lock-sees-failures",
            Mechanism::KeepNotesAfterALaterFailure => "keep-notes-after-a-later-failure",
            Mechanism::FenceEndedIncarnations => "fence-ended-incarnations",
            Mechanism::ReopenOnStaleFiles => "reopen-on-stale-files",
            Mechanism::RevokeInFlightPartitions => "revoke-in-flight-partitions",
            Mechanism::ListDeadGenerationsBeforeApplied => "list-dead-generations-before-applied",
            Mechanism::ReleaseOnlyUploaded => "release-only-uploaded",
        }
    }

    #[cfg(feature = "teeth")]
    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

#[cfg(feature = "teeth")]
thread_local! {
    static DISABLED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether `mechanism` is on (always, without the `teeth` feature).
#[cfg(not(feature = "teeth"))]
#[inline(always)]
pub(crate) const fn enabled(_mechanism: Mechanism) -> bool {
    true
}

/// Whether `mechanism` is on for this thread.
#[cfg(feature = "teeth")]
pub(crate) fn enabled(mechanism: Mechanism) -> bool {
    DISABLED.with(|d| d.get() & mechanism.bit() == 0)
}

/// Turns `mechanism` off on this thread until the guard is dropped.
#[cfg(feature = "teeth")]
pub fn disable(mechanism: Mechanism) -> Disabled {
    let before = DISABLED.with(|d| {
        let before = d.get();
        d.set(before | mechanism.bit());
        before
    });
    Disabled { before }
}

/// Turns every mechanism on on this thread until the guard is dropped (a
/// control run in the middle of a teeth test).
#[cfg(feature = "teeth")]
pub fn enable_all() -> Disabled {
    let before = DISABLED.with(|d| d.replace(0));
    Disabled { before }
}

/// Restores the switches as they were when dropped.
#[cfg(feature = "teeth")]
#[derive(Debug)]
pub struct Disabled {
    before: u32,
}

#[cfg(feature = "teeth")]
impl Drop for Disabled {
    fn drop(&mut self) {
        DISABLED.with(|d| d.set(self.before));
    }
}
