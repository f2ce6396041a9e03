//! A simulated world: `SimStorage`, the production engine on it, a manual
//! clock, and the oracle of what was acknowledged (`crate::ack`'s model). Workloads drive it step by
//! step; crashes and recovery go through the same `Engine::open` the server uses.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sluice_server::clock::ManualClock;
use sluice_server::layout::PartitionPaths;
use sluice_server::metadata::{Durability, PartitionKey, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::purge::{LoadedObligation, PurgeState, decode_file};
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{Engine, EngineConfig, Identifier, Partitioning, PurgeMode};
use sluice_storage::sim::NodeView;
use sluice_storage::{Crash, DurableStorage, SimConfig, SimStorage, SyncFailureSemantics};

use crate::ack;
use crate::oracle::{Observed, Oracle, Violation};

pub const DATA_DIR: &str = "/data";
pub const STREAM: &str = "s";
pub const TOPIC: &str = "t";
/// Chance that a failed file sync evicts the pages it failed to write.
pub const EVICTION_PPM: u32 = 500_000;
/// The consumer id used to observe `Next` from the start (never stores).
const OBSERVER: u32 = 9_999;

/// One workload step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Send {
        partition: u32,
        payloads: Vec<String>,
    },
    Store {
        partition: u32,
        group: bool,
        id: u32,
        offset: u64,
    },
    Delete {
        partition: u32,
        group: bool,
        id: u32,
    },
    PurgePartition {
        partition: u32,
    },
    PurgeTopic,
    Reconcile,
}

/// The shape of a topic a workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub partitions: u32,
    pub messages: Durability,
    pub offsets: Durability,
    pub segment_size: u64,
}

#[derive(Debug)]
pub struct World {
    pub sim: SimStorage,
    pub engine: Option<Engine>,
    pub oracle: Oracle,
    pub shape: Shape,
    clock: Arc<ManualClock>,
    /// (is_group, id) pairs a workload has touched, per partition.
    consumers: BTreeMap<u32, Vec<(bool, u32)>>,
    seed: u64,
    purge_mode: PurgeMode,
    /// The first broken engine invariant seen (`Engine::check_invariants`,
    /// checked after every step and every recovery), until a check reports it.
    broken: Option<String>,
}

fn s() -> Identifier {
    Identifier::Name(STREAM.into())
}

fn t() -> Identifier {
    Identifier::Name(TOPIC.into())
}

pub fn key(partition: u32) -> PartitionKey {
    PartitionKey {
        stream: 0,
        topic: 0,
        partition,
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
        };
        world.open().map_err(|e| format!("initial open: {e}"))?;
        let engine = world.engine_mut()?;
        engine
            .create_stream(None, STREAM)
            .map_err(|e| e.to_string())?;
        let options = TopicOptions {
            durability: shape.messages,
            consumer_offset_durability: shape.offsets,
            segment_size: shape.segment_size,
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
        Ok(world)
    }

    fn engine_mut(&mut self) -> Result<&mut Engine, String> {
        self.engine
            .as_mut()
            .ok_or_else(|| "engine is down".to_string())
    }

    /// Opens the engine (recovery) on the current storage.
    pub fn open(&mut self) -> Result<(), String> {
        let storage: Arc<dyn DurableStorage> = Arc::new(self.sim.clone());
        // A restarted process's clock is later than anything written before.
        self.clock.advance(1_000_000);
        let mut config = EngineConfig::deterministic(DATA_DIR, self.seed);
        config.reconciler.seed = self.seed;
        config.purge_mode = self.purge_mode;
        let (engine, _) =
            Engine::open(storage, self.clock.clone(), config).map_err(|e| e.to_string())?;
        self.engine = Some(engine);
        self.note_invariants();
        Ok(())
    }

    /// Applies one step, recording what was acknowledged. Returns whether it succeeded.
    pub fn step(&mut self, step: &Step) -> bool {
        let ok = self.apply(step);
        self.note_invariants();
        ok
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

    /// A broken engine invariant as a violation of property (i), once.
    pub fn invariant_violations(&mut self) -> Vec<Violation> {
        self.broken
            .take()
            .map(|detail| violation('i', "-", detail))
            .into_iter()
            .collect()
    }

    fn apply(&mut self, step: &Step) -> bool {
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        match step {
            Step::Send {
                partition,
                payloads,
            } => {
                let batch = payloads
                    .iter()
                    .map(|p| NewMessage::new(p.as_bytes().to_vec()))
                    .collect();
                let sent = engine.send(&s(), &t(), &Partitioning::PartitionId(*partition), batch);
                let base = sent.as_ref().ok().map(|s| s.base_offset);
                self.oracle.sent(key(*partition), payloads, base);
                base.is_some()
            }
            Step::Store {
                partition,
                group,
                id,
                offset,
            } => {
                let c = if *group {
                    Consumer::group(*id)
                } else {
                    Consumer::consumer(*id)
                };
                let ok = engine
                    .store_offset(&s(), &t(), *partition, c, *offset)
                    .is_ok();
                self.oracle
                    .offset(key(*partition), *group, *id, Some(*offset), ok);
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
                let c = if *group {
                    Consumer::group(*id)
                } else {
                    Consumer::consumer(*id)
                };
                let result = engine.delete_offset(&s(), &t(), *partition, c);
                let ok = result.is_ok();
                self.oracle.offset(key(*partition), *group, *id, None, ok);
                ok
            }
            Step::PurgePartition { partition } => {
                let ok = engine.purge_partition(&s(), &t(), *partition).is_ok();
                self.oracle.purged(&[key(*partition)], ok);
                ok
            }
            Step::PurgeTopic => {
                let ok = engine.purge_topic(&s(), &t()).is_ok();
                let keys: Vec<PartitionKey> = (0..self.shape.partitions).map(key).collect();
                self.oracle.purged(&keys, ok);
                ok
            }
            Step::Reconcile => {
                engine.reconcile_at(u64::MAX);
                true
            }
        }
    }

    /// Crashes: the engine is gone, storage keeps what the crash keeps.
    pub fn crash(&mut self, crash: Crash) {
        self.engine = None;
        self.sim.crash(crash);
        self.oracle.crashed(!matches!(crash, Crash::Process));
    }

    /// Runs the reconciler until nothing is pending (bounded); `Err` if it cannot finish.
    pub fn finish_cleanup(&mut self, max_passes: u32) -> Result<(), Violation> {
        let engine = self
            .engine
            .as_mut()
            .ok_or_else(|| violation('f', "-", "engine is down".into()))?;
        engine.reconcile_until_idle(max_passes);
        let pending: Vec<String> = engine
            .reconciler()
            .pending()
            .keys()
            .map(|k| k.to_string())
            .collect();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(violation(
                'f',
                &pending.join(","),
                format!("obligations still pending after {max_passes} passes once faults stopped"),
            ))
        }
    }

    /// (d): if the disk says a purge is Applied, no file it had to remove is
    /// durable. Judged on the durable view alone: what the page cache shows
    /// under the same name does not matter, since a power loss now would bring
    /// back exactly the durable bytes (a dead record under a name the cache
    /// shows as current is ADR 0008's finding B, not a fresh write).
    pub fn check_applied_means_removed(&self) -> Vec<Violation> {
        let view = self.sim.durable_view();
        let mut out = Vec::new();
        for p in 0..self.shape.partitions {
            let paths = PartitionPaths::new(Path::new(DATA_DIR), key(p));
            let Some(NodeView::File(bytes)) = view.get(&*paths.obligation.to_string_lossy()) else {
                continue;
            };
            let LoadedObligation::Valid { obligation: ob, .. } = decode_file(bytes) else {
                continue;
            };
            if ob.state() != PurgeState::Applied {
                continue;
            }
            let dead = ack::dead_files(&view, Path::new(DATA_DIR), key(p), ob.generation());
            if !dead.is_empty() {
                out.push(violation(
                    'd',
                    &key(p).to_string(),
                    format!(
                        "obligation Applied for generation {} while {dead:?} are durable",
                        ob.generation()
                    ),
                ));
            }
        }
        out
    }

    /// The last offset the engine's log of `partition` holds (in memory, no I/O).
    pub fn last_offset(&self, partition: u32) -> Option<u64> {
        self.engine
            .as_ref()?
            .partition(key(partition))?
            .log()
            .last_offset()
    }

    /// What the engine serves now, per partition.
    pub fn observe(&mut self) -> Result<BTreeMap<PartitionKey, Observed>, Violation> {
        let partitions = self.shape.partitions;
        let consumers = self.consumers.clone();
        let engine = self
            .engine
            .as_mut()
            .ok_or_else(|| violation('f', "-", "engine is down".into()))?;
        let mut out = BTreeMap::new();
        for p in 0..partitions {
            let k = key(p);
            let generation = engine
                .partition(k)
                .map(|x| x.generation())
                .unwrap_or_default();
            let polled = engine
                .poll(
                    &s(),
                    &t(),
                    p,
                    Consumer::consumer(OBSERVER),
                    PollingStrategy::Next,
                    100_000,
                    false,
                )
                .map_err(|e| {
                    violation(
                        'f',
                        &k.to_string(),
                        format!("poll failed after recovery: {e}"),
                    )
                })?;
            let history = polled
                .messages
                .into_iter()
                .map(|m| (m.offset, String::from_utf8_lossy(&m.payload).into_owned()))
                .collect();
            let mut offsets = BTreeMap::new();
            let mut next = BTreeMap::new();
            for &(group, id) in consumers.get(&p).map(Vec::as_slice).unwrap_or_default() {
                let c = if group {
                    Consumer::group(id)
                } else {
                    Consumer::consumer(id)
                };
                let got = engine.get_offset(&s(), &t(), p, c).map_err(|e| {
                    violation('f', &k.to_string(), format!("offset lookup failed: {e}"))
                })?;
                let stored = got.map(|(_, o)| o);
                offsets.insert((group, id), stored);
                if stored.is_some() && !next.contains_key(&(group, id)) {
                    let polled = engine
                        .poll(&s(), &t(), p, c, PollingStrategy::Next, 100_000, false)
                        .map_err(|e| {
                            violation('f', &k.to_string(), format!("Next poll failed: {e}"))
                        })?;
                    next.insert(
                        (group, id),
                        polled.messages.iter().map(|m| m.offset).collect(),
                    );
                }
            }
            out.insert(
                k,
                Observed {
                    generation,
                    history,
                    offsets,
                    next,
                },
            );
        }
        Ok(out)
    }

    /// Observes and checks every partition against the oracle; then the
    /// observed state becomes the baseline for the next window.
    pub fn check(&mut self) -> Vec<Violation> {
        let mut out = self.invariant_violations();
        // While storage keeps failing, the engine may refuse service (its
        // metadata is in doubt): that is the correct answer, not a violation.
        // The final check runs after faults stop, when it must serve again.
        if self.unavailable() {
            return out;
        }
        let seen = match self.observe() {
            Ok(s) => s,
            Err(v) => {
                out.push(v);
                return out;
            }
        };
        for (k, o) in &seen {
            out.extend(self.oracle.check(*k, o));
            self.oracle.settle(*k, o);
        }
        out
    }
}

impl World {
    /// Whether the engine currently refuses service because its metadata could
    /// not be made durable (see `Engine::commit`).
    fn unavailable(&mut self) -> bool {
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        matches!(
            engine.get_offset(&s(), &t(), 1, Consumer::consumer(OBSERVER)),
            Err(sluice_server::EngineError::Unavailable(_))
        )
    }
}

fn violation(property: char, partition: &str, detail: String) -> Violation {
    Violation {
        property,
        partition: partition.to_string(),
        detail,
    }
}
