//! The reconciler: drives every pending cleanup obligation to done: a
//! partition's purge (to `Applied`), a deleted resource's removal, the
//! removal of a partition's segments below its retention low-water mark.
//!
//! Invariants:
//! - `pending` holds exactly the obligations not yet done (the engine adds
//!   one on every purge or deletion commit and at recovery, and only a
//!   successful attempt removes it), so a pass costs O(pending), not
//!   O(partitions).
//! - A failing partition backs off exponentially (base doubling to a cap) with
//!   jitter drawn from a seeded RNG: a run is a pure function of its seed.
//! - After `stuck_after` consecutive failures a partition is flagged `stuck`
//!   and an error is logged once per escalation; it keeps being retried.

use std::collections::BTreeMap;

use sluice_storage::SimRng;

use crate::layout::DirKind;
use crate::metadata::{PartitionKey, ResourceKey};
use crate::partition::purge::FailureSite;

mod pass;
pub use pass::CleanupRun;
pub(crate) use pass::{PassReport, resume_purge_cleanups, start_purge_cleanups};

/// Partitions cleaned at the same time by default, in the shipped server and
/// in every engine built with `EngineConfig::new` (simulations choose 1,
/// explicitly: `EngineConfig::deterministic`).
pub(crate) const DEFAULT_CLEANUP_CONCURRENCY: usize = 8;

/// How the reconciler schedules cleanup. How often the server starts a pass
/// is the server's setting (`config::ReconcilerSettings::period`), not the
/// engine's: the engine runs a pass when it is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcilerConfig {
    pub(crate) backoff_base_ms: u64,
    pub(crate) backoff_cap_ms: u64,
    /// Consecutive failures before a partition is flagged stuck.
    pub(crate) stuck_after: u32,
    /// Partitions cleaned at most per pass.
    pub max_per_pass: usize,
    /// Partitions cleaned at the same time within a pass (each on its own
    /// thread; partitions share no file, directory or tracker). 1 runs them
    /// one after another, so a pass's I/O comes in a fixed order: simulations
    /// and trace snapshots rely on that.
    pub concurrency: usize,
    /// Cleanup steps one engine call of a pass takes at most
    /// (`begin_reconcile`, `resume_reconcile`); the others wait for the next
    /// call. The server takes one, so a request never waits behind more than
    /// one partition's step; the default takes every due step in one call.
    pub steps_per_hold: usize,
    pub seed: u64,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            backoff_base_ms: 100,
            backoff_cap_ms: 60_000,
            stuck_after: 5,
            max_per_pass: 64,
            concurrency: DEFAULT_CLEANUP_CONCURRENCY,
            steps_per_hold: usize::MAX,
            seed: 0,
        }
    }
}

/// One cleanup obligation, as the reconciler schedules it. Purges sort
/// before deletions, deletions before retentions, so a pass's I/O order is
/// fixed by the keys alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObligationKey {
    /// A partition's purge obligation (its record is `purge.obligation`).
    Purge(PartitionKey),
    /// A deleted resource's files (its record is the metadata that no longer
    /// names the resource: engine/deletion.rs).
    Delete(ResourceKey),
    /// A partition's segment files below its low-water mark (its record is
    /// `retention.lwm`: engine/retention.rs).
    Retention(PartitionKey),
}

impl ObligationKey {
    /// The kind, as operators see it.
    pub fn kind(self) -> &'static str {
        match self {
            ObligationKey::Purge(_) => "purge",
            ObligationKey::Delete(_) => "delete",
            ObligationKey::Retention(_) => "retention",
        }
    }

    /// The purged partition, for a purge obligation.
    pub fn purge(self) -> Option<PartitionKey> {
        match self {
            ObligationKey::Purge(k) => Some(k),
            ObligationKey::Delete(_) | ObligationKey::Retention(_) => None,
        }
    }

    /// The partition, for a retention obligation.
    pub fn retention(self) -> Option<PartitionKey> {
        match self {
            ObligationKey::Retention(k) => Some(k),
            ObligationKey::Purge(_) | ObligationKey::Delete(_) => None,
        }
    }

    /// The deleted resource, for a delete obligation.
    pub fn deletion(self) -> Option<ResourceKey> {
        match self {
            ObligationKey::Delete(r) => Some(r),
            ObligationKey::Purge(_) | ObligationKey::Retention(_) => None,
        }
    }
}

impl std::fmt::Display for ObligationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObligationKey::Purge(k) => write!(f, "purge of partition {k}"),
            ObligationKey::Delete(r) => write!(f, "delete of {r}"),
            ObligationKey::Retention(k) => write!(f, "retention of partition {k}"),
        }
    }
}

/// The reconciler's view of one pending obligation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PendingEntry {
    pub(crate) consecutive_failures: u32,
    pub(crate) next_attempt_at_ms: u64,
    pub(crate) stuck: bool,
    pub last_error: Option<String>,
}

/// Totals for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ReconcilerStats {
    pub(crate) passes: u64,
    pub(crate) attempts: u64,
    pub(crate) failures: u64,
    pub(crate) last_pass_attempts: u64,
    /// Per directory kind (indexed as `DirKind::ALL`): attempts that worked
    /// on that directory (removed a file from it or synced it).
    dir_attempts: [u64; 3],
    /// Per `FailureSite` (indexed as `FailureSite::ALL`): failed attempts.
    site_failures: [u64; 5],
}

impl ReconcilerStats {
    /// Attempts that worked on `dir` since start.
    pub(crate) fn dir_attempts(&self, dir: DirKind) -> u64 {
        self.dir_attempts[FailureSite::Dir(dir).index()]
    }

    /// Failed attempts whose failing operation was at `site`, since start.
    pub(crate) fn site_failures(&self, site: FailureSite) -> u64 {
        self.site_failures[site.index()]
    }
}

#[derive(Debug)]
pub struct Reconciler {
    config: ReconcilerConfig,
    pending: BTreeMap<ObligationKey, PendingEntry>,
    rng: SimRng,
    stats: ReconcilerStats,
}

impl Reconciler {
    pub(crate) fn new(config: ReconcilerConfig) -> Self {
        Reconciler {
            rng: SimRng::new(config.seed),
            config,
            pending: BTreeMap::new(),
            stats: ReconcilerStats::default(),
        }
    }

    pub fn config(&self) -> ReconcilerConfig {
        self.config
    }

    /// Makes `key` due now (a purge or a deletion just committed, or
    /// recovery found work).
    pub(crate) fn mark_pending(&mut self, key: ObligationKey, now_ms: u64) {
        let e = self.pending.entry(key).or_default();
        e.next_attempt_at_ms = now_ms;
    }

    pub(crate) fn forget(&mut self, key: ObligationKey) {
        self.pending.remove(&key);
    }

    /// Obligations due at `now_ms`, in key order, at most `max_per_pass`.
    pub(crate) fn due(&self, now_ms: u64) -> Vec<ObligationKey> {
        self.pending
            .iter()
            .filter(|(_, e)| e.next_attempt_at_ms <= now_ms)
            .map(|(k, _)| *k)
            .take(self.config.max_per_pass)
            .collect()
    }

    pub(crate) fn begin_pass(&mut self) {
        self.stats.passes += 1;
        self.stats.last_pass_attempts = 0;
    }

    pub(crate) fn record_success(&mut self, key: ObligationKey) {
        self.stats.attempts += 1;
        self.stats.last_pass_attempts += 1;
        if let Some(e) = self.pending.remove(&key)
            && e.stuck
        {
            tracing::info!(obligation = %key, "stuck cleanup recovered");
        }
    }

    /// Counts where one attempt worked and, if it failed, where.
    pub(crate) fn record_sites(&mut self, worked_on: &[DirKind], failed_at: Option<FailureSite>) {
        for dir in worked_on {
            self.stats.dir_attempts[FailureSite::Dir(*dir).index()] += 1;
        }
        if let Some(site) = failed_at {
            self.stats.site_failures[site.index()] += 1;
        }
    }

    pub(crate) fn record_failure(&mut self, key: ObligationKey, error: &str, now_ms: u64) {
        self.stats.attempts += 1;
        self.stats.failures += 1;
        self.stats.last_pass_attempts += 1;
        let cfg = self.config;
        let jitter_seed = self.rng.next_u64();
        let e = self.pending.entry(key).or_default();
        e.consecutive_failures = e.consecutive_failures.saturating_add(1);
        let exp = e.consecutive_failures.saturating_sub(1).min(32);
        let backoff = cfg
            .backoff_base_ms
            .saturating_mul(1u64 << exp)
            .min(cfg.backoff_cap_ms);
        // Up to +25% jitter so partitions failing together do not retry in lockstep.
        let jitter = if backoff >= 4 {
            jitter_seed % (backoff / 4)
        } else {
            0
        };
        e.next_attempt_at_ms = now_ms.saturating_add(backoff + jitter);
        e.last_error = Some(error.to_string());
        if e.consecutive_failures >= cfg.stuck_after && !e.stuck {
            e.stuck = true;
            tracing::error!(obligation = %key, failures = e.consecutive_failures, error, "cleanup is stuck; still retrying");
        } else {
            tracing::warn!(obligation = %key, failures = e.consecutive_failures, retry_in_ms = backoff + jitter, error, "cleanup attempt failed");
        }
    }

    pub fn status(&self, key: ObligationKey) -> Option<&PendingEntry> {
        self.pending.get(&key)
    }

    pub fn pending(&self) -> &BTreeMap<ObligationKey, PendingEntry> {
        &self.pending
    }

    /// The partitions whose purge obligation is pending, in key order.
    pub fn pending_purges(&self) -> impl Iterator<Item = PartitionKey> + '_ {
        self.pending.keys().filter_map(|k| k.purge())
    }

    /// The partitions whose retention obligation is pending, in key order.
    pub fn pending_retentions(&self) -> impl Iterator<Item = PartitionKey> + '_ {
        self.pending.keys().filter_map(|k| k.retention())
    }

    pub(crate) fn stats(&self) -> ReconcilerStats {
        self.stats
    }
}
