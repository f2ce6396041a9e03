//! `sluice sim run`: a random workload driven by one seed, with faults and
//! crashes, checked by the oracle after every step.
//!
//! Invariants:
//! - The run is a pure function of `(seed, steps, rates)`: every choice comes
//!   from one `SimRng`, the storage faults from a plan seeded by the same seed,
//!   and the trace hash printed at the end is the proof.
//! - Faults stop before the final check: the reconciler must then bring every
//!   obligation to `Applied` within a bounded number of passes.

use std::collections::BTreeSet;

use serde::Serialize;
use sluice_server::metadata::Durability;
use sluice_storage::sim::SimRng;
use sluice_storage::{
    Crash, Fault, FaultMode, FaultPlan, InjectedError, OpKind, SyncFailureSemantics,
};

use crate::oracle::Violation;
use crate::world::{Shape, Step, World};

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
    };
    let mut world = World::new(semantics, shape, seed)?;
    world.sim.set_fault_plan(Some(rates.plan(seed)));
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
    let mut values = OffsetValues::new(PARTITIONS);
    let mut shown = 0u64;
    for n in 0..steps {
        if rng.chance_ppm(rates.crash_ppm) {
            let crash = match rng.below(3) {
                0 => Crash::Process,
                1 => Crash::PowerLoss,
                _ => Crash::PowerLossPartial {
                    seed: rng.next_u64(),
                },
            };
            if verbose() {
                eprintln!("step {n}: crash {crash}");
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
            let partition = rng.below(u64::from(PARTITIONS)) as u32;
            let step = match rng.below(10) {
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
                    // Group 0 is the topic's only group; consumers 1 and 2.
                    let group = rng.coin();
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
                    let group = rng.coin();
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
                    for p in 1..=PARTITIONS {
                        values.purged(p);
                    }
                    Step::PurgeTopic
                }
                _ => Step::Reconcile,
            };
            let ok = world.step(&step);
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
        for v in world
            .check_applied_means_removed()
            .into_iter()
            .chain(world.check())
        {
            report.violations.push((n, v));
        }
    }
    // Faults stop; cleanup must finish.
    world.sim.set_fault_plan(None);
    world.sim.clear_faults();
    if let Err(v) = world.finish_cleanup(CLEANUP_PASSES) {
        report.violations.push((steps, v));
    }
    for v in world
        .check_applied_means_removed()
        .into_iter()
        .chain(world.check())
    {
        report.violations.push((steps, v));
    }
    report.trace_hash = format!("{:016x}", world.sim.trace_hash());
    report.operations = world.sim.op_count();
    Ok(report)
}

/// Offset values a run stores, kept apart between generations: a value used
/// in one of a partition's last `KEPT` generations (the current one excluded)
/// is never drawn again, so an old offset that comes back differs from every
/// value the oracle accepts for the current generation. Values must be served
/// offsets (`store_offset` refuses others) and a generation's log is short, so
/// older generations' values are released again: a resurrection from further
/// back could pass unseen if it matched, which the explorer's workloads (fully
/// unique values) cover instead.
struct OffsetValues {
    /// Per partition (index `p - 1`): values of the current generation, then
    /// of the previous ones, newest first.
    generations: Vec<Vec<BTreeSet<u64>>>,
}

const KEPT: usize = 3;

impl OffsetValues {
    fn new(partitions: u32) -> Self {
        OffsetValues {
            generations: (0..partitions).map(|_| vec![BTreeSet::new()]).collect(),
        }
    }

    /// A value in `0..=last` that no earlier kept generation of `partition`
    /// used (preferring none in particular), or `None` if there is none.
    fn draw(&mut self, rng: &mut SimRng, partition: u32, last: Option<u64>) -> Option<u64> {
        let gens = self.generations.get_mut(partition as usize)?;
        let last = last?;
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

    /// A purge of `partition` was attempted: its current values become a past
    /// generation's (even if the purge failed: it may have landed).
    fn purged(&mut self, partition: u32) {
        if let Some(gens) = self.generations.get_mut(partition as usize) {
            gens.insert(0, BTreeSet::new());
            gens.truncate(KEPT + 1);
        }
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
