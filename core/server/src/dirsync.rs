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
//! - A change this process performed successfully *after* the last failed
//!   sync (or forced re-dirty) is dirty in the page cache already, so it is
//!   not redone (`performed`): a purge or retention retry that finds a dead
//!   file on disk again after a restart unlinks it once, not once by its own
//!   unlink and again by the redo. Any failed sync, and any forced re-dirty,
//!   makes every unconfirmed change a candidate for redo again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice_storage::{DurableStorage, ErrorKind, OpenMode, StorageError};

use crate::teeth::{self, Mechanism::RedoDroppedRemovals};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameChange {
    Created,
    Removed,
}

/// Suffix of the temporary name used to re-dirty a created name.
pub const REDIRTY_SUFFIX: &str = ".redirty";

#[derive(Debug, Clone)]
pub(crate) struct DirTracker {
    dir: PathBuf,
    /// Each unconfirmed change, and whether it was performed successfully
    /// since the last failed sync or forced re-dirty (then it needs no redo).
    unconfirmed: BTreeMap<String, (NameChange, bool)>,
    redirty: bool,
}

impl DirTracker {
    pub(crate) fn new(dir: &Path) -> Self {
        DirTracker {
            dir: dir.to_path_buf(),
            unconfirmed: BTreeMap::new(),
            redirty: false,
        }
    }

    /// Records a change to `name` about to be made (or made by an earlier
    /// process): unconfirmed until a sync issued after it succeeds.
    pub(crate) fn note(&mut self, name: &str, change: NameChange) {
        self.unconfirmed.insert(name.to_string(), (change, false));
    }

    /// The change noted for `name` was just performed successfully by this
    /// process: it is dirty in the page cache, and a sync persists it without
    /// a redo unless a sync fails (or a re-dirty is forced) first.
    pub(crate) fn performed(&mut self, name: &str) {
        if let Some(entry) = self.unconfirmed.get_mut(name) {
            entry.1 = true;
        }
    }

    /// Whether a change to `name` still awaits a directory sync.
    pub(crate) fn is_unconfirmed(&self, name: &str) -> bool {
        self.unconfirmed.contains_key(name)
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
            entry.1 = false;
        }
    }

    /// Syncs the directory so every recorded change is durable.
    pub(crate) fn sync(&mut self, storage: &dyn DurableStorage) -> Result<(), StorageError> {
        if self.redirty {
            for (name, (change, performed)) in &self.unconfirmed {
                if *performed {
                    continue;
                }
                if *change == NameChange::Removed && !teeth::enabled(RedoDroppedRemovals) {
                    continue;
                }
                redo(storage, &self.dir, name, *change)?;
            }
        }
        match storage.sync_dir(&self.dir) {
            Ok(()) => {
                self.redirty = false;
                self.unconfirmed.clear();
                Ok(())
            }
            Err(e) => {
                self.redirty = true;
                self.forget_performed();
                Err(e)
            }
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
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                // Either created again since (a fresh write: not ours to
                // remove), or left by an earlier redo whose `remove_file`
                // failed. An empty file holds nothing anyone acknowledged
                // (every record write lands before its acknowledgement), so
                // it is ours: remove it, or it would block every later redo
                // and the dropped removal would never become durable.
                let file = storage.open(&path, OpenMode::Read)?;
                if file.len()? == 0 {
                    drop(file);
                    storage.remove_file(&path)
                } else {
                    Ok(())
                }
            }
            Err(e) => Err(e),
        },
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
