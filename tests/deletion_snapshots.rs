//! insta snapshots of what each deletion does, step by step: the phase its
//! obligation is in after each call (`Engine::pending_deletions`) and the
//! normalised storage operations it issues, for a clean run, each failed
//! directory sync followed by the retry, and a power loss while it is pending
//! followed by recovery's obligation and the cleanup. For a stream, a topic,
//! a partition and a group; all on `SimStorage` through the production
//! engine (the same normaliser as the purge's snapshots: `sluice_testkit::trace`).
//!
//! A snapshot changes when a deletion's I/O changes; review the diff as you
//! would review the protocol (engine/deletion.rs, issue 17).

use std::fmt::Write as _;
use std::sync::Arc;

use sluice_storage::SimConfig;
use sluice_testkit::engine::*;
use sluice_testkit::trace::io_since;

use DeletionKind as Kind;

fn open(sim: &SimStorage, micros: u64) -> Engine {
    open_sim_with_clock(sim, Arc::new(ManualClock::new(micros))).0
}

/// Stream `orders` with topic `events` of two partitions (persisted), a
/// message, a consumer offset and group `billing`'s offset in each; durable.
fn given() -> (SimStorage, Engine) {
    let sim = new_sim_configured(SimConfig {
        seed: 5,
        sync_failure: SyncFailureSemantics::Linux,
        capacity: None,
    });
    let mut engine = open(&sim, START_MICROS);
    setup_partitions(&mut engine, persisted(), 2);
    engine
        .create_group(&stream(), &topic(), None, "billing")
        .unwrap();
    for p in 0..2 {
        engine
            .send(
                &stream(),
                &topic(),
                &Partitioning::PartitionId(p),
                vec![NewMessage::new(format!("m{p}"))],
            )
            .unwrap();
        engine
            .store_offset(&stream(), &topic(), p, Consumer::consumer(1), 0)
            .unwrap();
        engine
            .store_offset(&stream(), &topic(), p, Consumer::group(GROUP), 0)
            .unwrap();
    }
    make_everything_durable(&sim);
    (sim, engine)
}

/// The pending deletions and their phases, or `none`.
fn pending(engine: &Engine) -> String {
    let all: Vec<String> = engine
        .pending_deletions()
        .map(|(r, phase)| format!("{r} {}", phase.as_str()))
        .collect();
    if all.is_empty() {
        "none".into()
    } else {
        all.join(", ")
    }
}

/// Which of the deleted resource's paths each view still holds.
fn on_disk(sim: &SimStorage, kind: Kind) -> String {
    let held = |view: &std::collections::BTreeMap<String, NodeView>| -> Vec<&str> {
        kind.paths()
            .into_iter()
            .filter(|p| view.contains_key(*p))
            .collect()
    };
    format!(
        "cached {:?}, durable {:?}",
        held(&sim.cached_view()),
        held(&sim.durable_view())
    )
}

/// Asserts `out` against `tests/snapshots/deletion_snapshots__<name>.snap`.
fn assert_snapshot(name: &str, out: &str) {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(format!("deletion_snapshots__{name}"), out);
    });
}

#[test]
fn clean_deletion_of_each_kind() {
    let mut out = String::new();
    for kind in Kind::ALL {
        let (sim, mut engine) = given();
        let from = sim.op_count();
        kind.delete(&mut engine).unwrap();
        engine.reconcile();
        let _ = writeln!(out, "== delete {}", kind.resource().kind());
        out.push_str(&io_since(&sim, from));
        let _ = writeln!(out, "pending: {}", pending(&engine));
        let _ = writeln!(out, "on disk: {}", on_disk(&sim, kind));
        assert_eq!(engine.pending_deletions().count(), 0, "{kind:?}");
    }
    assert_snapshot("clean_deletion_of_each_kind", &out);
}

#[test]
fn each_failed_directory_sync_then_the_retry() {
    let mut out = String::new();
    for kind in Kind::ALL {
        for dir in kind.synced_dirs() {
            let (sim, mut engine) = given();
            sim.fail_when(
                OpMatcher::kind(OpKind::SyncDir).path_ends_with(dir),
                Fault::io(FaultMode::Before),
                0,
                1,
            );
            let from = sim.op_count();
            kind.delete(&mut engine).unwrap();
            engine.reconcile();
            let _ = writeln!(
                out,
                "== delete {}: sync of {dir} fails once (Linux semantics)\n-- the call",
                kind.resource().kind()
            );
            out.push_str(&io_since(&sim, from));
            let _ = writeln!(out, "pending: {}", pending(&engine));
            let _ = writeln!(out, "on disk: {}", on_disk(&sim, kind));
            // Never done while the removal is unconfirmed.
            assert_ne!(engine.pending_deletions().count(), 0, "{kind:?} {dir}");
            let from = sim.op_count();
            let passes = engine.reconcile_until_idle(5);
            let _ = writeln!(out, "-- the retry ({passes} pass)");
            out.push_str(&io_since(&sim, from));
            let _ = writeln!(out, "pending: {}", pending(&engine));
            let _ = writeln!(out, "on disk: {}", on_disk(&sim, kind));
            assert_eq!(engine.pending_deletions().count(), 0, "{kind:?} {dir}");
        }
    }
    assert_snapshot("each_failed_directory_sync_then_the_retry", &out);
}

#[test]
fn power_loss_while_pending_then_recovery_and_cleanup() {
    let mut out = String::new();
    for kind in Kind::ALL {
        let (sim, mut engine) = given();
        let dir = kind.synced_dirs()[0];
        sim.fail_when(
            OpMatcher::kind(OpKind::SyncDir).path_ends_with(dir),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
        kind.delete(&mut engine).unwrap();
        engine.reconcile();
        let _ = writeln!(
            out,
            "== delete {}: sync of {dir} fails, then the power is cut",
            kind.resource().kind()
        );
        let _ = writeln!(out, "pending: {}", pending(&engine));
        drop(engine);
        sim.crash(Crash::PowerLoss);
        let _ = writeln!(out, "on disk after the power loss: {}", on_disk(&sim, kind));
        let mut engine = open(&sim, RESTART_MICROS);
        // Recovery finds what no metadata names and owes its removal again.
        let _ = writeln!(out, "recovered obligation: {}", pending(&engine));
        assert_ne!(engine.pending_deletions().count(), 0, "{kind:?}");
        let from = sim.op_count();
        let passes = engine.reconcile_until_idle(5);
        let _ = writeln!(out, "-- cleanup ({passes} pass)");
        out.push_str(&io_since(&sim, from));
        let _ = writeln!(out, "pending: {}", pending(&engine));
        let _ = writeln!(out, "on disk: {}", on_disk(&sim, kind));
        assert_eq!(engine.pending_deletions().count(), 0, "{kind:?}");
    }
    assert_snapshot("power_loss_while_pending_then_recovery_and_cleanup", &out);
}
