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
