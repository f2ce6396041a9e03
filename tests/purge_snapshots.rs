//! insta snapshots of what a purge does, step by step: the obligation states
//! it persists and the normalised storage operations it issues, for a clean
//! purge, each directory-sync failure followed by retries, a power loss at
//! each persisted state followed by recovery, and a topic purge over several
//! partitions. All on `SimStorage` through the production engine.
//!
//! A snapshot changes when the purge's I/O changes; review the diff as you
//! would review the protocol (docs/adr/0003-purge-obligation.md).

use std::fmt::Write as _;
use std::path::Path;

use sluice_server::partition::purge::{LoadedObligation, decode_file};
use sluice_storage::{SimConfig, SyncFailureSemantics};
use sluice_testkit::engine::*;
use sluice_testkit::trace::io_since;

/// The obligation as the disk holds it now (what a power loss would leave),
/// then as the page cache does (what the next process reads after a process
/// crash): a clean attempt writes it without a sync (ADR 0003 §9).
fn durable_obligation(sim: &SimStorage, partition: u32) -> String {
    let path = format!("/data/streams/0/topics/0/partitions/{partition}/purge.obligation");
    let describe = |view: &std::collections::BTreeMap<String, NodeView>| match view.get(&path) {
        Some(NodeView::File(bytes)) => match decode_file(bytes) {
            LoadedObligation::Valid {
                obligation: value,
                seq,
                ..
            } => format!(
                "seq {seq}: generation {} {} attempts {} removed {:?}",
                value.generation(),
                value.state().as_str(),
                value.attempts(),
                value.removed().values().map(|n| n.len()).sum::<usize>()
            ),
            LoadedObligation::Missing => "empty".into(),
            LoadedObligation::Invalid(_) => "invalid".into(),
        },
        _ => "absent".into(),
    };
    format!(
        "{}; in the page cache: {}",
        describe(&sim.durable_view()),
        describe(&sim.cached_view())
    )
}

/// A topic with `partitions` partitions, an old history, a consumer and a
/// group offset in each, everything durable.
fn given(semantics: SyncFailureSemantics, partitions: u32) -> (SimStorage, Engine) {
    let sim = SimStorage::new(SimConfig {
        seed: 5,
        sync_failure: semantics,
        capacity: None,
    });
    let mut engine = sim_engine_on(&sim);
    setup_partitions(&mut engine, persisted(), partitions);
    engine
        .create_group(&stream(), &topic(), None, "billing")
        .unwrap();
    for p in 0..partitions {
        let batch = (0..3)
            .map(|i| NewMessage::new(format!("old-{i}")))
            .collect();
        engine
            .send(&stream(), &topic(), &Partitioning::PartitionId(p), batch)
            .unwrap();
        engine
            .store_offset(&stream(), &topic(), p, Consumer::consumer(1), 1)
            .unwrap();
        engine
            .store_offset(&stream(), &topic(), p, Consumer::group(0), 2)
            .unwrap();
    }
    (sim, engine)
}

fn sim_engine_on(sim: &SimStorage) -> Engine {
    let storage: std::sync::Arc<dyn DurableStorage> = std::sync::Arc::new(sim.clone());
    Engine::open(
        storage,
        std::sync::Arc::new(ManualClock::new(START_MICROS)),
        config(Path::new(DATA_DIR)),
    )
    .unwrap()
    .0
}

/// Asserts `out` against `tests/snapshots/purge_snapshots__<name>.snap`, the
/// names these snapshots had when this suite was its own test binary (insta
/// would now prefix the binary's module path, `integration__purge_snapshots__`).
fn assert_snapshot(name: &str, out: &str) {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(format!("purge_snapshots__{name}"), out);
    });
}

#[test]
fn clean_purge_of_one_partition() {
    let (sim, mut engine) = given(SyncFailureSemantics::Linux, 1);
    let from = sim.op_count();
    engine
        .purge_partition(&stream(), &topic(), PARTITION)
        .unwrap();
    engine.reconcile();
    let mut out = io_since(&sim, from);
    let _ = writeln!(
        out,
        "durable obligation: {}",
        durable_obligation(&sim, PARTITION)
    );
    assert_snapshot("clean_purge_of_one_partition", &out);
}

#[test]
fn each_failed_directory_sync_then_retries() {
    let mut out = String::new();
    for dir in ["/segments", "/consumers", "/groups"] {
        let (sim, mut engine) = given(SyncFailureSemantics::Linux, 1);
        sim.fail_when(
            OpMatcher::kind(OpKind::SyncDir).path_ends_with(dir),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
        let from = sim.op_count();
        engine
            .purge_partition(&stream(), &topic(), PARTITION)
            .unwrap();
        engine.reconcile();
        let _ = writeln!(
            out,
            "== sync of {dir} fails once (Linux semantics)\n-- first attempt"
        );
        out.push_str(&io_since(&sim, from));
        let _ = writeln!(
            out,
            "durable obligation: {}",
            durable_obligation(&sim, PARTITION)
        );
        let from = sim.op_count();
        let passes = engine.reconcile_until_idle(5);
        let _ = writeln!(out, "-- retry ({passes} pass)");
        out.push_str(&io_since(&sim, from));
        let _ = writeln!(
            out,
            "durable obligation: {}",
            durable_obligation(&sim, PARTITION)
        );
    }
    assert_snapshot("each_failed_directory_sync_then_retries", &out);
}

#[test]
fn power_loss_after_each_obligation_write_then_recovery() {
    // A clean attempt writes its record twice: the plan (synced before its
    // unlinks) and `Applied` (not synced, ADR 0003 §9). Failing the (k+1)-th
    // write stops the
    // attempt after k; the kernel then writes back everything cached (as it
    // may at any time), and the power goes: what recovery finds is any of
    // the states a power loss can leave.
    let mut out = String::new();
    for k in 0..3u32 {
        let (sim, mut engine) = given(SyncFailureSemantics::Linux, 1);
        sim.fail_when(
            OpMatcher::kind(OpKind::Write).path_ends_with("/purge.obligation"),
            Fault::io(FaultMode::Before),
            k,
            u32::MAX,
        );
        engine
            .purge_partition(&stream(), &topic(), PARTITION)
            .unwrap();
        engine.reconcile();
        sim.clear_faults();
        make_everything_durable(&sim);
        let before = durable_obligation(&sim, PARTITION);
        drop(engine);
        sim.crash(Crash::PowerLoss);
        sim.clear_faults();
        let mut engine = sim_engine_on(&sim);
        let recovered = engine
            .partition(key())
            .and_then(|p| p.obligation())
            .map_or("none".to_string(), |o| o.state().as_str().to_string());
        engine.reconcile_until_idle(5);
        let after = engine
            .partition(key())
            .and_then(|p| p.obligation())
            .map_or("none".to_string(), |o| o.state().as_str().to_string());
        let polled = engine
            .poll(
                &stream(),
                &topic(),
                PARTITION,
                Consumer::consumer(1),
                PollingStrategy::Next,
                10,
                false,
            )
            .unwrap()
            .messages
            .len();
        let _ = writeln!(
            out,
            "{k} obligation writes | on disk: {before} | recovered: {recovered} | after reconcile: {after} | consumer 1 offset: {:?} | next returns {polled} old messages",
            engine
                .get_offset(&stream(), &topic(), PARTITION, Consumer::consumer(1))
                .unwrap(),
        );
    }
    assert_snapshot("power_loss_after_each_obligation_write_then_recovery", &out);
}

#[test]
fn topic_purge_over_three_partitions_is_one_commit() {
    let (sim, mut engine) = given(SyncFailureSemantics::Linux, 3);
    let from = sim.op_count();
    engine.purge_topic(&stream(), &topic()).unwrap();
    engine.reconcile();
    let trace = io_since(&sim, from);
    // The commit point: exactly one metadata rename, before any cleanup.
    let renames: Vec<&str> = trace
        .lines()
        .filter(|l| l.starts_with("rename") && l.contains("metadata"))
        .collect();
    assert_eq!(renames.len(), 1, "{trace}");
    let first_cleanup = trace
        .lines()
        .position(|l| l.starts_with("remove_file p"))
        .unwrap();
    let commit = trace
        .lines()
        .position(|l| l.starts_with("rename") && l.contains("metadata"))
        .unwrap();
    assert!(commit < first_cleanup, "{trace}");
    let mut out = trace;
    for p in 0..3 {
        let _ = writeln!(
            out,
            "p{p} durable obligation: {}",
            durable_obligation(&sim, p)
        );
    }
    assert_snapshot("topic_purge_over_three_partitions_is_one_commit", &out);
}
