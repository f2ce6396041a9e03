//! Disk full (issue 7, item 4): ENOSPC during sends, offset stores, offset
//! deletes and each purge step, on `SimStorage` through the production engine
//! (and once through the HTTP server).
//!
//! Each test: **given** acknowledged state, **when** the disk is full (a
//! capacity limit, or ENOSPC injected into one kind of operation), **then**
//! the request fails with `EngineError::Storage` of kind `NoSpace` (HTTP 507
//! `storage_full`), nothing acknowledged changes, the same requests succeed
//! once space returns, the purge reaches `Applied`, and a power loss followed
//! by recovery serves exactly what was acknowledged.

use std::path::Path;
use std::sync::Arc;

use sluice_testkit::engine::*;

/// Bytes the simulated disk holds now (every file in the page cache).
fn used(sim: &SimStorage) -> u64 {
    sim.cached_view()
        .values()
        .map(|n| match n {
            NodeView::File(bytes) => bytes.len() as u64,
            _ => 0,
        })
        .sum()
}

/// No write may grow any file from now on.
fn fill_disk(sim: &SimStorage) {
    sim.set_capacity(Some(used(sim)));
}

fn space_returns(sim: &SimStorage) {
    sim.set_capacity(None);
    sim.clear_faults();
}

fn enospc(matcher: OpMatcher, sim: &SimStorage) {
    sim.fail_when(matcher, Fault::no_space(FaultMode::Before), 0, u32::MAX);
}

#[track_caller]
fn assert_no_space<T: std::fmt::Debug>(r: Result<T, EngineError>, ctx: &str) -> EngineError {
    let e = r.expect_err(ctx);
    match &e {
        EngineError::Storage(s) => assert_eq!(s.kind, ErrorKind::NoSpace, "{ctx}: {e}"),
        other => panic!("{ctx}: expected a storage error, got {other}"),
    }
    assert!(
        e.to_string().contains("no space left on device"),
        "{ctx}: {e}"
    );
    e
}

fn delete_offset(engine: &mut Engine, consumer: Consumer) -> Result<bool, EngineError> {
    engine.delete_offset(&stream(), &topic(), PARTITION, consumer)
}

// ---- sends -----------------------------------------------------------------------------

#[test]
fn a_send_on_a_full_disk_fails_typed_and_sending_resumes_without_a_gap() {
    for (policy, opts) in [("persisted", persisted()), ("buffered", buffered())] {
        // A segment per batch too: the roll's new files must not break anything.
        for segment_size in [64 << 20, 1] {
            let ctx = format!("{policy}, segment_size {segment_size}");
            let (sim, mut engine) = sim_with(TopicOptions {
                segment_size,
                ..opts
            });
            send(&mut engine, 0, 3);
            // When the disk is full, a send fails and names the segment file.
            fill_disk(&sim);
            let e = assert_no_space(try_send(&mut engine, 3, 2), &ctx);
            assert!(e.to_string().contains(".log"), "{ctx}: {e}");
            assert_no_space(try_send(&mut engine, 3, 2), &ctx);
            // Nothing acknowledged changed, nothing half-written is served.
            assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);
            // Space returns: the same send lands right after the last acknowledged one.
            space_returns(&sim);
            assert_eq!(send(&mut engine, 3, 2).base_offset, 3, "{ctx}");
            if policy == "buffered" {
                engine.sync_all().unwrap();
            }
            let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
            assert!(report.degraded.is_empty(), "{ctx}");
            assert_eq!(
                payloads_of(&all_messages(&mut engine)),
                ["m0", "m1", "m2", "m3", "m4"],
                "{ctx}"
            );
            assert_eq!(send(&mut engine, 5, 1).base_offset, 5, "{ctx}");
        }
    }
}

#[test]
fn enospc_from_a_segment_sync_fails_the_send_and_it_resumes() {
    // Linux can report ENOSPC from fsync (delayed allocation): the write was
    // accepted, the writeback was not.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 2);
    enospc(
        OpMatcher::kind(OpKind::SyncFile).path_contains("/segments/"),
        &sim,
    );
    assert_no_space(try_send(&mut engine, 2, 1), "sync");
    space_returns(&sim);
    assert_eq!(send(&mut engine, 2, 1).base_offset, 2);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);
}

// ---- offset stores and deletes -----------------------------------------------------------

#[test]
fn offset_stores_and_deletes_on_a_full_disk_fail_typed_and_resume() {
    for consumer in [Consumer::consumer(1), Consumer::group(1)] {
        let ctx = format!("{consumer:?}");
        let (sim, mut engine) = sim_with(persisted());
        if consumer.kind == sluice_server::partition::offsets::OffsetKind::Group {
            engine
                .create_group(&stream(), &topic(), Some(1), "readers")
                .unwrap();
        }
        send(&mut engine, 0, 5);
        // A first store creates the file: the capacity limit refuses it.
        fill_disk(&sim);
        assert_no_space(store_offset(&mut engine, consumer, 1), &ctx);
        assert_eq!(stored_offset(&mut engine, consumer), None, "{ctx}");
        space_returns(&sim);
        store_offset(&mut engine, consumer, 1).unwrap();
        // A later store overwrites a slot inside the file (no growth): ENOSPC
        // from the write itself, then from the file sync.
        let dir = if consumer.kind == sluice_server::partition::offsets::OffsetKind::Group {
            "/groups/"
        } else {
            "/consumers/"
        };
        for op in [OpKind::Write, OpKind::SyncFile] {
            enospc(OpMatcher::kind(op).path_contains(dir), &sim);
            assert_no_space(store_offset(&mut engine, consumer, 2), &ctx);
            let now = stored_offset(&mut engine, consumer);
            // A write that failed before landing leaves the old value; a sync
            // that failed after the write landed may show the new one, which
            // was never acknowledged either way.
            match op {
                OpKind::Write => assert_eq!(now, Some(1), "{ctx}"),
                _ => assert!(matches!(now, Some(1) | Some(2)), "{ctx}: {now:?}"),
            }
            space_returns(&sim);
        }
        store_offset(&mut engine, consumer, 3).unwrap();
        // A delete writes a tombstone: ENOSPC refuses it, the offset stays.
        enospc(OpMatcher::kind(OpKind::Write).path_contains(dir), &sim);
        assert_no_space(delete_offset(&mut engine, consumer), &ctx);
        assert_eq!(stored_offset(&mut engine, consumer), Some(3), "{ctx}");
        let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
        assert_eq!(
            stored_offset(&mut engine, consumer),
            Some(3),
            "{ctx}: after power loss"
        );
        // Space returns: the delete goes through and stays done.
        space_returns(&sim);
        assert!(delete_offset(&mut engine, consumer).unwrap(), "{ctx}");
        let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
        assert_eq!(stored_offset(&mut engine, consumer), None, "{ctx}");
        assert_eq!(report.corrupt_offset_records, 0, "{ctx}");
    }
}

// ---- each purge step ----------------------------------------------------------------------

struct PurgeStep {
    name: &'static str,
    matcher: OpMatcher,
    /// Whether the purge itself (its commit point) fails, or only its cleanup.
    purge_fails: bool,
}

fn purge_steps() -> Vec<PurgeStep> {
    vec![
        PurgeStep {
            name: "metadata commit (write of metadata.tmp)",
            matcher: OpMatcher::kind(OpKind::Write).path_ends_with("/metadata.tmp"),
            purge_fails: true,
        },
        PurgeStep {
            name: "metadata commit (sync of metadata.tmp)",
            matcher: OpMatcher::kind(OpKind::SyncFile).path_ends_with("/metadata.tmp"),
            purge_fails: true,
        },
        // A clean attempt writes its obligation record without syncing it
        // (ADR 0003 §9): there is no obligation sync to fail.
        PurgeStep {
            name: "obligation write",
            matcher: OpMatcher::kind(OpKind::Write).path_ends_with("/purge.obligation"),
            purge_fails: false,
        },
        PurgeStep {
            name: "unlink of a dead segment",
            matcher: OpMatcher::kind(OpKind::RemoveFile).path_contains("/segments/"),
            purge_fails: false,
        },
        PurgeStep {
            name: "unlink of a dead group offset",
            matcher: OpMatcher::kind(OpKind::RemoveFile).path_contains("/groups/"),
            purge_fails: false,
        },
        PurgeStep {
            name: "directory sync of consumers/",
            matcher: OpMatcher::kind(OpKind::SyncDir).path_ends_with("/consumers"),
            purge_fails: false,
        },
        PurgeStep {
            name: "directory sync of segments/",
            matcher: OpMatcher::kind(OpKind::SyncDir).path_ends_with("/segments"),
            purge_fails: false,
        },
    ]
}

#[test]
fn enospc_at_each_purge_step_fails_cleanly_and_the_purge_reaches_applied() {
    for step in purge_steps() {
        let ctx = format!("ENOSPC at {}", step.name);
        // Given: three messages and two offsets of generation 0.
        let (sim, mut engine) = sim_with(persisted());
        engine
            .create_group(&stream(), &topic(), Some(1), "readers")
            .unwrap();
        send(&mut engine, 0, 3);
        store_offset(&mut engine, Consumer::consumer(1), 1).unwrap();
        store_offset(&mut engine, Consumer::group(1), 2).unwrap();
        // When: every matching operation fails with ENOSPC during the purge.
        enospc(step.matcher.clone(), &sim);
        let purged = engine.purge_topic(&stream(), &topic());
        if purged.is_ok() {
            // The cleanup pass the purge woke.
            engine.reconcile();
        }
        let p = engine.partition(key()).unwrap();
        if step.purge_fails {
            // Not acknowledged: nothing changed, the old history is served.
            assert_no_space(purged, &ctx);
            assert_eq!(p.generation(), 0, "{ctx}");
            assert!(p.obligation().is_none(), "{ctx}");
            // Putting the previous metadata back failed too (same fault), so
            // the engine refuses partition requests until a save succeeds.
            assert!(
                matches!(
                    try_send(&mut engine, 3, 1),
                    Err(EngineError::Unavailable(_))
                ),
                "{ctx}"
            );
            space_returns(&sim);
            assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);
            assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), Some(1));
            engine.purge_topic(&stream(), &topic()).unwrap();
            engine.reconcile();
        } else {
            // Acknowledged at its commit point; the cleanup step failed, is
            // recorded with a clear reason, and is retried.
            purged.unwrap();
            assert_eq!(p.generation(), 1, "{ctx}");
            let ob = p.obligation().unwrap();
            assert!(!ob.is_applied(), "{ctx}");
            let last = engine
                .reconciler()
                .status(ObligationKey::Purge(key()))
                .unwrap()
                .last_error
                .clone();
            assert!(
                last.as_deref()
                    .unwrap_or("")
                    .contains("no space left on device"),
                "{ctx}: {last:?}"
            );
            assert!(all_messages(&mut engine).is_empty(), "{ctx}");
            assert_eq!(stored_offset(&mut engine, Consumer::consumer(1)), None);
            // More attempts while the disk is still full change nothing.
            engine.reconcile_until_idle(3);
            assert!(
                !engine
                    .partition(key())
                    .unwrap()
                    .obligation()
                    .unwrap()
                    .is_applied()
            );
            space_returns(&sim);
        }
        // Then: once space returns, cleanup finishes...
        engine.reconcile_until_idle(10);
        let ob = engine.partition(key()).unwrap().obligation().unwrap();
        assert!(
            ob.is_applied(),
            "{ctx}: {:?} {:?}",
            ob.state(),
            ob.last_error()
        );
        // ...new writes are acknowledged...
        assert_eq!(send(&mut engine, 10, 2).base_offset, 0, "{ctx}");
        store_offset(&mut engine, Consumer::group(1), 1).unwrap();
        // ...and a power loss brings back exactly that, and no dead file.
        let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
        assert!(report.degraded.is_empty(), "{ctx}");
        assert_eq!(report.stale_records, 0, "{ctx}: a dead file is durable");
        assert_eq!(
            payloads_of(&all_messages(&mut engine)),
            ["m10", "m11"],
            "{ctx}"
        );
        assert_eq!(
            stored_offset(&mut engine, Consumer::consumer(1)),
            None,
            "{ctx}"
        );
        assert_eq!(
            stored_offset(&mut engine, Consumer::group(1)),
            Some(1),
            "{ctx}"
        );
        // `Applied` was written without a sync: the purge may be owed again,
        // and its cleanup finds nothing left to remove.
        engine.reconcile_until_idle(10);
        let ob = engine.partition(key()).unwrap().obligation().unwrap();
        assert!(ob.is_applied(), "{ctx}: after power loss");
    }
}

#[test]
fn a_purge_on_a_disk_that_stays_full_is_refused_and_the_engine_waits_for_space() {
    // Given: acknowledged messages; the disk fills up completely.
    let (sim, mut engine) = sim_with(persisted());
    send(&mut engine, 0, 3);
    fill_disk(&sim);
    // When: a purge's metadata commit fails, and so does putting the previous
    // metadata back (the same full disk).
    assert_no_space(engine.purge_topic(&stream(), &topic()), "purge");
    // Then: every partition request is refused as unavailable, never served
    // from metadata the disk may contradict...
    assert!(matches!(
        try_send(&mut engine, 3, 1),
        Err(EngineError::Unavailable(_))
    ));
    assert!(matches!(
        try_poll(
            &mut engine,
            Consumer::consumer(1),
            PollingStrategy::First,
            10
        ),
        Err(EngineError::Unavailable(_))
    ));
    // ...until space returns: the old history is served, nothing was purged.
    space_returns(&sim);
    assert_eq!(payloads_of(&all_messages(&mut engine)), ["m0", "m1", "m2"]);
    engine.purge_topic(&stream(), &topic()).unwrap();
    engine.reconcile();
    assert!(
        engine
            .partition(key())
            .unwrap()
            .obligation()
            .unwrap()
            .is_applied()
    );
    let (mut engine, report) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(report.stale_records, 0);
    assert!(all_messages(&mut engine).is_empty());
}

// ---- over HTTP ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_full_disk_is_507_storage_full_and_requests_resume() {
    use serde_json::json;
    use sluice_testkit::http::{Api, start_server_on};

    let sim = new_sim();
    let server = start_server_on(Arc::new(sim.clone()), Path::new(DATA_DIR), |_| {}).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    assert_eq!(api.send_to("orders", "events", &["a"]).await.status, 201);

    fill_disk(&sim);
    let r = api.send_to("orders", "events", &["b"]).await;
    assert_eq!(r.status, 507, "{}", r.text);
    assert_eq!(r.error_code(), "storage_full");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("no space left on device")
    );
    let store = json!({"consumer_id": 9, "partition_id": 0, "offset": 0});
    let r = api
        .put(
            "/streams/orders/topics/events/consumer-offsets",
            store.clone(),
        )
        .await;
    assert_eq!(r.status, 507, "{}", r.text);
    assert_eq!(r.error_code(), "storage_full");
    // A metadata change on a full disk: 507, then 503 until space returns.
    let r = api.post("/streams", json!({"name": "more"})).await;
    assert_eq!(r.status, 507, "{}", r.text);
    let r = api.send_to("orders", "events", &["b"]).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.error_code(), "unavailable");

    space_returns(&sim);
    let r = api.send_to("orders", "events", &["b"]).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = api
        .put("/streams/orders/topics/events/consumer-offsets", store)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let polled = api.poll("orders", "events", "kind=first&count=10").await;
    assert_eq!(polled, vec![(0, "a".to_string()), (1, "b".to_string())]);
    server.shutdown().await.unwrap();
}
