//! Retention of one partition: the durable low-water mark, and the cleanup
//! obligation that removes the segment files below it (ADR 0016).
//!
//! Invariants:
//! - The mark is the first retained offset. It is written and synced into
//!   `retention.lwm`, and that name made durable through the partition
//!   directory's tracker, **before** the log stops serving below it and
//!   before any segment file below it is removed: a crash at any point
//!   leaves either the old mark with every file, or the new mark (with some,
//!   all or none of the files below it), never files missing above a mark.
//! - Reads filter by the committed mark (the log never loads a segment below
//!   it, reads start at it), never by what survived on disk, so a segment
//!   file a power loss brings back is never served.
//! - Segment files are removed only here, through the one `segments/`
//!   tracker the log and purge cleanup share: each removal is noted before
//!   its unlink, so a failed sync (which under Linux drops the dirty entries)
//!   makes the next sync of `segments/`, by anyone, redo it first.
//! - A round records the segments it will remove (`removing`, at most
//!   `MAX_REMOVING_PER_ROUND`) in `retention.lwm`, synced, before its first
//!   unlink, and a name leaves that list only after a sync of `segments/`
//!   issued after its removal succeeded. So a process that inherits a
//!   removal a failed sync dropped (its page cache no longer shows the name,
//!   its listing cannot find it) still owes it: recovery notes every
//!   recorded name for the tracker to redo and makes the obligation pending
//!   (ADR 0016, crash table row 5).
//! - The obligation reaches `Applied` only after a sync of `segments/`
//!   issued after every removal succeeded, in the same attempt; an attempt
//!   after a failed one goes back through a fresh listing.
//! - Only files of the served generation below the mark are removed: a file
//!   of an older generation is the purge's, and nothing at or above the mark
//!   (the active segment included) is ever touched.
//! - The recovered record may exist only in the page cache (its sync failed
//!   in an earlier process): the file's `SlotFile` owes it (`slots.rs`), so
//!   it is written again into its own slot and synced, and its name made
//!   durable, before anything below it is removed and before the other slot
//!   is overwritten. A version-1 record owes record 1 of version 2 instead
//!   (`record.rs`).

mod record;
mod state;

use sluice_storage::{DurableFile, DurableStorage, ErrorKind, OpenMode};

use std::collections::{BTreeMap, BTreeSet};

use super::Partition;
use crate::dirsync::{NameChange, REDIRTY_SUFFIX, repair_redirty_leftovers};
use crate::error::{EngineError, Result};
use crate::layout::{
    INDEX_EXT, LOG_EXT, LOW_WATER_FILE, PartitionPaths, parse_segment_name, segment_name,
};
use crate::slots::{Durability, SlotFile};
use crate::teeth::{self, Mechanism::RedoRecordedRetention};
pub use record::{
    LOW_WATER_LAYOUT, LoadedLowWater, LowWaterRecord, MAX_REMOVING_PER_ROUND, decode_file,
};
pub use state::{Retention, RetentionPhase};

/// The partition's handle on `retention.lwm` and what is known of it.
#[derive(Debug, Default)]
pub(crate) struct LowWaterFile {
    /// The file, opened once per process (by recovery or the first write)
    /// and kept (`SlotFile::open_kept`): a re-dirty of the name moves the
    /// file aside between two renames. Its sequence number, and the record
    /// recovery read while that is not known to be on disk, are its own.
    slots: Option<SlotFile<Box<dyn DurableFile>>>,
    /// Whether the file's name is known durable.
    named: bool,
    /// The newest record's `removing` and the generation it names: the
    /// segments whose removal no sync of `segments/` has confirmed.
    recorded: Vec<u64>,
    recorded_generation: u64,
}

impl LowWaterFile {
    /// Whether the newest record lists removals of `generation` still owed.
    fn owes(&self, generation: u64) -> bool {
        self.recorded_generation == generation && !self.recorded.is_empty()
    }

    /// Whether the newest record lists removals of a generation older than
    /// `generation`: a purge made them dead, and so its cleanup's.
    fn owes_dead(&self, generation: u64) -> bool {
        self.recorded_generation < generation && !self.recorded.is_empty()
    }
}

/// Reads the mark of `generation` from `paths.low_water`; returns it (0 if
/// none counts) with the file state to keep. Found in the page cache, the
/// name and the record are not known durable (see `ensure_low_water_durable`).
pub(crate) fn load(
    storage: &dyn DurableStorage,
    paths: &PartitionPaths,
    generation: u64,
) -> Result<(u64, LowWaterFile)> {
    let file = match storage.open(&paths.low_water, OpenMode::ReadWrite) {
        Ok(f) => f,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok((0, LowWaterFile::default())),
        Err(e) => return Err(e.into()),
    };
    let bytes = LOW_WATER_LAYOUT.read_bytes(file.as_ref())?;
    let mut state = LowWaterFile::default();
    match decode_file(&bytes) {
        LoadedLowWater::Missing => {
            state.slots = Some(SlotFile::new(LOW_WATER_LAYOUT, file));
            Ok((0, state))
        }
        // Files below an unknown mark may be gone: serving from the first
        // surviving segment would be a guess, so the partition is degraded.
        LoadedLowWater::Invalid(reason) => Err(EngineError::CorruptFile {
            path: paths.low_water.clone(),
            offset: 0,
            reason: format!("no valid low-water mark record: {reason}"),
        }),
        LoadedLowWater::Valid {
            seq,
            record,
            legacy,
        } => {
            // Owed until written again and synced (the same bytes into the
            // same slot). A version-1 file's slots are not this layout's: it
            // owes record 1 of this one, which lies past both of them
            // (record.rs), and the next write is record 2.
            let seq = if legacy { 1 } else { seq };
            let owed = LOW_WATER_LAYOUT.frame(seq, &record);
            state.slots = Some(SlotFile::after(LOW_WATER_LAYOUT, file, seq, Some(owed)));
            state.recorded = record.removing.clone();
            state.recorded_generation = record.generation;
            if record.generation == generation {
                Ok((record.low_water_mark, state))
            } else {
                if record.generation > generation {
                    tracing::warn!(path = %paths.low_water.display(), record = record.generation, generation, "low-water mark of a generation never committed; ignored");
                }
                // A purge started the history again at mark 0.
                Ok((0, state))
            }
        }
    }
}

impl Partition {
    /// The retention obligation, if one was ever started in this process or
    /// found at recovery.
    pub fn retention(&self) -> Option<Retention> {
        self.retention
    }

    /// Recovery: segment files below the committed mark are still on disk
    /// (a crash before their removal was durable, or a power loss brought
    /// them back), or the record lists removals no sync confirmed (an
    /// earlier process's failed sync may have dropped them while its page
    /// cache, which this process reads, shows them done). Returns whether
    /// cleanup is owed.
    pub(crate) fn adopt_retention(&mut self, below_on_disk: bool) -> bool {
        let mark = self.log.low_water();
        if (below_on_disk || self.low_water.owes(self.generation)) && mark > 0 {
            self.retention = Some(Retention::committed(mark));
            return true;
        }
        false
    }

    /// Raises the low-water mark to `mark` durably, then stops serving below
    /// it; the files below it become the retention obligation's. On error
    /// nothing in memory changed (the record may or may not be on disk: a
    /// mark counts only for what it removes, and nothing was removed).
    pub(crate) fn commit_low_water(&mut self, mark: u64) -> Result<()> {
        self.check_serving()?;
        assert!(
            mark > self.log.low_water(),
            "invariant: the low-water mark only grows"
        );
        self.persist_low_water(mark)?;
        self.log.set_low_water(mark);
        self.retention = Some(match self.retention {
            Some(r) => r.raised_to(mark),
            None => Retention::committed(mark),
        });
        Ok(())
    }

    /// Apache Iggy's order, kept only in test builds to prove the tests have
    /// teeth: remove the files, sync and only warn on failure, stop serving
    /// below `mark` in memory, and write no mark at all.
    #[cfg(feature = "naive-purge")]
    pub(crate) fn naive_expire(&mut self, mark: u64) {
        let storage = self.storage.clone();
        if let Ok(names) = storage.list_dir(&self.paths.segments) {
            for name in names {
                if self.is_below(&name, mark) {
                    let _ = storage.remove_file(&self.paths.segments.join(&name));
                }
            }
        }
        if let Err(e) = storage.sync_dir(&self.paths.segments) {
            tracing::warn!(partition = %self.key, error = %e, "naive retention: segments sync failed; ignored");
        }
        self.log.set_low_water(mark);
    }

    /// Writes `mark` into the next slot of `retention.lwm` and syncs it,
    /// making the name durable the first time. The removals the newest
    /// record lists are carried over.
    fn persist_low_water(&mut self, mark: u64) -> Result<()> {
        let removing = if self.low_water.recorded_generation == self.generation {
            self.low_water.recorded.clone()
        } else {
            Vec::new()
        };
        self.write_low_water(mark, removing, false)
    }

    /// Writes `{generation, mark, removing}` into the next slot and syncs
    /// it. A recorded removal leaves the list only once confirmed: if this
    /// record drops one and the caller has not just synced `segments/`
    /// (`confirmed`), `segments/` is synced through its tracker (which holds
    /// every recorded removal as unconfirmed, noted by the round or by
    /// recovery) first.
    fn write_low_water(&mut self, mark: u64, removing: Vec<u64>, confirmed: bool) -> Result<()> {
        self.ensure_low_water_durable()?;
        let drops = if self.low_water.recorded_generation == self.generation {
            self.low_water
                .recorded
                .iter()
                .any(|b| removing.binary_search(b).is_err())
        } else {
            !self.low_water.recorded.is_empty()
        };
        if drops && !confirmed {
            self.segment_names.sync(self.storage.as_ref())?;
        }
        debug_assert!(removing.len() <= MAX_REMOVING_PER_ROUND);
        let record = LowWaterRecord {
            generation: self.generation,
            low_water_mark: mark,
            removing,
        };
        // Into the next slot, the first record into an emptied file.
        SlotFile::open_kept(
            &mut self.low_water.slots,
            self.storage.as_ref(),
            &self.paths.low_water,
            LOW_WATER_LAYOUT,
        )?
        .write(&record, Durability::Synced)?;
        self.low_water.recorded = record.removing;
        self.low_water.recorded_generation = record.generation;
        self.make_low_water_named()
    }

    /// Makes the recovered record (which may be in the page cache only) and
    /// the file's name durable, before anything below the mark is removed.
    fn ensure_low_water_durable(&mut self) -> Result<()> {
        if let Some(slots) = &mut self.low_water.slots {
            slots.make_newest_durable()?;
            self.make_low_water_named()?;
        }
        Ok(())
    }

    fn make_low_water_named(&mut self) -> Result<()> {
        if !self.low_water.named {
            self.root_names.note(LOW_WATER_FILE, NameChange::Created);
            self.root_names.sync(self.storage.as_ref())?;
            self.low_water.named = true;
        }
        Ok(())
    }

    /// Recovery: the mark the log now serves by, read from the page cache,
    /// made durable (record and name) before the partition serves.
    pub(crate) fn make_recovered_low_water_durable(&mut self) -> Result<()> {
        self.ensure_low_water_durable()
    }

    /// Recovery found the file in the page cache: an earlier process's
    /// failed sync of the partition directory may have dropped its name,
    /// and its failed sync of `segments/` the removals its record lists.
    pub(crate) fn note_recovered_low_water(&mut self) {
        if self.low_water.slots.is_some() {
            self.root_names.note(LOW_WATER_FILE, NameChange::Created);
            self.root_names.force_redirty();
        }
        // The earlier process's page cache, which this one reads, may show
        // the names removed while the disk still holds them: a plain sync
        // would persist nothing, so each is removed again before the next
        // sync of `segments/` counts. Whatever the record's generation: a
        // purge's cleanup lists `segments/` and cannot see them either.
        if !self.low_water.recorded.is_empty() && teeth::enabled(RedoRecordedRetention) {
            let generation = self.low_water.recorded_generation;
            for base in &self.low_water.recorded {
                for ext in [LOG_EXT, INDEX_EXT] {
                    self.segment_names
                        .note(&segment_name(generation, *base, ext), NameChange::Removed);
                }
            }
            self.segment_names.force_redirty();
        }
    }

    /// Whether the newest record lists removals of a purged generation that
    /// no sync of `segments/` confirmed. Recovery notes them for the tracker
    /// to redo (`note_recovered_low_water`); the purge's cleanup owns them
    /// from then on, and may not be `Applied` until its sync confirmed them
    /// and the list is cleared (`forget_dead_retention_removals`). Left in
    /// the record, every later process would note them again and re-dirty
    /// each name (a create and a remove) before every sync of `segments/`,
    /// and a redo whose remove fails before a power cut leaves a dead file
    /// durable (`sim run` seeds 124, 169, 555, 933).
    pub(crate) fn retention_records_dead_removals(&self) -> bool {
        self.low_water.owes_dead(self.generation)
    }

    /// The purge cleanup's last step before `DirsSynced`: every directory was
    /// just synced through its tracker, which held the record's removals of
    /// a purged generation as unconfirmed (noted by the round in this
    /// process, or by recovery), so they are confirmed and the list goes.
    pub(crate) fn forget_dead_retention_removals(&mut self) -> Result<()> {
        if !self.low_water.owes_dead(self.generation) {
            return Ok(());
        }
        self.write_low_water(self.log.low_water(), Vec::new(), true)
    }

    /// Whether the newest record lists removals of the served generation
    /// that no sync confirmed (for `check_invariants`: such a partition's
    /// retention is never `Applied`).
    pub(crate) fn retention_recorded_removals(&self) -> bool {
        self.low_water.owes(self.generation)
    }

    /// Whether `name` is a segment file of the served generation below `mark`.
    fn is_below(&self, name: &str, mark: u64) -> bool {
        parse_segment_name(name).is_some_and(|(g, base, ext)| {
            g == self.generation && base < mark && (ext == LOG_EXT || ext == INDEX_EXT)
        })
    }

    /// One attempt at the retention obligation, in rounds of at most
    /// `MAX_REMOVING_PER_ROUND` segments: a fresh listing of `segments/`;
    /// the round's segments (those still recorded, then the oldest files
    /// below the mark) recorded in `retention.lwm`; each noted and removed;
    /// a sync of `segments/` through its tracker; the list cleared. `Ok`
    /// once nothing is owed.
    pub(crate) fn run_retention(&mut self) -> Result<()> {
        self.check_serving()?;
        let Some(r) = self.retention else {
            return Ok(());
        };
        let mut r = match r.phase() {
            RetentionPhase::Applied { .. } => return Ok(()),
            RetentionPhase::FilesDeleted { .. } => r.retry(),
            RetentionPhase::LowWaterCommitted { .. } => r,
        };
        self.retention = Some(r);
        self.ensure_low_water_durable()?;
        let mark = r.low_water_mark();
        loop {
            let below = self.list_below(mark)?;
            // Names still recorded stay in the round until a sync confirms
            // them; new ones join, oldest first, while the round has room.
            let mut round: BTreeSet<u64> = if self.low_water.owes(self.generation) {
                self.low_water.recorded.iter().copied().collect()
            } else {
                BTreeSet::new()
            };
            for base in below.keys() {
                if round.len() >= MAX_REMOVING_PER_ROUND {
                    break;
                }
                round.insert(*base);
            }
            let round: Vec<u64> = round.into_iter().collect();
            let recorded_now = self.low_water.recorded_generation == self.generation
                && self.low_water.recorded == round;
            if !round.is_empty() && !recorded_now {
                // Recorded and synced before the first unlink.
                self.write_low_water(mark, round.clone(), false)?;
            }
            let dir = self.paths.segments.clone();
            for (base, names) in &below {
                if round.binary_search(base).is_err() {
                    continue;
                }
                for name in names {
                    // Noted before the unlink: an unlink that fails may still
                    // have taken effect, and the tracker must redo the removal.
                    self.segment_names.note(name, NameChange::Removed);
                    match self.storage.remove_file(&dir.join(name)) {
                        // Dirty now: the tracker need not redo it.
                        Ok(()) => self.segment_names.performed(name),
                        Err(e) if e.kind == ErrorKind::NotFound => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            r = r.files_deleted();
            self.retention = Some(r);
            self.segment_names.sync(self.storage.as_ref())?;
            if !round.is_empty() || self.low_water.owes(self.generation) {
                // Every recorded removal is confirmed: the list may go.
                self.write_low_water(mark, Vec::new(), true)?;
            }
            if below.keys().all(|b| round.binary_search(b).is_ok()) {
                self.retention = Some(r.applied());
                return Ok(());
            }
            r = r.next_round();
            self.retention = Some(r);
        }
    }

    /// The files of the served generation below `mark` in a fresh listing
    /// of `segments/`, by segment base (repairing an interrupted re-dirty
    /// first).
    fn list_below(&mut self, mark: u64) -> Result<BTreeMap<u64, Vec<String>>> {
        let dir = self.paths.segments.clone();
        let mut names = match self.storage.list_dir(&dir) {
            Ok(n) => n,
            Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        if names.iter().any(|n| n.ends_with(REDIRTY_SUFFIX)) {
            // A re-dirty stopped between its renames: move the name back
            // first, or a file below the mark under the leftover name would
            // be missed here and brought back by the next redo.
            let repairs = repair_redirty_leftovers(self.storage.as_ref(), &dir, &names)?;
            self.segment_names.note_repairs(repairs);
            names = self.storage.list_dir(&dir)?;
        }
        let mut below: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for name in names {
            if !self.is_below(&name, mark) {
                continue;
            }
            if let Some((_, base, _)) = parse_segment_name(&name) {
                below.entry(base).or_default().push(name);
            }
        }
        Ok(below)
    }
}
