//! Tracking which names in a directory are not yet durable, and making a
//! directory sync mean what it says under Linux sync-failure semantics.
//!
//! Invariants:
//! - Every create or remove of a name this process performs in the directory
//!   is recorded until a directory sync *issued after it* succeeds.
//! - After a failed directory sync the kernel may have dropped the dirty
//!   entries (fsyncgate), so a successful retry proves nothing. Before the next
//!   sync every unconfirmed change is therefore performed again: a created
//!   name is renamed away and back, a removed name is created and removed.
//!   Only then can the sync confirm them.
//! - A redo never removes a file holding bytes: a removed name that exists
//!   again with content was recreated by a fresh write. An empty file under a
//!   removed name is a redo's own leftover (its `remove_file` failed) or a
//!   write that never landed; removing it loses nothing.
//! - A redo of a removal leaves no name it created: the create that re-dirties
//!   a removed name may report an error after taking effect, and the redo
//!   then removes the empty file it made before reporting that error. Only a
//!   crash between the two calls, or a cleanup that fails too, leaves it (the
//!   name stays noted, and the next redo removes it; a restart lists it, and
//!   a `<name>.purged` is stale to recovery, so its obligation is owed:
//!   ADR 0020).
//! - A change this process performed successfully *after* the last failed
//!   sync (or forced re-dirty) is dirty in the page cache already, so it is
//!   not redone (`performed`): a purge or retention retry that finds a dead
//!   file on disk again after a restart unlinks it once, not once by its own
//!   unlink and again by the redo. Any failed sync, and any forced re-dirty,
//!   makes every unconfirmed change a candidate for redo again.
//! - A purge's cleanup syncs a partition's directories off the engine lock
//!   (`begin_sync` under it, `PendingSync::run` without it, `finish_sync`
//!   under it again), while the engine may change names in the same
//!   directory. Every sync of the directory, by either side, holds the
//!   directory's `DirSync` lock and counts its failures there: a tracker that
//!   finds the count moved since it last looked treats every unconfirmed
//!   change as dropped (a failed sync drops the directory's dirty entries
//!   whoever made them), and a pending sync that finds it moved since its
//!   `begin_sync` confirms nothing. A redo that fails half way counts as
//!   such a failure too: it leaves names noted long ago not as noted. A
//!   pending sync confirms only the changes noted before its `begin_sync`
//!   (each change carries the sequence number of its note), so a change
//!   made while it ran waits for a later sync.
//!   Every name change is made under the engine lock, except purge
//!   cleanup's unlinks of `<name>.purged` (ADR 0020): no one else changes
//!   those names, and cleanup notes each again once its unlink reports, as
//!   performed only if no sync of the directory failed since the note.
//! - A directory's failed sync is seen by every tracker that has
//!   unconfirmed names in it (ADR 0022). A `DirSync` belongs to one
//!   *incarnation* of its directory: the trackers of one partition share
//!   it, and a partition deleted and created again under the same id gets
//!   new ones at the same path. Work without the engine lock resolves its
//!   directory by path when it runs, so it runs only through `OffLock`,
//!   which performs the I/O holding the `DirSync` lock and only while the
//!   incarnation lives; its owner ends it (`end_incarnation`, when the
//!   partition is dropped, under the engine lock) by taking that lock, so an
//!   I/O in progress finishes first, on the old directory, and none starts
//!   after. The path names a new directory only once the old one was
//!   removed by its deletion's cleanup, after the drop: no sync or unlink
//!   planned for one incarnation reaches the next. A tracker of an ended
//!   incarnation is never used again (asserted).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_storage::{DurableStorage, ErrorKind, OpenMode, StorageError};

use crate::teeth::{
    self,
    Mechanism::{
        FailedRedoFailsTheDirectory, FenceEndedIncarnations, KeepNotesAfterALaterFailure,
        RedoCleansItsLeftover, RedoDroppedRemovals, SeeOthersSyncFailures,
    },
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameChange {
    Created,
    Removed,
}

/// Suffix of the temporary name used to re-dirty a created name (spelled
/// in `layout.rs`, like every on-disk name).
pub use crate::layout::REDIRTY_SUFFIX;

/// What every tracker of one directory shares with the cleanups that sync it
/// off the engine lock: held for the length of every sync of the directory,
/// so syncs of it never overlap and a failure is counted before anyone syncs
/// the directory again.
#[derive(Debug, Default)]
pub(crate) struct DirSync {
    /// Failed syncs of the directory since this process started.
    failures: u64,
    /// The incarnation that owns the directory ended (its partition was
    /// dropped): work planned for it does no more I/O, and its trackers are
    /// never used again.
    ended: bool,
}

/// One unconfirmed change to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unconfirmed {
    change: NameChange,
    /// Performed successfully since the last failed sync or forced
    /// re-dirty: dirty in the page cache, so it needs no redo.
    performed: bool,
    /// The sequence number of its note.
    seq: u64,
}

/// The door through which work planned under the engine lock does its I/O
/// without it (a cleanup's syncs and unlinks): bound to the incarnation of
/// the directory it was planned for, never to whatever the path names when
/// it runs.
#[derive(Debug, Clone)]
pub(crate) struct OffLock {
    dir: PathBuf,
    shared: Arc<Mutex<DirSync>>,
}

impl OffLock {
    /// Runs `io` holding the directory's `DirSync` lock, if its incarnation
    /// has not ended; `None` (nothing done) once it has.
    pub(crate) fn run<T>(&self, io: impl FnOnce(&mut DirSync) -> T) -> Option<T> {
        let mut shared = lock(&self.shared);
        if shared.ended && teeth::enabled(FenceEndedIncarnations) {
            return None;
        }
        Some(io(&mut shared))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

#[derive(Debug, Clone)]
pub(crate) struct DirTracker {
    dir: PathBuf,
    unconfirmed: BTreeMap<String, Unconfirmed>,
    redirty: bool,
    /// The next note's sequence number.
    next_seq: u64,
    shared: Arc<Mutex<DirSync>>,
    /// The directory's failure count as of this tracker's last look: a
    /// different count means a sync failed that this tracker did not see
    /// (a cleanup's, off the engine lock).
    seen_failures: u64,
}

/// A sync of a tracker's directory that runs without the engine lock:
/// `DirTracker::begin_sync` makes it, `run` performs it, and
/// `DirTracker::finish_sync` confirms what it covered.
#[derive(Debug, Clone)]
pub(crate) struct PendingSync {
    door: OffLock,
    /// The directory's failure count when the sync was begun (and every
    /// dropped change redone): a different count at `run` means a failure
    /// in between may have dropped what this sync would confirm.
    failures_at_begin: u64,
    /// Changes noted before this sequence number are covered.
    covers_below: u64,
}

/// What a pending sync found.
#[derive(Debug)]
pub(crate) enum SyncOutcome {
    Synced,
    /// Another sync of the directory failed after `begin_sync`: nothing is
    /// confirmed, and the tracker redoes its changes before the next one.
    Overtaken,
    Failed(StorageError),
    /// The directory's incarnation ended before the sync ran (its partition
    /// was deleted): nothing was done, and no step takes this in.
    Fenced,
}

impl PendingSync {
    /// Syncs the directory, holding its `DirSync` lock (never the engine's),
    /// unless its incarnation ended.
    pub(crate) fn run(&self, storage: &dyn DurableStorage) -> SyncOutcome {
        let dir = &self.door.dir;
        self.door
            .run(|shared| {
                if shared.failures != self.failures_at_begin {
                    return SyncOutcome::Overtaken;
                }
                match storage.sync_dir(dir) {
                    Ok(()) => SyncOutcome::Synced,
                    Err(e) => {
                        shared.failures += 1;
                        SyncOutcome::Failed(e)
                    }
                }
            })
            .unwrap_or(SyncOutcome::Fenced)
    }
}

/// A poisoned `DirSync` only means a sync panicked; the count it guards is
/// a plain number that is never left half-updated.
fn lock(shared: &Mutex<DirSync>) -> MutexGuard<'_, DirSync> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl DirTracker {
    pub(crate) fn new(dir: &Path) -> Self {
        DirTracker {
            dir: dir.to_path_buf(),
            unconfirmed: BTreeMap::new(),
            redirty: false,
            next_seq: 0,
            shared: Arc::new(Mutex::new(DirSync::default())),
            seen_failures: 0,
        }
    }

    /// Ends the incarnation of the directory this tracker (and every clone
    /// of it) belongs to: waits for the off-lock I/O in progress through it,
    /// and refuses any later one (see the module doc). Called by the owner
    /// as it is dropped, under the engine lock.
    pub(crate) fn end_incarnation(&self) {
        lock(&self.shared).ended = true;
    }

    /// The door for I/O on this directory without the engine lock.
    pub(crate) fn off_lock(&self) -> OffLock {
        OffLock {
            dir: self.dir.clone(),
            shared: self.shared.clone(),
        }
    }

    /// A tracker is used only while its incarnation lives.
    fn assert_live(&self, shared: &DirSync) {
        assert!(
            !shared.ended,
            "invariant: the tracker of {} is used after its incarnation ended",
            self.dir.display()
        );
    }

    /// Checks what the tracker keeps, after every change to its notes: each
    /// note's sequence number was handed out (a pending sync confirms the
    /// notes below its number, so a number from the future would be
    /// confirmed by a sync begun before the change).
    fn check(&self) {
        debug_assert!(
            self.unconfirmed.values().all(|u| u.seq < self.next_seq),
            "invariant: a note of {} carries a sequence number not handed out",
            self.dir.display()
        );
    }

    /// Records a change to `name` about to be made (or made by an earlier
    /// process): unconfirmed until a sync issued after it succeeds.
    pub(crate) fn note(&mut self, name: &str, change: NameChange) {
        self.assert_live(&lock(&self.shared));
        let seq = self.next_seq;
        self.next_seq += 1;
        self.unconfirmed.insert(
            name.to_string(),
            Unconfirmed {
                change,
                performed: false,
                seq,
            },
        );
        self.check();
    }

    /// The change noted for `name` was just performed successfully by this
    /// process: it is dirty in the page cache, and a sync persists it without
    /// a redo unless a sync fails (or a re-dirty is forced) first.
    pub(crate) fn performed(&mut self, name: &str) {
        if let Some(entry) = self.unconfirmed.get_mut(name) {
            entry.performed = true;
        }
    }

    /// Whether a change to `name` still awaits a directory sync.
    pub(crate) fn is_unconfirmed(&self, name: &str) -> bool {
        self.unconfirmed.contains_key(name)
    }

    /// Failed syncs of the directory so far, by any tracker or cleanup: a
    /// change made off the engine lock is dirty in the page cache only if
    /// this count did not move between its note and its report.
    pub(crate) fn directory_failures(&self) -> u64 {
        lock(&self.shared).failures
    }

    pub(crate) fn has_unconfirmed(&self) -> bool {
        !self.unconfirmed.is_empty()
    }

    /// Treat every unconfirmed change as possibly dropped (used when the
    /// changes were made by an earlier process whose syncs are unknown).
    pub(crate) fn force_redirty(&mut self) {
        self.redirty = true;
        self.forget_performed();
    }

    fn forget_performed(&mut self) {
        for entry in self.unconfirmed.values_mut() {
            entry.performed = false;
        }
    }

    /// Takes in a failure of the directory's sync this tracker has not seen
    /// (`shared` is the directory's `DirSync`, locked by the caller).
    fn catch_up(&mut self, shared: &DirSync) {
        if shared.failures != self.seen_failures && teeth::enabled(SeeOthersSyncFailures) {
            self.seen_failures = shared.failures;
            self.redirty = true;
            self.forget_performed();
        }
    }

    /// Performs again every change a failed sync may have dropped.
    fn redo_dropped(&self, storage: &dyn DurableStorage) -> Result<(), StorageError> {
        if !self.redirty {
            return Ok(());
        }
        for (name, u) in &self.unconfirmed {
            if u.performed {
                continue;
            }
            if u.change == NameChange::Removed && !teeth::enabled(RedoDroppedRemovals) {
                continue;
            }
            redo(storage, &self.dir, name, u.change)?;
        }
        Ok(())
    }

    /// A redo stopped half way (a removed name created again and not
    /// removed, a name renamed aside and not back): names noted long ago are
    /// no longer as noted, with no new note to say so. A sync begun before
    /// (a cleanup's, pending without the engine lock) would confirm them as
    /// noted, so the redo counts as a failure of the directory: pending
    /// syncs confirm nothing, and every tracker redoes its changes.
    fn redo_failed(&mut self, shared: &mut DirSync) {
        if !teeth::enabled(FailedRedoFailsTheDirectory) {
            return;
        }
        shared.failures += 1;
        self.seen_failures = shared.failures;
        self.redirty = true;
        self.forget_performed();
    }

    /// What every sync of the directory does first, holding its `DirSync`:
    /// take in failures this tracker did not see, then redo what they (or
    /// its own) may have dropped.
    fn prepare_sync(
        &mut self,
        shared: &mut DirSync,
        storage: &dyn DurableStorage,
    ) -> Result<(), StorageError> {
        self.assert_live(shared);
        self.catch_up(shared);
        self.redo_dropped(storage)
            .inspect_err(|_| self.redo_failed(shared))
    }

    /// Syncs the directory so every recorded change is durable.
    pub(crate) fn sync(&mut self, storage: &dyn DurableStorage) -> Result<(), StorageError> {
        let shared = self.shared.clone();
        let mut shared = lock(&shared);
        self.prepare_sync(&mut shared, storage)?;
        match storage.sync_dir(&self.dir) {
            Ok(()) => {
                self.redirty = false;
                self.unconfirmed.clear();
                self.check();
                Ok(())
            }
            Err(e) => {
                shared.failures += 1;
                self.seen_failures = shared.failures;
                self.redirty = true;
                self.forget_performed();
                Err(e)
            }
        }
    }

    /// Redoes what a failed sync may have dropped and returns a sync of the
    /// directory, to run without the engine lock, that covers every change
    /// noted so far. Nothing is confirmed until `finish_sync`.
    pub(crate) fn begin_sync(
        &mut self,
        storage: &dyn DurableStorage,
    ) -> Result<PendingSync, StorageError> {
        let shared = self.shared.clone();
        let mut shared = lock(&shared);
        self.prepare_sync(&mut shared, storage)?;
        Ok(PendingSync {
            door: self.off_lock(),
            failures_at_begin: shared.failures,
            covers_below: self.next_seq,
        })
    }

    /// Confirms what `pending` covered if it synced; else every unconfirmed
    /// change is a candidate for redo again. The error is the sync's own,
    /// or one naming the directory when another sync overtook it.
    pub(crate) fn finish_sync(
        &mut self,
        pending: &PendingSync,
        outcome: SyncOutcome,
    ) -> Result<(), StorageError> {
        assert!(
            Arc::ptr_eq(&pending.door.shared, &self.shared),
            "invariant: a pending sync of {} finishes on a tracker of its own incarnation",
            self.dir.display()
        );
        self.assert_live(&lock(&self.shared));
        match outcome {
            SyncOutcome::Synced => {
                // The sync ran with the count unchanged (else it would be
                // `Overtaken`), so it made every change noted before its
                // `begin_sync` durable. If the count moved since, a failure
                // came after it ran: a failed sync (this tracker's own, say,
                // while the cleanup waited for the engine lock) may have
                // dropped the changes noted since, and this tracker has seen
                // it already, so no moved count will tell it again (`sim
                // run` seed 681); or a redo failed half way, leaving a name
                // the sync confirmed no longer as noted (an empty file
                // created again under a removed name: seed 234 of session
                // 9). Then nothing is cleared: every change stays to be
                // redone and confirmed by the next sync.
                let unchanged = lock(&self.shared).failures == pending.failures_at_begin;
                if unchanged || !teeth::enabled(KeepNotesAfterALaterFailure) {
                    self.unconfirmed
                        .retain(|_, u| u.seq >= pending.covers_below);
                }
                if unchanged {
                    self.redirty = false;
                }
                Ok(())
            }
            SyncOutcome::Overtaken => {
                self.redirty = true;
                self.forget_performed();
                Err(
                    StorageError::new(sluice_storage::OpKind::SyncDir, &self.dir, ErrorKind::Io)
                        .with_detail("another sync of the directory failed while this one waited"),
                )
            }
            SyncOutcome::Failed(e) => {
                self.redirty = true;
                self.forget_performed();
                Err(e)
            }
            // `assert_live` above: a live tracker's syncs are never fenced.
            SyncOutcome::Fenced => unreachable!(
                "invariant: a fenced sync of {} reached a live tracker",
                self.dir.display()
            ),
        }
    }
}

/// Removes the tree at `path` (a deleted or leftover stream, topic or
/// partition directory). An empty file there is a redo's own leftover: `redo`
/// re-dirties a removed directory's name by creating and removing a file
/// under it, and a crash between the two leaves the file, which
/// `remove_dir_all` refuses (`ENOTDIR`) forever.
pub(crate) fn remove_dir_or_file(
    storage: &dyn DurableStorage,
    path: &Path,
) -> Result<(), StorageError> {
    match storage.remove_dir_all(path) {
        Err(e) if e.kind == ErrorKind::NotADirectory => storage.remove_file(path),
        other => other,
    }
}

/// Performs a name change again so it is dirty in the page cache.
fn redo(
    storage: &dyn DurableStorage,
    dir: &Path,
    name: &str,
    change: NameChange,
) -> Result<(), StorageError> {
    let path = dir.join(name);
    match change {
        NameChange::Created => {
            let aside = dir.join(format!("{name}{REDIRTY_SUFFIX}"));
            match storage.rename(&path, &aside) {
                Ok(()) => storage.rename(&aside, &path),
                // An earlier redo stopped between its two renames (the second
                // failed): finish it. Neither name: removed again since, so
                // there is nothing to make durable.
                Err(e) if e.kind == ErrorKind::NotFound => match storage.rename(&aside, &path) {
                    Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
                    other => other,
                },
                Err(e) => Err(e),
            }
        }
        NameChange::Removed => match storage.open(&path, OpenMode::CreateNew) {
            Ok(file) => {
                drop(file);
                storage.remove_file(&path)
            }
            // Either created again since (a fresh write: not ours to
            // remove), or left by an earlier redo whose `remove_file` failed.
            Err(e) if e.kind == ErrorKind::AlreadyExists => remove_if_empty(storage, &path),
            Err(e) => {
                // A create that reports an error may have taken effect (the
                // kernel made the entry, then failed): the redo would stop
                // with an empty file under a removed name, and a power loss
                // before the next redo could make it durable, a name created
                // from nothing next to an obligation that reads `Applied`
                // (`sim run` seed 3535 of session 12: an empty
                // `<name>.purged`). So the redo cleans up after itself,
                // under the same rule as above; if that fails too, the name
                // stays noted and the next redo finds the empty file. The
                // create's error is the one reported.
                if teeth::enabled(RedoCleansItsLeftover)
                    && let Err(cleanup) = remove_if_empty(storage, &path)
                    && cleanup.kind != ErrorKind::NotFound
                {
                    tracing::debug!(path = %path.display(), error = %cleanup, "a failed redo's leftover is removed by the next redo");
                }
                Err(e)
            }
        },
    }
}

/// Removes the file at `path` if it is empty. An empty file under a removed
/// name holds nothing anyone acknowledged (every record write lands before
/// its acknowledgement): it is a redo's own leftover, and it must go, or it
/// would block every later redo and the dropped removal would never become
/// durable. A file with bytes was created again since by a fresh write, and
/// is not the redo's to remove.
fn remove_if_empty(storage: &dyn DurableStorage, path: &Path) -> Result<(), StorageError> {
    let file = storage.open(path, OpenMode::Read)?;
    if file.len()? == 0 {
        drop(file);
        storage.remove_file(path)
    } else {
        Ok(())
    }
}

/// Recovery: a crash between the two renames of a re-dirty leaves
/// `name.redirty`; move it back (or drop it if `name` exists again).
/// Returns the name changes made, for the caller's tracker to note: they are
/// as undurable as any other (a failed sync of the directory drops them, and
/// a dead file durable under the leftover name would outlive an `Applied`).
pub(crate) fn repair_redirty_leftovers(
    storage: &dyn DurableStorage,
    dir: &Path,
    names: &[String],
) -> Result<Vec<(String, NameChange)>, StorageError> {
    let mut changes = Vec::new();
    for leftover in names.iter().filter(|n| n.ends_with(REDIRTY_SUFFIX)) {
        let base = &leftover[..leftover.len() - REDIRTY_SUFFIX.len()];
        let from = dir.join(leftover);
        if names.iter().any(|n| n == base) {
            storage.remove_file(&from)?;
        } else {
            storage.rename(&from, &dir.join(base))?;
            changes.push((base.to_string(), NameChange::Created));
        }
        changes.push((leftover.clone(), NameChange::Removed));
        tracing::info!(dir = %dir.display(), name = base, "repaired an interrupted re-dirty rename");
    }
    Ok(changes)
}

impl DirTracker {
    /// Notes the changes a repair made (see [`repair_redirty_leftovers`]);
    /// they are redone before the next sync confirms them.
    pub(crate) fn note_repairs(&mut self, changes: Vec<(String, NameChange)>) {
        if changes.is_empty() {
            return;
        }
        for (name, change) in changes {
            self.note(&name, change);
        }
        self.force_redirty();
    }
}
