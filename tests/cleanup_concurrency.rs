//! A purge's cleanup runs beside the engine: its steps take the engine lock,
//! its syncs (the plan's, the directories') run without it, and the engine
//! serves every request in between, to the purged partition too
//! (reconciler/pass.rs). These scenarios put a request, a failed sync or a
//! second purge exactly between two steps of a cleanup, through the
//! production engine on `SimStorage`, and check what a client and a restart
//! then see.

use sluice_server::partition::purge::{CleanupPhase, PurgeState};
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{CleanupRun, Engine, Partitioning};
use sluice_sim::ack;
use sluice_storage::{Crash, Fault, FaultMode, OpKind, OpMatcher, SimStorage};
use std::path::Path;
use std::sync::Arc;

use sluice_server::clock::ManualClock;
use sluice_server::metadata::PartitionKey;
use sluice_storage::DurableStorage;
use sluice_testkit::engine::{
    DATA_DIR, START_MICROS, batch, buffered, config, crash_and_reopen, key,
    make_everything_durable, new_sim, offsets_of, persisted, poll, segment_name, send,
    setup_partitions, sim_with, store_offset, stored_offset, stream, topic, try_send,
};

/// The consumer whose offset file the purge makes dead.
fn consumer() -> Consumer {
    Consumer::consumer(1)
}

/// Given: a partition with an old history and `consumer()`'s offset in it, all
/// durable; when: the partition is purged and its cleanup begun (the
/// woken reconciler's first step), the cleanup waiting for I/O.
fn purge_with_cleanup_waiting(engine: &mut Engine, sim: &SimStorage) -> CleanupRun {
    send(engine, 0, 5);
    store_offset(engine, consumer(), 3).unwrap();
    make_everything_durable(sim);
    engine.purge_partition(&stream(), &topic(), 0).unwrap();
    let run = engine.begin_reconcile();
    assert!(
        !run.is_finished(),
        "the cleanup waits for its plan's sync without the engine"
    );
    run
}

/// The I/O the server runs without the engine lock, then the engine's next
/// step; once.
fn one_step(engine: &mut Engine, run: &mut CleanupRun) {
    run.perform_waits();
    engine.resume_reconcile(run);
}

/// The outcome a scenario's cleanup must reach: `Applied` (its own syncs
/// succeeded), with no dead file a power cut would leave.
fn assert_applied_with_no_dead_file((applied, dead): (bool, Vec<String>)) {
    assert!(applied, "the cleanup's own syncs succeeded");
    assert_eq!(dead, Vec::<String>::new());
}

/// Steps until the attempt waits for `phase` (its I/O not yet run).
fn step_until(engine: &mut Engine, run: &mut CleanupRun, phase: CleanupPhase) {
    while run.waiting_for() != [phase] {
        assert!(!run.is_finished(), "the attempt ended before {phase:?}");
        one_step(engine, run);
    }
}

/// Steps until the attempt waits for its directories' syncs (they are
/// begun, not run).
fn step_until_dir_syncs_begun(engine: &mut Engine, run: &mut CleanupRun) {
    step_until(engine, run, CleanupPhase::DirSyncs);
}

fn finish(engine: &mut Engine, mut run: CleanupRun) {
    while !run.is_finished() {
        one_step(engine, &mut run);
    }
}

/// The next sync of `segments/` fails, dropping its dirty names (Linux).
fn fail_next_segments_sync(sim: &SimStorage) {
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
}

fn purge_state(engine: &Engine) -> Option<PurgeState> {
    engine
        .partition(key())
        .and_then(|p| p.obligation())
        .map(|ob| ob.state())
}

/// Scenario: a cleanup waiting for its plan's sync; meanwhile the new
/// history gets a message and the consumer, whose old offset file the plan
/// names, stores into it again; the cleanup finishes, power is cut. Returns
/// the consumer's offset after the restart (the fresh one, 1, unless the
/// cleanup removed its file).
pub(crate) fn fresh_store_between_plan_and_unlink() -> Option<u64> {
    let (sim, mut engine) = sim_with(persisted());
    let run = purge_with_cleanup_waiting(&mut engine, &sim);
    send(&mut engine, 0, 2);
    store_offset(&mut engine, consumer(), 1).unwrap();
    finish(&mut engine, run);
    assert_eq!(purge_state(&engine), Some(PurgeState::Applied));
    assert_eq!(stored_offset(&mut engine, consumer()), Some(1));
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    stored_offset(&mut engine, consumer())
}

#[test]
fn given_a_cleanup_waiting_for_its_plan_when_the_same_consumer_stores_a_fresh_offset_then_cleanup_never_removes_it()
 {
    // Given a cleanup waiting for its plan's sync, when the consumer stores
    // into its old file, then the purge is applied and the power cut keeps
    // the fresh offset (the file holds a record of the new generation).
    assert_eq!(fresh_store_between_plan_and_unlink(), Some(1));
}

/// Scenario: a cleanup whose directory syncs are begun; a buffered send
/// starts the new history's segment (a new name in `segments/`, not yet
/// durable); the cleanup's sync of `segments/` fails, dropping every dirty
/// name in it (Linux), the engine's too; before the cleanup's next step the
/// engine flushes (a graceful stop's promise: everything acknowledged is
/// durable); power is cut.
/// Returns the offsets served after the restart (all three, unless the
/// engine's sync confirmed the dropped name without making it again).
pub(crate) fn cleanup_sync_failure_then_flush() -> Vec<u64> {
    let (sim, mut engine) = sim_with(buffered());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    step_until_dir_syncs_begun(&mut engine, &mut run);
    send(&mut engine, 0, 3);
    fail_next_segments_sync(&sim);
    // The syncs run (the one of `segments/` fails) and, before the cleanup
    // takes the engine again to learn of it, the engine flushes: a graceful
    // stop's promise that everything acknowledged is durable.
    run.perform_waits();
    engine.sync_all().unwrap();
    engine.resume_reconcile(&mut run);
    assert!(run.is_finished());
    assert_ne!(purge_state(&engine), Some(PurgeState::Applied));
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    let polled = poll(
        &mut engine,
        Consumer::consumer(9),
        PollingStrategy::First,
        10,
    );
    engine.reconcile_until_idle(10);
    assert_eq!(purge_state(&engine), Some(PurgeState::Applied));
    offsets_of(&polled)
}

#[test]
fn given_a_cleanup_whose_segments_sync_fails_without_the_engine_when_the_engine_flushes_then_the_new_segment_survives_a_power_cut()
 {
    // Then: the engine's sync of `segments/` saw the cleanup's failure and
    // made the dropped name again, so the three messages survive.
    assert_eq!(cleanup_sync_failure_then_flush(), vec![0, 1, 2]);
}

/// Scenario: a purge whose first attempt's `segments/` sync failed (the
/// removals of the old segment are unconfirmed, to be redone); the next
/// pass begins (its redo succeeds) and waits for its syncs; then a
/// persisted send's own sync of `segments/` redoes the removals again and
/// that redo stops half way (the old name created again, its removal
/// failing); then the cleanup's syncs run. Returns whether that pass
/// applied the purge, the dead files durable after it, and the engine.
pub(crate) fn failed_redo_during_a_pending_sync() -> (bool, Vec<String>, SimStorage, Engine) {
    failed_redo_around_a_pending_sync(false)
}

/// As `failed_redo_during_a_pending_sync`, with the redo failing half way
/// after the cleanup's syncs ran (and succeeded) and before the cleanup
/// takes them in; then the engine flushes. Returns whether the pass applied
/// the purge, and the dead files durable after the flush.
pub(crate) fn failed_redo_after_a_pending_sync_ran() -> (bool, Vec<String>) {
    let (applied, _, sim, mut engine) = failed_redo_around_a_pending_sync(true);
    engine.sync_all().unwrap();
    (applied, dead_files_durable(&sim, 1))
}

fn failed_redo_around_a_pending_sync(
    syncs_ran_first: bool,
) -> (bool, Vec<String>, SimStorage, Engine) {
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    make_everything_durable(&sim);
    fail_next_segments_sync(&sim);
    engine.purge_partition(&stream(), &topic(), 0).unwrap();
    engine.reconcile();
    assert_ne!(purge_state(&engine), Some(PurgeState::Applied));
    let mut run = engine.begin_reconcile_at(u64::MAX);
    assert!(!run.is_finished(), "the retry waits for its syncs");
    if syncs_ran_first {
        run.perform_waits();
    }
    sim.fail_when(
        OpMatcher::kind(OpKind::RemoveFile).path_ends_with(segment_name(0, 0, "idx")),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(
        try_send(&mut engine, 0, 1).is_err(),
        "the send's redo failed"
    );
    finish(&mut engine, run);
    let applied = purge_state(&engine) == Some(PurgeState::Applied);
    (applied, dead_files_durable(&sim, 1), sim, engine)
}

/// The partition's files of a generation below `generation` (and any
/// `<name>.purged`) that a power cut now would leave on disk: the
/// simulator's own definition (`ack::dead_files`).
fn dead_files_durable(sim: &SimStorage, generation: u64) -> Vec<String> {
    ack::dead_files(&sim.durable_view(), Path::new(DATA_DIR), key(), generation)
}

#[test]
fn given_a_cleanup_waiting_for_its_syncs_when_an_engine_redo_fails_half_way_then_the_cleanup_confirms_nothing()
 {
    let (applied, dead, sim, mut engine) = failed_redo_during_a_pending_sync();
    // Then: that pass did not apply the purge (the redo left an old name
    // on disk again); the retry removes it, applies, and a power cut finds
    // no dead file.
    assert!(!applied, "applied while dead files are durable: {dead:?}");
    engine.reconcile_until_idle(10);
    assert_eq!(purge_state(&engine), Some(PurgeState::Applied));
    assert_eq!(dead_files_durable(&sim, 1), Vec::<String>::new());
}

#[test]
fn given_a_cleanup_in_flight_when_the_partition_is_purged_again_then_the_old_attempt_stops_and_the_new_generation_is_cleaned()
 {
    let (sim, mut engine) = sim_with(persisted());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    one_step(&mut engine, &mut run);

    // When: a second purge commits while the first one's syncs wait.
    send(&mut engine, 0, 2);
    engine.purge_partition(&stream(), &topic(), 0).unwrap();
    finish(&mut engine, run);

    // Then: the first attempt ended without claiming anything for the new
    // generation; the next pass cleans both histories away.
    let generation = engine.partition(key()).unwrap().generation();
    assert_eq!(generation, 2);
    assert_ne!(purge_state(&engine), Some(PurgeState::Applied));
    engine.reconcile_until_idle(10);
    assert_eq!(purge_state(&engine), Some(PurgeState::Applied));
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(
        report.stale_records, 0,
        "no dead file is durable: {report:?}"
    );
    assert!(poll(&mut engine, consumer(), PollingStrategy::First, 10).is_empty());
}

#[test]
fn given_a_cleanup_in_flight_when_its_topic_is_deleted_then_the_attempt_ends_and_the_deletion_is_cleaned_up()
 {
    let (sim, mut engine) = sim_with(persisted());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    one_step(&mut engine, &mut run);

    // When: the topic is deleted while the purge's syncs wait.
    engine.delete_topic(&stream(), &topic()).unwrap();
    finish(&mut engine, run);

    // Then: nothing is pending once the deletion's own cleanup ran.
    engine.reconcile_until_idle(10);
    assert!(engine.reconciler().pending().is_empty());
    assert!(engine.partition(key()).is_none());
}

#[test]
fn given_a_cleanup_sync_that_ran_when_the_engine_own_sync_fails_before_the_cleanup_takes_it_in_then_a_later_flush_redoes_the_dropped_name()
 {
    // Given: a cleanup whose directory syncs ran (and succeeded) without the
    // engine lock, not yet taken in.
    let (sim, mut engine) = sim_with(buffered());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    step_until_dir_syncs_begun(&mut engine, &mut run);
    run.perform_waits();

    // When: a buffered send makes the new history's segment, the engine's
    // own sync of `segments/` fails (dropping that name), then the cleanup
    // takes its successful syncs in, then the engine flushes again.
    send(&mut engine, 0, 3);
    fail_next_segments_sync(&sim);
    assert!(engine.sync_all().is_err());
    engine.resume_reconcile(&mut run);
    assert!(run.is_finished());
    engine.sync_all().unwrap();

    // Then: the flush made the dropped name again (`sim run` seed 681), so a
    // power cut keeps the three messages.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    let polled = poll(
        &mut engine,
        Consumer::consumer(9),
        PollingStrategy::First,
        10,
    );
    assert_eq!(offsets_of(&polled), vec![0, 1, 2]);
}

/// Scenario: a cleanup whose renames of the dead files reached the disk
/// (a flush) and whose unlinks of them ran without the engine lock, not yet
/// taken in; a buffered send makes the new
/// history's segment; the engine's own sync of `segments/` fails, which may
/// drop every dirty name there, those unlinks too (Linux); the cleanup goes
/// on. Returns whether it applied the purge, and the dead files a power cut
/// would then leave on disk.
pub(crate) fn engine_sync_failure_between_unlink_and_report() -> (bool, Vec<String>) {
    let (sim, mut engine) = sim_with(buffered());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    step_until(&mut engine, &mut run, CleanupPhase::Unlinks);
    make_everything_durable(&sim);
    run.perform_waits();
    send(&mut engine, 0, 1);
    fail_next_segments_sync(&sim);
    assert!(engine.sync_all().is_err(), "the engine's flush failed");
    finish(&mut engine, run);
    let applied = purge_state(&engine) == Some(PurgeState::Applied);
    (applied, dead_files_durable(&sim, 1))
}

#[test]
fn given_unlinks_made_without_the_lock_when_the_engine_sync_fails_before_they_are_reported_then_they_are_redone()
 {
    // Then: the cleanup took the unlinks as possibly dropped and made them
    // again before its own syncs, so `Applied` leaves no dead file durable.
    assert_applied_with_no_dead_file(engine_sync_failure_between_unlink_and_report());
}

#[test]
fn given_a_renamed_dead_file_left_by_a_crash_when_the_engine_restarts_then_cleanup_removes_it() {
    // Given: a cleanup that renamed the dead files aside, then a power cut
    // before their unlinks (the renames made durable by a later flush).
    let (sim, mut engine) = sim_with(persisted());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    step_until(&mut engine, &mut run, CleanupPhase::Unlinks);
    make_everything_durable(&sim);
    drop(run);

    // When: the engine restarts.
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: recovery counts the `.purged` files as stale, the reconciler
    // removes them, and none is left on disk.
    assert!(report.stale_records > 0, "{report:?}");
    engine.reconcile_until_idle(10);
    assert_eq!(purge_state(&engine), Some(PurgeState::Applied));
    let (_, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(report.stale_records, 0, "{report:?}");
    assert_eq!(dead_files_durable(&sim, 1), Vec::<String>::new());
}

/// Sends `n` messages to `partition`.
fn send_to(engine: &mut Engine, partition: u32, n: u64) {
    engine
        .send(
            &stream(),
            &topic(),
            &Partitioning::PartitionId(partition),
            batch(0, n),
        )
        .unwrap();
}

#[test]
fn given_a_pass_taking_one_step_per_call_when_a_partition_not_yet_begun_is_purged_again_then_both_histories_are_cleaned()
 {
    // Given: a three-partition topic on an engine that takes one cleanup
    // step per engine call, as the server does; every partition has an old
    // history and a stored offset, all durable.
    let sim = new_sim();
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = config(Path::new(DATA_DIR));
    config.reconciler.steps_per_hold = 1;
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let (mut engine, _) = Engine::open(storage, clock, config).unwrap();
    setup_partitions(&mut engine, persisted(), 3);
    for partition in 0..3 {
        send_to(&mut engine, partition, 2);
    }
    store_offset(&mut engine, consumer(), 1).unwrap();
    make_everything_durable(&sim);

    // When: the topic is purged; the pass's first call begins one cleanup
    // and leaves the other two first steps for later calls; partition 2 is
    // purged again before its first step is taken.
    engine.purge_topic(&stream(), &topic()).unwrap();
    let run = engine.begin_reconcile();
    assert_eq!(run.waiting_for(), [CleanupPhase::PlanSync]);
    assert_eq!(run.ready(), 2);
    send_to(&mut engine, 2, 1);
    engine.purge_partition(&stream(), &topic(), 2).unwrap();
    finish(&mut engine, run);

    // Then: the pass cleaned partitions 0 and 1 and dropped partition 2's
    // superseded attempt; the next passes clean its two histories, and a
    // power cut finds no dead file anywhere.
    engine.reconcile_until_idle(10);
    assert!(engine.reconciler().pending().is_empty());
    for partition in 0..3 {
        let key = PartitionKey { partition, ..key() };
        let p = engine.partition(key).unwrap();
        assert_eq!(p.generation(), if partition == 2 { 2 } else { 1 });
        assert_eq!(
            p.obligation().map(|ob| ob.state()),
            Some(PurgeState::Applied)
        );
    }
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(report.stale_records, 0, "{report:?}");
    assert!(poll(&mut engine, consumer(), PollingStrategy::First, 10).is_empty());
}

#[test]
fn given_a_cleanup_sync_that_ran_when_an_engine_redo_fails_half_way_before_it_is_taken_in_then_the_flush_removes_the_leftover()
 {
    // Then: the tracker kept the names the failed redo left as they were
    // not noted, so the flush redid them and no dead file is durable
    // (`sim run` seed 234 of session 9).
    assert_applied_with_no_dead_file(failed_redo_after_a_pending_sync_ran());
}

#[test]
fn given_off_lock_unlinks_dropped_by_a_failed_sync_when_the_process_restarts_then_the_new_process_redoes_them()
 {
    // Given: a cleanup whose renames reached the disk (a flush), whose
    // unlinks of the `.purged` files ran, and whose sync of `segments/`
    // then failed, dropping those unlinks (Linux): the disk still holds the
    // `.purged` files, the page cache shows them gone.
    let (sim, mut engine) = sim_with(persisted());
    let mut run = purge_with_cleanup_waiting(&mut engine, &sim);
    step_until(&mut engine, &mut run, CleanupPhase::Unlinks);
    make_everything_durable(&sim);
    one_step(&mut engine, &mut run);
    fail_next_segments_sync(&sim);
    finish(&mut engine, run);
    assert_ne!(purge_state(&engine), Some(PurgeState::Applied));

    // When: the process crashes (the page cache survives) and restarts; a
    // persisted send starts the new history's segment, whose directory
    // sync comes before the new process's cleanup, which then runs to
    // `Applied`.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    send(&mut engine, 0, 1);
    engine.reconcile_until_idle(10);
    assert_eq!(purge_state(&engine), Some(PurgeState::Applied));

    // Then: the new process took the recorded names' `.purged` forms as not
    // durably removed and made them again before its syncs (`sim run
    // --max-open-files 16` seed 810), so a power cut finds no dead file.
    assert_eq!(dead_files_durable(&sim, 1), Vec::<String>::new());
}

/// Names ending in `.purged` anywhere in `view`.
fn purged_names<V>(view: &std::collections::BTreeMap<String, V>) -> Vec<String> {
    view.keys()
        .filter(|p| p.ends_with(".purged"))
        .cloned()
        .collect()
}

/// Scenario of `sim run` seed 3535 (session 12): a cleanup's plan, naming
/// the old segment, written and waiting for its sync when the process
/// crashes; the new process reads the plan from the page cache and notes
/// each name and its `.purged` form as removed, not known durable; its
/// flush's sync of `segments/` redoes those removals, and the create that
/// re-dirties the first `.purged` name reports an error after making the
/// file. Returns the `.purged` names the page cache then holds, and those a
/// power cut that keeps every dirty name leaves on disk.
pub(crate) fn redo_create_fails_after_taking_effect() -> (Vec<String>, Vec<String>) {
    let (sim, mut engine) = sim_with(buffered());
    let run = purge_with_cleanup_waiting(&mut engine, &sim);
    drop(run);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    sim.fail_when(
        OpMatcher::kind(OpKind::Open).path_ends_with(".purged"),
        Fault::io(FaultMode::After),
        0,
        1,
    );
    assert!(engine.sync_all().is_err(), "the redo's create failed");
    let cached = purged_names(&sim.cached_view());
    drop(engine);
    // A partial power cut whose coins all land: every dirty name and file.
    make_everything_durable(&sim);
    (cached, purged_names(&sim.durable_view()))
}

#[test]
fn given_a_recovered_plan_when_the_flush_redo_create_of_a_purged_name_fails_after_taking_effect_then_no_purged_name_is_left()
 {
    let (cached, durable) = redo_create_fails_after_taking_effect();
    // Then: the redo removed the empty file its failed create made, so
    // neither the page cache nor the disk holds a name nothing would ever
    // account for next to an `Applied` record.
    assert_eq!(cached, Vec::<String>::new());
    assert_eq!(durable, Vec::<String>::new());
}
