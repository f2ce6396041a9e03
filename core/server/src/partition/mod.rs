//! One partition: its message log, its two offset stores, its purge generation.
//!
//! Invariants:
//! - `generation` equals the committed purge generation in the metadata; the
//!   log and both offset stores serve only records of that generation.
//! - A degraded partition refuses every read and write with a typed error
//!   naming why; it never serves a guess.
//! - Durability is the topic's policy: under `persisted` nothing is
//!   acknowledged before its file sync and, for a new or removed name, its
//!   directory sync (through `DirTracker`, which redoes changes a failed sync
//!   may have dropped).
//! - A `Partition` value is one *incarnation* of its key's directories: a
//!   partition deleted and created again under the same id is another value
//!   with other trackers at the same paths. Dropping the value ends its
//!   incarnation (`Drop`, under the engine lock): the work it planned to run
//!   without the lock (its cleanup's waits) does no I/O from then on, and
//!   the I/O in progress finishes first (dirsync.rs, ADR 0022).

pub mod log;
#[cfg(feature = "naive-purge")]
pub(crate) mod naive;
pub mod offsets;
pub mod purge;
pub(crate) mod reconciler;
pub mod retention;
pub mod tiering;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use sluice_storage::DurableStorage;

use crate::dirsync::{DirTracker, NameChange, REDIRTY_SUFFIX, repair_redirty_leftovers};
use crate::error::{EngineError, Result};
use crate::layout::{
    INDEX_EXT, LOG_EXT, LOW_WATER_FILE, PartitionPaths, SEGMENT_EXTS, parse_segment_name,
    segment_name,
};
use crate::metadata::{PartitionKey, TopicOptions};
use log::{Log, LogRecovery, Message};
use offsets::{OffsetKind, OffsetRecovery, OffsetStore};

/// Where a poll starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollingStrategy {
    Offset(u64),
    Timestamp(u64),
    First,
    Last,
    Next,
}

/// Who is consuming: an individual consumer or a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Consumer {
    pub kind: OffsetKind,
    pub(crate) id: u32,
}

impl Consumer {
    // `Consumer::consumer(7)` next to `Consumer::group(7)` reads as the Iggy API does.
    #[allow(clippy::self_named_constructors)]
    pub fn consumer(id: u32) -> Self {
        Consumer {
            kind: OffsetKind::Consumer,
            id,
        }
    }

    pub fn group(id: u32) -> Self {
        Consumer {
            kind: OffsetKind::Group,
            id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub partition_id: u32,
    /// The offset of the last message in the partition (0 when empty, as Iggy reports).
    pub current_offset: u64,
    pub messages: Vec<Message>,
}

/// What recovery found in one partition.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PartitionRecovery {
    pub log: LogRecovery,
    pub consumers: OffsetRecovery,
    pub groups: OffsetRecovery,
}

impl PartitionRecovery {
    /// Records of an older generation that recovery ignored.
    pub(crate) fn stale_records(&self) -> u64 {
        (self.log.stale_files.len() + self.consumers.stale.len() + self.groups.stale.len()) as u64
    }
}

#[derive(Debug)]
pub struct Partition {
    pub(crate) key: PartitionKey,
    pub(crate) paths: PartitionPaths,
    storage: Arc<dyn DurableStorage>,
    options: TopicOptions,
    generation: u64,
    log: Log,
    segment_names: DirTracker,
    consumers: OffsetStore,
    groups: OffsetStore,
    degraded: Option<String>,
    /// The purge cleanup obligation, `None` if the partition was never purged.
    obligation: Option<purge::Obligation>,
    /// The obligation file, opened once per process (by recovery, or by the
    /// first write) and kept: a re-dirty of its name moves it aside between
    /// two renames, and opening the name then would start a second file. It
    /// holds the newest record's number and, while it is not known to be on
    /// disk (an earlier process's sync of it may have failed), the record
    /// recovery read, rewritten byte for byte and synced before the other
    /// slot, which may hold the newest durable record, is overwritten.
    obligation_file: Option<crate::slots::SlotFile<Arc<dyn sluice_storage::DurableFile>>>,
    root_names: DirTracker,
    /// Directories the latest cleanup attempt worked on (removed a file
    /// from or synced), for the per-directory figures operators see.
    cleanup_worked_on: std::collections::BTreeSet<purge::DirKind>,
    /// The token of the purge cleanup attempt in flight, from its first wait
    /// for I/O without the engine lock to the step after its last
    /// (reconciler/pass.rs): a partition has at most one.
    pub(crate) cleanup_job: Option<u64>,
    /// The histories purges replaced, with their open files: closed by the
    /// next cleanup attempt while it waits for the disk, without the engine
    /// lock, not by the purge call (closing the old generation's ~16,000
    /// descriptors of a 1,000-partition topic was 73% of its purge call).
    retired: Vec<Retired>,
    /// `retention.lwm`: the durable low-water mark's file (the mark itself
    /// is the log's, `Log::low_water`).
    low_water: retention::LowWaterFile,
    /// The retention cleanup obligation, `None` if nothing was ever expired
    /// in this generation (since this process started).
    retention: Option<retention::Retention>,
    /// The remote tier's state and record, `None` for a partition that was
    /// never tiered.
    pub(crate) tier: Option<tiering::partition::TierSlot>,
    /// Recovery's listing of the root showed `tiering.rec`.
    pub(crate) tiering_listed: bool,
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.root_names.end_incarnation();
        for dir in purge::DirKind::ALL {
            self.tracker_mut(dir).end_incarnation();
        }
    }
}

/// A history a purge replaced: only its open files are left, and dropping
/// them (closing ~16 descriptors per partition) is all that remains to do.
#[derive(Debug)]
pub(crate) struct Retired {
    _segments: log::RetiredSegments,
    _consumers: offsets::RetiredEntries,
    _groups: offsets::RetiredEntries,
}

impl Partition {
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        storage: Arc<dyn DurableStorage>,
        paths: PartitionPaths,
        key: PartitionKey,
        options: TopicOptions,
        generation: u64,
        log: Log,
        consumers: OffsetStore,
        groups: OffsetStore,
    ) -> Partition {
        Partition {
            key,
            segment_names: DirTracker::new(&paths.segments),
            root_names: DirTracker::new(&paths.root),
            obligation: None,
            obligation_file: None,
            cleanup_worked_on: std::collections::BTreeSet::new(),
            cleanup_job: None,
            retired: Vec::new(),
            low_water: retention::LowWaterFile::default(),
            retention: None,
            tier: None,
            tiering_listed: false,
            paths,
            storage,
            options,
            generation,
            log,
            consumers,
            groups,
            degraded: None,
        }
    }

    /// A new, empty partition of generation 0. Its directories must already
    /// exist and be durable (the engine creates them, `create_partition_dirs`).
    pub(crate) fn create(
        storage: Arc<dyn DurableStorage>,
        data_dir: &Path,
        key: PartitionKey,
        options: TopicOptions,
    ) -> Partition {
        let paths = PartitionPaths::new(data_dir, key);
        Partition::fresh(storage, paths, key, options, 0)
    }

    fn fresh(
        storage: Arc<dyn DurableStorage>,
        paths: PartitionPaths,
        key: PartitionKey,
        options: TopicOptions,
        generation: u64,
    ) -> Partition {
        let log = Log::empty(
            storage.clone(),
            &paths.segments,
            generation,
            options.segment_size,
        );
        let consumers = OffsetStore::empty(storage.clone(), &paths.consumers, generation);
        let groups = OffsetStore::empty(storage.clone(), &paths.groups, generation);
        Partition::assemble(
            storage, paths, key, options, generation, log, consumers, groups,
        )
    }

    /// Rebuilds the partition of `generation` from storage.
    /// `floor` is the oldest generation recovery accepts: the committed
    /// generation in production (everything older is ignored), 0 only for the
    /// naive purge kept for tests.
    pub(crate) fn recover(
        storage: Arc<dyn DurableStorage>,
        data_dir: &Path,
        key: PartitionKey,
        options: TopicOptions,
        generation: u64,
        floor: u64,
        live_groups: &BTreeSet<u32>,
    ) -> Result<(Partition, PartitionRecovery)> {
        let paths = PartitionPaths::new(data_dir, key);
        // The engine makes a partition's directories durable before it commits
        // the partition, so a missing one was removed behind sluice's back. It
        // holds nothing sluice can serve: recreate it empty, and make every
        // name up to the data directory durable before anything is
        // acknowledged in it (plain syncs: the names are fresh, and nothing
        // here may be renamed, since the ancestors hold live partitions).
        let mut recreated = false;
        for dir in [&paths.segments, &paths.consumers, &paths.groups] {
            if !storage.exists(dir)? {
                tracing::warn!(dir = %dir.display(), "partition directory missing; recreated empty");
                storage.create_dir_all(dir)?;
                recreated = true;
            }
        }
        if recreated {
            // The root holds the recreated names; the chain above it, any
            // ancestor `create_dir_all` had to make again.
            storage.sync_dir(&paths.root)?;
            crate::dirchain::make_durable(storage.as_ref(), &paths.root, Some(data_dir), &[])?;
        }
        // A crash between the two renames of a re-dirty of a name in the
        // partition root leaves `<name>.redirty`: move it back first, or the
        // low-water mark (or the obligation, and its list of removals to
        // redo) would be missed.
        let listed_root = storage.list_dir(&paths.root)?;
        let root_repairs = if listed_root.iter().any(|n| n.ends_with(REDIRTY_SUFFIX)) {
            repair_redirty_leftovers(storage.as_ref(), &paths.root, &listed_root)?
        } else {
            Vec::new()
        };
        // The committed low-water mark first: the log never loads a segment
        // below it. The naive variant (`floor` below `generation`) keeps no
        // mark and filters nothing, as Iggy recovers.
        // The listing above says whether the file exists (after repairs, a
        // leftover `.redirty` of it was moved back), so a partition that never
        // expired anything costs no extra open.
        let has_low_water = listed_root
            .iter()
            .any(|n| n == LOW_WATER_FILE || n.strip_suffix(REDIRTY_SUFFIX) == Some(LOW_WATER_FILE));
        // The same listing says whether the partition was ever tiered, so a
        // partition that never was costs no extra open (`recover_tiering`).
        let has_tiering = listed_root.iter().any(|n| {
            n == crate::layout::TIERING_FILE
                || n.strip_suffix(REDIRTY_SUFFIX) == Some(crate::layout::TIERING_FILE)
        });
        let (low_water, low_water_file) = if floor == generation && has_low_water {
            retention::load(storage.as_ref(), &paths, generation)?
        } else {
            (0, retention::LowWaterFile::default())
        };
        let (mut log, log_report) = Log::recover(
            storage.clone(),
            &paths.segments,
            generation,
            floor,
            options.segment_size,
            low_water,
            !options.durability.is_persisted(),
        )?;
        let (consumers, c_report) =
            OffsetStore::recover(storage.clone(), &paths.consumers, generation, floor, None)?;
        let (groups, g_report) = OffsetStore::recover(
            storage.clone(),
            &paths.groups,
            generation,
            floor,
            Some(live_groups),
        )?;
        if options.durability.is_persisted()
            && crate::teeth::enabled(crate::teeth::Mechanism::RedirtyRecoveredTail)
        {
            // Bytes recovered from the page cache may be missing on disk with
            // nothing left dirty to carry them (see `Segment::redirty_tail`).
            log.redirty_tail()?;
        } else if !options.durability.is_persisted() {
            // Under `buffered` nothing recovered is known to be on disk: no
            // sync need have covered it. A sync that fails later (the file
            // pool's, ADR 0018) must recheck all of it, not only what this
            // process wrote (`sim run --max-open-files 2` seed 266). Nor is
            // it known dirty (an earlier failed sync may have cleaned it
            // without writing it), so a flush writes it again before its
            // sync (`sim run` seed 2997 of session 12).
            log.distrust_recovered();
        }
        // A stored offset names a message that was acknowledged. If the log
        // came back shorter (buffered messages lost to a power loss while
        // persisted offsets survived), the offsets it named are never given
        // to new messages: the log continues after the highest stored
        // offset, so `Next` never skips a message sent after the loss
        // (ADR 0010).
        if let Some(highest) = consumers.highest().max(groups.highest())
            && highest >= log.next_offset()
        {
            tracing::warn!(
                partition = %key,
                recovered_end = log.next_offset(),
                highest_stored_offset = highest,
                "messages below a stored offset were lost; new messages continue after it"
            );
            log.continue_from(highest.saturating_add(1));
        }
        let mut partition = Partition::assemble(
            storage, paths, key, options, generation, log, consumers, groups,
        );
        // As for offsets: recovered segment names may never have been made
        // durable by an earlier process; redo them before the next sync.
        // Every segment, not only the newest: a later acknowledged append
        // makes its own segment durable, but the messages before it must not
        // vanish with an older segment's name.
        let bases = partition.log.segment_bases();
        for base in &bases {
            for ext in SEGMENT_EXTS {
                partition
                    .segment_names
                    .note(&segment_name(generation, *base, ext), NameChange::Created);
            }
        }
        // An empty segment recovery skipped (a roll whose first write was
        // lost, ADR 0004 §3) stays on disk for a later roll at the same base
        // to reuse, and its name is no more known durable than a served
        // one's: a failed directory sync of an earlier process may have
        // dropped it. Redo it too, or a roll that reuses the file writes an
        // acknowledged batch under a name a plain sync never makes durable.
        let empty: Vec<&String> = log_report
            .skipped_empty
            .iter()
            .filter(|name| parse_segment_name(name).is_some_and(|(g, _, _)| g == generation))
            .collect();
        for name in &empty {
            partition.segment_names.note(name, NameChange::Created);
            if let Some(stem) = name.strip_suffix(&format!(".{LOG_EXT}")) {
                partition
                    .segment_names
                    .note(&format!("{stem}.{INDEX_EXT}"), NameChange::Created);
            }
        }
        if !bases.is_empty() || !empty.is_empty() {
            partition.segment_names.force_redirty();
        }
        partition
            .segment_names
            .note_repairs(log_report.repaired.clone());
        partition.root_names.note_repairs(root_repairs);
        partition.low_water = low_water_file;
        partition.note_recovered_low_water();
        partition.tiering_listed = has_tiering;
        let (loaded, file) = purge::load(&partition)?;
        // The obligation file's name is never made durable (ADR 0003 §9):
        // a power loss that takes it leaves a disk a fresh listing sees whole.
        // Removals of a purged generation the mark's record still lists are
        // dead files whose removal no sync confirmed: the purge owes them.
        let stale = !log_report.stale_files.is_empty()
            || !c_report.stale.is_empty()
            || !g_report.stale.is_empty()
            || partition.retention_records_dead_removals();
        partition.adopt_obligation(loaded, file, stale);
        partition.adopt_retention(!log_report.below_low_water.is_empty());
        if partition.log.low_water() > 0 {
            // The mark was read from the page cache: an earlier process's
            // sync of it may have failed, and a power loss would then bring
            // back a lower mark and the messages below this one. Nothing is
            // served by it until it is durable (purge proptest finding N).
            partition.make_recovered_low_water_durable()?;
        }
        Ok((
            partition,
            PartitionRecovery {
                log: log_report,
                consumers: c_report,
                groups: g_report,
            },
        ))
    }

    /// A partition that refuses service (recovery could not trust its files).
    pub(crate) fn degraded(
        storage: Arc<dyn DurableStorage>,
        data_dir: &Path,
        key: PartitionKey,
        options: TopicOptions,
        generation: u64,
        reason: String,
    ) -> Partition {
        let paths = PartitionPaths::new(data_dir, key);
        let mut p = Partition::fresh(storage, paths, key, options, generation);
        p.degraded = Some(reason);
        p
    }

    /// Switches to a new, empty history of `generation` (after a purge commit).
    /// Files of older generations stay on disk for cleanup; nothing here touches them.
    ///
    /// Done in place, allocating nothing but the retired history's slot: a
    /// topic purge resets every partition under the engine lock, and building
    /// each one's state anew (paths, trackers) was most of that call.
    /// Kept as they are: what is not yet durable in each directory (those
    /// changes happened, whatever generation the partition now serves), the
    /// obligation and its file, the cleanup attempt in flight (it finds the
    /// generation moved and stops), the degraded reason, and the low-water
    /// mark's file (its slot sequence goes on). Started anew: the log, the
    /// offset stores' entries, and the retention obligation (the mark of the
    /// new generation is 0, and the purge's cleanup removes every file of the
    /// old one, so no retention is owed any more).
    pub(crate) fn reset_to_generation(&mut self, generation: u64) {
        debug_assert!(generation > self.generation, "generations only grow");
        self.generation = generation;
        let retired = Retired {
            _segments: self.log.restart_at(generation),
            _consumers: self.consumers.restart_at(generation),
            _groups: self.groups.restart_at(generation),
        };
        self.retired.push(retired);
        self.retention = None;
        self.cleanup_worked_on.clear();
    }

    /// The histories purges replaced, for their files to be closed where
    /// closing them holds nobody up.
    pub(crate) fn take_retired(&mut self) -> Vec<Retired> {
        std::mem::take(&mut self.retired)
    }

    fn tracker_mut(&mut self, dir: purge::DirKind) -> &mut DirTracker {
        match dir {
            purge::DirKind::Segments => &mut self.segment_names,
            purge::DirKind::Consumers => self.consumers.names_mut(),
            purge::DirKind::Groups => self.groups.names_mut(),
        }
    }

    /// Makes everything acknowledged in this partition durable, whatever its
    /// policy: the flush a graceful shutdown owes buffered topics.
    pub(crate) fn sync_all(&mut self) -> Result<()> {
        if self.degraded.is_some() {
            return Ok(());
        }
        self.log.sync_all()?;
        self.segment_names.sync(self.storage.as_ref())?;
        self.consumers.sync_all()?;
        self.groups.sync_all()?;
        Ok(())
    }

    pub(crate) fn mark_degraded(&mut self, reason: String) {
        self.degraded = Some(reason);
    }

    pub fn degraded_reason(&self) -> Option<&str> {
        self.degraded.as_deref()
    }

    fn check_serving(&self) -> Result<()> {
        match &self.degraded {
            Some(reason) => Err(EngineError::Degraded {
                key: self.key,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn options(&self) -> TopicOptions {
        self.options
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    pub(crate) fn offsets(&self, kind: OffsetKind) -> &OffsetStore {
        match kind {
            OffsetKind::Consumer => &self.consumers,
            OffsetKind::Group => &self.groups,
        }
    }

    fn offsets_mut(&mut self, kind: OffsetKind) -> &mut OffsetStore {
        match kind {
            OffsetKind::Consumer => &mut self.consumers,
            OffsetKind::Group => &mut self.groups,
        }
    }

    /// Appends a batch of fully formed messages (offsets assigned here).
    pub(crate) fn append(&mut self, mut messages: Vec<Message>) -> Result<(u64, u64)> {
        self.check_serving()?;
        if messages.is_empty() {
            return Err(EngineError::Invalid {
                what: "messages",
                reason: "a batch must hold at least one message".into(),
            });
        }
        let base = self.log.next_offset();
        if base.checked_add(messages.len() as u64).is_none() {
            return Err(EngineError::Invalid {
                what: "messages",
                reason: format!(
                    "the partition's offsets are exhausted (next offset {base}, {} messages)",
                    messages.len()
                ),
            });
        }
        // Timestamps never decrease within a log, even if the clock steps
        // back: retention by age reads a segment's newest message from its
        // last batch, and timestamp polls search the index in order.
        let newest = self.log.newest_timestamp();
        for (m, offset) in messages.iter_mut().zip(base..) {
            m.offset = offset;
            m.timestamp = m.timestamp.max(newest);
        }
        let persisted = self.options.durability.is_persisted();
        let appended = self.log.append(messages, persisted);
        // A new segment's names need a directory sync even if the append
        // failed, in the roll itself (the files exist once opened) or in the
        // write into it: the next persisted append lands in the same files.
        // Noted now, before any sync of `segments/` (the reconciler's too)
        // can fail and drop them unseen (issue 12, seed 3707).
        if let Some(base) = self.log.take_roll_attempt()
            && (crate::teeth::enabled(crate::teeth::Mechanism::NoteFailedRollNames)
                || self.log.segment_bases().last() == Some(&base))
        {
            for ext in SEGMENT_EXTS {
                self.segment_names.note(
                    &segment_name(self.generation, base, ext),
                    NameChange::Created,
                );
            }
        }
        let appended = appended?;
        if persisted && self.segment_names.has_unconfirmed() {
            self.segment_names.sync(self.storage.as_ref())?;
        }
        Ok((appended.base_offset, appended.count))
    }

    /// Polls up to `count` messages (through `remote` below the local
    /// low-water mark, when the partition has remote segments).
    pub(crate) fn poll(
        &mut self,
        consumer: Consumer,
        strategy: PollingStrategy,
        count: u64,
        auto_commit: bool,
        remote: Option<tiering::partition::RemoteReads<'_>>,
    ) -> Result<Polled> {
        self.check_serving()?;
        self.log.settle_deferred();
        let remote = remote.filter(|_| {
            self.tier
                .as_ref()
                .is_some_and(|t| t.state.segments().next().is_some())
        });
        let first = match remote {
            Some(_) if self.reads_remote(self.first_served()) => Some(self.first_served()),
            _ => self.log.first_offset(),
        };
        let start = match strategy {
            PollingStrategy::Offset(o) => Some(o),
            PollingStrategy::Timestamp(t) => match remote {
                Some(reads) => self.offset_for_timestamp_tiered(reads, t)?,
                None => self.log.offset_for_timestamp(t)?,
            },
            PollingStrategy::First => first,
            PollingStrategy::Last => self
                .log
                .last_offset()
                .map(|last| (last + 1).saturating_sub(count).max(first.unwrap_or(0))),
            PollingStrategy::Next => match self.offsets(consumer.kind).get(consumer.id) {
                None => Some(0),
                // Only an offset file can hold this: no message comes after it.
                Some(u64::MAX) => {
                    return Err(EngineError::OffsetOutOfRange {
                        offset: u64::MAX,
                        current: self.log.last_offset(),
                    });
                }
                Some(o) => Some(o + 1),
            },
        };
        // Nothing below the committed remote low mark is served, from either
        // tier: retention raises it first (`commit_mark`), and a local mark
        // whose commit then failed must not bring those messages back.
        let floor = self.tier.as_ref().map_or(0, |t| t.state.remote_low());
        let start = start.map(|s| s.max(floor));
        let messages = match (start, remote) {
            (Some(s), Some(reads)) if self.reads_remote(s.max(self.first_served())) => {
                self.read_tiered(reads, s, count)?
            }
            (Some(s), _) => self.log.read(s, count)?,
            (None, _) => Vec::new(),
        };
        if auto_commit && let Some(last) = messages.last() {
            let persisted = self.options.consumer_offset_durability.is_persisted();
            let offset = last.offset;
            self.offsets_mut(consumer.kind)
                .store(consumer.id, offset, persisted)?;
        }
        Ok(Polled {
            partition_id: self.key.partition,
            current_offset: self.log.last_offset().unwrap_or(0),
            messages,
        })
    }

    pub(crate) fn store_offset(&mut self, consumer: Consumer, offset: u64) -> Result<()> {
        self.check_serving()?;
        match self.log.last_offset() {
            None => {
                return Err(EngineError::OffsetOutOfRange {
                    offset,
                    current: None,
                });
            }
            Some(last) if offset > last => {
                return Err(EngineError::OffsetOutOfRange {
                    offset,
                    current: Some(last),
                });
            }
            Some(_) => {}
        }
        let persisted = self.options.consumer_offset_durability.is_persisted();
        self.offsets_mut(consumer.kind)
            .store(consumer.id, offset, persisted)
    }

    pub(crate) fn stored_offset(&self, consumer: Consumer) -> Result<Option<u64>> {
        self.check_serving()?;
        Ok(self.offsets(consumer.kind).get(consumer.id))
    }

    /// Durably removes any offset file `consumer`'s id has in this partition,
    /// before the id is given to a new owner (see `OffsetStore::clear_leftover`).
    /// Works on a degraded partition too: the file is dead by the metadata.
    /// Removes a deleted group's offset file durably (a delete obligation's
    /// step in this partition). Done on a degraded partition too: the file is
    /// removed by name, whatever memory loaded.
    /// `redo`: an earlier process may have removed it and failed the sync.
    pub(crate) fn remove_group_offsets(&mut self, group: u32, redo: bool) -> Result<()> {
        self.groups.remove_durably(group, redo)
    }

    /// Deletes a stored offset; `Ok(false)` if there was none.
    pub(crate) fn delete_offset(&mut self, consumer: Consumer) -> Result<bool> {
        self.check_serving()?;
        let persisted = self.options.consumer_offset_durability.is_persisted();
        self.offsets_mut(consumer.kind)
            .delete(consumer.id, persisted)
    }
}
