//! Opening the engine: the data directory, the metadata, every partition.
//!
//! Invariants:
//! - Recovery filters by commit, never by what survived on disk: each
//!   partition is rebuilt for the generation the metadata commits, and older
//!   records are ignored (never served, never seeded).
//! - A partition whose files recovery cannot trust is kept, degraded (it
//!   refuses service with the reason), never guessed at; the rest serve.
//! - Metadata read at start-up is in doubt until saved again: an earlier
//!   process may have renamed it into place without a durable directory sync.
//! - Every partition whose obligation is not `Applied` is pending in the
//!   reconciler when `open` returns, and so is a delete obligation for every
//!   directory or group offset file the metadata does not name
//!   (engine/deletion.rs): a deleted resource's files that a power loss
//!   brought back are never adopted, and they are removed; and so is a
//!   retention obligation for every partition with segment files below its
//!   committed low-water mark (never loaded: engine/retention.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sluice_storage::SimRng;
use sluice_storage::{DurableStorage, PooledStorage};

use super::{Engine, EngineConfig, PurgeMode};
use crate::clock::Clock;
use crate::error::{EngineError, Result};
use crate::metadata::{MetadataStore, PartitionKey, ResourceKey, TopicOptions};
use crate::partition::reconciler::{ObligationKey, Reconciler};
use crate::partition::{Partition, PartitionRecovery};
use crate::teeth::Mechanism;

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

impl Engine {
    /// Opens (recovers) the engine on `config.data_dir`.
    pub fn open(
        storage: Arc<dyn DurableStorage>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Result<(Engine, RecoveryReport)> {
        // Every file goes through the pool from here on, recovery's too: a
        // recovery of more files than the bound must not need more descriptors.
        let pool = config
            .max_open_files
            .map(|bound| PooledStorage::new(storage.clone(), bound));
        let storage: Arc<dyn DurableStorage> = match &pool {
            Some(pool) => Arc::new(pool.clone()),
            None => storage,
        };
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
        // Every later commit keeps the id bookkeeping (and asserts it does):
        // a file that breaks it was not written by this engine's rules.
        if let Err(reason) = meta.check_ids() {
            return Err(EngineError::CorruptFile {
                path: store.path(),
                offset: 0,
                reason: format!("inconsistent ids: {reason}"),
            });
        }
        let mut engine = Engine {
            ids: SimRng::new(config.seed),
            storage,
            pool,
            clock,
            store,
            meta,
            partitions: BTreeMap::new(),
            balance: BTreeMap::new(),
            members: Default::default(),
            reconciler: Reconciler::new(config.reconciler),
            deletions: Default::default(),
            retention_index: Default::default(),
            next_cleanup_token: 0,
            metadata_in_doubt,
            wake_reconciler: None,
            tier: None,
            tier_serial: 0,
            config,
        };
        let (report, orphan_groups) = engine.recover_partitions()?;
        if engine.keeps_obligations() {
            engine.resume_deletions();
            engine.find_orphans(orphan_groups)?;
        }
        if let Err(e) = engine.ensure_metadata_durable() {
            // Not fatal: every request that touches a partition or the
            // metadata tries again first, and refuses until it succeeds.
            tracing::warn!(error = %e, "could not make the loaded metadata durable; refusing writes until it is");
        }
        // The seed alone would replay the ids of the previous run in this data
        // directory after every restart; mix in what the data directory holds
        // now (and the clock, which simulations control) so they move on:
        // each mixed in order with SplitMix64's finaliser (`from_parts`).
        let next_offsets: u64 = engine
            .partitions
            .values()
            .fold(0, |a, p| a.wrapping_add(p.log().next_offset()));
        engine.ids = SimRng::from_parts(
            engine.config.seed,
            &[
                engine.meta.version,
                report.messages,
                next_offsets,
                engine.clock.now_micros(),
            ],
        );
        engine.assert_invariants("recovery");
        Ok((engine, report))
    }

    /// Recovers every partition the metadata names; returns what it found,
    /// and the group offset files of groups the metadata no longer names.
    fn recover_partitions(&mut self) -> Result<(RecoveryReport, Vec<ResourceKey>)> {
        let mut report = RecoveryReport::default();
        let mut orphan_groups = BTreeSet::new();
        for key in self.meta.partition_keys() {
            let (options, generation) = self.partition_settings(key);
            let live_groups: BTreeSet<u32> = self
                .topic_meta(key.topic_key())
                .groups
                .keys()
                .copied()
                .collect();
            let floor = match self.config.purge_mode {
                PurgeMode::Obligation if !crate::teeth::enabled(Mechanism::GenerationFilter) => 0,
                PurgeMode::Obligation => generation,
                #[cfg(feature = "naive-purge")]
                PurgeMode::NaiveIggyOrder => 0,
            };
            let serial = self.next_tier_serial();
            let recovered = Partition::recover(
                self.storage.clone(),
                &self.config.data_dir,
                key,
                options,
                generation,
                floor,
                &live_groups,
            )
            .and_then(|(mut p, r)| {
                // Its remote tier, if it ever had one: read whatever the
                // server's configuration says now (the record names the
                // objects holding acknowledged messages, and owes their
                // deletion rounds).
                p.recover_tiering(serial)?;
                Ok((p, r))
            });
            let partition = match recovered {
                Ok((p, r)) => {
                    orphan_groups.extend(r.groups.orphans.iter().map(|&group| {
                        ResourceKey::Group {
                            stream: key.stream,
                            topic: key.topic,
                            group,
                        }
                    }));
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
                self.reconciler.mark_pending(ObligationKey::Purge(key), 0);
            }
            if partition.retention().is_some_and(|r| !r.is_applied()) {
                // Files below the committed mark are on disk: never loaded,
                // and removed by the obligation.
                self.reconciler
                    .mark_pending(ObligationKey::Retention(key), 0);
            }
            if partition.degraded_reason().is_some()
                && !report.degraded.iter().any(|(k, _)| *k == key)
            {
                let reason = partition.degraded_reason().unwrap_or_default().to_string();
                tracing::error!(partition = %key, reason, "partition degraded at recovery");
                report.degraded.push((key, reason));
            }
            self.partitions.insert(key, partition);
            self.note_retention_change(key);
            report.partitions += 1;
        }
        if report.stale_records > 0 {
            tracing::info!(
                stale_records = report.stale_records,
                "ignored records of purged generations at recovery"
            );
        }
        Ok((report, orphan_groups.into_iter().collect()))
    }

    /// The topic options and committed generation of a key taken from the
    /// metadata's own list (`partition_keys`): present by construction.
    fn partition_settings(&self, key: PartitionKey) -> (TopicOptions, u64) {
        let topic = self.topic_meta(key.topic_key());
        match topic.partitions.get(&key.partition) {
            Some(p) => (topic.options, p.committed_generation),
            None => panic!("invariant: partition {key} listed by the metadata is not in it"),
        }
    }
}
