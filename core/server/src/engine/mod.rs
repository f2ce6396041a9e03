//! The engine: metadata plus every partition, and the operations users call.
//!
//! Data flows one way: a caller (HTTP, TCP, simulator, test) → `Engine` →
//! `Partition` → `DurableStorage`. The engine is single-threaded (`&mut self`);
//! the server serialises calls (docs/adr/0001-architecture.md). Two
//! exceptions: a purge cleanup's waits for the disk, which a `CleanupRun`
//! performs between two engine calls (docs/adr/0019), and a combined send's
//! appends, partitions dealt to scoped threads within the call (each
//! partition on one thread: `send_many`, docs/adr/0030).
//!
//! One job per module:
//! - `keys`: identifiers resolved once, at the API edge, into typed keys
//!   (pure lookups: nothing there writes);
//! - `commit`: the metadata commit/rollback protocol;
//! - `recovery`: opening the data directory and every partition;
//! - `catalog`: streams, topics, partitions and consumer groups;
//! - `dirs`: the directories a new partition needs, durable before its commit;
//! - `deletion`: a deleted resource's files as a cleanup obligation;
//! - `purge`: the purge commit point and the reconciler's passes;
//! - `retention`: expiry and size caps, through durable low-water marks;
//! - `messages`: sends, polls and stored offsets;
//! - `tiering`: the remote tier: uploads, local release, remote retention,
//!   deletion rounds, the orphan sweep (ADR 0028).
//!
//! Invariants (`check_invariants` states them as code; it runs after every
//! commit in debug builds and after every step of a simulation):
//! - A metadata change is acknowledged only after `MetadataStore::save`
//!   returned: on failure the in-memory metadata is rolled back, so memory never
//!   claims a change the disk may not hold.
//! - Directories a new partition needs are durable before the metadata that
//!   names the partition is written; deleted resources are removed from disk
//!   only after the metadata without them is durable, by a delete obligation
//!   the reconciler drives until the removal is durable.
//! - `partitions` has exactly one entry per partition in `meta`, each serving
//!   the purge generation the metadata commits for it.
//! - The reconciler tracks every partition whose purge obligation is not
//!   `Applied`, and only live partitions that have an obligation; and
//!   exactly the pending deletions, none of which covers a live resource;
//!   and exactly the partitions whose retention obligation is not `Applied`.
//! - No partition loads or serves anything below its committed low-water mark.

mod catalog;
mod commit;
mod deletion;
mod dirs;
mod keys;
mod membership;
mod messages;
mod purge;
mod recovery;
mod retention;
mod tiering;

pub use tiering::{
    LocalRetention, RemoteObligation, TierFigures, TierPlan, TierReport, TieredTopic, TieringConfig,
};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_storage::SimRng;
use sluice_storage::{DurableStorage, PoolStats, PooledStorage};

use crate::clock::Clock;
use crate::metadata::{Metadata, MetadataStore, PartitionKey};
use crate::partition::Partition;
use crate::partition::reconciler::{Reconciler, ReconcilerConfig};

pub use crate::partition::reconciler::CleanupRun;
pub use deletion::DeletePhase;
pub(crate) use keys::TopicKey;
pub use membership::MemberPoll;
pub use messages::{DataWrite, Partitioning, SendRequest, Sent};
pub use recovery::RecoveryReport;

/// Ids assigned by the server start here, as in Iggy 0.11: the first stream,
/// topic, partition and consumer group each have id 0.
pub const FIRST_ID: u32 = 0;
pub(crate) const MAX_NAME_LEN: usize = 255;
pub const MAX_PARTITIONS: u32 = 1000;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub(crate) data_dir: PathBuf,
    /// Seeds server-assigned message ids (mixed at open with the recovered
    /// state, so a restart does not replay an earlier run's ids).
    pub(crate) seed: u64,
    pub reconciler: ReconcilerConfig,
    pub purge_mode: PurgeMode,
    /// The `message_expiry` (µs, 0 = never) a topic created with Iggy's
    /// "server default" gets (`[retention] message_expiry_secs`).
    pub default_message_expiry_us: u64,
    /// At most this many files open at once (ADR 0018): every file goes
    /// through a [`sluice_storage::PooledStorage`] of this bound. `None`
    /// keeps one descriptor per file for as long as it is used (the
    /// behaviour before the pool; the simulator's worlds keep it so their
    /// seeds keep their meaning).
    pub max_open_files: Option<usize>,
    /// A combined send (`Engine::send_many`) appends to at most this many
    /// partitions at once, on scoped threads under the engine lock (ADR
    /// 0030); 1 appends one partition after another on the calling thread.
    pub append_concurrency: usize,
}

/// Partitions a combined send appends to at once by default: a `persisted`
/// append waits on the disk, which serves several syncs at a time, so this
/// is not bounded by the cores.
pub const DEFAULT_APPEND_CONCURRENCY: usize = 8;

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
    /// The shipped defaults (the server's config file starts from the same
    /// `ReconcilerConfig::default()`).
    pub fn new(data_dir: impl Into<PathBuf>, seed: u64) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            seed,
            reconciler: ReconcilerConfig {
                seed,
                ..ReconcilerConfig::default()
            },
            purge_mode: PurgeMode::default(),
            default_message_expiry_us: 0,
            max_open_files: None,
            append_concurrency: DEFAULT_APPEND_CONCURRENCY,
        }
    }

    /// As `new`, with cleanups and a combined send's appends run one after
    /// another on the calling thread: their I/O then comes in a fixed order,
    /// so a simulation (and a trace snapshot) is a pure function of its seed. Everything else is the
    /// shipped default.
    pub fn deterministic(data_dir: impl Into<PathBuf>, seed: u64) -> Self {
        let mut config = EngineConfig::new(data_dir, seed);
        config.reconciler.concurrency = 1;
        config.append_concurrency = 1;
        config
    }
}

#[derive(Debug)]
pub struct Engine {
    storage: Arc<dyn DurableStorage>,
    /// The pool every file goes through, when `max_open_files` is set.
    pool: Option<PooledStorage>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    store: MetadataStore,
    meta: Metadata,
    partitions: BTreeMap<PartitionKey, Partition>,
    /// The balanced partitioner's next pick per topic.
    balance: BTreeMap<TopicKey, u32>,
    /// Consumer-group membership: volatile, as in Iggy (`membership.rs`).
    members: crate::membership::Memberships,
    ids: SimRng,
    reconciler: Reconciler,
    deletions: deletion::Deletions,
    retention_index: retention::RetentionIndex,
    /// The next purge cleanup attempt's token (reconciler/pass.rs).
    next_cleanup_token: u64,
    /// Set when the metadata on disk may differ from memory: a save failed and
    /// putting the previous metadata back failed too (the file a restart would
    /// read may hold a change memory does not), or the metadata was loaded at
    /// start-up from a page cache an earlier process may never have synced.
    /// Until a save succeeds again, the engine serves and changes nothing.
    metadata_in_doubt: Option<String>,
    /// Told whenever a commit makes an obligation pending (a purge or a
    /// deletion), so the server's reconciler starts its cleanup at once
    /// instead of at its next period; the call itself answers at its commit
    /// point and never waits for cleanup.
    wake_reconciler: Option<ReconcilerWaker>,
    /// The remote tier, once the server attached one (`attach_tier`).
    tier: Option<tiering::Tier>,
    /// The last serial given to a partition's tiering slot.
    tier_serial: u64,
}

/// What the engine calls to wake the reconciler (see `Engine::set_reconciler_waker`).
#[derive(Clone)]
pub struct ReconcilerWaker(Arc<dyn Fn() + Send + Sync>);

impl ReconcilerWaker {
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Self {
        ReconcilerWaker(Arc::new(wake))
    }
}

impl std::fmt::Debug for ReconcilerWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReconcilerWaker")
    }
}

/// A broken engine invariant: a bug in sluice, never a fault of the disk or
/// of a request. Simulations stop on it with their seed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("engine invariant broken: {0}")]
pub struct InvariantViolation(pub(crate) String);

impl Engine {
    pub fn storage(&self) -> &Arc<dyn DurableStorage> {
        &self.storage
    }

    /// How many partitions a combined send appends to at once: the
    /// configured `append_concurrency`, but 1 with a file pool. A pool's
    /// open evicts the least recently used idle file, and may sync it: run
    /// beside another partition's append, that could evict one of its
    /// segment files between the segment's settle of the pool's failed
    /// syncs and its write, which the log's invariants rule out (ADR 0018,
    /// `partition/log`: nothing opens another file in between). Appends
    /// through a pool therefore run one after another (ADR 0030).
    pub fn append_threads(&self) -> usize {
        match self.pool {
            Some(_) => 1,
            None => self.config.append_concurrency.max(1),
        }
    }

    /// The file pool's counters (`None` without a bound).
    pub fn file_pool_stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(PooledStorage::stats)
    }

    /// A handle on the file pool's counters that outlives a borrow of the
    /// engine (for `/metrics`, read without the engine's lock).
    pub fn file_pool(&self) -> Option<PooledStorage> {
        self.pool.clone()
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

    pub(crate) fn partitions(&self) -> impl Iterator<Item = &Partition> {
        self.partitions.values()
    }

    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    /// Sets what a purge or deletion commit calls to have its cleanup
    /// started (the server's reconciler task); without one, cleanup waits
    /// for the caller's next `reconcile`.
    pub fn set_reconciler_waker(&mut self, waker: ReconcilerWaker) {
        self.wake_reconciler = Some(waker);
    }

    /// A commit made an obligation pending: its cleanup is the reconciler's.
    pub(crate) fn obligation_committed(&self) {
        if let Some(wake) = &self.wake_reconciler {
            (wake.0)();
        }
    }

    /// Every pending deletion and where its cleanup stands, in key order.
    pub fn pending_deletions(
        &self,
    ) -> impl Iterator<Item = (crate::metadata::ResourceKey, DeletePhase)> + '_ {
        self.deletions.pending()
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_micros() / 1000
    }

    /// Checks every invariant the module docs state, on the engine as it is
    /// now. Cheap enough for every step of a simulation (O(partitions)).
    pub fn check_invariants(&self) -> std::result::Result<(), InvariantViolation> {
        let fail = |msg: String| Err(InvariantViolation(msg));
        let wanted: Vec<PartitionKey> = self.meta.partition_keys();
        let have: Vec<PartitionKey> = self.partitions.keys().copied().collect();
        if wanted != have {
            return fail(format!(
                "partitions in memory {have:?} differ from the metadata's {wanted:?}"
            ));
        }
        let mut not_applied = BTreeSet::new();
        let mut with_obligation = BTreeSet::new();
        let mut in_flight = BTreeSet::new();
        for (key, p) in &self.partitions {
            if p.key != *key {
                return fail(format!("partition {} filed under {key}", p.key));
            }
            if p.cleanup_job.is_some() {
                in_flight.insert(*key);
            }
            let committed = self
                .meta
                .partition(*key)
                .map(|m| m.committed_generation)
                .unwrap_or_default();
            if p.generation() != committed {
                return fail(format!(
                    "partition {key} serves generation {} but the metadata commits {committed}",
                    p.generation()
                ));
            }
            // The naive purge (test builds only) bumps generations without an
            // obligation, by design, leaving a recovered one behind: only the
            // obligation purge keeps the obligation invariants.
            if let Some(ob) = p.obligation().filter(|_| self.keeps_obligations()) {
                if ob.generation() != committed {
                    return fail(format!(
                        "partition {key}'s obligation is for generation {} but {committed} is committed",
                        ob.generation()
                    ));
                }
                // Asserts (stops the process) rather than returns: an
                // inconsistent obligation is a bug at its last transition.
                ob.assert_internally_consistent();
                with_obligation.insert(*key);
                if !ob.is_applied() {
                    not_applied.insert(*key);
                }
            }
        }
        // Pending is at least every obligation not yet `Applied` (none is
        // forgotten), and at most the live partitions that have one (none
        // leaks). Between the two: an obligation `Applied` in memory whose
        // `Applied` record could not be written stays pending until a pass
        // confirms it.
        let pending: BTreeSet<PartitionKey> = self.reconciler.pending_purges().collect();
        if let Some(k) = not_applied.difference(&pending).next() {
            return fail(format!(
                "partition {k}'s obligation is not applied but the reconciler does not track it"
            ));
        }
        // A cleanup attempt in flight is on a purge that is still owed (or
        // superseded by a newer one, pending again): never on a partition
        // the reconciler forgot.
        if let Some(k) = in_flight.difference(&pending).next() {
            return fail(format!(
                "partition {k} has a cleanup attempt in flight but no pending purge"
            ));
        }
        if self.keeps_obligations()
            && let Some(k) = pending.difference(&with_obligation).next()
        {
            return fail(format!(
                "the reconciler tracks {k}, which is not a live partition with an obligation"
            ));
        }
        for topic in self.balance.keys() {
            if self.meta.topic(topic.stream, topic.topic).is_none() {
                return fail(format!("balance state for deleted topic {topic}"));
            }
        }
        if let Err(e) = self.meta.check_ids() {
            return fail(e);
        }
        if let Err(e) = self.check_deletions() {
            return fail(e);
        }
        if self.keeps_obligations()
            && let Err(e) = self.check_retention()
        {
            return fail(e);
        }
        for (key, p) in &self.partitions {
            if let Some(t) = p.tier() {
                // Asserts (stops the process): a state that breaks its own
                // invariants is a bug at its last transition.
                t.state.check();
                if t.state.generation() != p.generation() {
                    return fail(format!(
                        "partition {key}'s tiering state is for generation {} but it serves {}",
                        t.state.generation(),
                        p.generation()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether purges here keep the obligation invariants: always, except
    /// the naive (Apache Iggy order) purge that test builds keep as teeth.
    fn keeps_obligations(&self) -> bool {
        self.config.purge_mode == PurgeMode::Obligation
    }

    /// In debug builds (every test and simulation), stops at once on a broken
    /// invariant: a programmer error must not become a typed error that a
    /// caller retries. Release builds leave the checks to the simulator.
    fn assert_invariants(&self, after: &str) {
        if cfg!(debug_assertions)
            && let Err(e) = self.check_invariants()
        {
            panic!("after {after}: {e}");
        }
    }
}
