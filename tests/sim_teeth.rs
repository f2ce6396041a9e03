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
use sluice_server::PurgeMode;
use sluice_server::metadata::Durability;
use sluice_server::teeth::{self, Mechanism};
use sluice_sim::explore::{Bounds, Case, POLICIES, TwoFaults, explore, run_case};
use sluice_sim::run::{Rates, run};
use sluice_sim::workload::Workload;

/// Where a mechanism's absence is looked for.
#[derive(Debug, Clone, Copy)]
enum Catcher {
    /// The explorer on one workload, at the given stride, with or without the
    /// two-fault phase, stopping at the first violation.
    Explore {
        workload: Workload,
        stride: u64,
        two_faults: Option<TwoFaults>,
        /// The message durability policies explored.
        policies: &'static [Durability],
    },
    /// `sluice sim run` on seeds `first..=last` with `steps` steps, at the
    /// given fault rates, stopping at the first seed with a violation.
    Runs {
        first: u64,
        last: u64,
        steps: u32,
        rates: RunRates,
    },
}

/// The fault rates of a [`Catcher::Runs`].
#[derive(Debug, Clone, Copy)]
enum RunRates {
    /// `sluice sim run`'s defaults as they were before combined sends were
    /// drawn (`combined_ppm: 0`, ADR 0030): the schedules the sweep's seeds
    /// were found on, draw for draw.
    Sweep,
    /// [`harsh`] rates of this level (1, 2 or 3).
    Harsh(u32),
}

impl RunRates {
    fn rates(self) -> Rates {
        match self {
            RunRates::Sweep => Rates {
                combined_ppm: 0,
                ..Rates::default()
            },
            RunRates::Harsh(level) => harsh(level),
        }
    }
}

/// Fault rates several times the defaults: more faults per schedule, so a
/// mechanism that only matters after two or three faults meets them sooner.
pub(crate) fn harsh(level: u32) -> Rates {
    if level == 3 {
        // Re-creations crossing a reconciler pass (issue 27): catalog steps
        // often, so a re-creation often finds a pass waiting on the old
        // incarnation's directory syncs, and those syncs often fail.
        return Rates {
            sync_ppm: 150_000,
            catalog_ppm: 250_000,
            // The schedules its seeds were found on (before ADR 0030).
            combined_ppm: 0,
            ..Rates::default()
        };
    }
    if level >= 2 {
        // Syncs and truncates fail often, crashes are frequent: the
        // recovered-tail gap needs a failed sync, a failed clean-up
        // truncate, a crash, another failed sync and a power loss.
        return Rates {
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
    }
    Rates {
        sync_ppm: 80_000,
        write_ppm: 40_000,
        unlink_ppm: 60_000,
        truncate_ppm: 100_000,
        rename_ppm: 30_000,
        open_ppm: 5_000,
        crash_ppm: 80_000,
        // The purge-only schedule these seeds and rates were tuned on.
        catalog_ppm: 0,
        retention_ppm: 0,
        combined_ppm: 0,
    }
}

/// Runs `catcher` with `mechanism` off; the first violation, as a printable
/// line with its reproducer, after checking that the same case or seed has
/// no violation with the mechanism on (so the violation is the switch's).
fn first_violation(mechanism: Mechanism, catcher: Catcher) -> Option<String> {
    let off = teeth::disable(mechanism);
    match catcher {
        Catcher::Explore {
            workload,
            stride,
            two_faults,
            policies,
        } => {
            let bounds = Bounds {
                stride,
                second_crash_points: 0,
                second_stride: 1,
                purge_mode: PurgeMode::Obligation,
                two_faults,
                stop_at_first: true,
                policies: policies.to_vec(),
                remote_stride: 1,
            };
            let report = explore(workload, &bounds, |_| {}).unwrap();
            drop(off);
            report.violations.first().map(|v| {
                let case = Case::parse(&v.case).unwrap();
                let (control, _) = run_case(workload, &case, PurgeMode::Obligation).unwrap();
                assert!(
                    control.is_empty(),
                    "case {} fails with {} on too: {control:?}",
                    v.case,
                    mechanism.as_str()
                );
                format!(
                    "({}) {} [{}]: {} ({} violations in {} states)\n  reproduce: {}",
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
        Catcher::Runs {
            first,
            last,
            steps,
            rates,
        } => (first..=last).find_map(|seed| {
            let rates = rates.rates();
            let r = run(seed, steps, rates).unwrap();
            r.violations.first().map(|(step, v)| {
                let on = {
                    let _on = teeth::enable_all();
                    run(seed, steps, rates).unwrap()
                };
                assert!(
                    on.violations.is_empty(),
                    "seed {seed} fails with {} on too: {:?}",
                    mechanism.as_str(),
                    on.violations.first()
                );
                format!(
                    "seed {seed} step {step} ({} violations): ({}) [{}] {}",
                    r.violations.len(),
                    v.property,
                    v.partition,
                    v.detail
                )
            })
        }),
    }
}

/// Tries each catcher in turn until one reports a violation.
fn assert_caught(mechanism: Mechanism, catchers: &[Catcher]) {
    // Given: the mechanism off (this thread only). When: the catchers run.
    for catcher in catchers {
        if let Some(line) = first_violation(mechanism, *catcher) {
            // Then: one of them reports a violation.
            println!(
                "{} off -> caught by {catcher:?}:\n{line}",
                mechanism.as_str()
            );
            return;
        }
        println!("{} off -> not caught by {catcher:?}", mechanism.as_str());
    }
    panic!(
        "{} turned off, but no check reports a violation ({catchers:?}): the checks have no teeth for it",
        mechanism.as_str()
    );
}

/// The explorer's two-fault phase on one workload, the main phase reduced to
/// its first operation, under the given message durability policies.
const fn two_faults(workload: Workload, policies: &'static [Durability]) -> Catcher {
    Catcher::Explore {
        workload,
        policies,
        stride: 1_000,
        two_faults: Some(TwoFaults {
            first_stride: 1,
            window: 12,
            second_stride: 1,
            recovery_window: 12,
        }),
    }
}

#[test]
fn without_the_redo_of_dropped_removals_a_check_fails() {
    assert_caught(
        Mechanism::RedoDroppedRemovals,
        &[Catcher::Explore {
            workload: Workload::Purge,
            stride: 1,
            two_faults: None,
            policies: &POLICIES,
        }],
    );
}

#[test]
fn without_generation_filtering_at_recovery_a_check_fails() {
    assert_caught(
        Mechanism::GenerationFilter,
        &[Catcher::Explore {
            workload: Workload::Purge,
            stride: 5,
            two_faults: None,
            policies: &POLICIES,
        }],
    );
}

/// The gap is a crash between an unlink and the next obligation write, then
/// a failed directory sync before cleanup confirms the removal: recovery's
/// sync of `segments/` lies about 55 operations into recovery and the first
/// reconciler pass, so the fault-in-recovery cases cover all of it
/// (`recovery_window: 0`); the two-fault cases inside the window are cut to
/// one operation, every second first index is taken, and only `persisted`
/// is explored (under `buffered` the old segments' names were never durable,
/// so their dropped removal leaves nothing behind).
#[test]
fn without_persisting_the_plan_before_unlinking_a_check_fails() {
    assert_caught(
        Mechanism::PersistPlanBeforeUnlink,
        &[Catcher::Explore {
            workload: Workload::Purge,
            stride: 1_000,
            two_faults: Some(TwoFaults {
                first_stride: 2,
                window: 1,
                second_stride: 1,
                recovery_window: 0,
            }),
            policies: &[Durability::Persisted],
        }],
    );
}

/// Caught by seed 212 at harsh rates (property (d): `Applied` while a dead
/// offset file is durable). Its control runs met two engine findings first,
/// both fixed since: the empty-segment reuse
/// (`seed_60_at_harsh_rates_keeps_every_acknowledged_send`) and seed 30's
/// unreadable obligation (the obligation file is opened once and held, ADR
/// 0003 §3.2; its regression test went with issue 16, since when the
/// obligation's own writes no longer note its name for a re-dirty and an
/// unreadable obligation no longer degrades a partition).
#[test]
fn without_replacing_dead_offset_files_a_check_fails() {
    assert_caught(
        Mechanism::ReplaceDeadOffsetFile,
        &[Catcher::Runs {
            first: 1,
            last: 300,
            steps: 300,
            rates: RunRates::Harsh(1),
        }],
    );
}

/// The gap needs a failed sync, a failed clean-up truncate, a crash, then an
/// acknowledged send and a power loss: the two-fault phase's cases that
/// crash right after the second fault and send once more after recovery
/// (`Case::then_send`) on the `append` workload. The mechanism only runs
/// under `persisted` (recovery re-dirties no buffered tail), so `buffered`
/// is not explored.
#[test]
fn without_re_dirtying_the_recovered_tail_a_check_fails() {
    assert_caught(
        Mechanism::RedirtyRecoveredTail,
        &[two_faults(Workload::Append, &[Durability::Persisted])],
    );
}

/// A failed store followed by a torn one, then a crash before the next store
/// rewrites the damaged slot: the two-fault phase's cases that crash right
/// after the second fault, on the `offset-slots` workload.
#[test]
fn without_the_offset_slot_sequence_rule_a_check_fails() {
    assert_caught(
        Mechanism::OffsetSlotSequence,
        &[two_faults(Workload::OffsetSlots, &POLICIES)],
    );
}

/// A roll that created the segment's files and then failed, a failed
/// `segments/` sync that drops their names, a successful one, and an
/// acknowledged send reusing the files: `sim run` seed 3707's sequence
/// (issue 12). It takes three faults in that order, one more than the
/// explorer's two-fault bound, and random runs met it once in 4,000 seeds at
/// 2,000 steps; so its catcher is the reduced scenario of
/// `engine_durability`, run with the mechanism off: both acknowledged sends
/// are lost.
#[test]
fn without_noting_a_failed_rolls_names_the_reduced_scenario_loses_acknowledged_sends() {
    // Given: the mechanism off (this thread only). When: the scenario runs.
    let off = teeth::disable(Mechanism::NoteFailedRollNames);
    let (name_durable, survivors) = crate::engine_durability::failed_roll_then_dropped_names();
    drop(off);
    // Then: the name was never made durable and the acknowledged sends are gone.
    println!(
        "note-failed-roll-names off -> name durable: {name_durable}, served after the power loss: {survivors:?}"
    );
    assert!(!name_durable);
    assert_ne!(survivors, ["m2", "m3"]);
}

/// A deletion recorded by a process that died after its directory sync
/// failed: without the redo, the next process's plain sync "succeeds", the
/// deletion is recorded done, and the power cut brings the topic back.
#[test]
fn without_redoing_recorded_deletions_the_reduced_scenario_brings_the_topic_back() {
    // Given: the mechanism off (this thread only). When: the scenario runs.
    let off = teeth::disable(Mechanism::RedoRecordedDeletions);
    let (resumed, back) =
        crate::deletion_regression::deletion_after_a_dead_process_and_a_power_cut();
    drop(off);
    // Then: the deletion was resumed but the topic is durable again.
    println!("redo-recorded-deletions off -> resumed: {resumed:?}, topic back: {back}");
    assert_eq!(resumed.len(), 1);
    assert!(back);
}

/// A retention round whose `segments/` sync failed, then a process crash:
/// without the redo of the names the round recorded, the next process's
/// plain sync "succeeds", the obligation is recorded done, and the power cut
/// brings the expired segments back to disk (never served: the mark filters
/// them).
#[test]
fn without_redoing_recorded_retention_the_reduced_scenario_brings_expired_segments_back() {
    use crate::retention_regression::{Kind, round_after_a_dead_process_and_a_power_cut};
    // Given: the mechanism off (this thread only). When: the scenario runs.
    let off = teeth::disable(Mechanism::RedoRecordedRetention);
    let (owed, leftovers, served) =
        round_after_a_dead_process_and_a_power_cut(Kind::Age, Durability::Persisted);
    drop(off);
    // Then: the retention was owed and run, but the files are durable again.
    println!(
        "redo-recorded-retention off -> owed: {owed}, below the mark after the power cut: {leftovers:?}, served: {served:?}"
    );
    assert!(owed);
    assert!(!leftovers.is_empty());
}

/// The same mechanism through the explorer: a `retention-by-age` case whose
/// round's `segments/` sync fails, then a process crash; after recovery and
/// cleanup (d) finds the expired files durable with no retention pending.
#[test]
fn without_redoing_recorded_retention_a_check_fails() {
    assert_caught(
        Mechanism::RedoRecordedRetention,
        &[Catcher::Explore {
            workload: Workload::RetentionByAge,
            stride: 1,
            two_faults: None,
            policies: &[Durability::Persisted],
        }],
    );
}

/// A batch recovered from the page cache, a failed segment sync that evicts
/// its pages (they then read as the disk holds them: zeros), and a send
/// acknowledged after it: `sim run` seed 260's sequence at harsh rates
/// (issue 12). Its catcher is the reduced scenario of `engine_durability`
/// with the re-check off: the partition either stops serving (the zeros read
/// as a corrupt batch) or, once the zeros are carried below the acknowledged
/// send and made durable with it, loses that send at the power loss.
/// (`sim run` seed 260 no longer reaches the sequence since a purge issues
/// fewer syncs, which moves every later fault of a harsh schedule; no seed
/// of 1..=3000 at 300 steps or 1..=1500 at 600 steps does, so this reduced
/// scenario is the mechanism's only catcher until one is found.)
#[test]
fn without_rechecking_an_evicted_tail_the_reduced_scenario_fails() {
    // Given: the mechanism off (this thread only). When: the scenario runs.
    let off = teeth::disable(Mechanism::RecheckEvictedTail);
    let (live, acked, mut engine) =
        crate::engine_durability::failed_sync_evicts_a_recovered_batch();
    let survivors = sluice_testkit::engine::all_messages(&mut engine);
    drop(off);
    // Then: the poll after the eviction failed, or the acknowledged send is gone.
    let m4_kept = survivors.iter().any(|m| m.offset == acked);
    println!(
        "recheck-evicted-tail off -> live poll: {live:?}, m4 kept after the power loss: {m4_kept}"
    );
    assert!(live.is_err() || !m4_kept);
}

/// A consumer storing into its old offset file between a cleanup's scan and
/// its unlinks (ADR 0019, hazard 1): without the re-check the unlink takes
/// the fresh offset, and the restart after a power cut has none.
#[test]
fn without_rechecking_dead_names_before_unlinking_the_reduced_scenario_loses_a_fresh_offset() {
    let off = teeth::disable(Mechanism::RecheckDeadBeforeUnlink);
    let stored = crate::cleanup_concurrency::fresh_store_between_plan_and_unlink();
    drop(off);
    println!("recheck-dead-before-unlink off -> offset after the power cut: {stored:?}");
    assert_ne!(stored, Some(1));
}

/// A cleanup's `segments/` sync failing without the engine lock after a
/// buffered send made a new segment name (ADR 0019, hazard 2): without
/// taking in that failure, the engine's flush syncs the directory without
/// making the dropped name again, and the power cut loses the messages.
#[test]
fn without_seeing_others_sync_failures_the_reduced_scenario_loses_flushed_messages() {
    let off = teeth::disable(Mechanism::SeeOthersSyncFailures);
    let survivors = crate::cleanup_concurrency::cleanup_sync_failure_then_flush();
    drop(off);
    println!("see-others-sync-failures off -> served after the power cut: {survivors:?}");
    assert_ne!(survivors, vec![0, 1, 2]);
}

/// An engine redo failing half way while a cleanup's sync waits (ADR 0019;
/// `sim run` seed 35 at harsh rates found it): without counting it as a
/// failure of the directory, the cleanup's sync makes the redo's leftover
/// dead file durable and records `Applied`.
#[test]
fn without_failing_the_directory_on_a_failed_redo_the_reduced_scenario_applies_over_a_dead_file() {
    let off = teeth::disable(Mechanism::FailedRedoFailsTheDirectory);
    let (applied, dead, _, _) = crate::cleanup_concurrency::failed_redo_during_a_pending_sync();
    drop(off);
    println!("failed-redo-fails-the-directory off -> applied: {applied}, dead durable: {dead:?}");
    assert!(applied && !dead.is_empty());
}

/// An engine sync of `segments/` failing after a cleanup unlinked its
/// renamed dead files without the lock and before it reported them (ADR
/// 0020): without taking that failure in, the cleanup counts the unlinks as
/// performed, never redoes them, and records `Applied` while the power cut
/// would bring the dead files back.
#[test]
fn without_checking_failures_after_off_lock_unlinks_the_reduced_scenario_applies_over_a_dead_file()
{
    let off = teeth::disable(Mechanism::UnlinkOffLockSeesFailures);
    let (applied, dead) =
        crate::cleanup_concurrency::engine_sync_failure_between_unlink_and_report();
    drop(off);
    println!("unlink-off-lock-sees-failures off -> applied: {applied}, dead durable: {dead:?}");
    assert!(applied && !dead.is_empty());
}

/// An engine redo failing half way after a cleanup's sync ran and before
/// the cleanup took it in (`sim run` seed 234 of session 9): without keeping
/// the notes, the tracker forgets the name the redo left behind, and the
/// engine's next flush makes the leftover dead file durable.
#[test]
fn without_keeping_notes_after_a_later_failure_the_reduced_scenario_leaves_a_dead_file() {
    let off = teeth::disable(Mechanism::KeepNotesAfterALaterFailure);
    let (applied, dead) = crate::cleanup_concurrency::failed_redo_after_a_pending_sync_ran();
    drop(off);
    println!("keep-notes-after-a-later-failure off -> applied: {applied}, dead durable: {dead:?}");
    assert!(applied && !dead.is_empty());
}

/// A partition deleted and created again under its id while its purge
/// cleanup's directory syncs wait without the engine lock (issue 27): with
/// the fence off, the old cleanup's failing sync runs on the new directory,
/// drops the new incarnation's names, and its tracker never hears of it.
/// Every form of the loss is caught: a persisted send (topic and last
/// partition re-created), a first persisted offset store, and a buffered
/// send a flush promised durable.
#[test]
fn without_fencing_ended_incarnations_the_reduced_scenarios_lose_what_was_acknowledged() {
    use crate::incarnations::{
        Recreate, first_persisted_offset_after_recreate, flushed_buffered_send_after_recreate,
        persisted_send_after_recreate,
    };
    let off = teeth::disable(Mechanism::FenceEndedIncarnations);
    let mut caught = Vec::new();
    for how in [Recreate::Topic, Recreate::LastPartition] {
        let (acked, served) = persisted_send_after_recreate(how);
        println!("fence off, {how:?}, persisted send -> acked {acked:?}, served {served:?}");
        caught.push(served != acked);
        let (acked, served) = flushed_buffered_send_after_recreate(how);
        println!("fence off, {how:?}, flushed buffered send -> acked {acked:?}, served {served:?}");
        caught.push(served != acked);
    }
    let offset = first_persisted_offset_after_recreate(Recreate::Topic);
    println!("fence off, first persisted offset store -> after the power cut {offset:?}");
    caught.push(offset != Some(0));
    drop(off);
    assert_eq!(caught, [true; 5], "every form loses acknowledged data");
}

/// The same loss found by `sluice sim run` itself, not a hand-written
/// scenario: a re-creation that crosses a pass waiting on the old
/// incarnation's directory syncs opens the window of steps that makes the
/// old sync meet the new names (`run::Aftermath`), and with the fence off a
/// failed old sync drops a flushed buffered send's segment names.
#[test]
fn without_fencing_ended_incarnations_sim_run_loses_flushed_messages() {
    assert_caught(
        Mechanism::FenceEndedIncarnations,
        &[Catcher::Runs {
            first: 1385,
            last: 1400,
            steps: 600,
            rates: RunRates::Harsh(3),
        }],
    );
}

/// `CarryRecoveredBuffered` (session 12, `sim run` seed 2997): without it a
/// process that recovered `buffered` bytes an earlier process's failed sync
/// left clean in the page cache flushes without writing them, and a power
/// loss takes what the flush promised.
#[test]
fn without_carrying_recovered_buffered_bytes_a_flush_after_a_restart_promises_nothing() {
    use crate::engine_durability::flush_after_a_failed_flush_and_a_restart;
    let off = teeth::disable(Mechanism::CarryRecoveredBuffered);
    let (flushed, served) = flush_after_a_failed_flush_and_a_restart();
    drop(off);
    println!("carry off: flushed {flushed:?}, served after the power loss {served:?}");
    assert_eq!(flushed, ["m0", "m1", "m2"]);
    assert_ne!(served, flushed, "the flushed messages are lost");
}

/// `RedoCleansItsLeftover` (session 12, `sim run` seed 3535): without it a
/// redo whose create of a removed `.purged` name fails after taking effect
/// leaves the empty file, and a power cut can make it durable.
#[test]
fn without_the_redo_cleaning_its_leftover_a_failed_create_leaves_a_purged_name() {
    use crate::cleanup_concurrency::redo_create_fails_after_taking_effect;
    let off = teeth::disable(Mechanism::RedoCleansItsLeftover);
    let (cached, durable) = redo_create_fails_after_taking_effect();
    drop(off);
    println!("cleanup off: `.purged` cached {cached:?}, durable {durable:?}");
    assert_ne!(
        durable,
        Vec::<String>::new(),
        "the leftover reaches the disk"
    );
}

/// `ReopenOnStaleFiles` (session 13, `sim run` seeds 2945 and 3363 of the
/// session-12 sweep): a removal redone as create-and-remove whose remove
/// failed leaves an empty `<name>.purged`, and a power loss makes it durable
/// beside an `Applied` purge. Recovery lists it as stale and reopens the
/// purge; without that, the engine comes up idle over a dead file it claims
/// removed, and nothing ever removes it.
#[test]
fn without_reopening_on_stale_files_a_redo_leftover_outlives_an_applied_purge() {
    assert_caught(
        Mechanism::ReopenOnStaleFiles,
        &[Catcher::Runs {
            first: 2945,
            last: 2945,
            steps: 2000,
            rates: RunRates::Sweep,
        }],
    );
}

/// The tiered workloads' remote door (the storage phase reduced to its
/// first operation): every remote call of the window, each remote fault.
const fn remote_door(workload: Workload) -> Catcher {
    Catcher::Explore {
        workload,
        policies: &[Durability::Buffered],
        stride: 1_000,
        two_faults: None,
    }
}

/// Given a round that applies right after its deletes, whatever the listing
/// of the dead generation found (issue 31, ADR 0027 §3), when the explorer
/// strikes the tiered purge's remote calls, then (k) reports a dead
/// generation's object in the store with no deletion owed: an upload
/// attempt whose put landed late, after the live generation's round had
/// deleted its key, and before the purge's listing found it.
#[test]
fn without_listing_dead_generations_before_applied_a_check_fails() {
    assert_caught(
        Mechanism::ListDeadGenerationsBeforeApplied,
        &[remote_door(Workload::TieredPurge)],
    );
}

/// Given local copies released whether or not their upload is recorded,
/// when the tiered workloads run, then acknowledged messages are lost
/// across both tiers (b): the released range is served by neither.
#[test]
fn without_releasing_only_uploaded_segments_a_check_fails() {
    assert_caught(
        Mechanism::ReleaseOnlyUploaded,
        &[Catcher::Explore {
            workload: Workload::TieredPurge,
            policies: &[Durability::Persisted],
            stride: 1_000,
            two_faults: None,
        }],
    );
}
