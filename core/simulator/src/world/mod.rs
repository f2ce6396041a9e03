//! A simulated world: `SimStorage`, the production engine on it, a manual
//! clock, and the oracle of what was acknowledged (`crate::ack`'s model).
//! The simulator's workloads drive it step by step (`World::step`); the purge
//! proptest (tests/purge_proptest.rs) drives the same world through its typed
//! calls (`send`, `store_offset`, `poll_next`, `purge_topic`, `tick`,
//! `fail_in`, `crash`, `start`, `fork`, ...) and judges it with its own model.
//! Crashes and recovery go through the same `Engine::open` the server uses.
//!
//! Invariants:
//! - Every engine call names stream [`STREAM`], topic [`TOPIC`] and partition
//!   ids `0..shape.partitions` (keys from [`key`]); nothing here re-implements
//!   the engine.
//! - A world is a pure function of its seed and the calls made on it: the
//!   clock moves only when told (each open, `tick`), the engine runs cleanup
//!   on one thread (`EngineConfig::deterministic`), and a fork copies the
//!   storage's random state with its files.
//! - The oracle records only what `step` did: the typed calls leave it alone,
//!   so a caller with a model of its own is not second-guessed by it.
//! - A broken engine invariant is noted after every step and open, and again
//!   when asked for (`invariant_violations`), and reported once per noting.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_server::clock::{Clock, ManualClock};
use sluice_server::layout::{
    GROUPS_DIR, PARTITIONS_DIR, PartitionPaths, REDIRTY_SUFFIX, STREAMS_DIR, TOPICS_DIR,
    parse_segment_name,
};
use sluice_server::metadata::{Durability, Metadata, PartitionKey, ResourceKey, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::purge::CleanupPhase;
use sluice_server::partition::purge::{LoadedObligation, PurgeState, decode_file};
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{
    CleanupRun, Engine, EngineConfig, EngineError, Identifier, ObligationKey, Partitioning,
    PurgeMode, ReconcilerWaker, RecoveryReport, SendRequest, Sent,
};
use sluice_storage::{
    Crash, DurableStorage, Fault, OpKind, OpMatcher, SimConfig, SimStorage, SyncFailureSemantics,
};

mod checks;
mod tier;

pub use tier::{TIER_INSTANCE, parse_remote_fault, remote_fault_name};

use crate::ack;
use crate::oracle::{Oracle, Violation};

pub const DATA_DIR: &str = "/data";
const STREAM: &str = "s";
const TOPIC: &str = "t";
/// Chance that a failed file sync evicts the pages it failed to write.
const EVICTION_PPM: u32 = 500_000;
/// The consumer id used to observe `Next` from the start (never stores).
pub const OBSERVER: u32 = 9_999;
/// Enough for every history a world builds: `Next` from the start returns it whole.
const WHOLE_HISTORY: u64 = 100_000;

/// One workload step: an ordinary engine call each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Send {
        partition: PartitionKey,
        payloads: Vec<String>,
    },
    /// Several sends as one combined engine call (`Engine::send_many`, what
    /// the server makes of sends that queued for the engine lock: ADR
    /// 0030), answered and acknowledged each on its own, in order.
    Sends(Vec<(PartitionKey, Vec<String>)>),
    Store {
        partition: PartitionKey,
        group: bool,
        id: u32,
        offset: u64,
    },
    Delete {
        partition: PartitionKey,
        group: bool,
        id: u32,
    },
    PurgePartition {
        partition: PartitionKey,
    },
    /// Purges topic 0 of stream 0.
    PurgeTopic,
    /// A reconciler pass, after the one in flight ended; itself left in
    /// flight (its first steps taken).
    Reconcile,
    /// The pass in flight takes its next half step: the waits the server runs
    /// without the engine lock (the plan's or the directories' syncs), or the
    /// engine's step after them (ADR 0019). Nothing if none is in flight.
    CleanupTurn,
    /// Creates a stream, a topic (with the shape's partitions and options), a
    /// group, or the next partition of a topic (`Partition(k)`: the engine
    /// gives it the id after the highest live one; `k` is the one the
    /// workload expects), by the name [`stream_name`], [`topic_name`] or
    /// [`group_name`] gives its id.
    Create(ResourceKey),
    /// Deletes a stream, a topic, a group, or the last partition of a topic
    /// (`Partition(k)`: the engine takes the last live one).
    Remove(ResourceKey),
    /// `Remove` then `Create` of the same resource under the same id, with
    /// no reconciler step between: the server serves both while its
    /// reconciler task is in the middle of a pass, whose waits may then
    /// run on the new incarnation's paths (issue 27).
    Recreate(ResourceKey),
    /// The engine flushes everything acknowledged (`sync_all`, a graceful
    /// stop's promise): on success, nothing acknowledged before it may be
    /// lost, whatever the topic's policy.
    Flush,
    /// Sets a topic's retention (`update_topic`: its `message_expiry` in
    /// microseconds, its `max_topic_size` in bytes; 0 for none), by the name
    /// [`topic_name`] gives its id.
    SetRetention {
        stream: u32,
        topic: u32,
        message_expiry: u64,
        max_topic_size: u64,
    },
    /// Time passes on the engine's clock (the simulator's, never the wall
    /// clock): no storage operation, but retention by age may fall due.
    Advance {
        micros: u64,
    },
    /// A tiering pass is planned under the engine (the one in flight is
    /// finished first): releases, expiry of remote segments, intents and
    /// rounds recorded. A tiered world only (`World::enable_tiering`).
    TierPlan,
    /// The planned pass makes its remote calls, without the engine.
    TierRun,
    /// The planned pass is finished under the engine (run first if not yet).
    TierFinish,
    /// A whole tiering pass: plan, run, finish.
    TierPass,
}

/// The shape of a topic a workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub partitions: u32,
    pub messages: Durability,
    pub offsets: Durability,
    pub segment_size: u64,
    /// The engine's bounded file pool (ADR 0018); `None`: one descriptor
    /// per file, as every schedule before the pool ran.
    pub max_open_files: Option<usize>,
}

/// Where in a partition's directory tree `World::fail_in` strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Segments,
    Consumers,
    Groups,
    /// The partition directory itself (`purge.obligation` and its name).
    Root,
    /// Anywhere in the partition's directory tree.
    Any,
}

#[derive(Debug)]
pub struct World {
    pub sim: SimStorage,
    engine: Option<Engine>,
    oracle: Oracle,
    shape: Shape,
    clock: Arc<ManualClock>,
    /// (is_group, id) pairs a workload has touched, per partition.
    consumers: BTreeMap<PartitionKey, Vec<(bool, u32)>>,
    seed: u64,
    purge_mode: PurgeMode,
    /// The first broken engine invariant seen (`Engine::check_invariants`),
    /// until a check reports it.
    broken: Option<String>,
    /// Violations a step itself showed (a deleted resource accepting a
    /// write), until a check reports them.
    seen_in_steps: Vec<Violation>,
    /// Set by the engine's reconciler waker when a purge or deletion commit
    /// made an obligation pending; the world then runs the pass the server's
    /// woken reconciler would (`run_woken_pass`), right after the call.
    woken: Arc<AtomicBool>,
    /// The open engine's file pool's failed eviction syncs the oracle knows of.
    pool_sync_failures: u64,
    /// A reconciler pass whose purge cleanups wait for I/O, as the server's
    /// reconciler task holds one while it syncs without the engine lock: a
    /// workload's `Step::CleanupTurn` takes its next step, so the sends,
    /// stores and purges in between land between the cleanup's steps.
    inflight: Option<CleanupRun>,
    /// Set while `step` runs: a woken pass is begun and left in flight
    /// instead of run to its end.
    interleave: bool,
    /// Set by `set_interleaved_cleanup`: every pass (woken, or a `tick`'s)
    /// is left in flight, for the caller's `advance_cleanup` calls.
    interleave_always: bool,
    /// Resources re-created (`Step::Recreate`) while the pass in flight ran.
    recreated: Vec<ResourceKey>,
    /// The remote door of a tiered world (`enable_tiering`).
    tier: Option<tier::TierDoor>,
    /// Where each door's process dies (shared with the remote door).
    halts: Arc<std::sync::Mutex<sluice_remote::Halts>>,
}

fn s() -> Identifier {
    Identifier::Name(STREAM.into())
}

fn t() -> Identifier {
    Identifier::Name(TOPIC.into())
}

/// The name of stream `id`: `s` for stream 0 (the world's own), `s<id>` else.
pub fn stream_name(id: u32) -> String {
    if id == 0 {
        STREAM.into()
    } else {
        format!("{STREAM}{id}")
    }
}

/// The name of topic `id` in any stream: `t` for topic 0, `t<id>` else.
pub fn topic_name(id: u32) -> String {
    if id == 0 {
        TOPIC.into()
    } else {
        format!("{TOPIC}{id}")
    }
}

/// The name of group `id`: `g` for group 0 (created with the world), `g<id>` else.
pub fn group_name(id: u32) -> String {
    if id == 0 {
        "g".into()
    } else {
        format!("g{id}")
    }
}

/// The identifiers of `key`'s stream and topic, by name (as a client names them).
fn ids_of(stream: u32, topic: u32) -> (Identifier, Identifier) {
    (
        Identifier::Name(stream_name(stream)),
        Identifier::Name(topic_name(topic)),
    )
}

pub fn key(partition: u32) -> PartitionKey {
    PartitionKey {
        stream: 0,
        topic: 0,
        partition,
    }
}

/// The directories and files of `partition` under the world's data directory.
pub fn paths(partition: u32) -> PartitionPaths {
    PartitionPaths::new(Path::new(DATA_DIR), key(partition))
}

/// The key of a group, as the oracle files it.
pub(crate) type GroupKey = (u32, u32, u32);

fn consumer(group: bool, id: u32) -> Consumer {
    if group {
        Consumer::group(id)
    } else {
        Consumer::consumer(id)
    }
}

impl World {
    /// A fresh world with the stream, topic (and group 0) created, durable.
    pub fn new(semantics: SyncFailureSemantics, shape: Shape, seed: u64) -> Result<World, String> {
        World::with_mode(semantics, shape, seed, PurgeMode::default())
    }

    /// A world whose engine purges with `purge_mode` (the naive mode exists
    /// only in builds with the `naive-purge` feature, for teeth tests).
    pub fn with_mode(
        semantics: SyncFailureSemantics,
        shape: Shape,
        seed: u64,
        purge_mode: PurgeMode,
    ) -> Result<World, String> {
        let sim = SimStorage::new(SimConfig {
            seed,
            sync_failure: semantics,
            capacity: None,
        });
        // Linux may evict the pages of a failed writeback: half the failed
        // file syncs do (ADR 0002 §2.4), so reads back through the cache after
        // a failure see either the new bytes or the disk's.
        sim.set_eviction_after_failed_sync(EVICTION_PPM);
        let mut world = World {
            sim,
            engine: None,
            oracle: Oracle::default(),
            shape,
            clock: Arc::new(ManualClock::new(1_000_000)),
            consumers: BTreeMap::new(),
            seed,
            purge_mode,
            broken: None,
            seen_in_steps: Vec::new(),
            woken: Arc::new(AtomicBool::new(false)),
            pool_sync_failures: 0,
            inflight: None,
            interleave: false,
            interleave_always: false,
            recreated: Vec::new(),
            tier: None,
            halts: Arc::default(),
        };
        world.open().map_err(|e| format!("initial open: {e}"))?;
        let engine = world.engine()?;
        engine
            .create_stream(None, STREAM)
            .map_err(|e| e.to_string())?;
        let options = TopicOptions {
            durability: shape.messages,
            consumer_offset_durability: shape.offsets,
            segment_size: shape.segment_size,
            ..TopicOptions::default()
        };
        engine
            .create_topic(&s(), None, TOPIC, shape.partitions, options, 0, 0, 1)
            .map_err(|e| e.to_string())?;
        engine
            .create_group(&s(), &t(), None, "g")
            .map_err(|e| e.to_string())?;
        for p in 0..shape.partitions {
            world
                .oracle
                .add_partition(key(p), shape.messages, shape.offsets);
        }
        world.oracle.group_created((0, 0, 0), true);
        Ok(world)
    }

    /// An independent copy of this world, crashed by nothing yet and with
    /// no engine open: the same files, faults, trace and random state, the
    /// same oracle, a clock at the same time. What the copy does never
    /// reaches this world.
    pub fn fork(&self) -> World {
        World {
            sim: self.sim.fork(),
            engine: None,
            oracle: self.oracle.clone(),
            shape: self.shape,
            clock: Arc::new(ManualClock::new(self.clock.now_micros())),
            consumers: self.consumers.clone(),
            seed: self.seed,
            purge_mode: self.purge_mode,
            broken: None,
            seen_in_steps: self.seen_in_steps.clone(),
            woken: Arc::new(AtomicBool::new(false)),
            pool_sync_failures: 0,
            inflight: None,
            interleave: false,
            interleave_always: false,
            recreated: Vec::new(),
            tier: self.tier.as_ref().map(tier::TierDoor::fork),
            halts: Arc::default(),
        }
    }

    /// The open engine, or why there is none.
    pub fn engine(&mut self) -> Result<&mut Engine, String> {
        self.engine
            .as_mut()
            .ok_or_else(|| "engine is down".to_string())
    }

    /// The open engine for a call; a call on a crashed world is a harness
    /// mistake, answered as an internal error so no caller mistakes it for a
    /// refusal or a storage fault.
    fn call(&mut self) -> Result<&mut Engine, EngineError> {
        self.engine.as_mut().ok_or_else(|| {
            EngineError::Internal("the engine is down (crashed, not reopened)".into())
        })
    }

    /// Opens the engine (recovery) on the current storage.
    pub fn open(&mut self) -> Result<RecoveryReport, String> {
        let storage: Arc<dyn DurableStorage> = Arc::new(self.sim.clone());
        // A restarted process's clock is later than anything written before.
        self.clock.advance(1_000_000);
        let mut config = EngineConfig::deterministic(DATA_DIR, self.seed);
        // Half the seeds take one cleanup step per engine call, as the
        // server does, so first steps left `Ready` for a later call and
        // requests between two partitions' steps are explored too.
        if self.seed.is_multiple_of(2) {
            config.reconciler.steps_per_hold = 1;
        }
        config.purge_mode = self.purge_mode;
        config.max_open_files = self.shape.max_open_files;
        let (mut engine, report) =
            Engine::open(storage, self.clock.clone(), config).map_err(|e| e.to_string())?;
        let woken = self.woken.clone();
        woken.store(false, Ordering::Relaxed);
        engine.set_reconciler_waker(ReconcilerWaker::new(move || {
            woken.store(true, Ordering::Relaxed)
        }));
        // The generation each partition recovered to decides the purges in
        // doubt; judged now, before the next step writes anything.
        for k in self.oracle.live_keys() {
            if let Some(generation) = engine.partition(k).map(|p| p.generation()) {
                let judged = self.oracle.recovered(k, generation);
                self.seen_in_steps.extend(judged);
            }
        }
        self.engine = Some(engine);
        self.attach_tier()?;
        self.pool_sync_failures = 0;
        self.note_pool_sync_failures();
        self.note_invariants();
        Ok(report)
    }

    /// Starts the engine as an operator restarts a failed start-up: an open
    /// that fails, or an engine that refuses service because it cannot make
    /// the metadata it loaded durable, is a process that exits; it is started
    /// again, at most `attempts` times (each failure uses up an injected
    /// fault, so a schedule with fewer faults than that starts). Each attempt
    /// is described in `log`.
    pub fn start(&mut self, attempts: u32, log: &mut Vec<String>) -> Result<(), String> {
        for attempt in 1..=attempts {
            match self.open() {
                Ok(report) => {
                    log.push(format!(
                        "  open #{attempt}: stale_records={} degraded={:?}",
                        report.stale_records, report.degraded
                    ));
                    match self.availability() {
                        Err(e) => log.push(format!("  open #{attempt} refuses service: {e}")),
                        Ok(()) => return Ok(()),
                    }
                }
                Err(e) => log.push(format!("  open #{attempt} failed: {e}")),
            }
            self.crash(Crash::Process);
        }
        Err(format!("the engine did not start in {attempts} attempts"))
    }

    /// Applies one step, recording what was acknowledged. Returns whether it succeeded.
    pub(crate) fn step(&mut self, step: &Step) -> bool {
        let before = self.low_water_marks();
        let ops_before = self.sim.op_count();
        self.interleave = true;
        let ok = self.apply(step);
        if matches!(step, Step::TierPlan | Step::TierPass) {
            self.note_failed_segment_syncs(ops_before);
        }
        self.run_woken_pass();
        self.interleave = false;
        self.note_pool_sync_failures();
        // A mark a live step raised was committed (written and synced, its
        // name durable: `Partition::commit_low_water` raises nothing
        // otherwise), or, under the naive retention, claimed: from now on
        // nothing below it may be served. A mark recovery read is not
        // learned: it may come from the page cache of a failed commit.
        //
        // A tiered partition's mark (its remote low mark) is raised in
        // memory before its record is written (`raise_remote_low`), so it is
        // learned only while the record equals memory: no upload intended
        // and nothing unrecorded (`Engine::remote_obligations`).
        let unrecorded = self.tier_unrecorded();
        for (k, mark) in self.low_water_marks() {
            let tiered = self
                .engine
                .as_ref()
                .is_some_and(|e| World::tier_mark(e, k).is_some());
            if tiered {
                if !unrecorded.contains(&k) {
                    self.oracle.low_water_committed(k, mark);
                }
            } else if before.get(&k).is_some_and(|b| mark > *b) {
                self.oracle.low_water_committed(k, mark);
            }
        }
        self.note_invariants();
        ok
    }

    /// Tells the oracle of a failed sync the file pool made since it last
    /// looked (ADR 0018): buffered writes may be gone, as after a failed
    /// background writeback.
    fn note_pool_sync_failures(&mut self) {
        let failures = self
            .engine
            .as_ref()
            .and_then(Engine::file_pool_stats)
            .map_or(0, |s| s.eviction_sync_failures);
        if failures > self.pool_sync_failures {
            self.pool_sync_failures = failures;
            self.oracle.writeback_failed();
        }
    }

    /// Each live partition's low-water mark, as the engine holds it (no I/O).
    fn low_water_marks(&self) -> BTreeMap<PartitionKey, u64> {
        let Some(engine) = &self.engine else {
            return BTreeMap::new();
        };
        engine
            .metadata()
            .partition_keys()
            .into_iter()
            .filter_map(|k| {
                let mark =
                    World::tier_mark(engine, k).unwrap_or(engine.partition(k)?.log().low_water());
                Some((k, mark))
            })
            .collect()
    }

    /// Records the first broken engine invariant, for the next check to report.
    fn note_invariants(&mut self) {
        if self.broken.is_none()
            && let Some(engine) = &self.engine
            && let Err(e) = engine.check_invariants()
        {
            self.broken = Some(e.to_string());
        }
    }

    /// A broken engine invariant (noted earlier, or broken now) as a
    /// violation of property (i), once.
    pub fn invariant_violations(&mut self) -> Vec<Violation> {
        self.note_invariants();
        self.broken
            .take()
            .map(|detail| violation('i', "-", detail))
            .into_iter()
            .collect()
    }

    fn apply(&mut self, step: &Step) -> bool {
        if self.engine.is_none() {
            return false;
        }
        match step {
            Step::Send {
                partition,
                payloads,
            } => {
                let base = self
                    .send_to(*partition, payloads)
                    .ok()
                    .map(|s| s.base_offset);
                self.served_if_deleted(*partition, None, base.is_some(), "a send");
                self.oracle.sent(*partition, payloads, base);
                base.is_some()
            }
            Step::Sends(sends) => {
                let answers = self.send_many(sends);
                let mut any = false;
                for ((partition, payloads), answer) in sends.iter().zip(answers) {
                    let base = answer.ok().map(|s| s.base_offset);
                    self.served_if_deleted(*partition, None, base.is_some(), "a combined send");
                    self.oracle.sent(*partition, payloads, base);
                    any |= base.is_some();
                }
                any
            }
            Step::Store {
                partition,
                group,
                id,
                offset,
            } => {
                let ok = self
                    .store_offset_at(*partition, consumer(*group, *id), *offset)
                    .is_ok();
                self.served_if_deleted(*partition, group.then_some(*id), ok, "an offset store");
                self.oracle
                    .offset(*partition, *group, *id, Some(*offset), ok);
                self.consumers
                    .entry(*partition)
                    .or_default()
                    .push((*group, *id));
                ok
            }
            Step::Delete {
                partition,
                group,
                id,
            } => {
                let ok = self
                    .delete_offset_at(*partition, consumer(*group, *id))
                    .is_ok();
                self.served_if_deleted(*partition, group.then_some(*id), ok, "an offset delete");
                self.oracle.offset(*partition, *group, *id, None, ok);
                ok
            }
            Step::PurgePartition { partition } => {
                let (s, t) = ids_of(partition.stream, partition.topic);
                let ok = self
                    .call()
                    .and_then(|e| e.purge_partition(&s, &t, partition.partition))
                    .is_ok();
                self.oracle.purged(&[*partition], ok);
                ok
            }
            Step::PurgeTopic => {
                let ok = self.purge_topic().is_ok();
                let keys: Vec<PartitionKey> = (0..self.shape.partitions).map(key).collect();
                self.oracle.purged(&keys, ok);
                ok
            }
            Step::CleanupTurn => {
                self.advance_inflight();
                true
            }
            Step::Reconcile => {
                // A periodic pass: begun after the one in flight ends, and
                // itself left in flight for the next steps.
                self.settle_inflight();
                if let Some(engine) = self.engine.as_mut() {
                    let run = engine.begin_reconcile_at(u64::MAX);
                    self.inflight = (!run.is_finished()).then_some(run);
                }
                true
            }
            Step::Create(r) => {
                let r = self.resolve_partition_step(*r, true);
                let ok = self.create(r).is_ok();
                let partitions = match r {
                    ResourceKey::Stream { .. } | ResourceKey::Group { .. } => Vec::new(),
                    ResourceKey::Topic { stream, topic } => (0..self.shape.partitions)
                        .map(|partition| PartitionKey {
                            stream,
                            topic,
                            partition,
                        })
                        .collect(),
                    ResourceKey::Partition(k) => vec![k],
                };
                for k in partitions {
                    self.oracle
                        .partition_created(k, self.shape.messages, self.shape.offsets, ok);
                }
                if let ResourceKey::Group {
                    stream,
                    topic,
                    group,
                } = r
                {
                    self.oracle.group_created((stream, topic, group), ok);
                }
                ok
            }
            Step::Remove(r) => {
                let r = self.resolve_partition_step(*r, false);
                let ok = self.remove(r).is_ok();
                self.oracle.removed(r, ok);
                ok
            }
            Step::Recreate(r) => {
                self.recreated.push(self.resolve_partition_step(*r, false));
                let removed = self.apply(&Step::Remove(*r));
                removed && self.apply(&Step::Create(*r))
            }
            Step::Flush => {
                let ok = self.call().and_then(Engine::sync_all).is_ok();
                if ok {
                    self.oracle.flushed();
                } else {
                    // A failed sync may have evicted unsynced pages (Linux),
                    // which the engine then finds gone and cuts: buffered
                    // state may roll back, as after a failed writeback.
                    self.oracle.writeback_failed();
                }
                ok
            }
            Step::SetRetention {
                stream,
                topic,
                message_expiry,
                max_topic_size,
            } => {
                let (s, t) = ids_of(*stream, *topic);
                // A setting, not data: the oracle judges what the engine
                // expires by the mark it shows, whichever settings hold.
                self.call()
                    .and_then(|e| {
                        e.update_topic(
                            &s,
                            &t,
                            &topic_name(*topic),
                            *message_expiry,
                            *max_topic_size,
                        )
                    })
                    .is_ok()
            }
            Step::Advance { micros } => {
                self.clock.advance(*micros);
                true
            }
            Step::TierPlan => {
                self.tier_plan();
                true
            }
            Step::TierRun => {
                self.tier_run();
                true
            }
            Step::TierFinish => {
                self.tier_finish();
                true
            }
            Step::TierPass => {
                self.tier_plan();
                self.tier_finish();
                true
            }
        }
    }

    /// The partition a partition step acts on, as the engine picks it: the
    /// next after the highest live one (`create`), or the last (`!create`).
    /// A workload names the one it expects, which an earlier failed step may
    /// have moved (a deletion that did not happen leaves the next id higher).
    fn resolve_partition_step(&self, r: ResourceKey, create: bool) -> ResourceKey {
        let ResourceKey::Partition(k) = r else {
            return r;
        };
        let last = self
            .metadata()
            .and_then(|m| m.streams.get(&k.stream))
            .and_then(|s| s.topics.get(&k.topic))
            .and_then(|t| t.partitions.keys().next_back().copied());
        let partition = match (last, create) {
            (Some(p), true) => p + 1,
            (Some(p), false) => p,
            (None, _) => k.partition,
        };
        ResourceKey::Partition(PartitionKey { partition, ..k })
    }

    /// A call on a partition (or group) the oracle knows deleted, and not in
    /// doubt, must fail: its id resolves to nothing. One that succeeded is
    /// noted as a violation of (h) for the next check.
    fn served_if_deleted(&mut self, k: PartitionKey, group: Option<u32>, ok: bool, what: &str) {
        if !ok {
            return;
        }
        let gone = if self.oracle.partition_gone(k) {
            Some(format!("partition {k}"))
        } else {
            group
                .filter(|g| self.oracle.group_gone((k.stream, k.topic, *g)))
                .map(|g| format!("group {g} of topic {}/{}", k.stream, k.topic))
        };
        if let Some(what_is_gone) = gone {
            self.seen_in_steps.push(violation(
                'h',
                &k.to_string(),
                format!("{what} on deleted {what_is_gone} was acknowledged"),
            ));
        }
    }

    /// Creates `r` (see [`Step::Create`]).
    pub fn create(&mut self, r: ResourceKey) -> Result<(), EngineError> {
        let shape = self.shape;
        let engine = self.call()?;
        match r {
            ResourceKey::Stream { stream } => engine
                .create_stream(Some(stream), &stream_name(stream))
                .map(|_| ()),
            ResourceKey::Topic { stream, topic } => {
                let options = TopicOptions {
                    durability: shape.messages,
                    consumer_offset_durability: shape.offsets,
                    segment_size: shape.segment_size,
                    ..TopicOptions::default()
                };
                engine
                    .create_topic(
                        &Identifier::Name(stream_name(stream)),
                        Some(topic),
                        &topic_name(topic),
                        shape.partitions,
                        options,
                        0,
                        0,
                        1,
                    )
                    .map(|_| ())
            }
            ResourceKey::Partition(k) => {
                let (s, t) = ids_of(k.stream, k.topic);
                let ids = engine.create_partitions(&s, &t, 1)?;
                // The engine picks the id (one past the highest live one), as
                // `resolve_partition_step` did: the oracle models that one.
                assert_eq!(ids, [k.partition], "created {ids:?}, not {k}");
                Ok(())
            }
            ResourceKey::Group {
                stream,
                topic,
                group,
            } => {
                let (s, t) = ids_of(stream, topic);
                engine
                    .create_group(&s, &t, Some(group), &group_name(group))
                    .map(|_| ())
            }
        }
    }

    /// Deletes `r` (see [`Step::Remove`]), then runs the pass the deletion
    /// woke.
    pub fn remove(&mut self, r: ResourceKey) -> Result<(), EngineError> {
        let result = self.delete_resource(r);
        self.run_woken_pass();
        result
    }

    fn delete_resource(&mut self, r: ResourceKey) -> Result<(), EngineError> {
        let engine = self.call()?;
        match r {
            ResourceKey::Stream { stream } => {
                engine.delete_stream(&Identifier::Name(stream_name(stream)))
            }
            ResourceKey::Topic { stream, topic } => {
                let (s, t) = ids_of(stream, topic);
                engine.delete_topic(&s, &t)
            }
            ResourceKey::Partition(k) => {
                let (s, t) = ids_of(k.stream, k.topic);
                let ids = engine.delete_partitions(&s, &t, 1)?;
                assert_eq!(ids, [k.partition], "deleted {ids:?}, not {k}");
                Ok(())
            }
            ResourceKey::Group {
                stream,
                topic,
                group,
            } => {
                let (s, t) = ids_of(stream, topic);
                engine.delete_group(&s, &t, &Identifier::Name(group_name(group)))
            }
        }
    }

    /// Sends one batch of `payloads` to the partition `k`.
    fn send_to(&mut self, k: PartitionKey, payloads: &[String]) -> Result<Sent, EngineError> {
        let batch = payloads
            .iter()
            .map(|p| NewMessage::new(p.as_bytes().to_vec()))
            .collect();
        let (s, t) = ids_of(k.stream, k.topic);
        self.call()?
            .send(&s, &t, &Partitioning::PartitionId(k.partition), batch)
    }

    /// Sends each batch of `payloads` to its partition, all in one
    /// combined call; an answer per batch, in order.
    fn send_many(
        &mut self,
        sends: &[(PartitionKey, Vec<String>)],
    ) -> Vec<Result<Sent, EngineError>> {
        let requests = sends
            .iter()
            .map(|(k, payloads)| {
                let (stream, topic) = ids_of(k.stream, k.topic);
                SendRequest {
                    stream,
                    topic,
                    partitioning: Partitioning::PartitionId(k.partition),
                    messages: payloads
                        .iter()
                        .map(|p| NewMessage::new(p.as_bytes().to_vec()))
                        .collect(),
                }
            })
            .collect();
        match self.call() {
            Ok(engine) => engine.send_many(requests),
            Err(e) => sends.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    fn store_offset_at(
        &mut self,
        k: PartitionKey,
        consumer: Consumer,
        offset: u64,
    ) -> Result<(), EngineError> {
        let (s, t) = ids_of(k.stream, k.topic);
        self.call()?
            .store_offset(&s, &t, k.partition, consumer, offset)
    }

    fn delete_offset_at(
        &mut self,
        k: PartitionKey,
        consumer: Consumer,
    ) -> Result<bool, EngineError> {
        let (s, t) = ids_of(k.stream, k.topic);
        self.call()?.delete_offset(&s, &t, k.partition, consumer)
    }

    fn stored_offset_at(
        &mut self,
        k: PartitionKey,
        consumer: Consumer,
    ) -> Result<Option<u64>, EngineError> {
        let (s, t) = ids_of(k.stream, k.topic);
        Ok(self
            .call()?
            .get_offset(&s, &t, k.partition, consumer)?
            .map(|(_, stored)| stored))
    }

    fn poll_next_at(
        &mut self,
        k: PartitionKey,
        consumer: Consumer,
        count: u64,
    ) -> Result<Vec<(u64, String)>, EngineError> {
        let (s, t) = ids_of(k.stream, k.topic);
        // With a file pool (ADR 0018) a poll may reopen a file, and the
        // fault plan may fail that `open`: the poll fails and serves nothing,
        // the next one opens again. The observer asks again a few times
        // rather than report an injected fault as a violation.
        // A tiered partition's poll reads the store, whose seeded faults
        // may fail it (`Unavailable`): asked again the same way.
        let mut attempts = if self.shape.max_open_files.is_some() || self.tier.is_some() {
            8
        } else {
            1
        };
        let polled = loop {
            attempts -= 1;
            match self.call()?.poll(
                &s,
                &t,
                k.partition,
                consumer,
                PollingStrategy::Next,
                count,
                false,
            ) {
                Err(EngineError::Storage(e))
                    if attempts > 0 && e.op == sluice_storage::OpKind::Open => {}
                Err(EngineError::Unavailable(e))
                    if attempts > 0 && self.tier.is_some() && e.starts_with("remote tier") => {}
                other => {
                    self.note_pool_sync_failures();
                    break other?;
                }
            }
        };
        Ok(polled
            .messages
            .into_iter()
            .map(|m| (m.offset, String::from_utf8_lossy(&m.payload).into_owned()))
            .collect())
    }

    /// Sends one batch of `payloads` to `partition` (of topic 0, stream 0,
    /// as every typed call here names it).
    pub fn send(&mut self, partition: u32, payloads: &[String]) -> Result<Sent, EngineError> {
        self.send_to(key(partition), payloads)
    }

    /// Stores `consumer`'s offset in `partition`.
    pub fn store_offset(
        &mut self,
        partition: u32,
        consumer: Consumer,
        offset: u64,
    ) -> Result<(), EngineError> {
        self.store_offset_at(key(partition), consumer, offset)
    }

    /// Deletes `consumer`'s offset in `partition`; whether there was one.
    pub fn delete_offset(
        &mut self,
        partition: u32,
        consumer: Consumer,
    ) -> Result<bool, EngineError> {
        self.delete_offset_at(key(partition), consumer)
    }

    /// `consumer`'s stored offset in `partition`, if any.
    pub fn stored_offset(
        &mut self,
        partition: u32,
        consumer: Consumer,
    ) -> Result<Option<u64>, EngineError> {
        self.stored_offset_at(key(partition), consumer)
    }

    /// `Next` for `consumer`: up to `count` messages as (offset, payload).
    pub fn poll_next(
        &mut self,
        partition: u32,
        consumer: Consumer,
        count: u64,
        auto_commit: bool,
    ) -> Result<Vec<(u64, String)>, EngineError> {
        let polled = self.call()?.poll(
            &s(),
            &t(),
            partition,
            consumer,
            PollingStrategy::Next,
            count,
            auto_commit,
        )?;
        Ok(polled
            .messages
            .into_iter()
            .map(|m| (m.offset, String::from_utf8_lossy(&m.payload).into_owned()))
            .collect())
    }

    /// The whole history `partition` serves: `Next` for a consumer that
    /// never stores.
    pub fn history(&mut self, partition: u32) -> Result<Vec<(u64, String)>, EngineError> {
        self.history_at(key(partition))
    }

    fn history_at(&mut self, k: PartitionKey) -> Result<Vec<(u64, String)>, EngineError> {
        self.poll_next_at(k, Consumer::consumer(OBSERVER), WHOLE_HISTORY)
    }

    pub fn purge_partition(&mut self, partition: u32) -> Result<(), EngineError> {
        let r = self.call()?.purge_partition(&s(), &t(), partition);
        self.run_woken_pass();
        r
    }

    pub fn purge_topic(&mut self) -> Result<(), EngineError> {
        let r = self.call()?.purge_topic(&s(), &t());
        self.run_woken_pass();
        r
    }

    /// The reconciler pass the server runs when a commit wakes it (a purge
    /// or deletion answers at its commit point; its cleanup is this pass's).
    /// The server runs it on its reconciler task as soon as the engine is
    /// free, so here it begins right after the call that woke it: within
    /// `step`, it is left in flight for the next steps to interleave with;
    /// elsewhere it runs to its end.
    pub fn run_woken_pass(&mut self) {
        let interleave = self.interleave || self.interleave_always;
        if interleave && self.inflight.is_some() {
            // The server's one reconciler task is in the middle of a pass:
            // it begins the woken one when that one ends (`advance_inflight`),
            // and serves requests meanwhile, on the paths the pass's waits
            // are about to touch too (a deletion and a re-creation, issue 27).
            return;
        }
        if !self.woken.swap(false, Ordering::Relaxed) {
            return;
        }
        self.settle_inflight();
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        if !interleave {
            engine.reconcile();
            return;
        }
        let run = engine.begin_reconcile();
        self.inflight = (!run.is_finished()).then_some(run);
    }

    /// Takes the next half step of the pass in flight: its waits (the syncs
    /// the server runs without the engine lock) if it has any, else the
    /// engine's step after them. Two calls, so a workload's calls can land
    /// between the I/O and the step that takes in its result, as requests
    /// take the engine lock before the reconciler task does.
    fn advance_inflight(&mut self) {
        let (Some(run), Some(engine)) = (self.inflight.as_mut(), self.engine.as_mut()) else {
            self.inflight = None;
            self.recreated.clear();
            return;
        };
        if run.waiting() > 0 {
            run.perform_waits();
        } else {
            engine.resume_reconcile(run);
        }
        if run.is_finished() {
            self.inflight = None;
            self.recreated.clear();
            // A pass woken while this one ran begins now.
            self.run_woken_pass();
        }
    }

    /// Leaves every later pass in flight (woken by a purge or a deletion, or
    /// a `tick`'s) for the caller to step with `advance_cleanup` between its
    /// own calls, as requests interleave with the server's cleanup.
    pub fn set_interleaved_cleanup(&mut self, on: bool) {
        self.interleave_always = on;
    }

    /// Takes the next step of the pass in flight, if there is one.
    pub fn advance_cleanup(&mut self) {
        self.advance_inflight();
    }

    /// The partitions whose cleanup attempts the pass in flight holds, each
    /// with what it waits for.
    /// (A partition re-created since the pass began is not listed: its
    /// attempt is the deleted incarnation's.)
    pub(crate) fn cleaning(&self) -> Vec<(PartitionKey, Option<CleanupPhase>)> {
        let mut jobs = self
            .inflight
            .as_ref()
            .map_or_else(Vec::new, CleanupRun::partitions);
        jobs.retain(|(k, _)| {
            !self
                .recreated
                .iter()
                .any(|r| r.covers(ResourceKey::Partition(*k)))
        });
        jobs
    }

    /// Runs the pass in flight to its end (before a pass of its own, as the
    /// server's one reconciler task does).
    pub fn settle_inflight(&mut self) {
        while self.inflight.is_some() {
            self.advance_inflight();
        }
    }

    /// Sets the world topic's retention (`update_topic`, the production
    /// path): `message_expiry` in microseconds and `max_topic_size` in bytes,
    /// 0 meaning never and unlimited, as the engine stores them.
    pub fn set_retention(
        &mut self,
        message_expiry: u64,
        max_topic_size: u64,
    ) -> Result<(), EngineError> {
        self.call()?
            .update_topic(&s(), &t(), TOPIC, message_expiry, max_topic_size)
    }

    /// The engine clock's time (µs): what a send stamps on its messages and
    /// what retention by age compares them with.
    pub fn now_micros(&self) -> u64 {
        self.clock.now_micros()
    }

    /// Whether the engine's catalog names group `group` of the world's topic.
    pub fn group_exists(&mut self, group: u32) -> Result<bool, String> {
        let engine = self.engine()?;
        let topic = engine.topic(&s(), &t()).map_err(|e| e.to_string())?;
        Ok(topic.groups.contains_key(&group))
    }

    /// Property (d) for deletions, for a caller with its own model: the
    /// paths of a resource the metadata does not name, with no deletion
    /// pending for it, still on disk or in the page cache (see
    /// `check_done_means_removed`).
    pub fn deletion_leftovers(&self) -> Vec<String> {
        self.check_done_means_removed()
            .into_iter()
            .map(|v| v.detail)
            .collect()
    }

    /// Time passes (`advance_ms`), then one reconciler pass runs at the new
    /// time; what the pass did, for a trail.
    pub fn tick(&mut self, advance_ms: u64) -> Result<impl std::fmt::Debug + use<>, String> {
        self.settle_inflight();
        self.clock.advance(advance_ms * 1000);
        let now_ms = self.clock.now_micros() / 1000;
        let interleave = self.interleave_always;
        let engine = self.engine()?;
        if !interleave {
            return Ok(engine.reconcile_at(now_ms));
        }
        let run = engine.begin_reconcile_at(now_ms);
        let report = run.report().clone();
        self.inflight = (!run.is_finished()).then_some(run);
        Ok(report)
    }

    /// Fails the `skip + 1`-th next `kind` call in `dir` of `partition` with
    /// `fault`: a directory sync of that directory (`Dir::Any`: of any in the
    /// tree), any other call on a file in it (`Dir::Root`: the obligation file).
    pub fn fail_in(&self, partition: u32, dir: Dir, kind: OpKind, fault: Fault, skip: u32) {
        let paths = paths(partition);
        let at = match dir {
            Dir::Segments => &paths.segments,
            Dir::Consumers => &paths.consumers,
            Dir::Groups => &paths.groups,
            Dir::Root | Dir::Any => &paths.root,
        }
        .to_string_lossy()
        .into_owned();
        let matcher = OpMatcher::kind(kind);
        let matcher = match (kind, dir) {
            (OpKind::SyncDir, Dir::Any) => matcher.path_contains(at),
            (OpKind::SyncDir, _) => matcher.path_ends_with(at),
            (_, Dir::Root) => matcher.path_ends_with(paths.obligation.to_string_lossy()),
            (_, _) => matcher.path_contains(format!("{at}/")),
        };
        self.sim.fail_when(matcher, fault, skip, 1);
    }

    /// Fails the `skip + 1`-th next `kind` call on the metadata file (a sync:
    /// of the data directory) with `fault`, so a commit can fail after its
    /// rename: a change in doubt.
    pub fn fail_metadata(&self, kind: OpKind, fault: Fault, skip: u32) {
        let matcher = match kind {
            OpKind::SyncDir => OpMatcher::kind(kind).path_ends_with(DATA_DIR),
            _ => OpMatcher::kind(kind).path_ends_with(format!("{DATA_DIR}/metadata.tmp")),
        };
        self.sim.fail_when(matcher, fault, skip, 1);
    }

    /// Crashes: the engine is gone, storage keeps what the crash keeps.
    pub fn crash(&mut self, crash: Crash) {
        // The pass in flight dies with the process.
        self.inflight = None;
        self.recreated.clear();
        self.engine = None;
        self.crash_tier();
        self.sim.crash(crash);
        self.oracle.crashed(!matches!(crash, Crash::Process));
    }

    /// Runs the reconciler until nothing is pending, at most `max_passes`
    /// passes: how many it took, or the partitions still pending.
    pub fn cleanup(&mut self, max_passes: u32) -> Result<u32, Vec<String>> {
        self.settle_inflight();
        let tier_idle = self.tier_until_idle(max_passes);
        let engine = self.engine().map_err(|e| vec![e])?;
        let passes = engine.reconcile_until_idle(max_passes);
        if !tier_idle {
            return Err(vec!["remote obligations".to_string()]);
        }
        let pending: Vec<String> = engine
            .reconciler()
            .pending()
            .keys()
            .map(|k| k.to_string())
            .collect();
        if pending.is_empty() {
            Ok(passes)
        } else {
            Err(pending)
        }
    }

    /// Runs the reconciler until nothing is pending (bounded); `Err` if it cannot finish.
    pub(crate) fn finish_cleanup(&mut self, max_passes: u32) -> Result<(), Violation> {
        if self.engine.is_none() {
            return Err(violation('f', "-", "engine is down".into()));
        }
        let done = self.cleanup(max_passes);
        if done.is_ok() {
            self.settle_remote();
        }
        done.map(|_| ()).map_err(|pending| {
            violation(
                'f',
                &pending.join(","),
                format!("obligations still pending after {max_passes} passes once faults stopped"),
            )
        })
    }

    /// The partitions the engine's metadata names (the oracle's live ones
    /// while the engine is down), in key order.
    pub(crate) fn live_partitions(&self) -> Vec<PartitionKey> {
        self.live_keys()
    }

    fn live_keys(&self) -> Vec<PartitionKey> {
        match &self.engine {
            Some(engine) => engine.metadata().partition_keys(),
            None => self.oracle.live_keys(),
        }
    }

    /// The last offset the engine's log of `partition` holds (in memory, no I/O).
    pub(crate) fn last_offset(&self, partition: PartitionKey) -> Option<u64> {
        self.engine
            .as_ref()?
            .partition(partition)?
            .log()
            .last_offset()
    }

    /// The engine's metadata, if it is up.
    pub(crate) fn metadata(&self) -> Option<&Metadata> {
        self.engine.as_ref().map(Engine::metadata)
    }

    /// `Err` while the engine refuses service because its metadata could not
    /// be made durable (see `Engine::commit`); every partition call first
    /// tries again to make it durable, this one too (on the first partition
    /// the metadata names: a deleted one is refused before that try). Any
    /// other answer means it serves.
    pub fn availability(&mut self) -> Result<(), EngineError> {
        let Some(k) = self.live_keys().first().copied() else {
            return Ok(());
        };
        match self.stored_offset_at(k, Consumer::consumer(OBSERVER)) {
            Err(e @ EngineError::Unavailable(_)) => Err(e),
            _ => Ok(()),
        }
    }
}

fn violation(property: char, partition: &str, detail: String) -> Violation {
    Violation {
        property,
        partition: partition.to_string(),
        detail,
    }
}
