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

/// A handle on `file(0)` holding `mine`, synced, then evicted by opening
/// `count` new files after it (returned, so they stay open).
fn evicted_by_later_opens(
    pool: &PooledStorage,
    count: usize,
) -> (Box<dyn DurableFile>, Vec<Box<dyn DurableFile>>) {
    let a = pool.open(&file(0), OpenMode::CreateNew).unwrap();
    a.write_at(0, b"mine").unwrap();
    a.sync().unwrap();
    let others = (1..=count)
        .map(|i| pool.open(&file(i), OpenMode::CreateNew).unwrap())
        .collect();
    (a, others)
}

#[test]
fn given_an_evicted_handle_when_its_name_is_renamed_aside_and_back_then_it_reaches_its_file_throughout()
 {
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let (a, others) = evicted_by_later_opens(&pool, 3);
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

/// `sim run --seed 32 --steps 1000 --max-open-files 2`: a re-dirty renames
/// a live segment aside; the pool's reopen of its evicted handle fails, and
/// the rename itself fails (in either mode, the pool cannot tell whether the
/// file moved). The rename must be refused before it is made, or the closed
/// handle is cut off from a file that is still there.
#[test]
fn given_an_evicted_handle_whose_reopen_fails_when_its_name_is_renamed_then_the_rename_is_refused_and_the_handle_still_reaches_its_file()
 {
    for rename_fault in [FaultMode::Before, FaultMode::After] {
        // Given: `a` written, synced and evicted by two later opens.
        let sim = harsh_sim();
        let pool = pool_on(&sim, 2);
        let (a, others) = evicted_by_later_opens(&pool, 2);
        let aside = PathBuf::from(format!("{DATA_DIR}/f0.redirty"));
        sim.fail_when(
            OpMatcher::kind(OpKind::Open).path_ends_with("/f0"),
            Fault::io(FaultMode::Before),
            0,
            1,
        );
        sim.fail_when(
            OpMatcher::kind(OpKind::Rename),
            Fault::io(rename_fault),
            0,
            1,
        );

        // When: the re-dirty's first rename meets the failed reopen.
        let err = pool.rename(&file(0), &aside).unwrap_err();

        // Then: refused with the reopen's error, nothing moved, and the
        // handle reopens by its unchanged name.
        assert_eq!(err.op, OpKind::Open, "{rename_fault}: {err}");
        assert!(sim.exists(&file(0)).unwrap(), "{rename_fault}");
        assert!(!sim.exists(&aside).unwrap(), "{rename_fault}");
        assert_eq!(a.read_to_end().unwrap(), b"mine", "{rename_fault}");

        // And a retry, whose reopen succeeds, fails on the rename itself:
        // the handle is now open and pinned, so it keeps its file wherever
        // the name went, and the redo's second rename puts the name back.
        drop(others);
        let _others: Vec<_> = (1..3)
            .map(|i| pool.open(&file(i), OpenMode::ReadWrite).unwrap())
            .collect();
        pool.rename(&file(0), &aside).unwrap_err();
        assert_eq!(a.read_to_end().unwrap(), b"mine", "{rename_fault}");
        if rename_fault == FaultMode::After {
            pool.rename(&aside, &file(0)).unwrap();
        }
        assert_eq!(a.read_to_end().unwrap(), b"mine", "{rename_fault}");
        assert_eq!(sim.read_file(&file(0)).unwrap(), b"mine", "{rename_fault}");
    }
}

/// The handles a rename reopens are held open until it ends: its own
/// reopen at the target's name (or another thread's open) must not evict
/// the source's handle it just reopened, or a failed rename cuts that
/// handle off from a file that is still there (ADR 0018 finding 13).
#[test]
fn given_a_rename_whose_target_reopen_needs_room_when_the_rename_fails_then_the_sources_handle_still_reaches_its_file()
 {
    // Given a bound of 2 with one descriptor pinned (its name removed), and
    // handles on the rename's source and target both evicted,
    let sim = harsh_sim();
    let pool = pool_on(&sim, 2);
    let pinned = pool.open(&file(9), OpenMode::CreateNew).unwrap();
    pool.remove_file(&file(9)).unwrap();
    assert_eq!(pool.stats().pinned, 1);
    let (source, _others) = evicted_by_later_opens(&pool, 1);
    let target = pool.open(&file(1), OpenMode::ReadWrite).unwrap();
    let _last = pool.open(&file(2), OpenMode::CreateNew).unwrap();
    sim.fail_when(
        OpMatcher::kind(OpKind::Rename),
        Fault::io(FaultMode::Before),
        0,
        1,
    );

    // when the rename reopens both (the second reopen finds no room but the
    // first's handle) and then fails,
    pool.rename(&file(0), &file(1)).unwrap_err();

    // then the source's handle kept its descriptor: it reads its file.
    assert_eq!(source.read_to_end().unwrap(), b"mine");
    assert_eq!(target.read_to_end().unwrap(), b"");
    drop(pinned);
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

#[test]
fn given_a_poll_whose_own_reopen_evicts_a_later_segment_and_that_sync_fails_when_it_reads_on_then_it_never_serves_the_evicted_pages()
 {
    // Given a buffered partition of two segments, the newer one dirty, and
    // a bound of 2 (`sluice sim run --max-open-files 2`, seed 4 at 2,000
    // steps): a poll from offset 0 reopens the older segment's log, which
    // evicts the newer one's (the least recently used dirty handle), and
    // that eviction's sync fails and evicts its pages.
    let sim = harsh_sim();
    sim.set_eviction_after_failed_sync(1_000_000);
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = config(Path::new(DATA_DIR));
    config.max_open_files = Some(2);
    let mut engine = Engine::open(storage, Arc::new(ManualClock::new(START_MICROS)), config)
        .unwrap()
        .0;
    setup(&mut engine, one_batch_segments(Durability::Buffered));
    send(&mut engine, 0, 3);
    send(&mut engine, 3, 3);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_ends_with(segment_name(0, 3, "log")),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    // When the poll reads both segments.
    let polled = engine
        .poll(
            &stream(),
            &topic(),
            key().partition,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            u64::MAX,
            false,
        )
        .unwrap();
    // Then the eviction happened during the poll, and the newer segment's
    // lost batch is cut before it is read, never served as zeros
    // (`CorruptFile`): the poll serves the older segment's messages.
    let stats = engine.file_pool_stats().unwrap();
    assert_eq!(stats.eviction_sync_failures, 1, "{stats:?}");
    assert_eq!(offsets_of(&polled.messages), vec![0, 1, 2]);
}

/// An engine on `sim` whose files go through a pool of 2 descriptors, with
/// one partition of one-batch segments (every send rolls), and every failed
/// sync evicting the pages it could not write (ADR 0002 §2.4).
fn tight_engine(sim: &SimStorage, options: TopicOptions) -> Engine {
    let mut engine = open_tight(sim, START_MICROS);
    setup(&mut engine, options);
    engine
}

/// The engine of `tight_engine` on what `sim` holds (recovery).
fn open_tight(sim: &SimStorage, clock_micros: u64) -> Engine {
    sim.set_eviction_after_failed_sync(1_000_000);
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = config(Path::new(DATA_DIR));
    config.max_open_files = Some(2);
    Engine::open(storage, Arc::new(ManualClock::new(clock_micros)), config)
        .unwrap()
        .0
}

fn poll_all(engine: &mut Engine) -> Result<Vec<u64>, EngineError> {
    engine
        .poll(
            &stream(),
            &topic(),
            key().partition,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            u64::MAX,
            false,
        )
        .map(|polled| offsets_of(&polled.messages))
}

/// Fails the next sync of segment `base`'s log (generation 0) once.
fn fail_next_log_sync(sim: &SimStorage, base: u64, mode: FaultMode) {
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncFile).path_ends_with(segment_name(0, base, "log")),
        Fault::io(mode),
        0,
        1,
    );
}

/// Opens consumer 1's offset file (storing `offset`) with the next sync of
/// the first segment's log failing: at a bound of 2 the open evicts that
/// dirty log, and its eviction sync fails.
fn evict_the_log_with_a_failed_sync(sim: &SimStorage, engine: &mut Engine, offset: u64) {
    fail_next_log_sync(sim, 0, FaultMode::Before);
    store_offsets(engine, &[1], offset);
    assert_eq!(engine.file_pool_stats().unwrap().eviction_sync_failures, 1);
}

/// Each of `consumers` stores `offset` (each store may open, and so evict).
fn store_offsets(engine: &mut Engine, consumers: &[u32], offset: u64) {
    for &consumer in consumers {
        engine
            .store_offset(
                &stream(),
                &topic(),
                key().partition,
                Consumer::consumer(consumer),
                offset,
            )
            .unwrap();
    }
}

#[test]
fn given_a_sealed_segment_whose_eviction_sync_failed_when_its_lost_batch_is_cut_then_the_log_counts_its_sealed_bytes_again()
 {
    // Given a buffered log of one-batch segments and a bound of 2: the
    // roll to the second segment opens its files, which evicts the first
    // one's dirty log, and that sync fails (`sim run --max-open-files 2`
    // seed 78).
    let sim = harsh_sim();
    let mut engine = tight_engine(&sim, one_batch_segments(Durability::Buffered));
    send(&mut engine, 0, 3);
    fail_next_log_sync(&sim, 0, FaultMode::Before);
    send(&mut engine, 3, 3);
    let stats = engine.file_pool_stats().unwrap();
    assert_eq!(stats.eviction_sync_failures, 1, "{stats:?}");
    // When a poll settles it: the sealed segment's lost batch is cut.
    assert_eq!(poll_all(&mut engine).unwrap(), vec![3, 4, 5]);
    // Then the log's count of sealed bytes (what retention by size weighs)
    // is that of the segments it holds.
    engine.check_invariants().unwrap();
}

#[test]
fn given_an_empty_sealed_segment_left_by_a_cut_when_retention_by_size_runs_then_it_commits_no_mark_at_or_below_the_current_one()
 {
    // Given a buffered partition whose only batch was lost to a failed
    // eviction sync: the poll cuts it, and the next send starts a segment of
    // its own, leaving the empty one sealed at the low-water mark
    // (`sim run --max-open-files 2` seed 49).
    let sim = harsh_sim();
    let mut engine = tight_engine(&sim, one_batch_segments(Durability::Buffered));
    send(&mut engine, 0, 3);
    // The offset file's open evicts the segment's log (dirty, least
    // recently used).
    evict_the_log_with_a_failed_sync(&sim, &mut engine, 2);
    assert_eq!(poll_all(&mut engine).unwrap(), Vec::<u64>::new());
    send(&mut engine, 3, 1);
    // When the topic's size cap is set below what it holds and the
    // reconciler enforces it.
    engine
        .update_topic(&stream(), &topic(), TOPIC, 0, 1)
        .unwrap();
    engine.reconcile();
    engine.reconcile_until_idle(10);
    // Then it commits nothing it cannot raise (the only sealed segment is
    // empty) and keeps serving the active one.
    assert_eq!(poll_all(&mut engine).unwrap(), vec![3]);
    engine.check_invariants().unwrap();
}

#[test]
fn given_a_failed_sends_cut_whose_length_an_eviction_sync_lost_when_later_sends_seal_the_segment_then_a_power_loss_serves_only_acknowledged_batches()
 {
    // Given a persisted partition of one-batch segments and a bound of 2: a
    // send's sync fails after it reached the disk, so its batch is durable
    // and cut from the page cache only; the pool's sync of that cut, when
    // it evicts the log, fails too (`sim run --max-open-files 2` seed 41).
    let sim = harsh_sim();
    let options = TopicOptions {
        segment_size: 1,
        ..options(Durability::Persisted, Durability::Buffered)
    };
    let mut engine = tight_engine(&sim, options);
    send(&mut engine, 0, 1);
    fail_next_log_sync(&sim, 1, FaultMode::After);
    try_send(&mut engine, 1, 3).unwrap_err();
    fail_next_log_sync(&sim, 1, FaultMode::Before);
    // Two buffered stores open two offset files: the first evicts the
    // segment's index, the second its log (each the least recently used).
    store_offsets(&mut engine, &[1, 2], 0);
    assert_eq!(engine.file_pool_stats().unwrap().eviction_sync_failures, 1);
    // When the next sends are acknowledged (a shorter batch where the
    // failed one was, then one that seals its segment) and the power fails.
    send(&mut engine, 10, 1);
    send(&mut engine, 11, 1);
    drop(engine);
    sim.crash(Crash::PowerLoss);
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let mut config = config(Path::new(DATA_DIR));
    config.max_open_files = Some(2);
    let mut engine = Engine::open(storage, Arc::new(ManualClock::new(RESTART_MICROS)), config)
        .unwrap()
        .0;
    // Then recovery finds the acknowledged batches and nothing of the
    // failed one's bytes.
    let polled = engine
        .poll(
            &stream(),
            &topic(),
            key().partition,
            Consumer::consumer(1),
            PollingStrategy::Offset(0),
            u64::MAX,
            false,
        )
        .unwrap();
    assert_eq!(offsets_of(&polled.messages), vec![0, 1, 2]);
    assert_eq!(payloads_of(&polled.messages), vec!["m0", "m10", "m11"]);
}

#[test]
fn given_a_failed_pool_sync_whose_recheck_cannot_open_the_log_when_a_poll_reads_the_segment_then_it_rechecks_first_and_never_serves_the_evicted_pages()
 {
    // Given a buffered segment whose eviction sync failed and evicted its
    // pages, and a fault on the open that the recheck of its unsure tail
    // needs (through the pool every read may reopen its file; `sim run
    // --max-open-files 2` seed 109: the error was taken, the recheck
    // skipped, and every later poll served zeros as `CorruptFile`).
    let sim = harsh_sim();
    let mut engine = tight_engine(&sim, one_batch_segments(Durability::Buffered));
    send(&mut engine, 0, 3);
    evict_the_log_with_a_failed_sync(&sim, &mut engine, 2);
    sim.fail_when(
        OpMatcher::kind(OpKind::Open).path_ends_with(segment_name(0, 0, "log")),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    // When polls read the segment, then the recheck owed is done before
    // any of its bytes is served: the lost batch is cut, never read.
    assert_eq!(poll_all(&mut engine).unwrap(), Vec::<u64>::new());
    assert_eq!(poll_all(&mut engine).unwrap(), Vec::<u64>::new());
    // And the next send goes on after the cut offsets.
    assert_eq!(send(&mut engine, 3, 1).base_offset, 3);
}

#[test]
fn given_buffered_batches_recovered_from_the_page_cache_when_an_eviction_sync_of_their_segment_fails_then_polls_never_serve_the_evicted_pages()
 {
    // Given buffered batches a process crash left in the page cache only,
    // and a send after recovery that makes their segment's log dirty again:
    // two stores open two offset files, the second evicting the log, and
    // that sync fails, evicting every page no sync covered, the recovered
    // batches' too (`sim run --max-open-files 2` seed 266). The crash
    // keeps their pages dirty, as `sim run` does (not `harsh_sim`, whose
    // last close drops them).
    let sim = new_sim();
    let engine = tight_engine(&sim, buffered());
    let mut engine = {
        let mut engine = engine;
        send(&mut engine, 0, 3);
        drop(engine);
        sim.crash(Crash::Process);
        open_tight(&sim, RESTART_MICROS)
    };
    send(&mut engine, 3, 1);
    fail_next_log_sync(&sim, 0, FaultMode::Before);
    store_offsets(&mut engine, &[1, 2], 3);
    assert_eq!(engine.file_pool_stats().unwrap().eviction_sync_failures, 1);
    // When a poll reads the segment, then it serves what still reads back
    // (the lost batches are cut, recovered ones too), never zeros as
    // `CorruptFile`.
    let served = poll_all(&mut engine).unwrap();
    assert!([0, 1, 2, 3].starts_with(&served), "{served:?}");
    // And the next send goes on after the cut offsets.
    assert_eq!(send(&mut engine, 4, 1).base_offset, 4);
}

#[test]
fn given_a_buffered_batch_whose_eviction_sync_failed_when_a_later_batch_is_synced_by_the_pool_then_a_power_loss_leaves_no_hole_below_it()
 {
    // Given a buffered batch whose eviction sync failed, its pages kept
    // but their dirty state dropped (Linux): nothing will write it to disk.
    let sim = new_sim();
    let mut engine = tight_engine(&sim, buffered());
    sim.set_eviction_after_failed_sync(0);
    send(&mut engine, 0, 3);
    // The segment's name is on disk (as a directory writeback would make it).
    sim.sync_dir(&paths(Path::new(DATA_DIR)).segments).unwrap();
    evict_the_log_with_a_failed_sync(&sim, &mut engine, 0);
    // When a later batch is appended and the pool's next eviction of the
    // log syncs it (stores open offset files until the log is closed), and
    // the power fails.
    send(&mut engine, 3, 2);
    let syncs = engine.file_pool_stats().unwrap().eviction_syncs;
    for consumer in 2..8 {
        engine
            .store_offset(
                &stream(),
                &topic(),
                key().partition,
                Consumer::consumer(consumer),
                0,
            )
            .unwrap();
    }
    assert!(engine.file_pool_stats().unwrap().eviction_syncs > syncs);
    drop(engine);
    sim.crash(Crash::PowerLoss);
    // Then recovery finds both batches, not the later one above a hole (a
    // valid batch after an invalid one is damage: the partition would
    // refuse service).
    let mut engine = open_tight(&sim, RESTART_MICROS);
    assert_eq!(poll_all(&mut engine).unwrap(), vec![0, 1, 2, 3, 4]);
}
