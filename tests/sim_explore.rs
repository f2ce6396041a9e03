//! The crash-point explorer and the seeded simulator, as CI runs them: a
//! bounded sweep of every workload on the real purge (no violation allowed),
//! the teeth check (the naive, Iggy-order purge must be caught), and
//! determinism (same seed, same trace hash). The full sweep runs through
//! `sluice sim explore` (docs/simulation.md).
use sluice_server::PurgeMode;
use sluice_sim::explore::{Bounds, Case, TwoFaults, explore, run_case};
use sluice_sim::run::{Rates, run};
use sluice_sim::workload::Workload;

/// The default rates without retention steps: the schedules the seeds
/// quoted below were found on (retention steps add a draw to every step).
const WITHOUT_RETENTION: Rates = Rates {
    sync_ppm: 20_000,
    write_ppm: 5_000,
    unlink_ppm: 20_000,
    truncate_ppm: 20_000,
    rename_ppm: 10_000,
    open_ppm: 3_000,
    crash_ppm: 60_000,
    catalog_ppm: 80_000,
    retention_ppm: 0,
    combined_ppm: 0,
};

/// CI's share of the space: every 5th operation, a few second-crash points
/// (`sluice sim explore` covers every operation; docs/simulation.md).
fn ci_bounds(mode: PurgeMode) -> Bounds {
    Bounds {
        stride: 5,
        second_crash_points: 3,
        second_stride: 6,
        purge_mode: mode,
        two_faults: Some(CI_TWO_FAULTS),
        stop_at_first: false,
        policies: sluice_sim::explore::POLICIES.to_vec(),
        remote_stride: 1,
    }
}

/// CI's share of the two-fault phase: every 9th first fault, the second one
/// (or a crash) at every 3rd of the next 12 operations.
const CI_TWO_FAULTS: TwoFaults = TwoFaults {
    first_stride: 9,
    window: 12,
    second_stride: 3,
    recovery_window: 12,
};

fn assert_clean(workload: Workload) {
    let report = explore(workload, &ci_bounds(PurgeMode::Obligation), |_| {}).unwrap();
    // The figures docs/simulation.md quotes (`-- --nocapture` shows them).
    println!(
        "{}: {} states, {:?}, {} violations",
        workload.name(),
        report.states_explored,
        report.by_phase,
        report.violations.len()
    );
    assert!(
        report.states_explored > 500,
        "{} explored only {}",
        workload.name(),
        report.states_explored
    );
    let shown: Vec<String> = report
        .violations
        .iter()
        .take(10)
        .map(|v| {
            format!(
                "({}) {}: {}\n  reproduce: {}",
                v.property, v.partition, v.detail, v.reproduce
            )
        })
        .collect();
    assert!(
        report.violations.is_empty(),
        "{} violations, first ones:\n{}",
        report.violations.len(),
        shown.join("\n")
    );
}

#[test]
fn purge_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::Purge);
}

#[test]
fn topic_purge_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::TopicPurge);
}

#[test]
fn offsets_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::Offsets);
}

#[test]
fn append_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::Append);
}

#[test]
fn offset_slots_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::OffsetSlots);
}

#[test]
fn delete_topic_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::DeleteTopic);
}

#[test]
fn delete_stream_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::DeleteStream);
}

#[test]
fn delete_partitions_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::DeletePartitions);
}

#[test]
fn delete_group_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::DeleteGroup);
}

#[test]
fn retention_by_age_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::RetentionByAge);
}

#[test]
fn retention_by_size_workload_has_no_violation_at_any_explored_crash_point() {
    assert_clean(Workload::RetentionBySize);
}

/// Apache Iggy's order for retention (remove, warn on a failed sync, no
/// durable mark, recovery filters nothing): each retention workload must
/// report that expired segment files are on disk with no retention pending,
/// property (d), and that an expired range is served again after a power
/// loss, property (j), at CI bounds.
#[test]
fn every_retention_workload_catches_the_naive_retention() {
    for workload in Workload::RETENTIONS {
        let report = explore(workload, &ci_bounds(PurgeMode::NaiveIggyOrder), |_| {}).unwrap();
        let mut by_property = std::collections::BTreeMap::new();
        for v in &report.violations {
            *by_property.entry(v.property).or_insert(0u64) += 1;
        }
        // The figures docs/simulation.md quotes (`-- --nocapture` shows them).
        println!(
            "naive {}: {} states, {} violations {by_property:?}",
            workload.name(),
            report.states_explored,
            report.violations.len()
        );
        let not_owed = report
            .violations
            .iter()
            .find(|v| v.property == 'd' && v.detail.starts_with("no retention pending"));
        let served = report
            .violations
            .iter()
            .find(|v| v.property == 'j' && v.detail.contains("served"));
        assert!(
            not_owed.is_some() && served.is_some(),
            "{} did not catch the naive retention ({} violations: {:?})",
            workload.name(),
            report.violations.len(),
            report.violations.iter().take(3).collect::<Vec<_>>()
        );
    }
}

/// Apache Iggy's order for deletions (remove, warn on a failed sync, count
/// the deletion done; recovery makes no obligation for what no metadata
/// names): each deletion workload must report that a deleted resource's
/// files are on disk with no deletion pending, property (d), at CI bounds.
#[test]
fn every_deletion_workload_catches_the_naive_deletion() {
    for workload in Workload::DELETIONS {
        let report = explore(workload, &ci_bounds(PurgeMode::NaiveIggyOrder), |_| {}).unwrap();
        let mut by_property = std::collections::BTreeMap::new();
        for v in &report.violations {
            *by_property.entry(v.property).or_insert(0u64) += 1;
        }
        // The figures docs/simulation.md quotes (`-- --nocapture` shows them).
        println!(
            "naive {}: {} states, {} violations {by_property:?}",
            workload.name(),
            report.states_explored,
            report.violations.len()
        );
        let caught = report
            .violations
            .iter()
            .find(|v| v.property == 'd' && v.detail.starts_with("no deletion pending"));
        assert!(
            caught.is_some(),
            "{} did not catch the naive deletion ({} violations: {:?})",
            workload.name(),
            report.violations.len(),
            report.violations.iter().take(3).collect::<Vec<_>>()
        );
    }
}

#[test]
fn the_explorer_finds_the_iggy_bug_in_the_naive_purge() {
    // Given: the purge workload on Apache Iggy's purge order.
    let bounds = Bounds {
        stride: 1,
        second_crash_points: 0,
        second_stride: 1,
        purge_mode: PurgeMode::NaiveIggyOrder,
        two_faults: None,
        stop_at_first: false,
        policies: sluice_sim::explore::POLICIES.to_vec(),
        remote_stride: 1,
    };
    // When: every crash point is explored.
    let report = explore(Workload::Purge, &bounds, |_| {}).unwrap();
    // Then: an offset of the purged generation comes back (property a) or
    // purged messages are served (property e) — the bug.
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.property == 'a' || v.property == 'e'),
        "naive purge not caught; {} violations: {:?}",
        report.violations.len(),
        report.violations.iter().take(3).collect::<Vec<_>>()
    );
}

#[test]
fn every_other_workload_catches_the_naive_purge_too() {
    for workload in [Workload::TopicPurge, Workload::Offsets, Workload::Append] {
        let report = explore(workload, &ci_bounds(PurgeMode::NaiveIggyOrder), |_| {}).unwrap();
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.property == 'a' || v.property == 'e'),
            "{} did not catch the naive purge ({} violations)",
            workload.name(),
            report.violations.len()
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_trace_hash() {
    let a = run(7, 120, Rates::default()).unwrap();
    let b = run(7, 120, Rates::default()).unwrap();
    let c = run(8, 120, Rates::default()).unwrap();
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.operations, b.operations);
    assert_ne!(a.trace_hash, c.trace_hash);
}

/// Seeds the `--seeds 1..=4000 --steps 2000` sweep reported with an oracle
/// that accepted ADR 0010's jump only after a power loss and only before an
/// acknowledged send (`Next skipped: position 0 holds offset 1`).
#[test]
fn seeds_the_long_sweep_reported_pass_with_the_adr_0010_rule() {
    for seed in [1522u64, 1902, 1984] {
        let r = run(seed, 2000, WITHOUT_RETENTION).unwrap();
        assert!(
            r.violations.is_empty(),
            "seed {seed}: {:?}\n  reproduce: sluice sim run --seed {seed} --steps 2000",
            r.violations.first()
        );
    }
}

#[test]
fn a_hundred_random_seeds_pass_the_oracle_at_every_step() {
    let mut failed = Vec::new();
    for seed in 1..=100u64 {
        let r = run(seed, 150, Rates::default()).unwrap();
        if !r.violations.is_empty() {
            failed.push(format!(
                "seed {seed}: {:?}\n  reproduce: sluice sim run --seed {seed} --steps 150",
                r.violations.first()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Seed 60 at high fault rates (syncs 20%, truncates 40%, a crash in 15% of
/// the steps) lost an acknowledged persisted send: a roll reused an empty
/// segment left by an earlier process, whose name a failed directory sync had
/// dropped, and the plain sync after the acknowledged write did not make the
/// name durable (docs/adr/0004 §3, recovery of empty segments).
#[test]
fn seed_60_at_harsh_rates_keeps_every_acknowledged_send() {
    let harsh = Rates {
        sync_ppm: 200_000,
        write_ppm: 20_000,
        unlink_ppm: 20_000,
        truncate_ppm: 400_000,
        rename_ppm: 10_000,
        open_ppm: 2_000,
        crash_ppm: 150_000,
        // The purge-only schedule these seeds and rates were tuned on.
        catalog_ppm: 0,
        retention_ppm: 0,
        combined_ppm: 0,
    };
    let r = run(60, 300, harsh).unwrap();
    assert!(
        r.violations.is_empty(),
        "seed 60 (harsh rates, tests/sim_explore.rs): {:?}",
        r.violations.first()
    );
}

/// Found by the two-fault phase's crash-then-send cases: the very first
/// obligation write of a purge tears, its retry (a different record: it
/// carries the error) tears too, and the process dies. Nothing was ever
/// confirmed in that file, yet the two prefixes mixed into a slot that
/// reads as corrupt, not as a torn first write, and recovery degraded the
/// partition (docs/simulation.md, "Teeth").
#[test]
fn two_torn_first_obligation_writes_do_not_degrade_the_partition() {
    // Given / when: the explorer's case, through the production engine.
    let case = Case::parse("buffered:linux:59:torn:process:4:f63-torn:then-send").unwrap();
    let (violations, _) = run_case(Workload::Append, &case, PurgeMode::Obligation).unwrap();
    // Then: no violation (the partition serves, nothing acknowledged is lost).
    assert!(
        violations.is_empty(),
        "sluice sim explore --workload append --case {case}: {violations:?}"
    );
}

/// Seed 46 (`sim run --seeds 1..=500 --steps 2000`) lost an acknowledged
/// persisted offset: a store whose file sync failed left an empty offset
/// file; a later failed sync of `consumers/` dropped its name; after a
/// crash the next store reused the file and synced the directory without
/// redoing the name, so a power loss took the file and the offset.
#[test]
fn seed_46_keeps_every_acknowledged_offset() {
    let r = run(46, 1_199, WITHOUT_RETENTION).unwrap();
    assert!(
        r.violations.is_empty(),
        "sluice sim run --seed 46 --steps 1199: {:?}",
        r.violations.first()
    );
}

/// Seed 231 (`sim run --seeds 1..=500 --steps 2000`): a re-dirty of a group
/// offset file stopped between its renames and a partial power loss made
/// `groups/0.redirty` durable; recovery moved it back, but the removal of
/// the leftover name was tracked nowhere, a failed sync of `groups/` dropped
/// it, and the purge reached `Applied` with that dead file durable (d).
#[test]
fn seed_231_never_applies_a_purge_over_a_durable_redirty_leftover() {
    let r = run(231, 1_758, WITHOUT_RETENTION).unwrap();
    assert!(
        r.violations.is_empty(),
        "sluice sim run --seed 231 --steps 1758: {:?}",
        r.violations.first()
    );
}

/// Seed 3707 (`sim run --seeds 1..=4000 --steps 2000`, step 353) lost seven
/// acknowledged persisted messages: a send's roll created the new segment's
/// files and failed at its index truncate, so no tracker knew the names; the
/// reconciler's next sync of `segments/` failed and dropped them, the one
/// after succeeded, and the sends into the reused files synced a directory
/// with nothing dirty in it. A partial power loss took the segment's name.
/// Reduced: `engine_durability::a_segment_created_by_a_failed_roll_*`.
#[test]
fn seed_3707_keeps_every_acknowledged_send() {
    let r = run(3707, 2000, WITHOUT_RETENTION).unwrap();
    assert!(
        r.violations.is_empty(),
        "sluice sim run --seed 3707 --steps 2000: {:?}",
        r.violations.first()
    );
}

/// Found by the teeth harness's harsh rates (`sim_teeth::harsh(2)`) with
/// every mechanism on: a roll's first batch (never acknowledged: its sync
/// failed, and so did the truncate that would cut it) survived a process
/// crash in the page cache only, and recovery served it; the next send's
/// sync failed and the kernel evicted the pages it could not write, so the
/// batch read back as zeros while the log still counted it. Polls failed
/// with `CorruptFile` until a restart, and the next acknowledged send would
/// have written the zeros again below itself, where a power loss's recovery
/// cuts them as a torn tail with the acknowledged batch.
/// Reduced: `engine_durability::a_failed_sync_that_evicts_a_recovered_*`.
#[test]
fn seed_260_at_harsh_rates_keeps_serving() {
    let r = run(260, 300, crate::sim_teeth::harsh(2)).unwrap();
    assert!(
        r.violations.is_empty(),
        "seed 260, 300 steps, harsh(2): {:?}",
        r.violations.first()
    );
}

/// Found by the two-fault phase's crash-then-send cases on `append`
/// (`persisted`): a send rolls to a new segment at offset 3, its file sync
/// takes effect but reports an error (not acknowledged), and the clean-up
/// truncate takes effect in the page cache only and reports an error too.
/// After the process crash recovery sees that segment empty and skips it,
/// the next send reuses offset 3 in the previous segment, and the power loss
/// brings the durable, never acknowledged batch back at offset 3: the log
/// served two batches at one offset.
#[test]
fn a_skipped_empty_segment_never_resurrects_an_unacknowledged_offset() {
    for case in [
        "persisted:linux:95:after:process:1:f96-after:then-send",
        "persisted:linux:104:after:process:1:f105-after:then-send",
    ] {
        // Given / when: the explorer's case, through the production engine.
        let case = Case::parse(case).unwrap();
        let (violations, _) = run_case(Workload::Append, &case, PurgeMode::Obligation).unwrap();
        // Then: one batch per offset, and Next skips no acknowledged message.
        assert!(
            violations.is_empty(),
            "sluice sim explore --workload append --case {case}: {violations:?}"
        );
    }
}

/// The tiered workloads' share of CI (issue 31, ADR 0029): every 7th
/// storage operation and every 7th remote call of the window, both doors
/// halting together; the two-fault phase every 25th first fault. `sluice sim
/// explore --workload tiered-purge` (and `tiered-retention`) covers them all.
fn tiered_ci_bounds() -> Bounds {
    Bounds {
        stride: 7,
        second_crash_points: 2,
        second_stride: 10,
        purge_mode: PurgeMode::Obligation,
        two_faults: Some(TwoFaults {
            first_stride: 25,
            window: 8,
            second_stride: 4,
            recovery_window: 8,
        }),
        stop_at_first: false,
        policies: sluice_sim::explore::POLICIES.to_vec(),
        remote_stride: 3,
    }
}

/// Given a tiered workload, when every explored crash point on either door
/// (and every explored remote fault: before, after, after-retried, late)
/// is recovered and cleaned up, then nothing acknowledged is lost across
/// both tiers, nothing purged or expired is served, and no deletion round
/// leaves the record while a dead generation's object is in the store (k).
fn assert_tiered_clean(workload: Workload) {
    let report = explore(workload, &tiered_ci_bounds(), |_| {}).unwrap();
    println!(
        "{}: {} states, {:?}, {} violations",
        workload.name(),
        report.states_explored,
        report.by_phase,
        report.violations.len()
    );
    assert!(
        report
            .by_phase
            .get("remote_crash_at_call")
            .copied()
            .unwrap_or(0)
            > 0,
        "{}: no remote crash point explored: {:?}",
        workload.name(),
        report.by_phase
    );
    let new = &report.violations;
    let shown: Vec<String> = new
        .iter()
        .take(10)
        .map(|v| {
            format!(
                "({}) {}: {}\n  reproduce: {}",
                v.property, v.partition, v.detail, v.reproduce
            )
        })
        .collect();
    assert!(
        new.is_empty(),
        "{} violations, first ones:\n{}",
        new.len(),
        shown.join("\n")
    );
}

#[test]
fn tiered_purge_workload_has_no_violation_at_any_explored_crash_point_of_either_door() {
    assert_tiered_clean(Workload::TieredPurge);
}

#[test]
fn tiered_retention_workload_has_no_violation_at_any_explored_crash_point_of_either_door() {
    assert_tiered_clean(Workload::TieredRetention);
}

/// Given topic 0 tiered to a store with seeded faults (every mode, late
/// puts included) and crashes halfway through tiering passes on either
/// door, when twelve seeds run 150 steps each, then the oracle finds
/// nothing at any step, and the same seed gives the same trace.
#[test]
fn tiered_runs_pass_the_oracle_at_every_step_and_replay() {
    let mut failed = Vec::new();
    for seed in 1..=12u64 {
        let r = sluice_sim::run::run_tiered(seed, 150, Rates::default()).unwrap();
        if !r.violations.is_empty() {
            failed.push(format!(
                "seed {seed}: {:?}\n  reproduce: sluice sim run --seed {seed} --steps 150 --tiered",
                r.violations.first()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let a = sluice_sim::run::run_tiered(5, 100, Rates::default()).unwrap();
    let b = sluice_sim::run::run_tiered(5, 100, Rates::default()).unwrap();
    assert_eq!(
        (a.trace_hash, a.operations),
        (b.trace_hash, b.operations),
        "sluice sim run --seed 5 --steps 100 --tiered is not deterministic"
    );
}
