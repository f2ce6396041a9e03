//! Polling strategies, stored offsets and validation, as a client sees them.

use std::sync::Arc;

use sluice_testkit::engine::*;

/// An engine holding `m0..m{n}` in batches of `per_batch`.
fn engine_with(n: u64, per_batch: u64) -> (SimStorage, Engine) {
    let (sim, mut engine) = sim_with(buffered());
    let mut i = 0;
    while i < n {
        let k = per_batch.min(n - i);
        send(&mut engine, i, k);
        i += k;
    }
    (sim, engine)
}

fn range(from: u64, to: u64) -> Vec<u64> {
    (from..to).collect()
}

// ---- strategies --------------------------------------------------------------

#[test]
fn offset_strategy_starts_at_the_given_offset() {
    let (_sim, mut engine) = engine_with(10, 3);
    // Mid-batch starts are served from the exact offset.
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(4), 3),
        [4, 5, 6]
    );
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(0), 100),
        range(0, 10)
    );
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(9), 5),
        [9]
    );
    let msgs = poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::Offset(7),
        1,
    );
    assert_eq!(payloads_of(&msgs), ["m7"]);
}

#[test]
fn timestamp_strategy_starts_at_the_first_message_at_or_after_it() {
    // Given: three batches sent 1 ms apart.
    let sim = new_sim();
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let (mut engine, _) = open_sim_with_clock(&sim, clock.clone());
    setup(&mut engine, buffered());
    send(&mut engine, 0, 2);
    clock.advance(1000);
    send(&mut engine, 2, 3);
    clock.advance(1000);
    send(&mut engine, 5, 1);
    let all = all_messages(&mut engine);
    let ts: Vec<u64> = all.iter().map(|m| m.timestamp).collect();
    assert_eq!(ts[0], ts[1]);
    assert!(ts[1] + 1000 <= ts[2] && ts[2] == ts[4] && ts[4] + 1000 <= ts[5]);

    // Then: a batch's own timestamp starts at its first message...
    let strategy = PollingStrategy::Timestamp(ts[2]);
    assert_eq!(poll_offsets(&mut engine, strategy, 10), [2, 3, 4, 5]);
    assert_eq!(poll_offsets(&mut engine, strategy, 2), [2, 3]);
    // ...a time between batches starts at the next batch...
    let between = PollingStrategy::Timestamp(ts[2] + 500);
    assert_eq!(poll_offsets(&mut engine, between, 10), [5]);
    // ...a time before everything starts at the beginning...
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Timestamp(0), 10),
        range(0, 6)
    );
    // ...and a time after everything yields nothing.
    let after = PollingStrategy::Timestamp(ts[5] + 1);
    assert!(poll_offsets(&mut engine, after, 10).is_empty());
}

#[test]
fn timestamp_strategy_spans_segments() {
    let sim = new_sim();
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let (mut engine, _) = open_sim_with_clock(&sim, clock.clone());
    let opts = TopicOptions {
        segment_size: 200,
        ..buffered()
    };
    setup(&mut engine, opts);
    let mut stamps = Vec::new();
    for i in 0..30 {
        clock.advance(100);
        send(&mut engine, i, 1);
        stamps.push(all_messages(&mut engine)[i as usize].timestamp);
    }
    assert!(engine.partition(key()).unwrap().log().segment_count() > 3);
    for (i, &ts) in stamps.iter().enumerate() {
        let got = poll_offsets(&mut engine, PollingStrategy::Timestamp(ts), 1);
        assert_eq!(got, [i as u64], "timestamp of message {i}");
    }
}

#[test]
fn first_strategy_starts_at_the_first_message() {
    let (_sim, mut engine) = engine_with(5, 2);
    assert_eq!(poll_offsets(&mut engine, PollingStrategy::First, 2), [0, 1]);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::First, 10),
        range(0, 5)
    );
}

#[test]
fn last_strategy_returns_the_last_n_messages() {
    let (_sim, mut engine) = engine_with(10, 4);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Last, 3),
        [7, 8, 9]
    );
    assert_eq!(poll_offsets(&mut engine, PollingStrategy::Last, 1), [9]);
    // More than stored: everything.
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Last, 50),
        range(0, 10)
    );
}

#[test]
fn every_strategy_on_an_empty_partition_returns_nothing() {
    let (_sim, mut engine) = sim_with(buffered());
    for strategy in [
        PollingStrategy::Offset(0),
        PollingStrategy::Timestamp(0),
        PollingStrategy::First,
        PollingStrategy::Last,
        PollingStrategy::Next,
    ] {
        let polled = engine
            .poll(
                &stream(),
                &topic(),
                PARTITION,
                Consumer::consumer(1),
                strategy,
                10,
                true,
            )
            .unwrap();
        assert!(polled.messages.is_empty(), "{strategy:?}");
        assert_eq!(polled.current_offset, 0, "{strategy:?}");
    }
    // An empty poll with auto-commit stores nothing.
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
}

#[test]
fn next_without_a_stored_offset_starts_at_zero() {
    let (_sim, mut engine) = engine_with(5, 5);
    assert_eq!(poll_offsets(&mut engine, PollingStrategy::Next, 2), [0, 1]);
    // Without auto-commit, Next does not move.
    assert_eq!(poll_offsets(&mut engine, PollingStrategy::Next, 2), [0, 1]);
}

#[test]
fn next_with_a_stored_offset_continues_after_it() {
    let (_sim, mut engine) = engine_with(10, 3);
    store_offset(&mut engine, Consumer::consumer(1), 4).unwrap();
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Next, 3),
        [5, 6, 7]
    );
    // At the end: nothing more.
    store_offset(&mut engine, Consumer::consumer(1), 9).unwrap();
    assert!(poll_offsets(&mut engine, PollingStrategy::Next, 3).is_empty());
}

#[test]
fn auto_commit_stores_the_last_polled_offset_and_next_continues() {
    let (_sim, mut engine) = engine_with(10, 3);
    let c = Consumer::consumer(7);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let polled = engine
            .poll(
                &stream(),
                &topic(),
                PARTITION,
                c,
                PollingStrategy::Next,
                3,
                true,
            )
            .unwrap();
        seen.extend(offsets_of(&polled.messages));
    }
    assert_eq!(seen, range(0, 10));
    assert_eq!(stored_offset(&mut engine, c), Some(9));
    // A non-Next strategy with auto-commit stores what it returned too.
    engine
        .poll(
            &stream(),
            &topic(),
            PARTITION,
            c,
            PollingStrategy::Offset(2),
            2,
            true,
        )
        .unwrap();
    assert_eq!(stored_offset(&mut engine, c), Some(3));
    assert_eq!(
        poll_offsets_for(&mut engine, c, PollingStrategy::Next, 1),
        [4]
    );
}

fn poll_offsets_for(
    engine: &mut Engine,
    consumer: Consumer,
    strategy: PollingStrategy,
    count: u64,
) -> Vec<u64> {
    offsets_of(&poll(engine, consumer, strategy, count))
}

#[test]
fn consumer_and_group_offsets_with_the_same_id_are_independent() {
    let (_sim, mut engine) = engine_with(10, 10);
    engine
        .create_group(&stream(), &topic(), Some(1), "workers")
        .unwrap();
    store_offset(&mut engine, Consumer::consumer(1), 2).unwrap();
    store_offset(&mut engine, Consumer::group(1), 6).unwrap();
    assert_eq!(
        poll_offsets_for(&mut engine, Consumer::consumer(1), PollingStrategy::Next, 1),
        [3]
    );
    assert_eq!(
        poll_offsets_for(&mut engine, Consumer::group(1), PollingStrategy::Next, 1),
        [7]
    );
}

#[test]
fn count_limits_the_number_of_messages() {
    let (_sim, mut engine) = engine_with(10, 10);
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(0), 1),
        [0]
    );
    assert_eq!(
        poll_offsets(&mut engine, PollingStrategy::Offset(3), 4),
        [3, 4, 5, 6]
    );
    assert!(poll_offsets(&mut engine, PollingStrategy::Offset(0), 0).is_empty());
    assert!(poll_offsets(&mut engine, PollingStrategy::Next, 0).is_empty());
}

#[test]
fn polling_beyond_the_end_returns_nothing() {
    let (_sim, mut engine) = engine_with(5, 2);
    let polled = engine
        .poll(
            &stream(),
            &topic(),
            PARTITION,
            Consumer::consumer(1),
            PollingStrategy::Offset(5),
            10,
            false,
        )
        .unwrap();
    assert!(polled.messages.is_empty());
    assert_eq!((polled.partition_id, polled.current_offset), (PARTITION, 4));
    assert!(poll_offsets(&mut engine, PollingStrategy::Offset(u64::MAX), 10).is_empty());
}

// ---- stored offsets ----------------------------------------------------------

#[test]
fn storing_an_offset_beyond_the_last_message_is_refused() {
    let (_sim, mut engine) = engine_with(5, 5);
    assert_eq!(
        store_offset(&mut engine, Consumer::consumer(1), 5),
        Err(EngineError::OffsetOutOfRange {
            offset: 5,
            current: Some(4)
        })
    );
    // The last offset itself is fine.
    store_offset(&mut engine, Consumer::consumer(1), 4).unwrap();
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(4));
}

#[test]
fn storing_an_offset_on_an_empty_partition_is_refused() {
    let (_sim, mut engine) = sim_with(buffered());
    assert_eq!(
        store_offset(&mut engine, Consumer::consumer(1), 0),
        Err(EngineError::OffsetOutOfRange {
            offset: 0,
            current: None
        })
    );
    assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
}

#[test]
fn get_offset_reports_current_and_stored() {
    let (_sim, mut engine) = engine_with(8, 3);
    let c = Consumer::consumer(3);
    assert_eq!(
        engine
            .get_offset(&stream(), &topic(), PARTITION, c)
            .unwrap(),
        None
    );
    store_offset(&mut engine, c, 2).unwrap();
    assert_eq!(
        engine
            .get_offset(&stream(), &topic(), PARTITION, c)
            .unwrap(),
        Some((7, 2))
    );
}

#[test]
fn group_offsets_require_an_existing_group() {
    let (_sim, mut engine) = engine_with(3, 3);
    let g = Consumer::group(9);
    let missing = EngineError::GroupNotFound(Identifier::Numeric(9));
    assert_eq!(store_offset(&mut engine, g, 1), Err(missing.clone()));
    assert_eq!(
        try_poll(&mut engine, g, PollingStrategy::Next, 1),
        Err(missing.clone())
    );
    assert_eq!(
        engine.get_offset(&stream(), &topic(), PARTITION, g),
        Err(missing.clone())
    );
    assert_eq!(
        engine.delete_offset(&stream(), &topic(), PARTITION, g),
        Err(missing)
    );
    // Once the group exists, the same calls work.
    engine
        .create_group(&stream(), &topic(), Some(9), "nine")
        .unwrap();
    store_offset(&mut engine, g, 1).unwrap();
    assert_eq!(stored_offset(&mut engine, g), Some(1));
}

#[test]
fn deleting_an_offset_makes_next_start_at_zero() {
    let (_sim, mut engine) = engine_with(6, 6);
    let c = Consumer::consumer(1);
    store_offset(&mut engine, c, 3).unwrap();
    assert!(
        engine
            .delete_offset(&stream(), &topic(), PARTITION, c)
            .unwrap()
    );
    assert_eq!(stored_offset(&mut engine, c), None);
    assert_eq!(poll_offsets(&mut engine, PollingStrategy::Next, 2), [0, 1]);
    // Deleting again reports there was nothing to delete.
    assert!(
        !engine
            .delete_offset(&stream(), &topic(), PARTITION, c)
            .unwrap()
    );
}

#[test]
fn unknown_resources_are_typed_errors() {
    let (_sim, mut engine) = engine_with(1, 1);
    let c = Consumer::consumer(1);
    assert_eq!(
        engine
            .poll(&stream(), &topic(), 9, c, PollingStrategy::First, 1, false)
            .unwrap_err(),
        EngineError::PartitionNotFound {
            stream: 0,
            topic: 0,
            partition: 9
        }
    );
    assert_eq!(
        engine
            .poll(
                &"nope".into(),
                &topic(),
                1,
                c,
                PollingStrategy::First,
                1,
                false
            )
            .unwrap_err(),
        EngineError::StreamNotFound("nope".into())
    );
    assert_eq!(
        engine
            .poll(&stream(), &5.into(), 1, c, PollingStrategy::First, 1, false)
            .unwrap_err(),
        EngineError::TopicNotFound {
            stream: stream(),
            topic: 5.into()
        }
    );
    assert!(matches!(
        engine.send(
            &stream(),
            &topic(),
            &Partitioning::PartitionId(9),
            batch(0, 1)
        ),
        Err(EngineError::PartitionNotFound { partition: 9, .. })
    ));
    assert!(matches!(
        engine.send(
            &stream(),
            &topic(),
            &Partitioning::PartitionId(0),
            Vec::new()
        ),
        Err(EngineError::Invalid { .. })
    ));
}

// ---- names and ids -----------------------------------------------------------

fn is_invalid(r: Result<impl std::fmt::Debug, EngineError>) -> bool {
    matches!(r, Err(EngineError::Invalid { .. }))
}

#[test]
fn duplicate_names_and_ids_are_refused() {
    let (_sim, mut engine) = sim_with(buffered());
    assert_eq!(
        engine.create_stream(None, STREAM).unwrap_err(),
        EngineError::NameTaken {
            kind: "stream",
            name: STREAM.into()
        }
    );
    assert_eq!(
        engine.create_stream(Some(0), "other").unwrap_err(),
        EngineError::IdTaken {
            kind: "stream",
            id: 0
        }
    );
    assert_eq!(
        engine
            .create_topic(&stream(), None, TOPIC, 1, buffered(), 0, 0, 1)
            .unwrap_err(),
        EngineError::NameTaken {
            kind: "topic",
            name: TOPIC.into()
        }
    );
    assert_eq!(
        engine
            .create_topic(&stream(), Some(0), "other", 1, buffered(), 0, 0, 1)
            .unwrap_err(),
        EngineError::IdTaken {
            kind: "topic",
            id: 0
        }
    );
    engine.create_group(&stream(), &topic(), None, "g").unwrap();
    assert_eq!(
        engine
            .create_group(&stream(), &topic(), None, "g")
            .unwrap_err(),
        EngineError::NameTaken {
            kind: "consumer group",
            name: "g".into()
        }
    );
    assert_eq!(
        engine
            .create_group(&stream(), &topic(), Some(0), "h")
            .unwrap_err(),
        EngineError::IdTaken {
            kind: "consumer group",
            id: 0
        }
    );
    // Renaming onto a taken name is refused; renaming to one's own name is not.
    engine.create_stream(None, "second").unwrap();
    assert!(matches!(
        engine.update_stream(&"second".into(), STREAM),
        Err(EngineError::NameTaken { .. })
    ));
    engine.update_stream(&stream(), STREAM).unwrap();
    // Nothing refused reached the metadata.
    assert_eq!(engine.streams().count(), 2);
}

#[test]
fn numeric_blank_and_overlong_names_are_refused() {
    let (_sim, mut engine) = sim_with(buffered());
    let long = "x".repeat(256);
    for bad in ["123", "0", " ", "", long.as_str()] {
        assert!(
            is_invalid(engine.create_stream(None, bad)),
            "stream {bad:?}"
        );
        assert!(
            is_invalid(engine.create_topic(&stream(), None, bad, 1, buffered(), 0, 0, 1)),
            "topic {bad:?}"
        );
        assert!(
            is_invalid(engine.create_group(&stream(), &topic(), None, bad)),
            "group {bad:?}"
        );
        assert!(
            is_invalid(engine.update_stream(&stream(), bad)),
            "rename {bad:?}"
        );
    }
    // The longest allowed name and a name with digits and letters are fine.
    engine.create_stream(None, &"y".repeat(255)).unwrap();
    engine.create_stream(None, "123abc").unwrap();
    assert!(engine.stream(&"123abc".into()).is_ok());
}

// ---- arithmetic at the edges of u32 and u64 ----------------------------------

#[test]
fn creating_partitions_near_u32_max_is_a_typed_error_and_changes_nothing() {
    // Given: a topic with one partition.
    let (_sim, mut engine) = sim_with(buffered());
    // When: nearly u32::MAX more are asked for (have + count would overflow).
    for count in [u32::MAX, u32::MAX - 1] {
        let err = engine
            .create_partitions(&stream(), &topic(), count)
            .unwrap_err();
        // Then: a typed error names the field, and the topic is unchanged.
        assert!(
            matches!(
                err,
                EngineError::Invalid {
                    what: "partitions_count",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    assert_eq!(
        engine
            .create_partitions(&stream(), &topic(), 1)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn next_over_an_offset_file_holding_u64_max_is_a_typed_error_and_sends_stay_safe() {
    use sluice_server::partition::offsets::{OFFSET_LAYOUT, OffsetRecord};
    // Given: an offset file holding u64::MAX (no store can write it: only
    // disk contents can), found at recovery.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 2);
    drop(engine);
    let record = OffsetRecord {
        generation: 0,
        offset: Some(u64::MAX),
    };
    let bytes = OFFSET_LAYOUT.encode(1, &record).unwrap();
    let file = sim
        .open(&sim_paths().consumers.join("1"), OpenMode::CreateNew)
        .unwrap();
    file.write_at(OFFSET_LAYOUT.slot_offset(1), &bytes).unwrap();
    drop(file);
    let (mut engine, _) = reopen(&sim);

    // When: consumer 1 polls `Next`. Then: a typed error, no panic, no wrap to 0.
    let err = try_poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::Next,
        10,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::OffsetOutOfRange {
                offset: u64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    // And: a send, which could only get offsets past u64::MAX, is refused
    // with a typed error, and the stored messages are still served.
    assert!(
        matches!(
            try_send(&mut engine, 2, 1),
            Err(EngineError::Invalid {
                what: "messages",
                ..
            })
        ),
        "a send past u64::MAX was not refused"
    );
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1"]);
}
