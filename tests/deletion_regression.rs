//! Every deletion is a cleanup obligation (issue 17): the purge regression
//! matrix's shape for deleting a stream, a topic, partitions and a consumer
//! group, through the production engine, recovery and reconciler on
//! `SimStorage`.
//!
//! Scenario: a stream with two topics, two partitions each, a consumer group
//! with offsets, messages everywhere, all durable. One resource is deleted
//! (acknowledged), and the sync of the directory that lost its entry fails;
//! later operations succeed; optionally the resource is created again (same
//! id, as Iggy 0.11 reuses ids) and written to; the power is cut, so the old
//! entries come back; sluice restarts and its reconciler runs. Matrix: kind ×
//! failed directory × {buffered, persisted} × {Linux, forgiving} × {created
//! again, not}, plus a successful-sync control per kind and policy, and the
//! naive (Apache Iggy order) deletion, which the same checks must catch.

use std::path::Path;
use std::sync::Arc;

use SyncFailureSemantics::{Forgiving, Linux};
use sluice_testkit::engine::*;

/// The second topic of the stream, which no deletion touches (id 1).
const OTHER_TOPIC: &str = "audit";

use DeletionKind as Kind;

/// One cell of the matrix.
#[derive(Debug, Clone, Copy)]
struct Case {
    kind: Kind,
    /// The directory whose next sync fails (`None`: the control).
    failed_dir: Option<&'static str>,
    policy: Durability,
    semantics: SyncFailureSemantics,
    /// Whether the resource is created again (same id) before the power cut.
    recreate: bool,
    mode: PurgeMode,
}

/// What a run left, for the assertions.
#[derive(Debug)]
struct Outcome {
    /// Whether the deletion was pending right after its sync failed.
    pending_after_failure: bool,
    /// Paths of the deleted resource still on disk after the restart and the
    /// reconciler's passes (cached or durable), outside what a re-created
    /// resource legitimately holds there.
    leftovers: Vec<String>,
    /// Old payloads (or the old group offset) served after the restart.
    old_served: Vec<String>,
    /// What the re-created resource serves after the restart.
    new_served: Vec<String>,
    /// Payloads of the untouched topic after the restart.
    other_topic: Vec<String>,
    /// Deletions still pending after the restart and the reconciler.
    pending_at_end: usize,
}

fn open(sim: &SimStorage, mode: PurgeMode, micros: u64) -> Engine {
    open_sim_in_mode(sim, Arc::new(ManualClock::new(micros)), mode).0
}

fn send_to(engine: &mut Engine, topic_name: &str, partition: u32, payload: &str) {
    engine
        .send(
            &stream(),
            &Identifier::from(topic_name),
            &Partitioning::PartitionId(partition),
            vec![NewMessage::new(payload.as_bytes().to_vec())],
        )
        .unwrap();
}

fn payloads(engine: &mut Engine, topic_name: &str, partition: u32) -> Vec<String> {
    match engine.poll(
        &stream(),
        &Identifier::from(topic_name),
        partition,
        Consumer::consumer(9),
        PollingStrategy::Offset(0),
        u64::MAX,
        false,
    ) {
        Ok(polled) => payloads_of(&polled.messages),
        Err(_) => Vec::new(),
    }
}

fn group_offset(engine: &mut Engine, partition: u32) -> Option<u64> {
    engine
        .get_offset(&stream(), &topic(), partition, Consumer::group(GROUP))
        .ok()
        .flatten()
        .map(|(_, stored)| stored)
}

/// Given: stream `orders` (0) with topics `events` (0) and `audit` (1), two
/// partitions each, two old messages in every partition, group `billing` (0)
/// at offset 1 in both partitions of `events`; all of it durable.
fn given(sim: &SimStorage, case: &Case) -> Engine {
    let mut engine = open(sim, case.mode, START_MICROS);
    setup_partitions(&mut engine, options(case.policy, case.policy), 2);
    engine
        .create_topic(
            &stream(),
            None,
            OTHER_TOPIC,
            2,
            options(case.policy, case.policy),
            0,
            0,
            1,
        )
        .unwrap();
    engine
        .create_group(&stream(), &topic(), None, "billing")
        .unwrap();
    for p in 0..2 {
        for m in ["a", "b"] {
            send_to(&mut engine, TOPIC, p, &format!("old-{p}-{m}"));
        }
        send_to(&mut engine, OTHER_TOPIC, p, &format!("audit-old-{p}"));
        engine
            .store_offset(&stream(), &topic(), p, Consumer::group(GROUP), 1)
            .unwrap();
    }
    make_everything_durable(sim);
    engine
}

/// Creates the deleted resource again (same id) and writes to it.
fn recreate(engine: &mut Engine, kind: Kind, policy: Durability) {
    let opts = options(policy, policy);
    match kind {
        Kind::Stream => {
            assert_eq!(engine.create_stream(None, STREAM).unwrap().id, 0);
            engine
                .create_topic(&stream(), None, TOPIC, 2, opts, 0, 0, 1)
                .unwrap();
            engine
                .create_topic(&stream(), None, OTHER_TOPIC, 2, opts, 0, 0, 1)
                .unwrap();
        }
        Kind::Topic => {
            let t = engine
                .create_topic(&stream(), None, TOPIC, 2, opts, 0, 0, 1)
                .unwrap();
            assert_eq!(t.id, 0);
        }
        Kind::Partition => {
            assert_eq!(
                engine.create_partitions(&stream(), &topic(), 1).unwrap(),
                [1]
            );
        }
        Kind::Group => {
            // By its id: the server's own choice never reuses a group id
            // (Iggy 0.11, ADR 0013), an explicit one may.
            let g = engine
                .create_group(&stream(), &topic(), Some(GROUP), "billing")
                .unwrap();
            assert_eq!(g.id, GROUP);
            engine
                .store_offset(&stream(), &topic(), 0, Consumer::group(GROUP), 0)
                .unwrap();
        }
    }
    if kind != Kind::Group {
        send_to(engine, TOPIC, 1, "new-1");
    }
}

fn run(case: Case) -> Outcome {
    let sim = new_sim_configured(SimConfig {
        seed: 3,
        sync_failure: case.semantics,
        capacity: None,
    });
    let mut engine = given(&sim, &case);
    let r = case.kind.resource();

    // When: the deletion is acknowledged, but the sync of the directory that
    // lost the entry fails ...
    if let Some(dir) = case.failed_dir {
        sim.fail_when(
            OpMatcher::kind(OpKind::SyncDir).path_ends_with(dir),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
    }
    case.kind.delete(&mut engine).unwrap();
    engine.reconcile();
    let pending_after_failure = engine.pending_deletions().any(|(d, _)| d == r)
        && engine
            .reconciler()
            .status(ObligationKey::Delete(r))
            .is_some();
    // ... later operations succeed ...
    if case.kind != Kind::Stream {
        send_to(&mut engine, OTHER_TOPIC, 0, "audit-after");
    }
    if case.recreate {
        recreate(&mut engine, case.kind, case.policy);
    }
    // ... and the power is cut (the failed sync's entries come back).
    drop(engine);
    sim.crash(Crash::PowerLoss);

    // Then, after a restart and the reconciler's passes:
    let mut engine = open(&sim, case.mode, RESTART_MICROS);
    engine.reconcile_until_idle(10);
    let mut outcome = Outcome {
        pending_after_failure,
        leftovers: Vec::new(),
        old_served: Vec::new(),
        new_served: Vec::new(),
        other_topic: Vec::new(),
        pending_at_end: engine.pending_deletions().count(),
    };
    for view in [sim.cached_view(), sim.durable_view()] {
        for path in view.keys() {
            let under = case
                .kind
                .paths()
                .iter()
                .any(|p| path == p || path.starts_with(&format!("{p}/")));
            if !under {
                continue;
            }
            // A re-created resource lives at the same path: its files are
            // checked by what it serves, below.
            if case.recreate {
                continue;
            }
            outcome.leftovers.push(path.clone());
        }
    }
    match case.kind {
        Kind::Group => {
            for p in 0..2 {
                let offset = group_offset(&mut engine, p);
                match (case.recreate, p, offset) {
                    (true, 0, Some(0)) => outcome.new_served.push("offset 0".into()),
                    (_, _, None) => {}
                    (_, _, Some(o)) => outcome.old_served.push(format!("p{p} offset {o}")),
                }
            }
        }
        _ => {
            // Deleting the last partition leaves partition 0 (and its
            // messages) alone.
            let deleted = if case.kind == Kind::Partition {
                1..2
            } else {
                0..2
            };
            for p in deleted {
                for payload in payloads(&mut engine, TOPIC, p) {
                    if payload.starts_with("old-") {
                        outcome.old_served.push(payload);
                    } else {
                        outcome.new_served.push(payload);
                    }
                }
            }
        }
    }
    for p in 0..2 {
        outcome
            .other_topic
            .extend(payloads(&mut engine, OTHER_TOPIC, p));
    }
    outcome
}

/// The checks every obligation run must pass; the naive run must fail one.
fn violations(case: &Case, o: &Outcome) -> Vec<String> {
    let mut v = Vec::new();
    if case.failed_dir.is_some() && !o.pending_after_failure {
        v.push("recorded done while its removal was unconfirmed".into());
    }
    if case.failed_dir.is_none() && o.pending_after_failure {
        v.push("still pending after a clean run".into());
    }
    if !o.leftovers.is_empty() {
        v.push(format!("left on disk: {:?}", o.leftovers));
    }
    if !o.old_served.is_empty() {
        v.push(format!("the deleted resource served: {:?}", o.old_served));
    }
    let expected_new: Vec<String> = match (case.recreate, case.kind) {
        (false, _) => Vec::new(),
        (true, Kind::Group) => vec!["offset 0".into()],
        (true, _) => vec!["new-1".into()],
    };
    // Under `buffered` a power loss may take what was written after the
    // last sync; what is served is then a prefix of what was written.
    let buffered_loss = case.policy == Durability::Buffered && o.new_served.is_empty();
    if o.new_served != expected_new && !buffered_loss {
        v.push(format!(
            "the re-created resource serves {:?}, not {expected_new:?}",
            o.new_served
        ));
    }
    if case.kind == Kind::Stream {
        // The other topic went with the stream (and came back empty).
        if case.recreate && !o.other_topic.is_empty() {
            v.push(format!(
                "old messages of the deleted stream: {:?}",
                o.other_topic
            ));
        }
    } else {
        let mut want = vec![
            "audit-old-0".to_string(),
            "audit-after".into(),
            "audit-old-1".into(),
        ];
        if case.policy == Durability::Buffered && !o.other_topic.iter().any(|m| m == "audit-after")
        {
            want.retain(|m| m != "audit-after");
        }
        want.sort();
        let mut got = o.other_topic.clone();
        got.sort();
        if got != want {
            v.push(format!("the untouched topic serves {got:?}, not {want:?}"));
        }
    }
    if o.pending_at_end != 0 {
        v.push(format!("{} deletions still pending", o.pending_at_end));
    }
    v
}

fn cases(mode: PurgeMode) -> Vec<Case> {
    let mut out = Vec::new();
    for kind in Kind::ALL {
        for policy in [Durability::Buffered, Durability::Persisted] {
            for recreate in [false, true] {
                out.push(Case {
                    kind,
                    failed_dir: None,
                    policy,
                    semantics: Linux,
                    recreate,
                    mode,
                });
                for dir in kind.synced_dirs() {
                    for semantics in [Linux, Forgiving] {
                        out.push(Case {
                            kind,
                            failed_dir: Some(dir),
                            policy,
                            semantics,
                            recreate,
                            mode,
                        });
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_deletion_is_durable_whichever_directory_sync_fails() {
    let mut failures = Vec::new();
    let all = cases(PurgeMode::Obligation);
    assert_eq!(all.len(), 4 * 2 * 2 + 5 * 2 * 2 * 2);
    for case in all {
        let outcome = run(case);
        let v = violations(&case, &outcome);
        if !v.is_empty() {
            failures.push(format!("{case:?}: {v:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Apache Iggy's order (remove, warn on a failed sync, record done, no
/// level-triggered recovery): the same checks catch it for every kind.
#[test]
fn the_naive_deletion_is_caught_for_every_kind() {
    for kind in Kind::ALL {
        let caught: Vec<String> = cases(PurgeMode::NaiveIggyOrder)
            .into_iter()
            .filter(|c| c.kind == kind && c.failed_dir.is_some())
            .flat_map(|case| violations(&case, &run(case)))
            .collect();
        assert!(
            caught.iter().any(|v| v.contains("unconfirmed")),
            "{kind:?}: {caught:?}"
        );
        assert!(
            caught.iter().any(|v| v.contains("left on disk")),
            "{kind:?}: the naive deletion left nothing behind after a power loss: {caught:?}"
        );
    }
}

/// Given for the tests below: `kind` deleted (acknowledged, Linux
/// semantics, `persisted`) while the first of its directory syncs fails, so
/// its cleanup is pending and the old files are still durable.
fn a_deletion_whose_sync_failed(kind: Kind) -> (SimStorage, Engine) {
    let sim = new_sim_configured(SimConfig {
        seed: 3,
        sync_failure: Linux,
        capacity: None,
    });
    let case = Case {
        kind,
        failed_dir: None,
        policy: Durability::Persisted,
        semantics: Linux,
        recreate: false,
        mode: PurgeMode::Obligation,
    };
    let mut engine = given(&sim, &case);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with(kind.synced_dirs()[0]),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    kind.delete(&mut engine).unwrap();
    engine.reconcile();
    (sim, engine)
}

#[test]
fn a_pending_deletion_is_finished_before_its_id_is_reused() {
    // Given: topic 0 deleted, its directory's sync failed (Linux semantics).
    let (sim, mut engine) = a_deletion_whose_sync_failed(Kind::Topic);
    assert_eq!(
        engine.pending_deletions().collect::<Vec<_>>(),
        [(Kind::Topic.resource(), DeletePhase::Requested)]
    );
    assert!(
        sim.durable_view().contains_key("/data/streams/0/topics/0"),
        "the failed sync left the old topic durable"
    );
    // When: a topic is created and takes id 0 again,
    recreate(&mut engine, Kind::Topic, Durability::Persisted);
    // then the deletion was finished first (its removal re-done and synced),
    assert_eq!(engine.pending_deletions().count(), 0);
    // and after a power cut the new topic is all that is there.
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let (mut engine, _) = reopen(&sim);
    assert_eq!(engine.pending_deletions().count(), 0);
    assert_eq!(payloads(&mut engine, TOPIC, 0), Vec::<String>::new());
    assert_eq!(payloads(&mut engine, TOPIC, 1), ["new-1"]);
}

#[test]
fn recovery_makes_an_obligation_for_a_directory_no_metadata_names() {
    // Given: a durable directory tree under an id the metadata never named
    // (left by a crash of an older version, or copied in by hand).
    let sim = new_sim();
    let mut engine = sim_engine(&sim);
    setup(&mut engine, persisted());
    let stray = Path::new("/data/streams/0/topics/7/partitions/0/segments");
    sim.create_dir_all(stray).unwrap();
    // (and a stream directory left renamed by a crash between the two
    // renames that re-dirty it, `sim run` seed 862; and a file where a
    // partition directory would be: a re-dirty's leftover after a crash
    // between its create and its remove)
    sim.create_dir_all(Path::new(
        "/data/streams/1.redirty/topics/0/partitions/0/segments",
    ))
    .unwrap();
    drop(
        sim.open(
            Path::new("/data/streams/0/topics/0/partitions/4"),
            OpenMode::CreateNew,
        )
        .unwrap(),
    );
    make_everything_durable(&sim);
    drop(engine);
    // When: sluice starts,
    let (mut engine, _) = reopen(&sim);
    // then the tree is a pending deletion, removed by the reconciler, and
    // never served as a topic.
    let topic7 = ResourceKey::Topic {
        stream: 0,
        topic: 7,
    };
    let partition4 = ResourceKey::Partition(PartitionKey {
        stream: 0,
        topic: 0,
        partition: 4,
    });
    assert_eq!(
        engine.pending_deletions().collect::<Vec<_>>(),
        [
            (ResourceKey::Stream { stream: 1 }, DeletePhase::Requested),
            (topic7, DeletePhase::Requested),
            (partition4, DeletePhase::Requested)
        ]
    );
    assert!(!engine.metadata().streams[&0].topics.contains_key(&7));
    engine.reconcile_until_idle(10);
    assert_eq!(engine.pending_deletions().count(), 0);
    for gone in [
        "/data/streams/1",
        "/data/streams/1.redirty",
        "/data/streams/0/topics/7",
        "/data/streams/0/topics/0/partitions/4",
    ] {
        assert!(!sim.durable_view().contains_key(gone), "{gone}");
    }
}

#[test]
fn a_deletion_whose_process_died_after_a_failed_sync_is_redone_by_the_next_process() {
    // Given/When: see `deletion_after_a_dead_process_and_a_power_cut`.
    let (resumed, back) = deletion_after_a_dead_process_and_a_power_cut();
    // Then: the next process resumed the recorded deletion, and the topic
    // did not come back: the redo re-dirtied its name before the sync that
    // recorded the deletion done.
    assert_eq!(
        resumed,
        [(Kind::Topic.resource(), DeletePhase::Requested)],
        "the metadata's record of the deletion was not resumed"
    );
    assert!(
        !back,
        "a plain retried sync proved nothing: the old topic is durable again"
    );
}

/// The scenario of the test above, shared with the teeth test that turns the
/// redo off (`sim_teeth`). Topic 0 is deleted; its directory's sync fails
/// (Linux drops the removal's dirty state) and the process dies before any
/// retry, so the next process's page cache no longer shows the topic while
/// the disk still holds it. The next process starts, its reconciler runs,
/// the power is cut. Returns the deletions the next process found pending,
/// and whether the topic's directory is durable after the power cut.
pub(crate) fn deletion_after_a_dead_process_and_a_power_cut()
-> (Vec<(ResourceKey, DeletePhase)>, bool) {
    let (sim, engine) = a_deletion_whose_sync_failed(Kind::Topic);
    drop(engine);
    sim.crash(Crash::Process);
    assert!(!sim.cached_view().contains_key("/data/streams/0/topics/0"));
    assert!(sim.durable_view().contains_key("/data/streams/0/topics/0"));

    let (mut engine, _) = reopen(&sim);
    let resumed = engine.pending_deletions().collect();
    engine.reconcile_until_idle(10);
    assert_eq!(engine.pending_deletions().count(), 0);
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let back = sim.durable_view().contains_key("/data/streams/0/topics/0");
    (resumed, back)
}

/// Finding (explorer, `delete-topic`, e.g. `--case
/// buffered:linux:90:before:process:4`): a retried removal re-dirties the
/// deleted directory's name by creating an empty file under it and removing
/// it (`dirsync::redo`); a crash between the two leaves that file. Recovery
/// rightly makes a deletion for the name, but removed it as a tree
/// (`remove_dir_all`), which a file refuses (`ENOTDIR`): the deletion stayed
/// pending forever, retried every pass. The same leftover under a partition
/// id blocked re-creating that partition.
#[test]
fn a_redo_leftover_file_under_a_deleted_name_is_removed() {
    for kind in [Kind::Topic, Kind::Partition] {
        // Given: the deletion's directory sync failed (Linux semantics), and
        // its retry re-dirtied the name but stopped before removing the file.
        let (sim, mut engine) = a_deletion_whose_sync_failed(kind);
        let leftover = kind.paths()[0];
        sim.fail_when(
            OpMatcher::kind(OpKind::RemoveFile).path_ends_with(leftover),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
        engine.reconcile_at(u64::MAX);
        assert!(
            matches!(sim.cached_view().get(leftover), Some(NodeView::File(_))),
            "{kind:?}: the redo left no file at {leftover}"
        );
        // When: the process crashes and sluice starts again,
        drop(engine);
        sim.crash(Crash::Process);
        let mut engine = open(&sim, PurgeMode::Obligation, RESTART_MICROS);
        engine.reconcile_until_idle(10);
        // then the leftover is removed and nothing stays pending,
        assert_eq!(
            engine.pending_deletions().collect::<Vec<_>>(),
            [],
            "{kind:?}"
        );
        assert!(!sim.cached_view().contains_key(leftover), "{kind:?}");
        assert!(!sim.durable_view().contains_key(leftover), "{kind:?}");
        // and the resource can be created again under the same id.
        recreate(&mut engine, kind, Durability::Persisted);
        assert_eq!(payloads(&mut engine, TOPIC, 1), ["new-1"], "{kind:?}");
    }
}

/// Finding (explorer, every `delete-*` workload, property (d) after a
/// process crash; fixed by recording deletions in the metadata, ADR 0015 §2):
/// a deletion's directory sync fails (Linux semantics: the dirty removal is
/// dropped, so the old entry stays durable) and the process crashes before a
/// retry succeeds. The page cache keeps the removal, so recovery's listing
/// sees nothing for the name. Without the record the deletion counted as done
/// while its files were durable; for a group that lost data: the group was
/// created again under its id, the power was cut, the old `groups/0` came
/// back and recovery adopted it as the new group's offset, so the new group
/// skipped messages (the Apache Iggy purge bug, for groups).
#[test]
fn a_deletion_whose_sync_failed_survives_a_process_crash() {
    // Given: group 0 at offset 1 in both partitions, durable; its deletion's
    // sync of one `groups/` fails,
    let (sim, engine) = a_deletion_whose_sync_failed(Kind::Group);
    // and the process crashes before the retry.
    drop(engine);
    sim.crash(Crash::Process);
    let mut engine = open(&sim, PurgeMode::Obligation, RESTART_MICROS);
    // Then the deletion is still owed while its file is durable,
    let durable = sim.durable_view().contains_key(Kind::Group.paths()[0]);
    assert!(
        !durable || engine.pending_deletions().count() > 0,
        "no deletion pending while {} is durable",
        Kind::Group.paths()[0]
    );
    // and a group created again under the id, after a power cut, does not
    // resume at the deleted group's offset.
    engine
        .create_group(&stream(), &topic(), None, "billing")
        .unwrap();
    engine.reconcile_until_idle(10);
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let mut engine = open(&sim, PurgeMode::Obligation, RESTART_MICROS + 1_000_000);
    assert_eq!(group_offset(&mut engine, 0), None);
    assert_eq!(group_offset(&mut engine, 1), None);
}

/// `sluice sim run --seed 80`, reduced: creating topic 1/0 in a stream whose
/// `topics/` an earlier failed attempt left (so the creation re-dirties it,
/// renaming it away and back) fails at the second rename. The creation's
/// directories, durable under `topics/0`, are now under `topics.redirty/` in
/// the page cache; the failed creation's deletion must not count as done
/// while they are durable.
#[test]
fn a_deletion_below_a_directory_renamed_away_by_a_failed_redirty_is_done_only_when_durable() {
    // `topics/` renamed away (seed 80), or the stream's own directory above
    // it (seed 680).
    for renamed in ["/data/streams/0/topics", "/data/streams/0"] {
        deletion_below_a_renamed_away_directory(renamed);
    }
}

fn deletion_below_a_renamed_away_directory(renamed: &str) {
    // Given: stream 0 with no topic, and an empty `topics/` left in it (an
    // earlier failed creation), durable.
    let sim = new_sim();
    let mut engine = sim_engine(&sim);
    engine.create_stream(None, "other").unwrap();
    sim.create_dir_all(Path::new("/data/streams/0/topics"))
        .unwrap();
    make_everything_durable(&sim);
    // When: creating a topic there fails at the re-dirty's second rename of
    // `renamed` (the first one landed),
    sim.fail_when(
        OpMatcher::kind(OpKind::Rename).path_ends_with(renamed),
        Fault::io(FaultMode::After),
        0,
        1,
    );
    assert!(
        engine
            .create_topic(
                &Identifier::from("other"),
                None,
                TOPIC,
                1,
                persisted(),
                0,
                0,
                1
            )
            .is_err()
    );
    // and the reconciler finishes the failed creation's deletion,
    engine.reconcile_until_idle(10);
    assert_eq!(engine.pending_deletions().count(), 0);
    // then nothing of the topic is on disk, in the page cache or durably.
    for view in [sim.cached_view(), sim.durable_view()] {
        let left: Vec<&String> = view
            .keys()
            .filter(|p| p.starts_with("/data/streams/0/topics/0") || p.contains(".redirty"))
            .collect();
        assert!(left.is_empty(), "{renamed}: {left:?}");
    }
}

/// `sluice sim run --seed 610`, reduced: a group's offset file left as
/// `0.redirty` (a re-dirty whose second rename failed) holds the group's
/// record; deleting the group removes it with the file.
#[test]
fn a_group_deletion_removes_its_files_redirty_leftover_too() {
    // Given: group 0 with an offset, and its file's re-dirty leftover.
    let (sim, mut engine) = sim_with(persisted());
    engine
        .create_group(&stream(), &topic(), None, "billing")
        .unwrap();
    send(&mut engine, 0, 2);
    store_offset(&mut engine, Consumer::group(GROUP), 1).unwrap();
    let groups = sim_paths().groups;
    drop(
        sim.open(&groups.join("0.redirty"), OpenMode::CreateNew)
            .unwrap(),
    );
    // When: the group is deleted,
    engine
        .delete_group(&stream(), &topic(), &Identifier::Numeric(GROUP))
        .unwrap();
    engine.reconcile();
    // then neither name is left.
    assert_eq!(engine.pending_deletions().count(), 0);
    assert_eq!(sim.list_dir(&groups).unwrap(), Vec::<String>::new());
}
