//! `sluice sim run`: a random workload driven by one seed, with faults and
//! crashes, checked by the oracle after every step.
//!
//! Invariants:
//! - The run is a pure function of `(seed, steps, rates)`: every choice comes
//!   from one `SimRng`, the storage faults from a plan seeded by the same seed,
//!   and the trace hash printed at the end is the proof.
//! - Faults stop before the final check: the reconciler must then bring every
//!   obligation to `Applied` within a bounded number of passes.
//! - A tiered run (`run_tiered`, `sluice sim run --tiered`) tiers topic 0 to
//!   a `SimRemote` whose faults a plan seeded by the same seed draws (every
//!   mode, late effects included), and draws its tiering steps and its
//!   mid-pass crashes (a halt on either door, the other halted with it) only
//!   where an untiered run draws nothing: an untiered seed's schedule, and
//!   so its trace hash, is the same with or without this mode existing.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sluice_remote::RemoteFaultPlan;
use sluice_server::metadata::{Durability, PartitionKey, ResourceKey};
use sluice_server::partition::purge::CleanupPhase;
use sluice_storage::sim::SimRng;
use sluice_storage::{
    Crash, Fault, FaultMode, FaultPlan, InjectedError, OpKind, SyncFailureSemantics,
};

use crate::oracle::Violation;
use crate::world::{Shape, Step, World, key};

/// Fault rates of a run, in parts per million per operation of that kind.
/// Every injected fault's mode (before, after or torn) is drawn per fault,
/// so one schedule mixes all three on every operation kind.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    /// File and directory syncs.
    pub sync_ppm: u32,
    /// Positioned writes and appends.
    pub write_ppm: u32,
    /// Unlinks.
    pub unlink_ppm: u32,
    /// Truncates.
    pub truncate_ppm: u32,
    /// Renames.
    pub rename_ppm: u32,
    /// Opens (including creating ones).
    pub open_ppm: u32,
    /// Chance per step of a crash, in parts per million.
    pub crash_ppm: u32,
    /// Chance per step (that is not a crash) of a catalog step: deleting or
    /// creating again a topic, a stream, a group or a partition. 0 leaves the
    /// catalog alone (and creates no second topic or stream): the schedule
    /// the purge's teeth seeds were found on.
    pub catalog_ppm: u32,
    /// Chance per step (that is neither a crash nor a catalog step) of a
    /// retention step: setting topic 0's `message_expiry` and
    /// `max_topic_size` (each drawn, 0 among them), or the simulated clock
    /// advancing (retention by age falls due; the reconciler steps enforce
    /// it). 0 draws nothing for it: the schedules from before retention.
    pub retention_ppm: u32,
    /// Chance that a drawn send is a combined one (`Step::Sends`: 2 to 4
    /// batches to live partitions, the drawn one first, repeats allowed),
    /// as the server combines sends that queued for the engine lock (ADR
    /// 0030). 0 draws nothing for it: the schedules from before.
    pub combined_ppm: u32,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            sync_ppm: 20_000,
            write_ppm: 5_000,
            unlink_ppm: 20_000,
            truncate_ppm: 20_000,
            rename_ppm: 10_000,
            open_ppm: 3_000,
            crash_ppm: 60_000,
            catalog_ppm: 80_000,
            retention_ppm: 60_000,
            combined_ppm: 200_000,
        }
    }
}

impl Rates {
    /// The seeded plan of a run: every mutating operation kind (and open), each
    /// fault's mode drawn from before, after and torn.
    fn plan(&self, seed: u64) -> FaultPlan {
        FaultPlan {
            seed,
            rates_ppm: vec![
                (OpKind::SyncDir, self.sync_ppm),
                (OpKind::SyncFile, self.sync_ppm),
                (OpKind::Write, self.write_ppm),
                (OpKind::Append, self.write_ppm),
                (OpKind::RemoveFile, self.unlink_ppm),
                (OpKind::Truncate, self.truncate_ppm),
                (OpKind::Rename, self.rename_ppm),
                (OpKind::Open, self.open_ppm),
            ],
            fault: Fault {
                mode: FaultMode::Before,
                error: InjectedError::Io,
            },
            modes: FaultMode::ALL.to_vec(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub steps: u32,
    /// The messages' durability policy.
    pub policy: String,
    /// The consumer offsets' durability policy.
    pub offsets_policy: String,
    pub semantics: String,
    pub trace_hash: String,
    pub operations: u64,
    pub crashes: u64,
    pub violations: Vec<(u32, Violation)>,
}

const PARTITIONS: u32 = 2;
const CLEANUP_PASSES: u32 = 20;

/// Runs one seed.
pub fn run(seed: u64, steps: u32, rates: Rates) -> Result<RunReport, String> {
    run_bounded(seed, steps, rates, None)
}

/// Runs one seed with the engine's files through a pool of at most
/// `max_open_files` descriptors (ADR 0018; `None`: unbounded, as `run`).
/// The schedule draws the same choices; the trace differs by the pool's
/// reopens and eviction syncs.
pub fn run_bounded(
    seed: u64,
    steps: u32,
    rates: Rates,
    max_open_files: Option<usize>,
) -> Result<RunReport, String> {
    run_with(seed, steps, rates, max_open_files, false)
}

/// Remote faults per call of a tiered run (ppm, every kind and mode).
pub const REMOTE_FAULT_PPM: u32 = 30_000;

/// Runs one seed on a tiered topic 0 (see the module docs).
pub fn run_tiered(seed: u64, steps: u32, rates: Rates) -> Result<RunReport, String> {
    run_with(seed, steps, rates, None, true)
}

/// Runs one seed, tiered or not, with or without a file pool.
pub fn run_with(
    seed: u64,
    steps: u32,
    rates: Rates,
    max_open_files: Option<usize>,
    tiered: bool,
) -> Result<RunReport, String> {
    let mut rng = SimRng::new(seed);
    let policy = if rng.coin() {
        Durability::Persisted
    } else {
        Durability::Buffered
    };
    // Offsets get their own policy: buffered messages with persisted offsets
    // is where a stored offset can outlive the messages it points past.
    let offsets_policy = if rng.coin() {
        Durability::Persisted
    } else {
        Durability::Buffered
    };
    let semantics = if rng.coin() {
        SyncFailureSemantics::Linux
    } else {
        SyncFailureSemantics::Forgiving
    };
    let shape = Shape {
        partitions: PARTITIONS,
        messages: policy,
        offsets: offsets_policy,
        segment_size: 512,
        max_open_files,
    };
    let mut world = World::new(semantics, shape, seed)?;
    if tiered {
        world.enable_tiering()?;
    }
    // A second topic and a second stream, for the catalog steps to delete
    // and create again (topic 0 of stream 0 stays: the purges' target).
    if rates.catalog_ppm > 0 {
        for r in [TOPIC_1, STREAM_1, S1_TOPIC_0] {
            if !world.step(&Step::Create(r)) {
                return Err(format!("creating {r} failed before any fault"));
            }
        }
    }
    world.sim.set_fault_plan(Some(rates.plan(seed)));
    // The remote's faults: a plan of its own stream, seeded by the seed.
    world.set_remote_fault_plan(Some(RemoteFaultPlan::everything(
        seed ^ 0x7e4e_0000_0000_0031,
        REMOTE_FAULT_PPM,
    )));
    let mut report = RunReport {
        seed,
        steps,
        policy: policy.as_str().into(),
        offsets_policy: offsets_policy.as_str().into(),
        semantics: semantics.as_str().into(),
        trace_hash: String::new(),
        operations: 0,
        crashes: 0,
        violations: Vec::new(),
    };
    let mut sent = 0u64;
    let mut generation_tag = 0u64;
    let mut values = OffsetValues::default();
    let mut shown = 0u64;
    let mut aftermath: Option<Aftermath> = None;
    for n in 0..steps {
        // After a re-creation that crossed a pass in flight, most steps are
        // the chain that makes the old incarnation's waits meet the new
        // one's names (drawn only inside such a window, so every other
        // step draws as before).
        let crossing = aftermath.as_mut().and_then(|a| a.next(&mut rng));
        if aftermath.as_ref().is_some_and(Aftermath::done) {
            aftermath = None;
        }
        let power_cut = matches!(crossing, Some(Crossing::PowerLoss));
        if power_cut || (crossing.is_none() && rng.chance_ppm(rates.crash_ppm)) {
            let crash = match if power_cut { 1 } else { rng.below(3) } {
                0 => Crash::Process,
                1 => Crash::PowerLoss,
                _ => Crash::PowerLossPartial {
                    seed: rng.next_u64(),
                },
            };
            if verbose() {
                eprintln!("step {n}: crash {crash}");
            }
            if tiered {
                // The process dies in the middle of a tiering pass, on the
                // door the draw picks: the other halts with it.
                let at = rng.below(12);
                let door = if rng.coin() { "remote" } else { "storage" };
                match (door, world.remote().map(|r| r.op_count())) {
                    ("remote", Some(calls)) => world.halt_remote_after(Some(calls + at)),
                    _ => world.halt_storage_after(Some(world.sim.op_count() + 2 * at)),
                }
                if verbose() {
                    eprintln!("step {n}: a tiering pass halted on the {door} door");
                }
                world.step(&Step::TierPass);
            }
            world.crash(crash);
            if let Err(e) = world.open() {
                // Recovery itself hit an injected fault: try again, as an
                // operator's restart would.
                tracing::debug!(error = %e, "recovery failed under faults; retrying");
                world.crash(Crash::Process);
                if world.open().is_err() {
                    world.sim.set_fault_plan(None);
                    world.crash(Crash::Process);
                    world
                        .open()
                        .map_err(|e| format!("recovery failed without faults: {e}"))?;
                }
            }
            report.crashes += 1;
        } else {
            let live = world.live_partitions();
            let Some(&partition) = live.get(rng.below(live.len().max(1) as u64) as usize) else {
                return Err("no partition is live: topic 0 is never deleted".into());
            };
            // Only topic 0 has a group (group 0, deleted and created again
            // by catalog steps); consumers 1 and 2 anywhere.
            let group_topic = partition.stream == 0 && partition.topic == 0;
            let catalog = rates.catalog_ppm > 0 && rng.chance_ppm(rates.catalog_ppm);
            // Drawn only when on, so `retention_ppm: 0` keeps the earlier
            // schedules draw for draw.
            let retention =
                !catalog && rates.retention_ppm > 0 && rng.chance_ppm(rates.retention_ppm);
            let pick = if crossing.is_some() {
                12
            } else if catalog {
                10
            } else if retention {
                11
            } else {
                rng.below(10)
            };
            let step = match pick {
                0..=3 if rates.combined_ppm > 0 && rng.chance_ppm(rates.combined_ppm) => {
                    let batches = 2 + rng.below(3);
                    let sends = (0..batches)
                        .map(|b| {
                            let to = match b {
                                0 => partition,
                                _ => live[rng.below(live.len() as u64) as usize],
                            };
                            sent += 1;
                            let count = 1 + rng.below(3) as usize;
                            let payloads = (0..count)
                                .map(|i| format!("g{generation_tag}-s{sent}-{i}"))
                                .collect();
                            (to, payloads)
                        })
                        .collect();
                    Step::Sends(sends)
                }
                0..=3 => {
                    sent += 1;
                    let count = 1 + rng.below(3) as usize;
                    Step::Send {
                        partition,
                        payloads: (0..count)
                            .map(|i| format!("g{generation_tag}-s{sent}-{i}"))
                            .collect(),
                    }
                }
                4 | 5 => {
                    let group = rng.coin() && group_topic;
                    let id = if group { 0 } else { 1 + rng.below(2) as u32 };
                    let last = world.last_offset(partition);
                    match values.draw(&mut rng, partition, last) {
                        Some(offset) => Step::Store {
                            partition,
                            group,
                            id,
                            offset,
                        },
                        // Every served offset was a value of a recent generation:
                        // grow the log instead.
                        None => {
                            sent += 1;
                            Step::Send {
                                partition,
                                payloads: vec![format!("g{generation_tag}-s{sent}-0")],
                            }
                        }
                    }
                }
                6 => {
                    let group = rng.coin() && group_topic;
                    Step::Delete {
                        partition,
                        group,
                        id: if group { 0 } else { 1 + rng.below(2) as u32 },
                    }
                }
                7 => {
                    generation_tag += 1;
                    values.purged(partition);
                    Step::PurgePartition { partition }
                }
                8 => {
                    generation_tag += 1;
                    // Every partition of the topic (partitions 0 and 1; an
                    // off-by-one retired 1 and 2 until session 6).
                    for p in 0..PARTITIONS {
                        values.purged(key(p));
                    }
                    Step::PurgeTopic
                }
                // A periodic pass, or the next step of the one in flight.
                // (A tiered run draws once more: half of these steps tier.)
                9 if tiered && rng.coin() => match rng.below(6) {
                    0..3 => Step::TierPass,
                    3 => Step::TierPlan,
                    4 => Step::TierRun,
                    _ => Step::TierFinish,
                },
                9 => match rng.below(8) {
                    0..3 => Step::Reconcile,
                    3..6 => Step::CleanupTurn,
                    _ => Step::Flush,
                },
                11 => retention_step(&mut rng),
                12 => match crossing {
                    Some(Crossing::Send(partition)) => {
                        sent += 1;
                        Step::Send {
                            partition,
                            payloads: vec![format!("g{generation_tag}-s{sent}-0")],
                        }
                    }
                    Some(Crossing::Turn) => Step::CleanupTurn,
                    // (A power loss is taken above, as a crash.)
                    _ => Step::Flush,
                },
                _ => {
                    let step = catalog_step(&mut rng, &world);
                    if let Step::Remove(r) | Step::Recreate(r) = &step {
                        // A re-created partition must not take values its
                        // deleted incarnation used: a resurrected offset
                        // would then pass for a new one.
                        generation_tag += 1;
                        for k in world.live_partitions() {
                            if r.covers(ResourceKey::Partition(k)) {
                                values.purged(k);
                            }
                        }
                    }
                    step
                }
            };
            // The partitions whose old incarnation's directory syncs wait.
            let crossed: Vec<PartitionKey> = match step {
                Step::Recreate(r) => world
                    .cleaning()
                    .into_iter()
                    .filter(|(k, phase)| {
                        *phase == Some(CleanupPhase::DirSyncs)
                            && r.covers(ResourceKey::Partition(*k))
                    })
                    .map(|(k, _)| k)
                    .collect(),
                _ => Vec::new(),
            };
            let ok = world.step(&step);
            if let Step::Recreate(_) = step {
                aftermath = Aftermath::after(crossed, ok, policy, &world);
                if verbose() && aftermath.is_some() {
                    eprintln!("step {n}: a re-creation crossed a pass waiting on directory syncs");
                }
            }
            if verbose() {
                eprintln!("step {n}: {step:?} -> {}", if ok { "ok" } else { "failed" });
            }
        }
        if let Some(filter) = traced() {
            let trace = world.sim.trace();
            for e in trace
                .iter()
                .skip(usize::try_from(shown).unwrap_or(usize::MAX))
            {
                if e.path.contains(&filter)
                    || e.target.as_deref().is_some_and(|t| t.contains(&filter))
                {
                    eprintln!("    {e}");
                }
            }
            shown = trace.len() as u64;
        }
        for v in world.check_both_doors().into_iter().chain(world.check()) {
            report.violations.push((n, v));
        }
    }
    // Faults stop; cleanup must finish.
    world.sim.set_fault_plan(None);
    world.sim.clear_faults();
    if let Some(remote) = world.remote() {
        remote.clear_faults();
    }
    if let Err(v) = world.finish_cleanup(CLEANUP_PASSES) {
        report.violations.push((steps, v));
    }
    for v in world.check_both_doors().into_iter().chain(world.check()) {
        report.violations.push((steps, v));
    }
    report.trace_hash = format!("{:016x}", world.sim.trace_hash());
    if let Some(remote) = world.remote() {
        // A tiered run's remote calls are part of its schedule.
        report.trace_hash = format!("{}-{:016x}", report.trace_hash, remote.trace_hash());
    }
    report.operations = world.sim.op_count();
    Ok(report)
}

/// Expiries a retention step draws for topic 0 (µs; 0: never): a few
/// seconds, so clock advances expire sealed segments within a run, while a
/// restart's clock step (1 s) alone rarely does.
const EXPIRIES: [u64; 4] = [0, 2_000_000, 5_000_000, 30_000_000];
/// Size caps a retention step draws for topic 0 (bytes; 0: none): a few of
/// its 512-byte segments.
const CAPS: [u64; 4] = [0, 1, 1_500, 4_000];

/// A retention step: a third of them set topic 0's retention, the rest let
/// 0.5 to 4 s pass on the simulated clock.
fn retention_step(rng: &mut SimRng) -> Step {
    if rng.below(3) == 0 {
        Step::SetRetention {
            stream: 0,
            topic: 0,
            message_expiry: EXPIRIES[rng.below(EXPIRIES.len() as u64) as usize],
            max_topic_size: CAPS[rng.below(CAPS.len() as u64) as usize],
        }
    } else {
        Step::Advance {
            micros: 500_000 * (1 + rng.below(8)),
        }
    }
}

/// Offset values a run stores, kept apart between generations (and between
/// incarnations of a deleted and re-created partition): a value used in one of
/// a partition's last `KEPT` generations (the current one excluded) is never
/// drawn again, so an old offset that comes back differs from every value the
/// oracle accepts for the current generation. Values must be served offsets
/// (`store_offset` refuses others) and a generation's log is short, so older
/// generations' values are released again: a resurrection from further back
/// could pass unseen if it matched, which the explorer's workloads (fully
/// unique values) cover instead.
#[derive(Default)]
struct OffsetValues {
    /// Per partition: values of the current generation, then of the
    /// previous ones, newest first.
    generations: BTreeMap<PartitionKey, Vec<BTreeSet<u64>>>,
}

const KEPT: usize = 3;

impl OffsetValues {
    fn of(&mut self, partition: PartitionKey) -> &mut Vec<BTreeSet<u64>> {
        self.generations
            .entry(partition)
            .or_insert_with(|| vec![BTreeSet::new()])
    }

    /// A value in `0..=last` that no earlier kept generation of `partition`
    /// used (preferring none in particular), or `None` if there is none.
    fn draw(
        &mut self,
        rng: &mut SimRng,
        partition: PartitionKey,
        last: Option<u64>,
    ) -> Option<u64> {
        let last = last?;
        let gens = self.of(partition);
        let taken: BTreeSet<u64> = gens.iter().skip(1).flatten().copied().collect();
        let free: Vec<u64> = (0..=last.min(4_096))
            .filter(|v| !taken.contains(v))
            .collect();
        if free.is_empty() {
            return None;
        }
        let v = free[rng.below(free.len() as u64) as usize];
        gens[0].insert(v);
        Some(v)
    }

    /// A purge or deletion of `partition` was attempted: its current values
    /// become a past generation's (even if the call failed: it may have
    /// landed).
    fn purged(&mut self, partition: PartitionKey) {
        let gens = self.of(partition);
        gens.insert(0, BTreeSet::new());
        gens.truncate(KEPT + 1);
    }
}

const TOPIC_1: ResourceKey = ResourceKey::Topic {
    stream: 0,
    topic: 1,
};
const STREAM_1: ResourceKey = ResourceKey::Stream { stream: 1 };
const S1_TOPIC_0: ResourceKey = ResourceKey::Topic {
    stream: 1,
    topic: 0,
};
const GROUP_0: ResourceKey = ResourceKey::Group {
    stream: 0,
    topic: 0,
    group: 0,
};

/// A catalog step: one of four resources is deleted if the engine's
/// metadata names it, created (again, under the same id) if not. Topic 1 of
/// stream 0; stream 1 with its topic (created in two steps); group 0 of
/// topic 0; the last partition of topic 1 (a topic of one partition gets its
/// second one back).
fn catalog_step(rng: &mut SimRng, world: &World) -> Step {
    let Some(meta) = world.metadata() else {
        return Step::Reconcile;
    };
    let topic = |s: u32, t: u32| meta.streams.get(&s).and_then(|x| x.topics.get(&t));
    let toggle = |live: bool, r: ResourceKey| {
        if live {
            Step::Remove(r)
        } else {
            Step::Create(r)
        }
    };
    match rng.below(5) {
        4 => recreate_step(rng, world),
        0 => toggle(topic(0, 1).is_some(), TOPIC_1),
        1 => match (meta.streams.contains_key(&1), topic(1, 0).is_some()) {
            (false, _) => Step::Create(STREAM_1),
            (true, false) => Step::Create(S1_TOPIC_0),
            (true, true) => Step::Remove(STREAM_1),
        },
        2 => toggle(
            topic(0, 0).is_some_and(|t| t.groups.contains_key(&0)),
            GROUP_0,
        ),
        _ => match topic(0, 1) {
            None => Step::Create(TOPIC_1),
            Some(t) => {
                // The engine deletes the last partitions and creates after
                // the highest live one.
                let last = t.partitions.keys().next_back().copied();
                let at = |partition| PartitionKey {
                    stream: 0,
                    topic: 1,
                    partition,
                };
                match last {
                    Some(p) if t.partitions.len() > 1 => {
                        Step::Remove(ResourceKey::Partition(at(p)))
                    }
                    Some(p) => Step::Create(ResourceKey::Partition(at(p + 1))),
                    None => Step::Create(ResourceKey::Partition(at(0))),
                }
            }
        },
    }
}

/// The steps after a re-creation made while a reconciler pass waited to
/// sync the re-created partition's directories (issue 27). The old
/// incarnation's syncs meet the new incarnation's names only if a send makes
/// names in the new directories before the pass takes its turn, and a loss
/// shows only if something acknowledged relies on those names afterwards: a
/// flush, or a persisted send retried after a failed one. Left to the
/// ordinary draw that chain almost never happens (a send picks one of every
/// live partition, a turn is one step in twenty, and a purge of topic 0, one
/// step in ten, takes the messages before a power loss shows their names
/// gone), so the window takes it in order, one step each: a send to the
/// new incarnation, the pass's turn, a flush or another send, and a power
/// loss. Whether the pass's sync fails (and how: only a fault before or
/// torn drops the directory's dirty entries under Linux semantics) is left
/// to the fault plan, as everywhere.
#[derive(Debug)]
struct Aftermath {
    /// The re-created partitions whose old incarnation's syncs wait.
    partitions: Vec<PartitionKey>,
    /// What relies on the names after the pass's turn: a flush (whose
    /// promise is what a `buffered` topic acknowledges), or a send retried
    /// after a failed one (a `persisted` send syncs its own names, so only
    /// one that failed after making them leaves them to the old sync).
    relies: Crossing,
    /// How far along the chain the window is.
    next: usize,
}

/// One step of an [`Aftermath`].
#[derive(Debug, Clone, Copy)]
enum Crossing {
    Send(PartitionKey),
    Turn,
    Flush,
    PowerLoss,
}

impl Aftermath {
    /// The window after a re-creation (`ok`: it succeeded) that crossed a
    /// pass waiting to sync the directories of `crossed`, as live again.
    fn after(
        crossed: Vec<PartitionKey>,
        ok: bool,
        policy: Durability,
        world: &World,
    ) -> Option<Aftermath> {
        let live = world.live_partitions();
        let partitions: Vec<PartitionKey> =
            crossed.into_iter().filter(|k| live.contains(k)).collect();
        let relies = match policy {
            Durability::Buffered => Crossing::Flush,
            Durability::Persisted => Crossing::Send(*partitions.first()?),
        };
        (ok && !partitions.is_empty()).then_some(Aftermath {
            partitions,
            relies,
            next: 0,
        })
    }

    /// Whether the chain is drawn to its end.
    fn done(&self) -> bool {
        self.next >= 4
    }

    /// The chain's next step.
    fn next(&mut self, rng: &mut SimRng) -> Option<Crossing> {
        let i = rng.below(self.partitions.len() as u64) as usize;
        let send = Crossing::Send(self.partitions.get(i).copied()?);
        let step = match self.next {
            0 => send,
            1 => Crossing::Turn,
            2 => match self.relies {
                Crossing::Send(_) => send,
                other => other,
            },
            _ => Crossing::PowerLoss,
        };
        self.next += 1;
        Some(step)
    }
}

/// A re-creation under the same id (issue 27): of the resource holding a
/// partition whose cleanup the pass in flight is working on, if there is
/// one (its waits then run after the new incarnation took the paths), else
/// of topic 1 or its last partition. Topic 0 of stream 0 is never deleted.
fn recreate_step(rng: &mut SimRng, world: &World) -> Step {
    let Some(meta) = world.metadata() else {
        return Step::Reconcile;
    };
    let last_of = |s: u32, t: u32| {
        meta.streams
            .get(&s)
            .and_then(|x| x.topics.get(&t))
            .and_then(|t| t.partitions.keys().next_back().copied())
    };
    // Topic 0 of stream 0 stays (the purges' target), but its last
    // partition may be re-created: most cleanups in flight are its.
    let live = |k: &PartitionKey| {
        let last = last_of(k.stream, k.topic);
        if (k.stream, k.topic) == (0, 0) {
            k.partition > 0 && last == Some(k.partition)
        } else {
            last.is_some_and(|last| k.partition <= last)
        }
    };
    let all = world.cleaning();
    // Those whose directory syncs wait are where an old incarnation's I/O
    // would meet the new one's names; the others may get there later.
    let syncing: Vec<PartitionKey> = all
        .iter()
        .filter(|(k, phase)| live(k) && *phase == Some(CleanupPhase::DirSyncs))
        .map(|(k, _)| *k)
        .collect();
    let cleaning = if syncing.is_empty() {
        all.iter().map(|(k, _)| *k).filter(live).collect()
    } else {
        syncing
    };
    let target = match cleaning.get(rng.below(cleaning.len().max(1) as u64) as usize) {
        Some(k) => *k,
        None if last_of(0, 1).is_some() => PartitionKey {
            stream: 0,
            topic: 1,
            partition: 0,
        },
        None => return Step::Reconcile,
    };
    let topic = ResourceKey::Topic {
        stream: target.stream,
        topic: target.topic,
    };
    if (target.stream, target.topic) == (0, 0) {
        return Step::Recreate(ResourceKey::Partition(target));
    }
    match rng.below(3) {
        0 if last_of(target.stream, target.topic) == Some(target.partition)
            && target.partition > 0 =>
        {
            Step::Recreate(ResourceKey::Partition(target))
        }
        1 if target.stream == 1 => Step::Recreate(STREAM_1),
        _ => Step::Recreate(topic),
    }
}

/// `SLUICE_SIM_TRACE=<part>` prints the storage operations whose path
/// contains `<part>`: after each step of a run (with `SLUICE_SIM_VERBOSE=1`,
/// under their step), at the end of an explorer case.
pub(crate) fn traced() -> Option<String> {
    std::env::var("SLUICE_SIM_TRACE")
        .ok()
        .filter(|v| !v.is_empty())
}

/// `SLUICE_SIM_VERBOSE=1` prints every step of a run on stderr (for reproducers).
fn verbose() -> bool {
    std::env::var_os("SLUICE_SIM_VERBOSE").is_some_and(|v| v != "0")
}
