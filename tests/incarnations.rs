//! A purge's cleanup syncs and unlinks without the engine lock, and Iggy
//! reuses ids: a partition deleted while its cleanup waits may be created
//! again, under the same id and at the same paths, before the old cleanup's
//! I/O runs. These scenarios (issue 27) put a re-created partition's first
//! unconfirmed names, the old cleanup's failing directory sync, and the
//! acknowledgement in that order, through the production engine on
//! `SimStorage`, then cut the power: what was acknowledged must survive.
//!
//! With `FenceEndedIncarnations` off (sim_teeth.rs) the old cleanup's sync
//! runs on the new directory, its failure drops the new names, the new
//! partition's tracker never hears of it, and every scenario loses what it
//! acknowledged.

use sluice_server::CleanupRun;
use sluice_server::Engine;
use sluice_server::partition::purge::CleanupPhase;
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_storage::{Crash, Fault, FaultMode, OpKind, OpMatcher, SimStorage};

use sluice_testkit::engine::{
    TOPIC, buffered, crash_and_reopen, make_everything_durable, offsets_of, persisted, poll, send,
    sim_with, store_offset, stored_offset, stream, topic, try_send,
};

/// How the partition under the cleanup goes away and comes back under its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recreate {
    /// `DELETE` then `POST` of the topic, with the same id.
    Topic,
    /// The topic's last (only) partition deleted, then one added: Iggy gives
    /// it the same id, 0.
    LastPartition,
}

/// Given a one-partition topic with an old history and a consumer's offset,
/// durable, purged, its cleanup waiting for its directories' syncs (begun
/// under the engine lock, to run without it).
fn cleanup_waiting_for_dir_syncs(engine: &mut Engine, sim: &SimStorage) -> CleanupRun {
    send(engine, 0, 4);
    store_offset(engine, Consumer::consumer(1), 2).unwrap();
    make_everything_durable(sim);
    engine.purge_partition(&stream(), &topic(), 0).unwrap();
    let mut run = engine.begin_reconcile();
    while run.waiting_for() != [CleanupPhase::DirSyncs] {
        assert!(!run.is_finished(), "the attempt ended before its syncs");
        run.perform_waits();
        engine.resume_reconcile(&mut run);
    }
    run
}

/// When: the partition is deleted and created again under its id.
fn recreate(engine: &mut Engine, how: Recreate, options: sluice_server::metadata::TopicOptions) {
    match how {
        Recreate::Topic => {
            engine.delete_topic(&stream(), &topic()).unwrap();
            let t = engine
                .create_topic(&stream(), Some(0), TOPIC, 1, options, 0, 0, 1)
                .unwrap();
            assert_eq!(t.id, 0);
        }
        Recreate::LastPartition => {
            assert_eq!(
                engine.delete_partitions(&stream(), &topic(), 1).unwrap(),
                [0]
            );
            assert_eq!(
                engine.create_partitions(&stream(), &topic(), 1).unwrap(),
                [0]
            );
        }
    }
}

/// The next operation of `kind` on a path ending in `suffix` fails.
fn fail_next(sim: &SimStorage, kind: OpKind, suffix: &str) {
    sim.fail_when(
        OpMatcher::kind(kind).path_ends_with(suffix),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
}

/// The old cleanup's waits run now, with the sync of `dir` (a directory of
/// the partition's; the syncs run in `segments/`, `consumers/`, `groups/`
/// order, each after the one before confirmed) armed to fail: they run after the new incarnation made
/// names there. The fault is taken back afterwards, whether or not the
/// waits reached it (fenced, they do no I/O); the pass then drops the job.
fn old_cleanup_runs_with_failing_sync(
    engine: &mut Engine,
    sim: &SimStorage,
    mut run: CleanupRun,
    dir: &str,
) {
    fail_next(sim, OpKind::SyncDir, dir);
    run.perform_waits();
    sim.clear_faults();
    while !run.is_finished() {
        engine.resume_reconcile(&mut run);
        run.perform_waits();
    }
}

/// Scenario: a re-created partition's first `persisted` send fails at its
/// segment's file sync (its names are made and noted, not yet synced); the
/// old cleanup's sync of `segments/` then runs and fails; the send is
/// retried and acknowledged; power is cut. Returns the offsets served after
/// the restart (those the retry acknowledged: 0, 1, 2).
pub(crate) fn persisted_send_after_recreate(how: Recreate) -> (Vec<u64>, Vec<u64>) {
    let (sim, mut engine) = sim_with(persisted());
    let run = cleanup_waiting_for_dir_syncs(&mut engine, &sim);
    recreate(&mut engine, how, persisted());
    fail_next(&sim, OpKind::SyncFile, ".log");
    assert!(try_send(&mut engine, 0, 3).is_err(), "the first send fails");
    old_cleanup_runs_with_failing_sync(&mut engine, &sim, run, "/segments");
    let acked = offsets_of_sent(try_send(&mut engine, 0, 3));
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    (acked, served(&mut engine))
}

/// Scenario: on the re-created partition, a consumer's first `persisted`
/// offset store fails at its file sync (the file's name made and noted);
/// the old cleanup's syncs run, `segments/` confirmed and `consumers/`
/// failing; the store is retried and acknowledged; power is cut. Returns
/// the consumer's offset after the restart (the acknowledged one, 0).
pub(crate) fn first_persisted_offset_after_recreate(how: Recreate) -> Option<u64> {
    let (sim, mut engine) = sim_with(persisted());
    let run = cleanup_waiting_for_dir_syncs(&mut engine, &sim);
    recreate(&mut engine, how, persisted());
    send(&mut engine, 0, 1);
    let consumer = Consumer::consumer(7);
    fail_next(&sim, OpKind::SyncFile, "/consumers/7");
    assert!(store_offset(&mut engine, consumer, 0).is_err());
    old_cleanup_runs_with_failing_sync(&mut engine, &sim, run, "/consumers");
    store_offset(&mut engine, consumer, 0).unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    stored_offset(&mut engine, consumer)
}

/// Scenario: a `buffered` topic re-created; a send starts its first segment
/// (names made, not synced, as `buffered` allows); the old cleanup's sync
/// of `segments/` runs and fails; the engine flushes (a graceful stop's
/// promise: everything acknowledged is durable); power is cut. Returns the
/// offsets acknowledged and those served after the restart.
pub(crate) fn flushed_buffered_send_after_recreate(how: Recreate) -> (Vec<u64>, Vec<u64>) {
    let (sim, mut engine) = sim_with(buffered());
    let run = cleanup_waiting_for_dir_syncs(&mut engine, &sim);
    recreate(&mut engine, how, buffered());
    let acked = offsets_of_sent(try_send(&mut engine, 0, 3));
    old_cleanup_runs_with_failing_sync(&mut engine, &sim, run, "/segments");
    engine.sync_all().unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    (acked, served(&mut engine))
}

fn offsets_of_sent(sent: Result<sluice_server::Sent, sluice_server::EngineError>) -> Vec<u64> {
    let sent = sent.expect("the retried send is acknowledged");
    (sent.base_offset..sent.base_offset + sent.count).collect()
}

/// Every offset the partition serves from its start.
fn served(engine: &mut Engine) -> Vec<u64> {
    offsets_of(&poll(
        engine,
        Consumer::consumer(9),
        PollingStrategy::First,
        100,
    ))
}

#[test]
fn given_a_purge_cleanup_waiting_when_the_topic_is_recreated_and_its_first_persisted_send_retried_then_a_power_cut_keeps_it()
 {
    let (acked, served) = persisted_send_after_recreate(Recreate::Topic);
    assert_eq!(acked, [0, 1, 2]);
    assert_eq!(served, acked);
}

#[test]
fn given_a_purge_cleanup_waiting_when_the_last_partition_is_recreated_and_its_first_persisted_send_retried_then_a_power_cut_keeps_it()
 {
    let (acked, served) = persisted_send_after_recreate(Recreate::LastPartition);
    assert_eq!(acked, [0, 1, 2]);
    assert_eq!(served, acked);
}

#[test]
fn given_a_purge_cleanup_waiting_when_the_topic_is_recreated_and_a_first_persisted_offset_store_retried_then_a_power_cut_keeps_it()
 {
    assert_eq!(
        first_persisted_offset_after_recreate(Recreate::Topic),
        Some(0)
    );
}

#[test]
fn given_a_purge_cleanup_waiting_when_the_topic_is_recreated_buffered_and_flushed_then_a_power_cut_keeps_what_was_flushed()
 {
    let (acked, served) = flushed_buffered_send_after_recreate(Recreate::Topic);
    assert_eq!(acked, [0, 1, 2]);
    assert_eq!(served, acked);
}

#[test]
fn given_a_purge_cleanup_waiting_when_the_last_partition_is_recreated_buffered_and_flushed_then_a_power_cut_keeps_what_was_flushed()
 {
    let (acked, served) = flushed_buffered_send_after_recreate(Recreate::LastPartition);
    assert_eq!(acked, [0, 1, 2]);
    assert_eq!(served, acked);
}
