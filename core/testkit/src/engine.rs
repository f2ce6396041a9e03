//! Engine fixtures (formerly `tests/support/mod.rs`): engines on
//! `SimStorage` or the real disk, the default subject, messages, offsets and
//! simulator inspection. Tests `use sluice_testkit::engine::*`, so the
//! engine's own types are re-exported here too.
//!
//! Invariants: one stream `orders` (id 0) with one topic `events` (id 0) and
//! partition 0 is the default subject; payloads are `m{i}`, so a message
//! names the index it was sent as; a simulator from [`new_sim`] already has a
//! durable `/data`, so partition tests never depend on how the engine
//! creates a missing data directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use sluice_remote::{
    Halts, LinkedRemote, ListedObject, RemoteFault, RemoteKey, RemoteMatcher, RemoteStore,
    SimRemote, SimRemoteConfig,
};
use sluice_server::EngineConfig;
pub use sluice_server::clock::ManualClock;
use sluice_server::layout::PartitionPaths;
pub use sluice_server::layout::segment_name;
pub use sluice_server::metadata::{Durability, Metadata, PartitionKey, TopicOptions};
pub use sluice_server::partition::log::{HeaderKey, HeaderValue, Headers, Message, NewMessage};
pub use sluice_server::partition::{Consumer, PollingStrategy};
pub use sluice_server::{
    DataWrite, DeletePhase, Engine, EngineError, Identifier, LocalRetention, ObligationKey,
    Partitioning, PurgeMode, RecoveryReport, ResourceKey, Sent, TierReport, TieredTopic,
    TieringConfig,
};
pub use sluice_storage::sim::NodeView;
pub use sluice_storage::{
    Crash, DiskStorage, DurableStorage, ErrorKind, Fault, FaultMode, OpKind, OpMatcher, OpenMode,
    SimConfig, SimStorage, SyncFailureSemantics,
};

pub const DATA_DIR: &str = "/data";
pub const STREAM: &str = "orders";
pub const TOPIC: &str = "events";
/// Where every test clock starts (microseconds).
pub const START_MICROS: u64 = 1_000_000;
/// Where the clock of a restarted engine starts: later than anything written before.
pub const RESTART_MICROS: u64 = 1_000_000_000;

pub fn stream() -> Identifier {
    Identifier::from(STREAM)
}

pub fn topic() -> Identifier {
    Identifier::from(TOPIC)
}

/// The default subject's only partition.
pub const PARTITION: u32 = 0;

/// The id of the first consumer group a test creates without asking for one
/// (Iggy 0.11 numbers it 0).
pub const GROUP: u32 = 0;

pub fn key() -> PartitionKey {
    PartitionKey {
        stream: 0,
        topic: 0,
        partition: PARTITION,
    }
}

pub fn config(data_dir: &Path) -> EngineConfig {
    EngineConfig::deterministic(data_dir, 1)
}

/// Where the default partition's files live under `data_dir`.
pub fn paths(data_dir: &Path) -> PartitionPaths {
    PartitionPaths::new(data_dir, key())
}

pub fn sim_paths() -> PartitionPaths {
    paths(Path::new(DATA_DIR))
}

// ---- opening engines -------------------------------------------------------

/// A simulator whose data directory already exists durably, as an operator's
/// `mkdir -p` + reboot would leave it, so tests of the partition code do not
/// depend on how the engine creates a missing data directory (that has its
/// own tests: `engine_durability::a_data_dir_the_engine_created_*`).
pub fn new_sim() -> SimStorage {
    new_sim_seeded(7)
}

/// As `new_sim`, with another seed for the simulator's torn-write lengths.
fn new_sim_seeded(seed: u64) -> SimStorage {
    new_sim_configured(SimConfig {
        seed,
        ..SimConfig::default()
    })
}

/// As `new_sim`, with the simulator configured (sync-failure semantics, capacity).
pub fn new_sim_configured(config: SimConfig) -> SimStorage {
    let sim = SimStorage::new(config);
    sim.create_dir_all(Path::new(DATA_DIR)).unwrap();
    sim.sync_dir(Path::new("/")).unwrap();
    sim
}

pub fn open_sim_with_clock(sim: &SimStorage, clock: Arc<ManualClock>) -> (Engine, RecoveryReport) {
    open_sim_in_mode(sim, clock, PurgeMode::Obligation)
}

/// Opens the engine on `sim` with purges (and deletions) cleaned up in `mode`.
pub fn open_sim_in_mode(
    sim: &SimStorage,
    clock: Arc<ManualClock>,
    mode: PurgeMode,
) -> (Engine, RecoveryReport) {
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = config(Path::new(DATA_DIR));
    config.purge_mode = mode;
    Engine::open(storage, clock, config).unwrap()
}

pub fn sim_engine(sim: &SimStorage) -> Engine {
    open_sim_with_clock(sim, Arc::new(ManualClock::new(START_MICROS))).0
}

/// Opens the engine again (recovery) on whatever the simulator holds now.
pub fn reopen(sim: &SimStorage) -> (Engine, RecoveryReport) {
    open_sim_with_clock(sim, Arc::new(ManualClock::new(RESTART_MICROS)))
}

/// Drops the engine, crashes the simulator and recovers.
pub fn crash_and_reopen(
    engine: Engine,
    sim: &SimStorage,
    crash: Crash,
) -> (Engine, RecoveryReport) {
    drop(engine);
    sim.crash(crash);
    reopen(sim)
}

pub fn disk_engine(data_dir: &Path) -> (Engine, RecoveryReport) {
    disk_engine_with_clock(data_dir, Arc::new(ManualClock::new(START_MICROS)))
}

fn disk_engine_with_clock(data_dir: &Path, clock: Arc<ManualClock>) -> (Engine, RecoveryReport) {
    let storage: Arc<dyn DurableStorage> = Arc::new(DiskStorage::new());
    Engine::open(storage, clock, config(data_dir)).unwrap()
}

/// A backend a round-trip test runs on: the real disk or the simulator.
pub enum Backend {
    Disk(tempfile::TempDir),
    Sim(SimStorage),
}

impl Backend {
    pub fn disk() -> Backend {
        Backend::Disk(tempfile::tempdir().unwrap())
    }

    pub fn sim() -> Backend {
        Backend::Sim(new_sim())
    }

    pub fn data_dir(&self) -> PathBuf {
        match self {
            Backend::Disk(dir) => dir.path().join("data"),
            Backend::Sim(_) => PathBuf::from(DATA_DIR),
        }
    }

    pub fn open(&self) -> Engine {
        self.open_at(START_MICROS).0
    }

    fn open_at(&self, micros: u64) -> (Engine, RecoveryReport) {
        let clock = Arc::new(ManualClock::new(micros));
        match self {
            Backend::Disk(_) => disk_engine_with_clock(&self.data_dir(), clock),
            Backend::Sim(sim) => open_sim_with_clock(sim, clock),
        }
    }

    /// Stops the engine and starts it again through recovery. On the
    /// simulator the process crashes (handles die, the page cache survives),
    /// which is what a restart on the disk backend is too.
    pub fn restart(&self, engine: Engine) -> (Engine, RecoveryReport) {
        drop(engine);
        if let Backend::Sim(sim) = self {
            sim.crash(Crash::Process);
        }
        self.open_at(RESTART_MICROS)
    }
}

// ---- resources ---------------------------------------------------------------

pub fn options(durability: Durability, offsets: Durability) -> TopicOptions {
    TopicOptions {
        durability,
        consumer_offset_durability: offsets,
        ..TopicOptions::default()
    }
}

pub fn persisted() -> TopicOptions {
    options(Durability::Persisted, Durability::Persisted)
}

pub fn buffered() -> TopicOptions {
    options(Durability::Buffered, Durability::Buffered)
}

/// Creates stream `orders` (id 0) and topic `events` (id 0) with one partition
/// (id 0), numbered as Iggy 0.11 numbers them.
pub fn setup(engine: &mut Engine, options: TopicOptions) {
    setup_partitions(engine, options, 1);
}

pub fn setup_partitions(engine: &mut Engine, options: TopicOptions, partitions: u32) {
    let s = engine.create_stream(None, STREAM).unwrap();
    assert_eq!(s.id, key().stream);
    let t = engine
        .create_topic(&stream(), None, TOPIC, partitions, options, 0, 0, 1)
        .unwrap();
    assert_eq!(t.id, key().topic);
}

/// As `setup`, with retention: `message_expiry` in microseconds (0: never),
/// `max_topic_size` in bytes (0: unlimited), as the engine stores them.
pub fn setup_with_retention(
    engine: &mut Engine,
    options: TopicOptions,
    message_expiry: u64,
    max_topic_size: u64,
) {
    let s = engine.create_stream(None, STREAM).unwrap();
    assert_eq!(s.id, key().stream);
    let t = engine
        .create_topic(
            &stream(),
            None,
            TOPIC,
            1,
            options,
            message_expiry,
            max_topic_size,
            1,
        )
        .unwrap();
    assert_eq!(t.id, key().topic);
}

/// Options whose segments each hold one batch: every send seals the
/// segment before it (retention tests need many sealed segments).
pub fn one_batch_segments(durability: Durability) -> TopicOptions {
    TopicOptions {
        segment_size: 1,
        ..options(durability, durability)
    }
}

/// Sends one message with `payload` to the default partition.
pub fn send_payload(engine: &mut Engine, payload: &str) -> Sent {
    engine
        .send(
            &stream(),
            &topic(),
            &Partitioning::PartitionId(PARTITION),
            vec![NewMessage::new(payload.as_bytes().to_vec())],
        )
        .unwrap()
}

/// Segment files (`.log` and `.idx`) of the default partition whose base
/// offset is below `mark`, in the page cache and on disk.
pub fn segment_files_below(sim: &SimStorage, mark: u64) -> Vec<String> {
    let dir = sim_paths().segments;
    let dir = dir.to_str().unwrap();
    let mut out = Vec::new();
    for (label, view) in [
        ("cached", sim.cached_view()),
        ("durable", sim.durable_view()),
    ] {
        for path in view.keys() {
            let Some(name) = path.strip_prefix(dir).and_then(|n| n.strip_prefix('/')) else {
                continue;
            };
            if sluice_server::layout::parse_segment_name(name).is_some_and(|(_, b, _)| b < mark) {
                out.push(format!("{label}: {name}"));
            }
        }
    }
    out
}

/// A simulator with the default subject created under `options`.
pub fn sim_with(options: TopicOptions) -> (SimStorage, Engine) {
    sim_seeded_with(7, options)
}

/// As `sim_with`, on a simulator seeded with `seed`.
pub fn sim_seeded_with(seed: u64, options: TopicOptions) -> (SimStorage, Engine) {
    let sim = new_sim_seeded(seed);
    let mut engine = sim_engine(&sim);
    setup(&mut engine, options);
    (sim, engine)
}

// ---- messages ----------------------------------------------------------------

pub fn payload(i: u64) -> Vec<u8> {
    format!("m{i}").into_bytes()
}

pub fn batch(from: u64, n: u64) -> Vec<NewMessage> {
    (from..from + n)
        .map(|i| NewMessage::new(payload(i)))
        .collect()
}

/// Sends `m{from}..m{from+n}` as one batch to the default partition.
pub fn send(engine: &mut Engine, from: u64, n: u64) -> Sent {
    try_send(engine, from, n).unwrap()
}

pub fn try_send(engine: &mut Engine, from: u64, n: u64) -> Result<Sent, EngineError> {
    engine.send(
        &stream(),
        &topic(),
        &Partitioning::PartitionId(PARTITION),
        batch(from, n),
    )
}

/// Sends `m{from}..m{from+n}` one message per batch.
pub fn send_each(engine: &mut Engine, from: u64, n: u64) {
    for i in from..from + n {
        let sent = send(engine, i, 1);
        assert_eq!(sent.count, 1);
    }
}

pub fn try_poll(
    engine: &mut Engine,
    consumer: Consumer,
    strategy: PollingStrategy,
    count: u64,
) -> Result<Vec<Message>, EngineError> {
    engine
        .poll(
            &stream(),
            &topic(),
            PARTITION,
            consumer,
            strategy,
            count,
            false,
        )
        .map(|p| p.messages)
}

pub fn poll(
    engine: &mut Engine,
    consumer: Consumer,
    strategy: PollingStrategy,
    count: u64,
) -> Vec<Message> {
    try_poll(engine, consumer, strategy, count).unwrap()
}

pub fn offsets_of(messages: &[Message]) -> Vec<u64> {
    messages.iter().map(|m| m.offset).collect()
}

pub fn payloads_of(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

/// Offsets a poll returns.
pub fn poll_offsets(engine: &mut Engine, strategy: PollingStrategy, count: u64) -> Vec<u64> {
    offsets_of(&poll(engine, Consumer::consumer(1), strategy, count))
}

/// Every message of the default partition, in offset order.
pub fn all_messages(engine: &mut Engine) -> Vec<Message> {
    poll(
        engine,
        Consumer::consumer(1),
        PollingStrategy::Offset(0),
        u64::MAX,
    )
}

// ---- offsets -----------------------------------------------------------------

pub fn store_offset(
    engine: &mut Engine,
    consumer: Consumer,
    offset: u64,
) -> Result<(), EngineError> {
    engine.store_offset(&stream(), &topic(), PARTITION, consumer, offset)
}

/// Deletes the stored offset of `consumer`; `Ok(false)` if it had none.
pub fn delete_offset(engine: &mut Engine, consumer: Consumer) -> Result<bool, EngineError> {
    engine.delete_offset(&stream(), &topic(), PARTITION, consumer)
}

/// The stored offset of `consumer`, if any.
pub fn stored_offset(engine: &mut Engine, consumer: Consumer) -> Option<u64> {
    engine
        .get_offset(&stream(), &topic(), PARTITION, consumer)
        .unwrap()
        .map(|(_, stored)| stored)
}

// ---- simulator inspection ----------------------------------------------------

/// A file's bytes as they would be after a power loss now (`None`: no durable name).
pub fn durable_file(sim: &SimStorage, path: &Path) -> Option<Vec<u8>> {
    match sim.durable_view().get(path.to_str().unwrap()) {
        Some(NodeView::File(bytes)) => Some(bytes.clone()),
        _ => None,
    }
}

/// Flips one bit of a file's byte at `at` (through a fresh handle, in the page cache).
pub fn flip_byte(storage: &dyn DurableStorage, path: &Path, at: u64) {
    let file = storage.open(path, OpenMode::ReadWrite).unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(at, &mut byte).unwrap();
    byte[0] ^= 0x10;
    file.write_at(at, &byte).unwrap();
}

/// Names of the default partition's segment files with extension `ext`.
pub fn segment_files(storage: &dyn DurableStorage, data_dir: &Path, ext: &str) -> Vec<String> {
    let suffix = format!(".{ext}");
    storage
        .list_dir(&paths(data_dir).segments)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(&suffix))
        .collect()
}

/// Syncs every file and directory the simulator caches, so what was written
/// so far is durable whatever the policy (an old history that must come back
/// after a power cut).
pub fn make_everything_durable(sim: &SimStorage) {
    for (path, node) in sim.cached_view() {
        match node {
            NodeView::File(_) => sim
                .open(Path::new(&path), OpenMode::Read)
                .unwrap()
                .sync()
                .unwrap(),
            NodeView::Dir => sim.sync_dir(Path::new(&path)).unwrap(),
        }
    }
    sim.sync_dir(Path::new("/")).unwrap();
}

// ---- deletions -----------------------------------------------------------------

/// What a deletion test deletes, in the default subject with two partitions
/// and group 0 (ADR 0015): its resource key, where its files live and which
/// directory syncs make its deletion durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionKind {
    Stream,
    Topic,
    /// The topic's last partition (id 1).
    Partition,
    Group,
}

impl DeletionKind {
    pub const ALL: [DeletionKind; 4] = [
        DeletionKind::Stream,
        DeletionKind::Topic,
        DeletionKind::Partition,
        DeletionKind::Group,
    ];

    pub fn resource(self) -> ResourceKey {
        match self {
            DeletionKind::Stream => ResourceKey::Stream { stream: 0 },
            DeletionKind::Topic => ResourceKey::Topic {
                stream: 0,
                topic: 0,
            },
            DeletionKind::Partition => ResourceKey::Partition(PartitionKey {
                stream: 0,
                topic: 0,
                partition: 1,
            }),
            DeletionKind::Group => ResourceKey::Group {
                stream: 0,
                topic: 0,
                group: GROUP,
            },
        }
    }

    /// The directories whose sync makes the deletion durable (a group's
    /// file lives in every partition's `groups/`: each fails separately).
    pub fn synced_dirs(self) -> Vec<&'static str> {
        match self {
            DeletionKind::Stream => vec!["/data/streams"],
            DeletionKind::Topic => vec!["/data/streams/0/topics"],
            DeletionKind::Partition => vec!["/data/streams/0/topics/0/partitions"],
            DeletionKind::Group => vec![
                "/data/streams/0/topics/0/partitions/0/groups",
                "/data/streams/0/topics/0/partitions/1/groups",
            ],
        }
    }

    /// The paths the deleted resource's files live at.
    pub fn paths(self) -> Vec<&'static str> {
        match self {
            DeletionKind::Stream => vec!["/data/streams/0"],
            DeletionKind::Topic => vec!["/data/streams/0/topics/0"],
            DeletionKind::Partition => vec!["/data/streams/0/topics/0/partitions/1"],
            DeletionKind::Group => vec![
                "/data/streams/0/topics/0/partitions/0/groups/0",
                "/data/streams/0/topics/0/partitions/1/groups/0",
            ],
        }
    }

    pub fn delete(self, engine: &mut Engine) -> Result<(), EngineError> {
        match self {
            DeletionKind::Stream => engine.delete_stream(&stream()),
            DeletionKind::Topic => engine.delete_topic(&stream(), &topic()),
            DeletionKind::Partition => engine.delete_partitions(&stream(), &topic(), 1).map(|_| ()),
            DeletionKind::Group => {
                engine.delete_group(&stream(), &topic(), &Identifier::Numeric(GROUP))
            }
        }
    }
}

// ---- the remote tier ---------------------------------------------------------

/// The instance prefix tiered test engines use.
pub const TIER_INSTANCE: &str = "test";

/// Attaches `remote` as the engine's tier, with the default subject's topic
/// opted in under `local` retention (small blocks, so reads span several).
pub fn attach_tier(engine: &mut Engine, remote: &SimRemote, local: LocalRetention) {
    attach_tier_with(engine, remote, local, |_| {});
}

/// As `attach_tier`, with the configuration adjusted by `adjust`.
pub fn attach_tier_with(
    engine: &mut Engine,
    remote: &SimRemote,
    local: LocalRetention,
    adjust: impl FnOnce(&mut TieringConfig),
) {
    attach_store(engine, Arc::new(remote.clone()), local, adjust);
}

/// As `attach_tier_with`, with any store.
pub fn attach_store(
    engine: &mut Engine,
    store: Arc<dyn RemoteStore>,
    local: LocalRetention,
    adjust: impl FnOnce(&mut TieringConfig),
) {
    let mut config = TieringConfig::new(TIER_INSTANCE);
    config.block_bytes = 256;
    config.cache_bytes = 4 << 10;
    config.topics.push(TieredTopic {
        stream: STREAM.to_string(),
        topic: TOPIC.to_string(),
        local,
    });
    adjust(&mut config);
    engine.attach_tier(store, config).unwrap();
}

/// Every object the store holds under the test instance, by key.
pub fn remote_keys(remote: &SimRemote) -> Vec<String> {
    remote
        .list(&RemoteKey::new(TIER_INSTANCE).unwrap())
        .unwrap()
        .into_iter()
        .map(|o| o.key.as_str().to_string())
        .collect()
}

/// Tiering and reconciler passes until idle (`Engine::tier_until_idle`).
pub fn tier_until_idle(engine: &mut Engine, max: u32) {
    engine.tier_until_idle(max);
}
