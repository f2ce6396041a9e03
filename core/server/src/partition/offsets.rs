//! Consumer offsets and consumer-group offsets of one partition.
//!
//! One file per consumer (or group) in `consumers/` (or `groups/`), named by
//! its numeric id, holding a two-slot record `{generation, offset}`
//! (see `slots.rs`), where a deleted offset is a *tombstone* (`offset:
//! None`). The two directories are separate stores: syncing one never stands
//! in for the other.
//!
//! Invariants:
//! - The in-memory map holds only records of the partition's current
//!   generation. A record of an older generation is never seeded: it means
//!   *no committed offset*.
//! - This module never unlinks a file that may hold a live record. A delete
//!   writes a tombstone (one positioned write, and under `persisted` a file
//!   sync), so only purge cleanup, which records every name before removing
//!   it, takes names away: an unlink recorded nowhere could be dropped by a
//!   failed directory sync and come back after a purge has applied (ADR 0008).
//! - A new generation's record is never written into a file whose newest
//!   record is older (or unreadable): under Linux a failed file sync would
//!   leave the disk holding the dead record while the page cache shows the
//!   live one, and cleanup, reading the cache, would keep it. Such a file is
//!   replaced whole: the record goes into `{id}.tmp`, which is renamed over it.
//! - A store is one positioned write into the slot the newest record does not
//!   occupy; under `persisted` it is acknowledged after the file sync and, if
//!   the file's name is not yet known durable, the directory sync.
//! - That slot never holds the newest *durable* record: memory's sequence
//!   number is always the newest valid slot's (after a failed write too, so
//!   the next write goes where the failed one went), and under `persisted` a
//!   newest record not known to be on disk (a failed write or sync, or one
//!   recovered from the page cache) is written again and synced before the
//!   other slot is overwritten. Otherwise a failed store followed by a torn
//!   one could leave only an older record than the one acknowledged. Each
//!   entry's `SlotFile` (`slots.rs`) keeps that rule; this module decides
//!   what is owed: every record recovered or read back after a failure.
//! - A delete answers from memory only when memory knows the file: no entry
//!   means no record of this generation on it, and a failed write that could
//!   not be read back leaves its entry marked in doubt, so an acknowledged
//!   delete always writes a tombstone over a value a failed store may have
//!   left (a crash would otherwise bring that value back).
//! - Names whose directory sync failed under Linux semantics are re-dirtied
//!   (renamed away and back) before the next sync, because a plain retry
//!   reports success without persisting them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_storage::{DurableFile, DurableStorage, ErrorKind, OpenMode};

use crate::dirsync::{DirTracker, NameChange, repair_redirty_leftovers};
use crate::error::Result;
use crate::frame::Magic;
use crate::layout::REPLACE_SUFFIX;
use crate::slots::{Durability, SlotFile, SlotLayout, SlotRead};
use crate::teeth::{
    self,
    Mechanism::{OffsetSlotSequence, ReplaceDeadOffsetFile},
};

pub const OFFSET_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::OFFSET,
    // 2: `offset` became optional (tombstones).
    version: 2,
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

/// The record in each slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffsetRecord {
    /// The purge generation the store (or delete) was acknowledged under.
    pub generation: u64,
    /// The stored offset; `None` is a tombstone (the offset was deleted).
    pub offset: Option<u64>,
}

#[derive(Debug)]
struct Entry {
    /// What the file's newest record says; `None` is a tombstone.
    offset: Option<u64>,
    /// The file, its newest record's number, and whether that record is
    /// owed: not known to be on disk (recovered from the page cache, or its
    /// write or sync failed), so written again before the other slot is.
    slots: SlotFile<Box<dyn DurableFile>>,
    /// A failed write whose outcome could not be read back: the file's
    /// newest record may be the one that write tried, not `offset`. Memory
    /// serves `offset` (the failed call was never acknowledged), but a delete
    /// must not answer from memory alone: a tombstone goes over either.
    write_in_doubt: bool,
}

impl Entry {
    /// Memory's record `{generation, offset}` as the file's newest, number
    /// `seq`, read back from the page cache: not known to be on disk, so
    /// owed. The owed frame is that record encoded again, the bytes the
    /// file holds for it.
    fn unsynced(
        generation: u64,
        offset: Option<u64>,
        seq: u64,
        file: Box<dyn DurableFile>,
    ) -> Entry {
        let owed =
            (seq > 0).then(|| OFFSET_LAYOUT.frame(seq, &OffsetRecord { generation, offset }));
        Entry {
            offset,
            slots: SlotFile::after(OFFSET_LAYOUT, file, seq, owed),
            write_in_doubt: false,
        }
    }

    /// A file with no record (`fresh`: just created, empty): the next write
    /// is record 1.
    fn empty(file: Box<dyn DurableFile>, fresh: bool) -> Entry {
        Entry {
            offset: None,
            slots: if fresh {
                SlotFile::created(OFFSET_LAYOUT, file)
            } else {
                SlotFile::new(OFFSET_LAYOUT, file)
            },
            write_in_doubt: false,
        }
    }

    /// What memory knows after a failed write it could not read back: the
    /// record it had (`seq` 0 if none), and that the file may hold another,
    /// which the next write covers (with `seq` 0, never truncates away).
    fn in_doubt(
        generation: u64,
        offset: Option<u64>,
        seq: u64,
        file: Box<dyn DurableFile>,
    ) -> Entry {
        Entry {
            write_in_doubt: true,
            ..Entry::unsynced(generation, offset, seq, file)
        }
    }

    /// Whether the file is known to hold no offset for this generation (a
    /// tombstone, durable where `persisted` asks for it), so a delete has
    /// nothing to write.
    fn known_deleted(&self, persisted: bool) -> bool {
        self.offset.is_none() && !self.write_in_doubt && (!self.slots.owes() || !persisted)
    }
}

/// What recovery found in an offset directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetRecovery {
    pub(crate) loaded: u64,
    /// Records of an older generation: ignored, left for purge cleanup.
    pub stale: Vec<String>,
    /// Files with no valid slot, or names sluice does not write.
    pub corrupt: Vec<String>,
    pub(crate) foreign: Vec<String>,
    /// Ids whose file is on disk but whom the metadata no longer names (a
    /// deleted group's): never loaded, left to a delete obligation.
    pub orphans: Vec<u32>,
}

/// A file's record as read from disk, for recovery and purge cleanup.
pub(crate) fn read_record(
    storage: &dyn DurableStorage,
    path: &Path,
) -> Result<SlotRead<OffsetRecord>> {
    let file = storage.open(path, OpenMode::Read)?;
    Ok(OFFSET_LAYOUT.read(file.as_ref())?)
}

#[derive(Debug)]
pub(crate) struct OffsetStore {
    storage: Arc<dyn DurableStorage>,
    dir: PathBuf,
    generation: u64,
    offsets: BTreeMap<u32, Entry>,
    names: DirTracker,
}

/// The open files of a history a purge replaced (see
/// `OffsetStore::restart_at`): closed when dropped.
#[derive(Debug)]
pub(crate) struct RetiredEntries {
    _files: BTreeMap<u32, Entry>,
}

impl OffsetStore {
    /// Starts the empty store of `generation` in place (a purge's commit)
    /// and hands back the replaced one's open files. The directory's tracker
    /// is kept: its unconfirmed changes happened, whatever the generation.
    pub(crate) fn restart_at(&mut self, generation: u64) -> RetiredEntries {
        debug_assert!(generation > self.generation, "generations only grow");
        self.generation = generation;
        RetiredEntries {
            _files: std::mem::take(&mut self.offsets),
        }
    }

    pub(crate) fn empty(storage: Arc<dyn DurableStorage>, dir: &Path, generation: u64) -> Self {
        OffsetStore {
            storage,
            dir: dir.to_path_buf(),
            generation,
            offsets: BTreeMap::new(),
            names: DirTracker::new(dir),
        }
    }

    /// Loads every record of `generation` of an id in `live` (every id when
    /// `None`); reports the rest. Records of a generation below `floor` are
    /// stale (ignored). Production passes `floor == generation`; only the
    /// naive purge kept for tests passes a lower one.
    pub(crate) fn recover(
        storage: Arc<dyn DurableStorage>,
        dir: &Path,
        generation: u64,
        floor: u64,
        live: Option<&BTreeSet<u32>>,
    ) -> Result<(Self, OffsetRecovery)> {
        let mut store = OffsetStore::empty(storage.clone(), dir, generation);
        let mut report = OffsetRecovery::default();
        let mut names = storage.list_dir(dir)?;
        if names
            .iter()
            .any(|n| n.ends_with(crate::dirsync::REDIRTY_SUFFIX))
        {
            let repairs = repair_redirty_leftovers(storage.as_ref(), dir, &names)?;
            store.names.note_repairs(repairs);
            names = storage.list_dir(dir)?;
        }
        for name in names {
            if let Some(id) = name.strip_suffix(REPLACE_SUFFIX)
                && id.parse::<u32>().is_ok()
            {
                // A replacing store that never reached its rename: never
                // acknowledged, never read. Removing it loses nothing, and if
                // a power loss brings it back it is removed again here.
                match storage.remove_file(&dir.join(&name)) {
                    Ok(()) => {}
                    Err(e) if e.kind == ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            if name
                .strip_suffix(crate::layout::PURGED_SUFFIX)
                .is_some_and(|id| id.parse::<u32>().is_ok())
            {
                // Renamed by purge cleanup before its unlink (ADR 0020): dead
                // whatever it holds; the pending cleanup removes it.
                report.stale.push(name);
                continue;
            }
            let Ok(id) = name.parse::<u32>() else {
                tracing::warn!(dir = %dir.display(), name, "ignoring a file sluice does not write");
                report.foreign.push(name);
                continue;
            };
            if live.is_some_and(|live| !live.contains(&id)) {
                // Recovery filters by commit: a deleted owner's file is
                // garbage whatever it holds (a delete obligation removes it).
                report.orphans.push(id);
                continue;
            }
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
                    if value.offset.is_some() {
                        report.loaded += 1;
                    }
                    store
                        .offsets
                        .insert(id, Entry::unsynced(generation, value.offset, seq, file));
                    // Found in the page cache: durable only if some sync covered it.
                    store.names.note(&name, NameChange::Created);
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

    /// Whether this generation has an entry for `id`: a record stored since
    /// the store was made (a failed or in-doubt one included) or recovered.
    /// Without one, `id`'s file is as the last reading of it found it, since
    /// every write of the file goes through an entry.
    pub(crate) fn has_entry(&self, id: u32) -> bool {
        self.offsets.contains_key(&id)
    }

    pub(crate) fn get(&self, id: u32) -> Option<u64> {
        self.offsets.get(&id).and_then(|e| e.offset)
    }

    /// The highest stored offset, if any.
    pub(crate) fn highest(&self) -> Option<u64> {
        self.offsets.values().filter_map(|e| e.offset).max()
    }

    /// Stores `offset` for `id`; `persisted` makes it survive power loss before returning.
    pub(crate) fn store(&mut self, id: u32, offset: u64, persisted: bool) -> Result<()> {
        self.write_record(id, Some(offset), persisted)
    }

    /// Deletes the offset of `id` by writing a tombstone; `persisted` makes
    /// the deletion survive power loss before returning. `Ok(false)` if it
    /// had none.
    pub(crate) fn delete(&mut self, id: u32, persisted: bool) -> Result<bool> {
        let had = match self.offsets.get(&id) {
            // No record of this generation: nothing to delete. (A failed
            // write that could not be read back leaves an entry in doubt,
            // so memory's absence is knowledge.)
            None => return Ok(false),
            Some(e) if e.known_deleted(persisted) => return Ok(false),
            // A tombstone not known on disk (an earlier delete failed, or it
            // was recovered from the page cache), or a failed store's record
            // that may be on the file: write the tombstone, or a crash could
            // bring an offset back after this answer.
            Some(e) => e.offset.is_some(),
        };
        self.write_record(id, None, persisted)?;
        Ok(had)
    }

    /// Removes `id`'s file (a deleted owner's) and makes the removal durable:
    /// a delete obligation's step in this directory. Memory forgets the id
    /// first; the removal is noted in the directory's one tracker (shared
    /// with purge cleanup), so a failed sync by anyone is redone before the
    /// next sync counts it durable.
    /// `redo`: an earlier process may have removed the name and failed the
    /// sync (its page cache no longer shows it), so the removal is performed
    /// again before this sync.
    pub(crate) fn remove_durably(&mut self, id: u32, redo: bool) -> Result<()> {
        self.offsets.remove(&id);
        let name = id.to_string();
        let removed_now = match self.storage.remove_file(&self.dir.join(&name)) {
            Ok(()) => true,
            // Removed by an earlier attempt, whose sync may have failed: the
            // tracker (noting it again below) redoes it before syncing.
            Err(e) if e.kind == ErrorKind::NotFound => false,
            Err(e) => return Err(e.into()),
        };
        self.names.note(&name, NameChange::Removed);
        // The owner's other names: a re-dirty's leftover (a failed second
        // rename: it holds the record; `sim run` seed 610) and a replacing
        // store's temporary file go with it.
        for suffix in [crate::dirsync::REDIRTY_SUFFIX, REPLACE_SUFFIX] {
            let other = format!("{name}{suffix}");
            match self.storage.remove_file(&self.dir.join(&other)) {
                Ok(()) => self.names.note(&other, NameChange::Removed),
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        // A removal made just now is dirty already; one an earlier process
        // made (and perhaps lost to a failed sync) is performed again.
        if redo && !removed_now {
            self.names.force_redirty();
        }
        self.names.sync(self.storage.as_ref())?;
        Ok(())
    }

    /// Writes `offset` (a value, or a tombstone) as `id`'s newest record.
    fn write_record(&mut self, id: u32, offset: Option<u64>, persisted: bool) -> Result<()> {
        let record = OffsetRecord {
            generation: self.generation,
            offset,
        };
        if !self.offsets.contains_key(&id) {
            let base = self.open_for_new_record(id)?;
            self.offsets.insert(id, base);
        }
        // The entry stays in the map while its file is written: a store
        // looks it up, where taking it out and putting it back cost about 5%
        // of a buffered store. A failure takes it out and rebuilds it below.
        let Some(entry) = self.offsets.get_mut(&id) else {
            panic!("invariant: the offset entry of {id} was inserted just above");
        };
        let (previous, base_seq) = (entry.offset, entry.slots.seq());
        let (storage, names) = (&self.storage, &mut self.names);
        // No early return from here on: whatever fails, the entry must be
        // rebuilt from what the file now holds.
        let result = (|| -> Result<()> {
            if !persisted {
                entry.slots.write(&record, Durability::Cached)?;
                return Ok(());
            }
            // An owed newest record (its write or sync failed, or it was
            // recovered from the page cache) is made durable first: the
            // other slot, which this write overwrites, may hold the newest
            // durable one.
            entry.slots.write(&record, Durability::Synced)?;
            // A tombstone needs no durable name: if the name is lost, so is
            // the offset it deletes. (The name is formatted only here: a
            // buffered store never needs it.)
            if offset.is_some() && names.is_unconfirmed(&id.to_string()) {
                names.sync(storage.as_ref())?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                entry.offset = offset;
                entry.write_in_doubt = false;
            }
            // Not acknowledged: memory takes whatever the file's newest valid
            // slot now says (the old value, or the new one if the write
            // landed), never less than disk nor more than written.
            Err(_) => {
                if let Some(failed) = self.offsets.remove(&id) {
                    self.reload_after_failure(id, failed.slots.into_file(), base_seq, previous);
                }
            }
        }
        result
    }

    /// The entry the first record this process writes for `id` builds on:
    /// `seq` 0 for a file with no record. A file whose newest record belongs
    /// to an older generation (or cannot be read) is dead or foreign: it is
    /// replaced whole, never written into (see the module invariants).
    fn open_for_new_record(&mut self, id: u32) -> Result<Entry> {
        let name = id.to_string();
        let path = self.dir.join(&name);
        let existing = match self.storage.open(&path, OpenMode::ReadWrite) {
            Ok(file) => Some(file),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let entry = match existing {
            None => Entry::empty(self.storage.open(&path, OpenMode::CreateNew)?, true),
            Some(file) => match OFFSET_LAYOUT.read::<OffsetRecord>(file.as_ref())? {
                // Never written (a store whose write failed): nothing to keep,
                // and what the file holds is a failed attempt at record 1,
                // which the first write truncates away (`slots.rs`).
                // Its name was created by that store, perhaps in an earlier
                // process, and a failed directory sync since may have dropped
                // it: redo it before the next sync counts it durable.
                SlotRead::Empty => {
                    self.names.force_redirty();
                    Entry::empty(file, false)
                }
                // A record of this generation not in memory (a failed write
                // that memory could not follow): continue its sequence.
                SlotRead::Valid { seq, value, .. } if value.generation == self.generation => {
                    self.names.note(&name, NameChange::Created);
                    self.names.force_redirty();
                    return Ok(Entry::unsynced(self.generation, value.offset, seq, file));
                }
                // Writing into it instead is ADR 0008's finding B.
                SlotRead::Valid { seq, .. } if !teeth::enabled(ReplaceDeadOffsetFile) => {
                    self.names.note(&name, NameChange::Created);
                    return Ok(Entry::unsynced(self.generation, None, seq, file));
                }
                SlotRead::Valid { .. } | SlotRead::Invalid { .. } => {
                    drop(file);
                    Entry::empty(self.replace_with_empty(&name)?, true)
                }
            },
        };
        // The name exists now, whatever was recorded before.
        self.names.note(&name, NameChange::Created);
        Ok(entry)
    }

    /// Renames a new, empty file over `name`: the dead record it held is
    /// gone from the page cache at once (no unlink), and the name stays
    /// present, so recovery notes it and redoes it if its sync never landed.
    fn replace_with_empty(&mut self, name: &str) -> Result<Box<dyn DurableFile>> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!("{name}{REPLACE_SUFFIX}"));
        match self.storage.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        drop(self.storage.open(&tmp, OpenMode::CreateNew)?);
        self.storage.rename(&tmp, &path)?;
        tracing::debug!(path = %path.display(), "replaced an offset file of an older generation");
        Ok(self.storage.open(&path, OpenMode::ReadWrite)?)
    }

    /// After a failed write, keep whatever the file's newest valid slot says
    /// (the old value, or the new one if the write landed), so memory never
    /// claims less than disk nor more than was written; either way it is not
    /// known to be on disk. The sequence number is the one of that slot,
    /// never the failed write's: the next write must go into the other slot,
    /// and the newest record is where it was read from (`base_seq` and
    /// `previous` describe the record memory held before the failure).
    fn reload_after_failure(
        &mut self,
        id: u32,
        file: Box<dyn DurableFile>,
        base_seq: u64,
        previous: Option<u64>,
    ) {
        match OFFSET_LAYOUT.read::<OffsetRecord>(file.as_ref()) {
            Ok(SlotRead::Valid { seq, value, .. }) if value.generation == self.generation => {
                // Keeping the failed write's number instead would aim the next
                // write at the slot holding the newest acknowledged record.
                let seq = if teeth::enabled(OffsetSlotSequence) {
                    seq
                } else {
                    base_seq + 1
                };
                self.offsets.insert(
                    id,
                    Entry::unsynced(self.generation, value.offset, seq, file),
                );
            }
            // Nothing of this generation (a first write that never landed):
            // the next write starts the file again.
            Ok(_) => {}
            // The file cannot even be read back: keep what memory had, in
            // doubt. Its record is in slot `base_seq % 2`, which the failed
            // write (to the other slot, or the same bytes again) did not
            // change, and the next write goes to the other slot again; but
            // that slot may now hold the failed write's record, newer than
            // memory's, and a crash would bring it back. With `base_seq` 0
            // memory had nothing, and the entry is kept all the same: its
            // absence would tell a delete there is nothing to remove.
            Err(_) => {
                self.offsets.insert(
                    id,
                    Entry::in_doubt(self.generation, previous, base_seq, file),
                );
            }
        }
    }

    /// Makes every stored offset, every deletion and every name change
    /// durable (a graceful shutdown's flush of buffered stores and deletes).
    pub(crate) fn sync_all(&mut self) -> Result<()> {
        for entry in self.offsets.values_mut() {
            entry.slots.sync()?;
        }
        self.names.sync(self.storage.as_ref())?;
        Ok(())
    }

    /// The directory's name tracker, shared with purge cleanup so that a
    /// failed sync by either is known to both.
    pub(crate) fn names_mut(&mut self) -> &mut DirTracker {
        &mut self.names
    }
}
