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

use std::sync::Arc;

use sluice_remote::{RemoteError, RemoteStore};

use super::Engine;
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
}

impl TieringConfig {
    pub fn new(instance: impl Into<String>) -> TieringConfig {
        TieringConfig {
            instance: instance.into(),
            topics: Vec::new(),
            block_bytes: crate::partition::tiering::cache::DEFAULT_BLOCK_BYTES,
            cache_bytes: crate::partition::tiering::cache::DEFAULT_CACHE_BYTES,
            uploads_per_pass: 4,
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

/// The remote work of one pass: planned under the engine, run without it.
#[derive(Debug)]
pub struct TierPlan {
    store: Option<Arc<dyn RemoteStore>>,
    keys: Option<TierKeys>,
    uploads: Vec<(UploadJob, Option<std::result::Result<(), RemoteError>>)>,
    rounds: Vec<(RoundJob, Option<RoundOutcome>)>,
}

impl TierPlan {
    pub fn is_empty(&self) -> bool {
        self.uploads.is_empty() && self.rounds.is_empty()
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
        plan
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
