#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Differential test: the power-cut file system against `SimStorage`.
//!
//! Given one seeded random sequence of operations (write, append, truncate,
//! create, unlink, rename, mkdir, remove_dir_all, file fsync, directory fsync,
//! an armed failing fsync, and cuts, full or with partial writeback), run it
//! through the real `DiskStorage` on a fresh mount and through a fresh
//! `SimStorage`. Then:
//! - every operation gives the same result (value or `ErrorKind`) on both;
//! - after every operation the mount shows what the simulator's cached view
//!   holds (every path, every byte);
//! - after every cut the durable state agrees four ways: the simulator's
//!   durable view, the file system's durable view, the backing directory and
//!   the mount itself.
//!
//! A partial cut must agree coin for coin: the file system draws its writeback
//! coins from the simulator's SplitMix64 in the simulator's order.
//!
//! Restrictions where the two legitimately differ: a failing fsync is armed on
//! a path that exists (the simulator's matcher counts calls that fail for
//! other reasons, the kernel never sends those), and armed failures are
//! cleared at each cut on both sides.
//!
//! Knobs: `SLUICE_POWERCUT_CASES` (default 40 sequences of up to 60
//! operations), `SLUICE_POWERCUT_SEED` (first seed; a failure prints it).
//! Where `/dev/fuse` is missing the test fails and says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sluice_powercut::Entry;
use sluice_storage::sim::{NodeView, SimRng};
use sluice_storage::{
    Crash, DiskStorage, DurableStorage, ErrorKind, Fault, FaultMode, OpKind, OpMatcher, OpenMode,
    SimStorage,
};

const DIRS: &[&str] = &["a", "b", "a/c"];
const FILES: &[&str] = &["a/x", "a/y", "b/x", "a/c/z", "w"];

#[derive(Debug, Clone)]
enum Op {
    Mkdir(&'static str),
    Create(&'static str),
    Write(&'static str, u64, u8, u8),
    Append(&'static str, u8, u8),
    Truncate(&'static str, u64),
    Unlink(&'static str),
    Rename(&'static str, &'static str),
    RemoveDirAll(&'static str),
    SyncFile(&'static str),
    SyncDir(&'static str),
    FailSync(&'static str, bool, u32),
    Cut(Option<u64>),
}

fn pick<T: Copy>(rng: &mut SimRng, from: &[T]) -> T {
    from[rng.below(from.len() as u64) as usize]
}

fn generate(seed: u64) -> Vec<Op> {
    let mut rng = SimRng::new(seed);
    let n = 10 + rng.below(51);
    let dirs_and_root: Vec<&'static str> = DIRS.iter().copied().chain(["."]).collect();
    (0..n)
        .map(|_| match rng.below(100) {
            0..10 => Op::Mkdir(pick(&mut rng, DIRS)),
            10..22 => Op::Create(pick(&mut rng, FILES)),
            22..34 => Op::Write(
                pick(&mut rng, FILES),
                rng.below(12),
                1 + rng.below(8) as u8,
                b'a' + rng.below(26) as u8,
            ),
            34..42 => Op::Append(
                pick(&mut rng, FILES),
                1 + rng.below(8) as u8,
                b'a' + rng.below(26) as u8,
            ),
            42..46 => Op::Truncate(pick(&mut rng, FILES), rng.below(10)),
            46..51 => Op::Unlink(pick(&mut rng, FILES)),
            51..57 => Op::Rename(pick(&mut rng, FILES), pick(&mut rng, FILES)),
            57..59 => Op::RemoveDirAll(pick(&mut rng, DIRS)),
            59..72 => Op::SyncFile(pick(&mut rng, FILES)),
            72..86 => Op::SyncDir(pick(&mut rng, &dirs_and_root)),
            86..90 => {
                if rng.coin() {
                    Op::FailSync(pick(&mut rng, FILES), false, 1 + rng.below(2) as u32)
                } else {
                    Op::FailSync(pick(&mut rng, DIRS), true, 1 + rng.below(2) as u32)
                }
            }
            90..95 => Op::Cut(None),
            _ => Op::Cut(Some(rng.next_u64())),
        })
        .collect()
}

/// One storage, the directory standing for the root, and how to spell a path.
struct Side<'a> {
    storage: &'a dyn DurableStorage,
    root: PathBuf,
}

impl Side<'_> {
    fn path(&self, rel: &str) -> PathBuf {
        if rel == "." {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Runs one storage operation; the result rendered for comparison.
    fn run(&self, op: &Op) -> Result<String, ErrorKind> {
        let s = self.storage;
        let r = match op {
            Op::Mkdir(d) => s.create_dir_all(&self.path(d)).map(|()| String::new()),
            Op::Create(f) => s
                .open(&self.path(f), OpenMode::CreateOrOpen)
                .map(|_| String::new()),
            Op::Write(f, at, n, b) => s
                .open(&self.path(f), OpenMode::ReadWrite)
                .and_then(|h| h.write_at(*at, &vec![*b; *n as usize]))
                .map(|()| String::new()),
            Op::Append(f, n, b) => s
                .open(&self.path(f), OpenMode::ReadWrite)
                .and_then(|h| h.append(&vec![*b; *n as usize]))
                .map(|at| at.to_string()),
            Op::Truncate(f, len) => s
                .open(&self.path(f), OpenMode::ReadWrite)
                .and_then(|h| h.truncate(*len))
                .map(|()| String::new()),
            Op::Unlink(f) => s.remove_file(&self.path(f)).map(|()| String::new()),
            Op::Rename(a, b) => s
                .rename(&self.path(a), &self.path(b))
                .map(|()| String::new()),
            Op::RemoveDirAll(d) => s.remove_dir_all(&self.path(d)).map(|()| String::new()),
            Op::SyncFile(f) => s
                .open(&self.path(f), OpenMode::Read)
                .and_then(|h| h.sync())
                .map(|()| String::new()),
            Op::SyncDir(d) => s.sync_dir(&self.path(d)).map(|()| String::new()),
            Op::FailSync(..) | Op::Cut(_) => Ok(String::new()),
        };
        r.map_err(|e| e.kind)
    }
}

fn sim_view(v: BTreeMap<String, NodeView>) -> BTreeMap<String, Entry> {
    v.into_iter()
        .map(|(k, n)| {
            let e = match n {
                NodeView::File(b) => Entry::File(b),
                NodeView::Dir => Entry::Dir,
            };
            (k, e)
        })
        .collect()
}

fn show(v: &BTreeMap<String, Entry>) -> String {
    v.iter()
        .map(|(k, e)| match e {
            Entry::Dir => format!("{k}/"),
            Entry::File(b) => format!("{k}={:?}", String::from_utf8_lossy(b)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn require_fuse() {
    if let Some(reason) = sluice_powercut::fuse_unavailable_reason() {
        panic!("the power-cut differential test needs FUSE and it is not available here: {reason}");
    }
}

/// Runs one case; `Err` describes the first disagreement.
fn run_case(seed: u64) -> Result<usize, String> {
    let ops = generate(seed);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (backing, mnt) = (tmp.path().join("backing"), tmp.path().join("mnt"));
    std::fs::create_dir(&backing).map_err(|e| e.to_string())?;
    std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
    let mount = sluice_powercut::mount(&backing, &mnt).map_err(|e| format!("mount: {e}"))?;
    let disk = DiskStorage::new();
    let sim = SimStorage::with_seed(seed);
    let fuse_side = Side {
        storage: &disk,
        root: mnt.clone(),
    };
    let sim_side = Side {
        storage: &sim,
        root: PathBuf::from("/"),
    };
    let mut cuts = 0;
    for (i, op) in ops.iter().enumerate() {
        let ctx = |what: String| {
            format!(
                "seed {seed}, operation #{i} {op:?}: {what}\n  operations: {:?}",
                &ops[..=i]
            )
        };
        match op {
            Op::FailSync(p, is_dir, nth) => {
                if !sim
                    .exists(Path::new("/").join(p).as_path())
                    .unwrap_or(false)
                {
                    continue;
                }
                let kind = if *is_dir {
                    OpKind::SyncDir
                } else {
                    OpKind::SyncFile
                };
                sim.fail_when(
                    OpMatcher::kind(kind).path_ends_with(format!("/{p}")),
                    Fault::io(FaultMode::Before),
                    nth - 1,
                    1,
                );
                mount.handle().fail_sync(p, *nth);
            }
            Op::Cut(seed) => {
                cuts += 1;
                sim.crash(match seed {
                    None => Crash::PowerLoss,
                    Some(s) => Crash::PowerLossPartial { seed: *s },
                });
                sim.clear_faults();
                mount.handle().cut(*seed);
                let want = sim_view(sim.durable_view());
                let fs_durable = mount.handle().durable_view();
                let on_backing = sluice_powercut::read_tree(&backing).map_err(|e| e.to_string())?;
                let on_mount = sluice_powercut::read_tree(&mnt).map_err(|e| e.to_string())?;
                for (name, got) in [
                    ("file system's durable view", &fs_durable),
                    ("backing directory", &on_backing),
                    ("mount after the cut", &on_mount),
                ] {
                    if *got != want {
                        return Err(ctx(format!(
                            "{name} differs from the simulator's durable view\n  sim:  {}\n  got:  {}",
                            show(&want),
                            show(got)
                        )));
                    }
                }
            }
            Op::SyncFile(p) | Op::SyncDir(p)
                if !sim
                    .exists(Path::new("/").join(p).as_path())
                    .unwrap_or(false) =>
            {
                // See the module docs: armed failures count only real syncs.
                continue;
            }
            _ => {
                let (a, b) = (sim_side.run(op), fuse_side.run(op));
                if a != b {
                    return Err(ctx(format!("simulator gave {a:?}, the mount {b:?}")));
                }
            }
        }
        let want = sim_view(sim.cached_view());
        let got = sluice_powercut::read_tree(&mnt).map_err(|e| e.to_string())?;
        if got != want {
            return Err(ctx(format!(
                "the mount differs from the simulator's cached view\n  sim:  {}\n  got:  {}",
                show(&want),
                show(&got)
            )));
        }
    }
    mount
        .handle()
        .check_backing()
        .map_err(|e| format!("seed {seed}: {e}"))?;
    mount.unmount().map_err(|e| format!("unmount: {e}"))?;
    Ok(cuts)
}

#[test]
fn the_mount_keeps_exactly_what_the_simulator_keeps_across_cuts() {
    require_fuse();
    let cases: u64 = std::env::var("SLUICE_POWERCUT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let first: u64 = std::env::var("SLUICE_POWERCUT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut cuts = 0;
    for seed in first..first + cases {
        match run_case(seed) {
            Ok(n) => cuts += n,
            Err(e) => panic!(
                "{e}\nreproduce: SLUICE_POWERCUT_SEED={seed} SLUICE_POWERCUT_CASES=1 cargo test -p sluice-powercut --test differential"
            ),
        }
    }
    eprintln!("powercut differential: {cases} cases, {cuts} cuts compared, 0 disagreements");
    assert!(cuts > 0, "the generator produced no cut to compare");
}

#[test]
fn the_control_file_cuts_and_reports() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let (backing, mnt) = (tmp.path().join("backing"), tmp.path().join("mnt"));
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let mount = sluice_powercut::mount(&backing, &mnt).unwrap();
    // Given a synced file and an unsynced one,
    std::fs::write(mnt.join("kept"), b"k").unwrap();
    std::fs::File::open(mnt.join("kept"))
        .unwrap()
        .sync_all()
        .unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    std::fs::write(mnt.join("lost"), b"l").unwrap();
    // when `cut` is written to the control file,
    let ctl = mnt.join(sluice_powercut::CONTROL_NAME);
    std::fs::write(&ctl, b"cut\n").unwrap();
    // then only the durable file is left, and the status says one cut ran.
    let names: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["kept".to_string()]);
    let status = std::fs::read_to_string(&ctl).unwrap();
    assert!(status.contains("cuts 1\n"), "{status}");
    // A bad command is refused and changes nothing.
    assert!(std::fs::write(&ctl, b"cut soon\n").is_err());
    assert_eq!(mount.handle().stats().cuts, 1);
    // fail-sync through the control file: the next fsync of the root fails.
    std::fs::write(mnt.join("again"), b"a").unwrap();
    std::fs::write(&ctl, b"fail-sync . 1\n").unwrap();
    let err = std::fs::File::open(&mnt).unwrap().sync_all().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eio()));
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    std::fs::write(&ctl, b"cut\n").unwrap();
    assert!(
        !mnt.join("again").exists(),
        "the failed sync's name survived"
    );
    // enospc refuses growth.
    std::fs::write(&ctl, b"enospc on\n").unwrap();
    let full = std::fs::write(mnt.join("full"), b"x").unwrap_err();
    assert_eq!(full.raw_os_error(), Some(28));
    std::fs::write(&ctl, b"enospc off\ncheck\n").unwrap();
    mount.unmount().unwrap();
}

fn libc_eio() -> i32 {
    5
}
