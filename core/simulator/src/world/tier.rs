//! The world's second door: a `SimRemote` the engine tiers the world's topic
//! to (issue 31, docs/adr/0029-simulating-tiering.md), and the oracle's
//! tiering property (k).
//!
//! Invariants:
//! - **One crash point for both doors.** The engine reaches the store only
//!   through [`LinkedRemote`], which checks the shared [`Halts`] around every
//!   call: once the storage passed its halt point (the process died right
//!   after that operation) the remote is halted before the call
//!   (`SimRemote::halt_now`), and once the remote passed its own halt point
//!   the storage is halted right after the call. A world crash crashes both
//!   (`SimStorage::crash`, `SimRemote::crash`): objects and late puts in
//!   flight outlive the process, as the store outlives it (ADR 0026 §3).
//! - The remote is created from the world's seed and attached on every open
//!   (after each crash), with the world's topic tiered, local copies released
//!   as soon as their upload is recorded, and small read blocks.
//! - A tiering pass is three half steps, as the server runs it: the plan
//!   under the engine, the remote calls without it, the finish under it
//!   again. A crash, a purge or a send may land between any two.
//! - (k), judged on the store itself (`SimRemote::objects`), never on what
//!   the engine says of it: every object the tiering state reads exists;
//!   and whenever a partition owes no deletion round, no object of a dead
//!   generation (below the committed one) of that partition exists, except
//!   one a late put landed after a listing of it that could not have seen
//!   it (the orphan sweep's, ADR 0026 §3), and such a leftover is never an
//!   object the tiering state reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_remote::{
    Halts, LinkedRemote, RemoteFault, RemoteFaultPlan, RemoteOp, RemoteTraceEntry, SimRemote,
};
use sluice_server::Engine;
use sluice_server::engine::{LocalRetention, TierPlan, TierReport, TieredTopic, TieringConfig};
use sluice_server::metadata::PartitionKey;
use sluice_server::partition::tiering::{ObjectKind, PartitionPlace, TierKeys};

use super::{STREAM, TOPIC, World, violation};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
use crate::oracle::Violation;

/// The world's prefix in the store.
pub const TIER_INSTANCE: &str = "sim";

/// Local copies leave as soon as their upload is recorded.
const RELEASE_AT_ONCE: LocalRetention = LocalRetention {
    max_bytes: 0,
    max_age_us: 0,
};

/// The remote door of a tiered world.
#[derive(Debug)]
pub(crate) struct TierDoor {
    pub(crate) remote: SimRemote,
    keys: TierKeys,
    /// The tiering pass in flight (planned; `ran`: its remote calls made).
    plan: Option<TierPlan>,
    ran: bool,
    /// Dead-generation objects a late put left after the listing that
    /// proved the generation empty (the orphan sweep's), seen so far.
    pub(crate) orphans: BTreeSet<String>,
}

impl TierDoor {
    pub(crate) fn new(remote: SimRemote) -> Result<TierDoor, String> {
        Ok(TierDoor {
            remote,
            keys: TierKeys::new(TIER_INSTANCE).map_err(|e| e.to_string())?,
            plan: None,
            ran: false,
            orphans: BTreeSet::new(),
        })
    }

    pub(crate) fn fork(&self) -> TierDoor {
        TierDoor {
            remote: self.remote.fork(),
            keys: self.keys.clone(),
            plan: None,
            ran: false,
            orphans: self.orphans.clone(),
        }
    }

    /// The process died: its pass in flight with it.
    pub(crate) fn crashed(&mut self) {
        self.plan = None;
        self.ran = false;
        self.remote.crash();
    }
}

/// A remote fault's name in a case (`none`, `before`, `after`,
/// `after-retried`, `late+N`).
pub fn remote_fault_name(f: Option<RemoteFault>) -> String {
    f.map_or_else(|| "none".to_string(), |f| f.to_string())
}

/// Parses [`remote_fault_name`]'s form.
pub fn parse_remote_fault(s: &str) -> Result<Option<RemoteFault>, String> {
    Ok(Some(match s {
        "none" => return Ok(None),
        "before" => RemoteFault::Before,
        "after" => RemoteFault::After,
        "after-retried" => RemoteFault::AfterRetried,
        other => match other.strip_prefix("late+").map(str::parse::<u32>) {
            Some(Ok(delay)) => RemoteFault::Late { delay },
            _ => return Err(format!("unknown remote fault '{other}'")),
        },
    }))
}

/// Whether the object `key` was put by a late put that landed after the
/// last listing of its generation's prefix (a round's): no listing could
/// have seen it, so a round may apply over it (the orphan sweep's). A late
/// put that landed before such a listing was there to be found.
fn landed_after_a_listing(trace: &[RemoteTraceEntry], key: &str) -> bool {
    let late_puts = trace.iter().filter(|e| {
        e.op == RemoteOp::Put && e.key == key && matches!(e.fault, Some(RemoteFault::Late { .. }))
    });
    late_puts.into_iter().any(|put| {
        let landed = trace
            .iter()
            .find(|e| e.landed.iter().any(|l| l.origin == put.index && l.applied))
            .map_or(u64::MAX, |e| e.index);
        !trace.iter().any(|e| {
            e.op == RemoteOp::List
                && e.index >= landed
                && e.error.is_none()
                && e.key.contains("/g=")
                && key.starts_with(&format!("{}/", e.key))
        })
    })
}

impl World {
    /// Tiers the world's topic to a `SimRemote` created from the world's
    /// seed (its fault plan, if any, set by the caller), from now on and
    /// after every restart.
    pub fn enable_tiering(&mut self) -> Result<(), String> {
        let door = TierDoor::new(SimRemote::default())?;
        self.tier = Some(door);
        self.attach_tier()
    }

    /// The world's store, if tiered.
    pub fn remote(&self) -> Option<&SimRemote> {
        self.tier.as_ref().map(|t| &t.remote)
    }

    /// Sets the remote's seeded fault plan (a tiered world only).
    pub fn set_remote_fault_plan(&self, plan: Option<RemoteFaultPlan>) {
        if let Some(t) = &self.tier {
            t.remote.set_fault_plan(plan);
        }
    }

    /// Attaches the store to the open engine.
    pub(super) fn attach_tier(&mut self) -> Result<(), String> {
        let Some(door) = &self.tier else {
            return Ok(());
        };
        let linked = LinkedRemote::new(&door.remote, &self.sim, self.halts.clone());
        let mut config = TieringConfig::new(TIER_INSTANCE);
        config.block_bytes = 256;
        config.cache_bytes = 4 << 10;
        config.topics.push(TieredTopic {
            stream: STREAM.to_string(),
            topic: TOPIC.to_string(),
            local: RELEASE_AT_ONCE,
        });
        let Some(engine) = self.engine.as_mut() else {
            return Ok(());
        };
        engine
            .attach_tier(Arc::new(linked), config)
            .map_err(|e| e.to_string())
    }

    /// The storage's process dies right after operation `index` (`None`:
    /// never), and the remote's with it.
    pub fn halt_storage_after(&self, index: Option<u64>) {
        lock(&self.halts).storage = index;
        self.sim.halt_after(index);
    }

    /// The remote's process dies right after call `index`, and the
    /// storage's with it.
    pub fn halt_remote_after(&self, index: Option<u64>) {
        lock(&self.halts).remote = index;
        if let Some(t) = &self.tier {
            t.remote.halt_after(index);
        }
    }

    /// A crash of the process: both halts lifted, the pass in flight gone.
    pub(super) fn crash_tier(&mut self) {
        *lock(&self.halts) = Halts::default();
        if let Some(t) = self.tier.as_mut() {
            t.crashed();
        }
    }

    /// Plans a tiering pass (the one in flight is finished first).
    pub(super) fn tier_plan(&mut self) {
        self.tier_finish();
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        let plan = engine.plan_tiering();
        if let Some(t) = self.tier.as_mut() {
            t.plan = Some(plan);
            t.ran = false;
        }
    }

    /// The pass in flight makes its remote calls (no engine).
    pub(super) fn tier_run(&mut self) {
        if let Some(t) = self.tier.as_mut()
            && !t.ran
            && let Some(plan) = t.plan.as_mut()
        {
            plan.run();
            t.ran = true;
        }
    }

    /// The pass in flight is finished under the engine (run first if not yet).
    pub(super) fn tier_finish(&mut self) -> Option<TierReport> {
        self.tier_run();
        let plan = self.tier.as_mut()?.plan.take()?;
        Some(self.engine.as_mut()?.finish_tiering(plan))
    }

    /// Tiering and reconciler passes until neither owes anything (at most
    /// `max` rounds): `false` if remote work is still owed.
    pub(super) fn tier_until_idle(&mut self, max: u32) -> bool {
        if self.tier.is_none() {
            return true;
        }
        self.tier_finish();
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        engine.tier_until_idle(max)
    }

    /// The first offset a tiered partition promises to serve: its remote
    /// low mark, which only expiry raises (a release of local copies keeps
    /// serving them from the store). `None` for a partition not tiered.
    pub(super) fn tier_mark(engine: &Engine, k: PartitionKey) -> Option<u64> {
        engine.partition(k)?.tiering().map(|t| t.remote_low())
    }

    /// An upload's plan makes its sealed segment durable first (a file
    /// sync a `buffered` topic otherwise only makes on a flush): if that
    /// sync failed, Linux may have evicted the pages it could not write, and
    /// the engine cuts what it finds gone, as after a failed flush. The
    /// oracle is told, as for a flush (`Oracle::writeback_failed`).
    pub(super) fn note_failed_segment_syncs(&mut self, from: u64) {
        let failed = self
            .sim
            .trace()
            .iter()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .any(|e| {
                e.kind == sluice_storage::OpKind::SyncFile
                    && e.error.is_some()
                    && e.path.contains("/segments/")
            });
        if failed {
            self.oracle.writeback_failed();
        }
    }

    /// Tiered partitions whose tiering record may differ from memory (an
    /// upload intended, or a change not yet written).
    pub(super) fn tier_unrecorded(&self) -> BTreeSet<PartitionKey> {
        self.engine.as_ref().map_or_else(BTreeSet::new, |e| {
            e.remote_obligations()
                .into_iter()
                .filter(|o| o.kind == "remote_upload")
                .map(|o| o.key)
                .collect()
        })
    }

    /// Lands every late effect in flight (the network drained): the next
    /// check of (k) then judges what late puts left (orphans no record
    /// reads, or a dead generation's objects a round should have found).
    pub(crate) fn settle_remote(&mut self) {
        if let Some(t) = &self.tier {
            t.remote.settle();
        }
    }

    /// (k) on the store (see the module docs).
    pub(crate) fn check_remote(&mut self) -> Vec<Violation> {
        let (Some(door), Some(engine)) = (self.tier.as_mut(), self.engine.as_ref()) else {
            return Vec::new();
        };
        let objects = door.remote.objects();
        let trace = door.remote.trace();
        let owed: BTreeSet<PartitionKey> = engine
            .remote_obligations()
            .into_iter()
            .filter(|o| o.kind == "remote_deletion")
            .map(|o| o.key)
            .collect();
        let mut out = Vec::new();
        for k in engine.metadata().partition_keys() {
            let Some(p) = engine.partition(k) else {
                continue;
            };
            let Some(t) = p.tiering() else {
                continue;
            };
            if p.degraded_reason().is_some() {
                continue;
            }
            let place = PartitionPlace {
                stream: k.stream,
                topic: k.topic,
                partition: k.partition,
                incarnation: t.incarnation(),
            };
            let read: BTreeMap<String, u64> = t
                .segments()
                .flat_map(|s| {
                    [ObjectKind::Log, ObjectKind::Index].map(|kind| {
                        (
                            door.keys
                                .object(place, s.attempt_in(t.generation()), kind)
                                .as_str()
                                .to_string(),
                            s.base,
                        )
                    })
                })
                .collect();
            let missing: Vec<&String> = read
                .keys()
                .filter(|key| !objects.keys().any(|o| o.as_str() == key.as_str()))
                .collect();
            if !missing.is_empty() {
                out.push(violation(
                    'k',
                    &k.to_string(),
                    format!(
                        "the tiering state reads {} objects the store does not hold: {missing:?}",
                        missing.len()
                    ),
                ));
            }
            if owed.contains(&k) {
                continue;
            }
            let committed = p.generation();
            let mut dead = Vec::new();
            for key in objects.keys() {
                let Some((at, attempt, _)) = door.keys.parse(key) else {
                    continue;
                };
                if at != place || attempt.generation >= committed {
                    continue;
                }
                if landed_after_a_listing(&trace, key.as_str()) {
                    door.orphans.insert(key.as_str().to_string());
                    if read.contains_key(key.as_str()) {
                        dead.push(format!("{key} (read by the tiering state)"));
                    }
                } else {
                    dead.push(key.as_str().to_string());
                }
            }
            if !dead.is_empty() {
                out.push(violation(
                    'k',
                    &k.to_string(),
                    format!(
                        "no remote deletion owed (generation {committed}) while {} objects of a dead generation are in the store: {:?}",
                        dead.len(),
                        dead.iter().take(3).collect::<Vec<_>>()
                    ),
                ));
            }
        }
        out
    }
}
