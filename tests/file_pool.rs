//! The bounded pool of open files (ADR 0018), on the simulator: the pool
//! keeps at most its bound of descriptors open, never closes a handle with
//! unsynced writes without a sync (and reports a failed one to the owner's
//! next sync), follows its files through renames, and leaves the engine's
//! behaviour (stored offsets, polls, purge, crash recovery) unchanged.
//!
//! The simulator is set to lose the unsynced changes of a file whose last
//! handle closes (`set_lose_unsynced_on_last_close`), the worst case of a
//! writeback error no later descriptor hears of: a pool that closed dirty
//! handles would lose acknowledged data here.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_storage::{DurableFile, PoolStats, PooledStorage};
use sluice_testkit::engine::*;

const BOUND: usize = 8;

fn harsh_sim() -> SimStorage {
    let sim = new_sim();
    sim.set_lose_unsynced_on_last_close(true);
    sim
}

fn pool_on(sim: &SimStorage, bound: usize) -> PooledStorage {
    PooledStorage::new(Arc::new(sim.clone()), bound)
}

fn file(i: usize) -> PathBuf {
    PathBuf::from(format!("{DATA_DIR}/f{i}"))
}

fn durable_bytes(sim: &SimStorage, path: &Path) -> Option<Vec<u8>> {
    match sim.durable_view().get(path.to_str().unwrap()) {
        Some(NodeView::File(bytes)) => Some(bytes.clone()),
        _ => None,
    }
}

// ---- the pool on its own -------------------------------------------------------

#[test]
fn given_more_files_than_the_bound_when_used_in_turn_then_at_most_the_bound_are_open_and_every_byte_reads_back()
 {
    let sim = harsh_sim();
    let pool = pool_on(&sim, BOUND);
    let files: Vec<Box<dyn DurableFile>> = (0..100)
        .map(|i| pool.open(&file(i), OpenMode::CreateNew).unwrap())
        .collect();
    for round in 0..3u8 {
        for (i, f) in files.iter().enumerate() {
            f.write_at(u64::from(round), &[i as u8]).unwrap();
            f.sync().unwrap();
        }
    }
    for (i, f) in files.iter().enumerate() {
        assert_eq!(f.read_to_end().unwrap(), vec![i as u8; 3]);
    }
    let stats = pool.stats();
    assert!(sim.peak_open_handles() <= BOUND as u64, "{stats:?}");
    assert_eq!(stats.open, sim.open_handles());
    assert!(stats.evictions > 0 && stats.reopens > 0, "{stats:?}");
    assert_eq!(stats.handles, 100);
    // Every handle was clean when closed: no eviction needed a sync.
    assert_eq!(stats.eviction_syncs, 0, "{stats:?}");
    drop(files);
    assert_eq!(sim.open_handles(), 0);
    assert_eq!(pool.stats().open, 0);
}

#[test]
fn given_unsynced_writes_when_the_handle_is_evicted_then_it_is_synced_first_and_the_owners_later_sync_holds()
 {
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let a = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    a.write_at(0, b"acknowledged").unwrap();
    // Two more files push `a` out of the pool.
    let b = pool.open(&file(1), OpenMode::CreateNew).unwrap();
    let c = pool.open(&file(2), OpenMode::CreateNew).unwrap();
    b.write_at(0, b"b").unwrap();
    c.write_at(0, b"c").unwrap();
    let stats = pool.stats();
    assert!(stats.eviction_syncs >= 1, "{stats:?}");
    // No handle with unsynced changes was ever closed: had one been, the
    // simulator would have dropped those changes, and the owner's sync
    // through a new descriptor would "succeed" without persisting them.
    assert_eq!(sim.unsynced_last_closes(), 0);
    a.sync().unwrap();
    sim.sync_dir(Path::new(DATA_DIR)).unwrap();
    drop((a, b, c));
    sim.crash(Crash::PowerLoss);
    assert_eq!(
        durable_bytes(&sim, &file(0)).as_deref(),
        Some(&b"acknowledged"[..])
    );
}

#[test]
fn given_a_dirty_handle_whose_sync_fails_at_eviction_when_its_owner_syncs_then_the_failure_is_reported_once()
 {
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let a = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    a.write_at(0, b"lost").unwrap();
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_ends_with("/f0"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    // `b` dirty too, so `c` needs `a`'s place (clean handles go first).
    let b = pool.open(&file(1), OpenMode::CreateNew).unwrap();
    b.write_at(0, b"b").unwrap();
    let _c = pool.open(&file(2), OpenMode::CreateNew).unwrap();
    let stats: PoolStats = pool.stats();
    assert_eq!(stats.eviction_sync_failures, 1, "{stats:?}");
    // The kernel dropped the dirty pages; a plain retry would now succeed.
    // The pool kept the error for the owner's next sync, as the descriptor
    // would have reported it had it stayed open.
    let err = a.sync().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io);
    a.sync().unwrap();
}

#[test]
fn given_an_evicted_handle_when_its_name_is_renamed_aside_and_back_then_it_reaches_its_file_throughout()
 {
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let a = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    a.write_at(0, b"mine").unwrap();
    a.sync().unwrap();
    let others: Vec<_> = (1..4)
        .map(|i| pool.open(&file(i), OpenMode::CreateNew).unwrap())
        .collect();
    // A re-dirty whose second rename has not happened yet.
    let aside = PathBuf::from(format!("{DATA_DIR}/f0.redirty"));
    pool.rename(&file(0), &aside).unwrap();
    for f in &others {
        f.len().unwrap();
    }
    assert_eq!(a.read_to_end().unwrap(), b"mine");
    a.write_at(4, b"!").unwrap();
    pool.rename(&aside, &file(0)).unwrap();
    for f in &others {
        f.len().unwrap();
    }
    a.sync().unwrap();
    assert_eq!(a.read_to_end().unwrap(), b"mine!");
    assert!(sim.peak_open_handles() <= 2);
    assert_eq!(sim.read_file(&file(0)).unwrap(), b"mine!");
}

#[test]
fn given_an_evicted_handle_when_its_name_is_replaced_then_it_keeps_its_own_file() {
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let a = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    a.write_at(0, b"old").unwrap();
    a.sync().unwrap();
    let tmp = PathBuf::from(format!("{DATA_DIR}/f0.tmp"));
    {
        let t = pool.open(&tmp, OpenMode::CreateNew).unwrap();
        t.write_at(0, b"new").unwrap();
        t.sync().unwrap();
        let _b = pool.open(&file(1), OpenMode::CreateNew).unwrap();
    }
    pool.rename(&tmp, &file(0)).unwrap();
    // Pinned: it holds the replaced file, as a plain descriptor would.
    assert_eq!(pool.stats().pinned, 1);
    let _more: Vec<_> = (2..5)
        .map(|i| pool.open(&file(i), OpenMode::CreateNew).unwrap())
        .collect();
    assert_eq!(a.read_to_end().unwrap(), b"old");
    assert_eq!(sim.read_file(&file(0)).unwrap(), b"new");
}

#[test]
fn given_a_removed_name_with_an_evicted_handle_when_the_name_is_created_again_then_the_old_handle_never_reaches_the_new_file()
 {
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let a = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    a.write_at(0, b"old").unwrap();
    a.sync().unwrap();
    let _b = pool.open(&file(1), OpenMode::CreateNew).unwrap();
    let _c = pool.open(&file(2), OpenMode::CreateNew).unwrap();
    pool.remove_file(&file(0)).unwrap();
    let again = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    again.write_at(0, b"new").unwrap();
    let _d = pool.open(&file(3), OpenMode::CreateNew).unwrap();
    assert_eq!(a.read_to_end().unwrap(), b"old");
}

// ---- the engine through the pool -----------------------------------------------

const PARTITIONS: u32 = 25;
const CONSUMERS: u32 = 4;

fn pooled_config() -> sluice_server::EngineConfig {
    let mut config = config(Path::new(DATA_DIR));
    config.max_open_files = Some(BOUND);
    config
}

fn open_engine(sim: &SimStorage, bounded: bool, clock_micros: u64) -> Engine {
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let config = if bounded {
        pooled_config()
    } else {
        config(Path::new(DATA_DIR))
    };
    Engine::open(storage, Arc::new(ManualClock::new(clock_micros)), config)
        .unwrap()
        .0
}

/// What the engine serves: every partition's messages, and every
/// consumer's stored offset there.
type Served = Vec<(Vec<u64>, Vec<Option<u64>>)>;

fn served(engine: &mut Engine) -> Served {
    (0..PARTITIONS)
        .map(|p| {
            let messages = engine
                .poll(
                    &stream(),
                    &topic(),
                    p,
                    Consumer::consumer(1000),
                    PollingStrategy::Offset(0),
                    u64::MAX,
                    false,
                )
                .unwrap()
                .messages;
            let offsets = (0..CONSUMERS)
                .map(|c| {
                    engine
                        .get_offset(&stream(), &topic(), p, Consumer::consumer(c))
                        .unwrap()
                        .map(|(_, stored)| stored)
                })
                .collect();
            (offsets_of(&messages), offsets)
        })
        .collect()
}

/// 25 partitions × 4 consumers: 100 offset files and 50 segment files.
fn workload(engine: &mut Engine) {
    for round in 0..2u64 {
        for p in 0..PARTITIONS {
            engine
                .send(
                    &stream(),
                    &topic(),
                    &Partitioning::PartitionId(p),
                    batch(round * 3, 3),
                )
                .unwrap();
            for c in 0..CONSUMERS {
                engine
                    .store_offset(
                        &stream(),
                        &topic(),
                        p,
                        Consumer::consumer(c),
                        round * 3 + u64::from(c % 3),
                    )
                    .unwrap();
            }
        }
        for p in 0..PARTITIONS {
            // `Next` polls store offsets through the same files.
            engine
                .poll(
                    &stream(),
                    &topic(),
                    p,
                    Consumer::consumer(3),
                    PollingStrategy::Next,
                    2,
                    true,
                )
                .unwrap();
        }
    }
}

/// Runs the workload, a crash of `crash` kind and a purge on one engine,
/// bounded or not; returns what it served at each step.
fn run(options: TopicOptions, bounded: bool, crash: Crash) -> (SimStorage, Vec<Served>) {
    let sim = harsh_sim();
    let mut engine = open_engine(&sim, bounded, START_MICROS);
    setup_partitions(&mut engine, options, PARTITIONS);
    workload(&mut engine);
    let mut seen = vec![served(&mut engine)];
    engine.sync_all().unwrap();
    if bounded {
        assert_eq!(
            sim.unsynced_last_closes(),
            0,
            "the pool closed a dirty file"
        );
        let stats = engine.file_pool_stats().unwrap();
        assert!(stats.evictions > 0, "{stats:?}");
        assert!(stats.open <= BOUND as u64, "{stats:?}");
    }
    drop(engine);
    sim.crash(crash);
    let mut engine = open_engine(&sim, bounded, RESTART_MICROS);
    seen.push(served(&mut engine));
    engine.purge_topic(&stream(), &topic()).unwrap();
    engine.reconcile_until_idle(10);
    seen.push(served(&mut engine));
    workload(&mut engine);
    seen.push(served(&mut engine));
    (sim, seen)
}

#[test]
fn given_a_bound_of_8_when_100_offset_files_and_50_segment_files_are_used_then_behaviour_is_unchanged_and_at_most_8_are_open()
 {
    for options in [persisted(), buffered()] {
        for crash in [Crash::Process, Crash::PowerLoss] {
            let (plain_sim, plain) = run(options, false, crash);
            let (sim, pooled) = run(options, true, crash);
            assert_eq!(pooled, plain, "{options:?} {crash}");
            // Without the pool every file keeps its descriptor.
            assert!(plain_sim.peak_open_handles() > 100, "{crash}");
            assert!(
                sim.peak_open_handles() <= BOUND as u64,
                "{options:?} {crash}: {} open at once",
                sim.peak_open_handles()
            );
        }
    }
}

#[test]
fn given_a_bound_when_persisted_stores_are_acknowledged_then_a_power_loss_keeps_every_one() {
    let sim = harsh_sim();
    let mut engine = open_engine(&sim, true, START_MICROS);
    setup_partitions(&mut engine, persisted(), PARTITIONS);
    workload(&mut engine);
    let before = served(&mut engine);
    drop(engine);
    for seed in 1..=5 {
        let sim = sim.fork();
        sim.crash(Crash::PowerLossPartial { seed });
        let mut engine = open_engine(&sim, true, RESTART_MICROS);
        assert_eq!(served(&mut engine), before, "seed {seed}");
        assert!(sim.peak_open_handles() <= BOUND as u64);
    }
}

#[test]
fn given_a_buffered_segment_whose_sync_fails_when_the_pool_evicts_it_then_polls_never_read_the_evicted_pages()
 {
    // Every failed sync evicts the pages it could not write (ADR 0002 §2.4):
    // they read back as zeros, and a poll that trusted them would fail with
    // `CorruptFile` (`sluice sim run --max-open-files 2`, seeds 4 and 20).
    let sim = harsh_sim();
    sim.set_eviction_after_failed_sync(1_000_000);
    let mut engine = open_engine(&sim, true, START_MICROS);
    setup_partitions(&mut engine, buffered(), PARTITIONS);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_ends_with(".log"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    for p in 0..PARTITIONS {
        engine
            .send(
                &stream(),
                &topic(),
                &Partitioning::PartitionId(p),
                batch(0, 3),
            )
            .unwrap();
    }
    let stats = engine.file_pool_stats().unwrap();
    assert_eq!(stats.eviction_sync_failures, 1, "{stats:?}");
    let mut cut = 0;
    for p in 0..PARTITIONS {
        // The segment whose sync failed treats it as its own failed sync:
        // its unsure tail, now zeros, is cut; every other one is whole.
        let polled = engine
            .poll(
                &stream(),
                &topic(),
                p,
                Consumer::consumer(1),
                PollingStrategy::Offset(0),
                u64::MAX,
                false,
            )
            .unwrap();
        match offsets_of(&polled.messages).as_slice() {
            [0, 1, 2] => {}
            [] => cut += 1,
            other => panic!("partition {p} serves {other:?}"),
        }
    }
    assert_eq!(cut, 1);
    // The next send goes on after the cut offsets, never reusing them.
    for p in 0..PARTITIONS {
        engine
            .send(
                &stream(),
                &topic(),
                &Partitioning::PartitionId(p),
                batch(3, 1),
            )
            .unwrap();
    }
}
