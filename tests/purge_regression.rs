//! The Iggy purge bug, as a regression matrix, through the production engine,
//! purge, recovery and reconciler on `SimStorage`.
//!
//! Scenario: offsets are persisted over an existing history; the topic is
//! purged; the deletions succeed but the sync of one directory fails; every
//! later operation succeeds; fresh messages and offsets are acknowledged
//! (some between the failed attempt and its retry); power is cut; sluice
//! restarts. Matrix: {consumers, groups, segments} × {buffered, persisted} ×
//! {Linux, forgiving}, plus a successful-sync control per policy.

use std::path::Path;
use std::sync::Arc;

use sluice_server::clock::ManualClock;
use sluice_server::metadata::{Durability, PartitionKey, TopicOptions};
use sluice_server::partition::Consumer;
use sluice_server::partition::PollingStrategy;
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::purge::{
    DirKind, LoadedObligation, OBLIGATION_LAYOUT, Obligation, ObligationRecord, PurgeState,
    decode_file,
};
use sluice_server::{Engine, EngineConfig, Identifier, Partitioning, PurgeMode};
use sluice_storage::sim::NodeView;
use sluice_storage::{
    Crash, DurableStorage, Fault, FaultMode, OpKind, OpMatcher, OpenMode, SimConfig, SimStorage,
    SyncFailureSemantics,
};
use sluice_testkit::engine::{
    buffered, make_everything_durable, options, persisted, setup_partitions,
};

const DATA: &str = "/data";
const STREAM: &str = "orders";
const TOPIC: &str = "events";
const KEY: PartitionKey = PartitionKey {
    stream: 0,
    topic: 0,
    partition: 0,
};
/// The group "billing", the topic's first (id 0, as Iggy numbers it).
const GROUP: u32 = 0;

#[derive(Debug, Clone, Copy)]
enum FailedDir {
    Consumers,
    Groups,
    Segments,
    None,
}

impl FailedDir {
    fn suffix(self) -> Option<&'static str> {
        match self {
            FailedDir::Consumers => Some("/consumers"),
            FailedDir::Groups => Some("/groups"),
            FailedDir::Segments => Some("/segments"),
            FailedDir::None => None,
        }
    }
}

fn open(sim: &SimStorage, mode: PurgeMode) -> Engine {
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = EngineConfig::deterministic(DATA, 7);
    config.purge_mode = mode;
    Engine::open(storage, Arc::new(ManualClock::new(1_000_000)), config)
        .unwrap()
        .0
}

fn s() -> Identifier {
    Identifier::Name(STREAM.into())
}
fn t() -> Identifier {
    Identifier::Name(TOPIC.into())
}

fn send(engine: &mut Engine, payloads: &[&str]) {
    let batch = payloads
        .iter()
        .map(|p| NewMessage::new(p.as_bytes().to_vec()))
        .collect();
    engine
        .send(&s(), &t(), &Partitioning::PartitionId(0), batch)
        .unwrap();
}

fn send_one(engine: &mut Engine, partition: u32, payload: &str) {
    engine
        .send(
            &s(),
            &t(),
            &Partitioning::PartitionId(partition),
            vec![NewMessage::new(payload.as_bytes().to_vec())],
        )
        .unwrap();
}

fn poll_next(engine: &mut Engine, consumer: Consumer) -> Vec<(u64, String)> {
    engine
        .poll(
            &s(),
            &t(),
            KEY.partition,
            consumer,
            PollingStrategy::Next,
            1000,
            false,
        )
        .unwrap()
        .messages
        .into_iter()
        .map(|m| (m.offset, String::from_utf8(m.payload.to_vec()).unwrap()))
        .collect()
}

/// Paths of files in the durable view whose generation is 0 (the purged history).
fn durable_dead_files(sim: &SimStorage) -> Vec<String> {
    sim.durable_view()
        .into_iter()
        .filter_map(|(path, node)| match node {
            NodeView::File(bytes) => {
                let old_segment = path.contains("/segments/00000000000000000000-");
                let old_offset = (path.contains("/consumers/") || path.contains("/groups/"))
                    && offset_generation(&bytes) == Some(0);
                (old_segment || old_offset).then_some(path)
            }
            NodeView::Dir => None,
        })
        .collect()
}

/// The generation in an offset file's newest valid slot, read through the
/// production decoder (by reopening a throwaway engine is overkill here).
fn offset_generation(bytes: &[u8]) -> Option<u64> {
    use sluice_server::partition::offsets::{OFFSET_LAYOUT, OffsetRecord};
    use sluice_server::slots::SlotRead;
    match OFFSET_LAYOUT.decode::<OffsetRecord>(bytes) {
        SlotRead::Valid { value, .. } => Some(value.generation),
        _ => None,
    }
}

struct Outcome {
    /// The obligation state right after the purge call returned (none for the naive purge).
    state_after_failed_attempt: Option<PurgeState>,
    recovered: Engine,
    sim: SimStorage,
}

/// Runs the scenario. `retry_before_power_loss`: whether the reconciler
/// retries (and so fresh writes land between a failed attempt and its retry)
/// before the power cut.
fn scenario(
    failed: FailedDir,
    policy: Durability,
    semantics: SyncFailureSemantics,
    retry_before_power_loss: bool,
    mode: PurgeMode,
) -> Outcome {
    // Given: a topic with an old history and offsets, all durable.
    let sim = SimStorage::new(SimConfig {
        seed: 3,
        sync_failure: semantics,
        capacity: None,
    });
    let mut engine = open(&sim, mode);
    setup_partitions(&mut engine, options(policy, policy), 1);
    engine.create_group(&s(), &t(), None, "billing").unwrap();
    send(
        &mut engine,
        &[
            "old-0", "old-1", "old-2", "old-3", "old-4", "old-5", "old-6", "old-7",
        ],
    );
    engine
        .store_offset(&s(), &t(), KEY.partition, Consumer::consumer(1), 5)
        .unwrap();
    engine
        .store_offset(&s(), &t(), KEY.partition, Consumer::consumer(2), 7)
        .unwrap();
    engine
        .store_offset(&s(), &t(), KEY.partition, Consumer::group(GROUP), 6)
        .unwrap();
    make_everything_durable(&sim);

    // When: the purge's deletions succeed but the first sync of one directory fails.
    if let Some(suffix) = failed.suffix() {
        sim.fail_when(
            OpMatcher::kind(OpKind::SyncDir).path_ends_with(suffix),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
    }
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    let state_after_failed_attempt = engine
        .partition(KEY)
        .unwrap()
        .obligation()
        .map(|o| o.state());

    // Fresh acknowledged writes of the new history.
    send(&mut engine, &["new-0", "new-1"]);
    engine
        .store_offset(&s(), &t(), KEY.partition, Consumer::consumer(1), 0)
        .unwrap();
    if retry_before_power_loss {
        engine.reconcile_until_idle(10);
        // The obligation may claim Applied only if no dead file is still durable.
        if obligation(&engine).is_applied() {
            assert_eq!(
                durable_dead_files(&sim),
                Vec::<String>::new(),
                "Applied while a removal was not durable"
            );
        }
        send(&mut engine, &["new-2"]);
        engine
            .store_offset(&s(), &t(), KEY.partition, Consumer::group(GROUP), 2)
            .unwrap();
    }
    // Power is cut; sluice restarts, recovers and finishes cleanup.
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let mut recovered = open(&sim, mode);
    recovered.reconcile_until_idle(10);
    Outcome {
        state_after_failed_attempt,
        recovered,
        sim,
    }
}

fn check(failed: FailedDir, policy: Durability, semantics: SyncFailureSemantics) {
    for retry in [false, true] {
        let ctx = format!(
            "failed={failed:?} policy={policy:?} semantics={semantics:?} retry_before_power_loss={retry}"
        );
        let mut o = scenario(failed, policy, semantics, retry, PurgeMode::Obligation);

        // Then: the failed attempt did not reach Applied.
        if failed.suffix().is_some() {
            assert_ne!(
                o.state_after_failed_attempt,
                Some(PurgeState::Applied),
                "{ctx}"
            );
        } else {
            assert_eq!(
                o.state_after_failed_attempt,
                Some(PurgeState::Applied),
                "{ctx}"
            );
        }
        // After recovery and cleanup: the obligation is Applied and no dead file is durable.
        let ob = o.recovered.partition(KEY).unwrap().obligation().unwrap();
        assert_eq!(ob.state(), PurgeState::Applied, "{ctx}");
        assert_eq!(ob.generation(), 1, "{ctx}");
        assert_eq!(durable_dead_files(&o.sim), Vec::<String>::new(), "{ctx}");

        // No offset of the old history is visible: consumer 2 and any consumer
        // that stored nothing fresh have no offset, and Next starts at 0.
        let e = &mut o.recovered;
        assert_eq!(
            e.get_offset(&s(), &t(), KEY.partition, Consumer::consumer(2))
                .unwrap(),
            None,
            "{ctx}"
        );
        let fresh = poll_next(e, Consumer::consumer(2));
        let expected_len = if retry { 3 } else { 2 };
        match policy {
            Durability::Persisted => {
                // Every acknowledged fresh write survived the power loss.
                let want: Vec<(u64, String)> = ["new-0", "new-1", "new-2"]
                    .iter()
                    .take(expected_len)
                    .enumerate()
                    .map(|(i, p)| (i as u64, p.to_string()))
                    .collect();
                assert_eq!(fresh, want, "{ctx}");
                assert_eq!(
                    e.get_offset(&s(), &t(), KEY.partition, Consumer::consumer(1))
                        .unwrap()
                        .map(|x| x.1),
                    Some(0),
                    "{ctx}"
                );
                if retry {
                    assert_eq!(
                        e.get_offset(&s(), &t(), KEY.partition, Consumer::group(GROUP))
                            .unwrap()
                            .map(|x| x.1),
                        Some(2),
                        "{ctx}"
                    );
                } else {
                    assert_eq!(
                        e.get_offset(&s(), &t(), KEY.partition, Consumer::group(GROUP))
                            .unwrap(),
                        None,
                        "{ctx}"
                    );
                }
            }
            Durability::Buffered => {
                // Power loss may lose buffered fresh writes, never turn them
                // into old ones: what is served is a prefix of the new history.
                for (i, (offset, payload)) in fresh.iter().enumerate() {
                    assert_eq!(*offset, i as u64, "{ctx}");
                    assert!(payload.starts_with("new-"), "{ctx}: {payload}");
                }
                let c1 = e
                    .get_offset(&s(), &t(), KEY.partition, Consumer::consumer(1))
                    .unwrap()
                    .map(|x| x.1);
                assert!(
                    c1.is_none() || c1 == Some(0),
                    "{ctx}: consumer 1 offset {c1:?}"
                );
                let g1 = e
                    .get_offset(&s(), &t(), KEY.partition, Consumer::group(GROUP))
                    .unwrap()
                    .map(|x| x.1);
                assert!(g1.is_none() || g1 == Some(2), "{ctx}: group offset {g1:?}");
            }
        }
    }
}

macro_rules! matrix {
    ($($name:ident: $dir:expr, $policy:expr, $sem:expr;)*) => {$(
        #[test]
        fn $name() {
            check($dir, $policy, $sem);
        }
    )*};
}

use Durability::{Buffered, Persisted};
use FailedDir::{Consumers, Groups, None as NoFailure, Segments};
use SyncFailureSemantics::{Forgiving, Linux};

matrix! {
    consumers_sync_fails_buffered_linux: Consumers, Buffered, Linux;
    consumers_sync_fails_buffered_forgiving: Consumers, Buffered, Forgiving;
    consumers_sync_fails_persisted_linux: Consumers, Persisted, Linux;
    consumers_sync_fails_persisted_forgiving: Consumers, Persisted, Forgiving;
    groups_sync_fails_buffered_linux: Groups, Buffered, Linux;
    groups_sync_fails_buffered_forgiving: Groups, Buffered, Forgiving;
    groups_sync_fails_persisted_linux: Groups, Persisted, Linux;
    groups_sync_fails_persisted_forgiving: Groups, Persisted, Forgiving;
    segments_sync_fails_buffered_linux: Segments, Buffered, Linux;
    segments_sync_fails_buffered_forgiving: Segments, Buffered, Forgiving;
    segments_sync_fails_persisted_linux: Segments, Persisted, Linux;
    segments_sync_fails_persisted_forgiving: Segments, Persisted, Forgiving;
    control_successful_sync_buffered: NoFailure, Buffered, Linux;
    control_successful_sync_persisted: NoFailure, Persisted, Linux;
}

/// Teeth: the same scenario against the naive purge (Apache Iggy's order:
/// delete, sync with warnings only, record the generation, no filtering at
/// recovery) shows the bug: an offset or a message of the purged history is
/// visible again after the power loss.
fn naive_shows_the_bug(failed: FailedDir, policy: Durability) -> bool {
    let mut o = scenario(failed, policy, Linux, false, PurgeMode::NaiveIggyOrder);
    let e = &mut o.recovered;
    let old_consumer = e
        .get_offset(&s(), &t(), KEY.partition, Consumer::consumer(2))
        .unwrap()
        .map(|x| x.1)
        == Some(7);
    let old_group = e
        .get_offset(&s(), &t(), KEY.partition, Consumer::group(GROUP))
        .unwrap()
        .map(|x| x.1)
        == Some(6);
    let old_messages = poll_next(e, Consumer::consumer(2))
        .iter()
        .any(|(_, p)| p.starts_with("old-"));
    match failed {
        FailedDir::Consumers => old_consumer,
        FailedDir::Groups => old_group,
        FailedDir::Segments => old_messages,
        FailedDir::None => old_consumer || old_group || old_messages,
    }
}

#[test]
fn the_naive_purge_fails_the_same_scenarios() {
    for failed in [Consumers, Groups, Segments] {
        for policy in [Buffered, Persisted] {
            assert!(
                naive_shows_the_bug(failed, policy),
                "naive purge not caught: failed={failed:?} policy={policy:?}"
            );
        }
    }
    // Control: with every sync succeeding, even the naive purge works.
    assert!(!naive_shows_the_bug(NoFailure, Persisted));
}

/// A durable two-message history, then a purge whose first cleanup attempt
/// removed the old files but could not sync `segments/`: its removals are
/// recorded in the obligation and pending.
fn purge_with_pending_segment_removals(sim: &SimStorage) -> (Engine, Obligation) {
    let mut engine = open(sim, PurgeMode::Obligation);
    setup_partitions(&mut engine, TopicOptions::default(), 1);
    send(&mut engine, &["old-0", "old-1"]);
    make_everything_durable(sim);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/segments"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    let before = obligation(&engine);
    assert_ne!(before.state(), PurgeState::Applied);
    assert!(!before.removed().is_empty(), "{before:?}");
    (engine, before)
}

/// ADR 0003's L3: a crash between the two renames that re-dirty the
/// obligation's name leaves only `purge.obligation.redirty`. Recovery must
/// move it back before loading the obligation, or it would rebuild a blank
/// `Requested` and lose the list of removals an earlier attempt made (which
/// must be redone before any sync can confirm them).
#[test]
fn an_obligation_left_mid_redirty_by_a_crash_is_recovered_with_its_removals() {
    // Given: a purge whose first cleanup attempt removed the old files but
    // could not sync `segments/`, so its removals are recorded and pending.
    let sim = linux_sim(5);
    let (engine, before) = purge_with_pending_segment_removals(&sim);

    // When: the process dies between the two renames of a re-dirty of the
    // obligation's name (the state that crash leaves, made by hand).
    drop(engine);
    sim.crash(Crash::Process);
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    let aside = paths.root.join("purge.obligation.redirty");
    sim.rename(&paths.obligation, &aside).unwrap();
    let engine = open(&sim, PurgeMode::Obligation);

    // Then: the obligation is back under its name with the removals it
    // recorded (not a blank `Requested` rebuilt from the metadata), and no
    // leftover name remains.
    let recovered = obligation(&engine);
    assert_eq!(recovered.removed(), before.removed());
    assert_eq!(recovered.attempts(), before.attempts());
    assert!(sim.exists(&paths.obligation).unwrap());
    assert!(!sim.exists(&aside).unwrap());
}

/// Recovery reads the obligation through the page cache, so the newest record
/// it finds may be one whose sync failed in the process that wrote it, and a
/// clean attempt writes its records without syncing them at all (ADR 0003
/// §9): torn writes the kernel writes back on its own and a power loss can
/// leave no readable record. That loses progress, never the purge: the
/// committed generation is in the metadata, and the cleanup reruns from a
/// fresh listing, which after the power loss sees every dead file.
#[test]
fn a_torn_obligation_file_after_a_power_loss_reruns_cleanup_from_the_metadata() {
    // Given: a purge whose cleanup finished (its records unsynced), then a
    // crash; recovery reads its records from the page cache.
    let sim = linux_sim(19);
    let mut engine = open(&sim, PurgeMode::Obligation);
    setup_partitions(&mut engine, TopicOptions::default(), 1);
    send(&mut engine, &["old-0", "old-1"]);
    make_everything_durable(&sim);
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    drop(engine);
    sim.crash(Crash::Process);
    let mut engine = open(&sim, PurgeMode::Obligation);
    assert_eq!(engine.partition(KEY).unwrap().degraded_reason(), None);

    // When: the reconciler's next obligation writes tear, the kernel writes
    // the torn page back on its own (as Linux may at any time), and power is
    // lost.
    sim.fail_when(
        OpMatcher::kind(OpKind::Write).path_ends_with("/purge.obligation"),
        Fault::io(FaultMode::TornWrite),
        0,
        u32::MAX,
    );
    engine.reconcile();
    drop(engine);
    sim.clear_faults();
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    sim.open(&paths.obligation, OpenMode::Read)
        .unwrap()
        .sync()
        .unwrap();
    sim.crash(Crash::PowerLoss);

    // Then: the partition serves, and its cleanup reaches `Applied` with no
    // dead file durable.
    let mut engine = open(&sim, PurgeMode::Obligation);
    assert_eq!(engine.partition(KEY).unwrap().degraded_reason(), None);
    engine.reconcile_until_idle(5);
    assert!(obligation(&engine).is_applied());
    assert_eq!(durable_dead_files(&sim), Vec::<String>::new());
}

/// Cleanup across partitions runs `concurrency` at a time: a topic purge over
/// many partitions, one of which fails a directory sync, ends with every
/// other partition `Applied` in the same pass, the failing one retried to
/// `Applied`, no dead file durable and every fresh write intact.
#[test]
fn a_topic_purge_cleans_its_partitions_concurrently_and_one_failure_stays_its_own() {
    // Given: a topic of 12 partitions with an old, durable history each.
    let sim = SimStorage::new(SimConfig {
        seed: 11,
        sync_failure: SyncFailureSemantics::Linux,
        capacity: None,
    });
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = EngineConfig::deterministic(DATA, 7);
    config.reconciler.concurrency = 4;
    let mut engine = Engine::open(storage, Arc::new(ManualClock::new(1_000_000)), config)
        .unwrap()
        .0;
    setup_partitions(&mut engine, persisted(), 12);
    for partition in 0..12 {
        send_one(&mut engine, partition, "old");
        engine
            .store_offset(&s(), &t(), partition, Consumer::consumer(1), 0)
            .unwrap();
    }
    make_everything_durable(&sim);
    // Partition 7's `consumers/` sync fails once.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/7/consumers"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );

    // When: the topic is purged (its pass cleans 4 partitions at a time).
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();

    // Then: every partition but 7 is Applied after the purge's own pass...
    let state = |engine: &Engine, p: u32| {
        let key = PartitionKey {
            partition: p,
            ..KEY
        };
        engine.partition(key).unwrap().obligation().unwrap().state()
    };
    for p in (0..12).filter(|p| *p != 7) {
        assert_eq!(state(&engine, p), PurgeState::Applied, "partition {p}");
    }
    assert_ne!(state(&engine, 7), PurgeState::Applied);
    // ...fresh writes land meanwhile, and the retry applies partition 7.
    for partition in 0..12 {
        send_one(&mut engine, partition, "new");
    }
    engine.reconcile_until_idle(5);
    assert_eq!(state(&engine, 7), PurgeState::Applied);
    assert_eq!(durable_dead_files(&sim), Vec::<String>::new());
    // And after a power loss every partition serves exactly its fresh message.
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let mut engine = open(&sim, PurgeMode::Obligation);
    for partition in 0..12 {
        let polled = engine
            .poll(
                &s(),
                &t(),
                partition,
                Consumer::consumer(1),
                PollingStrategy::Next,
                10,
                false,
            )
            .unwrap();
        let payloads: Vec<&[u8]> = polled.messages.iter().map(|m| &m.payload[..]).collect();
        assert_eq!(payloads, [b"new"], "partition {partition}");
    }
}

fn linux_sim(seed: u64) -> SimStorage {
    SimStorage::new(SimConfig {
        seed,
        sync_failure: SyncFailureSemantics::Linux,
        capacity: None,
    })
}

/// An unlink can take effect and still report an error. The removal must be
/// redone like any other after a failed directory sync, even when the tracker
/// held an older change to the name: here recovery noted the offset file as
/// created, and redoing that (a rename of a name now gone) does nothing.
#[test]
fn an_unlink_that_took_effect_but_failed_then_a_failed_sync_never_lets_applied_claim_it_durable() {
    // Given: a durable persisted offset over an old history, then a restart
    // (recovery notes every loaded offset file as created).
    let sim = linux_sim(11);
    let mut engine = open(&sim, PurgeMode::Obligation);
    setup_partitions(&mut engine, persisted(), 1);
    send(&mut engine, &["old-0", "old-1", "old-2"]);
    engine
        .store_offset(&s(), &t(), 0, Consumer::consumer(1), 1)
        .unwrap();
    make_everything_durable(&sim);
    drop(engine);
    sim.crash(Crash::Process);
    let mut engine = open(&sim, PurgeMode::Obligation);

    // When: the purge's unlink of the offset file takes effect but returns
    // an error, and then the sync of `consumers/` fails (Linux drops the
    // unlink); cleanup retries until it is done.
    sim.fail_when(
        OpMatcher::kind(OpKind::RemoveFile).path_ends_with("/consumers/1"),
        Fault::io(FaultMode::After),
        0,
        1,
    );
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/consumers"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    engine.reconcile_until_idle(10);

    // Then: `Applied`, and no dead file is durable.
    let ob = obligation(&engine);
    assert!(ob.is_applied(), "{ob:?}");
    assert_eq!(
        durable_dead_files(&sim),
        Vec::<String>::new(),
        "Applied while a removal was not durable"
    );
    // And: after a power loss the old offset is not back, and the fresh
    // history is read from its start.
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let mut recovered = open(&sim, PurgeMode::Obligation);
    recovered.reconcile_until_idle(10);
    send(&mut recovered, &["new-0"]);
    assert_eq!(
        poll_next(&mut recovered, Consumer::consumer(1)),
        vec![(0, "new-0".to_string())]
    );
}

/// Issue 15: names carried from attempts whose intermediate directory sync
/// failed stay in `removed`; if each such attempt added a round of up to 512
/// names, a few failures would outgrow the obligation's 64 KiB slot and every
/// later write of it would fail, so cleanup would never finish.
#[test]
fn failed_intermediate_syncs_never_grow_the_obligation_past_its_slot() {
    // Given: 1,000 dead segments (2,000 names, four rounds), all durable.
    let sim = linux_sim(13);
    let mut engine = open(&sim, PurgeMode::Obligation);
    let one_message_segments = TopicOptions {
        segment_size: 1,
        ..buffered()
    };
    setup_partitions(&mut engine, one_message_segments, 1);
    for i in 0..1000 {
        send_one(&mut engine, 0, &format!("old-{i}"));
    }
    make_everything_durable(&sim);

    // When: the purge's first two intermediate syncs of `segments/` fail,
    // then every operation succeeds and cleanup retries until it is done.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/segments"),
        Fault::io(FaultMode::Before),
        0,
        2,
    );
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    let mut largest = 0;
    for _ in 0..20 {
        engine.reconcile_until_idle(1);
        let ob = obligation(&engine);
        largest = largest.max(ob.removed().values().map(|n| n.len()).sum::<usize>());
        if ob.is_applied() {
            break;
        }
    }

    // Then: cleanup reached `Applied` with every dead file's removal durable,
    // and the recorded names never exceeded one round.
    let ob = obligation(&engine);
    assert!(ob.is_applied(), "stuck: {:?}", ob.last_error());
    assert!(largest <= 512, "removed held {largest} names");
    assert_eq!(durable_dead_files(&sim), Vec::<String>::new());
}

/// A durable two-message history with a persisted consumer offset, then a
/// purge whose cleanup finished, and an obligation file whose newest durable
/// record is `DirsSynced` (as sluice before issue 16 wrote it, synced, right
/// before `Applied`; this version keeps `DirsSynced` in memory only, but
/// still reads it), then a power loss.
fn purge_left_dirs_synced_by_a_power_loss(sim: &SimStorage) {
    let mut engine = open(sim, PurgeMode::Obligation);
    setup_partitions(&mut engine, persisted(), 1);
    send(&mut engine, &["old-0", "old-1"]);
    engine
        .store_offset(&s(), &t(), 0, Consumer::consumer(1), 1)
        .unwrap();
    make_everything_durable(sim);
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    assert!(obligation(&engine).is_applied());
    drop(engine);
    let mut ob = Obligation::request(1);
    ob.requested_to_files_deleted();
    ob.files_deleted_to_dirs_synced(
        &[DirKind::Segments, DirKind::Consumers, DirKind::Groups]
            .into_iter()
            .collect(),
    );
    let seq = 3;
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    let file = sim.open(&paths.obligation, OpenMode::ReadWrite).unwrap();
    let bytes = OBLIGATION_LAYOUT
        .encode(seq, &ObligationRecord::from(&ob))
        .unwrap();
    file.write_at(OBLIGATION_LAYOUT.slot_offset(seq), &bytes)
        .unwrap();
    drop(file);
    make_everything_durable(sim);
    sim.crash(Crash::PowerLoss);
}

/// The default partition's obligation as the engine holds it.
fn obligation(engine: &Engine) -> Obligation {
    engine.partition(KEY).unwrap().obligation().unwrap().clone()
}

/// The obligation's state as the next process would read it after a
/// process crash (the page cache).
fn cached_obligation_state(sim: &SimStorage) -> Option<PurgeState> {
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    match decode_file(&sim.read_file(&paths.obligation).ok()?) {
        LoadedObligation::Valid { obligation, .. } => Some(obligation.state()),
        _ => None,
    }
}

fn durable_obligation_state(sim: &SimStorage) -> Option<PurgeState> {
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    let bytes = sluice_testkit::engine::durable_file(sim, &paths.obligation)?;
    match decode_file(&bytes) {
        LoadedObligation::Valid { obligation, .. } => Some(obligation.state()),
        _ => None,
    }
}

/// ADR 0003 §7 row 13: `DirsSynced` was written (by versions before issue
/// 16; this one never writes it) only after all three directories were
/// confirmed synced in one attempt, so every removal is durable already;
/// recovery that finds it goes straight to `Applied`, with no rescan and no
/// directory sync.
#[test]
fn an_obligation_found_dirs_synced_is_applied_without_another_round() {
    // Given: a purge left at a durable `DirsSynced` by a power loss.
    let sim = linux_sim(23);
    purge_left_dirs_synced_by_a_power_loss(&sim);
    assert_eq!(durable_obligation_state(&sim), Some(PurgeState::DirsSynced));
    let mut engine = open(&sim, PurgeMode::Obligation);
    let ob = obligation(&engine);
    assert_eq!(ob.state(), PurgeState::DirsSynced);

    // When: the first pass runs while every listing and every sync of the
    // three directories would fail.
    for dir in ["/segments", "/consumers", "/groups"] {
        for kind in [OpKind::ListDir, OpKind::SyncDir] {
            sim.fail_when(
                OpMatcher::kind(kind).path_ends_with(dir),
                Fault::io(FaultMode::Before),
                0,
                u32::MAX,
            );
        }
    }
    engine.reconcile_until_idle(1);

    // Then: `Applied` in memory and on disk, without another attempt, and no
    // dead file is durable.
    let ob = obligation(&engine);
    assert!(ob.is_applied(), "{ob:?}");
    assert_eq!(ob.attempts(), 0);
    assert_eq!(cached_obligation_state(&sim), Some(PurgeState::Applied));
    assert_eq!(durable_dead_files(&sim), Vec::<String>::new());
    // And: after another power loss the new history starts from 0.
    drop(engine);
    sim.clear_faults();
    sim.crash(Crash::PowerLoss);
    let mut engine = open(&sim, PurgeMode::Obligation);
    send(&mut engine, &["new-0"]);
    assert_eq!(
        poll_next(&mut engine, Consumer::consumer(1)),
        vec![(0, "new-0".to_string())]
    );
}

/// `DirsSynced` claims no dead file is durable; recovery that finds one
/// anyway (outside the fault model: here put back by hand) must not take the
/// shortcut to `Applied`, but redo the round, as it reopens `Applied`.
#[test]
fn dirs_synced_found_with_dead_files_redoes_the_round() {
    // Given: a purge left at a durable `DirsSynced`, and an old segment file
    // brought back durably while the server was down.
    let sim = linux_sim(29);
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    let old = paths
        .segments
        .join("00000000000000000000-00000000000000000000.log");
    purge_left_dirs_synced_by_a_power_loss(&sim);
    assert_eq!(durable_obligation_state(&sim), Some(PurgeState::DirsSynced));
    let file = sim.open(&old, OpenMode::CreateNew).unwrap();
    file.write_at(0, b"a dead generation-0 segment").unwrap();
    file.sync().unwrap();
    drop(file);
    sim.sync_dir(&paths.segments).unwrap();

    // When: the server recovers and cleans up.
    let mut engine = open(&sim, PurgeMode::Obligation);
    let ob = obligation(&engine);
    assert_eq!(ob.state(), PurgeState::Requested, "{ob:?}");
    engine.reconcile_until_idle(5);

    // Then: the round was redone: `Applied` with the dead file's removal durable.
    let ob = obligation(&engine);
    assert!(ob.is_applied(), "{ob:?}");
    assert_eq!(ob.attempts(), 1);
    assert_eq!(durable_dead_files(&sim), Vec::<String>::new());
}

/// An obligation file written by the version-1 format (before phases carried
/// their data), bytes exactly as that code wrote them (captured at 6844544,
/// as in `partition/purge/record.rs`): record 1 `Requested`, record 2
/// `FilesDeleted` for generation 1 naming `consumers/1` and `groups/3`, with
/// `confirmed` = {consumers}, attempt 1 and an error.
/// Slot 0's record (record 2), then slot 1's (record 1), one per line.
const V1_SLOTS: &str = include_str!("fixtures/obligation-v1.hex");

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_version_1_obligation_file_still_loads_and_cleanup_finishes_in_version_2() {
    // Given: a purged partition whose obligation file holds, durably, the
    // two version-1 records (record 2 in slot 0, record 1 in slot 1).
    let sim = linux_sim(31);
    let mut engine = open(&sim, PurgeMode::Obligation);
    setup_partitions(&mut engine, TopicOptions::default(), 1);
    send(&mut engine, &["old-0"]);
    engine.purge_topic(&s(), &t()).unwrap();
    engine.reconcile();
    make_everything_durable(&sim);
    drop(engine);
    let paths = sluice_server::layout::PartitionPaths::new(Path::new(DATA), KEY);
    let file = sim.open(&paths.obligation, OpenMode::ReadWrite).unwrap();
    file.truncate(0).unwrap();
    let slots: Vec<&str> = V1_SLOTS.lines().collect();
    file.write_at(0, &hex(slots[0])).unwrap();
    file.write_at(64 << 10, &hex(slots[1])).unwrap();
    file.sync().unwrap();
    drop(file);
    sim.crash(Crash::PowerLoss);

    // When: the server recovers.
    let mut engine = open(&sim, PurgeMode::Obligation);

    // Then: the version-1 record is adopted as written, not degraded.
    let p = engine.partition(KEY).unwrap();
    assert_eq!(p.degraded_reason(), None);
    let ob = p.obligation().unwrap().clone();
    assert_eq!(ob.state(), PurgeState::FilesDeleted);
    assert_eq!((ob.generation(), ob.attempts()), (1, 1));
    assert_eq!(ob.last_error(), Some("storage: sync_dir failed"));
    let removed: Vec<(String, Vec<String>)> = ob
        .removed()
        .iter()
        .map(|(d, n)| (d.as_str().to_string(), n.iter().cloned().collect()))
        .collect();
    assert_eq!(
        removed,
        [
            ("consumers".to_string(), vec!["1".to_string()]),
            ("groups".to_string(), vec!["3".to_string()]),
        ]
    );
    // And: cleanup finishes, the newest record written in version 2.
    engine.reconcile_until_idle(5);
    assert!(obligation(&engine).is_applied());
    // (as the next process would read it: `Applied` is written without a
    // sync, ADR 0003 §9)
    let cached = sim.read_file(&paths.obligation).unwrap();
    match decode_file(&cached) {
        LoadedObligation::Valid {
            seq, obligation, ..
        } => {
            assert!(obligation.is_applied());
            let at = (seq % 2) as usize * (64 << 10);
            assert_eq!(&cached[at + 4..at + 6], &2u16.to_le_bytes());
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 16, item 1: a purge answers once its commit point is durable. The
/// call removes nothing (no caller, and no request queued behind it for the
/// engine, waits for cleanup); the obligation it leaves is the reconciler's,
/// whose next pass (the server's is woken by the commit) does the removals.
#[test]
fn a_purge_answers_at_its_commit_point_and_leaves_cleanup_to_the_reconciler() {
    use sluice_testkit::engine as kit;
    // Given a partition with messages and a stored offset, all durable,
    let (sim, mut engine) = kit::sim_with(persisted());
    kit::send(&mut engine, 0, 3);
    kit::store_offset(&mut engine, Consumer::consumer(1), 1).unwrap();
    make_everything_durable(&sim);

    // when its topic is purged,
    let from = sim.trace().len() as u64;
    engine.purge_topic(&kit::stream(), &kit::topic()).unwrap();

    // then the call unlinked nothing, the new (empty) history is served
    // already, and the cleanup is pending in the reconciler,
    let io = sluice_testkit::trace::io_since(&sim, from);
    assert!(
        !io.lines().any(|l| l.starts_with("remove_file p0")),
        "the purge call did cleanup:\n{io}"
    );
    assert!(kit::all_messages(&mut engine).is_empty());
    let p = engine.partition(kit::key()).unwrap();
    assert_eq!(
        p.obligation().map(|o| o.state()),
        Some(PurgeState::Requested)
    );
    assert_eq!(engine.reconciler().pending().len(), 1);
    // and the reconciler's pass removes the old files and applies it.
    let from = sim.trace().len() as u64;
    engine.reconcile();
    let io = sluice_testkit::trace::io_since(&sim, from);
    assert!(io.contains("remove_file p0 segments/"), "{io}");
    assert!(io.contains("remove_file p0 consumers/1"), "{io}");
    let p = engine.partition(kit::key()).unwrap();
    assert_eq!(p.obligation().map(|o| o.state()), Some(PurgeState::Applied));
    assert!(engine.reconciler().pending().is_empty());
}
