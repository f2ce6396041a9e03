//! Durability policies under crashes and injected faults, on the simulator:
//! what `persisted` and `buffered` acknowledge survives what they promise,
//! and nothing the engine serves after recovery is something it never wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_testkit::engine::*;

fn partial_seeds() -> impl Iterator<Item = Crash> {
    (1..=20).map(|seed| Crash::PowerLossPartial { seed })
}

fn log_path(base_offset: u64) -> PathBuf {
    sim_paths()
        .segments
        .join(segment_name(0, base_offset, "log"))
}

fn cached_len(sim: &SimStorage, path: &Path) -> usize {
    match sim.cached_view().get(path.to_str().unwrap()) {
        Some(NodeView::File(bytes)) => bytes.len(),
        other => panic!("{} is {other:?}", path.display()),
    }
}

fn with_group(engine: &mut Engine) {
    engine
        .create_group(&stream(), &topic(), None, "workers")
        .unwrap();
}

// ---- the two policies --------------------------------------------------------

/// Sends across several segments and stores offsets, new names and overwrites.
fn write_acknowledged(engine: &mut Engine) -> Vec<Message> {
    send(engine, 0, 3);
    send_each(engine, 3, 6);
    store_offset(engine, Consumer::consumer(1), 2).unwrap();
    store_offset(engine, Consumer::consumer(1), 5).unwrap();
    store_offset(engine, Consumer::group(GROUP), 7).unwrap();
    all_messages(engine)
}

fn assert_acknowledged(engine: &mut Engine, sent: &[Message], crash: Crash) {
    assert_eq!(all_messages(engine), sent, "{crash}");
    assert_eq!(
        stored_offset(engine, Consumer::consumer(1)),
        Some(5),
        "{crash}"
    );
    assert_eq!(
        stored_offset(engine, Consumer::group(GROUP)),
        Some(7),
        "{crash}"
    );
}

#[test]
fn persisted_acknowledgements_survive_power_loss() {
    let opts = TopicOptions {
        segment_size: 150,
        ..persisted()
    };
    for crash in std::iter::once(Crash::PowerLoss).chain(partial_seeds()) {
        // Given: acknowledged messages and offsets under `persisted`.
        let (sim, mut engine) = sim_with(opts);
        with_group(&mut engine);
        let sent = write_acknowledged(&mut engine);
        assert!(engine.partition(key()).unwrap().log().segment_count() > 2);

        // When: power is cut.
        let (mut engine, report) = crash_and_reopen(engine, &sim, crash);

        // Then: every one of them is back, and the log goes on densely.
        assert_acknowledged(&mut engine, &sent, crash);
        assert_eq!(report.tail_cuts, 0, "{crash}");
        assert_eq!(send(&mut engine, 9, 1).base_offset, 9, "{crash}");
        // And: what was acknowledged after recovery survives the next power loss too.
        store_offset(&mut engine, Consumer::consumer(1), 9).unwrap();
        let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
        assert_eq!(
            offsets_of(&all_messages(&mut engine)),
            (0..10).collect::<Vec<_>>()
        );
        assert_eq!(
            stored_offset(&mut engine, Consumer::consumer(1)),
            Some(9),
            "{crash}"
        );
    }
}

#[test]
fn buffered_acknowledgements_survive_a_process_crash() {
    // Given: acknowledged messages and offsets under `buffered`.
    let opts = TopicOptions {
        segment_size: 300,
        ..buffered()
    };
    let (sim, mut engine) = sim_with(opts);
    with_group(&mut engine);
    let sent = write_acknowledged(&mut engine);
    // (Nothing of it was synced.)
    assert_eq!(durable_file(&sim, &log_path(0)), None);

    // When: the process crashes (the page cache survives).
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::Process);

    // Then: all of it is served.
    assert_acknowledged(&mut engine, &sent, Crash::Process);
    assert_eq!(report.messages, 9);
    assert_eq!((report.consumer_offsets, report.group_offsets), (1, 1));
}

/// `sim run` seed 2997 (session 12): a flush's sync of a `buffered` segment
/// fails (Linux: the pages stay in the cache but are clean, not on disk),
/// the process crashes and the next one reads them back from the cache. Its
/// own flush then succeeds, and power is lost. Returns what was served
/// before the power loss and after it.
pub(crate) fn flush_after_a_failed_flush_and_a_restart() -> (Vec<String>, Vec<String>) {
    // Given: three buffered messages, a flush whose segment sync failed,
    let (sim, mut engine) = sim_with(buffered());
    send(&mut engine, 0, 3);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(engine.sync_all().is_err());
    // and a process crash, after which the messages are read back from the
    // page cache.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    let flushed = payloads_of(&all_messages(&mut engine));

    // When: the next flush succeeds and power is lost.
    engine.sync_all().unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    (flushed, payloads_of(&all_messages(&mut engine)))
}

#[test]
fn given_a_failed_flush_and_a_restart_when_the_next_flush_succeeds_then_a_power_loss_keeps_the_messages()
 {
    let (flushed, served) = flush_after_a_failed_flush_and_a_restart();
    // Then: every flushed message is served (the flush wrote the recovered
    // bytes again before its sync, since a sync writes only dirty pages).
    assert_eq!(flushed, ["m0", "m1", "m2"]);
    assert_eq!(served, flushed);
}

#[test]
fn buffered_power_loss_may_lose_data_but_never_alters_it() {
    let opts = TopicOptions {
        segment_size: 400,
        ..buffered()
    };
    for seed in 1..=30u64 {
        let (sim, mut engine) = sim_with(opts);
        with_group(&mut engine);
        // What was served at each offset, and every offset value acknowledged per consumer.
        let mut expected: BTreeMap<u64, Message> = BTreeMap::new();
        let mut acked: BTreeMap<Consumer, BTreeSet<u64>> = BTreeMap::new();
        let mut next = 0u64;
        for round in 0..3u64 {
            // Given: a few batches and offset stores, all acknowledged, none synced.
            for b in 0..6 {
                let n = 1 + (b + seed + round) % 3;
                let sent = send(&mut engine, next, n);
                next += n;
                let last = sent.base_offset + n - 1;
                for (consumer, offset) in [
                    (Consumer::consumer(1), last),
                    (Consumer::consumer(2 + (b % 2) as u32), sent.base_offset),
                    (Consumer::group(GROUP), last.saturating_sub(1)),
                ] {
                    store_offset(&mut engine, consumer, offset).unwrap();
                    acked.entry(consumer).or_default().insert(offset);
                }
            }
            for m in all_messages(&mut engine) {
                expected.insert(m.offset, m);
            }

            // When: power is cut after a random part of the writeback.
            let crash = Crash::PowerLossPartial {
                seed: seed * 100 + round,
            };
            let (e, report) = crash_and_reopen(engine, &sim, crash);
            engine = e;

            // Then: whatever is served is exactly what was served before at that offset.
            assert!(report.degraded.is_empty(), "{crash}: {:?}", report.degraded);
            let recovered = all_messages(&mut engine);
            let offsets = offsets_of(&recovered);
            assert!(
                offsets.windows(2).all(|w| w[0] < w[1]),
                "{crash}: {offsets:?}"
            );
            for m in &recovered {
                assert_eq!(
                    Some(m),
                    expected.get(&m.offset),
                    "{crash}: offset {}",
                    m.offset
                );
            }
            // And: a stored offset is absent or one that was acknowledged for that consumer.
            for (consumer, values) in &acked {
                if let Some(v) = stored_offset(&mut engine, *consumer) {
                    assert!(values.contains(&v), "{crash}: {consumer:?} recovered {v}");
                }
            }
            // And: the next message never reuses an offset that is served.
            // (That it lands right after the last one is
            // `empty_trailing_segments_after_power_loss_do_not_shift_offsets`.)
            let probe = send(&mut engine, next, 1);
            next += 1;
            assert!(
                recovered
                    .last()
                    .is_none_or(|m| probe.base_offset > m.offset),
                "{crash}"
            );
            expected = recovered.into_iter().map(|m| (m.offset, m)).collect();
        }
    }
}

#[test]
fn empty_trailing_segments_after_power_loss_do_not_shift_offsets() {
    // Given: buffered messages over three segments; background writeback made
    // every segment name durable but only the first segment's bytes.
    let opts = TopicOptions {
        segment_size: 150,
        ..buffered()
    };
    let (sim, mut engine) = sim_with(opts);
    send_each(&mut engine, 0, 8);
    let bases: Vec<u64> = segment_files(&**engine.storage(), Path::new(DATA_DIR), "log")
        .iter()
        .map(|n| n[21..41].parse().unwrap())
        .collect();
    assert!(bases.len() >= 3, "{bases:?}");
    sim.open(&log_path(0), OpenMode::ReadWrite)
        .unwrap()
        .sync()
        .unwrap();
    sim.sync_dir(&sim_paths().segments).unwrap();

    // When: power is cut.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the partition reports and serves the messages it has, and no more.
    let kept: Vec<u64> = (0..bases[1]).collect();
    assert_eq!(offsets_of(&all_messages(&mut engine)), kept);
    let last = *kept.last().unwrap();
    let polled = engine
        .poll(
            &stream(),
            &topic(),
            PARTITION,
            Consumer::consumer(1),
            PollingStrategy::Last,
            1,
            false,
        )
        .unwrap();
    assert_eq!(offsets_of(&polled.messages), [last]);
    assert_eq!(polled.current_offset, last);
    // And: the next message gets the next offset, and reads find it.
    assert_eq!(send(&mut engine, 100, 1).base_offset, last + 1);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(last + 1), 10),
        [last + 1]
    );
}

#[test]
fn an_empty_segment_between_two_that_kept_their_bytes_is_skipped() {
    // Given: buffered messages over three segments; background writeback made
    // every segment name durable, and the bytes of the first and the third.
    let opts = TopicOptions {
        segment_size: 150,
        ..buffered()
    };
    let (sim, mut engine) = sim_with(opts);
    send_each(&mut engine, 0, 8);
    let bases: Vec<u64> = segment_files(&**engine.storage(), Path::new(DATA_DIR), "log")
        .iter()
        .map(|n| n[21..41].parse().unwrap())
        .collect();
    assert!(bases.len() >= 3, "{bases:?}");
    for base in [bases[0], bases[2]] {
        sim.open(&log_path(base), OpenMode::ReadWrite)
            .unwrap()
            .sync()
            .unwrap();
    }
    sim.sync_dir(&sim_paths().segments).unwrap();

    // When: power is cut.
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the surviving messages are served at the offsets they were given,
    // reads step over the lost ones, and nothing is reported as damaged.
    assert!(report.degraded.is_empty(), "{:?}", report.degraded);
    let third_end = bases.get(3).copied().unwrap_or(8);
    let kept: Vec<u64> = (0..bases[1]).chain(bases[2]..third_end).collect();
    assert_eq!(offsets_of(&all_messages(&mut engine)), kept);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(bases[1]), 1),
        [bases[2]]
    );
    // And: the empty segment is left in place (only purge cleanup unlinks,
    // ADR 0008) but not served, and the next message follows the last.
    assert!(
        sim.exists(&log_path(bases[1])).unwrap(),
        "recovery unlinked the empty segment outside the purge protocol"
    );
    let last = *kept.last().unwrap();
    assert_eq!(send(&mut engine, 100, 1).base_offset, last + 1);
}

// ---- torn and failed appends -------------------------------------------------

fn fail_next_log_write() -> (OpMatcher, Fault) {
    (
        OpMatcher::kind(OpKind::Write).path_contains(".log"),
        Fault::io(FaultMode::TornWrite),
    )
}

#[test]
fn a_torn_append_is_cut_at_once_and_never_served() {
    // Given: three acknowledged messages under `persisted`.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    let acked_len = cached_len(&sim, &log_path(0));

    // When: the next batch's write tears.
    let (matcher, fault) = fail_next_log_write();
    sim.fail_when(matcher, fault, 0, 1);
    let err = try_send(&mut engine, 3, 2).unwrap_err();
    assert!(matches!(err, EngineError::Storage(_)), "{err}");

    // Then: the torn bytes were truncated away at once and are never served.
    assert_eq!(cached_len(&sim, &log_path(0)), acked_len);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);
    // And: the next append takes the offset the failed one did not.
    assert_eq!(send(&mut engine, 5, 1).base_offset, 3);
    for crash in [Crash::Process, Crash::PowerLoss] {
        let fork = sim.fork();
        fork.crash(crash);
        let (mut engine, report) = reopen(&fork);
        assert_eq!(report.tail_cuts, 0, "{crash}");
        let all = all_messages(&mut engine);
        assert_eq!(payloads_of(&all), ["m0", "m1", "m2", "m5"], "{crash}");
        assert_eq!(offsets_of(&all), [0, 1, 2, 3], "{crash}");
    }
}

#[test]
fn a_torn_append_left_on_disk_is_cut_at_recovery_and_never_served() {
    // Given: three acknowledged messages; the next write tears and the
    // clean-up truncate fails too, so the torn prefix stays in the file.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    let acked_len = cached_len(&sim, &log_path(0));
    let (matcher, fault) = fail_next_log_write();
    sim.fail_when(matcher, fault, 0, 1);
    sim.fail_when(
        OpMatcher::kind(OpKind::Truncate).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 3, 20).is_err());
    let torn_len = cached_len(&sim, &log_path(0));
    assert!(torn_len > acked_len, "the torn prefix must be in the file");
    // The running engine never serves it.
    assert_eq!(offsets_of(&all_messages(&mut engine)), [0, 1, 2]);

    // When: the process crashes. Then: recovery cuts the tail and reports it.
    {
        let fork = sim.fork();
        fork.crash(Crash::Process);
        let (mut engine, report) = reopen(&fork);
        assert_eq!(report.tail_cuts, 1);
        let (_, cut) = &report.per_partition[&key()].log.tail_cuts[0];
        assert!(
            matches!(cut, sluice_server::partition::log::ScanIssue::TailCut { position, bytes, .. }
                if *position == acked_len as u64 && *bytes == (torn_len - acked_len) as u64),
            "{cut:?}"
        );
        assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);
        assert_eq!(send(&mut engine, 23, 1).base_offset, 3);
        let (mut engine, report) = crash_and_reopen(engine, &fork, Crash::PowerLoss);
        assert_eq!(report.tail_cuts, 0);
        assert_eq!(
            payloads_of(&all_messages(&mut engine)),
            ["m0", "m1", "m2", "m23"]
        );
    }
    // When: power is cut after any part of the writeback. Then: never served, offsets dense.
    for crash in partial_seeds() {
        let fork = sim.fork();
        fork.crash(crash);
        let (mut engine, report) = reopen(&fork);
        assert!(report.tail_cuts <= 1, "{crash}");
        assert_eq!(
            payloads_of(&all_messages(&mut engine)),
            ["m0", "m1", "m2"],
            "{crash}"
        );
        assert_eq!(send(&mut engine, 23, 1).base_offset, 3, "{crash}");
    }
    // When: the same engine goes on. Then: the next batch overwrites the torn bytes.
    assert_eq!(send(&mut engine, 23, 1).base_offset, 3);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(
        payloads_of(&all_messages(&mut engine)),
        ["m0", "m1", "m2", "m23"]
    );
}

#[test]
fn a_torn_append_whose_cleanup_failed_is_cut_before_its_segment_is_sealed() {
    // Given: a persisted segment; the next write tears and the clean-up
    // truncate fails too, so the torn prefix stays beyond the segment's end.
    let opts = TopicOptions {
        segment_size: 400,
        ..persisted()
    };
    let (sim, mut engine) = sim_with(opts);
    send(&mut engine, 0, 3);
    let acked_len = cached_len(&sim, &log_path(0));
    let (matcher, fault) = fail_next_log_write();
    sim.fail_when(matcher, fault, 0, 1);
    sim.fail_when(
        OpMatcher::kind(OpKind::Truncate).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 3, 2).is_err());
    assert_eq!(engine.partition(key()).unwrap().log().segment_count(), 1);
    assert!(cached_len(&sim, &log_path(0)) > acked_len);

    // When: the next batch does not fit, so it seals that segment and starts
    // a new one; then the power is cut.
    let sent = send(&mut engine, 5, 20);
    assert_eq!(sent.base_offset, 3);
    assert_eq!(engine.partition(key()).unwrap().log().segment_count(), 2);
    assert_eq!(cached_len(&sim, &log_path(0)), acked_len);
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the sealed segment ends at its last acknowledged batch, so
    // recovery neither degrades the partition nor cuts anything.
    assert!(report.degraded.is_empty(), "{:?}", report.degraded);
    assert_eq!(report.tail_cuts, 0);
    assert_eq!(durable_file(&sim, &log_path(0)).unwrap().len(), acked_len);
    let all = all_messages(&mut engine);
    assert_eq!(offsets_of(&all), (0..23).collect::<Vec<_>>());
    assert_eq!(payloads_of(&all)[3], "m5");
}

#[test]
fn a_failed_persisted_sync_is_not_acknowledged_and_later_sends_are_durable() {
    // Given: acknowledged messages in the active segment.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);

    // When: the segment's file sync fails for the next send.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(matches!(
        try_send(&mut engine, 3, 1),
        Err(EngineError::Storage(_))
    ));

    // Then: the failed message is not served, the next send takes its offset,
    // and everything acknowledged survives power loss.
    assert_eq!(offsets_of(&all_messages(&mut engine)), [0, 1, 2]);
    assert_eq!(send(&mut engine, 4, 1).base_offset, 3);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    let all = all_messages(&mut engine);
    assert_eq!(payloads_of(&all), ["m0", "m1", "m2", "m4"]);
    assert_eq!(offsets_of(&all), [0, 1, 2, 3]);
}

#[test]
fn a_failed_persisted_send_into_a_new_segment_does_not_lose_the_next_acknowledged_one() {
    // Given: a segment size so small that every batch starts a new segment.
    let opts = TopicOptions {
        segment_size: 1,
        ..persisted()
    };
    let (sim, mut engine) = sim_with(opts);
    send(&mut engine, 0, 1);

    // When: the file sync of the new segment fails, and the retry succeeds.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 1, 1).is_err());
    assert_eq!(send(&mut engine, 2, 1).base_offset, 1);

    // Then: both acknowledged messages survive power loss. (The retry went
    // into the segment the failed send created, whose name no directory sync
    // has covered yet; a later roll would sync the directory and hide that.)
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m2"]);
}

#[test]
fn a_failed_segment_dir_sync_is_redone_by_the_next_persisted_send() {
    // Given: the directory sync that makes the first segment's name durable fails.
    let (sim, mut engine) = sim_with(persisted());
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 0, 1).is_err());

    // When: the next send is acknowledged, then power is cut.
    let sent = send(&mut engine, 1, 1);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the acknowledged message is there, at the offset it was given.
    let all = all_messages(&mut engine);
    let got = all.iter().find(|m| m.offset == sent.base_offset);
    assert_eq!(got.map(|m| m.payload.to_vec()), Some(payload(1)));
}

#[test]
fn a_segment_whose_dir_sync_failed_before_a_restart_is_made_durable_later() {
    // Given: the first segment's directory sync failed (Linux drops the dirty
    // entry), then the process restarted.
    let (sim, mut engine) = sim_with(persisted());
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 0, 1).is_err());
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);

    // When: a send into that same segment is acknowledged, then power is cut.
    let sent = send(&mut engine, 1, 1);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the acknowledged message survived.
    let all = all_messages(&mut engine);
    let got = all.iter().find(|m| m.offset == sent.base_offset);
    assert_eq!(got.map(|m| m.payload.to_vec()), Some(payload(1)));
}

/// Fails the next sync of the partition directory `name` (`segments`,
/// `consumers`), before it takes effect.
fn fail_next_dir_sync(sim: &SimStorage, name: &str) {
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with(format!("/{name}")),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
}

fn fail_next_segments_dir_sync(sim: &SimStorage) {
    fail_next_dir_sync(sim, "segments");
}

/// `sluice sim run --seed 3707 --steps 2000`, reduced (issue 12): a roll that
/// created the new segment's files and then failed left their names known to
/// no directory tracker, so a later failed sync of `segments/` dropped them
/// with nothing to redo, and the send that reused the files was acknowledged
/// under a name no sync ever made durable.
#[test]
fn a_segment_created_by_a_failed_roll_is_made_durable_by_the_send_that_reuses_it() {
    // Given/When: see `failed_roll_then_dropped_names`.
    let (name_durable, survivors) = failed_roll_then_dropped_names();
    // Then: the segment's name is durable, and both acknowledged messages
    // survive a power loss.
    assert!(name_durable, "name not durable");
    assert_eq!(survivors, ["m2", "m3"]);
}

/// The scenario of the test above, shared with the teeth test that turns the
/// mechanism off (`sim_teeth`): whether the new segment's name is durable
/// before the power loss, and the payloads served after it.
pub(crate) fn failed_roll_then_dropped_names() -> (bool, Vec<String>) {
    // Given: a purged partition whose cleanup is still pending (its sync of
    // `segments/` failed), so the reconciler will sync that directory again.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 1);
    fail_next_segments_dir_sync(&sim);
    engine
        .purge_partition(&stream(), &topic(), PARTITION)
        .unwrap();
    engine.reconcile();
    assert_eq!(engine.reconciler().pending().len(), 1);

    // When: the first send of the new generation creates the segment's files,
    // then fails (the roll's length check of the new index, which decides
    // whether a leftover needs truncating), ...
    sim.fail_when(
        OpMatcher::kind(OpKind::Len).path_contains(".idx"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 1, 1).is_err());
    let new_log = sim_paths().segments.join(segment_name(1, 0, "log"));
    assert!(sim.cached_view().contains_key(new_log.to_str().unwrap()));
    // ... the cleanup's next sync of `segments/` fails (Linux drops every
    // dirty entry, the new names included), the one after succeeds ...
    fail_next_segments_dir_sync(&sim);
    engine.reconcile_until_idle(10);
    assert!(engine.reconciler().pending().is_empty());
    // ... and two sends into the files the failed roll left are acknowledged,
    // then the power is cut.
    send(&mut engine, 2, 1);
    send(&mut engine, 3, 1);
    let name_durable = durable_file(&sim, &new_log).is_some();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    (name_durable, payloads_of(&all_messages(&mut engine)))
}

// ---- directory sync of new offset names --------------------------------------

fn fail_next_consumers_dir_sync(sim: &SimStorage) {
    fail_next_dir_sync(sim, "consumers");
}

#[test]
fn a_retried_persisted_store_after_a_failed_dir_sync_survives_power_loss() {
    // Given: a persisted store for a new consumer whose directory sync fails.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 5);
    fail_next_consumers_dir_sync(&sim);
    assert!(matches!(
        store_offset(&mut engine, Consumer::consumer(1), 2),
        Err(EngineError::Storage(_))
    ));
    // (Under Linux semantics a plain retried sync would now persist nothing.)
    assert_eq!(durable_file(&sim, &sim_paths().consumers.join("1")), None);

    // When: the store is retried and acknowledged, then power is cut.
    store_offset(&mut engine, Consumer::consumer(1), 3).unwrap();
    assert_eq!(sim.list_dir(&sim_paths().consumers).unwrap(), ["1"]);
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the retried value is there.
    assert_eq!(report.consumer_offsets, 1);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(3));
}

#[test]
fn another_consumers_store_also_redoes_a_failed_dir_sync() {
    // Given: consumer 1's store failed at the directory sync and was never retried.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 5);
    fail_next_consumers_dir_sync(&sim);
    assert!(store_offset(&mut engine, Consumer::consumer(1), 2).is_err());
    // When: consumer 2 stores (acknowledged), then power is cut.
    store_offset(&mut engine, Consumer::consumer(2), 4).unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    // Then: consumer 2's offset is there; consumer 1's is absent or the value it tried.
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(2)), Some(4));
    let c1 = stored_offset(&mut engine, Consumer::consumer(1));
    assert!(c1.is_none() || c1 == Some(2), "{c1:?}");
}

#[test]
fn an_offset_whose_dir_sync_failed_before_a_restart_is_made_durable_later() {
    // Given: a new consumer's directory sync failed, then the process restarted.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 5);
    fail_next_consumers_dir_sync(&sim);
    assert!(store_offset(&mut engine, Consumer::consumer(1), 2).is_err());
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);

    // When: the same consumer stores again (acknowledged), then power is cut.
    store_offset(&mut engine, Consumer::consumer(1), 3).unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the acknowledged value survived.
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(3));
}

// ---- directory sync of new partitions ----------------------------------------

#[test]
fn a_failed_dir_sync_while_creating_a_topic_is_redone_by_the_retry() {
    // Every directory create_topic syncs, from the new partition up to the data dir.
    let dirs = [
        "/partitions/0",
        "/partitions",
        "/topics/0",
        "/topics",
        "/streams/0",
        "/streams",
        "/data",
    ];
    for dir in dirs {
        for restart in [false, true] {
            let case = format!("sync of {dir} failed, restart between: {restart}");
            // Given: a stream; the first sync of `dir` while creating its topic
            // fails (under Linux semantics its dirty names are dropped).
            let sim = new_sim();
            let mut engine = sim_engine(&sim);
            engine.create_stream(None, STREAM).unwrap();
            sim.fail_when(
                OpMatcher::kind(OpKind::SyncDir).path_ends_with(dir),
                Fault::io(FaultMode::Before),
                0,
                1,
            );
            let err = engine
                .create_topic(&stream(), None, TOPIC, 1, persisted(), 0, 0, 1)
                .unwrap_err();
            assert!(matches!(err, EngineError::Storage(_)), "{case}: {err}");
            if restart {
                drop(engine);
                sim.crash(Crash::Process);
                engine = reopen(&sim).0;
            }

            // When: the retry is acknowledged, a persisted send too, then power is cut.
            let t = engine
                .create_topic(&stream(), None, TOPIC, 1, persisted(), 0, 0, 1)
                .unwrap();
            assert_eq!(t.id, 0, "{case}");
            send(&mut engine, 0, 1);
            let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

            // Then: the topic and the message are there.
            assert!(report.degraded.is_empty(), "{case}: {:?}", report.degraded);
            assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0"], "{case}");
        }
    }
}

// ---- resource lifecycle vs. offsets ------------------------------------------

#[test]
fn a_recreated_group_never_inherits_a_deleted_groups_offset() {
    // Given: buffered offsets; group 0 stored offset 4, and background
    // writeback happened to make that record durable.
    let (sim, mut engine) = sim_with(options(Durability::Persisted, Durability::Buffered));
    send(&mut engine, 0, 5);
    with_group(&mut engine);
    store_offset(&mut engine, Consumer::group(GROUP), 4).unwrap();
    let group_file = sim_paths().groups.join(GROUP.to_string());
    sim.open(&group_file, OpenMode::ReadWrite)
        .unwrap()
        .sync()
        .unwrap();
    sim.sync_dir(&sim_paths().groups).unwrap();

    // When: the group is deleted (its buffered unlink never synced) and a new
    // group is created under the freed id 0 (an explicit id: the server's own
    // choice never reuses one, as Iggy's does not); both acknowledged, then
    // power is cut.
    engine
        .delete_group(&stream(), &topic(), &"workers".into())
        .unwrap();
    engine.reconcile();
    let g = engine
        .create_group(&stream(), &topic(), Some(GROUP), "newcomers")
        .unwrap();
    assert_eq!(g.id, GROUP, "the explicit id is reused");
    assert_eq!(stored_offset(&mut engine, Consumer::group(GROUP)), None);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: group 0 is the new one, with no offset it never stored, although
    // the deleted group's file had been durable; `Next` starts at 0.
    assert_eq!(
        engine
            .group(&stream(), &topic(), &GROUP.into())
            .unwrap()
            .name,
        "newcomers"
    );
    assert_eq!(stored_offset(&mut engine, Consumer::group(GROUP)), None);
    assert_eq!(
        offsets_of(&poll(
            &mut engine,
            Consumer::group(GROUP),
            PollingStrategy::Next,
            1
        )),
        [0]
    );

    // When: a client explicitly asks for an id no group ever had.
    let g = engine
        .create_group(&stream(), &topic(), Some(5), "explicit")
        .unwrap();
    assert_eq!(g.id, 5);
    // Then: the next server-assigned id continues past every id ever used
    // (Iggy 0.11 never gives a group id out again within a topic).
    let g = engine
        .create_group(&stream(), &topic(), None, "later")
        .unwrap();
    assert_eq!(g.id, 6);
}

// ---- the data directory itself -------------------------------------------------

#[test]
fn a_data_dir_the_engine_created_survives_power_loss() {
    // Given: a disk with no data directory yet; the engine creates it.
    let sim = SimStorage::with_seed(7);
    let mut engine = sim_engine(&sim);
    setup(&mut engine, persisted());
    send(&mut engine, 0, 1);

    // When: power is cut after the (persisted) send was acknowledged.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the stream, topic and message are there.
    assert!(engine.stream(&stream()).is_ok());
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0"]);
}

#[test]
fn a_data_dir_the_engine_created_survives_power_loss_even_if_the_first_open_failed() {
    // Given: the first open creates the data directory, but the sync of its
    // parent fails (under Linux semantics the new entry's dirty state is dropped).
    let sim = SimStorage::with_seed(7);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    let storage: std::sync::Arc<dyn DurableStorage> = std::sync::Arc::new(sim.clone());
    let clock = std::sync::Arc::new(ManualClock::new(START_MICROS));
    assert!(Engine::open(storage, clock, config(Path::new(DATA_DIR))).is_err());

    // When: the retried open succeeds and a persisted send is acknowledged,
    // then power is cut.
    let mut engine = sim_engine(&sim);
    setup(&mut engine, persisted());
    send(&mut engine, 0, 1);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the stream, topic and message are there.
    assert!(engine.stream(&stream()).is_ok());
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0"]);
}

// ---- corruption ----------------------------------------------------------------

#[test]
fn a_flipped_byte_inside_a_sealed_segment_is_reported_by_path_when_read() {
    // Given: sealed segments long enough to hold several index entries.
    let opts = TopicOptions {
        segment_size: 16 * 1024,
        ..persisted()
    };
    let (sim, mut engine) = sim_with(opts);
    for b in 0..60 {
        send(&mut engine, b * 20, 20);
    }
    assert!(engine.partition(key()).unwrap().log().segment_count() >= 3);
    let sealed = log_path(0);
    let sealed_len = cached_len(&sim, &sealed);
    assert!(sealed_len > 3 * 4096);

    // When: one byte inside its first batch flips on disk, and the engine restarts.
    drop(engine);
    flip_byte(&sim, &sealed, 100);
    let (mut engine, report) = reopen(&sim);
    assert!(report.degraded.is_empty(), "{:?}", report.degraded);

    // Then: reading across it is a typed error naming the file; nothing is guessed.
    let err = try_poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::Offset(0),
        10,
    )
    .unwrap_err();
    match err {
        EngineError::CorruptFile { path, offset, .. } => {
            assert_eq!(path, sealed);
            assert_eq!(offset, 0);
        }
        other => panic!("expected CorruptFile, got {other}"),
    }
    // And: messages in later segments are still served.
    let tail = poll(&mut engine, Consumer::consumer(1), PollingStrategy::Last, 5);
    assert_eq!(offsets_of(&tail), (1195..1200).collect::<Vec<_>>());
}

#[test]
fn a_flipped_byte_in_an_offset_record_is_skipped_at_recovery() {
    // Given: one stored offset (its file holds a single record).
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 5);
    store_offset(&mut engine, Consumer::consumer(1), 3).unwrap();
    store_offset(&mut engine, Consumer::consumer(2), 4).unwrap();
    drop(engine);
    let file = sim_paths().consumers.join("1");
    let len = sim.read_file(&file).unwrap().len() as u64;

    // When: a byte of that record flips.
    flip_byte(&sim, &file, len - 3);
    let (mut engine, report) = reopen(&sim);

    // Then: recovery reports and skips it, without panicking, and serves the rest.
    assert_eq!(report.corrupt_offset_records, 1);
    assert_eq!(report.consumer_offsets, 1);
    assert_eq!(
        report.per_partition[&key()].consumers.corrupt,
        vec!["1".to_string()]
    );
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(2)), Some(4));
    assert_eq!(offsets_of(&all_messages(&mut engine)), [0, 1, 2, 3, 4]);
    // And: the consumer can store again, and that survives power loss.
    store_offset(&mut engine, Consumer::consumer(1), 1).unwrap();
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(report.corrupt_offset_records, 0);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(1));
}

#[test]
fn a_flipped_byte_in_the_last_batch_of_a_sealed_persisted_segment_is_not_cut_as_torn() {
    // Given: acknowledged, synced batches over several segments.
    let opts = TopicOptions {
        segment_size: 400,
        ..persisted()
    };
    let (sim, mut engine) = sim_with(opts);
    send_each(&mut engine, 0, 20);
    let sealed = log_path(0);
    let sealed_bytes = sim.read_file(&sealed).unwrap();
    let in_first_segment = engine.partition(key()).unwrap().log().segment_count() > 1;
    assert!(in_first_segment);

    // When: a byte of the sealed segment's last batch flips on disk.
    drop(engine);
    flip_byte(&sim, &sealed, sealed_bytes.len() as u64 - 3);
    let (mut engine, report) = reopen(&sim);

    // Then: the damage is reported as corruption (degraded partition or a
    // typed read error), the file is left as found, and no acknowledged
    // message silently disappears from the middle of the log.
    let read = try_poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::Offset(0),
        100,
    );
    let reported = !report.degraded.is_empty()
        || matches!(
            read,
            Err(EngineError::CorruptFile { .. }) | Err(EngineError::Degraded { .. })
        );
    assert!(
        reported,
        "recovery cut {:?}; served offsets {:?}",
        report.tail_cuts,
        read.map(|m| offsets_of(&m))
    );
    assert_eq!(sim.read_file(&sealed).unwrap().len(), sealed_bytes.len());
}

#[test]
fn sync_all_makes_buffered_writes_survive_power_loss() {
    // Given: a buffered topic with acknowledged messages, an offset and a delete.
    let (sim, mut engine) = sim_with(buffered());
    send(&mut engine, 0, 5);
    store_offset(&mut engine, Consumer::consumer(1), 3).unwrap();
    store_offset(&mut engine, Consumer::consumer(2), 2).unwrap();
    sim.sync_dir(&sim_paths().consumers).unwrap(); // consumer 2's file is durable
    engine
        .delete_offset(&stream(), &topic(), PARTITION, Consumer::consumer(2))
        .unwrap();
    // When: the engine flushes (as a graceful shutdown does), then power is cut.
    engine.sync_all().unwrap();
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let (mut engine, _) = reopen(&sim);
    // Then: everything acknowledged is there, and the delete stuck.
    assert_eq!(offsets_of(&all_messages(&mut engine)), vec![0, 1, 2, 3, 4]);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(3));
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(2)), None);
}

#[test]
fn a_batch_whose_sync_and_cut_both_failed_before_a_crash_does_not_leave_a_hole_under_the_next_acknowledged_one()
 {
    // Given: two acknowledged messages under `persisted`; the next batch's
    // file sync fails (Linux drops its dirty bytes: the disk never gets
    // them) and so does the truncate that would cut it from the page cache.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 2);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    sim.fail_when(
        OpMatcher::kind(OpKind::Truncate).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 2, 1).is_err());

    // When: the process dies, the next process (which recovers that batch
    // from the page cache) acknowledges a send, and then power is cut.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    let served = offsets_of(&all_messages(&mut engine));
    let acked = send(&mut engine, 3, 1).base_offset;
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: the acknowledged message survived: the batch it followed was
    // made durable with it, not left as a hole that recovery cuts at.
    assert_eq!(report.tail_cuts, 0);
    let all = all_messages(&mut engine);
    assert!(
        offsets_of(&all).contains(&acked),
        "{served:?} then {acked}: {:?}",
        offsets_of(&all)
    );
    assert_eq!(payloads_of(&all), ["m0", "m1", "m2", "m3"]);
}

// ---- files lost behind sluice's back ------------------------------------------

#[test]
fn a_deleted_metadata_file_next_to_partition_data_refuses_to_start_empty() {
    // Given: acknowledged messages, then the metadata file is deleted.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    drop(engine);
    sim.crash(Crash::Process);
    sim.remove_file(&Path::new(DATA_DIR).join("metadata"))
        .unwrap();

    // When: sluice starts.
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let opened = Engine::open(
        storage,
        Arc::new(ManualClock::new(RESTART_MICROS)),
        config(Path::new(DATA_DIR)),
    );

    // Then: start-up fails naming the metadata file and a data file, rather
    // than starting empty (and later removing the data as a leftover).
    match opened {
        Err(EngineError::CorruptFile { path, reason, .. }) => {
            assert_eq!(path, Path::new(DATA_DIR).join("metadata"));
            assert!(reason.contains("/partitions/0/"), "{reason}");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok((_, report)) => panic!("started empty: {report:?}"),
    }
}

#[test]
fn empty_partition_directories_left_by_a_crash_before_the_first_commit_do_not_block_start_up() {
    // Given: a fresh data directory where a crash interrupted the creation of
    // the first topic after its directories were made, before the metadata.
    let sim = new_sim();
    for dir in [
        &sim_paths().segments,
        &sim_paths().consumers,
        &sim_paths().groups,
    ] {
        sim.create_dir_all(dir).unwrap();
    }

    // When: sluice starts. Then: it starts empty, and the topic can be created.
    let (mut engine, report) = reopen(&sim);
    assert_eq!(report.partitions, 0);
    setup(&mut engine, persisted());
    assert_eq!(send(&mut engine, 0, 1).base_offset, 0);
}

// ---- multiple faults on one offset file or one segment ------------------------

/// The faults a failed write or sync of one file can take.
fn write_or_sync_faults() -> Vec<(OpKind, FaultMode)> {
    vec![
        (OpKind::Write, FaultMode::Before),
        (OpKind::Write, FaultMode::After),
        (OpKind::Write, FaultMode::TornWrite),
        (OpKind::SyncFile, FaultMode::Before),
        (OpKind::SyncFile, FaultMode::After),
    ]
}

#[test]
fn a_failed_offset_store_then_a_torn_one_never_loses_the_acknowledged_offset() {
    // Each simulator seed tears writes at other lengths.
    for seed in 1..=40 {
        for first in write_or_sync_faults() {
            for second in write_or_sync_faults() {
                for crash in [
                    Crash::Process,
                    Crash::PowerLoss,
                    Crash::PowerLossPartial { seed },
                ] {
                    check_two_failed_stores(seed, first, second, crash);
                }
            }
        }
    }
}

fn check_two_failed_stores(
    seed: u64,
    first: (OpKind, FaultMode),
    second: (OpKind, FaultMode),
    crash: Crash,
) {
    // Given: offsets 1 and 2 stored and acknowledged (persisted).
    let (sim, mut engine) = sim_seeded_with(seed, persisted());
    send(&mut engine, 0, 5);
    let c = Consumer::consumer(1);
    store_offset(&mut engine, c, 1).unwrap();
    store_offset(&mut engine, c, 2).unwrap();

    // When: the store of 3 fails, then the store of 4 fails too (e.g. 3
    // before its write lands, 4 torn): nothing more is acknowledged.
    for (value, (kind, mode)) in [(3, first), (4, second)] {
        sim.fail_when(
            OpMatcher::kind(kind).path_ends_with("/consumers/1"),
            Fault::io(mode),
            0,
            1,
        );
        assert!(
            store_offset(&mut engine, c, value).is_err(),
            "seed {seed}, {first:?} {second:?}: store of {value} did not fail"
        );
    }

    // Then: the offset served is the acknowledged one or one tried after
    // it, live and after the crash; never 1, never none.
    let allowed = [Some(2), Some(3), Some(4)];
    let live = stored_offset(&mut engine, c);
    assert!(
        allowed.contains(&live),
        "seed {seed}, {first:?} {second:?}: live {live:?}"
    );
    let (mut engine, _) = crash_and_reopen(engine, &sim, crash);
    let after = stored_offset(&mut engine, c);
    assert!(
        allowed.contains(&after),
        "seed {seed}, {first:?} {second:?} {crash:?}: {after:?} after the crash"
    );
}

#[test]
fn a_failed_offset_store_then_an_acknowledged_one_survives_power_loss() {
    for first in write_or_sync_faults() {
        for crash in [Crash::PowerLoss].into_iter().chain(partial_seeds()) {
            // Given: offset 2 acknowledged; the store of 3 fails.
            let (sim, mut engine) = sim_with(persisted());
            send(&mut engine, 0, 5);
            let c = Consumer::consumer(1);
            store_offset(&mut engine, c, 2).unwrap();
            sim.fail_when(
                OpMatcher::kind(first.0).path_ends_with("/consumers/1"),
                Fault::io(first.1),
                0,
                1,
            );
            assert!(store_offset(&mut engine, c, 3).is_err());

            // When: 4 is acknowledged, then the power fails.
            store_offset(&mut engine, c, 4).unwrap();
            let (mut engine, _) = crash_and_reopen(engine, &sim, crash);

            // Then: 4 is served.
            assert_eq!(
                stored_offset(&mut engine, c),
                Some(4),
                "{first:?} {crash:?}"
            );
        }
    }
}

/// m0 and m1 acknowledged under `persisted`; m2's file sync fails (Linux
/// drops its dirty bytes) and so does the truncate that would cut it; the
/// process dies, and the engine returned recovered m2 from the page cache.
fn a_recovered_unsynced_batch() -> (SimStorage, Engine) {
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 2);
    let log = || OpMatcher::kind(OpKind::SyncFile).path_contains(".log");
    sim.fail_when(log(), Fault::io(FaultMode::Before), 0, 1);
    sim.fail_when(
        OpMatcher::kind(OpKind::Truncate).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(try_send(&mut engine, 2, 1).is_err());
    let (engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    (sim, engine)
}

#[test]
fn a_failed_sync_after_recovering_an_unsynced_batch_does_not_lose_the_next_acknowledged_send() {
    // Given: m0 and m1 acknowledged under `persisted`; m2's file sync fails
    // (Linux drops its dirty bytes) and so does the truncate that would cut
    // it; the process dies, and the next process recovers m2 from the cache.
    let (sim, mut engine) = a_recovered_unsynced_batch();
    let log = || OpMatcher::kind(OpKind::SyncFile).path_contains(".log");

    // When: m3's file sync fails too, m4 is acknowledged, and power is cut.
    sim.fail_when(log(), Fault::io(FaultMode::Before), 0, 1);
    assert!(try_send(&mut engine, 3, 1).is_err());
    let acked = send(&mut engine, 4, 1).base_offset;
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);

    // Then: m4 survived at its offset, above no hole.
    assert_eq!(report.tail_cuts, 0);
    let all = all_messages(&mut engine);
    let got = all.iter().find(|m| m.offset == acked);
    assert_eq!(
        got.map(|m| m.payload.to_vec()),
        Some(payload(4)),
        "{:?}",
        payloads_of(&all)
    );
    assert_eq!(payloads_of(&all), ["m0", "m1", "m2", "m4"]);
}

#[test]
fn repeated_failed_syncs_of_a_segment_never_leave_a_hole_under_an_acknowledged_send() {
    // Given: two acknowledged messages, then, in one process, failed sends
    // whose syncs fail (and whose cut fails once), each fault on its own.
    for (sync_fault, cut_fails) in [
        (FaultMode::Before, false),
        (FaultMode::Before, true),
        (FaultMode::After, true),
    ] {
        for crash in [Crash::PowerLoss].into_iter().chain(partial_seeds()) {
            let (sim, mut engine) = sim_with(persisted());
            send(&mut engine, 0, 2);
            let log = || OpMatcher::kind(OpKind::SyncFile).path_contains(".log");
            sim.fail_when(log(), Fault::io(sync_fault), 0, 2);
            if cut_fails {
                sim.fail_when(
                    OpMatcher::kind(OpKind::Truncate).path_contains(".log"),
                    Fault::io(FaultMode::Before),
                    0,
                    1,
                );
            }
            let _ = try_send(&mut engine, 2, 1);
            let _ = try_send(&mut engine, 3, 1);

            // When: a send is acknowledged, then the power fails.
            let acked = send(&mut engine, 4, 1).base_offset;
            let (mut engine, _) = crash_and_reopen(engine, &sim, crash);

            // Then: it is there, and so is everything acknowledged before it.
            let all = all_messages(&mut engine);
            let got = all.iter().find(|m| m.offset == acked);
            assert_eq!(
                got.map(|m| m.payload.to_vec()),
                Some(payload(4)),
                "{sync_fault:?} cut fails {cut_fails} {crash:?}: {:?}",
                payloads_of(&all)
            );
            assert_eq!(&payloads_of(&all)[..2], ["m0", "m1"]);
        }
    }
}

#[test]
fn a_failed_sync_that_evicts_a_recovered_unsynced_batch_neither_breaks_reads_nor_loses_the_next_acknowledged_send()
 {
    let (live, acked, mut engine) = failed_sync_evicts_a_recovered_batch();
    // Then: the partition kept serving what it holds (m2, never
    // acknowledged, is gone with its pages), and m4 survived at its
    // offset, not above a run of zeros that recovery cuts as a torn tail.
    assert_eq!(live.ok(), Some(vec!["m0".to_string(), "m1".to_string()]));
    let all = all_messages(&mut engine);
    let got = all.iter().find(|m| m.offset == acked);
    assert_eq!(
        got.map(|m| m.payload.to_vec()),
        Some(payload(4)),
        "{:?}",
        payloads_of(&all)
    );
    assert_eq!(payloads_of(&all), ["m0", "m1", "m4"]);
}

/// The scenario of the test above, shared with the teeth test that turns the
/// re-check off (`sim_teeth`): what a poll from offset 0 served after the
/// eviction, the offset m4 was acknowledged at, and the engine recovered
/// from the power loss that followed.
pub(crate) fn failed_sync_evicts_a_recovered_batch()
-> (Result<Vec<String>, EngineError>, u64, Engine) {
    // Given: m0 and m1 acknowledged under `persisted`; m2's file sync fails
    // (Linux drops its dirty bytes) and so does the truncate that would cut
    // it; the process dies, and the next process recovers m2 from the page
    // cache (it never reached the disk) and serves it.
    let (sim, mut engine) = a_recovered_unsynced_batch();
    let log = || OpMatcher::kind(OpKind::SyncFile).path_contains(".log");
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);

    // When: m3's file sync fails and the kernel evicts the pages it failed
    // to write (m2's bytes then read back as the disk holds them: zeros),
    // the partition is read, m4 is acknowledged, and the power fails.
    sim.set_eviction_after_failed_sync(1_000_000);
    sim.fail_when(log(), Fault::io(FaultMode::Before), 0, 1);
    assert!(try_send(&mut engine, 3, 1).is_err());
    sim.set_eviction_after_failed_sync(0);
    let live = try_poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::Offset(0),
        u64::MAX,
    )
    .map(|m| payloads_of(&m));
    let acked = send(&mut engine, 4, 1).base_offset;
    let (engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    (live, acked, engine)
}

/// A store whose write lands in the page cache but fails, and whose read-back
/// fails too, leaves memory unsure of what the file holds: the value tried,
/// or what was there before. `sluice sim explore --workload offsets`, reduced
/// (the open finding of session 5 in docs/simulation.md).
fn a_store_lost_from_sight(sim: &SimStorage, engine: &mut Engine, c: Consumer, value: u64) {
    let file = || OpMatcher::kind(OpKind::Write).path_ends_with("/consumers/1");
    sim.fail_when(file(), Fault::io(FaultMode::After), 0, 1);
    sim.fail_when(
        OpMatcher::kind(OpKind::Read).path_ends_with("/consumers/1"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(store_offset(engine, c, value).is_err());
}

#[test]
fn an_acknowledged_delete_removes_a_value_a_failed_store_may_have_left() {
    for offsets in [Durability::Buffered, Durability::Persisted] {
        // The consumer had no offset, or an acknowledged one already deleted.
        for deleted_before in [false, true] {
            for crash in [Crash::Process, Crash::PowerLoss] {
                if crash == Crash::PowerLoss && offsets == Durability::Buffered {
                    // A buffered delete may be lost with the power.
                    continue;
                }
                // Given: consumer 1's store of 3 landed, but both its write
                // and the read-back reported failures.
                let (sim, mut engine) = sim_with(options(Durability::Persisted, offsets));
                send(&mut engine, 0, 5);
                let c = Consumer::consumer(1);
                if deleted_before {
                    store_offset(&mut engine, c, 1).unwrap();
                    assert!(delete_offset(&mut engine, c).unwrap());
                }
                a_store_lost_from_sight(&sim, &mut engine, c, 3);

                // When: a delete of its offset is acknowledged, and the
                // process (or the machine) crashes.
                delete_offset(&mut engine, c).unwrap();
                assert_eq!(stored_offset(&mut engine, c), None);
                let (mut engine, _) = crash_and_reopen(engine, &sim, crash);

                // Then: no offset is served, not the value the failed store tried.
                assert_eq!(
                    stored_offset(&mut engine, c),
                    None,
                    "{offsets:?}, deleted before: {deleted_before}, {crash:?}"
                );
            }
        }
    }
}

// ---- which calls may run on a connection's worker -----------------------------

/// The syncs (file or directory) the simulator saw since operation `from`.
fn syncs_since(sim: &SimStorage, from: u64) -> Vec<String> {
    sim.trace()
        .iter()
        .skip(from as usize)
        .filter(|e| matches!(e.kind, OpKind::SyncFile | OpKind::SyncDir))
        .map(|e| e.to_string())
        .collect()
}

/// Asks the engine whether a call waits on no sync, runs it, and checks the
/// answer against the syncs the call really made; returns whether it synced.
fn check_no_sync_answer(
    sim: &SimStorage,
    engine: &mut Engine,
    what: &str,
    writes: DataWrite,
    call: impl FnOnce(&mut Engine),
) -> bool {
    let quick = engine.waits_on_no_sync(&stream(), &topic(), writes);
    let from = sim.op_count();
    call(engine);
    let syncs = syncs_since(sim, from);
    assert!(
        !quick || syncs.is_empty(),
        "{what}: the engine said it waits on no sync, and it synced: {syncs:?}"
    );
    !syncs.is_empty()
}

#[test]
fn a_call_the_engine_says_waits_on_no_sync_never_syncs_under_any_policy() {
    use Durability::{Buffered, Persisted};
    for (messages, offsets) in [
        (Buffered, Buffered),
        (Buffered, Persisted),
        (Persisted, Buffered),
        (Persisted, Persisted),
    ] {
        // Given: a topic under these policies whose segments roll every few sends.
        let opts = TopicOptions {
            segment_size: 150,
            ..options(messages, offsets)
        };
        let (sim, mut engine) = sim_with(opts);
        with_group(&mut engine);
        let label = format!("messages {messages:?}, offsets {offsets:?}");
        let mut synced = BTreeMap::new();

        // When: sends (across rolls), polls with and without a commit, and
        // offset stores (a new file, then overwrites) run one by one.
        for round in 0..6u64 {
            let s = check_no_sync_answer(&sim, &mut engine, &label, DataWrite::Messages, |e| {
                send(e, round * 4, 4);
            });
            *synced.entry("send").or_insert(false) |= s;
            let s = check_no_sync_answer(&sim, &mut engine, &label, DataWrite::Nothing, |e| {
                poll(e, Consumer::consumer(1), PollingStrategy::Offset(0), 3);
            });
            *synced.entry("poll").or_insert(false) |= s;
            let s = check_no_sync_answer(&sim, &mut engine, &label, DataWrite::Offsets, |e| {
                e.poll(
                    &stream(),
                    &topic(),
                    PARTITION,
                    Consumer::consumer(2),
                    PollingStrategy::Next,
                    2,
                    true,
                )
                .unwrap();
            });
            *synced.entry("commit").or_insert(false) |= s;
            let s = check_no_sync_answer(&sim, &mut engine, &label, DataWrite::Offsets, |e| {
                store_offset(e, Consumer::group(GROUP), round).unwrap();
            });
            *synced.entry("store").or_insert(false) |= s;
        }

        // Then: what the engine sent to the blocking pool is what syncs (the
        // answer is not just "no" everywhere).
        assert!(!synced["poll"], "{label}: a poll without a commit synced");
        assert_eq!(synced["send"], messages == Persisted, "{label}");
        assert_eq!(synced["commit"], offsets == Persisted, "{label}");
        assert_eq!(synced["store"], offsets == Persisted, "{label}");
    }
}

#[test]
fn while_the_metadata_is_in_doubt_no_call_is_said_to_wait_on_no_sync() {
    // Given: a buffered topic, whose sends wait on no sync.
    let (sim, mut engine) = sim_with(buffered());
    assert!(engine.waits_on_no_sync(&stream(), &topic(), DataWrite::Messages));
    // When: a metadata change and its restore both fail their directory sync.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir),
        Fault::io(FaultMode::Before),
        0,
        2,
    );
    engine.create_stream(None, "second").unwrap_err();
    // Then: the next send saves the metadata first, so it may sync.
    for writes in [DataWrite::Nothing, DataWrite::Messages, DataWrite::Offsets] {
        assert!(
            !engine.waits_on_no_sync(&stream(), &topic(), writes),
            "{writes:?}"
        );
    }
    let from = sim.op_count();
    send(&mut engine, 0, 1);
    assert!(
        !syncs_since(&sim, from).is_empty(),
        "the send made the metadata durable"
    );
    assert!(engine.waits_on_no_sync(&stream(), &topic(), DataWrite::Messages));
}
