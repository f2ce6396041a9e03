//! The engine: metadata plus every partition, and the operations users call.
//!
//! Data flows one way: a caller (HTTP, simulator, test) → `Engine` →
//! `Partition` → `DurableStorage`. The engine is single-threaded (`&mut self`);
//! the server serialises calls (docs/adr/0001-architecture.md).
//!
//! Invariants:
//! - A metadata change is acknowledged only after `MetadataStore::save`
//!   returned: on failure the in-memory metadata is rolled back, so memory never
//!   claims a change the disk may not hold.
//! - Directories a new partition needs are durable before the metadata that
//!   names the partition is written; deleted resources are removed from disk
//!   only after the metadata without them is durable.
//! - `partitions` has exactly one entry per partition in `meta`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_storage::{DurableStorage, ErrorKind};

use crate::clock::Clock;
use crate::dirsync::{DirTracker, NameChange};
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::layout::{PartitionPaths, stream_dir, topic_dir};
use crate::metadata::{
    GroupMeta, Metadata, MetadataStore, PartitionKey, PartitionMeta, StreamMeta, TopicMeta,
    TopicOptions,
};
use crate::partition::log::{Message, NewMessage};
use crate::partition::offsets::OffsetKind;
use crate::partition::purge::FailureSite;
use crate::partition::reconciler::{Reconciler, ReconcilerConfig};
use crate::partition::{Consumer, Partition, PartitionRecovery, Polled, PollingStrategy};
use crate::teeth::Mechanism;
use sluice_storage::sim::SimRng;

/// Ids assigned by the server start here, as in Iggy 0.11: the first stream,
/// topic, partition and consumer group each have id 0.
pub const FIRST_ID: u32 = 0;
pub const MAX_NAME_LEN: usize = 255;
pub const MAX_PARTITIONS: u32 = 1000;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// Seeds server-assigned message ids (mixed at open with the recovered
    /// state, so a restart does not replay an earlier run's ids).
    pub seed: u64,
    pub reconciler: ReconcilerConfig,
    pub purge_mode: PurgeMode,
}

/// How purges clean up. Only `Obligation` exists in a normal build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PurgeMode {
    /// The crash-safe purge: one commit point, generation filtering, a cleanup
    /// obligation driven to `Applied` (docs/adr/0003-purge-obligation.md).
    #[default]
    Obligation,
    /// Apache Iggy's order (delete, sync with warnings, record the generation,
    /// no filtering), kept only to prove the tests have teeth.
    #[cfg(feature = "naive-purge")]
    NaiveIggyOrder,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>, seed: u64) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            seed,
            reconciler: ReconcilerConfig {
                seed,
                ..ReconcilerConfig::default()
            },
            purge_mode: PurgeMode::default(),
        }
    }
}

/// How a send picks its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    Balanced,
    PartitionId(u32),
    MessagesKey(Vec<u8>),
}

/// The outcome of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub partition_id: u32,
    pub base_offset: u64,
    pub count: u64,
    pub durability: crate::metadata::Durability,
}

/// What start-up found, summed over all partitions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub partitions: u64,
    pub messages: u64,
    pub consumer_offsets: u64,
    pub group_offsets: u64,
    /// Records of an older purge generation ignored (never seeded).
    pub stale_records: u64,
    pub corrupt_offset_records: u64,
    pub tail_cuts: u64,
    pub degraded: Vec<(PartitionKey, String)>,
    pub per_partition: BTreeMap<PartitionKey, PartitionRecovery>,
}

#[derive(Debug)]
pub struct Engine {
    storage: Arc<dyn DurableStorage>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    store: MetadataStore,
    meta: Metadata,
    partitions: BTreeMap<PartitionKey, Partition>,
    balance: BTreeMap<(u32, u32), u32>,
    ids: SimRng,
    reconciler: Reconciler,
    /// Set when the metadata on disk may differ from memory: a save failed and
    /// putting the previous metadata back failed too (the file a restart would
    /// read may hold a change memory does not), or the metadata was loaded at
    /// start-up from a page cache an earlier process may never have synced.
    /// Until a save succeeds again, the engine serves and changes nothing.
    metadata_in_doubt: Option<String>,
}

/// What one reconciler pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub attempted: Vec<PartitionKey>,
    pub applied: Vec<PartitionKey>,
    pub failed: Vec<(PartitionKey, String)>,
    pub still_pending: usize,
}

fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > MAX_NAME_LEN {
        return Err(EngineError::Invalid {
            what,
            reason: format!("name must be 1 to {MAX_NAME_LEN} bytes and not blank"),
        });
    }
    if name.parse::<u32>().is_ok() {
        return Err(EngineError::Invalid {
            what,
            reason: format!("name '{name}' is numeric and would be read as an id"),
        });
    }
    Ok(())
}

/// Picks the id for a new resource in one id space, the way Iggy 0.11 does:
/// the lowest id no live resource holds (a pure function of the live set, so a
/// restart assigns what the running server would have). An explicit
/// `requested` id must not be live.
///
/// The space's high-water mark `next` is raised past the id either way. It no
/// longer picks ids; it records which ids were ever used, so a caller can tell
/// that an id being reused may still have a deleted resource's leftovers on
/// disk and must clear them durably before committing (`create_group`,
/// `create_partition_dirs`).
fn assign_id(
    kind: &'static str,
    next: &mut u64,
    requested: Option<u32>,
    is_live: impl Fn(u32) -> bool,
) -> Result<u32> {
    let id = match requested {
        Some(id) if is_live(id) => return Err(EngineError::IdTaken { kind, id }),
        Some(id) => id,
        None => (FIRST_ID..=u32::MAX)
            .find(|&i| !is_live(i))
            .ok_or_else(|| EngineError::Invalid {
                what: "id",
                reason: format!("every {kind} id is in use"),
            })?,
    };
    *next = (*next).max(u64::from(id) + 1);
    Ok(id)
}

/// Mixes the engine seed with what recovery found, so a restart in the same
/// data directory never replays the server-assigned message ids of an
/// earlier run (SplitMix64's finaliser, one round per input: order matters,
/// unlike a plain XOR).
fn id_seed(seed: u64, inputs: &[u64]) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    inputs.iter().fold(mix(seed), |h, &x| {
        mix(h ^ x.wrapping_add(0x9e37_79b9_7f4a_7c15))
    })
}

impl Engine {
    /// Opens (recovers) the engine on `config.data_dir`.
    pub fn open(
        storage: Arc<dyn DurableStorage>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Result<(Engine, RecoveryReport)> {
        // The data directory's name (and its parents') durable before anything
        // is committed inside it, redone after an earlier open's failed sync.
        crate::datadir::open(storage.as_ref(), &config.data_dir)?;
        let store = MetadataStore::new(storage.clone(), &config.data_dir);
        let loaded = store.load()?;
        if loaded.is_none() {
            // No metadata is either a fresh data directory, or a crash before
            // the first commit (which leaves empty partition directories at
            // most: nothing is written into a partition before it is
            // committed). A file under `streams/` means the metadata was lost
            // behind sluice's back: starting empty would serve nothing, and
            // re-creating a stream would then remove its data as a leftover.
            let streams = config.data_dir.join(crate::layout::STREAMS_DIR);
            if let Some(file) = crate::datadir::first_file_under(storage.as_ref(), &streams)? {
                return Err(EngineError::CorruptFile {
                    path: store.path(),
                    offset: 0,
                    reason: format!(
                        "missing, but {} holds data: refusing to start empty over it (restore the metadata file, or move the data directory away to start afresh)",
                        file.display()
                    ),
                });
            }
        }
        // Metadata found in the page cache is not known durable: an earlier
        // process may have renamed it into place and then failed the
        // directory sync (Linux drops the rename's dirty state, so no plain
        // sync will ever persist it). Nothing may be acknowledged under it
        // until it has been saved again (a fresh rename and directory sync).
        let metadata_in_doubt = loaded
            .is_some()
            .then(|| "loaded at start-up, not yet known durable".to_string());
        let meta = loaded.unwrap_or_default();
        let mut engine = Engine {
            ids: SimRng::new(config.seed),
            storage,
            clock,
            store,
            meta,
            partitions: BTreeMap::new(),
            balance: BTreeMap::new(),
            reconciler: Reconciler::new(config.reconciler),
            metadata_in_doubt,
            config,
        };
        let report = engine.recover_partitions()?;
        if let Err(e) = engine.settle_metadata() {
            // Not fatal: every request that touches a partition or the
            // metadata tries again first, and refuses until it succeeds.
            tracing::warn!(error = %e, "could not make the loaded metadata durable; refusing writes until it is");
        }
        // The seed alone would replay the ids of the previous run in this data
        // directory after every restart; mix in what the data directory holds
        // now (and the clock, which simulations control) so they move on.
        let next_offsets: u64 = engine
            .partitions
            .values()
            .fold(0, |a, p| a.wrapping_add(p.log().next_offset()));
        engine.ids = SimRng::new(id_seed(
            engine.config.seed,
            &[
                engine.meta.version,
                report.messages,
                next_offsets,
                engine.clock.now_micros(),
            ],
        ));
        Ok((engine, report))
    }

    fn recover_partitions(&mut self) -> Result<RecoveryReport> {
        let mut report = RecoveryReport::default();
        for key in self.meta.partition_keys() {
            let (options, generation) = self.partition_settings(key)?;
            let floor = match self.config.purge_mode {
                PurgeMode::Obligation if !crate::teeth::enabled(Mechanism::GenerationFilter) => 0,
                PurgeMode::Obligation => generation,
                #[cfg(feature = "naive-purge")]
                PurgeMode::NaiveIggyOrder => 0,
            };
            let partition = match Partition::recover(
                self.storage.clone(),
                &self.config.data_dir,
                key,
                options,
                generation,
                floor,
            ) {
                Ok((p, r)) => {
                    report.messages += p.log().message_count();
                    report.consumer_offsets += r.consumers.loaded;
                    report.group_offsets += r.groups.loaded;
                    report.stale_records += r.stale_records();
                    report.corrupt_offset_records +=
                        (r.consumers.corrupt.len() + r.groups.corrupt.len()) as u64;
                    report.tail_cuts += r.log.tail_cuts.len() as u64;
                    report.per_partition.insert(key, r);
                    p
                }
                Err(e @ EngineError::CorruptFile { .. }) => {
                    tracing::error!(partition = %key, error = %e, "partition degraded at recovery");
                    report.degraded.push((key, e.to_string()));
                    Partition::degraded(
                        self.storage.clone(),
                        &self.config.data_dir,
                        key,
                        options,
                        generation,
                        e.to_string(),
                    )
                }
                Err(e) => return Err(e),
            };
            if partition.obligation().is_some_and(|o| !o.is_applied()) {
                self.reconciler.mark_pending(key, 0);
            }
            if partition.degraded_reason().is_some()
                && !report.degraded.iter().any(|(k, _)| *k == key)
            {
                let reason = partition.degraded_reason().unwrap_or_default().to_string();
                tracing::error!(partition = %key, reason, "partition degraded at recovery");
                report.degraded.push((key, reason));
            }
            self.partitions.insert(key, partition);
            report.partitions += 1;
        }
        if report.stale_records > 0 {
            tracing::info!(
                stale_records = report.stale_records,
                "ignored records of purged generations at recovery"
            );
        }
        Ok(report)
    }

    fn partition_settings(&self, key: PartitionKey) -> Result<(TopicOptions, u64)> {
        let topic = self
            .meta
            .topic(key.stream, key.topic)
            .ok_or_else(|| EngineError::Internal(format!("no topic for {key}")))?;
        let p = topic
            .partitions
            .get(&key.partition)
            .ok_or_else(|| EngineError::Internal(format!("no partition {key}")))?;
        Ok((topic.options, p.committed_generation))
    }

    pub fn storage(&self) -> &Arc<dyn DurableStorage> {
        &self.storage
    }

    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    pub fn partition(&self, key: PartitionKey) -> Option<&Partition> {
        self.partitions.get(&key)
    }

    pub fn partitions(&self) -> impl Iterator<Item = &Partition> {
        self.partitions.values()
    }

    /// Applies `change` to a copy of the metadata and commits it durably; the
    /// in-memory metadata changes only if the commit succeeded.
    fn commit<T>(&mut self, change: impl FnOnce(&mut Metadata) -> Result<T>) -> Result<T> {
        self.settle_metadata()?;
        let mut next = self.meta.clone();
        let out = change(&mut next)?;
        next.version = self.meta.version + 1;
        match self.store.save(&next) {
            Ok(()) => {
                self.meta = next;
                Ok(out)
            }
            Err(e) => {
                // The failed save may still have renamed the new file into
                // place (only its directory sync failed): a restart could read
                // a change this process is about to report as failed, and
                // writes acknowledged meanwhile under the old metadata would be
                // lost to it. Put the previous metadata back on disk first.
                tracing::warn!(error = %e, "metadata save failed; restoring the previous metadata");
                let mut back = self.meta.clone();
                back.version = next.version + 1;
                match self.store.save(&back) {
                    Ok(()) => self.meta = back,
                    Err(e2) => {
                        tracing::error!(error = %e2, "could not restore the previous metadata; refusing service until a save succeeds");
                        self.metadata_in_doubt = Some(format!("{e}; then {e2}"));
                    }
                }
                Err(e)
            }
        }
    }

    /// If the metadata on disk is in doubt, tries to make it match memory
    /// again; refuses with a typed error while it cannot.
    fn settle_metadata(&mut self) -> Result<()> {
        let Some(reason) = self.metadata_in_doubt.clone() else {
            return Ok(());
        };
        // The same record again (same version: nothing changed), through a
        // fresh temporary file, rename and directory sync.
        match self.store.save(&self.meta) {
            Ok(()) => {
                tracing::info!(reason, "metadata made durable again");
                self.metadata_in_doubt = None;
                Ok(())
            }
            Err(e) => Err(EngineError::Unavailable(format!(
                "metadata could not be made durable ({reason}; retry: {e})"
            ))),
        }
    }

    // ---- lookups -------------------------------------------------------

    pub fn resolve_stream(&self, id: &Identifier) -> Result<u32> {
        self.meta
            .streams
            .values()
            .find(|s| id.matches(s.id, &s.name))
            .map(|s| s.id)
            .ok_or_else(|| EngineError::StreamNotFound(id.clone()))
    }

    pub fn resolve_topic(&self, stream: &Identifier, topic: &Identifier) -> Result<(u32, u32)> {
        let s = self.resolve_stream(stream)?;
        self.meta.streams[&s]
            .topics
            .values()
            .find(|t| topic.matches(t.id, &t.name))
            .map(|t| (s, t.id))
            .ok_or_else(|| EngineError::TopicNotFound {
                stream: stream.clone(),
                topic: topic.clone(),
            })
    }

    pub fn stream(&self, id: &Identifier) -> Result<&StreamMeta> {
        let s = self.resolve_stream(id)?;
        Ok(&self.meta.streams[&s])
    }

    pub fn streams(&self) -> impl Iterator<Item = &StreamMeta> {
        self.meta.streams.values()
    }

    pub fn topic(&self, stream: &Identifier, topic: &Identifier) -> Result<&TopicMeta> {
        let (s, t) = self.resolve_topic(stream, topic)?;
        Ok(&self.meta.streams[&s].topics[&t])
    }

    fn partition_mut(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
    ) -> Result<&mut Partition> {
        self.settle_metadata()?;
        let (s, t) = self.resolve_topic(stream, topic)?;
        let key = PartitionKey {
            stream: s,
            topic: t,
            partition,
        };
        self.partitions
            .get_mut(&key)
            .ok_or(EngineError::PartitionNotFound {
                stream: s,
                topic: t,
                partition,
            })
    }

    /// The keys of a topic's partitions, in order.
    fn topic_partition_keys(&self, stream: u32, topic: u32) -> Vec<PartitionKey> {
        self.partitions
            .range(topic_keys(stream, topic))
            .map(|(k, _)| *k)
            .collect()
    }

    /// Messages and bytes stored in a topic's partitions.
    pub fn topic_stats(&self, stream: u32, topic: u32) -> (u64, u64) {
        self.partitions
            .range(topic_keys(stream, topic))
            .fold((0, 0), |(m, b), (_, p)| {
                (m + p.log().message_count(), b + p.log().size_bytes())
            })
    }

    // ---- streams -------------------------------------------------------

    pub fn create_stream(&mut self, id: Option<u32>, name: &str) -> Result<StreamMeta> {
        check_name("stream name", name)?;
        let now = self.clock.now_micros();
        self.commit(|m| {
            if m.streams.values().any(|s| s.name == name) {
                return Err(EngineError::NameTaken {
                    kind: "stream",
                    name: name.into(),
                });
            }
            let streams = &m.streams;
            let id = assign_id("stream", &mut m.next_stream_id, id, |i| {
                streams.contains_key(&i)
            })?;
            let s = StreamMeta {
                id,
                name: name.to_string(),
                created_at: now,
                topics: BTreeMap::new(),
                next_topic_id: u64::from(FIRST_ID),
            };
            m.streams.insert(id, s.clone());
            Ok(s)
        })
    }

    pub fn update_stream(&mut self, id: &Identifier, name: &str) -> Result<()> {
        check_name("stream name", name)?;
        let s = self.resolve_stream(id)?;
        self.commit(|m| {
            if m.streams.values().any(|x| x.name == name && x.id != s) {
                return Err(EngineError::NameTaken {
                    kind: "stream",
                    name: name.into(),
                });
            }
            if let Some(st) = m.streams.get_mut(&s) {
                st.name = name.to_string();
            }
            Ok(())
        })
    }

    pub fn delete_stream(&mut self, id: &Identifier) -> Result<()> {
        let s = self.resolve_stream(id)?;
        self.commit(|m| {
            m.streams.remove(&s);
            Ok(())
        })?;
        self.partitions.retain(|k, _| k.stream != s);
        self.balance.retain(|k, _| k.0 != s);
        self.remove_tree(&stream_dir(&self.config.data_dir, s));
        Ok(())
    }

    /// Best-effort removal of a deleted resource's files: the metadata no
    /// longer names them, so a leftover is garbage, never data.
    fn remove_tree(&self, dir: &Path) {
        match self.storage.remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove a deleted resource's files")
            }
        }
        if let Some(parent) = dir.parent()
            && let Err(e) = self.storage.sync_dir(parent)
        {
            tracing::warn!(dir = %parent.display(), error = %e, "directory sync after removal failed");
        }
    }

    // ---- topics --------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub fn create_topic(
        &mut self,
        stream: &Identifier,
        id: Option<u32>,
        name: &str,
        partitions: u32,
        options: TopicOptions,
        message_expiry: u64,
        max_topic_size: u64,
        replication_factor: u8,
    ) -> Result<TopicMeta> {
        check_name("topic name", name)?;
        if partitions > MAX_PARTITIONS {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: format!("{partitions} exceeds the limit of {MAX_PARTITIONS}"),
            });
        }
        let s = self.resolve_stream(stream)?;
        let st = &self.meta.streams[&s];
        if st.topics.values().any(|t| t.name == name) {
            return Err(EngineError::NameTaken {
                kind: "topic",
                name: name.into(),
            });
        }
        let mut next_topic_id = st.next_topic_id;
        let id = assign_id("topic", &mut next_topic_id, id, |i| {
            st.topics.contains_key(&i)
        })?;
        let now = self.clock.now_micros();
        let topic = TopicMeta {
            id,
            name: name.to_string(),
            created_at: now,
            options,
            message_expiry,
            max_topic_size,
            replication_factor: replication_factor.max(1),
            partitions: BTreeMap::new(),
            groups: BTreeMap::new(),
            next_partition_id: u64::from(FIRST_ID) + u64::from(partitions),
            next_group_id: u64::from(FIRST_ID),
        };
        let ids: Vec<u32> = (FIRST_ID..FIRST_ID + partitions).collect();
        let created = self.create_partition_dirs(s, &topic, &ids)?;
        let committed = self.commit(|m| {
            let mut topic = topic.clone();
            for &p in &ids {
                topic.partitions.insert(
                    p,
                    PartitionMeta {
                        id: p,
                        created_at: now,
                        committed_generation: 0,
                    },
                );
            }
            let st = m
                .streams
                .get_mut(&s)
                .ok_or_else(|| EngineError::Internal("stream vanished".into()))?;
            st.next_topic_id = st.next_topic_id.max(next_topic_id);
            st.topics.insert(id, topic.clone());
            Ok(topic)
        })?;
        for p in created {
            self.partitions.insert(p.key, p);
        }
        Ok(committed)
    }

    /// Creates the directories of the new partitions `ids` and makes every name
    /// they need durable, before the metadata naming them is committed.
    ///
    /// - A partition directory that already exists is a leftover (a deleted
    ///   partition's, or an earlier failed attempt's). It is removed and the
    ///   removal synced *before* fresh directories are created, so a leftover
    ///   file can never be adopted by the new partition.
    /// - Every name on the way up to the data directory is synced through a
    ///   `DirTracker`. A name this call created is noted as created. A name
    ///   that already existed is known durable if a committed partition lies
    ///   below it (its creation was synced before that commit). Otherwise an
    ///   earlier attempt, perhaps by an earlier process, created it, and a
    ///   failed sync may have dropped it (Linux semantics): it is noted and
    ///   re-dirtied (renamed away and back; nothing below it is live) before
    ///   its parent is synced. So a retry after a failed sync redoes every
    ///   name that sync covered, and a plain retried sync never stands in for
    ///   a lost one.
    fn create_partition_dirs(
        &self,
        s: u32,
        topic: &TopicMeta,
        ids: &[u32],
    ) -> Result<Vec<Partition>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let storage = self.storage.as_ref();
        let data = &self.config.data_dir;
        let tdir = topic_dir(data, s, topic.id);
        let pdir = tdir.join("partitions");
        let sdir = stream_dir(data, s);
        let topic_live = !self.topic_partition_keys(s, topic.id).is_empty();
        let stream_live = self.partitions.keys().any(|k| k.stream == s);
        let any_live = !self.partitions.is_empty();
        // Bottom up: each directory whose name must be durable in its parent,
        // and whether a committed partition lies below it.
        let chain = [
            (pdir.clone(), topic_live),
            (tdir, topic_live),
            (sdir.join("topics"), stream_live),
            (sdir, stream_live),
            (data.join("streams"), any_live),
        ];
        let mut existed = Vec::with_capacity(chain.len());
        for (dir, live) in &chain {
            existed.push(*live || storage.exists(dir)?);
        }

        let mut partitions_dir = DirTracker::new(&pdir);
        for &p in ids {
            let root = pdir.join(p.to_string());
            if storage.exists(&root)? {
                tracing::warn!(dir = %root.display(), "removing a leftover partition directory before creating the partition");
                storage.remove_dir_all(&root)?;
                partitions_dir.note(&p.to_string(), NameChange::Removed);
            }
        }
        if partitions_dir.has_unconfirmed() {
            partitions_dir.sync(storage)?;
        }

        let mut out = Vec::with_capacity(ids.len());
        for &p in ids {
            let key = PartitionKey {
                stream: s,
                topic: topic.id,
                partition: p,
            };
            let paths = PartitionPaths::new(data, key);
            let mut root = DirTracker::new(&paths.root);
            for (dir, name) in [
                (&paths.segments, "segments"),
                (&paths.consumers, "consumers"),
                (&paths.groups, "groups"),
            ] {
                storage.create_dir_all(dir)?;
                root.note(name, NameChange::Created);
            }
            root.sync(storage)?;
            partitions_dir.note(&p.to_string(), NameChange::Created);
            out.push(Partition::create(
                self.storage.clone(),
                data,
                key,
                topic.options,
            ));
        }
        partitions_dir.sync(storage)?;

        for ((dir, live), existed) in chain.iter().zip(existed) {
            if *live {
                continue;
            }
            let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
                return Err(EngineError::Internal(format!(
                    "{} has no parent",
                    dir.display()
                )));
            };
            let mut tracker = DirTracker::new(parent);
            tracker.note(&name.to_string_lossy(), NameChange::Created);
            if existed {
                tracker.force_redirty();
            }
            tracker.sync(storage)?;
        }
        Ok(out)
    }

    pub fn update_topic(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
        message_expiry: u64,
        max_topic_size: u64,
    ) -> Result<()> {
        check_name("topic name", name)?;
        let (s, t) = self.resolve_topic(stream, topic)?;
        self.commit(|m| {
            let st = m
                .streams
                .get_mut(&s)
                .ok_or_else(|| EngineError::Internal("stream vanished".into()))?;
            if st.topics.values().any(|x| x.name == name && x.id != t) {
                return Err(EngineError::NameTaken {
                    kind: "topic",
                    name: name.into(),
                });
            }
            if let Some(tp) = st.topics.get_mut(&t) {
                tp.name = name.to_string();
                tp.message_expiry = message_expiry;
                tp.max_topic_size = max_topic_size;
            }
            Ok(())
        })
    }

    pub fn delete_topic(&mut self, stream: &Identifier, topic: &Identifier) -> Result<()> {
        let (s, t) = self.resolve_topic(stream, topic)?;
        self.commit(|m| {
            if let Some(st) = m.streams.get_mut(&s) {
                st.topics.remove(&t);
            }
            Ok(())
        })?;
        self.partitions
            .retain(|k, _| !(k.stream == s && k.topic == t));
        self.balance.remove(&(s, t));
        self.remove_tree(&topic_dir(&self.config.data_dir, s, t));
        Ok(())
    }

    pub fn create_partitions(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<Vec<u32>> {
        let (s, t) = self.resolve_topic(stream, topic)?;
        let tm = self.meta.streams[&s].topics[&t].clone();
        let have = u32::try_from(tm.partitions.len()).unwrap_or(u32::MAX);
        if count == 0 || have.checked_add(count).is_none_or(|n| n > MAX_PARTITIONS) {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: format!(
                    "must be 1 or more, and at most {MAX_PARTITIONS} in all (the topic has {have})"
                ),
            });
        }
        // As in Iggy 0.11, new partitions continue after the highest live one
        // (deleting takes the last ones, so a topic's ids are 0..count). Such
        // an id may be a deleted partition's: `create_partition_dirs` removes
        // its leftover directory durably before the commit.
        let first = tm
            .partitions
            .keys()
            .next_back()
            .map_or(u64::from(FIRST_ID), |&p| u64::from(p) + 1);
        let last = first + u64::from(count) - 1;
        let (Ok(first), Ok(last)) = (u32::try_from(first), u32::try_from(last)) else {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: "the partition ids would pass the largest id".into(),
            });
        };
        let ids: Vec<u32> = (first..=last).collect();
        let end = u64::from(last) + 1;
        let created = self.create_partition_dirs(s, &tm, &ids)?;
        let now = self.clock.now_micros();
        self.commit(|m| {
            if let Some(tp) = m.streams.get_mut(&s).and_then(|st| st.topics.get_mut(&t)) {
                tp.next_partition_id = tp.next_partition_id.max(end);
                for &p in &ids {
                    tp.partitions.insert(
                        p,
                        PartitionMeta {
                            id: p,
                            created_at: now,
                            committed_generation: 0,
                        },
                    );
                }
            }
            Ok(())
        })?;
        for p in created {
            self.partitions.insert(p.key, p);
        }
        Ok(ids)
    }

    /// Deletes the last `count` partitions of a topic.
    pub fn delete_partitions(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<Vec<u32>> {
        let (s, t) = self.resolve_topic(stream, topic)?;
        let ids: Vec<u32> = self.meta.streams[&s].topics[&t]
            .partitions
            .keys()
            .rev()
            .take(count as usize)
            .copied()
            .collect();
        if count == 0 || ids.len() < count as usize {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: format!("cannot delete {count} of {} partitions", ids.len()),
            });
        }
        self.commit(|m| {
            if let Some(tp) = m.streams.get_mut(&s).and_then(|st| st.topics.get_mut(&t)) {
                for p in &ids {
                    tp.partitions.remove(p);
                }
            }
            Ok(())
        })?;
        for &p in &ids {
            let key = PartitionKey {
                stream: s,
                topic: t,
                partition: p,
            };
            if let Some(part) = self.partitions.remove(&key) {
                self.remove_tree(&part.paths.root);
            }
        }
        Ok(ids)
    }

    // ---- consumer groups -----------------------------------------------

    pub fn create_group(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        id: Option<u32>,
        name: &str,
    ) -> Result<GroupMeta> {
        check_name("consumer group name", name)?;
        let (s, t) = self.resolve_topic(stream, topic)?;
        let tm = &self.meta.streams[&s].topics[&t];
        if tm.groups.values().any(|g| g.name == name) {
            return Err(EngineError::NameTaken {
                kind: "consumer group",
                name: name.into(),
            });
        }
        let mut next_group_id = tm.next_group_id;
        let gid = assign_id("consumer group", &mut next_group_id, id, |i| {
            tm.groups.contains_key(&i)
        })?;
        // An id below the mark may be a deleted group's (ids are reused as in
        // Iggy): its offset files may be on disk (a buffered delete undone by
        // a power loss), and recovery would hand them to the new group. Remove
        // them durably before the group is committed.
        if u64::from(gid) < tm.next_group_id {
            let keys: Vec<PartitionKey> = self.topic_partition_keys(s, t);
            for key in keys {
                if let Some(p) = self.partitions.get_mut(&key) {
                    p.clear_offset_leftover(Consumer::group(gid))?;
                }
            }
        }
        let now = self.clock.now_micros();
        self.commit(|m| {
            let tp = m
                .streams
                .get_mut(&s)
                .and_then(|st| st.topics.get_mut(&t))
                .ok_or_else(|| EngineError::Internal("topic vanished".into()))?;
            tp.next_group_id = tp.next_group_id.max(next_group_id);
            let g = GroupMeta {
                id: gid,
                name: name.to_string(),
                created_at: now,
            };
            tp.groups.insert(gid, g.clone());
            Ok(g)
        })
    }

    pub fn group(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<&GroupMeta> {
        let tm = self.topic(stream, topic)?;
        tm.groups
            .values()
            .find(|g| group.matches(g.id, &g.name))
            .ok_or_else(|| EngineError::GroupNotFound(group.clone()))
    }

    /// Deletes a group and its offsets in every partition of the topic.
    pub fn delete_group(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<()> {
        let gid = self.group(stream, topic, group)?.id;
        let (s, t) = self.resolve_topic(stream, topic)?;
        self.commit(|m| {
            if let Some(tp) = m.streams.get_mut(&s).and_then(|st| st.topics.get_mut(&t)) {
                tp.groups.remove(&gid);
            }
            Ok(())
        })?;
        let keys: Vec<PartitionKey> = self
            .partitions
            .keys()
            .filter(|k| k.stream == s && k.topic == t)
            .copied()
            .collect();
        for key in keys {
            if let Some(p) = self.partitions.get_mut(&key)
                && let Err(e) = p.delete_offset(Consumer::group(gid))
            {
                tracing::warn!(partition = %key, group = gid, error = %e, "could not delete a deleted group's offset");
            }
        }
        Ok(())
    }

    // ---- purge ---------------------------------------------------------

    /// Purges every partition of a stream (one commit point for all of them).
    pub fn purge_stream(&mut self, stream: &Identifier) -> Result<()> {
        let s = self.resolve_stream(stream)?;
        let keys: Vec<PartitionKey> = self
            .partitions
            .keys()
            .filter(|k| k.stream == s)
            .copied()
            .collect();
        self.purge(keys)
    }

    /// Purges every partition of a topic (one commit point for all of them).
    pub fn purge_topic(&mut self, stream: &Identifier, topic: &Identifier) -> Result<()> {
        let (s, t) = self.resolve_topic(stream, topic)?;
        let keys: Vec<PartitionKey> = self
            .partitions
            .keys()
            .filter(|k| k.stream == s && k.topic == t)
            .copied()
            .collect();
        self.purge(keys)
    }

    pub fn purge_partition(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
    ) -> Result<()> {
        let key = self.partition_mut(stream, topic, partition)?.key;
        self.purge(vec![key])
    }

    /// The commit point: one metadata write bumps the committed generation of
    /// every partition in `keys`. Once it returns `Ok`, the purge is
    /// acknowledged and every read and write sees only the new, empty history;
    /// cleanup of the old files is the reconciler's obligation.
    fn purge(&mut self, keys: Vec<PartitionKey>) -> Result<()> {
        for key in &keys {
            if let Some(p) = self.partitions.get(key)
                && let Some(reason) = p.degraded_reason()
            {
                return Err(EngineError::Degraded {
                    key: *key,
                    reason: reason.to_string(),
                });
            }
        }
        #[cfg(feature = "naive-purge")]
        if self.config.purge_mode == PurgeMode::NaiveIggyOrder {
            // Iggy's order: delete and sync (warnings only) first, then record
            // the generation; no obligation, nothing left for the reconciler.
            for key in &keys {
                if let Some(p) = self.partitions.get_mut(key) {
                    p.naive_cleanup();
                }
            }
            let generations = self.commit_new_generations(&keys)?;
            for (key, generation) in generations {
                if let Some(p) = self.partitions.get_mut(&key) {
                    p.reset_to_generation(generation);
                }
            }
            return Ok(());
        }
        let generations = self.commit_new_generations(&keys)?;
        let now = self.now_ms();
        for (key, generation) in generations {
            if let Some(p) = self.partitions.get_mut(&key) {
                p.reset_to_generation(generation);
                p.begin_obligation(generation);
                self.reconciler.mark_pending(key, now);
            }
            tracing::info!(partition = %key, generation, "purge committed");
        }
        // Cleanup starts right away; its failures are retried, never returned:
        // the purge itself is already durable.
        self.reconcile();
        Ok(())
    }

    /// The commit point of a purge: one metadata write bumping the committed
    /// generation of every partition in `keys`; returns each new generation.
    fn commit_new_generations(
        &mut self,
        keys: &[PartitionKey],
    ) -> Result<Vec<(PartitionKey, u64)>> {
        self.commit(|m| {
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let p = m
                    .partition_mut(*key)
                    .ok_or_else(|| EngineError::Internal(format!("no partition {key}")))?;
                p.committed_generation += 1;
                out.push((*key, p.committed_generation));
            }
            Ok(out)
        })
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_micros() / 1000
    }

    /// One reconciler pass over the partitions that are due.
    pub fn reconcile(&mut self) -> PassReport {
        let now = self.now_ms();
        self.reconcile_at(now)
    }

    /// One reconciler pass as of `now_ms` (simulations pass their own time).
    pub fn reconcile_at(&mut self, now_ms: u64) -> PassReport {
        self.reconciler.begin_pass();
        let mut report = PassReport::default();
        // Cleanup removes what the committed generations make dead; while the
        // metadata holding them is not durable, a power loss could bring back
        // the older generations, so nothing may be removed yet.
        if let Err(e) = self.settle_metadata() {
            let msg = e.to_string();
            for key in self.reconciler.due(now_ms) {
                self.reconciler.record_sites(&[], Some(FailureSite::Other));
                self.reconciler.record_failure(key, &msg, now_ms);
                report.attempted.push(key);
                report.failed.push((key, msg.clone()));
            }
            return report;
        }
        let due = self.reconciler.due(now_ms);
        // Take the due partitions out of the map for the attempt (O(due), not
        // O(partitions)) and put every one back, whatever happened.
        let mut taken: Vec<(PartitionKey, Partition)> = due
            .iter()
            .filter_map(|k| self.partitions.remove(k).map(|p| (*k, p)))
            .collect();
        let work = taken.iter_mut().map(|(k, p)| (*k, p)).collect();
        let outcomes = run_cleanups(work, self.reconciler.config().concurrency);
        self.partitions.extend(taken);
        // Bookkeeping in key order, whatever order the cleanups finished in:
        // the backoff jitter draws from a seeded RNG.
        let mut outcomes = outcomes.into_iter().peekable();
        for key in due {
            report.attempted.push(key);
            let Some(done) = outcomes.next_if(|o| o.key == key) else {
                if self.partitions.contains_key(&key) {
                    // Its cleanup thread panicked (a bug): retry later.
                    self.reconciler
                        .record_failure(key, "cleanup attempt panicked", now_ms);
                } else {
                    // Deleted since: nothing left to clean.
                    self.reconciler.forget(key);
                }
                continue;
            };
            let Some(outcome) = done.outcome else {
                self.reconciler
                    .record_failure(key, "partition degraded", now_ms);
                continue;
            };
            self.reconciler
                .record_sites(&done.worked_on, done.failed_at);
            match outcome {
                Ok(()) => {
                    self.reconciler.record_success(key);
                    report.applied.push(key);
                }
                Err(e) => {
                    let msg = e.to_string();
                    self.reconciler.record_failure(key, &msg, now_ms);
                    report.failed.push((key, msg));
                }
            }
        }
        report.still_pending = self.reconciler.pending().len();
        report
    }

    /// Runs passes (ignoring backoff) until nothing is pending or `max_passes` ran.
    /// Returns the number of passes that had work.
    pub fn reconcile_until_idle(&mut self, max_passes: u32) -> u32 {
        let mut passes = 0;
        while passes < max_passes && !self.reconciler.pending().is_empty() {
            self.reconcile_at(u64::MAX);
            passes += 1;
        }
        passes
    }

    /// Flushes every partition (buffered appends, stores and deletes) to
    /// durable storage; a graceful shutdown calls it after the last request.
    /// Every partition is attempted; the first error is returned.
    pub fn sync_all(&mut self) -> Result<()> {
        let mut first = None;
        for (key, p) in self.partitions.iter_mut() {
            if let Err(e) = p.sync_all() {
                tracing::error!(partition = %key, error = %e, "flush at shutdown failed");
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    // ---- messages ------------------------------------------------------

    fn pick_partition(&mut self, s: u32, t: u32, partitioning: &Partitioning) -> Result<u32> {
        let ids: Vec<u32> = self.meta.streams[&s].topics[&t]
            .partitions
            .keys()
            .copied()
            .collect();
        if ids.is_empty() {
            return Err(EngineError::Invalid {
                what: "partitioning",
                reason: "the topic has no partitions".into(),
            });
        }
        Ok(match partitioning {
            Partitioning::PartitionId(p) => *p,
            Partitioning::Balanced => {
                let next = self.balance.entry((s, t)).or_insert(0);
                let id = ids[*next as usize % ids.len()];
                *next = next.wrapping_add(1);
                id
            }
            Partitioning::MessagesKey(key) => ids[crc32c::crc32c(key) as usize % ids.len()],
        })
    }

    pub fn send(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partitioning: &Partitioning,
        messages: Vec<NewMessage>,
    ) -> Result<Sent> {
        let (s, t) = self.resolve_topic(stream, topic)?;
        let partition_id = self.pick_partition(s, t, partitioning)?;
        let now = self.clock.now_micros();
        let stored: Vec<Message> = messages
            .into_iter()
            .map(|m| Message {
                offset: 0,
                timestamp: now,
                id: if m.id == 0 {
                    (u128::from(self.ids.next_u64()) << 64 | u128::from(self.ids.next_u64())).max(1)
                } else {
                    m.id
                },
                checksum: crc32c::crc32c(&m.payload),
                headers: m.headers,
                payload: m.payload,
            })
            .collect();
        let p = self.partition_mut(stream, topic, partition_id)?;
        let durability = p.options().durability;
        let (base_offset, count) = p.append(stored)?;
        Ok(Sent {
            partition_id,
            base_offset,
            count,
            durability,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
        strategy: PollingStrategy,
        count: u64,
        auto_commit: bool,
    ) -> Result<Polled> {
        self.check_group(stream, topic, consumer)?;
        self.partition_mut(stream, topic, partition)?
            .poll(consumer, strategy, count, auto_commit)
    }

    fn check_group(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        consumer: Consumer,
    ) -> Result<()> {
        if consumer.kind == OffsetKind::Group {
            self.group(stream, topic, &Identifier::Numeric(consumer.id))?;
        }
        Ok(())
    }

    pub fn store_offset(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
        offset: u64,
    ) -> Result<()> {
        self.check_group(stream, topic, consumer)?;
        self.partition_mut(stream, topic, partition)?
            .store_offset(consumer, offset)
    }

    /// `(current_offset, stored_offset)`; `None` when the consumer has no stored offset.
    pub fn get_offset(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
    ) -> Result<Option<(u64, u64)>> {
        self.check_group(stream, topic, consumer)?;
        let p = self.partition_mut(stream, topic, partition)?;
        let current = p.log().last_offset().unwrap_or(0);
        Ok(p.stored_offset(consumer)?.map(|o| (current, o)))
    }

    pub fn delete_offset(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
    ) -> Result<bool> {
        self.check_group(stream, topic, consumer)?;
        self.partition_mut(stream, topic, partition)?
            .delete_offset(consumer)
    }
}

/// Every partition key a topic can have, as a map range.
fn topic_keys(stream: u32, topic: u32) -> std::ops::RangeInclusive<PartitionKey> {
    let key = |partition| PartitionKey {
        stream,
        topic,
        partition,
    };
    key(0)..=key(u32::MAX)
}

/// What one partition's cleanup attempt did, for the reconciler's books.
struct CleanupDone {
    key: PartitionKey,
    /// `None`: the partition is degraded and was not attempted.
    outcome: Option<Result<()>>,
    worked_on: Vec<crate::partition::purge::DirKind>,
    failed_at: Option<FailureSite>,
}

fn cleanup_one(key: PartitionKey, p: &mut Partition) -> CleanupDone {
    if p.degraded_reason().is_some() {
        return CleanupDone {
            key,
            outcome: None,
            worked_on: Vec::new(),
            failed_at: None,
        };
    }
    let outcome = p.run_cleanup();
    let failed_at = outcome.as_ref().err().map(|e| p.failure_site(e));
    CleanupDone {
        key,
        outcome: Some(outcome),
        worked_on: p.cleanup_worked_on(),
        failed_at,
    }
}

/// Runs one cleanup attempt on each partition, `concurrency` at a time, and
/// returns the outcomes in key order. Partitions share no file, directory or
/// name tracker, so their attempts are independent; with `concurrency` 1 they
/// run one after another on this thread (a fixed I/O order).
fn run_cleanups(work: Vec<(PartitionKey, &mut Partition)>, concurrency: usize) -> Vec<CleanupDone> {
    let threads = concurrency.clamp(1, work.len().max(1));
    let mut done: Vec<CleanupDone> = if threads == 1 {
        work.into_iter().map(|(k, p)| cleanup_one(k, p)).collect()
    } else {
        // Deal the partitions out round-robin so each thread gets a share.
        let mut shares: Vec<Vec<(PartitionKey, &mut Partition)>> =
            (0..threads).map(|_| Vec::new()).collect();
        for (i, item) in work.into_iter().enumerate() {
            shares[i % threads].push(item);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|share| {
                    scope.spawn(move || {
                        share
                            .into_iter()
                            .map(|(k, p)| cleanup_one(k, p))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| match h.join() {
                    Ok(v) => v,
                    // A panicking cleanup is a bug; keep the process up and
                    // let the partitions of that share be retried.
                    Err(_) => {
                        tracing::error!("a purge cleanup thread panicked");
                        Vec::new()
                    }
                })
                .collect()
        })
    };
    done.sort_by_key(|d| d.key);
    done
}
