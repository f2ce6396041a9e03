//! Crash-safe purge: the per-partition cleanup obligation and one cleanup attempt.
//!
//! The purge's commit point is the metadata write that bumps the partition's
//! committed generation (engine/purge.rs). From then on recovery and every read
//! ignore older records, so cleanup is only about reclaiming space and
//! keeping dead files from lingering; it can be slow, fail and retry without
//! ever exposing or losing data.
//!
//! Invariants:
//! - The obligation file holds two slots (slots.rs), read only through
//!   `decode_file` (record.rs, the one door from disk).
//! - The file records progress, never a commit: the purge's durable origin is
//!   the committed generation in the metadata, so a missing, older or
//!   unreadable record means "cleanup of the committed generation is owed
//!   from a fresh listing", which is always safe (ADR 0003 §9). The one thing
//!   only the record knows is which names were unlinked: a failed directory
//!   sync may drop those removals while the page cache shows them done, and
//!   then no listing can find them. So the plan (the names of a round) is
//!   written and synced before its first unlink, and so is the record of a
//!   failed attempt (a failed sync of it may evict its pages, which then read
//!   as the disk holds them: the synced plan). Every other write (`Applied`,
//!   a confirmed round) only shortens what a later attempt redoes, and is
//!   not synced; nor is the file's name, since after a power loss a listing
//!   sees every dead file the disk holds. A clean purge of one partition
//!   costs six syncs: the metadata commit (2), the plan (1) and one per
//!   directory (3): every attempt syncs all three, whether it removed a
//!   name from each or not.
//! - Only files *proven* older than the obligation's generation are removed:
//!   segments by their name, offset files by the generation in their newest
//!   valid record. A file of the current generation (a fresh acknowledged
//!   write), an empty file, or an unreadable one is never touched.
//! - A directory counts as synced only if a sync issued after every removal in
//!   it succeeded with no failed sync in between (`DirTracker` redoes removals
//!   a failed sync may have dropped, including removals recorded by an earlier
//!   process in the obligation).
//! - `DirsSynced` is never written by this version: `after_dir_syncs` passes
//!   through it to `Applied` with nothing in between, once all three
//!   directories were confirmed in one attempt. It is read from files older
//!   versions wrote (synced, after those confirmations), so wherever it is
//!   found every dead file's removal is already durable: the next attempt
//!   writes `Applied` without another round (ADR 0003 §3.1, §7). Recovery
//!   that finds dead files anyway redoes the round. `FilesDeleted` is written
//!   only as the record of an attempt that failed once its directory syncs
//!   had begun.
//! - An attempt is a chain of steps taken under the engine lock
//!   (`advance_cleanup`), with waits between them that run without it
//!   (`CleanupWait::perform`: the plan's sync, ADR 0019; the unlinks of the
//!   renamed dead files, ADR 0020; the directories' syncs, ADR 0019). The
//!   engine serves the partition between two steps, so the rename step
//!   checks each planned name again: a consumer may have stored a fresh
//!   offset into a file the scan found dead.
//! - A programmer error (an illegal transition, an obligation missing where
//!   an attempt runs) stops the process; only storage errors are retried.

mod record;
mod removals;
mod site;
mod state;

use std::collections::BTreeSet;
use std::sync::Arc;

use sluice_storage::{DurableFile, DurableStorage, ErrorKind, OpenMode, StorageError};

use super::Partition;
use super::offsets::{OffsetRecord, read_record};
use crate::dirsync::{
    NameChange, OffLock, PendingSync, REDIRTY_SUFFIX, SyncOutcome, repair_redirty_leftovers,
};
use crate::error::{EngineError, Result};
pub use crate::layout::{DirKind, OBLIGATION_FILE};
use crate::layout::{PURGED_SUFFIX, SEGMENT_EXTS, parse_segment_name};
use crate::slots::{Durability, SlotFile, SlotRead};
pub use record::{LoadedObligation, OBLIGATION_LAYOUT, ObligationRecord, decode_file};
pub(crate) use removals::MAX_NAMES_PER_ROUND;
pub use removals::Removals;
pub(crate) use site::FailureSite;
pub use state::{Obligation, PurgeState};

/// Reads a partition's obligation file; also returns the file, opened for
/// writing, for the partition to keep (see `Partition::obligation_file`).
pub(crate) fn load(p: &Partition) -> Result<(LoadedObligation, Option<Box<dyn DurableFile>>)> {
    let file = match p.storage.open(&p.paths.obligation, OpenMode::ReadWrite) {
        Ok(f) => f,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok((LoadedObligation::Missing, None)),
        Err(e) => return Err(e.into()),
    };
    let bytes = OBLIGATION_LAYOUT.read_bytes(file.as_ref())?;
    Ok((decode_file(&bytes), Some(file)))
}

/// What a cleanup attempt waits for between two of its steps: I/O that
/// needs no engine lock (`perform`), whose result is the next step.
pub(crate) enum CleanupWait {
    /// Nothing: the attempt is over, and nothing is owed any more.
    Done,
    /// The plan of the attempt's last round is written; it must be durable
    /// before any of its names is unlinked.
    PlanSync {
        file: Arc<dyn DurableFile>,
        round: Round,
        /// The partition directory's door: the file's sync runs only while
        /// the partition lives (under a file pool, ADR 0018, a closed
        /// descriptor is reopened by path).
        door: OffLock,
    },
    /// Every dead file of the round is renamed to `<name>.purged`; these
    /// unlinks of the renamed files (and of leftovers of earlier attempts)
    /// need no engine lock, since no one else changes those names (ADR 0020).
    Unlinks(Vec<Unlink>),
    /// Every dead name is unlinked; these syncs of the partition's three
    /// directories (in `DirKind::ALL` order) confirm the removals.
    DirSyncs(Vec<PendingSync>),
}

/// One round of an attempt: the names its plan records, and in which form
/// the scan found each dead. A name is recorded by its own (base) name,
/// whether the dead file was found under it or only as the
/// `<name>.purged` an earlier attempt left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Round {
    plan: Removals,
    /// Names whose file under the name itself was found dead.
    in_place: BTreeSet<(DirKind, String)>,
    /// Names whose `<name>.purged` was found.
    leftovers: BTreeSet<(DirKind, String)>,
}

impl Round {
    fn is_empty(&self) -> bool {
        self.plan.is_empty()
    }

    fn add(&mut self, dir: DirKind, name: String, leftover: bool) {
        let set = if leftover {
            &mut self.leftovers
        } else {
            &mut self.in_place
        };
        set.insert((dir, name.clone()));
        self.plan.insert(dir, name);
    }
}

/// An unlink of a renamed dead file, made without the engine lock.
#[derive(Debug)]
pub(crate) struct Unlink {
    dir: DirKind,
    /// `<name>.purged`.
    name: String,
    /// Its directory, bound to the partition's incarnation.
    door: OffLock,
    /// The directory's failed syncs when the unlink was noted: if the count
    /// moves before its report, a failure may have dropped it.
    failures_at_note: u64,
}

/// The step a cleanup attempt takes next, under the engine lock.
pub(crate) enum CleanupStep {
    Begin,
    PlanSynced {
        round: Round,
        synced: std::result::Result<(), StorageError>,
    },
    /// Each unlink with its result.
    Unlinked(Vec<(Unlink, std::result::Result<(), StorageError>)>),
    /// `outcomes` run up to the first sync that did not confirm, included.
    DirsSynced {
        syncs: Vec<PendingSync>,
        outcomes: Vec<SyncOutcome>,
    },
    /// The partition was dropped (deleted) while the wait was pending: the
    /// wait stopped at its first I/O refused (ADR 0022), and the attempt is
    /// over. Never taken by a live partition: the pass drops the job when
    /// it finds the partition gone or another under its key.
    Fenced,
}

/// What a cleanup attempt waits for without the engine lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupPhase {
    /// The plan's file sync.
    PlanSync,
    /// The unlinks of the round's renamed dead files.
    Unlinks,
    /// The syncs of the partition's three directories.
    DirSyncs,
}

impl CleanupWait {
    /// What the attempt waits for (`None` once it is over).
    pub(crate) fn phase(&self) -> Option<CleanupPhase> {
        match self {
            CleanupWait::Done => None,
            CleanupWait::PlanSync { .. } => Some(CleanupPhase::PlanSync),
            CleanupWait::Unlinks(_) => Some(CleanupPhase::Unlinks),
            CleanupWait::DirSyncs(_) => Some(CleanupPhase::DirSyncs),
        }
    }

    /// Performs the wait's I/O (without the engine lock: it touches only the
    /// obligation file's data, the `<name>.purged` files and the directories'
    /// `DirSync`) and returns the step that takes its result. Every I/O goes
    /// through its directory's `OffLock`, so none reaches a directory of a
    /// later incarnation at the same path: once the partition is dropped the
    /// wait stops (`Fenced`). `Done` has nothing to wait for.
    pub(crate) fn perform(self, storage: &dyn DurableStorage) -> CleanupStep {
        match self {
            CleanupWait::Done => unreachable!("a finished attempt waits for nothing"),
            CleanupWait::PlanSync { file, round, door } => match door.run(|_| file.sync()) {
                Some(synced) => CleanupStep::PlanSynced { round, synced },
                None => CleanupStep::Fenced,
            },
            CleanupWait::Unlinks(unlinks) => {
                let mut results = Vec::with_capacity(unlinks.len());
                for u in unlinks {
                    let path = u.door.dir().join(&u.name);
                    match u.door.run(|_| storage.remove_file(&path)) {
                        Some(result) => results.push((u, result)),
                        None => return CleanupStep::Fenced,
                    }
                }
                CleanupStep::Unlinked(results)
            }
            CleanupWait::DirSyncs(syncs) => {
                let mut outcomes = Vec::with_capacity(syncs.len());
                for sync in &syncs {
                    let outcome = sync.run(storage);
                    match outcome {
                        SyncOutcome::Fenced => return CleanupStep::Fenced,
                        SyncOutcome::Synced => outcomes.push(outcome),
                        _ => {
                            outcomes.push(outcome);
                            break;
                        }
                    }
                }
                CleanupStep::DirsSynced { syncs, outcomes }
            }
        }
    }
}

/// The name a dead file is renamed to before its unlink (ADR 0020).
fn purged_name(name: &str) -> String {
    format!("{name}{PURGED_SUFFIX}")
}

/// Whether `name` is one cleanup may remove in `dir`: a segment's, or an
/// offset file's canonical id (so a removed name's length stays bounded).
fn is_cleanup_name(dir: DirKind, name: &str) -> bool {
    match dir {
        DirKind::Segments => {
            parse_segment_name(name).is_some_and(|(_, _, ext)| SEGMENT_EXTS.contains(&ext))
        }
        DirKind::Consumers | DirKind::Groups => {
            name.parse::<u32>().is_ok_and(|id| id.to_string() == name)
        }
    }
}

impl Partition {
    /// Installs the obligation recovery found in `file` (see `load`),
    /// reconciling it with the committed generation, and keeps the file.
    /// Returns whether cleanup is pending.
    pub(crate) fn adopt_obligation(
        &mut self,
        loaded: LoadedObligation,
        file: Option<Box<dyn DurableFile>>,
        stale_found: bool,
    ) -> bool {
        let g = self.generation;
        self.obligation_file = file.map(|file| {
            let file = Arc::<dyn DurableFile>::from(file);
            match &loaded {
                LoadedObligation::Valid {
                    seq,
                    obligation,
                    frame,
                } => {
                    // Read through the page cache: perhaps never on disk.
                    // Only a record that names removals is worth making
                    // durable before the other slot is overwritten (those
                    // names are known only there): it is owed, byte for byte.
                    // One without names (`Applied`, a confirmed round) was
                    // written after its removals were confirmed, and making
                    // it durable again could re-assert a claim recovery is
                    // about to find false (a dead file back after a power
                    // loss: `sim run` seed 57, with the plan's sync waiting
                    // off the engine lock).
                    let owed = (!obligation.removed().is_empty()).then(|| frame.bytes().to_vec());
                    SlotFile::after(OBLIGATION_LAYOUT, file, *seq, owed)
                }
                // No confirmed record: the first write empties the file.
                LoadedObligation::Missing | LoadedObligation::Invalid(_) => {
                    SlotFile::new(OBLIGATION_LAYOUT, file)
                }
            }
        });
        let ob = match loaded {
            LoadedObligation::Missing if g == 0 => None,
            // The purge committed but its obligation never became durable.
            LoadedObligation::Missing => Some(Obligation::request(g)),
            LoadedObligation::Valid { obligation, .. } => {
                if obligation.generation() == g {
                    Some(obligation)
                } else if obligation.generation() < g {
                    Some(obligation.superseded_by(g))
                } else {
                    self.mark_degraded(format!(
                        "obligation file {} names generation {} but the committed generation is {g}",
                        self.paths.obligation.display(),
                        obligation.generation()
                    ));
                    return false;
                }
            }
            // The record holds progress, never a commit (a torn pair of
            // unsynced writes after a power loss reads so): the committed
            // generation's cleanup starts again from a fresh listing, which
            // after a power loss sees every dead file the disk holds.
            LoadedObligation::Invalid(reason) if g > 0 => {
                tracing::warn!(path = %self.paths.obligation.display(), reason, generation = g, "unreadable purge obligation file; its cleanup starts again from a fresh listing");
                Some(Obligation::request(g))
            }
            LoadedObligation::Invalid(reason) => {
                tracing::warn!(path = %self.paths.obligation.display(), reason, "unreadable obligation file with no purge committed; ignored");
                None
            }
        };
        let Some(mut ob) = ob else {
            // Generation 0 never purged: dead files can only be foreign.
            return false;
        };
        // Removals recorded by an earlier process may have been dropped by a
        // failed sync that this process never saw: redo them before the next
        // sync of their directory confirms anything.
        self.note_earlier_removals(ob.removed());
        for dir in ob.removed().dirs() {
            self.tracker_mut(dir).force_redirty();
        }
        if stale_found && crate::teeth::enabled(crate::teeth::Mechanism::ReopenOnStaleFiles) {
            // `Applied` and `DirsSynced` both claim that no dead file's name
            // is durable; dead files found anyway (a gap in the model) mean
            // the round must be done again.
            match ob.state() {
                PurgeState::Applied => {
                    tracing::warn!(partition = %self.key, generation = g, "dead files found after an applied purge; reopening cleanup");
                    ob.reopen();
                }
                PurgeState::DirsSynced => {
                    tracing::warn!(partition = %self.key, generation = g, "dead files found after a purge's directories were synced; redoing cleanup");
                    ob.retry();
                }
                PurgeState::Requested | PurgeState::FilesDeleted => {}
            }
        }
        let pending = !ob.is_applied();
        self.obligation = Some(ob);
        pending
    }

    /// Creates the obligation for a just-committed purge, in memory only:
    /// the metadata commit is its durable origin (recovery makes `Requested`
    /// from the committed generation whatever the file holds), and the names
    /// a superseded obligation carried are in its own record already.
    pub(crate) fn begin_obligation(&mut self, generation: u64) {
        let ob = match self.obligation.take() {
            Some(prev) if !prev.is_applied() => prev.superseded_by(generation),
            _ => Obligation::request(generation),
        };
        self.obligation = Some(ob);
    }

    pub fn obligation(&self) -> Option<&Obligation> {
        self.obligation.as_ref()
    }

    /// Writes the in-memory obligation into the next slot, for a process
    /// that inherits this page cache (see the module comment).
    fn record_obligation(&mut self) -> Result<()> {
        self.write_obligation(false)
    }

    /// Writes the in-memory obligation into the next slot and syncs it: a
    /// plan before its unlinks, or a failed attempt's record (the removals
    /// a failed directory sync may have dropped are named only here).
    fn persist_obligation(&mut self) -> Result<()> {
        self.write_obligation(true)
    }

    fn write_obligation(&mut self, durable: bool) -> Result<()> {
        if self.obligation.is_none() {
            return Ok(());
        }
        let durability = if durable {
            Durability::Synced
        } else {
            Durability::Cached
        };
        self.write_obligation_as(durability)?;
        Ok(())
    }

    /// Writes the in-memory obligation into the next slot and returns the
    /// file, for the caller to sync if the write is to be `durable` (a plan
    /// is synced without the engine lock). Only for a durable write, while a
    /// record read at recovery is owed, is a sync made here: of that record,
    /// before the other slot is overwritten.
    fn write_obligation_slot(&mut self, durable: bool) -> Result<Arc<dyn DurableFile>> {
        let durability = if durable {
            Durability::SyncedByCaller
        } else {
            Durability::Cached
        };
        self.write_obligation_as(durability)
    }

    /// The one write of the obligation file (`slots.rs` keeps its rules:
    /// the owed record first, the first record into an emptied file);
    /// returns the file. `MAX_RECORD_PAYLOAD` bounds every record and is
    /// asserted at compile time to fit a slot.
    fn write_obligation_as(&mut self, durability: Durability) -> Result<Arc<dyn DurableFile>> {
        let Some(ob) = self.obligation.as_ref() else {
            unreachable!("an obligation is written only while one exists");
        };
        let record = ObligationRecord::from(ob);
        let slots = SlotFile::open_kept(
            &mut self.obligation_file,
            self.storage.as_ref(),
            &self.paths.obligation,
            OBLIGATION_LAYOUT,
        )?;
        slots.write(&record, durability)?;
        Ok(slots.file().clone())
    }

    /// Takes one cleanup attempt one step further, under the engine lock:
    /// from its start, or from what its last wait found. Returns what it
    /// waits for next (`perform` it without the lock), or `Done`: nothing
    /// is owed any more (the obligation is `Applied`, or the partition was
    /// never purged). An error is recorded in the obligation (persisted as
    /// a best effort) and returned; the attempt is over and the reconciler
    /// retries.
    pub(crate) fn advance_cleanup(&mut self, step: CleanupStep) -> Result<CleanupWait> {
        let advanced = match step {
            CleanupStep::Begin => self.begin_attempt(),
            CleanupStep::PlanSynced { round, synced } => self.after_plan_sync(round, synced),
            CleanupStep::Unlinked(results) => self.after_unlinks(results),
            CleanupStep::DirsSynced { syncs, outcomes } => self.after_dir_syncs(syncs, outcomes),
            CleanupStep::Fenced => unreachable!(
                "invariant: a cleanup wait of partition {} was fenced while the partition lives",
                self.key
            ),
        };
        advanced.map_err(|e| self.attempt_failed(e))
    }

    /// Records a failed attempt in the obligation and, durably, in its file.
    fn attempt_failed(&mut self, e: EngineError) -> EngineError {
        if let Some(ob) = self.obligation.as_mut() {
            // Only the write of `Applied` itself can fail once it is
            // reached in memory: the obligation is done, the error is that
            // write's, and the next attempt finds nothing owed.
            if !ob.is_applied() {
                ob.record_error(&e.to_string());
            }
        }
        // Keep the failure visible across restarts; if even this write
        // fails, the persisted state is simply older, which is safe.
        if let Err(pe) = self.persist_obligation() {
            tracing::debug!(partition = %self.key, error = %pe, "could not record the cleanup failure");
        }
        e
    }

    /// Notes the removals an earlier attempt recorded (perhaps in an earlier
    /// process) as not known durable, so each directory's tracker redoes
    /// them before its next sync confirms anything: each name and its
    /// `.purged` form, which the attempt may have unlinked instead (ADR
    /// 0020). A tracked change to either is newer than the removal.
    fn note_earlier_removals(&mut self, removed: &Removals) {
        for (dir, names) in removed.iter() {
            let tracker = self.tracker_mut(dir);
            for name in names {
                for name in [name.clone(), purged_name(name)] {
                    if !tracker.is_unconfirmed(&name) {
                        tracker.note(&name, NameChange::Removed);
                    }
                }
            }
        }
    }

    /// Directories the latest cleanup attempt worked on.
    pub(crate) fn cleanup_worked_on(&self) -> Vec<DirKind> {
        self.cleanup_worked_on.iter().copied().collect()
    }

    /// Where a cleanup error happened: the directory or file its failing
    /// storage operation named.
    pub(crate) fn failure_site(&self, e: &EngineError) -> FailureSite {
        let EngineError::Storage(se) = e else {
            return FailureSite::Other;
        };
        if se.path == self.paths.obligation {
            return FailureSite::Obligation;
        }
        for dir in DirKind::ALL {
            let d = self.paths.dir(dir);
            if se.path == d || se.path.parent() == Some(d) {
                return FailureSite::Dir(dir);
            }
        }
        FailureSite::Other
    }

    /// Syncs `dirs` through their trackers on the calling thread (each
    /// redoes what a failed sync may have dropped first), counting them as
    /// worked on: an intermediate round's confirmation, which holds the
    /// engine lock (rare: more than `MAX_NAMES_PER_ROUND` dead names).
    fn sync_dirs(&mut self, dirs: &[DirKind]) -> Result<()> {
        for dir in dirs {
            let storage = self.storage.clone();
            self.cleanup_worked_on.insert(*dir);
            self.tracker_mut(*dir).sync(storage.as_ref())?;
        }
        Ok(())
    }

    /// The first step of an attempt: from `Requested` (or `DirsSynced`)
    /// up to the plan of its last round, written and waiting for its sync.
    fn begin_attempt(&mut self) -> Result<CleanupWait> {
        self.cleanup_worked_on.clear();
        let Some(ob) = self.obligation.as_mut() else {
            return Ok(CleanupWait::Done);
        };
        match ob.state() {
            PurgeState::Applied => return Ok(CleanupWait::Done),
            // A new attempt redoes the round: confirmations of an earlier one
            // count for nothing.
            PurgeState::FilesDeleted => ob.retry(),
            // `Requested`: a round from here. `DirsSynced` (read from a file
            // an older version wrote): the directories are synced already,
            // see just below.
            PurgeState::Requested | PurgeState::DirsSynced => {}
        }
        if self.ob().state() == PurgeState::DirsSynced {
            // Written (by older versions) only after all three directories
            // were confirmed in one attempt, after every change in them:
            // every removal is durable already, and nothing can make a name
            // dead since (a new purge supersedes the obligation). Another
            // round would prove nothing new.
            self.ob_mut().dirs_synced_to_applied();
            self.record_obligation()?;
            return Ok(CleanupWait::Done);
        }
        // Files of a generation below the obligation's are dead.
        let cutoff = self.ob().generation();
        // Names recorded by earlier attempts are not known durable; make sure
        // this directory's tracker redoes them before it next confirms a sync.
        let earlier = self.ob().removed().clone();
        self.note_earlier_removals(&earlier);
        // Remove in rounds of at most MAX_NAMES_PER_ROUND, so the names of one
        // round always fit the obligation's slot.
        loop {
            let (round, more) = self.scan_dead(cutoff)?;
            if round.is_empty() {
                return self.begin_dir_syncs();
            }
            // The obligation holds at most one round: names carried from an
            // earlier attempt (whose directory sync failed) are confirmed
            // before a round that would not fit next to them.
            if self.ob().removed().len_with(&round.plan) > MAX_NAMES_PER_ROUND {
                let dirs = self.ob().removed().dirs();
                self.sync_dirs(&dirs)?;
                self.ob_mut().round_confirmed(&dirs);
                self.record_obligation()?;
            }
            // Plan first, persist, then remove: a crash between two removals
            // leaves every removed name recorded.
            self.ob_mut().plan_removals(&round.plan);
            let persist = crate::teeth::enabled(crate::teeth::Mechanism::PersistPlanBeforeUnlink);
            if !more {
                // The last round's plan is synced without the engine lock.
                if !persist {
                    return self.after_plan_sync(round, Ok(()));
                }
                let file = self.write_obligation_slot(true)?;
                let door = self.root_names.off_lock();
                return Ok(CleanupWait::PlanSync { file, round, door });
            }
            if persist {
                self.persist_obligation()?;
            }
            self.unlink_round(&round, cutoff)?;
            // An intermediate round confirms its removals before the next one,
            // so the recorded names stay bounded.
            let dirs = round.plan.dirs();
            self.sync_dirs(&dirs)?;
            self.ob_mut().round_confirmed(&dirs);
            self.record_obligation()?;
        }
    }

    /// The plan of the last round is durable (or its sync failed): rename
    /// each of its files still dead to `<name>.purged`, here under the engine
    /// lock, and leave their unlinks (the slow part: the kernel frees the
    /// file's blocks) to a wait without it (ADR 0020).
    fn after_plan_sync(
        &mut self,
        round: Round,
        synced: std::result::Result<(), StorageError>,
    ) -> Result<CleanupWait> {
        synced?;
        let cutoff = self.ob().generation();
        // Since the scan, a redo of the engine's may have stopped between
        // its two renames and left a planned name at `<name>.redirty`: move
        // it back first, or the dead file would outlive `Applied` under the
        // leftover name (`sim run` seed 724).
        for dir in round.plan.dirs() {
            self.repair_leftovers(dir)?;
        }
        let mut unlinks = Vec::with_capacity(round.plan.len());
        for (dir, names) in round.plan.iter() {
            let path = self.paths.dir(dir).to_path_buf();
            let door = self.tracker_mut(dir).off_lock();
            for name in names {
                let key = (dir, name.clone());
                let mut renamed = false;
                if round.in_place.contains(&key) && self.still_dead(dir, name, cutoff)? {
                    // Noted before the rename: one that fails may still have
                    // taken effect, and the tracker must then redo it.
                    self.tracker_mut(dir).note(name, NameChange::Removed);
                    self.cleanup_worked_on.insert(dir);
                    match self
                        .storage
                        .rename(&path.join(name), &path.join(purged_name(name)))
                    {
                        Ok(()) => {
                            self.tracker_mut(dir).performed(name);
                            renamed = true;
                        }
                        Err(e) if e.kind == ErrorKind::NotFound => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                if renamed || round.leftovers.contains(&key) {
                    let aside = purged_name(name);
                    let tracker = self.tracker_mut(dir);
                    tracker.note(&aside, NameChange::Removed);
                    unlinks.push(Unlink {
                        dir,
                        door: door.clone(),
                        name: aside,
                        failures_at_note: tracker.directory_failures(),
                    });
                }
            }
        }
        if unlinks.is_empty() {
            return self.begin_dir_syncs();
        }
        Ok(CleanupWait::Unlinks(unlinks))
    }

    /// The renamed files' unlinks ran without the engine lock: note each
    /// again (a sync of the engine's since its first note may have confirmed
    /// it while the file was still there), as performed only if it succeeded
    /// and no sync of the directory failed since the note (one may have
    /// dropped it). Then sync the three directories.
    fn after_unlinks(
        &mut self,
        results: Vec<(Unlink, std::result::Result<(), StorageError>)>,
    ) -> Result<CleanupWait> {
        let mut first_error = None;
        for (unlink, result) in results {
            self.cleanup_worked_on.insert(unlink.dir);
            let tracker = self.tracker_mut(unlink.dir);
            let failures_now = tracker.directory_failures();
            tracker.note(&unlink.name, NameChange::Removed);
            match result {
                Ok(())
                    if failures_now == unlink.failures_at_note
                        || !crate::teeth::enabled(
                            crate::teeth::Mechanism::UnlinkOffLockSeesFailures,
                        ) =>
                {
                    tracker.performed(&unlink.name)
                }
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e.into());
        }
        self.begin_dir_syncs()
    }

    /// Whether a file the scan found dead is dead still. The engine serves
    /// the partition between the steps of an attempt, and a consumer may
    /// have stored a fresh offset into it since; cleanup never removes a
    /// fresh write. Every write of an offset file goes through the store's
    /// entry for its id, so without one the file is as the scan read it;
    /// with one it is read again. A segment's name carries its generation.
    fn still_dead(&self, dir: DirKind, name: &str, cutoff: u64) -> Result<bool> {
        if !crate::teeth::enabled(crate::teeth::Mechanism::RecheckDeadBeforeUnlink) {
            return Ok(true);
        }
        let kind = match dir {
            DirKind::Segments => return Ok(true),
            DirKind::Consumers => super::offsets::OffsetKind::Consumer,
            DirKind::Groups => super::offsets::OffsetKind::Group,
        };
        match name.parse::<u32>() {
            Ok(id) if !self.offsets(kind).has_entry(id) => Ok(true),
            _ => self.is_dead(dir, name, cutoff),
        }
    }

    /// Moves back every `<name>.redirty` in `dir` (a re-dirty stopped between
    /// its renames) and notes the repairs; returns the listing after them.
    fn repair_leftovers(&mut self, dir: DirKind) -> Result<Vec<String>> {
        let path = self.paths.dir(dir);
        let names = match self.storage.list_dir(path) {
            Ok(n) => n,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        if !names.iter().any(|n| n.ends_with(REDIRTY_SUFFIX)) {
            return Ok(names);
        }
        // The tracker still holds the name, so its next sync redoes it.
        let repairs = repair_redirty_leftovers(self.storage.as_ref(), path, &names)?;
        self.tracker_mut(dir).note_repairs(repairs);
        let path = self.paths.dir(dir);
        Ok(self.storage.list_dir(path)?)
    }

    /// Removes an intermediate round's names that are still dead, under the
    /// engine lock (rare: more than `MAX_NAMES_PER_ROUND` dead names), and
    /// the `.purged` leftovers it found.
    fn unlink_round(&mut self, round: &Round, cutoff: u64) -> Result<()> {
        for (dir, names) in round.plan.iter() {
            let path = self.paths.dir(dir).to_path_buf();
            for name in names {
                let key = (dir, name.clone());
                let mut targets = Vec::with_capacity(2);
                if round.in_place.contains(&key) && self.still_dead(dir, name, cutoff)? {
                    targets.push(name.clone());
                }
                if round.leftovers.contains(&key) {
                    targets.push(purged_name(name));
                }
                for target in targets {
                    // Noted before the unlink: an unlink that fails may still
                    // have taken effect, and the tracker must then redo the
                    // removal, not an older change to the name (a `Created`
                    // noted at recovery, whose redo finds nothing to do).
                    self.tracker_mut(dir).note(&target, NameChange::Removed);
                    self.cleanup_worked_on.insert(dir);
                    match self.storage.remove_file(&path.join(&target)) {
                        // Dirty now: the tracker need not redo it.
                        Ok(()) => self.tracker_mut(dir).performed(&target),
                        Err(e) if e.kind == ErrorKind::NotFound => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(())
    }

    /// Every removal is made: the attempt now waits for a sync of all three
    /// directories, begun here (each tracker redoes what a failed sync may
    /// have dropped first). Not only those this attempt removed names from:
    /// a dead file may also have been unlinked by an earlier buffered offset
    /// delete whose directory sync never happened (perhaps in a process that
    /// has since crashed, so no tracker remembers it); `Applied` must mean no
    /// dead file is durable.
    fn begin_dir_syncs(&mut self) -> Result<CleanupWait> {
        // Neither `FilesDeleted` nor `DirsSynced` is written on the way to
        // `Applied`: a record found with the plan (`Requested` and its names)
        // makes the next attempt redo them, which is all either would have
        // saved. `FilesDeleted` reaches the file only as the record of an
        // attempt that fails from here on (`attempt_failed`).
        self.ob_mut().requested_to_files_deleted();
        let storage = self.storage.clone();
        let mut syncs = Vec::with_capacity(DirKind::ALL.len());
        for dir in DirKind::ALL {
            // A directory counts as worked on once its sync (redo included)
            // ran: here if the redo failed, else when the sync reports.
            match self.tracker_mut(dir).begin_sync(storage.as_ref()) {
                Ok(sync) => syncs.push(sync),
                Err(e) => {
                    self.cleanup_worked_on.insert(dir);
                    return Err(e.into());
                }
            }
        }
        Ok(CleanupWait::DirSyncs(syncs))
    }

    /// The directories' syncs ran (up to the first that did not confirm):
    /// `Applied` if all three confirmed what this attempt removed. What was
    /// confirmed is known only here, in this attempt.
    fn after_dir_syncs(
        &mut self,
        syncs: Vec<PendingSync>,
        outcomes: Vec<SyncOutcome>,
    ) -> Result<CleanupWait> {
        debug_assert_eq!(syncs.len(), DirKind::ALL.len());
        let mut confirmed = BTreeSet::new();
        let mut outcomes = outcomes.into_iter();
        for (dir, sync) in DirKind::ALL.into_iter().zip(&syncs) {
            let Some(outcome) = outcomes.next() else {
                unreachable!(
                    "the syncs run up to the first that does not confirm, and that one reports"
                );
            };
            self.cleanup_worked_on.insert(dir);
            self.tracker_mut(dir).finish_sync(sync, outcome)?;
            confirmed.insert(dir);
        }
        self.forget_dead_retention_removals()?;
        self.ob_mut().files_deleted_to_dirs_synced(&confirmed);
        self.ob_mut().dirs_synced_to_applied();
        self.record_obligation()?;
        Ok(CleanupWait::Done)
    }

    /// The obligation an attempt works on.
    fn ob(&self) -> &Obligation {
        match &self.obligation {
            Some(ob) => ob,
            None => unreachable!("a cleanup attempt runs only on a partition with an obligation"),
        }
    }

    fn ob_mut(&mut self) -> &mut Obligation {
        match &mut self.obligation {
            Some(ob) => ob,
            None => unreachable!("a cleanup attempt runs only on a partition with an obligation"),
        }
    }

    /// Up to `MAX_NAMES_PER_ROUND` dead names, and whether more remain.
    fn scan_dead(&mut self, cutoff: u64) -> Result<(Round, bool)> {
        let mut round = Round::default();
        for dir in DirKind::ALL {
            // A re-dirty whose second rename failed left `<name>.redirty`:
            // moved back first, or a dead file under it would be missed here
            // and brought back by the next sync's redo (or the next recovery)
            // after `Applied`.
            let names = self.repair_leftovers(dir)?;
            for name in names {
                let (base, leftover) = match name.strip_suffix(PURGED_SUFFIX) {
                    // Renamed by an earlier attempt: dead whatever it holds.
                    Some(base) if is_cleanup_name(dir, base) => (base.to_string(), true),
                    Some(_) => continue,
                    None if self.is_dead(dir, &name, cutoff)? => (name, false),
                    None => continue,
                };
                if !round.plan.contains(dir, &base) && round.plan.len() == MAX_NAMES_PER_ROUND {
                    return Ok((round, true));
                }
                // A dead name is one of sluice's own, which all fit.
                round.add(dir, base, leftover);
            }
        }
        Ok((round, false))
    }

    /// Whether `name` in `dir` is proven to belong to a generation below `cutoff`.
    fn is_dead(&self, dir: DirKind, name: &str, cutoff: u64) -> Result<bool> {
        match dir {
            DirKind::Segments => Ok(parse_segment_name(name)
                .is_some_and(|(g, _, ext)| g < cutoff && SEGMENT_EXTS.contains(&ext))),
            DirKind::Consumers | DirKind::Groups => {
                // Only names sluice writes (`id.to_string()`): a name such as
                // `0001` or `+1` is foreign, and keeping to canonical names
                // bounds how long a removed name can be.
                if !name.parse::<u32>().is_ok_and(|id| id.to_string() == name) {
                    return Ok(false);
                }
                let path = self.paths.dir(dir).join(name);
                match read_record(self.storage.as_ref(), &path) {
                    Ok(SlotRead::Valid {
                        value: OffsetRecord { generation, .. },
                        ..
                    }) => Ok(generation < cutoff),
                    Ok(SlotRead::Empty | SlotRead::Invalid { .. }) => Ok(false),
                    Err(EngineError::Storage(e)) if e.kind == ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }
}
