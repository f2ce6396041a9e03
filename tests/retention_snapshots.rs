//! insta snapshots of what retention does, step by step: the phase its
//! obligation is in after each pass (`Partition::retention`) and the
//! normalised storage operations it issues, for a clean pass, a failed
//! `segments/` sync followed by the retry, and a power loss while it is
//! pending followed by recovery and cleanup. By age; all on `SimStorage`
//! through the production engine (the normaliser of the purge and deletion
//! snapshots: `sluice_testkit::trace`).
//!
//! A snapshot changes when retention's I/O changes; review the diff as you
//! would review the protocol (partition/retention/, ADR 0016).

use std::fmt::Write as _;
use std::sync::Arc;

use sluice_testkit::engine::*;
use sluice_testkit::trace::io_since;

const EXPIRY_MICROS: u64 = 1_000_000;

/// A topic whose segments each hold one batch, with a 1 s expiry: three
/// messages sent, then the clock moved past the expiry, then one more (the
/// active segment); all durable. The next pass expires the first three.
fn given() -> (SimStorage, Arc<ManualClock>, Engine) {
    let sim = new_sim_configured(SimConfig {
        seed: 5,
        sync_failure: SyncFailureSemantics::Linux,
        capacity: None,
    });
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let mut engine = open_sim_in_mode(&sim, clock.clone(), PurgeMode::Obligation).0;
    setup_with_retention(
        &mut engine,
        one_batch_segments(Durability::Persisted),
        EXPIRY_MICROS,
        0,
    );
    for i in 0..3 {
        send_payload(&mut engine, &format!("old-{i}"));
    }
    clock.advance(2 * EXPIRY_MICROS);
    send_payload(&mut engine, "new-3");
    make_everything_durable(&sim);
    (sim, clock, engine)
}

/// The retention obligation as operators see it.
fn phase(engine: &Engine) -> String {
    let pending = engine
        .reconciler()
        .status(ObligationKey::Retention(key()))
        .is_some();
    match engine.partition(key()).and_then(|p| p.retention()) {
        Some(r) => format!(
            "{} (mark {}){}",
            r.phase().as_str(),
            r.low_water_mark(),
            if pending { ", pending" } else { "" }
        ),
        None => "none".into(),
    }
}

/// Segment files below the mark each view still holds.
fn below(sim: &SimStorage, mark: u64) -> String {
    format!("{:?}", segment_files_below(sim, mark))
}

/// The next sync of `segments/` fails before it takes effect.
fn fail_next_segments_sync(sim: &SimStorage) {
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
}

fn assert_snapshot(name: &str, out: &str) {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(format!("retention_snapshots__{name}"), out);
    });
}

#[test]
fn clean_pass() {
    let (sim, _clock, mut engine) = given();
    let from = sim.op_count();
    engine.reconcile();
    let mut out = String::from("== a pass with three expired segments\n");
    out.push_str(&io_since(&sim, from));
    let _ = writeln!(out, "retention: {}", phase(&engine));
    let _ = writeln!(out, "below the mark: {}", below(&sim, 3));
    assert!(
        engine
            .reconciler()
            .status(ObligationKey::Retention(key()))
            .is_none()
    );
    assert_snapshot("clean_pass", &out);
}

#[test]
fn failed_segments_sync_then_the_retry() {
    let (sim, _clock, mut engine) = given();
    fail_next_segments_sync(&sim);
    let from = sim.op_count();
    engine.reconcile();
    let mut out =
        String::from("== the sync of segments/ fails once (Linux semantics)\n-- the pass\n");
    out.push_str(&io_since(&sim, from));
    let _ = writeln!(out, "retention: {}", phase(&engine));
    let _ = writeln!(out, "below the mark: {}", below(&sim, 3));
    // Never done while a removal is unconfirmed.
    assert!(
        engine
            .reconciler()
            .status(ObligationKey::Retention(key()))
            .is_some()
    );
    let from = sim.op_count();
    let passes = engine.reconcile_until_idle(5);
    let _ = writeln!(out, "-- the retry ({passes} pass)");
    out.push_str(&io_since(&sim, from));
    let _ = writeln!(out, "retention: {}", phase(&engine));
    let _ = writeln!(out, "below the mark: {}", below(&sim, 3));
    assert_snapshot("failed_segments_sync_then_the_retry", &out);
}

#[test]
fn power_loss_while_pending_then_recovery_and_cleanup() {
    let (sim, clock, mut engine) = given();
    fail_next_segments_sync(&sim);
    engine.reconcile();
    let mut out = String::from("== the sync of segments/ fails, then the power is cut\n");
    let _ = writeln!(out, "retention: {}", phase(&engine));
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let _ = writeln!(
        out,
        "below the mark after the power loss: {}",
        below(&sim, 3)
    );
    let from = sim.op_count();
    let mut engine = open_sim_in_mode(&sim, clock, PurgeMode::Obligation).0;
    let _ = writeln!(out, "-- recovery");
    out.push_str(&io_since(&sim, from));
    let _ = writeln!(out, "retention: {}", phase(&engine));
    let from = sim.op_count();
    let passes = engine.reconcile_until_idle(5);
    let _ = writeln!(out, "-- cleanup ({passes} pass)");
    out.push_str(&io_since(&sim, from));
    let _ = writeln!(out, "retention: {}", phase(&engine));
    let _ = writeln!(out, "below the mark: {}", below(&sim, 3));
    assert_eq!(segment_files_below(&sim, 3), Vec::<String>::new());
    assert_snapshot("power_loss_while_pending_then_recovery_and_cleanup", &out);
}
