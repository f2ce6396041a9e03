//! `sluice sim run`: a random workload driven by one seed, with faults and
//! crashes, checked by the oracle after every step.
//!
//! Invariants:
//! - The run is a pure function of `(seed, steps, rates)`: every choice comes
//!   from one `SimRng`, the storage faults from a plan seeded by the same seed,
//!   and the trace hash printed at the end is the proof.
//! - Faults stop before the final check: the reconciler must then bring every
//!   obligation to `Applied` within a bounded number of passes.

use serde::Serialize;
use sluice_server::metadata::Durability;
use sluice_storage::sim::SimRng;
use sluice_storage::{
    Crash, Fault, FaultMode, FaultPlan, InjectedError, OpKind, SyncFailureSemantics,
};

use crate::oracle::Violation;
use crate::world::{Shape, Step, World};

/// Fault rates of a run, in parts per million per operation of that kind.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub sync_ppm: u32,
    pub write_ppm: u32,
    pub unlink_ppm: u32,
    /// Chance per step of a crash, in parts per million.
    pub crash_ppm: u32,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            sync_ppm: 20_000,
            write_ppm: 5_000,
            unlink_ppm: 20_000,
            crash_ppm: 60_000,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub steps: u32,
    pub policy: String,
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
    let semantics = if rng.coin() {
        SyncFailureSemantics::Linux
    } else {
        SyncFailureSemantics::Forgiving
    };
    let shape = Shape {
        partitions: PARTITIONS,
        messages: policy,
        offsets: policy,
        segment_size: 512,
    };
    let mut world = World::new(semantics, shape, seed)?;
    world.sim.set_fault_plan(Some(FaultPlan {
        seed,
        rates_ppm: vec![
            (OpKind::SyncDir, rates.sync_ppm),
            (OpKind::SyncFile, rates.sync_ppm),
            (OpKind::Write, rates.write_ppm),
            (OpKind::Append, rates.write_ppm),
            (OpKind::RemoveFile, rates.unlink_ppm),
        ],
        fault: Fault {
            mode: FaultMode::Before,
            error: InjectedError::Io,
        },
    }));
    let mut report = RunReport {
        seed,
        steps,
        policy: policy.as_str().into(),
        semantics: semantics.as_str().into(),
        trace_hash: String::new(),
        operations: 0,
        crashes: 0,
        violations: Vec::new(),
    };
    let mut sent = 0u64;
    let mut generation_tag = 0u64;
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
                    Step::Store {
                        partition,
                        group,
                        id: if group { 0 } else { 1 + rng.below(2) as u32 },
                        // Unique per generation (see the oracle): tag in the high bits is not
                        // possible for real offsets, so values stay small and the oracle
                        // tells generations apart through its own bookkeeping.
                        offset: rng.below(4),
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
                    Step::PurgePartition { partition }
                }
                8 => {
                    generation_tag += 1;
                    Step::PurgeTopic
                }
                _ => Step::Reconcile,
            };
            let ok = world.step(&step);
            if verbose() {
                eprintln!("step {n}: {step:?} -> {}", if ok { "ok" } else { "failed" });
            }
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

/// `SLUICE_SIM_VERBOSE=1` prints every step of a run on stderr (for reproducers).
fn verbose() -> bool {
    std::env::var_os("SLUICE_SIM_VERBOSE").is_some_and(|v| v != "0")
}
