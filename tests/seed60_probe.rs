//! Probe for the simreach 22:13 finding: `sim run` at harsh rates (the
//! `harsh(2)` of tests/sim_teeth.rs), seed 60, 300 steps, reported (b)
//! "acknowledged messages lost". Analysis only (see /work/coord/SEED60.md).
//!
//! `SEED60_SEEDS=a..=b` scans a range instead of seed 60.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_sim::run::{Rates, run};

fn harsh2() -> Rates {
    Rates {
        sync_ppm: 200_000,
        write_ppm: 20_000,
        unlink_ppm: 20_000,
        truncate_ppm: 400_000,
        rename_ppm: 10_000,
        open_ppm: 2_000,
        crash_ppm: 150_000,
    }
}

fn seeds() -> (u64, u64) {
    match std::env::var("SEED60_SEEDS") {
        Ok(s) => {
            let (a, b) = s.split_once("..=").expect("a..=b");
            (a.parse().unwrap(), b.parse().unwrap())
        }
        Err(_) => (60, 60),
    }
}

#[test]
#[ignore = "probe: prints violations at harsh rates, asserts nothing; run with --ignored --nocapture"]
fn harsh_rates_probe() {
    let (first, last) = seeds();
    let steps = std::env::var("SEED60_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut bad = 0;
    for seed in first..=last {
        let r = run(seed, steps, harsh2()).unwrap();
        if !r.violations.is_empty() {
            bad += 1;
        }
        for (step, v) in &r.violations {
            println!(
                "seed {seed} ({} msgs, {} offsets, {}) step {step}: ({}) [{}] {}",
                r.policy, r.offsets_policy, r.semantics, v.property, v.partition, v.detail
            );
        }
    }
    println!("seeds {first}..={last}, {steps} steps: {bad} with violations");
}

/// Replays the steps `sim run` seed 60 drew (copied from its
/// `SLUICE_SIM_VERBOSE=1` output, steps 0..=25) on a `World` with the same
/// fault plan, and prints the storage trace of every step, so the ops and
/// faults around the loss can be read. The fault plan draws per storage
/// call, independently of the workload RNG, so the same calls in the same
/// order meet the same faults. Asserts the engine's promise (no (b)
/// violation): it FAILS on merge-sim b5a32f6 (open engine bug, see
/// /work/coord/SEED60.md), so it is ignored until the fix lands.
#[test]
#[ignore = "open engine bug seed60 (skipped empty segment's name not re-dirtied at recovery); fails until fixed"]
fn seed60_replay_trace() {
    use sluice_server::metadata::Durability;
    use sluice_sim::world::{Shape, Step, World};
    use sluice_storage::{Crash, SyncFailureSemantics};
    let seed = 60;
    let send = |partition: u32, p: &[&str]| Step::Send {
        partition,
        payloads: p.iter().map(|s| s.to_string()).collect(),
    };
    let steps: Vec<Option<Step>> = vec![
        Some(Step::PurgePartition { partition: 0 }),
        Some(Step::Reconcile),
        Some(send(0, &["g1-s1-0"])),
        Some(Step::PurgeTopic),
        Some(send(0, &["g2-s2-0"])),
        Some(send(0, &["g2-s3-0"])),
        Some(send(1, &["g2-s4-0", "g2-s4-1", "g2-s4-2"])),
        Some(Step::PurgeTopic),
        Some(send(1, &["g3-s5-0", "g3-s5-1", "g3-s5-2"])),
        Some(send(1, &["g3-s6-0"])),
        Some(Step::Delete {
            partition: 1,
            group: true,
            id: 0,
        }),
        Some(send(0, &["g3-s7-0", "g3-s7-1", "g3-s7-2"])),
        Some(send(1, &["g3-s8-0"])),
        Some(Step::Reconcile),
        Some(send(0, &["g3-s9-0"])),
        None, // crash process
        Some(send(0, &["g3-s10-0", "g3-s10-1"])),
        Some(send(0, &["g3-s11-0", "g3-s11-1"])),
        Some(send(0, &["g3-s12-0"])),
        Some(Step::Reconcile),
        Some(send(1, &["g3-s13-0", "g3-s13-1", "g3-s13-2"])),
        Some(send(1, &["g3-s14-0", "g3-s14-1", "g3-s14-2"])),
        Some(send(0, &["g3-s15-0"])),
        Some(Step::Reconcile),
        Some(Step::Reconcile),
        None, // crash power-loss
    ];
    let shape = Shape {
        partitions: 2,
        messages: Durability::Persisted,
        offsets: Durability::Persisted,
        segment_size: 512,
    };
    let mut world = World::new(SyncFailureSemantics::Linux, shape, seed).unwrap();
    world.sim.set_fault_plan(Some(harsh2().plan(seed)));
    let mut printed = world.sim.op_count() as usize;
    let mut found = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        match step {
            Some(s) => {
                let ok = world.step(s);
                println!("=== step {n}: {s:?} -> {ok}");
            }
            None => {
                let crash = if n == 15 {
                    Crash::Process
                } else {
                    Crash::PowerLoss
                };
                println!("=== step {n}: crash {crash}");
                let p1 = "/data/streams/0/topics/0/partitions/1/segments/";
                for (path, node) in world.sim.durable_view() {
                    if path.starts_with(p1) {
                        println!("  durable before crash: {path} {node:?}");
                    }
                }
                for (path, node) in world.sim.cached_view() {
                    if path.starts_with(p1) {
                        println!("  cached before crash: {path} {node:?}");
                    }
                }
                world.crash(crash);
                if let Err(e) = world.open() {
                    println!("  open failed: {e}; retry");
                    world.crash(Crash::Process);
                    if let Err(e) = world.open() {
                        println!("  open failed again: {e}; faults off");
                        world.sim.set_fault_plan(None);
                        world.crash(Crash::Process);
                        world.open().unwrap();
                    }
                }
            }
        }
        let trace = world.sim.trace();
        for e in &trace[printed..] {
            println!("  {e}");
        }
        printed = trace.len();
        for v in world
            .check_applied_means_removed()
            .into_iter()
            .chain(world.check())
        {
            println!(
                "  VIOLATION step {n}: ({}) [{}] {}",
                v.property, v.partition, v.detail
            );
            found.push((n, v));
        }
    }
    assert!(found.is_empty(), "seed 60 replay: {found:?}");
}
