//! Teeth, measured: each safety mechanism of the purge and of recovery is
//! turned off in turn (`sluice_server::teeth`, a test-only cargo feature), and
//! the simulator's bounded checks must then report a violation. A mechanism
//! whose absence no check notices is a mechanism the checks do not test.
//!
//! Each test names the check that catches its mechanism (a bounded explorer
//! sweep or a few seeded random runs, the same code `sluice sim explore` and
//! `sluice sim run` run) and prints the first violation with its reproducer;
//! docs/simulation.md tabulates them. Switches are per thread, so these tests
//! run in parallel with each other and with every other test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_server::PurgeMode;
use sluice_server::teeth::{self, Mechanism};
use sluice_sim::explore::{Bounds, TwoFaults, explore};
use sluice_sim::run::{Rates, run};
use sluice_sim::workload::Workload;

/// Where a mechanism's absence is looked for.
#[derive(Debug, Clone, Copy)]
enum Catcher {
    /// The explorer on one workload, at the given stride, with or without the
    /// two-fault phase (CI-sized).
    Explore {
        workload: Workload,
        stride: u64,
        two_faults: Option<TwoFaults>,
    },
    /// `sluice sim run` on seeds `first..=last` with `steps` steps.
    Runs { first: u64, last: u64, steps: u32 },
}

/// Runs `catcher` with `mechanism` off; the first violation, as a printable
/// line with its reproducer.
fn first_violation(mechanism: Mechanism, catcher: Catcher) -> Option<String> {
    let _off = teeth::disable(mechanism);
    match catcher {
        Catcher::Explore {
            workload,
            stride,
            two_faults,
        } => {
            let bounds = Bounds {
                stride,
                second_crash_points: 0,
                second_stride: 1,
                purge_mode: PurgeMode::Obligation,
                two_faults,
                stop_at_first: true,
            };
            let report = explore(workload, &bounds, |_| {}).unwrap();
            report.violations.first().map(|v| {
                format!(
                    "({}) {} [{}]: {} ({} of {} states violated)\n  reproduce: {}",
                    v.property,
                    v.case,
                    v.partition,
                    v.detail,
                    report.violations.len(),
                    report.states_explored,
                    v.reproduce
                )
            })
        }
        Catcher::Runs { first, last, steps } => (first..=last).find_map(|seed| {
            let r = run(seed, steps, Rates::default()).unwrap();
            r.violations.first().map(|(step, v)| {
                format!(
                    "seed {seed} step {step}: ({}) [{}] {}\n  reproduce: sluice sim run --seed {seed} --steps {steps}",
                    v.property, v.partition, v.detail
                )
            })
        }),
    }
}

fn assert_caught(mechanism: Mechanism, catcher: Catcher) {
    // Given: the mechanism off (this thread only). When: the catcher runs.
    let found = first_violation(mechanism, catcher);
    // Then: it reports a violation.
    match found {
        Some(line) => println!("{} off -> caught by {catcher:?}:\n{line}", mechanism.as_str()),
        None => panic!(
            "{} turned off, but {catcher:?} reports no violation: the checks have no teeth for it",
            mechanism.as_str()
        ),
    }
}

const CI_TWO_FAULTS: TwoFaults = TwoFaults {
    first_stride: 3,
    window: 12,
    second_stride: 2,
};

#[test]
fn without_the_redo_of_dropped_removals_a_check_fails() {
    assert_caught(
        Mechanism::RedoDroppedRemovals,
        Catcher::Explore {
            workload: Workload::Purge,
            stride: 1,
            two_faults: Some(CI_TWO_FAULTS),
        },
    );
}

#[test]
fn without_generation_filtering_at_recovery_a_check_fails() {
    assert_caught(
        Mechanism::GenerationFilter,
        Catcher::Explore {
            workload: Workload::Purge,
            stride: 5,
            two_faults: None,
        },
    );
}

#[test]
fn without_persisting_the_plan_before_unlinking_a_check_fails() {
    assert_caught(
        Mechanism::PersistPlanBeforeUnlink,
        Catcher::Explore {
            workload: Workload::Purge,
            stride: 1,
            two_faults: Some(CI_TWO_FAULTS),
        },
    );
}

#[test]
fn without_replacing_dead_offset_files_a_check_fails() {
    assert_caught(
        Mechanism::ReplaceDeadOffsetFile,
        Catcher::Explore {
            workload: Workload::Offsets,
            stride: 1,
            two_faults: Some(CI_TWO_FAULTS),
        },
    );
}

#[test]
fn without_re_dirtying_the_recovered_tail_a_check_fails() {
    assert_caught(
        Mechanism::RedirtyRecoveredTail,
        Catcher::Explore {
            workload: Workload::Append,
            stride: 1,
            two_faults: Some(CI_TWO_FAULTS),
        },
    );
}

#[test]
fn without_the_offset_slot_sequence_rule_a_check_fails() {
    assert_caught(
        Mechanism::OffsetSlotSequence,
        Catcher::Explore {
            workload: Workload::Offsets,
            stride: 1,
            two_faults: Some(CI_TWO_FAULTS),
        },
    );
}
