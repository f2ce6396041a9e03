//! Tiering on the simulators (issue 31, ADR 0027): sealed segments copied to
//! a `SimRemote`, released from the simulated disk, served back by polls;
//! purge and expiry removing remote objects as recorded rounds; crashes and
//! remote faults between every step losing nothing acknowledged and leaving
//! no object of a dead generation behind.

use sluice_remote::{RemoteFault, RemoteMatcher, RemoteOp};
use sluice_testkit::engine::*;

/// Segments of about three 1-message batches, buffered.
fn small_segments() -> TopicOptions {
    TopicOptions {
        segment_size: 150,
        ..buffered()
    }
}

/// Release local copies as soon as they are uploaded.
const RELEASE_AT_ONCE: LocalRetention = LocalRetention {
    max_bytes: 0,
    max_age_us: 0,
};

fn tiered_engine() -> (SimStorage, SimRemote, Engine) {
    let (sim, mut engine) = sim_with(small_segments());
    let remote = SimRemote::default();
    attach_tier(&mut engine, &remote, RELEASE_AT_ONCE);
    (sim, remote, engine)
}

fn local_segments(sim: &SimStorage) -> Vec<String> {
    segment_files(sim, std::path::Path::new(DATA_DIR), "log")
}

fn logs(keys: &[String]) -> Vec<&String> {
    keys.iter().filter(|k| k.ends_with(".log")).collect()
}

#[test]
fn given_a_tiered_topic_when_segments_seal_then_they_move_to_the_store_and_every_message_is_still_served()
 {
    // Given: a tiered topic, 12 messages over several segments.
    let (sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 12);
    let sent = all_messages(&mut engine);
    let segments_before = local_segments(&sim).len();
    assert!(segments_before >= 4, "{segments_before} segments");

    // When: tiering and the reconciler run until idle.
    tier_until_idle(&mut engine, 20);

    // Then: every sealed segment is in the store (log and index), the local
    // disk keeps only the active one, and every message is served, in order.
    let keys = remote_keys(&remote);
    assert_eq!(logs(&keys).len(), segments_before - 1, "{keys:?}");
    assert_eq!(keys.len(), 2 * (segments_before - 1));
    assert_eq!(local_segments(&sim).len(), 1, "{:?}", local_segments(&sim));
    assert!(engine.partition(key()).unwrap().log().low_water() > 0);
    assert_eq!(all_messages(&mut engine), sent);
    // And: First, a timestamp and an offset in the middle read the remote tier.
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::First, 2),
        vec![0, 1]
    );
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(4), 3),
        vec![4, 5, 6]
    );
    let ts = sent[5].timestamp;
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Timestamp(ts), 1),
        vec![5]
    );
    // And: a `Next` consumer walks the whole history across both tiers.
    let mut seen = Vec::new();
    loop {
        let got = poll(&mut engine, Consumer::consumer(9), PollingStrategy::Next, 5);
        if got.is_empty() {
            break;
        }
        store_offset(
            &mut engine,
            Consumer::consumer(9),
            got.last().unwrap().offset,
        )
        .unwrap();
        seen.extend(offsets_of(&got));
    }
    assert_eq!(seen, (0..12).collect::<Vec<_>>());
}

#[test]
fn given_released_segments_when_the_process_restarts_then_the_record_brings_the_remote_tier_back() {
    // Given: segments uploaded and released.
    let (sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 10);
    let sent = all_messages(&mut engine);
    tier_until_idle(&mut engine, 20);
    assert!(engine.partition(key()).unwrap().log().low_water() > 0);

    // When: power is cut and the engine reopens with the same store.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    attach_tier(&mut engine, &remote, RELEASE_AT_ONCE);

    // Then: everything acknowledged before the cut that reached the disk is
    // served, the released part from the store.
    let got = all_messages(&mut engine);
    assert!(got.len() >= remote_keys(&remote).len() / 2, "{}", got.len());
    assert_eq!(got[..], sent[..got.len()]);
    assert_eq!(offsets_of(&got)[0], 0);
}

#[test]
fn given_an_upload_whose_answer_was_lost_when_tiering_goes_on_then_the_attempt_is_deleted_and_a_fresh_key_is_used()
 {
    // Given: the first put of a segment's log applies but answers a timeout.
    let (_sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 6);
    let sent = all_messages(&mut engine);
    remote.fail_when(
        RemoteMatcher {
            op: Some(RemoteOp::Put),
            key_contains: Some(".log".into()),
        },
        RemoteFault::After,
        0,
        1,
    );

    // When: tiering runs until idle.
    tier_until_idle(&mut engine, 20);

    // Then: the first attempt's objects are gone (its round deleted them),
    // every segment has exactly one attempt in the store, and every message
    // is served.
    let keys = remote_keys(&remote);
    assert!(
        !keys.iter().any(|k| k.ends_with("-0000000000.log")),
        "{keys:?}"
    );
    let bases: std::collections::BTreeSet<&str> = logs(&keys)
        .iter()
        .map(|k| k.rsplit('/').next().unwrap().split('-').next().unwrap())
        .collect();
    assert_eq!(bases.len(), logs(&keys).len(), "{keys:?}");
    assert_eq!(all_messages(&mut engine), sent);
    let figures = engine.tier_figures().unwrap();
    assert_eq!(figures.failed_uploads, 1);
}

#[test]
fn given_a_crash_after_the_put_and_before_its_record_when_recovered_then_the_orphan_attempt_is_deleted()
 {
    // Given: a `persisted` tiered topic; an intent recorded and its objects
    // put, then the process dies before it could record `Uploaded`.
    let (sim, mut engine) = sim_with(TopicOptions {
        segment_size: 150,
        ..persisted()
    });
    let remote = SimRemote::default();
    attach_tier(&mut engine, &remote, RELEASE_AT_ONCE);
    send_each(&mut engine, 0, 6);
    let sent = all_messages(&mut engine);
    let mut plan = engine.plan_tiering();
    assert!(!plan.is_empty());
    plan.run();
    let orphaned = remote_keys(&remote);
    assert_eq!(orphaned.len(), 2, "{orphaned:?}");

    // When: power is cut, the engine recovers, and tiering runs.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    attach_tier(&mut engine, &remote, RELEASE_AT_ONCE);
    tier_until_idle(&mut engine, 20);

    // Then: the orphaned attempt is gone, a later attempt holds the segment,
    // and everything is served.
    let keys = remote_keys(&remote);
    for k in &orphaned {
        assert!(!keys.contains(k), "{k} still in {keys:?}");
    }
    assert!(!keys.is_empty());
    assert_eq!(all_messages(&mut engine), sent);
}

#[test]
fn given_a_purged_tiered_partition_when_its_round_applies_then_the_dead_generation_prefix_is_empty()
{
    // Given: a tiered partition with its history in the store.
    let (_sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 9);
    tier_until_idle(&mut engine, 20);
    assert!(!remote_keys(&remote).is_empty());

    // When: it is purged, and new messages are sent and tiered.
    engine.purge_topic(&stream(), &topic()).unwrap();
    assert!(all_messages(&mut engine).is_empty());
    send_each(&mut engine, 0, 6);
    let fresh = all_messages(&mut engine);
    tier_until_idle(&mut engine, 20);

    // Then: no object of generation 0 is left, the new history's are there,
    // and only the new history is served.
    let keys = remote_keys(&remote);
    assert!(!keys.iter().any(|k| k.contains("/g=0/")), "{keys:?}");
    assert!(keys.iter().any(|k| k.contains("/g=1/")), "{keys:?}");
    assert_eq!(all_messages(&mut engine), fresh);
    assert!(!engine.tier_owes());
}

#[test]
fn given_a_purge_whose_deletes_fail_when_the_store_recovers_then_the_round_applies_only_after_an_empty_listing()
 {
    // Given: a tiered history, and a store whose deletes time out after
    // applying, then refuses every listing twice.
    let (_sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 9);
    tier_until_idle(&mut engine, 20);
    remote.fail_when(
        RemoteMatcher::op(RemoteOp::Delete),
        RemoteFault::After,
        0,
        3,
    );
    remote.fail_when(RemoteMatcher::op(RemoteOp::List), RemoteFault::Before, 0, 2);

    // When: the partition is purged and tiering is retried.
    engine.purge_topic(&stream(), &topic()).unwrap();
    engine.tier_pass();
    assert!(engine.tier_owes(), "applied while the store failed");
    tier_until_idle(&mut engine, 30);

    // Then: the dead generation's prefix is empty and the round is done.
    let keys = remote_keys(&remote);
    assert!(!keys.iter().any(|k| k.contains("/g=0/")), "{keys:?}");
    assert!(!engine.tier_owes());
}

#[test]
fn given_expired_remote_segments_when_tiering_runs_then_they_are_no_longer_served_and_are_deleted()
{
    // Given: a tiered topic with an expiry, its history in the store.
    let clock = std::sync::Arc::new(ManualClock::new(START_MICROS));
    let sim = new_sim();
    let (mut engine, _) = open_sim_with_clock(&sim, clock.clone());
    setup_with_retention(&mut engine, small_segments(), 60_000_000, 0);
    let remote = SimRemote::default();
    attach_tier(&mut engine, &remote, RELEASE_AT_ONCE);
    send_each(&mut engine, 0, 9);
    tier_until_idle(&mut engine, 20);
    let before = remote_keys(&remote).len();
    assert!(before > 0);

    // When: the clock passes the expiry and tiering runs.
    clock.advance(120_000_000);
    tier_until_idle(&mut engine, 20);

    // Then: the expired remote segments are gone from the store and from
    // polls; what is left starts at a segment boundary.
    let keys = remote_keys(&remote);
    assert!(keys.len() < before, "{keys:?}");
    let got = all_messages(&mut engine);
    assert!(
        got.first().is_none_or(|m| m.offset > 0),
        "{:?}",
        offsets_of(&got)
    );
}

#[test]
fn given_a_deleted_tiered_topic_when_its_deletion_applies_then_its_prefix_is_empty_and_a_new_topic_gets_a_new_incarnation()
 {
    // Given: a tiered topic with objects in the store.
    let (_sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 9);
    tier_until_idle(&mut engine, 20);
    let old = remote_keys(&remote);
    assert!(!old.is_empty());

    // When: the topic is deleted and the reconciler runs its deletion.
    engine.delete_topic(&stream(), &topic()).unwrap();
    engine.reconcile_until_idle(10);

    // Then: nothing of it is left in the store.
    assert_eq!(remote_keys(&remote), Vec::<String>::new());
    // And: the topic created again under the same ids uploads under another
    // incarnation's prefix, and serves only its own messages.
    engine
        .create_topic(&stream(), None, TOPIC, 1, small_segments(), 0, 0, 1)
        .unwrap();
    send_each(&mut engine, 0, 6);
    let fresh = all_messages(&mut engine);
    tier_until_idle(&mut engine, 20);
    let new = remote_keys(&remote);
    assert!(!new.is_empty());
    let incarnation = |k: &String| {
        k.split('/')
            .find(|s| s.starts_with("i="))
            .map(str::to_string)
    };
    assert_ne!(
        incarnation(&new[0]),
        incarnation(&old[0]),
        "{new:?} / {old:?}"
    );
    assert_eq!(all_messages(&mut engine), fresh);
}

#[test]
fn given_a_deletion_while_the_store_is_down_when_it_comes_back_then_the_deletion_applies_only_after_the_prefix_is_empty()
 {
    // Given: a tiered topic with objects, and a store that refuses listings
    // three times.
    let (sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 9);
    tier_until_idle(&mut engine, 20);
    remote.fail_when(RemoteMatcher::op(RemoteOp::List), RemoteFault::Before, 0, 3);

    // When: the topic is deleted, and the reconciler runs once.
    engine.delete_topic(&stream(), &topic()).unwrap();
    engine.reconcile_at(u64::MAX);

    // Then: the deletion is still pending and the partition's record is
    // still on disk (it says which prefix to clean).
    assert!(engine.pending_deletions().next().is_some());
    assert!(!segment_files(&sim, std::path::Path::new(DATA_DIR), "log").is_empty());
    // And: once the store answers, the deletion applies and the prefix is empty.
    engine.reconcile_until_idle(10);
    assert!(engine.pending_deletions().next().is_none());
    assert_eq!(remote_keys(&remote), Vec::<String>::new());
}

#[test]
fn given_a_put_that_lands_after_its_attempt_was_cleaned_up_when_the_sweep_runs_then_it_goes_only_after_the_grace()
 {
    // Given: a tiered engine whose sweep runs every pass with a 60 s grace,
    // and whose first log put times out but lands late.
    let clock = std::sync::Arc::new(ManualClock::new(START_MICROS));
    let sim = new_sim();
    let (mut engine, _) = open_sim_with_clock(&sim, clock.clone());
    setup(&mut engine, small_segments());
    let remote = SimRemote::default();
    attach_tier_with(&mut engine, &remote, RELEASE_AT_ONCE, |c| {
        c.orphan_grace_ms = 60_000;
        c.sweep_period_ms = 0;
    });
    send_each(&mut engine, 0, 9);
    let sent = all_messages(&mut engine);
    remote.fail_when(
        RemoteMatcher {
            op: Some(RemoteOp::Put),
            key_contains: Some(".log".into()),
        },
        RemoteFault::Late { delay: 1_000_000 },
        0,
        1,
    );
    tier_until_idle(&mut engine, 20);
    assert_eq!(engine.tier_figures().unwrap().failed_uploads, 1);
    // The network drains: the put lands, named by no record any more.
    remote.settle();
    let orphan = remote_keys(&remote)
        .into_iter()
        .find(|k| k.ends_with("-0000000000.log"))
        .expect("the late put landed");

    // When: sweeps run before the grace has passed.
    engine.tier_pass();
    clock.advance(30_000_000);
    engine.tier_pass();

    // Then: it is kept.
    assert!(remote_keys(&remote).contains(&orphan));

    // When: the grace passes.
    clock.advance(31_000_000);
    engine.tier_pass();
    engine.tier_pass();

    // Then: it is gone, and nothing a record names went with it.
    let keys = remote_keys(&remote);
    assert!(!keys.contains(&orphan), "{keys:?}");
    assert!(!keys.is_empty());
    assert_eq!(all_messages(&mut engine), sent);
    assert_eq!(engine.tier_figures().unwrap().orphans_deleted, 1);
}

#[test]
fn given_a_capped_tiered_topic_when_its_history_outgrows_the_cap_then_the_oldest_remote_segments_go_and_stats_count_both_tiers()
 {
    // Given: a tiered topic capped at about four segments, its history in
    // the store and released locally.
    let sim = new_sim();
    let mut engine = sim_engine(&sim);
    setup_with_retention(&mut engine, small_segments(), 0, 600);
    let remote = SimRemote::default();
    attach_tier(&mut engine, &remote, RELEASE_AT_ONCE);
    send_each(&mut engine, 0, 6);
    tier_until_idle(&mut engine, 20);
    // Then: Iggy's figures count the released messages too.
    assert_eq!(engine.topic_stats(0, 0).0, 6);

    // When: the history grows well past the cap.
    send_each(&mut engine, 6, 24);
    tier_until_idle(&mut engine, 30);

    // Then: the topic's size over both tiers is back within the cap (the
    // active segment aside), the oldest messages are gone from polls, and
    // the newest are all served in order.
    let (messages, bytes) = engine.topic_stats(0, 0);
    assert!(bytes <= 600 + 150, "{bytes} bytes");
    let got = offsets_of(&all_messages(&mut engine));
    assert_eq!(got.len() as u64, messages, "{got:?}");
    assert!(got[0] > 0, "{got:?}");
    assert_eq!(got, (got[0]..30).collect::<Vec<_>>());
    // And: the store no longer holds the expired segments.
    let first_log = logs(&remote_keys(&remote))
        .first()
        .map(|k| k.rsplit('/').next().unwrap().to_string());
    assert!(first_log.is_some_and(|k| !k.starts_with("00000000000000000000-")));
}

// ---- crash points across both doors ----------------------------------------

/// The window every crash point falls in: tiering, releases and their
/// cleanup, a purge, new sends, and tiering again.
fn tier_purge_window(engine: &mut Engine) -> Vec<(u64, String)> {
    for _ in 0..4 {
        engine.tier_pass();
        engine.reconcile_at(u64::MAX);
    }
    let mut acknowledged_after = Vec::new();
    if engine.purge_topic(&stream(), &topic()).is_ok() {
        for i in 100..104u64 {
            if let Ok(sent) = try_send(engine, i, 1) {
                acknowledged_after.push((sent.base_offset, format!("m{i}")));
            }
        }
    }
    for _ in 0..4 {
        engine.tier_pass();
        engine.reconcile_at(u64::MAX);
    }
    acknowledged_after
}

/// A persisted tiered engine on `sim` with the store behind `linked`, 9
/// messages acknowledged.
fn crash_subject(sim: &SimStorage, linked: &LinkedRemote) -> (Engine, Vec<Message>) {
    let mut engine = sim_engine(sim);
    setup(
        &mut engine,
        TopicOptions {
            segment_size: 150,
            ..persisted()
        },
    );
    attach_store(
        &mut engine,
        std::sync::Arc::new(linked.clone()),
        RELEASE_AT_ONCE,
        |_| {},
    );
    send_each(&mut engine, 0, 9);
    let sent = all_messages(&mut engine);
    (engine, sent)
}

/// After recovery and tiering until idle: what is served is the old history
/// whole (the purge did not commit) or exactly the new history's
/// acknowledged messages; the store holds exactly the objects the record
/// reads, nothing of a dead generation, and nothing is owed.
fn assert_recovered(
    sim: &SimStorage,
    remote: &SimRemote,
    sent: &[Message],
    after_purge: &[(u64, String)],
    point: &str,
) {
    let (mut engine, _) = reopen(sim);
    attach_tier(&mut engine, remote, RELEASE_AT_ONCE);
    tier_until_idle(&mut engine, 30);
    let served = all_messages(&mut engine);
    let generation = engine.partition(key()).unwrap().generation();
    if generation == 0 {
        assert_eq!(served, sent, "{point}: the old history, whole");
    } else {
        let got: Vec<(u64, String)> = served
            .iter()
            .map(|m| (m.offset, String::from_utf8_lossy(&m.payload).into_owned()))
            .collect();
        for ack in after_purge {
            assert!(got.contains(ack), "{point}: {ack:?} lost; served {got:?}");
        }
        assert!(
            got.iter().all(|(_, p)| !sent
                .iter()
                .any(|m| String::from_utf8_lossy(&m.payload) == *p)),
            "{point}: a purged message is served: {got:?}"
        );
    }
    let keys = remote_keys(remote);
    let dead: Vec<&String> = keys
        .iter()
        .filter(|k| (0..generation).any(|g| k.contains(&format!("/g={g}/"))))
        .collect();
    assert!(
        dead.is_empty(),
        "{point}: dead generation objects left: {dead:?}"
    );
    assert!(!engine.tier_owes(), "{point}: tiering still owes work");
}

/// Which door a crash point is counted on.
#[derive(Debug, Clone, Copy)]
enum Door {
    Disk,
    Remote,
}

/// Operations of `door` the window makes, on an unfaulted run.
fn window_ops(door: Door) -> u64 {
    let sim = new_sim();
    let remote = SimRemote::default();
    let (mut engine, _) =
        crash_subject(&sim, &LinkedRemote::new(&remote, &sim, Default::default()));
    let count = |door| match door {
        Door::Disk => sim.op_count(),
        Door::Remote => remote.op_count(),
    };
    let from = count(door);
    tier_purge_window(&mut engine);
    count(door) - from
}

/// For every operation `i` of `door` in the window: the process dies right
/// after it (and the other door sees nothing more from it), power is cut,
/// and recovery must pass `assert_recovered`.
fn sweep_crash_points(door: Door) -> u64 {
    let total = window_ops(door);
    for i in 0..total {
        let sim = new_sim();
        let remote = SimRemote::default();
        let linked = LinkedRemote::new(&remote, &sim, Default::default());
        let (mut engine, sent) = crash_subject(&sim, &linked);
        match door {
            Door::Disk => linked.halt_storage_after(Some(sim.op_count() + i)),
            Door::Remote => linked.halt_remote_after(Some(remote.op_count() + i)),
        }
        let after_purge = tier_purge_window(&mut engine);
        drop(engine);
        sim.crash(Crash::PowerLoss);
        remote.crash();
        linked.lift_halts();
        assert_recovered(
            &sim,
            &remote,
            &sent,
            &after_purge,
            &format!("{door:?} crash point {i} of {total}"),
        );
    }
    total
}

#[test]
fn every_disk_crash_point_of_tiering_and_a_purge_loses_nothing_and_leaves_no_dead_object() {
    // Given: a persisted tiered topic with 9 messages. When: the process
    // dies after each disk operation of a window of tiering, releases, a
    // purge and new sends, and power is cut. Then: nothing acknowledged is
    // lost, nothing purged is served, no dead-generation object is left.
    let total = sweep_crash_points(Door::Disk);
    assert!(total > 50, "{total} operations");
}

#[test]
fn every_remote_crash_point_of_tiering_and_a_purge_loses_nothing_and_leaves_no_dead_object() {
    // As above, with the process dying after each remote call.
    let total = sweep_crash_points(Door::Remote);
    assert!(total > 10, "{total} calls");
}

/// A tiered topic whose first log put times out and lands `delay` calls
/// later (`u32::MAX`: only at `settle`), purged while it is in flight, then
/// tiered until idle. Returns the store's trace and keys.
fn purge_with_a_late_put(delay: u32) -> (SimRemote, Vec<sluice_remote::RemoteTraceEntry>) {
    let (_sim, remote, mut engine) = tiered_engine();
    send_each(&mut engine, 0, 6);
    remote.fail_when(
        RemoteMatcher {
            op: Some(RemoteOp::Put),
            key_contains: Some(".log".into()),
        },
        RemoteFault::Late { delay },
        0,
        1,
    );
    engine.tier_pass();
    engine.purge_topic(&stream(), &topic()).unwrap();
    tier_until_idle(&mut engine, 20);
    assert!(!engine.tier_owes());
    let trace = remote.trace();
    (remote, trace)
}

#[test]
fn given_a_late_put_landing_between_a_rounds_deletes_and_its_listing_then_the_listing_finds_it_and_the_round_deletes_it()
 {
    // Given: where the late put and the dead generation's first listing
    // fall, from a run where the put never lands before the end.
    let (_, trace) = purge_with_a_late_put(u32::MAX);
    let put = trace
        .iter()
        .find(|e| e.op == RemoteOp::Put && e.key.ends_with(".log"))
        .unwrap()
        .index;
    let list = trace
        .iter()
        .find(|e| e.op == RemoteOp::List && e.key.ends_with("/g=0"))
        .unwrap()
        .index;
    assert!(list > put + 2, "{put} {list}");

    // When: the put lands just before that listing (after the round's
    // deletes of its key).
    let (remote, trace) = purge_with_a_late_put(u32::try_from(list - put).unwrap());

    // Then: the listing found it, and the round deleted it before applying:
    // no object of the purged generation is left, and nothing more lands.
    let landed_before_list = trace
        .iter()
        .find(|e| e.index == list)
        .is_some_and(|e| !e.landed.is_empty() && e.op == RemoteOp::List);
    assert!(landed_before_list, "the put did not land at the listing");
    assert!(remote.settle().is_empty());
    let keys = remote_keys(&remote);
    assert!(!keys.iter().any(|k| k.contains("/g=0/")), "{keys:?}");
}
