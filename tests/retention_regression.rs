//! Retention is a cleanup obligation (issue 17, item 3): the purge and
//! deletion regression matrix's shape for retention by age and by size,
//! through the production engine, recovery and reconciler on `SimStorage`.
//!
//! Scenario: one partition whose segments each hold one batch. Three old
//! messages (offsets 0-2), then two recent ones (3, 4; the last is the active
//! segment); consumer 1 stored offset 0; all of it durable. Retention is due
//! (by age: the old ones are past a 1 s expiry, the recent ones are not; by
//! size: the cap holds two and a half segments), so a pass commits the
//! low-water mark 3 and removes the files below it, and the sync of
//! `segments/` fails. Later sends succeed; the power is cut, so the removed
//! names come back; sluice restarts (same clock, so nothing more expires)
//! and its reconciler runs. Matrix: {age, size} × {buffered, persisted} ×
//! {Linux, forgiving}, plus a successful-sync control per kind and policy,
//! and the naive (Apache Iggy order) retention, which the checks must catch.

use std::sync::Arc;

use SyncFailureSemantics::{Forgiving, Linux};
use sluice_testkit::engine::*;
use sluice_testkit::trace::io_since;

/// The low-water mark the scenario's retention commits.
const MARK: u64 = 3;
const EXPIRY_MICROS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Age,
    Size,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    kind: Kind,
    /// Whether the sync of `segments/` after the removals fails.
    failed_sync: bool,
    policy: Durability,
    semantics: SyncFailureSemantics,
    mode: PurgeMode,
}

#[derive(Debug)]
struct Outcome {
    /// Whether the obligation was pending right after its sync failed (or,
    /// in the control, after its pass).
    pending_after_pass: bool,
    /// What the pass committed as the partition's mark.
    mark_after_pass: u64,
    /// Segment files below the mark after the restart and the reconciler.
    leftovers: Vec<String>,
    /// Payloads served from offset 0 after the restart.
    served: Vec<String>,
    /// Offsets `First` and consumer 1's `Next` start at after the restart.
    first: Option<u64>,
    next: Option<u64>,
    pending_at_end: usize,
}

fn open(sim: &SimStorage, clock: &Arc<ManualClock>, mode: PurgeMode) -> Engine {
    open_sim_in_mode(sim, clock.clone(), mode).0
}

fn run(case: Case) -> Outcome {
    let sim = new_sim_configured(SimConfig {
        seed: 5,
        sync_failure: case.semantics,
        capacity: None,
    });
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let mut engine = open(&sim, &clock, case.mode);
    let expiry = match case.kind {
        Kind::Age => EXPIRY_MICROS,
        Kind::Size => 0,
    };
    setup_with_retention(&mut engine, one_batch_segments(case.policy), expiry, 0);

    // Given: three old messages, two recent ones, consumer 1 at offset 0.
    for i in 0..3 {
        send_payload(&mut engine, &format!("old-{i}"));
    }
    store_offset(&mut engine, Consumer::consumer(1), 0).unwrap();
    if case.kind == Kind::Age {
        clock.advance(2 * EXPIRY_MICROS);
    }
    let segment = engine.partition(key()).unwrap().log().size_bytes() / 3;
    for i in 3..5 {
        send_payload(&mut engine, &format!("new-{i}"));
    }
    make_everything_durable(&sim);
    if case.kind == Kind::Size {
        // Two and a half segments: the three oldest must go.
        engine
            .update_topic(&stream(), &topic(), TOPIC, 0, segment * 5 / 2)
            .unwrap();
    }

    // When: the reconciler's pass commits the mark and removes the files
    // below it, but the sync of `segments/` fails ...
    if case.failed_sync {
        sim.fail_when(
            OpMatcher::kind(OpKind::SyncDir).path_ends_with("segments"),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
    }
    engine.reconcile();
    let pending_after_pass = engine
        .reconciler()
        .status(ObligationKey::Retention(key()))
        .is_some();
    let mark_after_pass = engine.partition(key()).unwrap().log().low_water();
    if case.kind == Kind::Size {
        // The cap is lifted, so that the later sends keep everything above
        // the mark: a pass after them (the restart's, now that the round's
        // recorded removals make its obligation pending there too) would
        // otherwise rightly expire more.
        engine
            .update_topic(&stream(), &topic(), TOPIC, 0, 0)
            .unwrap();
    }
    // ... later sends succeed ...
    for i in 5..7 {
        send_payload(&mut engine, &format!("after-{i}"));
    }
    // ... and the power is cut.
    drop(engine);
    sim.crash(Crash::PowerLoss);

    // Then, after a restart and the reconciler's passes:
    let mut engine = open(&sim, &clock, case.mode);
    engine.reconcile_until_idle(10);
    let first = try_poll(
        &mut engine,
        Consumer::consumer(9),
        PollingStrategy::First,
        1,
    )
    .unwrap()
    .first()
    .map(|m| m.offset);
    let next = try_poll(&mut engine, Consumer::consumer(1), PollingStrategy::Next, 1)
        .unwrap()
        .first()
        .map(|m| m.offset);
    let served = payloads_of(
        &try_poll(
            &mut engine,
            Consumer::consumer(9),
            PollingStrategy::Offset(0),
            100,
        )
        .unwrap(),
    );
    Outcome {
        pending_after_pass,
        mark_after_pass,
        leftovers: segment_files_below(&sim, MARK),
        served,
        first,
        next,
        pending_at_end: engine.reconciler().pending().len(),
    }
}

/// The checks every obligation run must pass; the naive run must fail one.
fn violations(case: &Case, o: &Outcome) -> Vec<String> {
    let mut v = Vec::new();
    if case.mode == PurgeMode::Obligation {
        if case.failed_sync && !o.pending_after_pass {
            v.push("recorded done while its removals were unconfirmed".into());
        }
        if !case.failed_sync && o.pending_after_pass {
            v.push("still pending after a clean pass".into());
        }
    }
    if o.mark_after_pass != MARK {
        v.push(format!("the pass moved the mark to {}", o.mark_after_pass));
    }
    if !o.leftovers.is_empty() {
        v.push(format!("left on disk below the mark: {:?}", o.leftovers));
    }
    let old: Vec<&String> = o.served.iter().filter(|p| p.starts_with("old-")).collect();
    if !old.is_empty() {
        v.push(format!("expired messages served: {old:?}"));
    }
    // The recent messages were durable before the pass; the later ones are
    // lost to the power cut only under `buffered`.
    let all = ["new-3", "new-4", "after-5", "after-6"].map(String::from);
    let kept: Vec<String> = o
        .served
        .iter()
        .filter(|p| !p.starts_with("old-"))
        .cloned()
        .collect();
    let complete = kept == all;
    let prefix = kept.len() >= 2 && all.starts_with(&kept);
    if !(complete || (case.policy == Durability::Buffered && prefix)) {
        v.push(format!("messages above the mark served as {kept:?}"));
    }
    if o.first != Some(MARK) {
        v.push(format!("First starts at {:?}, not the mark", o.first));
    }
    if o.next != Some(MARK) {
        v.push(format!(
            "Next from stored offset 0 continues at {:?}, not the mark",
            o.next
        ));
    }
    if o.pending_at_end != 0 {
        v.push(format!("{} obligations still pending", o.pending_at_end));
    }
    v
}

fn cases(mode: PurgeMode) -> Vec<Case> {
    let mut out = Vec::new();
    for kind in [Kind::Age, Kind::Size] {
        for policy in [Durability::Buffered, Durability::Persisted] {
            out.push(Case {
                kind,
                failed_sync: false,
                policy,
                semantics: Linux,
                mode,
            });
            for semantics in [Linux, Forgiving] {
                out.push(Case {
                    kind,
                    failed_sync: true,
                    policy,
                    semantics,
                    mode,
                });
            }
        }
    }
    out
}

#[test]
fn retention_is_durable_and_filtered_by_the_mark_when_the_segments_sync_fails() {
    let all = cases(PurgeMode::Obligation);
    assert_eq!(all.len(), 2 * 2 * 3);
    let mut failures = Vec::new();
    for case in all {
        let v = violations(&case, &run(case));
        if !v.is_empty() {
            failures.push(format!("{case:?}: {v:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Apache Iggy's order (remove, warn on a failed sync, no durable mark, no
/// filtering): after the power cut the expired segments come back and are
/// served, and `Next` from below the mark goes back into them.
#[test]
fn the_naive_retention_is_caught_by_age_and_by_size() {
    for kind in [Kind::Age, Kind::Size] {
        for policy in [Durability::Buffered, Durability::Persisted] {
            let case = Case {
                kind,
                failed_sync: true,
                policy,
                semantics: Linux,
                mode: PurgeMode::NaiveIggyOrder,
            };
            let v = violations(&case, &run(case));
            assert!(
                v.iter().any(|v| v.contains("left on disk")),
                "{case:?}: {v:?}"
            );
            assert!(
                v.iter().any(|v| v.contains("expired messages served")),
                "{case:?}: {v:?}"
            );
        }
    }
    // With every sync succeeding, even the naive order leaves nothing old.
    let control = Case {
        kind: Kind::Age,
        failed_sync: false,
        policy: Durability::Persisted,
        semantics: Linux,
        mode: PurgeMode::NaiveIggyOrder,
    };
    let v = violations(&control, &run(control));
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_message_younger_than_the_expiry_is_never_removed_and_the_active_segment_never() {
    let sim = new_sim();
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let mut engine = open(&sim, &clock, PurgeMode::Obligation);
    setup_with_retention(
        &mut engine,
        one_batch_segments(Durability::Persisted),
        EXPIRY_MICROS,
        0,
    );
    send_payload(&mut engine, "a");
    send_payload(&mut engine, "b");
    // Just short of the expiry for "a": nothing goes.
    clock.advance(EXPIRY_MICROS - 100);
    engine.reconcile();
    assert_eq!(engine.partition(key()).unwrap().log().low_water(), 0);
    // Long past it: "a" (sealed) goes, "b" (the active segment) stays.
    clock.advance(10 * EXPIRY_MICROS);
    engine.reconcile();
    engine.reconcile_until_idle(5);
    assert_eq!(engine.partition(key()).unwrap().log().low_water(), 1);
    assert_eq!(
        payloads_of(&poll(
            &mut engine,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            10
        )),
        ["b"]
    );
    assert!(segment_files_below(&sim, 1).is_empty());
    // The topic's message count and size drop with it.
    let (messages, bytes) = engine.topic_stats(0, 0);
    assert_eq!(messages, 1);
    assert_eq!(bytes, engine.partition(key()).unwrap().log().size_bytes());
}

/// Three messages past a 1 s expiry in one-batch segments, then a retention
/// round whose sync of `segments/` fails (its removals stay recorded and its
/// obligation pending), then a topic purge whose cleanup finishes, then a
/// fresh send. Shared by the two tests below.
fn purge_after_a_failed_retention_round() -> (SimStorage, Engine) {
    let sim = new_sim();
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let mut engine = open(&sim, &clock, PurgeMode::Obligation);
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
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    engine.reconcile();
    assert!(
        engine
            .reconciler()
            .status(ObligationKey::Retention(key()))
            .is_some()
    );
    engine.purge_topic(&stream(), &topic()).unwrap();
    engine.reconcile_until_idle(10);
    assert!(engine.reconciler().pending().is_empty());
    send_payload(&mut engine, "fresh");
    (sim, engine)
}

#[test]
fn a_purge_forgets_a_pending_retention_and_its_new_history_starts_at_mark_zero() {
    let (sim, engine) = purge_after_a_failed_retention_round();
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    assert_eq!(engine.partition(key()).unwrap().log().low_water(), 0);
    let first = poll(
        &mut engine,
        Consumer::consumer(1),
        PollingStrategy::First,
        1,
    );
    assert_eq!(offsets_of(&first), [0]);
    assert_eq!(payloads_of(&first), ["fresh"]);
}

/// Found by `sluice sim run` (seeds 124, 169, 555 and 933 of 1..=1000): a
/// retention round whose sync of `segments/` failed keeps its removals in
/// `retention.lwm` until a sync confirms them. A purge then made them the
/// purge's (their generation is dead) and its cleanup's sync confirmed them,
/// but nothing cleared the record, so every later process noted them again
/// and re-dirtied each name (create, then remove) before every sync of
/// `segments/`, for ever. One such redo whose remove failed, then a power
/// cut, left a dead segment durable under an `Applied` purge.
#[test]
fn a_purge_confirms_the_removals_a_failed_retention_round_recorded() {
    // Given: a retention round of generation 0 whose sync of `segments/`
    // failed, and a purge whose cleanup then finished,
    let (sim, engine) = purge_after_a_failed_retention_round();

    // When the process crashes, and the next one recovers, reconciles and
    // takes a send that rolls a segment (so syncs `segments/`),
    let from = sim.trace().len() as u64;
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::Process);
    engine.reconcile_until_idle(10);
    send_payload(&mut engine, "after");

    // then it owes nothing of generation 0: no obligation, and no redo of
    // the round's removals.
    assert!(engine.reconciler().pending().is_empty());
    let dead = "segments/00000000000000000000-";
    let io = io_since(&sim, from);
    assert!(
        !io.lines().any(|l| l.contains(dead)),
        "the next process redid confirmed removals:\n{io}"
    );
    // And after a power cut, no file of generation 0 is on disk.
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let durable: Vec<String> = sim
        .durable_view()
        .keys()
        .filter(|p| p.contains(dead))
        .cloned()
        .collect();
    assert_eq!(durable, Vec::<String>::new());
}

/// ADR 0016's former known gap (crash table row 5, process crash): the
/// round's `segments/` sync fails (Linux drops the dirty removals, so the
/// names stay durable) and the process crashes before a retry. The page
/// cache no longer shows the names, so the next process's listing cannot find
/// them; unless the round recorded them before unlinking, nothing is owed,
/// and the power cut after it brings the expired segments back to disk.
///
/// Returns whether the retention was owed right after the restart, the
/// segment files below the mark after the next process's reconciler and a
/// power cut, and what a third process then serves (also `sim_teeth`'s
/// reduced scenario for `RedoRecordedRetention`).
pub(crate) fn round_after_a_dead_process_and_a_power_cut(
    kind: Kind,
    policy: Durability,
) -> (bool, Vec<String>, Vec<String>) {
    let sim = new_sim_configured(SimConfig {
        seed: 5,
        sync_failure: Linux,
        capacity: None,
    });
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let mut engine = open(&sim, &clock, PurgeMode::Obligation);
    let expiry = match kind {
        Kind::Age => EXPIRY_MICROS,
        Kind::Size => 0,
    };
    setup_with_retention(&mut engine, one_batch_segments(policy), expiry, 0);
    // Given: three expired segments and two recent ones, durable,
    for i in 0..3 {
        send_payload(&mut engine, &format!("old-{i}"));
    }
    if kind == Kind::Age {
        clock.advance(2 * EXPIRY_MICROS);
    }
    let segment = engine.partition(key()).unwrap().log().size_bytes() / 3;
    for i in 3..5 {
        send_payload(&mut engine, &format!("new-{i}"));
    }
    make_everything_durable(&sim);
    if kind == Kind::Size {
        engine
            .update_topic(&stream(), &topic(), TOPIC, 0, segment * 5 / 2)
            .unwrap();
    }
    // and a retention round whose sync of `segments/` fails.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    engine.reconcile();
    assert_eq!(engine.partition(key()).unwrap().log().low_water(), MARK);
    assert!(
        !segment_files_below(&sim, MARK)
            .iter()
            .any(|f| f.starts_with("cached")),
        "{kind:?} {policy:?}: the round removed the names from the page cache"
    );
    // When the process crashes, the next one recovers and runs its
    // reconciler until idle,
    drop(engine);
    sim.crash(Crash::Process);
    let mut engine = open(&sim, &clock, PurgeMode::Obligation);
    let owed = engine
        .reconciler()
        .status(ObligationKey::Retention(key()))
        .is_some();
    engine.reconcile_until_idle(10);
    assert!(engine.reconciler().pending().is_empty());
    // and the power is cut.
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let leftovers = segment_files_below(&sim, MARK);
    let mut engine = open(&sim, &clock, PurgeMode::Obligation);
    engine.reconcile_until_idle(10);
    let served = payloads_of(&poll(
        &mut engine,
        Consumer::consumer(9),
        PollingStrategy::Offset(0),
        100,
    ));
    (owed, leftovers, served)
}

#[test]
fn a_round_whose_segments_sync_failed_is_finished_after_a_process_crash() {
    for kind in [Kind::Age, Kind::Size] {
        for policy in [Durability::Buffered, Durability::Persisted] {
            let (owed, leftovers, served) =
                round_after_a_dead_process_and_a_power_cut(kind, policy);
            // Then the retention was owed after the restart, nothing below
            // the mark came back with the power cut, and what is served is
            // exactly what lies above it.
            assert!(owed, "{kind:?} {policy:?}: nothing owed after the restart");
            assert_eq!(
                leftovers,
                Vec::<String>::new(),
                "{kind:?} {policy:?}: expired segments came back"
            );
            assert_eq!(served, ["new-3", "new-4"], "{kind:?} {policy:?}");
        }
    }
}

/// Found by the explorer's `retention-by-size` workload (two faults): a send
/// whose roll started a new segment and whose write then failed leaves that
/// new segment empty and active, its base the previous one's end. Retention
/// then chose the end of the last sealed segment as the mark, which is also
/// where the empty active segment ends, and `Log::set_low_water` counted the
/// active segment as below it: the invariant check stopped the process in
/// the middle of a reconciler pass.
#[test]
fn retention_after_a_failed_roll_keeps_the_empty_active_segment() {
    for kind in [Kind::Age, Kind::Size] {
        let sim = new_sim();
        let clock = Arc::new(ManualClock::new(START_MICROS));
        let mut engine = open(&sim, &clock, PurgeMode::Obligation);
        let (expiry, cap) = match kind {
            Kind::Age => (EXPIRY_MICROS, 0),
            Kind::Size => (0, 1),
        };
        setup_with_retention(
            &mut engine,
            one_batch_segments(Durability::Persisted),
            expiry,
            cap,
        );
        // Given: three sealed segments and a send whose roll made a fourth,
        // empty segment and whose write failed,
        for i in 0..3 {
            send_payload(&mut engine, &format!("old-{i}"));
        }
        clock.advance(2 * EXPIRY_MICROS);
        sim.fail_when(
            OpMatcher::kind(OpKind::Write).path_ends_with(".log"),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
        assert!(
            engine
                .send(
                    &stream(),
                    &topic(),
                    &Partitioning::PartitionId(0),
                    vec![NewMessage::new(b"lost".to_vec())],
                )
                .is_err()
        );
        // When retention runs, every sealed segment expires and the empty
        // active one stays,
        engine.reconcile();
        engine.reconcile_until_idle(10);
        // (the empty segment's base, past every message sent),
        assert_eq!(
            engine.partition(key()).unwrap().log().low_water(),
            3,
            "{kind:?}"
        );
        assert!(segment_files_below(&sim, 3).is_empty(), "{kind:?}");
        // and the next send lands at the mark and is all that is served.
        send_payload(&mut engine, "after");
        let polled = poll(
            &mut engine,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            10,
        );
        assert_eq!(offsets_of(&polled), [3], "{kind:?}");
        assert_eq!(payloads_of(&polled), ["after"], "{kind:?}");
    }
}

/// Found by the session-12 `sim run` sweep, which hung on one seed: a failed
/// writeback emptied the active segment (its only batch, never synced, read
/// back as zeros and was cut) right after retention had set the mark at its
/// base. The next send sealed it, empty, with its end at the mark: no mark
/// can expire it, and the retention index made the partition due again at
/// once, so the reconciler's pass spun under the engine lock for ever.
#[test]
fn an_empty_sealed_segment_at_the_mark_never_stalls_retention() {
    // Given: old-0 durable and past the expiry; mid-1 sent later, buffered
    // and unsynced, in the active segment; a pass sets the mark to 1,
    let sim = new_sim();
    let clock = Arc::new(ManualClock::new(START_MICROS));
    let mut engine = open(&sim, &clock, PurgeMode::Obligation);
    setup_with_retention(
        &mut engine,
        one_batch_segments(Durability::Buffered),
        EXPIRY_MICROS,
        0,
    );
    send_payload(&mut engine, "old-0");
    make_everything_durable(&sim);
    clock.advance(2 * EXPIRY_MICROS);
    send_payload(&mut engine, "mid-1");
    engine.reconcile();
    engine.reconcile_until_idle(10);
    assert_eq!(engine.partition(key()).unwrap().log().low_water(), 1);

    // and a flush whose sync of mid-1's segment fails evicts its pages, so
    // the segment is cut to nothing; later a send seals it, empty, at the
    // mark, with its (old) newest message past the expiry.
    sim.set_eviction_after_failed_sync(1_000_000);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_contains(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(engine.sync_all().is_err());
    sim.set_eviction_after_failed_sync(0);
    clock.advance(2 * EXPIRY_MICROS);
    send_payload(&mut engine, "new-2");

    // When the reconciler's pass runs (on its own thread: before the fix it
    // never returned),
    let (done, finished) = std::sync::mpsc::channel();
    let pass = std::thread::spawn(move || {
        engine.reconcile();
        engine.reconcile_until_idle(10);
        let _ = done.send(());
        engine
    });
    assert!(
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .is_ok(),
        "the retention pass did not finish: it spins on the empty segment at the mark"
    );
    let mut engine = pass.join().unwrap();

    // then it finished with the mark where it was, serving new-2,
    let log = engine.partition(key()).unwrap().log();
    assert_eq!(log.low_water(), 1);
    assert_eq!(
        payloads_of(&poll(
            &mut engine,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            10
        )),
        ["new-2"]
    );
    // and retention goes on past the empty segment once new-2 is sealed
    // and expired too.
    send_payload(&mut engine, "new-3");
    clock.advance(2 * EXPIRY_MICROS);
    engine.reconcile();
    engine.reconcile_until_idle(10);
    assert_eq!(engine.partition(key()).unwrap().log().low_water(), 3);
    assert_eq!(
        payloads_of(&poll(
            &mut engine,
            Consumer::consumer(1),
            PollingStrategy::First,
            10
        )),
        ["new-3"]
    );
}
