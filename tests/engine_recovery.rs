//! Round trips through recovery, on the real disk and on the simulator:
//! whatever the engine acknowledged before a restart, it serves after it.

use sluice_server::frame::{self, Magic};
use sluice_server::metadata::LEGACY_ONE_BASED_VERSION;
use sluice_server::partition::offsets::{OFFSET_LAYOUT, OffsetRecord};
use sluice_server::slots::SlotRead;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use sluice_testkit::engine::*;

// ---- metadata ----------------------------------------------------------------

/// Streams, topics (both durability policies, odd options), partitions, groups.
fn build_metadata(engine: &mut Engine) {
    let alpha = engine.create_stream(None, "alpha").unwrap();
    assert_eq!(alpha.id, 0, "Iggy 0.11 numbers the first stream 0");
    let beta = engine.create_stream(Some(7), "beta").unwrap();
    assert_eq!(beta.id, 7);
    let buffered_opts = TopicOptions {
        segment_size: 4096,
        ..options(Durability::Buffered, Durability::Buffered)
    };
    let t = engine
        .create_topic(
            &"alpha".into(),
            None,
            "buffered",
            2,
            buffered_opts,
            1000,
            2000,
            0,
        )
        .unwrap();
    assert_eq!(t.id, 0);
    let t = engine
        .create_topic(
            &"alpha".into(),
            Some(5),
            "persisted",
            1,
            persisted(),
            0,
            0,
            3,
        )
        .unwrap();
    assert_eq!(t.id, 5);
    let mixed = options(Durability::Persisted, Durability::Buffered);
    engine
        .create_topic(&7.into(), None, "mixed", 3, mixed, 0, 0, 1)
        .unwrap();
    let g = engine
        .create_group(&"alpha".into(), &"buffered".into(), None, "readers")
        .unwrap();
    assert_eq!(g.id, 0);
    let g = engine
        .create_group(&"alpha".into(), &"buffered".into(), Some(9), "auditors")
        .unwrap();
    assert_eq!(g.id, 9);
}

fn metadata_round_trips(backend: Backend) {
    // Given: a populated engine.
    let mut engine = backend.open();
    build_metadata(&mut engine);
    let before = engine.metadata().clone();

    // When: it restarts.
    let (engine, report) = backend.restart(engine);

    // Then: the metadata is identical, field for field.
    assert_eq!(engine.metadata(), &before);
    assert_eq!(report.partitions, 2 + 1 + 3);
    assert!(report.degraded.is_empty());
    let ids: Vec<u32> = engine.streams().map(|s| s.id).collect();
    assert_eq!(ids, vec![0, 7]);
    let buffered = engine.topic(&"alpha".into(), &"buffered".into()).unwrap();
    assert_eq!(buffered.options.durability, Durability::Buffered);
    assert_eq!(
        buffered.options.consumer_offset_durability,
        Durability::Buffered
    );
    assert_eq!(buffered.options.segment_size, 4096);
    assert_eq!(
        (buffered.message_expiry, buffered.max_topic_size),
        (1000, 2000)
    );
    assert_eq!(buffered.replication_factor, 1, "0 is stored as 1");
    assert_eq!(
        buffered.partitions.keys().copied().collect::<Vec<_>>(),
        vec![0, 1]
    );
    let groups: Vec<(u32, &str)> = buffered
        .groups
        .values()
        .map(|g| (g.id, g.name.as_str()))
        .collect();
    assert_eq!(groups, vec![(0, "readers"), (9, "auditors")]);
    let persisted = engine.topic(&0.into(), &5.into()).unwrap();
    assert_eq!(persisted.name, "persisted");
    assert_eq!(persisted.options.durability, Durability::Persisted);
    assert_eq!(
        persisted.options.consumer_offset_durability,
        Durability::Persisted
    );
    assert_eq!(persisted.replication_factor, 3);
    let mixed = engine.topic(&"beta".into(), &"mixed".into()).unwrap();
    assert_eq!(mixed.options.durability, Durability::Persisted);
    assert_eq!(
        mixed.options.consumer_offset_durability,
        Durability::Buffered
    );
    // Every partition starts in purge generation 0, and says so.
    for key in engine.metadata().partition_keys() {
        let meta = engine.metadata().partition(key).unwrap();
        assert_eq!(meta.committed_generation, 0, "{key}");
        assert_eq!(engine.partition(key).unwrap().generation(), 0, "{key}");
    }
}

#[test]
fn metadata_round_trips_on_disk() {
    metadata_round_trips(Backend::disk());
}

#[test]
fn metadata_round_trips_on_sim() {
    metadata_round_trips(Backend::sim());
}

#[test]
fn metadata_survives_power_loss_on_sim() {
    // Given: metadata changes, each acknowledged.
    let sim = new_sim();
    let mut engine = sim_engine(&sim);
    build_metadata(&mut engine);
    let before = engine.metadata().clone();
    // When: power is cut.
    let (engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    // Then: all of it is there (metadata commits are always durable).
    assert_eq!(engine.metadata(), &before);
    assert_eq!(report.partitions, 6);
}

#[test]
fn ids_are_assigned_as_iggy_assigns_them_and_survive_a_restart() {
    // Given: three streams, the middle one deleted (Iggy 0.11 hands out the
    // lowest id no live resource holds).
    let sim = new_sim();
    let mut engine = sim_engine(&sim);
    for name in ["a", "b", "c"] {
        engine.create_stream(None, name).unwrap();
    }
    engine.delete_stream(&"b".into()).unwrap();
    engine.reconcile();

    // When: the server restarts and a stream, a topic with two partitions,
    // one more partition and a group are created.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    let d = engine.create_stream(None, "d").unwrap();
    let t = engine
        .create_topic(&"d".into(), None, "t", 2, buffered(), 0, 0, 1)
        .unwrap();
    let added = engine
        .create_partitions(&"d".into(), &"t".into(), 1)
        .unwrap();
    let g = engine
        .create_group(&"d".into(), &"t".into(), None, "g")
        .unwrap();

    // Then: the freed id 1 is reused, and everything else starts at 0.
    assert_eq!(d.id, 1, "the lowest free stream id");
    assert_eq!(t.id, 0);
    assert_eq!(t.partitions.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(added, vec![2], "new partitions continue at the count");
    assert_eq!(g.id, 0);
    let ids: Vec<u32> = engine.streams().map(|s| s.id).collect();
    assert_eq!(ids, vec![0, 1, 2]);
}

#[test]
fn a_reused_partition_id_never_adopts_a_deleted_partitions_messages() {
    // Given: a partition with persisted messages, deleted; its directory
    // comes back (the removal was never made durable before the power loss).
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/partitions"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    engine.delete_partitions(&stream(), &topic(), 1).unwrap();
    engine.reconcile();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert!(
        sim.exists(&sim_paths().segments).unwrap(),
        "the deleted partition's files came back"
    );

    // When: a new partition takes the same id 0.
    let ids = engine.create_partitions(&stream(), &topic(), 1).unwrap();

    // Then: it is empty: the old messages are neither served nor counted.
    assert_eq!(ids, vec![PARTITION]);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::First, 10),
        Vec::<u64>::new()
    );
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::First, 10),
        Vec::<u64>::new()
    );
}

#[test]
fn a_data_directory_with_one_based_ids_is_refused_and_left_untouched() {
    // Given: a data directory whose metadata is version 1, the pre-release
    // format that numbered ids from 1.
    let sim = new_sim();
    let mut engine = sim_engine(&sim);
    build_metadata(&mut engine);
    let legacy =
        frame::encode(Magic::METADATA, LEGACY_ONE_BASED_VERSION, engine.metadata()).unwrap();
    drop(engine);
    let path = Path::new(DATA_DIR).join("metadata");
    let file = sim.open(&path, OpenMode::ReadWrite).unwrap();
    file.truncate(0).unwrap();
    file.write_at(0, &legacy).unwrap();
    file.sync().unwrap();

    // When: the engine opens it.
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let clock = Arc::new(ManualClock::new(RESTART_MICROS));
    let err = Engine::open(storage, clock, config(Path::new(DATA_DIR))).unwrap_err();

    // Then: a clear, typed refusal naming the file, and the file is as it was.
    match &err {
        EngineError::Incompatible { path: p, reason } => {
            assert_eq!(p, &path);
            assert!(
                reason.contains("from 1") && reason.contains("from 0"),
                "{reason}"
            );
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
    assert_eq!(sim.read_file(&path).unwrap(), legacy);
}

// ---- messages ----------------------------------------------------------------

fn headers() -> Headers {
    let mut h = Headers::new();
    h.insert(
        "trace".into(),
        HeaderValue {
            kind: 2,
            value: b"abc".to_vec(),
        },
    );
    h.insert(
        "n".into(),
        HeaderValue {
            kind: 7,
            value: 42u64.to_le_bytes().to_vec(),
        },
    );
    // A key of another kind than string (batch version 2).
    h.insert(
        HeaderKey {
            kind: 11,
            value: 7u32.to_le_bytes().to_vec(),
        },
        HeaderValue {
            kind: 1,
            value: vec![0xff],
        },
    );
    h
}

fn messages_round_trip(backend: Backend) {
    // Given: three batches, one with a client id and headers.
    let mut engine = backend.open();
    setup(&mut engine, buffered());
    send(&mut engine, 0, 3);
    let special = NewMessage::new(payload(3))
        .with_id(42)
        .with_origin_timestamp(Some(1_600_000_000_000_042))
        .with_headers(Some(headers()));
    let sent = engine
        .send(&stream(), &topic(), &Partitioning::Balanced, vec![special])
        .unwrap();
    assert_eq!(
        (sent.partition_id, sent.base_offset, sent.count),
        (PARTITION, 3, 1)
    );
    send(&mut engine, 4, 2);
    let before = all_messages(&mut engine);

    // When: the engine restarts.
    let (mut engine, report) = backend.restart(engine);

    // Then: every message comes back bit for bit.
    let after = all_messages(&mut engine);
    assert_eq!(after, before);
    assert_eq!(report.messages, 6);
    assert_eq!(offsets_of(&after), (0..6).collect::<Vec<_>>());
    assert_eq!(payloads_of(&after), ["m0", "m1", "m2", "m3", "m4", "m5"]);
    // One timestamp per batch, increasing from batch to batch.
    let ts: Vec<u64> = after.iter().map(|m| m.timestamp).collect();
    assert!(ts[0] == ts[1] && ts[1] == ts[2] && ts[2] < ts[3] && ts[3] < ts[4]);
    assert_eq!(ts[4], ts[5]);
    assert!(ts[0] >= START_MICROS);
    // The client's id and headers are kept; server ids are non-zero and distinct.
    assert_eq!(after[3].id, 42);
    assert_eq!(after[3].headers, Some(headers()));
    // Its origin timestamp (batch version 2) is kept; the others (written as
    // version 1 around it, in the same segment) have none: their append time.
    assert_eq!(after[3].origin_timestamp, Some(1_600_000_000_000_042));
    assert!(
        after
            .iter()
            .filter(|m| m.offset != 3)
            .all(|m| m.origin_timestamp.is_none())
    );
    assert!(after.iter().all(|m| m.id != 0));
    assert_eq!(after.iter().map(|m| m.id).collect::<BTreeSet<_>>().len(), 6);
    assert_eq!(after[0].headers, None);

    // And: the next append continues the offsets.
    assert_eq!(send(&mut engine, 6, 1).base_offset, 6);
}

#[test]
fn messages_round_trip_on_disk() {
    messages_round_trip(Backend::disk());
}

#[test]
fn messages_round_trip_on_sim() {
    messages_round_trip(Backend::sim());
}

#[test]
fn server_assigned_message_ids_do_not_repeat_after_a_restart() {
    // Given: messages with server-assigned ids, sent by an engine with seed 1.
    let sim = new_sim();
    let clock = || std::sync::Arc::new(ManualClock::new(START_MICROS));
    let (mut engine, _) = open_sim_with_clock(&sim, clock());
    setup(&mut engine, buffered());
    send(&mut engine, 0, 5);
    let first: BTreeSet<u128> = all_messages(&mut engine).iter().map(|m| m.id).collect();
    assert_eq!(first.len(), 5);

    // When: the engine restarts on the same data directory, with the same
    // seed and even the same clock, and sends again.
    drop(engine);
    sim.crash(Crash::Process);
    let fork = sim.fork();
    let (mut engine, _) = open_sim_with_clock(&sim, clock());
    send(&mut engine, 5, 5);

    // Then: no id of the earlier run comes back.
    let all = all_messages(&mut engine);
    let ids: BTreeSet<u128> = all.iter().map(|m| m.id).collect();
    assert_eq!(
        ids.len(),
        10,
        "{:?}",
        all.iter().map(|m| m.id).collect::<Vec<_>>()
    );
    // And: the ids are still a pure function of the seed and the history.
    let (mut again, _) = open_sim_with_clock(&fork, clock());
    send(&mut again, 5, 5);
    assert_eq!(all_messages(&mut again), all);
}

// ---- offsets -----------------------------------------------------------------

fn offsets_round_trip(backend: Backend) {
    // Given: two consumer offsets and one group offset.
    let mut engine = backend.open();
    setup(&mut engine, buffered());
    engine
        .create_group(&stream(), &topic(), None, "workers")
        .unwrap();
    send(&mut engine, 0, 10);
    store_offset(&mut engine, Consumer::consumer(1), 3).unwrap();
    store_offset(&mut engine, Consumer::consumer(2), 5).unwrap();
    store_offset(&mut engine, Consumer::consumer(2), 6).unwrap();
    store_offset(&mut engine, Consumer::group(GROUP), 4).unwrap();

    // Then: each lives in its own store's directory, named by id.
    let p = paths(&backend.data_dir());
    let storage = engine.storage().clone();
    assert_eq!(storage.list_dir(&p.consumers).unwrap(), ["1", "2"]);
    assert_eq!(storage.list_dir(&p.groups).unwrap(), [GROUP.to_string()]);

    // When: the engine restarts.
    let (mut engine, report) = backend.restart(engine);

    // Then: every offset is back, and the two stores do not mix.
    assert_eq!(report.consumer_offsets, 2);
    assert_eq!(report.group_offsets, 1);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(3));
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(2)), Some(6));
    assert_eq!(stored_offset(&mut engine, Consumer::group(GROUP)), Some(4));
    let got = engine
        .get_offset(&stream(), &topic(), PARTITION, Consumer::consumer(2))
        .unwrap();
    assert_eq!(got, Some((9, 6)));
    // And: Next continues after each stored offset.
    let next = poll(
        &mut engine,
        Consumer::group(GROUP),
        PollingStrategy::Next,
        2,
    );
    assert_eq!(offsets_of(&next), [5, 6]);
    let next = poll(&mut engine, Consumer::consumer(1), PollingStrategy::Next, 1);
    assert_eq!(offsets_of(&next), [4]);
}

#[test]
fn consumer_and_group_offsets_round_trip_on_disk() {
    offsets_round_trip(Backend::disk());
}

#[test]
fn consumer_and_group_offsets_round_trip_on_sim() {
    offsets_round_trip(Backend::sim());
}

#[test]
fn syncing_the_consumers_dir_does_not_make_group_offsets_durable() {
    // Given: messages persisted, offsets buffered; a consumer and a group offset stored.
    let (sim, mut engine) = sim_with(options(Durability::Persisted, Durability::Buffered));
    engine
        .create_group(&stream(), &topic(), None, "workers")
        .unwrap();
    send(&mut engine, 0, 5);
    store_offset(&mut engine, Consumer::consumer(1), 2).unwrap();
    store_offset(&mut engine, Consumer::group(GROUP), 3).unwrap();
    let p = sim_paths();
    let consumer_file = p.consumers.join("1");
    let group_file = p.groups.join(GROUP.to_string());
    assert!(sim.exists(&consumer_file).unwrap() && sim.exists(&group_file).unwrap());
    assert_eq!(durable_file(&sim, &consumer_file), None);
    assert_eq!(durable_file(&sim, &group_file), None);

    // When: only consumers/ is synced (as background writeback might), then power is cut.
    sim.sync_dir(&p.consumers).unwrap();

    // Then: the consumer's name is durable (its bytes are not), the group's name is not.
    assert_eq!(durable_file(&sim, &consumer_file), Some(Vec::new()));
    assert_eq!(durable_file(&sim, &group_file), None);
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(sim.list_dir(&p.consumers).unwrap(), ["1"]);
    assert!(sim.list_dir(&p.groups).unwrap().is_empty());
    // An empty record file is "never written", not corrupt.
    assert_eq!(report.corrupt_offset_records, 0);
    assert_eq!(stored_offset(&mut engine, Consumer::group(GROUP)), None);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
    // The persisted messages are all there.
    assert_eq!(offsets_of(&all_messages(&mut engine)), [0, 1, 2, 3, 4]);
    // And: the consumer can store again over the empty file.
    store_offset(&mut engine, Consumer::consumer(1), 4).unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(4));
}

// ---- segments ----------------------------------------------------------------

fn segments_round_trip(backend: Backend) {
    // Given: a tiny segment size, so every few messages start a new segment.
    let mut engine = backend.open();
    let opts = TopicOptions {
        segment_size: 256,
        ..buffered()
    };
    setup(&mut engine, opts);
    send_each(&mut engine, 0, 60);
    let segments = engine.partition(key()).unwrap().log().segment_count();
    assert!(segments >= 10, "only {segments} segments");
    let storage = engine.storage().clone();
    let logs = segment_files(storage.as_ref(), &backend.data_dir(), "log");
    assert_eq!(logs.len(), segments);
    assert_eq!(logs[0], segment_name(0, 0, "log"));
    let before = all_messages(&mut engine);

    // When: the engine restarts.
    let (mut engine, report) = backend.restart(engine);

    // Then: all segments are recovered and reads span them.
    assert_eq!(
        engine.partition(key()).unwrap().log().segment_count(),
        segments
    );
    assert_eq!(report.messages, 60);
    assert_eq!(report.tail_cuts, 0);
    assert_eq!(all_messages(&mut engine), before);
    let window = poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::Offset(17),
        20,
    );
    assert_eq!(offsets_of(&window), (17..37).collect::<Vec<_>>());
    assert_eq!(payloads_of(&window)[0], "m17");
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Last, 3),
        [57, 58, 59]
    );
    // And: appends continue densely, in new segments, and survive another restart.
    send_each(&mut engine, 60, 20);
    let (mut engine, _) = backend.restart(engine);
    let all = all_messages(&mut engine);
    assert_eq!(offsets_of(&all), (0..80).collect::<Vec<_>>());
    assert_eq!(
        payloads_of(&all),
        (0..80).map(|i| format!("m{i}")).collect::<Vec<_>>()
    );
}

#[test]
fn segment_rolling_round_trips_on_disk() {
    segments_round_trip(Backend::disk());
}

#[test]
fn segment_rolling_round_trips_on_sim() {
    segments_round_trip(Backend::sim());
}

/// Bytes read from `.log` files by the calls of `sim` from trace index `from` on.
fn log_bytes_read_since(sim: &SimStorage, from: usize) -> u64 {
    sim.trace()[from..]
        .iter()
        .filter(|e| e.kind == OpKind::Read && e.path.ends_with(".log"))
        .map(|e| e.bytes)
        .sum()
}

#[test]
fn recovering_a_long_log_reads_each_segments_tail_once_not_the_whole_log() {
    // Given: a persisted log of many segments whose batches are each larger
    // than the index interval (4 KiB), so every batch is indexed and a
    // segment's tail (from its last index entry) is its last batch.
    let opts = TopicOptions {
        segment_size: 64 * 1024,
        ..persisted()
    };
    let (sim, mut engine) = sim_with(opts);
    let big = |i: u64| NewMessage::new(vec![i as u8; 1024]);
    for b in 0..120u64 {
        let msgs = (0..8).map(|i| big(b * 8 + i)).collect();
        engine
            .send(
                &stream(),
                &topic(),
                &Partitioning::PartitionId(PARTITION),
                msgs,
            )
            .unwrap();
    }
    let segments = engine.partition(key()).unwrap().log().segment_count() as u64;
    let log_bytes = engine.partition(key()).unwrap().log().size_bytes();
    assert!(segments >= 10, "only {segments} segments");
    let logs: Vec<String> = sim
        .list_dir(&sim_paths().segments)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    let first_len = sim
        .read_file(&sim_paths().segments.join(&logs[0]))
        .unwrap()
        .len() as u64;
    // Every batch of the first segment encodes to the same number of bytes;
    // later ones only a few more (larger offsets take more varint bytes).
    let batch_frame = first_len / (first_len / 8300);
    assert!(
        batch_frame > 4096 && first_len.is_multiple_of(batch_frame),
        "{first_len} / {batch_frame}"
    );
    let slack = 64;

    // When: the engine restarts.
    drop(engine);
    let from = sim.op_count() as usize;
    let (mut engine, report) = reopen(&sim);
    let read = log_bytes_read_since(&sim, from);

    // Then: recovery read the last batch of each segment once (the tail
    // every segment's scan checks) and the newest one's once more (written
    // again so the next persisted sync carries it): never the whole log,
    // and no batch twice for the scan.
    assert!(report.degraded.is_empty());
    assert_eq!(report.messages, 120 * 8);
    let once = (segments + 1) * batch_frame;
    assert!(
        (once..=once + (segments + 1) * slack).contains(&read),
        "read {read}: {segments} segments of {batch_frame}-byte batches, {log_bytes} bytes of log"
    );
    assert!(read * 4 < log_bytes, "read {read} of {log_bytes}");
    // And: everything is served.
    assert_eq!(all_messages(&mut engine).len(), 120 * 8);
}

// ---- updates and deletes -----------------------------------------------------

fn updates_and_deletes_persist(backend: Backend) {
    // Given: two streams, two topics, a group, some messages.
    let mut engine = backend.open();
    setup_partitions(&mut engine, buffered(), 2);
    engine.create_stream(None, "doomed").unwrap();
    engine
        .create_topic(&"doomed".into(), None, "t", 1, buffered(), 0, 0, 1)
        .unwrap();
    engine
        .create_topic(&stream(), None, "gone", 1, buffered(), 0, 0, 1)
        .unwrap();
    engine
        .create_group(&stream(), &topic(), None, "workers")
        .unwrap();
    send(&mut engine, 0, 3);

    // When: renamed, updated, grown, shrunk, and deleted.
    engine.update_stream(&stream(), "orders-v2").unwrap();
    let s: Identifier = "orders-v2".into();
    engine
        .update_topic(&s, &topic(), "events-v2", 5000, 6000)
        .unwrap();
    let t: Identifier = "events-v2".into();
    assert_eq!(engine.create_partitions(&s, &t, 2).unwrap(), [2, 3]);
    assert_eq!(engine.delete_partitions(&s, &t, 1).unwrap(), [3]);
    engine.reconcile();
    engine.delete_group(&s, &t, &"workers".into()).unwrap();
    engine.reconcile();
    engine.delete_topic(&s, &"gone".into()).unwrap();
    engine.reconcile();
    engine.delete_stream(&"doomed".into()).unwrap();
    engine.reconcile();
    let before = engine.metadata().clone();
    let data = backend.data_dir();

    let (mut engine, report) = backend.restart(engine);

    // Then: the metadata is what was acknowledged last.
    assert_eq!(engine.metadata(), &before);
    assert_eq!(report.partitions, 3);
    let topic_meta = engine.topic(&0.into(), &0.into()).unwrap();
    assert_eq!(topic_meta.name, "events-v2");
    assert_eq!(
        (topic_meta.message_expiry, topic_meta.max_topic_size),
        (5000, 6000)
    );
    assert_eq!(
        topic_meta.partitions.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(topic_meta.groups.is_empty());
    assert_eq!(engine.stream(&0.into()).unwrap().name, "orders-v2");
    // Old names no longer resolve; deleted resources are gone, files included.
    assert_eq!(
        engine.stream(&stream()).unwrap_err(),
        EngineError::StreamNotFound(stream())
    );
    assert!(matches!(
        engine.topic(&s, &"gone".into()),
        Err(EngineError::TopicNotFound { .. })
    ));
    assert!(matches!(
        engine.stream(&"doomed".into()),
        Err(EngineError::StreamNotFound(_))
    ));
    let storage = engine.storage().clone();
    assert!(!storage.exists(&data.join("streams/1")).unwrap());
    assert!(!storage.exists(&data.join("streams/0/topics/1")).unwrap());
    assert!(
        !storage
            .exists(&data.join("streams/0/topics/0/partitions/3"))
            .unwrap()
    );
    assert!(
        storage
            .exists(&data.join("streams/0/topics/0/partitions/2"))
            .unwrap()
    );
    // And: the surviving partition still serves its messages under the new names.
    let polled = engine
        .poll(
            &s,
            &t,
            PARTITION,
            Consumer::consumer(1),
            PollingStrategy::First,
            10,
            false,
        )
        .unwrap();
    assert_eq!(payloads_of(&polled.messages), ["m0", "m1", "m2"]);
}

#[test]
fn stream_and_topic_updates_and_deletes_persist_on_disk() {
    updates_and_deletes_persist(Backend::disk());
}

#[test]
fn stream_and_topic_updates_and_deletes_persist_on_sim() {
    updates_and_deletes_persist(Backend::sim());
}

#[test]
fn a_recreated_stream_never_serves_a_deleted_streams_leftover_files() {
    // Given: a stream with several segments and a stored offset.
    let opts = TopicOptions {
        segment_size: 256,
        ..persisted()
    };
    let (sim, mut engine) = sim_with(opts);
    send_each(&mut engine, 0, 30);
    store_offset(&mut engine, Consumer::consumer(1), 20).unwrap();

    // When: the stream is deleted but removing its files fails (as a crash
    // between the metadata commit and the removal would leave them), and a
    // new stream of the same name is created.
    sim.fail_when(
        OpMatcher::kind(OpKind::RemoveDirAll),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    engine.delete_stream(&stream()).unwrap();
    engine.reconcile();
    assert!(sim.exists(&sim_paths().segments).unwrap());
    // The server hands out the freed id 0 again (as Iggy's does), and the new
    // topic is 0 too, so the new partition's directory is exactly where the
    // leftover files are.
    let s = engine.create_stream(None, STREAM).unwrap();
    assert_eq!(s.id, 0);
    let t = engine
        .create_topic(&stream(), None, TOPIC, 1, opts, 0, 0, 1)
        .unwrap();
    assert_eq!(t.id, 0);
    send(&mut engine, 1000, 1);

    // Then: the new stream holds only what was sent to it, before and after
    // a restart and a power loss.
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m1000"]);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m1000"]);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m1000"]);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
    assert_eq!(report.stale_records, 0);
    assert_eq!(
        segment_files(&sim, Path::new(DATA_DIR), "log"),
        [segment_name(0, 0, "log")]
    );
}

#[test]
fn ids_are_the_lowest_free_ones_even_after_a_restart() {
    // Given: streams, topics, partitions and groups, some deleted, some with
    // explicit ids.
    let backend = Backend::sim();
    let mut engine = backend.open();
    setup_partitions(&mut engine, buffered(), 3);
    engine.create_stream(None, "second").unwrap();
    engine.delete_stream(&"second".into()).unwrap();
    engine.reconcile();
    engine
        .create_topic(&stream(), Some(7), "seventh", 1, buffered(), 0, 0, 1)
        .unwrap();
    engine.delete_topic(&stream(), &"seventh".into()).unwrap();
    engine.reconcile();
    engine
        .create_group(&stream(), &topic(), Some(4), "fourth")
        .unwrap();
    engine
        .delete_group(&stream(), &topic(), &"fourth".into())
        .unwrap();
    engine.reconcile();
    assert_eq!(
        engine.delete_partitions(&stream(), &topic(), 2).unwrap(),
        [2, 1],
        "the last partitions go"
    );
    engine.reconcile();
    let before = engine.metadata().clone();

    // When: the engine restarts.
    let (mut engine, _) = backend.restart(engine);
    assert_eq!(engine.metadata(), &before);

    // Then: every new resource gets the lowest id free in its scope, as the
    // running server would have given it (Iggy 0.11's rule).
    assert_eq!(engine.create_stream(None, "third").unwrap().id, 1);
    let t = engine
        .create_topic(&stream(), None, "eighth", 0, buffered(), 0, 0, 1)
        .unwrap();
    assert_eq!(t.id, 1);
    assert_eq!(
        engine.create_partitions(&stream(), &topic(), 2).unwrap(),
        [1, 2],
        "partitions continue at the count"
    );
    // (Except a consumer group's: Iggy 0.11 never gives one out again, so
    // the next is past the deleted group 4.)
    let g = engine
        .create_group(&stream(), &topic(), None, "fifth")
        .unwrap();
    assert_eq!(g.id, 5);
    assert_eq!(
        engine.create_partitions(&stream(), &topic(), 1).unwrap(),
        [3]
    );
    // And: an explicit id still may not collide with a live one.
    assert!(matches!(
        engine.create_stream(Some(1), "fourth"),
        Err(EngineError::IdTaken {
            kind: "stream",
            id: 1
        })
    ));
    // And: a new stream's and topic's own id spaces start at 0.
    let third: Identifier = "third".into();
    let t = engine
        .create_topic(&third, None, "first", 1, buffered(), 0, 0, 1)
        .unwrap();
    assert_eq!(t.id, 0);
    let first: Identifier = "first".into();
    assert_eq!(
        engine
            .topic(&third, &first)
            .unwrap()
            .partitions
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [0]
    );
}

#[test]
fn deleted_offsets_stay_deleted_across_restart() {
    // Given: a stored offset, deleted.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    store_offset(&mut engine, Consumer::consumer(1), 1).unwrap();
    assert!(
        engine
            .delete_offset(&stream(), &topic(), PARTITION, Consumer::consumer(1))
            .unwrap()
    );
    // When: power is cut.
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    // Then: the delete held.
    assert_eq!(report.consumer_offsets, 0);
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
    // And: the file stays, holding a tombstone (only purge cleanup unlinks,
    // ADR 0008).
    let bytes = sim.read_file(&sim_paths().consumers.join("1")).unwrap();
    match OFFSET_LAYOUT.decode::<OffsetRecord>(&bytes) {
        SlotRead::Valid { value, .. } => assert_eq!(
            value,
            OffsetRecord {
                generation: 0,
                offset: None
            }
        ),
        other => panic!("expected a tombstone, found {other:?}"),
    }
}

#[test]
fn a_disk_data_dir_is_created_on_first_open() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("nested/data");
    let (mut engine, report) = disk_engine(&data);
    assert_eq!(report, RecoveryReport::default());
    setup(&mut engine, persisted());
    send(&mut engine, 0, 1);
    drop(engine);
    assert!(Path::new(&data.join("metadata")).exists());
    let (mut engine, _) = disk_engine(&data);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0"]);
}

// ---- stored offsets beyond the recovered log (ADR 0010) ------------------------

/// Buffered messages, persisted offsets: a power loss may take messages a
/// stored offset names.
fn buffered_messages_persisted_offsets() -> TopicOptions {
    options(Durability::Buffered, Durability::Persisted)
}

#[test]
fn next_never_skips_messages_sent_after_a_power_loss_took_the_ones_a_stored_offset_named() {
    // Given: m0..m4 sent (buffered) and consumer 1's offset 4 stored (persisted).
    let (sim, mut engine) = sim_with(buffered_messages_persisted_offsets());
    send(&mut engine, 0, 5);
    let c = Consumer::consumer(1);
    store_offset(&mut engine, c, 4).unwrap();

    // When: power is cut (the messages are lost, the offset is not), and
    // five new messages are sent.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(stored_offset(&mut engine, c), Some(4));
    let sent = send(&mut engine, 5, 5);

    // Then: they get offsets after the stored one (offsets are never
    // reused), and `Next` returns every one of them.
    assert_eq!(sent.base_offset, 5);
    let next = poll(&mut engine, c, PollingStrategy::Next, 100);
    assert_eq!(payloads_of(&next), ["m5", "m6", "m7", "m8", "m9"]);
    assert_eq!(offsets_of(&next), [5, 6, 7, 8, 9]);
    // And: a consumer with no offset reads them from the start.
    let fresh = poll(
        &mut engine,
        Consumer::consumer(2),
        PollingStrategy::Next,
        100,
    );
    assert_eq!(payloads_of(&fresh), ["m5", "m6", "m7", "m8", "m9"]);
}

#[test]
fn next_never_skips_for_a_group_whose_stored_offset_outlived_the_messages() {
    // Given: a group's offset 2 stored (persisted) over m0..m2 (buffered).
    let (sim, mut engine) = sim_with(buffered_messages_persisted_offsets());
    let group = engine
        .create_group(&stream(), &topic(), None, "billing")
        .unwrap()
        .id;
    send(&mut engine, 0, 3);
    let g = Consumer::group(group);
    store_offset(&mut engine, g, 2).unwrap();

    // When: power is cut and two messages are sent.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    send(&mut engine, 3, 2);

    // Then: the group's `Next` returns both.
    let next = poll(&mut engine, g, PollingStrategy::Next, 100);
    assert_eq!(payloads_of(&next), ["m3", "m4"]);
}

#[test]
fn a_log_that_kept_part_of_its_messages_continues_after_the_highest_stored_offset() {
    // Given: m0..m2 made durable, m3 and m4 buffered only, offset 4 stored.
    let (sim, mut engine) = sim_with(buffered_messages_persisted_offsets());
    send(&mut engine, 0, 3);
    engine.sync_all().unwrap();
    send(&mut engine, 3, 2);
    let c = Consumer::consumer(1);
    store_offset(&mut engine, c, 4).unwrap();

    // When: power is cut, then m5 and m6 are sent.
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(offsets_of(&all_messages(&mut engine)), [0, 1, 2]);
    send(&mut engine, 5, 2);

    // Then: `Next` returns both, the log shows the gap where m3 and m4 were,
    // and a restart keeps it that way.
    assert_eq!(
        payloads_of(&poll(&mut engine, c, PollingStrategy::Next, 100)),
        ["m5", "m6"]
    );
    assert_eq!(offsets_of(&all_messages(&mut engine)), [0, 1, 2, 5, 6]);
    engine.sync_all().unwrap();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    let all = all_messages(&mut engine);
    assert_eq!(offsets_of(&all), [0, 1, 2, 5, 6]);
    assert_eq!(payloads_of(&all), ["m0", "m1", "m2", "m5", "m6"]);
    assert_eq!(
        payloads_of(&poll(&mut engine, c, PollingStrategy::Next, 100)),
        ["m5", "m6"]
    );
}

/// Zeroes the whole first segment's `.log` (its length kept), as a failed
/// writeback's evicted pages read back when the process died before the
/// engine's recheck, and makes that durable; then recovers.
fn recover_with_a_zeroed_sealed_segment(options: TopicOptions) -> (Engine, RecoveryReport) {
    let (sim, mut engine) = sim_with(TopicOptions {
        segment_size: 150,
        ..options
    });
    send_each(&mut engine, 0, 9);
    drop(engine);
    make_everything_durable(&sim);
    let path = sim_paths().segments.join(segment_name(0, 0, "log"));
    let file = sim.open(&path, OpenMode::ReadWrite).unwrap();
    let len = file.len().unwrap();
    file.write_at(0, &vec![0u8; len as usize]).unwrap();
    file.sync().unwrap();
    drop(file);
    sim.crash(Crash::Process);
    reopen(&sim)
}

#[test]
fn given_a_buffered_sealed_segment_that_reads_as_zeros_when_recovered_then_it_is_cut_and_the_rest_is_served()
 {
    // Given/When: a buffered topic whose first (sealed) segment reads zeros.
    let (mut engine, report) = recover_with_a_zeroed_sealed_segment(buffered());

    // Then: no partition is degraded; the later segments' messages are
    // served, and new ones continue after them.
    assert!(report.degraded.is_empty(), "{:?}", report.degraded);
    let got = offsets_of(&all_messages(&mut engine));
    assert!(!got.is_empty() && got[0] > 0, "{got:?}");
    assert_eq!(*got.last().unwrap(), 8);
    assert_eq!(send(&mut engine, 9, 1).base_offset, 9);
}

#[test]
fn given_a_persisted_sealed_segment_that_reads_as_zeros_when_recovered_then_the_partition_is_degraded()
 {
    // Given/When: the same damage under `persisted`, whose every byte was
    // durable before it was acknowledged.
    let (_engine, report) = recover_with_a_zeroed_sealed_segment(persisted());

    // Then: it is corruption of acknowledged data.
    assert_eq!(report.degraded.len(), 1, "{:?}", report.degraded);
}
