//! Consumer offsets and consumer-group offsets of one partition.
//!
//! One file per consumer (or group) in `consumers/` (or `groups/`), named by
//! its numeric id, holding a two-slot record `{generation, offset}`
//! (see `slots.rs`). The two directories are separate stores: syncing one
//! never stands in for the other.
//!
//! Invariants:
//! - The in-memory map holds only offsets of the partition's current
//!   generation. A record of an older generation is never seeded: it means
//!   *no committed offset*.
//! - A store is one positioned write into the slot the newest record does not
//!   occupy; under `persisted` it is acknowledged after the file sync and, if
//!   the file's name is not yet known durable, the directory sync.
//! - Names whose directory sync failed under Linux semantics are re-dirtied
//!   (renamed away and back) before the next sync, because a plain retry
//!   reports success without persisting them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_storage::{DurableFile, DurableStorage, ErrorKind, OpenMode};

use crate::dirsync::{DirTracker, NameChange, repair_redirty_leftovers};
use crate::error::{EngineError, Result};
use crate::frame::Magic;
use crate::slots::{SlotLayout, SlotRead};

pub const OFFSET_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::OFFSET,
    version: 1,
    slot_size: 64,
};

/// Which of the two offset stores.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum OffsetKind {
    Consumer,
    Group,
}

impl OffsetKind {
    pub fn dir_name(self) -> &'static str {
        match self {
            OffsetKind::Consumer => "consumers",
            OffsetKind::Group => "groups",
        }
    }
}

/// The record in each slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffsetRecord {
    /// The purge generation the store was acknowledged under.
    pub generation: u64,
    pub offset: u64,
}

#[derive(Debug)]
struct Entry {
    offset: u64,
    seq: u64,
    file: Box<dyn DurableFile>,
}

/// What recovery found in an offset directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetRecovery {
    pub loaded: u64,
    /// Records of an older generation: ignored, left for purge cleanup.
    pub stale: Vec<String>,
    /// Files with no valid slot, or names sluice does not write.
    pub corrupt: Vec<String>,
    pub foreign: Vec<String>,
}

/// A file's record as read from disk, for recovery and purge cleanup.
pub fn read_record(storage: &dyn DurableStorage, path: &Path) -> Result<SlotRead<OffsetRecord>> {
    let file = storage.open(path, OpenMode::Read)?;
    Ok(OFFSET_LAYOUT.read(file.as_ref())?)
}

#[derive(Debug)]
pub struct OffsetStore {
    storage: Arc<dyn DurableStorage>,
    kind: OffsetKind,
    dir: PathBuf,
    generation: u64,
    offsets: BTreeMap<u32, Entry>,
    names: DirTracker,
}

impl OffsetStore {
    pub fn empty(
        storage: Arc<dyn DurableStorage>,
        kind: OffsetKind,
        dir: &Path,
        generation: u64,
    ) -> Self {
        OffsetStore {
            storage,
            kind,
            dir: dir.to_path_buf(),
            generation,
            offsets: BTreeMap::new(),
            names: DirTracker::new(dir),
        }
    }

    /// Loads every record of `generation`; reports the rest.
    /// Records of a generation below `floor` are stale (ignored). Production
    /// passes `floor == generation`; only the naive purge kept for tests
    /// passes a lower one.
    pub fn recover(
        storage: Arc<dyn DurableStorage>,
        kind: OffsetKind,
        dir: &Path,
        generation: u64,
        floor: u64,
    ) -> Result<(Self, OffsetRecovery)> {
        let mut store = OffsetStore::empty(storage.clone(), kind, dir, generation);
        let mut report = OffsetRecovery::default();
        let mut names = storage.list_dir(dir)?;
        if names
            .iter()
            .any(|n| n.ends_with(crate::dirsync::REDIRTY_SUFFIX))
        {
            repair_redirty_leftovers(storage.as_ref(), dir, &names)?;
            names = storage.list_dir(dir)?;
        }
        for name in names {
            let Ok(id) = name.parse::<u32>() else {
                tracing::warn!(dir = %dir.display(), name, "ignoring a file sluice does not write");
                report.foreign.push(name);
                continue;
            };
            let path = dir.join(&name);
            let file = storage.open(&path, OpenMode::ReadWrite)?;
            match OFFSET_LAYOUT.read::<OffsetRecord>(file.as_ref())? {
                SlotRead::Valid {
                    seq,
                    value,
                    damaged,
                } => {
                    if value.generation < floor {
                        report.stale.push(name);
                        continue;
                    }
                    if value.generation > generation {
                        tracing::warn!(path = %path.display(), record_generation = value.generation, generation, "offset record from a generation never committed; ignored");
                        report.foreign.push(name);
                        continue;
                    }
                    if let Some(e) = damaged.filter(|_| seq > 1) {
                        tracing::debug!(path = %path.display(), error = %e, "older offset slot damaged (torn write); newest slot used");
                    }
                    store.offsets.insert(
                        id,
                        Entry {
                            offset: value.offset,
                            seq,
                            file,
                        },
                    );
                    // Found in the page cache: durable only if some sync covered it.
                    store.names.note(&name, NameChange::Created);
                    report.loaded += 1;
                }
                SlotRead::Empty => {}
                SlotRead::Invalid { first, second } => {
                    tracing::warn!(path = %path.display(), slot0 = %first, slot1 = %second, "corrupt offset record skipped");
                    report.corrupt.push(name);
                }
            }
        }
        if store.names.has_unconfirmed() {
            // An earlier process may have had a directory sync fail (dropping
            // these names' dirty state): redo them before the next sync.
            store.names.force_redirty();
        }
        Ok((store, report))
    }

    pub fn kind(&self) -> OffsetKind {
        self.kind
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn get(&self, id: u32) -> Option<u64> {
        self.offsets.get(&id).map(|e| e.offset)
    }

    pub fn all(&self) -> BTreeMap<u32, u64> {
        self.offsets.iter().map(|(k, e)| (*k, e.offset)).collect()
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Stores `offset` for `id`; `persisted` makes it survive power loss before returning.
    pub fn store(&mut self, id: u32, offset: u64, persisted: bool) -> Result<()> {
        let record = OffsetRecord {
            generation: self.generation,
            offset,
        };
        let path = self.dir.join(id.to_string());
        let previous = self.offsets.get(&id).map(|e| e.offset);
        let (file, seq) = match self.offsets.remove(&id) {
            Some(e) => (e.file, e.seq + 1),
            None => {
                let file = self.storage.open(&path, OpenMode::CreateOrOpen)?;
                // The name may hold an older record (a stale generation, or one
                // deleted under `buffered`): continue its sequence so the new
                // record is the newest slot.
                let seq = match OFFSET_LAYOUT.read::<OffsetRecord>(file.as_ref())? {
                    SlotRead::Valid { seq, .. } => seq + 1,
                    SlotRead::Empty | SlotRead::Invalid { .. } => 1,
                };
                // The name exists now, whatever was recorded before.
                self.names.note(&id.to_string(), NameChange::Created);
                (file, seq)
            }
        };
        // No early return from here on: whatever fails, the entry removed
        // above must be put back from what the file now holds.
        let written = match OFFSET_LAYOUT.write(file.as_ref(), seq, &record) {
            Ok(encoded) => encoded.map_err(|e| EngineError::Internal(e.to_string())),
            Err(e) => Err(e.into()),
        };
        let result = written.and_then(|()| {
            if persisted {
                file.sync()?;
                if self.names.is_unconfirmed(&id.to_string()) {
                    self.names.sync(self.storage.as_ref())?;
                }
            }
            Ok(())
        });
        // Keep the handle and sequence either way: the write may have landed,
        // and the next store must not reuse its slot number.
        let prev = result.as_ref().ok().map(|_| offset);
        match prev {
            Some(o) => {
                self.offsets.insert(
                    id,
                    Entry {
                        offset: o,
                        seq,
                        file,
                    },
                );
            }
            None => {
                // Not acknowledged: memory takes whatever the file's newest
                // valid slot now says (the old value, or the new one if the
                // write landed), never less than disk nor more than written.
                self.reload_after_failure(id, file, seq, previous);
            }
        }
        result
    }

    /// After a failed store, keep whatever the file's newest valid slot says
    /// (the old value, or the new one if the write landed), so memory never
    /// claims less than disk nor more than was written.
    fn reload_after_failure(
        &mut self,
        id: u32,
        file: Box<dyn DurableFile>,
        seq: u64,
        previous: Option<u64>,
    ) {
        let offset = match OFFSET_LAYOUT.read::<OffsetRecord>(file.as_ref()) {
            Ok(SlotRead::Valid { value, .. }) if value.generation == self.generation => {
                Some(value.offset)
            }
            Ok(_) => None,
            // The file cannot even be read back: keep what memory had.
            Err(_) => previous,
        };
        if let Some(offset) = offset {
            self.offsets.insert(id, Entry { offset, seq, file });
        }
    }

    /// Deletes the offset of `id`. `Ok(false)` if it had none.
    pub fn delete(&mut self, id: u32, persisted: bool) -> Result<bool> {
        if !self.offsets.contains_key(&id) {
            return Ok(false);
        }
        let path = self.dir.join(id.to_string());
        // Forget the value only once the unlink happened: a failed unlink
        // leaves the offset on disk, so memory keeps showing it too.
        match self.storage.remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        self.offsets.remove(&id);
        self.names.note(&id.to_string(), NameChange::Removed);
        if persisted {
            self.names.sync(self.storage.as_ref())?;
        }
        Ok(true)
    }

    /// Durably removes whatever `id`'s file holds, whoever wrote it, before the
    /// id gets a new owner: the record of a deleted owner (perhaps a buffered
    /// delete that a power loss undid, or one an earlier process removed but
    /// never synced) must never become the new owner's offset. Returns only
    /// after a directory sync that follows the removal (redone first, since
    /// whether an earlier process's sync of it succeeded is unknown).
    pub fn clear_leftover(&mut self, id: u32) -> Result<()> {
        if let Some(entry) = self.offsets.remove(&id) {
            drop(entry.file);
        }
        let name = id.to_string();
        match self.storage.remove_file(&self.dir.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        self.names.note(&name, NameChange::Removed);
        self.names.force_redirty();
        self.names.sync(self.storage.as_ref())?;
        Ok(())
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Makes every stored offset and every name change durable (a graceful
    /// shutdown's flush of buffered stores and deletes).
    pub fn sync_all(&mut self) -> Result<()> {
        for entry in self.offsets.values() {
            entry.file.sync()?;
        }
        self.names.sync(self.storage.as_ref())?;
        Ok(())
    }

    /// The directory's name tracker, shared with purge cleanup so that a
    /// failed sync by either is known to both.
    pub fn names(&self) -> &DirTracker {
        &self.names
    }

    pub fn names_mut(&mut self) -> &mut DirTracker {
        &mut self.names
    }
}
