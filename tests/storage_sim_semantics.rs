//! One named test per promise of `SimStorage` (docs/adr/0002-storage-fault-model.md).
//! Each reads as given / when / then against the public `DurableStorage` API.
use std::path::Path;

use sluice_storage::sim::NodeView;
use sluice_storage::{
    Crash, DurableStorage, ErrorKind, Fault, FaultMode, FaultPlan, OpKind, OpMatcher, OpenMode,
    SimConfig, SimStorage, SyncFailureSemantics,
};

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// A simulator with `/a` and `/b` created and durable.
fn sim_with_dirs(semantics: SyncFailureSemantics) -> SimStorage {
    let sim = SimStorage::new(SimConfig {
        seed: 7,
        sync_failure: semantics,
        capacity: None,
    });
    sim.create_dir_all(p("/a")).unwrap();
    sim.create_dir_all(p("/b")).unwrap();
    sim.sync_dir(p("/")).unwrap();
    sim
}

/// Creates `path` with `bytes`, syncs the file and its directory.
fn durable_file(sim: &SimStorage, path: &str, bytes: &[u8]) {
    let f = sim.open(p(path), OpenMode::CreateNew).unwrap();
    f.write_at(0, bytes).unwrap();
    f.sync().unwrap();
    sim.sync_dir(Path::new(path).parent().unwrap()).unwrap();
}

fn durable_contents(sim: &SimStorage, path: &str) -> Option<Vec<u8>> {
    match sim.durable_view().get(path) {
        Some(NodeView::File(b)) => Some(b.clone()),
        _ => None,
    }
}

#[test]
fn write_is_cached_until_file_sync_and_lost_on_power_loss_without_it() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/f", b"old");
    // When: new bytes are written but not synced.
    let f = sim.open(p("/a/f"), OpenMode::ReadWrite).unwrap();
    f.write_at(0, b"new!").unwrap();
    // Then: readers see them, the disk does not.
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"new!");
    assert_eq!(durable_contents(&sim, "/a/f").unwrap(), b"old");
    sim.crash(Crash::PowerLoss);
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"old");
}

#[test]
fn file_sync_makes_bytes_and_length_durable() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/f", b"0123456789");
    let f = sim.open(p("/a/f"), OpenMode::ReadWrite).unwrap();
    f.truncate(4).unwrap();
    f.append(b"XY").unwrap();
    f.sync().unwrap();
    sim.crash(Crash::PowerLoss);
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"0123XY");
}

#[test]
fn unsynced_unlink_is_resurrected_by_power_loss() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/offset", b"42");
    // When: the file is unlinked but /a is not synced, then power is cut.
    sim.remove_file(p("/a/offset")).unwrap();
    assert!(!sim.exists(p("/a/offset")).unwrap());
    sim.crash(Crash::PowerLoss);
    // Then: it is back, with its old contents.
    assert_eq!(sim.read_file(p("/a/offset")).unwrap(), b"42");
}

#[test]
fn synced_unlink_stays_gone_after_power_loss() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/offset", b"42");
    sim.remove_file(p("/a/offset")).unwrap();
    sim.sync_dir(p("/a")).unwrap();
    sim.crash(Crash::PowerLoss);
    assert!(!sim.exists(p("/a/offset")).unwrap());
}

#[test]
fn unsynced_create_disappears_on_power_loss() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    let f = sim.open(p("/a/new"), OpenMode::CreateNew).unwrap();
    f.append(b"x").unwrap();
    sim.crash(Crash::PowerLoss);
    assert!(!sim.exists(p("/a/new")).unwrap());
}

#[test]
fn file_sync_leaves_a_new_files_name_non_durable() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    // Given: a new file whose bytes are synced but whose directory is not.
    let f = sim.open(p("/a/new"), OpenMode::CreateNew).unwrap();
    f.append(b"payload").unwrap();
    f.sync().unwrap();
    // Then: the name is not durable, so power loss takes the file with it.
    assert_eq!(durable_contents(&sim, "/a/new"), None);
    sim.crash(Crash::PowerLoss);
    assert!(!sim.exists(p("/a/new")).unwrap());
}

#[test]
fn dir_sync_makes_names_durable_but_not_file_contents() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    let f = sim.open(p("/a/new"), OpenMode::CreateNew).unwrap();
    f.append(b"payload").unwrap();
    sim.sync_dir(p("/a")).unwrap();
    sim.crash(Crash::PowerLoss);
    // The name survived; the unsynced bytes did not.
    assert_eq!(sim.read_file(p("/a/new")).unwrap(), b"");
}

#[test]
fn syncing_dir_a_leaves_dir_b_unsynced() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/x", b"1");
    durable_file(&sim, "/b/y", b"2");
    sim.remove_file(p("/a/x")).unwrap();
    sim.remove_file(p("/b/y")).unwrap();
    // When: only /a is synced.
    sim.sync_dir(p("/a")).unwrap();
    sim.crash(Crash::PowerLoss);
    // Then: /a's unlink is durable, /b's is not.
    assert!(!sim.exists(p("/a/x")).unwrap());
    assert!(sim.exists(p("/b/y")).unwrap());
}

#[test]
fn a_new_directory_needs_its_parent_synced() {
    let sim = SimStorage::default();
    sim.create_dir_all(p("/data/consumers")).unwrap();
    sim.sync_dir(p("/data/consumers")).unwrap();
    sim.crash(Crash::PowerLoss);
    assert!(!sim.exists(p("/data")).unwrap());
}

#[test]
fn rename_replace_is_durable_only_after_the_directory_sync() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/meta", b"v1");
    let tmp = sim.open(p("/a/meta.tmp"), OpenMode::CreateNew).unwrap();
    tmp.write_at(0, b"v2").unwrap();
    tmp.sync().unwrap();
    sim.rename(p("/a/meta.tmp"), p("/a/meta")).unwrap();
    assert_eq!(sim.read_file(p("/a/meta")).unwrap(), b"v2");
    // Without the directory sync, power loss brings v1 back.
    let before_sync = sim.fork();
    before_sync.crash(Crash::PowerLoss);
    assert_eq!(before_sync.read_file(p("/a/meta")).unwrap(), b"v1");
    // With it, v2 is durable and the temp name is gone.
    sim.sync_dir(p("/a")).unwrap();
    sim.crash(Crash::PowerLoss);
    assert_eq!(sim.read_file(p("/a/meta")).unwrap(), b"v2");
    assert!(!sim.exists(p("/a/meta.tmp")).unwrap());
}

#[test]
fn process_crash_keeps_the_page_cache_and_invalidates_handles() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    let f = sim.open(p("/a/f"), OpenMode::CreateNew).unwrap();
    f.append(b"unsynced").unwrap();
    sim.remove_file(p("/a/f")).unwrap();
    let g = sim.open(p("/a/g"), OpenMode::CreateNew).unwrap();
    g.append(b"kept").unwrap();
    sim.crash(Crash::Process);
    assert_eq!(sim.read_file(p("/a/g")).unwrap(), b"kept");
    assert!(!sim.exists(p("/a/f")).unwrap());
    let err = g.append(b"more").unwrap_err();
    assert_eq!(err.kind, ErrorKind::BadHandle);
    assert_eq!(err.op, OpKind::Append);
}

#[test]
fn linux_failed_dir_sync_then_successful_retry_loses_the_change_on_power_loss() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/c1", b"7");
    sim.remove_file(p("/a/c1")).unwrap();
    // When: the first sync of /a fails, and the retry "succeeds".
    sim.fail_at(sim.op_count(), FaultMode::Before);
    assert_eq!(sim.sync_dir(p("/a")).unwrap_err().kind, ErrorKind::Io);
    sim.sync_dir(p("/a")).unwrap();
    sim.crash(Crash::PowerLoss);
    // Then: the unlink was never made durable: the file is back.
    assert_eq!(sim.read_file(p("/a/c1")).unwrap(), b"7");
}

#[test]
fn linux_failed_file_sync_then_successful_retry_loses_the_bytes() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/f", b"old");
    let f = sim.open(p("/a/f"), OpenMode::ReadWrite).unwrap();
    f.write_at(0, b"new").unwrap();
    sim.fail_at(sim.op_count(), FaultMode::Before);
    f.sync().unwrap_err();
    f.sync().unwrap();
    // The page cache still shows the new bytes, the disk never got them.
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"new");
    sim.crash(Crash::PowerLoss);
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"old");
}

#[test]
fn failed_sync_with_eviction_reads_back_the_old_bytes() {
    // Given: a durable file, an overwrite and an extension in the page cache,
    // and eviction after every failed writeback.
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/f", b"old");
    sim.set_eviction_after_failed_sync(1_000_000);
    let f = sim.open(p("/a/f"), OpenMode::ReadWrite).unwrap();
    f.write_at(1, b"NEWER").unwrap();
    // When: the file sync fails.
    sim.fail_at(sim.op_count(), FaultMode::Before);
    f.sync().unwrap_err();
    // Then: the pages were evicted: reads return the disk's bytes, zeros past
    // its end (the length is kept), and a retried sync persists nothing new.
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"old\0\0\0");
    f.sync().unwrap();
    assert_eq!(durable_contents(&sim, "/a/f").unwrap(), b"old");
}

#[test]
fn failed_sync_without_eviction_keeps_the_new_bytes_cached() {
    // Given: eviction modelled, but at rate 0 (the default).
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/f", b"old");
    sim.set_eviction_after_failed_sync(0);
    let f = sim.open(p("/a/f"), OpenMode::ReadWrite).unwrap();
    f.write_at(0, b"new").unwrap();
    // When: the file sync fails.
    sim.fail_at(sim.op_count(), FaultMode::TornWrite);
    f.sync().unwrap_err();
    // Then: the page cache still serves the unpersisted bytes.
    assert_eq!(sim.read_file(p("/a/f")).unwrap(), b"new");
    assert_eq!(durable_contents(&sim, "/a/f").unwrap(), b"old");
}

#[test]
fn eviction_is_a_seeded_choice_and_forgiving_semantics_never_evict() {
    // Given: eviction at one half; the same seed twice.
    let outcome = |semantics: SyncFailureSemantics, seed: u64| {
        let sim = SimStorage::new(SimConfig {
            seed,
            sync_failure: semantics,
            capacity: None,
        });
        sim.create_dir_all(p("/a")).unwrap();
        durable_file(&sim, "/a/f", b"0");
        sim.set_eviction_after_failed_sync(500_000);
        let f = sim.open(p("/a/f"), OpenMode::ReadWrite).unwrap();
        // When: ten rounds of a write whose sync fails.
        (0..10u8)
            .map(|i| {
                f.write_at(0, &[b'a' + i]).unwrap();
                sim.fail_at(sim.op_count(), FaultMode::Before);
                f.sync().unwrap_err();
                sim.read_file(p("/a/f")).unwrap()[0] == b'0'
            })
            .collect::<Vec<bool>>()
    };
    let a = outcome(SyncFailureSemantics::Linux, 5);
    // Then: the same seed evicts the same rounds, some rounds evict and some
    // do not, and a forgiving kernel (which keeps the dirty pages) never does.
    assert_eq!(a, outcome(SyncFailureSemantics::Linux, 5));
    assert!(a.contains(&true) && a.contains(&false), "{a:?}");
    assert!(!outcome(SyncFailureSemantics::Forgiving, 5).contains(&true));
}

#[test]
fn a_mixed_fault_plan_draws_every_listed_mode() {
    // Given: a plan failing every append, its mode drawn from all three.
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    sim.set_fault_plan(Some(FaultPlan {
        seed: 3,
        rates_ppm: vec![(OpKind::Append, 1_000_000)],
        fault: Fault::io(FaultMode::Before),
        modes: FaultMode::ALL.to_vec(),
    }));
    let f = sim.open(p("/a/f"), OpenMode::CreateNew).unwrap();
    // When: thirty appends.
    for _ in 0..30 {
        f.append(b"0123456789").unwrap_err();
    }
    // Then: the trace holds faults of every mode, and only the after and torn
    // ones left bytes behind.
    let modes: std::collections::BTreeSet<FaultMode> =
        sim.trace().iter().filter_map(|e| e.fault).collect();
    assert_eq!(modes.len(), 3, "{modes:?}");
    assert!(f.len().unwrap() > 0);
}

#[test]
fn forgiving_failed_sync_is_persisted_by_the_retry() {
    let sim = sim_with_dirs(SyncFailureSemantics::Forgiving);
    durable_file(&sim, "/a/c1", b"7");
    sim.remove_file(p("/a/c1")).unwrap();
    sim.fail_at(sim.op_count(), FaultMode::Before);
    sim.sync_dir(p("/a")).unwrap_err();
    sim.sync_dir(p("/a")).unwrap();
    sim.crash(Crash::PowerLoss);
    assert!(!sim.exists(p("/a/c1")).unwrap());
}

#[test]
fn torn_write_leaves_a_strict_prefix() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    let f = sim.open(p("/a/seg"), OpenMode::CreateNew).unwrap();
    f.append(b"head").unwrap();
    sim.fail_at(sim.op_count(), FaultMode::TornWrite);
    let payload = b"0123456789abcdef";
    let err = f.append(payload).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io);
    let got = sim.read_file(p("/a/seg")).unwrap();
    assert!(got.starts_with(b"head"));
    let tail = &got[4..];
    assert!(tail.len() < payload.len(), "torn write must not land whole");
    assert_eq!(tail, &payload[..tail.len()]);
}

#[test]
fn fault_before_has_no_effect_and_fault_after_has_full_effect() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    durable_file(&sim, "/a/x", b"1");
    durable_file(&sim, "/a/y", b"2");
    sim.fail_at(sim.op_count(), FaultMode::Before);
    assert!(sim.remove_file(p("/a/x")).is_err());
    assert!(sim.exists(p("/a/x")).unwrap());
    sim.fail_at(sim.op_count(), FaultMode::After);
    assert!(sim.remove_file(p("/a/y")).is_err());
    assert!(!sim.exists(p("/a/y")).unwrap());
}

#[test]
fn matcher_fails_only_the_first_directory_sync_of_consumers() {
    let sim = SimStorage::default();
    sim.create_dir_all(p("/p/consumers")).unwrap();
    sim.create_dir_all(p("/p/groups")).unwrap();
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/consumers"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    assert!(sim.sync_dir(p("/p/groups")).is_ok());
    assert!(sim.sync_dir(p("/p/consumers")).is_err());
    assert!(sim.sync_dir(p("/p/consumers")).is_ok());
    let faults: Vec<_> = sim
        .trace()
        .into_iter()
        .filter(|e| e.fault.is_some())
        .collect();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].path, "/p/consumers");
}

#[test]
fn enospc_is_injectable_and_a_full_disk_refuses_growth() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    let f = sim.open(p("/a/f"), OpenMode::CreateNew).unwrap();
    sim.fail_at_with(sim.op_count(), Fault::no_space(FaultMode::Before));
    assert_eq!(f.append(b"abc").unwrap_err().kind, ErrorKind::NoSpace);
    // A capacity limit: growth beyond it fails and leaves the file unchanged.
    sim.set_capacity(Some(8));
    f.append(b"12345678").unwrap();
    assert_eq!(f.append(b"9").unwrap_err().kind, ErrorKind::NoSpace);
    assert_eq!(f.len().unwrap(), 8);
    // Space returns: writes resume.
    sim.set_capacity(None);
    f.append(b"9").unwrap();
    assert_eq!(f.len().unwrap(), 9);
}

/// A workload used by the determinism tests: faults from a seeded plan.
fn planned_workload(seed: u64) -> SimStorage {
    let sim = SimStorage::with_seed(seed);
    sim.set_fault_plan(Some(FaultPlan {
        seed,
        rates_ppm: vec![(OpKind::Append, 300_000), (OpKind::SyncDir, 300_000)],
        fault: Fault::io(FaultMode::TornWrite),
        modes: Vec::new(),
    }));
    let _ = sim.create_dir_all(p("/d"));
    for i in 0..20 {
        if let Ok(f) = sim.open(Path::new(&format!("/d/f{}", i % 3)), OpenMode::CreateOrOpen) {
            let _ = f.append(format!("record-{i}").as_bytes());
            let _ = f.sync();
        }
        let _ = sim.sync_dir(p("/d"));
    }
    sim.crash(Crash::PowerLossPartial { seed });
    sim
}

#[test]
fn same_seed_and_calls_give_a_byte_identical_trace() {
    let a = planned_workload(11);
    let b = planned_workload(11);
    assert_eq!(a.trace(), b.trace());
    assert_eq!(a.trace_hash(), b.trace_hash());
    assert_eq!(a.cached_view(), b.cached_view());
    let c = planned_workload(12);
    assert_ne!(a.trace_hash(), c.trace_hash());
}

#[test]
fn trace_records_index_kind_path_fault_and_error() {
    let sim = SimStorage::default();
    sim.create_dir_all(p("/x")).unwrap();
    sim.fail_at(1, FaultMode::Before);
    let _ = sim.sync_dir(p("/x"));
    let _ = sim.remove_file(p("/x/missing"));
    let lines: Vec<String> = sim.trace().iter().map(|e| e.to_string()).collect();
    assert_eq!(
        lines,
        vec![
            "#0 create_dir /x",
            "#1 sync_dir /x [fault before] => input/output error",
            "#2 remove_file /x/missing => not found",
        ]
    );
}

#[test]
fn partial_writeback_keeps_a_seeded_subset_of_unsynced_changes() {
    // Given: many independent unsynced creates.
    let build = || {
        let sim = sim_with_dirs(SyncFailureSemantics::Linux);
        for i in 0..32 {
            let f = sim
                .open(Path::new(&format!("/a/f{i}")), OpenMode::CreateNew)
                .unwrap();
            f.append(b"x").unwrap();
        }
        sim
    };
    let survivors = |seed| {
        let sim = build();
        sim.crash(Crash::PowerLossPartial { seed });
        sim.list_dir(p("/a")).unwrap()
    };
    let one = survivors(1);
    // Then: some but not all survive, and the subset is a function of the seed.
    assert!(!one.is_empty() && one.len() < 32, "kept {}", one.len());
    assert_eq!(one, survivors(1));
    assert_ne!(one, survivors(2));
    // Every kept file holds either its durable (empty) or its cached bytes.
    let sim = build();
    sim.crash(Crash::PowerLossPartial { seed: 1 });
    for name in sim.list_dir(p("/a")).unwrap() {
        let bytes = sim.read_file(&Path::new("/a").join(&name)).unwrap();
        assert!(bytes.is_empty() || bytes == b"x");
    }
}

#[test]
fn remove_dir_all_is_undone_by_power_loss_without_syncs() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    sim.create_dir_all(p("/a/t")).unwrap();
    sim.sync_dir(p("/a")).unwrap();
    durable_file(&sim, "/a/t/seg", b"m");
    sim.remove_dir_all(p("/a/t")).unwrap();
    assert!(!sim.exists(p("/a/t")).unwrap());
    sim.crash(Crash::PowerLoss);
    assert_eq!(sim.read_file(p("/a/t/seg")).unwrap(), b"m");
}

#[test]
fn errors_name_the_operation_and_the_path() {
    let sim = SimStorage::default();
    let err = sim.open(p("/nope/f"), OpenMode::Read).unwrap_err();
    assert_eq!(err.op, OpKind::Open);
    assert_eq!(err.path, p("/nope/f"));
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert_eq!(err.to_string(), "open /nope/f: not found");
    let err = sim.open(p("/../etc"), OpenMode::Read).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidPath);
}

#[test]
fn halt_after_stops_every_later_call_until_the_next_crash() {
    let sim = sim_with_dirs(SyncFailureSemantics::Linux);
    let f = sim.open(p("/a/f"), OpenMode::CreateNew).unwrap();
    // When: the machine halts right after the next call.
    sim.halt_after(Some(sim.op_count()));
    f.append(b"lands").unwrap();
    let traced = sim.op_count();
    // Then: later calls fail, change nothing and are not traced.
    assert_eq!(f.append(b"never").unwrap_err().kind, ErrorKind::Io);
    assert!(sim.remove_file(p("/a/f")).is_err());
    assert_eq!(sim.op_count(), traced);
    assert_eq!(
        sim.cached_view().get("/a/f"),
        Some(&NodeView::File(b"lands".to_vec()))
    );
    // A crash lifts the halt.
    sim.crash(Crash::Process);
    assert!(sim.exists(p("/a/f")).unwrap());
}
