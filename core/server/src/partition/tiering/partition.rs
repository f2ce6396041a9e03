//! A partition's remote tier: its record on disk (`tiering.rec`), the jobs it
//! plans, the outcomes it accepts, and polls served from remote segments.
//!
//! Invariants:
//! - `written` is true only while the record on disk (synced, its name
//!   durable) equals the state in memory. Nothing remote is done while it is
//!   false: an upload's job exists only after its intent was written, a
//!   round's job only after its keys were written, and the local copy of an
//!   uploaded segment is released only once its `Uploaded` record was.
//! - A record read at recovery may be in the page cache only: it is written
//!   again into its own slot and synced (`SlotFile`'s owed record), and its
//!   name made durable, before it is acted on.
//! - Recovery abandons an intent (the process that planned it is gone; its
//!   put may have landed: its keys are doomed) and turns a record of an older
//!   generation into a round over all of it (a purge committed after it was
//!   written).
//! - Reads: the first offset served is the record's `remote_low` (a raise
//!   commits it before any object below it is deleted, so reads stop first);
//!   below the local low-water mark messages come from uploaded segments
//!   only, checked batch by batch by the same code as local reads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use sluice_remote::RemoteStore;
use sluice_storage::{DurableFile, ErrorKind, OpenMode};

use super::cache::BlockCache;
use super::jobs::{RoundJob, RoundOutcome, UploadJob};
use super::{
    LoadedTiering, ObjectKind, PartitionPlace, RemoteSegment, RoundPhase, TIERING_LAYOUT, TierKeys,
    Tiering, decode_file,
};
use crate::dirsync::NameChange;
use crate::error::{EngineError, Result};
use crate::layout::TIERING_FILE;
use crate::partition::Partition;
use crate::partition::log::{
    IndexEntry, Message, ReadAt, decode_index, find_timestamp_in, read_into,
};
use crate::slots::{Durability, SlotFile};

/// A partition's figures as Iggy reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionFigures {
    pub segments: usize,
    pub current_offset: u64,
    pub size_bytes: u64,
    pub messages: u64,
}

/// What a poll needs to read remote segments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteReads<'a> {
    pub(crate) store: &'a dyn RemoteStore,
    pub(crate) keys: &'a TierKeys,
    pub(crate) cache: &'a BlockCache,
}

/// Decoded indexes of remote segments a partition keeps at most.
const INDEXES_KEPT: usize = 16;

/// A partition's tiering state and its record file.
#[derive(Debug)]
pub(crate) struct TierSlot {
    pub(crate) state: Tiering,
    /// This value's serial: jobs planned from it carry it, and their
    /// outcomes count only here (a partition deleted and created again has
    /// another slot with another serial).
    pub(crate) serial: u64,
    file: Option<SlotFile<Box<dyn DurableFile>>>,
    named: bool,
    written: bool,
    /// Decoded indexes of remote segments, by base.
    indexes: BTreeMap<u64, Arc<Vec<IndexEntry>>>,
    /// Failed remote attempts in a row, and the last one's error (for
    /// `/status/obligations`).
    pub(crate) failures: u32,
    pub(crate) last_error: Option<String>,
}

impl TierSlot {
    fn new(state: Tiering, serial: u64, file: Option<SlotFile<Box<dyn DurableFile>>>) -> TierSlot {
        TierSlot {
            state,
            serial,
            file,
            named: false,
            written: false,
            indexes: BTreeMap::new(),
            failures: 0,
            last_error: None,
        }
    }

    pub(crate) fn is_written(&self) -> bool {
        self.written
    }

    /// Counts a remote attempt's outcome.
    pub(crate) fn note(&mut self, error: Option<String>) {
        match error {
            Some(e) => {
                self.failures = self.failures.saturating_add(1);
                self.last_error = Some(e);
            }
            None => {
                self.failures = 0;
                self.last_error = None;
            }
        }
    }
}

/// One remote segment as a positioned reader (through the cache).
struct RemoteObject<'a> {
    reads: RemoteReads<'a>,
    key: sluice_remote::RemoteKey,
    len: u64,
}

impl ReadAt for RemoteObject<'_> {
    fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<usize> {
        self.reads
            .cache
            .read_at(self.reads.store, &self.key, self.len, position, buf)
            .map_err(remote_read_error)
    }
}

fn remote_read_error(e: sluice_remote::RemoteError) -> EngineError {
    EngineError::Unavailable(format!("remote tier: {e}"))
}

impl Partition {
    fn tiering_path(&self) -> PathBuf {
        self.paths.root.join(TIERING_FILE)
    }

    /// The tiering state in memory, read-only (the simulator's oracle
    /// compares it with the store; `None` for a partition not tiered).
    pub fn tiering(&self) -> Option<&Tiering> {
        self.tier.as_ref().map(|t| &t.state)
    }

    pub(crate) fn tier(&self) -> Option<&TierSlot> {
        self.tier.as_ref()
    }

    pub(crate) fn tier_mut(&mut self) -> Option<&mut TierSlot> {
        self.tier.as_mut()
    }

    /// The sealed segments retention may expire, oldest first: the remote
    /// ones below the local low-water mark, then the local sealed ones.
    pub(crate) fn retained_sealed(&self) -> Vec<crate::partition::log::SealedSegment> {
        let local = self.log.low_water();
        let mut out: Vec<crate::partition::log::SealedSegment> = self
            .tier
            .as_ref()
            .map(|t| {
                t.state
                    .segments()
                    .filter(|s| s.base < local)
                    .map(|s| crate::partition::log::SealedSegment {
                        base_offset: s.base,
                        next_offset: s.next_offset,
                        size: s.log_len,
                        newest_timestamp: s.newest_timestamp,
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.extend(self.log.sealed());
        out
    }

    /// What Iggy's partition details and statistics report: segments,
    /// current offset, bytes and messages, over both tiers.
    pub fn figures(&self) -> PartitionFigures {
        PartitionFigures {
            segments: self.log.segment_count() + self.remote_only().count(),
            current_offset: self.log.last_offset().unwrap_or(0),
            size_bytes: self.stored_bytes(),
            messages: self.stored_messages(),
        }
    }

    /// Messages stored in both tiers (what Iggy's statistics count).
    pub fn stored_messages(&self) -> u64 {
        self.log.message_count()
            + self
                .remote_only()
                .map(|s| s.next_offset - s.base)
                .sum::<u64>()
    }

    /// Bytes of messages stored in both tiers (the log files' sizes).
    pub fn stored_bytes(&self) -> u64 {
        self.log.size_bytes() + self.remote_only().map(|s| s.log_len).sum::<u64>()
    }

    /// Remote segments whose local copy was released.
    fn remote_only(&self) -> impl Iterator<Item = &RemoteSegment> + '_ {
        let local = self.log.low_water();
        self.tier
            .iter()
            .flat_map(|t| t.state.segments())
            .filter(move |s| s.base < local)
    }

    /// Sealed local segments at or above the local mark with no remote copy.
    pub(crate) fn pending_uploads(&self) -> u64 {
        let Some(tier) = self.tier.as_ref() else {
            return 0;
        };
        let low = self.log.low_water().max(tier.state.remote_low());
        self.log
            .sealed()
            .filter(|s| {
                s.base_offset >= low
                    && s.next_offset > s.base_offset
                    && tier.state.segment_for(s.base_offset).is_none()
            })
            .count() as u64
    }

    /// Where this partition's objects live.
    pub(crate) fn place(&self) -> Option<PartitionPlace> {
        self.tier.as_ref().map(|t| PartitionPlace {
            stream: self.key.stream,
            topic: self.key.topic,
            partition: self.key.partition,
            incarnation: t.state.incarnation(),
        })
    }

    /// Recovery: reads `tiering.rec` if there is one. A record that does not
    /// decode is `CorruptFile` (the partition is degraded: which remote
    /// segments hold acknowledged messages is unknown).
    pub(crate) fn recover_tiering(&mut self, serial: u64) -> Result<()> {
        if !self.tiering_listed {
            return Ok(());
        }
        let path = self.tiering_path();
        let file = match self.storage.open(&path, OpenMode::ReadWrite) {
            Ok(f) => f,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let bytes = TIERING_LAYOUT.read_bytes(file.as_ref())?;
        let loaded = decode_file(&bytes).map_err(|e| EngineError::CorruptFile {
            path: path.clone(),
            offset: 0,
            reason: e.to_string(),
        })?;
        let Some(LoadedTiering {
            seq,
            tiering: mut state,
        }) = loaded
        else {
            // Never completely written: nothing was uploaded under it.
            return Ok(());
        };
        let owed = TIERING_LAYOUT.frame(seq, &state.to_record());
        let mut written = true;
        if state.generation() < self.generation {
            // A purge committed after this record: all of it is dead.
            state.purge_to(self.generation);
            written = false;
        } else if state.generation() > self.generation {
            return Err(EngineError::CorruptFile {
                path,
                offset: 0,
                reason: format!(
                    "tiering record of generation {}, above the committed {}",
                    state.generation(),
                    self.generation
                ),
            });
        }
        if state.abandon_intent().is_some() {
            written = false;
        }
        state.check();
        // The earlier process's failed sync of the root may have dropped
        // the name: redone before the next sync of the root.
        self.root_names.note(TIERING_FILE, NameChange::Created);
        self.root_names.force_redirty();
        self.tier = Some(TierSlot::new(
            state,
            serial,
            Some(SlotFile::after(TIERING_LAYOUT, file, seq, Some(owed))),
        ));
        if written {
            // Equal to memory once the owed record is durable.
            self.ensure_tiering_durable()?;
        } else {
            self.write_tiering()?;
        }
        Ok(())
    }

    /// Starts tiering this partition (its topic opted in): nothing is
    /// written until the first intent.
    pub(crate) fn enable_tiering(&mut self, incarnation: u64, serial: u64) {
        if self.tier.is_none() {
            self.tier = Some(TierSlot::new(
                Tiering::new(incarnation, self.generation),
                serial,
                None,
            ));
        }
    }

    /// The recovered record and the file's name made durable; then memory
    /// equals the disk.
    fn ensure_tiering_durable(&mut self) -> Result<()> {
        let Some(tier) = self.tier.as_mut() else {
            return Ok(());
        };
        if let Some(file) = tier.file.as_mut() {
            file.make_newest_durable()?;
        }
        if !tier.named {
            self.root_names.note(TIERING_FILE, NameChange::Created);
            self.root_names.sync(self.storage.as_ref())?;
        }
        if let Some(tier) = self.tier.as_mut() {
            tier.named = true;
            tier.written = true;
            tier.state.record_written();
        }
        Ok(())
    }

    /// Writes the state into the next slot of `tiering.rec`, synced, and
    /// makes the name durable the first time.
    pub(crate) fn write_tiering(&mut self) -> Result<()> {
        let path = self.tiering_path();
        let storage = self.storage.clone();
        let Some(tier) = self.tier.as_mut() else {
            return Ok(());
        };
        tier.written = false;
        tier.state.check();
        let record = tier.state.to_record();
        SlotFile::open_kept(&mut tier.file, storage.as_ref(), &path, TIERING_LAYOUT)?
            .write(&record, Durability::Synced)?;
        if !tier.named {
            self.root_names.note(TIERING_FILE, NameChange::Created);
            self.root_names.sync(storage.as_ref())?;
        }
        if let Some(tier) = self.tier.as_mut() {
            tier.named = true;
            tier.written = true;
            tier.state.record_written();
        }
        Ok(())
    }

    /// The record owed to disk, if memory changed since it was written
    /// (a failed write, or a change nothing wrote yet).
    pub(crate) fn settle_tiering(&mut self) -> Result<()> {
        if self.tier.as_ref().is_some_and(|t| !t.written) {
            self.write_tiering()?;
        }
        Ok(())
    }

    /// Plans the upload of the oldest sealed segment at or above the local
    /// low-water mark that has no remote copy: its bytes are made durable
    /// and copied, the intent is written, and the job returned. `None` if
    /// there is nothing to upload (or an upload is in flight).
    pub(crate) fn plan_upload(&mut self, keys: &TierKeys) -> Result<Option<UploadJob>> {
        self.check_serving()?;
        self.settle_tiering()?;
        let Some(tier) = self.tier.as_ref() else {
            return Ok(None);
        };
        if tier.state.intent().is_some() || tier.state.is_full() {
            return Ok(None);
        }
        let low = self.log.low_water().max(tier.state.remote_low());
        let next = self
            .log
            .sealed()
            .find(|s| {
                s.base_offset >= low
                    && s.next_offset > s.base_offset
                    && tier.state.segment_for(s.base_offset).is_none()
            })
            .map(|s| s.base_offset);
        let Some(base) = next else {
            return Ok(None);
        };
        let Some(copy) = self.log.sealed_copy(base)? else {
            return Ok(None);
        };
        let Some(place) = self.place() else {
            return Ok(None);
        };
        let Some(tier) = self.tier.as_mut() else {
            return Ok(None);
        };
        let serial = tier.serial;
        let attempt = tier.state.intend(copy.base);
        if let Err(e) = self.write_tiering() {
            // The intent may or may not be on disk: its keys are doomed
            // either way (deleting keys never put answers `Ok`).
            if let Some(tier) = self.tier.as_mut() {
                tier.state.abandon_intent();
                tier.written = false;
            }
            return Err(e);
        }
        Ok(Some(UploadJob {
            key: self.key,
            serial,
            attempt,
            next_offset: copy.next_offset,
            newest_timestamp: copy.newest_timestamp,
            log_key: keys.object(place, attempt, ObjectKind::Log),
            index_key: keys.object(place, attempt, ObjectKind::Index),
            log: copy.log,
            index: copy.index,
        }))
    }

    /// Applies an upload's outcome, if this partition value still expects
    /// it: `Uploaded` recorded, or the attempt abandoned (its keys doomed).
    /// Returns whether the outcome counted.
    pub(crate) fn finish_upload(
        &mut self,
        job: &UploadJob,
        outcome: std::result::Result<(), sluice_remote::RemoteError>,
    ) -> Result<bool> {
        let Some(tier) = self.tier.as_mut() else {
            return Ok(false);
        };
        if tier.serial != job.serial || tier.state.intent() != Some(job.attempt) {
            return Ok(false);
        }
        match outcome {
            Ok(()) => {
                let segment = RemoteSegment {
                    base: job.attempt.base,
                    next_offset: job.next_offset,
                    attempt: job.attempt.attempt,
                    log_len: job.log.len() as u64,
                    index_len: job.index.len() as u64,
                    newest_timestamp: job.newest_timestamp,
                };
                tier.state.uploaded(job.attempt, segment);
            }
            Err(_) => {
                tier.state.abandon_intent();
            }
        }
        self.write_tiering()?;
        Ok(true)
    }

    /// The recorded deletion round as a job, if there is one and its record
    /// is durable.
    pub(crate) fn plan_round(&mut self) -> Result<Option<RoundJob>> {
        self.settle_tiering()?;
        let place = self.place();
        let Some(tier) = self.tier.as_ref() else {
            return Ok(None);
        };
        let (Some(round), Some(place)) = (tier.state.round(), place) else {
            return Ok(None);
        };
        if round.needs_record() || round.phase() != RoundPhase::Recorded {
            return Ok(None);
        }
        Ok(Some(RoundJob {
            key: self.key,
            serial: tier.serial,
            place,
            doomed: round.doomed().clone(),
            dead_generations: round.dead_generations().clone(),
        }))
    }

    /// Applies a round attempt's outcome if the round is still the one it
    /// was planned from. Returns whether the round reached `Applied`.
    pub(crate) fn finish_round(
        &mut self,
        job: &RoundJob,
        outcome: &RoundOutcome,
        cache: Option<&BlockCache>,
        keys: &TierKeys,
    ) -> Result<bool> {
        let Some(tier) = self.tier.as_mut() else {
            return Ok(false);
        };
        let same = tier.serial == job.serial
            && tier.state.round().is_some_and(|r| {
                r.doomed() == &job.doomed && r.dead_generations() == &job.dead_generations
            });
        if !same {
            return Ok(false);
        }
        let RoundOutcome::Done { found, .. } = outcome else {
            return Ok(false);
        };
        if let Some(cache) = cache {
            for attempt in &job.doomed {
                for kind in [ObjectKind::Log, ObjectKind::Index] {
                    cache.forget(&keys.object(job.place, *attempt, kind));
                }
            }
        }
        tier.state.round_keys_deleted();
        if !job.dead_generations.is_empty() {
            let found =
                if crate::teeth::enabled(crate::teeth::Mechanism::ListDeadGenerationsBeforeApplied)
                {
                    found.clone()
                } else {
                    Vec::new()
                };
            tier.state.round_listed(found);
        }
        let applied = tier
            .state
            .round()
            .is_some_and(|r| r.phase() != RoundPhase::Recorded);
        if applied {
            tier.state.round_applied();
        }
        self.write_tiering()?;
        Ok(applied)
    }

    /// Commits `mark` as the first offset the remote tier serves: every
    /// uploaded segment below it is doomed, the record written before any
    /// object is deleted, and reads stop below it at once.
    pub(crate) fn raise_remote_low(&mut self, mark: u64) -> Result<()> {
        let Some(tier) = self.tier.as_mut() else {
            return Ok(());
        };
        if mark <= tier.state.remote_low() {
            return Ok(());
        }
        // Reads stop below the mark only once it is durable (as a local
        // low-water mark, ADR 0016): on a failed write memory goes back to
        // the state the disk holds, and the raise is retried by its cause.
        let before = tier.state.clone();
        tier.state.raise_remote_low(mark);
        if let Err(e) = self.write_tiering() {
            if let Some(tier) = self.tier.as_mut() {
                tier.state = before;
            }
            return Err(e);
        }
        if let Some(tier) = self.tier.as_mut() {
            tier.indexes.retain(|base, _| *base >= mark);
        }
        Ok(())
    }

    /// A purge committed `generation`: the whole uploaded history dies.
    pub(crate) fn purge_tiering(&mut self, generation: u64) {
        if let Some(tier) = self.tier.as_mut()
            && tier.state.generation() < generation
        {
            tier.state.purge_to(generation);
            tier.indexes.clear();
            tier.written = false;
            // Written now if it can be; else before any remote call
            // (`settle_tiering`), and by recovery's own rule after a crash.
            if let Err(e) = self.write_tiering() {
                tracing::warn!(partition = %self.key, error = %e, "could not record the purged generation's remote round; retried");
            }
        }
    }

    /// The end of the run of sealed local segments, from the oldest, whose
    /// remote copy is durably recorded and which `release` says may leave
    /// the disk (`None`: nothing to release).
    pub(crate) fn releasable_mark(
        &self,
        release: impl Fn(&crate::partition::log::SealedSegment, u64) -> bool,
    ) -> Option<u64> {
        let tier = self.tier.as_ref().filter(|t| t.written)?;
        let low = self.log.low_water();
        let mut local_after: u64 = self.log.size_bytes();
        let mut mark = None;
        for s in self.log.sealed().filter(|s| s.next_offset > low) {
            let uploaded = !crate::teeth::enabled(crate::teeth::Mechanism::ReleaseOnlyUploaded)
                || tier
                    .state
                    .segment_for(s.base_offset)
                    .is_some_and(|r| r.base == s.base_offset && r.next_offset == s.next_offset);
            if !uploaded || !release(&s, local_after) {
                break;
            }
            local_after = local_after.saturating_sub(s.size);
            mark = Some(s.next_offset);
        }
        mark
    }

    /// The first offset this partition serves (the remote tier's low mark,
    /// or the log's).
    pub(crate) fn first_served(&self) -> u64 {
        match &self.tier {
            Some(t) => t.state.remote_low().max(
                t.state
                    .segments()
                    .next()
                    .map_or(self.log.low_water(), |s| s.base.min(self.log.low_water())),
            ),
            None => self.log.low_water(),
        }
    }

    /// Whether a poll starting at `offset` may read the remote tier.
    pub(crate) fn reads_remote(&self, offset: u64) -> bool {
        self.tier
            .as_ref()
            .is_some_and(|t| offset < self.log.low_water() && t.state.segments().next().is_some())
    }

    fn remote_index(
        &mut self,
        reads: RemoteReads<'_>,
        place: PartitionPlace,
        segment: &RemoteSegment,
    ) -> Result<Arc<Vec<IndexEntry>>> {
        if let Some(index) = self
            .tier
            .as_ref()
            .and_then(|t| t.indexes.get(&segment.base))
        {
            return Ok(index.clone());
        }
        let key = reads.keys.object(
            place,
            segment.attempt_in(self.generation),
            ObjectKind::Index,
        );
        let bytes = reads
            .cache
            .read_all(reads.store, &key, segment.index_len)
            .map_err(remote_read_error)?;
        let index = decode_index(&bytes).map_err(|e| EngineError::CorruptFile {
            path: PathBuf::from(key.as_str()),
            offset: 0,
            reason: format!("remote index: {e}"),
        })?;
        let index = Arc::new(index);
        if let Some(tier) = self.tier.as_mut() {
            if tier.indexes.len() >= INDEXES_KEPT {
                tier.indexes.pop_first();
            }
            tier.indexes.insert(segment.base, index.clone());
        }
        Ok(index)
    }

    /// A remote segment's index, its log object as a reader, and its key as
    /// the name errors report.
    fn remote_object<'a>(
        &mut self,
        reads: RemoteReads<'a>,
        place: PartitionPlace,
        segment: &RemoteSegment,
    ) -> Result<(Arc<Vec<IndexEntry>>, RemoteObject<'a>, PathBuf)> {
        let index = self.remote_index(reads, place, segment)?;
        let key = reads
            .keys
            .object(place, segment.attempt_in(self.generation), ObjectKind::Log);
        let name = PathBuf::from(key.as_str());
        let object = RemoteObject {
            reads,
            key,
            len: segment.log_len,
        };
        Ok((index, object, name))
    }

    /// The uploaded segments covering offsets from `offset` up to the local
    /// low-water mark, oldest first.
    fn remote_segments_from(&self, offset: u64) -> Vec<RemoteSegment> {
        let local = self.log.low_water();
        self.tier.as_ref().map_or_else(Vec::new, |t| {
            t.state
                .segments()
                .filter(|s| s.next_offset > offset && s.base < local)
                .copied()
                .collect()
        })
    }

    /// Messages from `offset` (at most `want`) from the remote tier, then
    /// from the local log.
    pub(crate) fn read_tiered(
        &mut self,
        reads: RemoteReads<'_>,
        offset: u64,
        want: u64,
    ) -> Result<Vec<Message>> {
        let Some(place) = self.place() else {
            return self.log.read(offset, want);
        };
        let offset = offset.max(self.first_served());
        let limit = usize::try_from(want).unwrap_or(usize::MAX);
        let mut out = Vec::new();
        for segment in self.remote_segments_from(offset) {
            if out.len() >= limit {
                return Ok(out);
            }
            let (index, object, name) = self.remote_object(reads, place, &segment)?;
            read_into(
                &object,
                &index,
                segment.log_len,
                offset.max(segment.base),
                limit,
                &mut out,
                &name,
            )?;
        }
        if out.len() < limit {
            let from = out
                .last()
                .map_or(offset, |m| m.offset + 1)
                .max(self.log.low_water());
            let rest = self.log.read(from, (limit - out.len()) as u64)?;
            out.extend(rest);
        }
        Ok(out)
    }

    /// The first offset at or after timestamp `ts`, the remote tier first.
    pub(crate) fn offset_for_timestamp_tiered(
        &mut self,
        reads: RemoteReads<'_>,
        ts: u64,
    ) -> Result<Option<u64>> {
        let Some(place) = self.place() else {
            return self.log.offset_for_timestamp(ts);
        };
        let first = self.first_served();
        for segment in self.remote_segments_from(first) {
            if segment.newest_timestamp < ts {
                continue;
            }
            let (index, object, name) = self.remote_object(reads, place, &segment)?;
            if let Some(found) = find_timestamp_in(&object, &index, segment.log_len, ts, &name)? {
                return Ok(Some(found.max(first)));
            }
        }
        self.log.offset_for_timestamp(ts)
    }
}
