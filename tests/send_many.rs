//! A combined send (`Engine::send_many`, ADR 0030) is the same sends called
//! one by one: the same answers (offsets, partitions, errors), the same ids,
//! the same stored messages; with its partitions appended on threads it
//! still keeps every `persisted` acknowledgement across a power loss.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use sluice_server::clock::ManualClock;
use sluice_server::metadata::TopicOptions;
use sluice_server::partition::log::Message;
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{Engine, EngineError, Identifier, Partitioning, SendRequest, Sent};
use sluice_storage::{Crash, DiskStorage, DurableStorage, SimStorage};
use sluice_testkit::engine::{
    DATA_DIR, START_MICROS, buffered, config, crash_and_reopen, new_sim, persisted,
    setup_partitions, stream, topic,
};

const PARTITIONS: u32 = 3;

/// One send of a test's list: where to, how many messages, tagged `tag`.
#[derive(Debug, Clone)]
struct Send {
    to: Target,
    count: usize,
    tag: u32,
}

#[derive(Debug, Clone, Copy)]
enum Target {
    Partition(u32),
    Balanced,
    Key(u8),
    /// A topic that does not exist: refused in the plan.
    NoSuchTopic,
}

impl Send {
    fn request(&self) -> SendRequest {
        let partitioning = match self.to {
            Target::Partition(p) => Partitioning::PartitionId(p),
            Target::Balanced | Target::NoSuchTopic => Partitioning::Balanced,
            Target::Key(k) => Partitioning::MessagesKey(vec![k]),
        };
        let topic = match self.to {
            Target::NoSuchTopic => Identifier::from("missing"),
            _ => topic(),
        };
        SendRequest {
            stream: stream(),
            topic,
            partitioning,
            messages: (0..self.count)
                .map(|i| {
                    sluice_server::partition::log::NewMessage::new(
                        format!("t{}-{i}", self.tag).into_bytes(),
                    )
                })
                .collect(),
        }
    }
}

/// An answer as the tests compare it (errors by their text).
fn answer(a: &Result<Sent, EngineError>) -> Result<(u32, u64, u64), String> {
    a.as_ref()
        .map(|s| (s.partition_id, s.base_offset, s.count))
        .map_err(|e| e.to_string())
}

/// Every partition's messages: offset, id, payload.
fn contents(engine: &mut Engine) -> Vec<Vec<(u64, u128, Vec<u8>)>> {
    (0..PARTITIONS)
        .map(|p| {
            let polled: Vec<Message> = engine
                .poll(
                    &stream(),
                    &topic(),
                    p,
                    Consumer::consumer(9_999),
                    PollingStrategy::Offset(0),
                    100_000,
                    false,
                )
                .unwrap()
                .messages;
            polled
                .iter()
                .map(|m| (m.offset, m.id, m.payload.to_vec()))
                .collect()
        })
        .collect()
}

fn sim_engine(sim: &SimStorage, concurrency: usize, options: TopicOptions) -> Engine {
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = config(Path::new(DATA_DIR));
    config.append_concurrency = concurrency;
    let (mut engine, _) =
        Engine::open(storage, Arc::new(ManualClock::new(START_MICROS)), config).unwrap();
    setup_partitions(&mut engine, options, PARTITIONS);
    engine
}

fn disk_engine(dir: &Path, concurrency: usize, options: TopicOptions) -> Engine {
    let storage: Arc<dyn DurableStorage> = Arc::new(DiskStorage::new());
    let mut config = config(dir);
    config.append_concurrency = concurrency;
    let (mut engine, _) =
        Engine::open(storage, Arc::new(ManualClock::new(START_MICROS)), config).unwrap();
    setup_partitions(&mut engine, options, PARTITIONS);
    engine
}

/// Given two engines in the same state, when one takes `sends` combined
/// and the other one by one, then both answer and store the same.
fn assert_combined_is_one_by_one(combined: &mut Engine, alone: &mut Engine, sends: &[Send]) {
    let many = combined.send_many(sends.iter().map(Send::request).collect());
    let each: Vec<_> = sends
        .iter()
        .map(|s| alone.send_request(s.request()))
        .collect();
    assert_eq!(
        many.iter().map(answer).collect::<Vec<_>>(),
        each.iter().map(answer).collect::<Vec<_>>(),
        "answers of {sends:?}"
    );
    assert_eq!(contents(combined), contents(alone), "stored by {sends:?}");
}

/// Both simulators hold the same files with the same bytes, as the page
/// cache serves them and as a power loss would leave them. (Not the same
/// I/O order: a combined send appends partition by partition.)
fn assert_same_files(a: &SimStorage, b: &SimStorage) {
    assert_eq!(a.cached_view(), b.cached_view(), "the page cache");
    assert_eq!(a.durable_view(), b.durable_view(), "the disk");
}

fn mixed_sends() -> Vec<Send> {
    let s = |to, count, tag| Send { to, count, tag };
    vec![
        s(Target::Partition(0), 3, 0),
        s(Target::Partition(2), 1, 1),
        s(Target::NoSuchTopic, 2, 2),
        s(Target::Partition(0), 2, 3),
        s(Target::Balanced, 4, 4),
        s(Target::Partition(7), 1, 5),
        s(Target::Key(9), 2, 6),
        s(Target::Partition(1), 0, 7),
        s(Target::Balanced, 1, 8),
        s(Target::Partition(2), 5, 9),
    ]
}

#[test]
fn a_combined_send_answers_and_stores_as_the_sends_one_by_one() {
    for options in [buffered(), persisted()] {
        let (a, b) = (new_sim(), new_sim());
        let mut combined = sim_engine(&a, 1, options);
        let mut alone = sim_engine(&b, 1, options);
        assert_combined_is_one_by_one(&mut combined, &mut alone, &mixed_sends());
        // The same files, byte for byte, in the page cache and on disk.
        assert_same_files(&a, &b);
    }
}

#[test]
fn partitions_appended_on_threads_store_what_one_thread_does() {
    for options in [buffered(), persisted()] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut parallel = disk_engine(a.path(), 8, options);
        let mut alone = disk_engine(b.path(), 1, options);
        for round in 0..4 {
            let sends: Vec<Send> = mixed_sends()
                .into_iter()
                .map(|mut s| {
                    s.tag += 100 * round;
                    s
                })
                .collect();
            assert_combined_is_one_by_one(&mut parallel, &mut alone, &sends);
        }
    }
}

#[test]
fn persisted_sends_combined_on_threads_survive_a_power_loss() {
    // Given a persisted topic of three partitions, appended on threads.
    let sim = new_sim();
    let mut engine = sim_engine(&sim, 8, persisted());
    // When a combined send over every partition is acknowledged, and the
    // power goes.
    let sends: Vec<Send> = (0..9)
        .map(|tag| Send {
            to: Target::Partition(tag % PARTITIONS),
            count: 2,
            tag,
        })
        .collect();
    let answers = engine.send_many(sends.iter().map(Send::request).collect());
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let before = contents(&mut engine);
    let (mut engine, _) = crash_and_reopen(engine, &sim, Crash::PowerLoss);
    // Then every acknowledged message is there, as it was served.
    assert_eq!(contents(&mut engine), before);
    assert_eq!(before.iter().map(Vec::len).sum::<usize>(), 18);
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        6 => (0..PARTITIONS + 1).prop_map(Target::Partition),
        2 => Just(Target::Balanced),
        2 => any::<u8>().prop_map(Target::Key),
        1 => Just(Target::NoSuchTopic),
    ]
}

fn sends() -> impl Strategy<Value = Vec<Send>> {
    prop::collection::vec((target(), 0..4usize), 1..12).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(tag, (to, count))| Send {
                to,
                count,
                tag: tag as u32,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_combined_send_is_the_sends_one_by_one(persist in any::<bool>(), rounds in prop::collection::vec(sends(), 1..4)) {
        let options = if persist { persisted() } else { buffered() };
        let (a, b) = (new_sim(), new_sim());
        let mut combined = sim_engine(&a, 1, options);
        let mut alone = sim_engine(&b, 1, options);
        for sends in &rounds {
            assert_combined_is_one_by_one(&mut combined, &mut alone, sends);
        }
        assert_same_files(&a, &b);
    }
}

#[test]
fn with_a_file_pool_a_combined_send_appends_one_partition_at_a_time() {
    // A pool's open may evict another partition's file in the middle of
    // its append (ADR 0030): with a bound the appends do not run at once.
    let storage: Arc<dyn DurableStorage> = Arc::new(new_sim());
    let mut pooled = config(Path::new(DATA_DIR));
    pooled.append_concurrency = 8;
    pooled.max_open_files = Some(16);
    let (engine, _) = Engine::open(
        storage.clone(),
        Arc::new(ManualClock::new(START_MICROS)),
        pooled.clone(),
    )
    .unwrap();
    assert_eq!(engine.append_threads(), 1);
    drop(engine);
    pooled.max_open_files = None;
    let (engine, _) =
        Engine::open(storage, Arc::new(ManualClock::new(START_MICROS)), pooled).unwrap();
    assert_eq!(engine.append_threads(), 8);
}
