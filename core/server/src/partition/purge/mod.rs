//! Crash-safe purge: the per-partition cleanup obligation and one cleanup attempt.
//!
//! The purge's commit point is the metadata write that bumps the partition's
//! committed generation (engine.rs). From then on recovery and every read
//! ignore older records, so cleanup is only about reclaiming space and
//! keeping dead files from lingering; it can be slow, fail and retry without
//! ever exposing or losing data.
//!
//! Invariants:
//! - The obligation file holds two slots (slots.rs): a torn obligation write
//!   leaves the previous state, never a later one, and never none.
//! - Each state is persisted (slot write + file sync) before the next step.
//! - Only files *proven* older than the cutoff are removed: segments by their
//!   name, offset files by the generation in their newest valid record. A file
//!   of the current generation (a fresh acknowledged write), an empty file, or
//!   an unreadable one is never touched.
//! - A directory counts as synced only if a sync issued after every removal in
//!   it succeeded with no failed sync in between (`DirTracker` redoes removals
//!   a failed sync may have dropped, including removals recorded by an earlier
//!   process in the obligation).

pub mod state;

use std::collections::{BTreeMap, BTreeSet};

use sluice_storage::{DurableFile, ErrorKind, OpenMode};

use super::Partition;
use super::offsets::{OffsetRecord, read_record};
use crate::dirsync::{NameChange, REDIRTY_SUFFIX, repair_redirty_leftovers};
use crate::error::{EngineError, Result};
use crate::frame::Magic;
use crate::layout::parse_segment_name;
use crate::partition::reconciler::FailureSite;
use crate::slots::{SlotLayout, SlotRead};
pub use state::{DirKind, Obligation, PurgeState, TransitionError};

/// Dead files removed per round, and the most names `removed` ever holds
/// (carried names are confirmed before a round that would add to them):
/// their names must fit one obligation slot with room to spare.
pub const MAX_NAMES_PER_ROUND: usize = 512;

/// The longest name cleanup removes: a segment name (`is_dead` accepts only
/// sluice's own names: segments of `.log`/`.idx` and canonical `u32` ids).
const MAX_DEAD_NAME_LEN: usize = 20 + 1 + 20 + 4;

// A full `removed` set (each name a bincode string: 8-byte length + bytes),
// the longest error text and the fixed fields fit one slot.
const _: () = assert!(
    MAX_NAMES_PER_ROUND * (8 + MAX_DEAD_NAME_LEN) + 3 * 16 + 1024 + 256
        <= OBLIGATION_LAYOUT.slot_size
);

fn transition(e: TransitionError) -> EngineError {
    EngineError::Internal(e.to_string())
}

pub const OBLIGATION_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::OBLIGATION,
    version: 1,
    slot_size: 64 << 10,
};

/// The obligation file's name in the partition directory.
pub use crate::layout::OBLIGATION_FILE;

/// What the obligation file said at recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedObligation {
    /// No file, or an empty one.
    Missing,
    Valid {
        seq: u64,
        obligation: Obligation,
    },
    /// Neither slot is valid (or the record breaks an invariant).
    Invalid(String),
}

/// Reads a partition's obligation file; also returns the file, opened for
/// writing, for the partition to keep (see `Partition::obligation_file`).
pub fn load(p: &Partition) -> Result<(LoadedObligation, Option<Box<dyn DurableFile>>)> {
    let file = match p.storage.open(&p.paths.obligation, OpenMode::ReadWrite) {
        Ok(f) => f,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok((LoadedObligation::Missing, None)),
        Err(e) => return Err(e.into()),
    };
    let loaded = match OBLIGATION_LAYOUT.read::<Obligation>(file.as_ref())? {
        SlotRead::Empty => LoadedObligation::Missing,
        SlotRead::Valid { seq, value, .. } => match value.validate() {
            Ok(()) => LoadedObligation::Valid {
                seq,
                obligation: value,
            },
            Err(reason) => LoadedObligation::Invalid(reason),
        },
        SlotRead::Invalid { first, second } => {
            LoadedObligation::Invalid(format!("slot 0: {first}; slot 1: {second}"))
        }
    };
    Ok((loaded, Some(file)))
}

impl Partition {
    /// Installs the obligation recovery found, reconciling it with the
    /// committed generation. Returns whether cleanup is pending.
    pub(crate) fn adopt_obligation(&mut self, loaded: LoadedObligation, stale_found: bool) -> bool {
        let g = self.generation;
        let ob = match loaded {
            LoadedObligation::Missing if g == 0 => None,
            // The purge committed but its obligation never became durable.
            LoadedObligation::Missing => Some(Obligation::request(g)),
            LoadedObligation::Valid { seq, obligation } => {
                self.obligation_seq = seq;
                // Read through the page cache: perhaps never on disk.
                self.obligation_unsynced = Some(obligation.clone());
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
            LoadedObligation::Invalid(reason) => {
                if g > 0 {
                    self.mark_degraded(format!(
                        "obligation file {} is unreadable ({reason}) while generation {g} was committed",
                        self.paths.obligation.display()
                    ));
                    return false;
                }
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
        for (dir, names) in ob.removed().clone() {
            let tracker = self.tracker_mut(dir);
            for name in &names {
                if !tracker.is_unconfirmed(name) {
                    tracker.note(name, NameChange::Removed);
                }
            }
            tracker.force_redirty();
        }
        if ob.is_applied() && stale_found {
            tracing::warn!(partition = %self.key, generation = g, "dead files found after an applied purge; reopening cleanup");
            ob.reopen();
        }
        let pending = !ob.is_applied();
        self.obligation = Some(ob);
        pending
    }

    /// Creates the obligation for a just-committed purge (best effort: if the
    /// write fails, recovery or the reconciler recreates it from the metadata).
    pub(crate) fn begin_obligation(&mut self, generation: u64) {
        let ob = match self.obligation.take() {
            Some(prev) if !prev.is_applied() => prev.superseded_by(generation),
            _ => Obligation::request(generation),
        };
        self.obligation = Some(ob);
        if let Err(e) = self.persist_obligation() {
            tracing::warn!(partition = %self.key, error = %e, "could not persist a new purge obligation; the reconciler will");
        }
    }

    pub fn obligation(&self) -> Option<&Obligation> {
        self.obligation.as_ref()
    }

    /// Writes the in-memory obligation into the next slot and syncs it.
    fn persist_obligation(&mut self) -> Result<()> {
        let Some(ob) = self.obligation.as_ref() else {
            return Ok(());
        };
        if self.obligation_file.is_none() {
            // Only here while no handle was ever opened: the name was never
            // noted, so no re-dirty can have moved the file aside.
            let file = self
                .storage
                .open(&self.paths.obligation, OpenMode::CreateOrOpen)?;
            self.obligation_file = Some(file);
        }
        let Some(file) = self.obligation_file.as_deref() else {
            return Err(EngineError::Internal("obligation file vanished".into()));
        };
        if let Some(newest) = &self.obligation_unsynced {
            // The record recovery read may exist only in the page cache (its
            // sync failed in the process that wrote it); then the other slot,
            // which the write below overwrites, holds the newest durable
            // record. Make the newest one durable first: the same bytes into
            // the same slot, so a torn rewrite changes nothing it held.
            OBLIGATION_LAYOUT
                .write(file, self.obligation_seq, newest)?
                .map_err(|e| {
                    EngineError::Internal(format!("obligation does not fit its slot: {e}"))
                })?;
            file.sync()?;
            self.obligation_unsynced = None;
        }
        let seq = self.obligation_seq + 1;
        if seq == 1 && file.len()? > 0 {
            // No record of this file was ever confirmed (else the next write
            // would be number 2): what it holds is an earlier attempt at the
            // first record, torn or never synced. Writing over it could mix
            // two records' prefixes into a slot that reads as corrupt, not as
            // a torn first write (and the partition would be degraded); an
            // empty file keeps any torn write a prefix of one record.
            file.truncate(0)?;
        }
        OBLIGATION_LAYOUT
            .write(file, seq, ob)?
            .map_err(|e| EngineError::Internal(format!("obligation does not fit its slot: {e}")))?;
        file.sync()?;
        self.obligation_seq = seq;
        if !self.obligation_named {
            self.root_names.note(OBLIGATION_FILE, NameChange::Created);
            self.root_names.sync(self.storage.as_ref())?;
            self.obligation_named = true;
        }
        Ok(())
    }

    /// Runs one cleanup attempt to `Applied`, or to the first failure (which
    /// is recorded in the obligation and returned).
    pub fn run_cleanup(&mut self) -> Result<PurgeState> {
        self.cleanup_worked_on.clear();
        let Some(ob) = self.obligation.as_mut() else {
            return Ok(PurgeState::Applied);
        };
        if ob.is_applied() {
            return Ok(PurgeState::Applied);
        }
        if ob.state() != PurgeState::Requested {
            ob.retry();
        }
        match self.attempt() {
            Ok(s) => Ok(s),
            Err(e) => {
                if let Some(ob) = self.obligation.as_mut() {
                    ob.record_error(&e.to_string());
                }
                // Keep the failure visible across restarts; if even this write
                // fails, the persisted state is simply older, which is safe.
                if let Err(pe) = self.persist_obligation() {
                    tracing::debug!(partition = %self.key, error = %pe, "could not record the cleanup failure");
                }
                Err(e)
            }
        }
    }

    /// Directories the latest cleanup attempt worked on.
    pub fn cleanup_worked_on(&self) -> Vec<DirKind> {
        self.cleanup_worked_on.iter().copied().collect()
    }

    /// Where a cleanup error happened: the directory or file its failing
    /// storage operation named.
    pub fn failure_site(&self, e: &EngineError) -> FailureSite {
        let EngineError::Storage(se) = e else {
            return FailureSite::Other;
        };
        if se.path == self.paths.obligation {
            return FailureSite::Obligation;
        }
        for dir in DirKind::ALL {
            let d = self.dir_path(dir);
            if se.path == d || se.path.parent() == Some(d) {
                return FailureSite::Dir(dir);
            }
        }
        FailureSite::Other
    }

    fn attempt(&mut self) -> Result<PurgeState> {
        let cutoff = match &self.obligation {
            Some(ob) => ob.cutoff(),
            None => return Ok(PurgeState::Applied),
        };
        // Names recorded by earlier attempts are not known durable; make sure
        // this directory's tracker redoes them before it next confirms a sync.
        let earlier = self.ob()?.removed().clone();
        for (dir, names) in &earlier {
            let tracker = self.tracker_mut(*dir);
            for name in names {
                // A tracked change to the name is newer than this removal.
                if !tracker.is_unconfirmed(name) {
                    tracker.note(name, NameChange::Removed);
                }
            }
        }
        // Remove in rounds of at most MAX_NAMES_PER_ROUND, so the names of one
        // round always fit the obligation's slot.
        loop {
            let (round, more) = self.scan_dead(cutoff)?;
            if round.is_empty() {
                break;
            }
            // `removed` holds at most one round: names carried from an
            // earlier attempt (whose directory sync failed) are confirmed
            // before a round that would add to them, so the record always
            // fits its slot (see `MAX_NAMES_PER_ROUND`).
            if self.ob()?.removed_with(&round) > MAX_NAMES_PER_ROUND {
                let dirs: Vec<DirKind> = self.ob()?.removed().keys().copied().collect();
                for dir in &dirs {
                    let storage = self.storage.clone();
                    self.cleanup_worked_on.insert(*dir);
                    self.tracker_mut(*dir).sync(storage.as_ref())?;
                }
                self.ob_mut()?.round_confirmed(&dirs).map_err(transition)?;
                self.persist_obligation()?;
            }
            // Plan first, persist, then remove: a crash between two removals
            // leaves every removed name recorded.
            self.ob_mut()?.plan_removals(&round).map_err(transition)?;
            debug_assert!(self.ob()?.removed_with(&BTreeMap::new()) <= MAX_NAMES_PER_ROUND);
            if crate::teeth::enabled(crate::teeth::Mechanism::PersistPlanBeforeUnlink) {
                self.persist_obligation()?;
            }
            for (dir, names) in &round {
                let path = self.dir_path(*dir).to_path_buf();
                for name in names {
                    // Noted before the unlink: an unlink that fails may still
                    // have taken effect, and the tracker must then redo the
                    // removal, not an older change to the name (a `Created`
                    // noted at recovery, whose redo finds nothing to do).
                    self.tracker_mut(*dir).note(name, NameChange::Removed);
                    self.cleanup_worked_on.insert(*dir);
                    match self.storage.remove_file(&path.join(name)) {
                        Ok(()) => {}
                        Err(e) if e.kind == ErrorKind::NotFound => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            if !more {
                break;
            }
            // An intermediate round confirms its removals before the next one,
            // so the recorded names stay bounded.
            let dirs: Vec<DirKind> = round.keys().copied().collect();
            for dir in &dirs {
                let storage = self.storage.clone();
                self.cleanup_worked_on.insert(*dir);
                self.tracker_mut(*dir).sync(storage.as_ref())?;
            }
            self.ob_mut()?.round_confirmed(&dirs).map_err(transition)?;
            self.persist_obligation()?;
        }
        self.ob_mut()?.files_deleted().map_err(transition)?;
        self.persist_obligation()?;
        // Sync all three directories, each counting only for itself. Not only
        // those this attempt removed names from: a dead file may also have been
        // unlinked by an earlier buffered offset delete whose directory sync
        // never happened (perhaps in a process that has since crashed, so no
        // tracker remembers it); `Applied` must mean no dead file is durable.
        let must_confirm = self.ob()?.unconfirmed_dirs();
        for dir in DirKind::ALL {
            let storage = self.storage.clone();
            self.cleanup_worked_on.insert(dir);
            self.tracker_mut(dir).sync(storage.as_ref())?;
            if must_confirm.contains(&dir) {
                self.ob_mut()?.dir_confirmed(dir).map_err(transition)?;
            }
        }
        self.ob_mut()?.dirs_synced().map_err(transition)?;
        self.persist_obligation()?;
        self.ob_mut()?.applied().map_err(transition)?;
        self.persist_obligation()?;
        Ok(PurgeState::Applied)
    }

    fn ob(&self) -> Result<&Obligation> {
        self.obligation
            .as_ref()
            .ok_or_else(|| EngineError::Internal("purge obligation vanished".into()))
    }

    fn ob_mut(&mut self) -> Result<&mut Obligation> {
        self.obligation
            .as_mut()
            .ok_or_else(|| EngineError::Internal("purge obligation vanished".into()))
    }

    /// Up to `MAX_NAMES_PER_ROUND` dead names, and whether more remain.
    fn scan_dead(&mut self, cutoff: u64) -> Result<(BTreeMap<DirKind, BTreeSet<String>>, bool)> {
        let mut round: BTreeMap<DirKind, BTreeSet<String>> = BTreeMap::new();
        let mut taken = 0usize;
        for dir in DirKind::ALL {
            let path = self.dir_path(dir);
            let mut names = match self.storage.list_dir(path) {
                Ok(n) => n,
                Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            if names.iter().any(|n| n.ends_with(REDIRTY_SUFFIX)) {
                // A re-dirty whose second rename failed left `<name>.redirty`:
                // move it back first, or a dead file under it would be missed
                // here and brought back by the next sync's redo (or the next
                // recovery) after `Applied`. (The tracker still holds the
                // name, so its next sync redoes it.)
                let repairs = repair_redirty_leftovers(self.storage.as_ref(), path, &names)?;
                self.tracker_mut(dir).note_repairs(repairs);
                let path = self.dir_path(dir);
                names = self.storage.list_dir(path)?;
            }
            for name in names {
                if self.is_dead(dir, &name, cutoff)? {
                    if taken == MAX_NAMES_PER_ROUND {
                        return Ok((round, true));
                    }
                    round.entry(dir).or_default().insert(name);
                    taken += 1;
                }
            }
        }
        Ok((round, false))
    }

    fn dir_path(&self, dir: DirKind) -> &std::path::Path {
        match dir {
            DirKind::Segments => &self.paths.segments,
            DirKind::Consumers => &self.paths.consumers,
            DirKind::Groups => &self.paths.groups,
        }
    }

    /// Whether `name` in `dir` is proven to belong to a generation below `cutoff`.
    fn is_dead(&self, dir: DirKind, name: &str, cutoff: u64) -> Result<bool> {
        match dir {
            DirKind::Segments => Ok(parse_segment_name(name)
                .is_some_and(|(g, _, ext)| g < cutoff && matches!(ext, "log" | "idx"))),
            DirKind::Consumers | DirKind::Groups => {
                // Only names sluice writes (`id.to_string()`): a name such as
                // `0001` or `+1` is foreign, and keeping to canonical names
                // bounds how long a removed name can be.
                if !name.parse::<u32>().is_ok_and(|id| id.to_string() == name) {
                    return Ok(false);
                }
                let path = self.dir_path(dir).join(name);
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
