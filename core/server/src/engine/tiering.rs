//! Tiering: sealed segments of opted-in topics copied to an object store,
//! released from the local disk once their copy is recorded, read back on
//! demand, and every remote object removed by a recorded round (ADR 0027).
//!
//! Invariants:
//! - Remote calls never run under the engine: `plan_tiering` (under it)
//!   records each intent or round before it returns its job, `TierPlan::run`
//!   makes the calls with no engine at all, and `finish_tiering` (under it
//!   again) applies each outcome only to the partition value that planned it
//!   and only while its record still expects it (partition/tiering/jobs.rs).
//! - A local segment leaves the disk only through a committed low-water mark
//!   (ADR 0016), and for a tiered partition only over segments whose upload
//!   is durably recorded (`Partition::releasable_mark`): a released offset is
//!   always served by the remote tier.
//! - Retention of a tiered topic (`message_expiry`) raises the remote low
//!   mark before any remote object below it is deleted and before the local
//!   mark commits, so reads stop first (`Partition::raise_remote_low`).
//! - Polls of a partition with remote segments make blocking remote calls:
//!   such a poll never runs on an async worker (`topic_reads_remote`, used by
//!   `waits_on_no_sync`).
//! - A deleted partition's objects go before its directory: the deletion's
//!   cleanup reads each `tiering.rec` in the deleted tree (the durable record
//!   of which incarnation's prefix holds its objects), deletes everything
//!   listed under that dead incarnation's prefix and requires a fresh listing
//!   to be empty, and only then removes the tree (`remove_remote_of_tree`).
//!   Until the store answers, the deletion stays pending, its record on disk.
//! - The orphan sweep deletes only objects under this server's instance
//!   prefix, that parse as sluice's own object names, that no partition's
//!   record names (segments, intent, round) and that belong to no live
//!   partition's dead generation (the round's listing owns those), and only
//!   once they were listed unnamed for longer than the grace period, which
//!   must exceed how late a put in flight can land (ADR 0026 §3).

use std::sync::Arc;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sluice_remote::{ListedObject, RemoteError, RemoteKey, RemoteStore};

use super::Engine;
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::metadata::PartitionKey;
use crate::partition::tiering::TierKeys;
use crate::partition::tiering::cache::{BlockCache, CacheFigures};
use crate::partition::tiering::jobs::{RoundJob, RoundOutcome, UploadJob};
use crate::partition::tiering::partition::RemoteReads;

/// How long a segment stays on the local disk once uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalRetention {
    /// Keep at most this many bytes of each partition locally (0: no cap).
    pub max_bytes: u64,
    /// Keep a segment locally until its newest message is this old, in
    /// microseconds (0: no age).
    pub max_age_us: u64,
}

/// One topic that opted in, by its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieredTopic {
    pub stream: String,
    pub topic: String,
    pub local: LocalRetention,
}

/// An hour: far above how late a request a store accepted can land.
pub const DEFAULT_ORPHAN_GRACE_MS: u64 = 3_600_000;
/// Ten minutes.
pub const DEFAULT_SWEEP_PERIOD_MS: u64 = 600_000;

/// The server's tiering settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieringConfig {
    /// This server's prefix in the store (one key segment).
    pub instance: String,
    pub topics: Vec<TieredTopic>,
    /// Remote reads fetch blocks of this size.
    pub block_bytes: u64,
    /// The read cache's bound.
    pub cache_bytes: u64,
    /// Uploads planned per pass at most (each copies one segment).
    pub uploads_per_pass: usize,
    /// How long an object must be seen unnamed by any record before the
    /// orphan sweep deletes it (ms).
    pub orphan_grace_ms: u64,
    /// How often the orphan sweep lists the instance prefix (ms).
    pub sweep_period_ms: u64,
}

impl TieringConfig {
    pub fn new(instance: impl Into<String>) -> TieringConfig {
        TieringConfig {
            instance: instance.into(),
            topics: Vec::new(),
            block_bytes: crate::partition::tiering::cache::DEFAULT_BLOCK_BYTES,
            cache_bytes: crate::partition::tiering::cache::DEFAULT_CACHE_BYTES,
            uploads_per_pass: 4,
            orphan_grace_ms: DEFAULT_ORPHAN_GRACE_MS,
            sweep_period_ms: DEFAULT_SWEEP_PERIOD_MS,
        }
    }
}

/// What the tier has done since start-up, for `/metrics` and `/status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierFigures {
    pub uploads: u64,
    pub uploaded_bytes: u64,
    pub failed_uploads: u64,
    pub deleted_objects: u64,
    pub rounds_applied: u64,
    pub remote_errors: u64,
    /// Objects the orphan sweep deleted.
    pub orphans_deleted: u64,
    pub cache: CacheFigures,
}

/// The engine's remote tier.
#[derive(Debug)]
pub(crate) struct Tier {
    store: Arc<dyn RemoteStore>,
    keys: TierKeys,
    cache: Arc<BlockCache>,
    config: TieringConfig,
    figures: TierFigures,
    /// Objects the last sweeps listed that no record names, with when each
    /// was first seen so (ms).
    unnamed: BTreeMap<RemoteKey, u64>,
    /// When the last sweep was planned (ms).
    last_sweep_ms: Option<u64>,
}

impl Tier {
    /// What polls need to read remote segments.
    pub(crate) fn reads(&self) -> RemoteReads<'_> {
        RemoteReads {
            store: self.store.as_ref(),
            keys: &self.keys,
            cache: &self.cache,
        }
    }
}

/// The orphan sweep's part of a pass: the objects to delete, then what the
/// listing of the instance prefix found.
type SweepJob = (
    Vec<RemoteKey>,
    Option<std::result::Result<Vec<ListedObject>, RemoteError>>,
);

/// The remote work of one pass: planned under the engine, run without it.
#[derive(Debug)]
pub struct TierPlan {
    store: Option<Arc<dyn RemoteStore>>,
    keys: Option<TierKeys>,
    uploads: Vec<(UploadJob, Option<std::result::Result<(), RemoteError>>)>,
    rounds: Vec<(RoundJob, Option<RoundOutcome>)>,
    /// The orphan sweep: objects to delete (named by no record for longer
    /// than the grace), then a listing of the instance prefix.
    sweep: Option<SweepJob>,
}

impl TierPlan {
    pub fn is_empty(&self) -> bool {
        self.uploads.is_empty() && self.rounds.is_empty() && self.sweep.is_none()
    }

    /// Makes every planned remote call (no engine needed: call it without
    /// the engine's lock, from a thread that may block).
    pub fn run(&mut self) {
        let (Some(store), Some(keys)) = (self.store.as_deref(), self.keys.as_ref()) else {
            return;
        };
        for (job, outcome) in &mut self.uploads {
            *outcome = Some(job.run(store));
        }
        for (job, outcome) in &mut self.rounds {
            *outcome = Some(job.run(store, keys));
        }
        if let Some((doomed, listed)) = &mut self.sweep {
            let deleted: std::result::Result<(), RemoteError> =
                doomed.iter().try_for_each(|key| store.delete(key));
            *listed = Some(deleted.and_then(|()| store.list(keys.instance_prefix())));
        }
    }
}

/// One remote obligation of one partition, as `/status/obligations` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteObligation {
    /// `remote_upload` or `remote_deletion`.
    pub kind: &'static str,
    pub key: PartitionKey,
    /// `intended` (an upload in flight), `unrecorded` (a change whose record
    /// write failed), or the round's phase in snake case.
    pub state: &'static str,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    pub degraded: bool,
    pub remote_keys: Option<u64>,
    pub dead_generations: Option<Vec<u64>>,
    pub segment_base: Option<u64>,
}

/// A round's phase as `/status/obligations` names states (snake case).
fn round_state(phase: crate::partition::tiering::RoundPhase) -> &'static str {
    use crate::partition::tiering::RoundPhase;
    match phase {
        RoundPhase::Recorded => "recorded",
        RoundPhase::KeysDeleted => "keys_deleted",
        RoundPhase::ListedEmpty => "listed_empty",
        RoundPhase::Applied => "applied",
    }
}

/// What a tiering pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierReport {
    pub uploaded: usize,
    pub failed_uploads: usize,
    pub rounds_applied: usize,
    pub failed_rounds: usize,
    pub released: usize,
    pub errors: usize,
}

impl Engine {
    /// Attaches the remote tier (the server does, after `open`, once the
    /// store answered its probe).
    pub fn attach_tier(
        &mut self,
        store: Arc<dyn RemoteStore>,
        config: TieringConfig,
    ) -> std::result::Result<(), sluice_remote::KeyError> {
        let keys = TierKeys::new(&config.instance)?;
        let cache = Arc::new(BlockCache::new(config.block_bytes, config.cache_bytes));
        self.tier = Some(Tier {
            store,
            keys,
            cache,
            config,
            figures: TierFigures::default(),
            unnamed: BTreeMap::new(),
            last_sweep_ms: None,
        });
        Ok(())
    }

    pub fn tier_figures(&self) -> Option<TierFigures> {
        self.tier.as_ref().map(|t| TierFigures {
            cache: t.cache.figures(),
            ..t.figures
        })
    }

    /// The next serial for a partition's tiering slot.
    pub(super) fn next_tier_serial(&mut self) -> u64 {
        self.tier_serial += 1;
        self.tier_serial
    }

    /// The local retention of `key`'s topic if it opted in.
    fn local_retention(&self, key: PartitionKey) -> Option<LocalRetention> {
        let tier = self.tier.as_ref()?;
        let stream = self.meta.streams.get(&key.stream)?;
        let topic = stream.topics.get(&key.topic)?;
        tier.config
            .topics
            .iter()
            .find(|t| t.stream == stream.name && t.topic == topic.name)
            .map(|t| t.local)
    }

    /// Whether a poll of `topic` may read the remote tier (and so make a
    /// blocking call).
    pub(crate) fn topic_reads_remote(&self, stream: &Identifier, topic: &Identifier) -> bool {
        let Ok(key) = self.resolve_topic(stream, topic) else {
            return false;
        };
        self.topic_partition_keys(key).iter().any(|k| {
            self.partitions
                .get(k)
                .and_then(|p| p.tier())
                .is_some_and(|t| t.state.segments().next().is_some())
        })
    }

    /// Under the engine: enables tiering on the opted-in partitions, releases
    /// local copies whose upload is recorded, raises remote marks by the
    /// topics' expiry, and plans the uploads and deletion rounds that are due
    /// (each intent and round durably recorded before its job exists).
    pub fn plan_tiering(&mut self) -> TierPlan {
        let mut plan = TierPlan {
            store: None,
            keys: None,
            uploads: Vec::new(),
            rounds: Vec::new(),
            sweep: None,
        };
        let Some(tier) = self.tier.as_ref() else {
            return plan;
        };
        plan.store = Some(tier.store.clone());
        plan.keys = Some(tier.keys.clone());
        let keys = tier.keys.clone();
        let mut uploads_left = tier.config.uploads_per_pass;
        if self.metadata_in_doubt.is_some() && self.ensure_metadata_durable().is_err() {
            return plan;
        }
        let now = self.clock.now_micros();
        let partition_keys: Vec<PartitionKey> = self.partitions.keys().copied().collect();
        for key in partition_keys {
            let local = self.local_retention(key);
            if local.is_some()
                && self
                    .partitions
                    .get(&key)
                    .is_some_and(|p| p.tier().is_none())
            {
                let serial = self.next_tier_serial();
                let incarnation = self.meta.version;
                if let Some(p) = self.partitions.get_mut(&key) {
                    p.enable_tiering(incarnation, serial);
                }
            }
            if self
                .partitions
                .get(&key)
                .is_none_or(|p| p.tier().is_none() || p.degraded_reason().is_some())
            {
                continue;
            }
            self.expire_remote(key, now);
            if let Some(local) = local {
                self.release_local(key, local, now);
                if uploads_left > 0 && self.retention_eligible_for_tiering(key) {
                    match self.partitions.get_mut(&key).map(|p| p.plan_upload(&keys)) {
                        Some(Ok(Some(job))) => {
                            uploads_left -= 1;
                            plan.uploads.push((job, None));
                        }
                        Some(Ok(None)) | None => {}
                        Some(Err(e)) => {
                            self.count_tier_error();
                            tracing::warn!(partition = %key, error = %e, "could not plan an upload; retried next pass");
                        }
                    }
                }
            }
            match self.partitions.get_mut(&key).map(|p| p.plan_round()) {
                Some(Ok(Some(job))) => plan.rounds.push((job, None)),
                Some(Ok(None)) | None => {}
                Some(Err(e)) => {
                    self.count_tier_error();
                    tracing::warn!(partition = %key, error = %e, "could not record a remote deletion round; retried next pass");
                }
            }
        }
        plan.sweep = self.plan_sweep();
        plan
    }

    /// The sweep, if one is due: the objects named by no record for longer
    /// than the grace period (from earlier listings), to delete before the
    /// next listing.
    fn plan_sweep(&mut self) -> Option<SweepJob> {
        let now = self.now_ms();
        let named = self.named_objects();
        let tier = self.tier.as_mut()?;
        if tier
            .last_sweep_ms
            .is_some_and(|at| now.saturating_sub(at) < tier.config.sweep_period_ms)
        {
            return None;
        }
        tier.last_sweep_ms = Some(now);
        let grace = tier.config.orphan_grace_ms;
        let doomed: Vec<RemoteKey> = tier
            .unnamed
            .iter()
            .filter(|(key, seen)| {
                now.saturating_sub(**seen) >= grace && !named.covers(key, &tier.keys)
            })
            .map(|(key, _)| key.clone())
            .collect();
        Some((doomed, None))
    }

    /// What the records name now: the objects they read or will delete, and
    /// the prefixes their rounds will list.
    fn named_objects(&self) -> Named {
        let mut named = Named::default();
        for p in self.partitions.values() {
            let key = p.key;
            if p.degraded_reason().is_some() {
                // Its record could not be read: nothing of it is swept.
                named
                    .partitions
                    .insert((key.stream, key.topic, key.partition));
                continue;
            }
            let Some(t) = p.tier() else { continue };
            let incarnation = t.state.incarnation();
            let generation = t.state.generation();
            let id = (key.stream, key.topic, key.partition, incarnation);
            for s in t.state.segments() {
                named.attempts.insert((id, s.attempt_in(generation)));
            }
            if let Some(a) = t.state.intent() {
                named.attempts.insert((id, a));
            }
            if let Some(round) = t.state.round() {
                for a in round.doomed() {
                    named.attempts.insert((id, *a));
                }
                for g in round.dead_generations() {
                    named.dead.insert((id, *g));
                }
            }
        }
        named
    }

    /// Applies a sweep's listing: what is named by no record is remembered
    /// (or kept) with when it was first seen so; the rest is forgotten.
    fn finish_sweep(
        &mut self,
        deleted: Vec<RemoteKey>,
        listed: Option<std::result::Result<Vec<ListedObject>, RemoteError>>,
    ) {
        let now = self.now_ms();
        let named = self.named_objects();
        let Some(tier) = self.tier.as_mut() else {
            return;
        };
        let listed = match listed {
            Some(Ok(listed)) => listed,
            Some(Err(e)) => {
                tier.figures.remote_errors += 1;
                tracing::warn!(error = %e, "orphan sweep failed; retried next period");
                return;
            }
            None => return,
        };
        if !deleted.is_empty() {
            tier.figures.orphans_deleted += deleted.len() as u64;
            tracing::info!(
                objects = deleted.len(),
                "orphan sweep deleted objects no record named"
            );
        }
        let mut unnamed = BTreeMap::new();
        for object in listed {
            let Some(_) = tier.keys.parse(&object.key) else {
                // Not a name sluice writes (the probe's, an operator's):
                // never swept.
                continue;
            };
            if named.covers(&object.key, &tier.keys) {
                continue;
            }
            let seen = tier.unnamed.get(&object.key).copied().unwrap_or(now);
            unnamed.insert(object.key, seen);
        }
        tier.unnamed = unnamed;
    }

    /// Before a deleted tree's directories go: every tiered partition in it
    /// (its `tiering.rec` names the incarnation) has its objects deleted and
    /// its prefix listed empty. `Err` leaves the deletion pending.
    pub(super) fn remove_remote_of_tree(
        &mut self,
        root: &Path,
        r: crate::metadata::ResourceKey,
    ) -> Result<()> {
        use crate::metadata::ResourceKey;
        if self.tier.is_none() {
            // No store to delete from (and no I/O here for servers that do
            // not tier): objects of a tree deleted while tiering is off are
            // left to the orphan sweep once it is on again.
            return Ok(());
        }
        let storage = self.storage.clone();
        // What is not a directory holds no partition: a missing one, or the
        // leftover file of an interrupted re-dirty under the tree's name
        // (which the removal below takes away).
        let ids = |dir: &Path| -> Result<Vec<u32>> {
            match storage.list_dir(dir) {
                Ok(names) => Ok(names.iter().filter_map(|n| n.parse::<u32>().ok()).collect()),
                Err(e)
                    if matches!(
                        e.kind,
                        sluice_storage::ErrorKind::NotFound
                            | sluice_storage::ErrorKind::NotADirectory
                    ) =>
                {
                    Ok(Vec::new())
                }
                Err(e) => Err(e.into()),
            }
        };
        let mut partitions: Vec<(PartitionKey, std::path::PathBuf)> = Vec::new();
        let topic_parts = |stream: u32,
                           topic: u32,
                           topic_root: &Path|
         -> Result<Vec<(PartitionKey, std::path::PathBuf)>> {
            let dir = topic_root.join(crate::layout::PARTITIONS_DIR);
            Ok(ids(&dir)?
                .into_iter()
                .map(|partition| {
                    (
                        PartitionKey {
                            stream,
                            topic,
                            partition,
                        },
                        dir.join(crate::layout::partition_dir_name(partition)),
                    )
                })
                .collect())
        };
        match r {
            ResourceKey::Partition(k) => partitions.push((k, root.to_path_buf())),
            ResourceKey::Topic { stream, topic } => {
                partitions.extend(topic_parts(stream, topic, root)?);
            }
            ResourceKey::Stream { stream } => {
                let topics = root.join(crate::layout::TOPICS_DIR);
                for topic in ids(&topics)? {
                    partitions.extend(topic_parts(stream, topic, &topics.join(topic.to_string()))?);
                }
            }
            ResourceKey::Group { .. } => {}
        }
        for (key, dir) in partitions {
            let path = dir.join(crate::layout::TIERING_FILE);
            if !storage.exists(&path)? {
                continue;
            }
            let bytes = crate::partition::tiering::TIERING_LAYOUT.read_bytes(
                storage
                    .open(&path, sluice_storage::OpenMode::Read)?
                    .as_ref(),
            )?;
            let incarnation = match crate::partition::tiering::decode_file(&bytes) {
                Ok(Some(loaded)) => loaded.tiering.incarnation(),
                Ok(None) => continue,
                Err(e) => {
                    // Which prefix is unknown: the sweep finds its objects
                    // (no record names them) after the grace period.
                    tracing::warn!(path = %path.display(), error = %e, "deleted partition's tiering record does not decode; its objects are left to the orphan sweep");
                    continue;
                }
            };
            let Some(tier) = self.tier.as_ref() else {
                continue;
            };
            let place = crate::partition::tiering::PartitionPlace {
                stream: key.stream,
                topic: key.topic,
                partition: key.partition,
                incarnation,
            };
            let prefix = tier.keys.partition_prefix(place);
            let remote = |e: RemoteError| EngineError::Unavailable(format!("remote tier: {e}"));
            let listed = tier.store.list(&prefix).map_err(remote)?;
            for object in &listed {
                tier.store.delete(&object.key).map_err(remote)?;
                tier.cache.forget(&object.key);
            }
            let left = tier.store.list(&prefix).map_err(remote)?;
            if let Some(first) = left.first() {
                return Err(EngineError::Unavailable(format!(
                    "remote tier: {} still holds {} after its deletes",
                    prefix, first.key
                )));
            }
            let deleted = listed.len() as u64;
            if let Some(tier) = self.tier.as_mut() {
                tier.figures.deleted_objects += deleted;
            }
            tracing::info!(partition = %key, objects = deleted, "deleted partition's remote objects removed");
        }
        Ok(())
    }

    fn count_tier_error(&mut self) {
        if let Some(t) = self.tier.as_mut() {
            t.figures.remote_errors += 1;
        }
    }

    /// Uploads wait while the partition's purge is pending: the purge's
    /// cleanup renames and removes the old history's files.
    fn retention_eligible_for_tiering(&self, key: PartitionKey) -> bool {
        self.reconciler
            .status(crate::partition::reconciler::ObligationKey::Purge(key))
            .is_none()
    }

    /// Commits a local low-water mark over uploaded segments the topic's
    /// local retention lets go.
    fn release_local(&mut self, key: PartitionKey, local: LocalRetention, now: u64) {
        if !self.retention_eligible_for_tiering(key) {
            return;
        }
        let Some(p) = self.partitions.get(&key) else {
            return;
        };
        let mark = p.releasable_mark(|s, local_bytes| {
            let over_size = local.max_bytes > 0 && local_bytes > local.max_bytes;
            let too_old =
                local.max_age_us > 0 && s.newest_timestamp.saturating_add(local.max_age_us) <= now;
            (local.max_bytes == 0 && local.max_age_us == 0) || over_size || too_old
        });
        if let Some(mark) = mark
            && mark > p.log().low_water()
        {
            match self.commit_mark(key, mark, false) {
                Ok(()) => {
                    self.refresh_retention(key);
                    tracing::debug!(partition = %key, low_water_mark = mark, "released local segments held by the remote tier");
                }
                Err(e) => {
                    tracing::warn!(partition = %key, error = %e, "could not release local segments; retried next pass");
                }
            }
        }
    }

    /// Raises the remote low mark of `key` over remote segments its topic's
    /// `message_expiry` has expired (the deletion round is recorded with it).
    fn expire_remote(&mut self, key: PartitionKey, now: u64) {
        let Some(topic) = self.meta.topic(key.stream, key.topic) else {
            return;
        };
        let expiry = topic.message_expiry;
        if expiry == 0 {
            return;
        }
        let Some(p) = self.partitions.get(&key) else {
            return;
        };
        let local = p.log().low_water();
        let Some(tier) = p.tier() else {
            return;
        };
        let mark = tier
            .state
            .segments()
            .filter(|s| s.base < local)
            .take_while(|s| s.newest_timestamp.saturating_add(expiry) <= now)
            .last()
            .map(|s| s.next_offset);
        if let Some(mark) = mark
            && let Some(p) = self.partitions.get_mut(&key)
            && let Err(e) = p.raise_remote_low(mark)
        {
            tracing::warn!(partition = %key, error = %e, "could not record the remote low mark; retried next pass");
        }
    }

    /// Under the engine: applies every outcome of `plan` that still counts.
    pub fn finish_tiering(&mut self, plan: TierPlan) -> TierReport {
        let mut report = TierReport::default();
        let Some(keys) = plan.keys else {
            return report;
        };
        let cache = self.tier.as_ref().map(|t| t.cache.clone());
        for (job, outcome) in plan.uploads {
            let Some(outcome) = outcome else { continue };
            let ok = outcome.is_ok();
            if let Err(e) = &outcome {
                report.failed_uploads += 1;
                tracing::warn!(partition = %job.key, error = %e, "upload failed; the attempt's keys are doomed and a new attempt follows");
            }
            let error = outcome.as_ref().err().map(ToString::to_string);
            let counted = match self.partitions.get_mut(&job.key) {
                Some(p) => {
                    let counted = p.finish_upload(&job, outcome);
                    if let Some(t) = p.tier_mut() {
                        t.note(error);
                    }
                    counted
                }
                None => Ok(false),
            };
            match counted {
                Ok(true) if ok => {
                    report.uploaded += 1;
                    if let Some(t) = self.tier.as_mut() {
                        t.figures.uploads += 1;
                        t.figures.uploaded_bytes += job.bytes();
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    report.errors += 1;
                    tracing::warn!(partition = %job.key, error = %e, "could not record an upload's outcome; retried");
                }
            }
            if !ok && let Some(t) = self.tier.as_mut() {
                t.figures.failed_uploads += 1;
                t.figures.remote_errors += 1;
            }
        }
        for (job, outcome) in plan.rounds {
            let Some(outcome) = outcome else { continue };
            if let RoundOutcome::Failed(e) = &outcome {
                if let Some(t) = self.partitions.get_mut(&job.key).and_then(|p| p.tier_mut()) {
                    t.note(Some(e.to_string()));
                }
                report.failed_rounds += 1;
                if let Some(t) = self.tier.as_mut() {
                    t.figures.remote_errors += 1;
                }
                tracing::warn!(partition = %job.key, error = %e, "remote deletion round failed; retried");
                continue;
            }
            let deleted = match &outcome {
                RoundOutcome::Done { keys, .. } => *keys as u64,
                RoundOutcome::Failed(_) => 0,
            };
            let applied = match self.partitions.get_mut(&job.key) {
                Some(p) => {
                    if let Some(t) = p.tier_mut() {
                        t.note(None);
                    }
                    p.finish_round(&job, &outcome, cache.as_deref(), &keys)
                }
                None => Ok(false),
            };
            if let Some(t) = self.tier.as_mut() {
                t.figures.deleted_objects += deleted;
            }
            match applied {
                Ok(true) => {
                    report.rounds_applied += 1;
                    if let Some(t) = self.tier.as_mut() {
                        t.figures.rounds_applied += 1;
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    report.errors += 1;
                    tracing::warn!(partition = %job.key, error = %e, "could not record a deletion round's outcome; retried");
                }
            }
        }
        if let Some((deleted, listed)) = plan.sweep {
            self.finish_sweep(deleted, listed);
        }
        self.assert_invariants("tiering pass");
        report
    }

    /// One tiering pass on this thread: plan, run, finish (tests and the
    /// simulator; the server runs `TierPlan::run` without the engine lock).
    pub fn tier_pass(&mut self) -> TierReport {
        let mut plan = self.plan_tiering();
        plan.run();
        self.finish_tiering(plan)
    }

    /// Sealed local segments of every tiered partition with no remote copy.
    pub fn pending_uploads(&self) -> u64 {
        self.partitions.values().map(|p| p.pending_uploads()).sum()
    }

    /// Every partition's remote obligations not done, in key order.
    pub fn remote_obligations(&self) -> Vec<RemoteObligation> {
        let mut out = Vec::new();
        for (key, p) in &self.partitions {
            let Some(t) = p.tier() else { continue };
            let row = |kind, state| RemoteObligation {
                kind,
                key: *key,
                state,
                consecutive_failures: t.failures,
                last_error: t.last_error.clone(),
                degraded: p.degraded_reason().is_some(),
                remote_keys: None,
                dead_generations: None,
                segment_base: None,
            };
            if let Some(attempt) = t.state.intent() {
                out.push(RemoteObligation {
                    segment_base: Some(attempt.base),
                    ..row("remote_upload", "intended")
                });
            } else if !t.is_written() {
                out.push(row("remote_upload", "unrecorded"));
            }
            if let Some(round) = t.state.round() {
                out.push(RemoteObligation {
                    remote_keys: Some(2 * round.doomed().len() as u64),
                    dead_generations: Some(round.dead_generations().iter().copied().collect()),
                    ..row("remote_deletion", round_state(round.phase()))
                });
            }
        }
        out
    }

    /// Tiering passes and reconciler passes (ignoring backoff, as
    /// `reconcile_until_idle`) until a pass of both finds nothing to do, at
    /// most `max` rounds. Returns whether it got there (tests and the
    /// simulator; the server runs its passes on its own periods).
    pub fn tier_until_idle(&mut self, max: u32) -> bool {
        for _ in 0..max {
            self.tier_pass();
            self.reconcile_until_idle(10);
            if !self.tier_owes() && self.reconciler.pending().is_empty() {
                let again = self.tier_pass();
                self.reconcile_until_idle(10);
                if again == TierReport::default() && !self.tier_owes() {
                    return true;
                }
            }
        }
        !self.tier_owes()
    }

    /// Whether any partition owes remote work: an upload in flight, an
    /// unwritten record, or a deletion round.
    pub fn tier_owes(&self) -> bool {
        self.partitions.values().any(|p| {
            p.tier().is_some_and(|t| {
                !t.is_written() || t.state.round().is_some() || t.state.intent().is_some()
            })
        })
    }
}

/// What the records name, for the orphan sweep.
#[derive(Debug, Default)]
struct Named {
    /// (stream, topic, partition, incarnation) and an attempt a record names.
    attempts: BTreeSet<((u32, u32, u32, u64), crate::partition::tiering::Attempt)>,
    /// Dead generations a round will list, per incarnation.
    dead: BTreeSet<((u32, u32, u32, u64), u64)>,
    /// Partitions whose record could not be read: none of their objects is
    /// swept.
    partitions: BTreeSet<(u32, u32, u32)>,
}

impl Named {
    fn covers(&self, key: &RemoteKey, keys: &TierKeys) -> bool {
        let Some((place, attempt, _)) = keys.parse(key) else {
            return true;
        };
        let id = (
            place.stream,
            place.topic,
            place.partition,
            place.incarnation,
        );
        self.partitions
            .contains(&(place.stream, place.topic, place.partition))
            || self.attempts.contains(&(id, attempt))
            || self.dead.contains(&(id, attempt.generation))
    }
}
