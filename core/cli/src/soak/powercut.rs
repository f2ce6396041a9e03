//! `sluice soak --powercut` (issue 14): the soak's server keeps its data
//! directory on the power-cut FUSE file system (`sluice-powercut`), and every
//! SIGKILL is followed by a power cut.
//!
//! Invariants, and why they hold:
//! - After every kill the file system is cut while no server runs (the kill
//!   is reaped first), so the next server starts from exactly what was
//!   durable (a full cut) or from that plus a seeded subset of the unsynced
//!   changes (a partial cut), as `SimStorage`'s crash kinds define them.
//! - The cut kinds and the failing fsyncs armed before purges are functions
//!   of the soak's seed, the cycle and a counter, never of timing; which
//!   request the failure then hits is timing, as the kill's moment is.
//! - An armed failure that has not fired by the kill is disarmed by the cut,
//!   so once faults stop (the verification after a restart) none is left;
//!   the soak switches ENOSPC off before every cut, so no restart starts on
//!   a full disk.
//! - After every cut the file system's own invariant is checked (the backing
//!   directory is exactly the durable view); a broken judge is an error, not
//!   a verdict.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sluice_storage::sim::SimRng;

/// Where a failing fsync is armed before a purge.
const FAIL_SYNC_DIRS: [&str; 3] = ["consumers", "groups", "segments"];

#[derive(Debug, Default, Clone, Copy)]
pub struct CutCounts {
    pub full: u64,
    pub partial: u64,
    /// Failing fsyncs armed before purges, and before re-creations.
    pub armed: u64,
    pub armed_recreations: u64,
}

pub struct PowerCut {
    mount: sluice_powercut::Mount,
    seed: u64,
    partial_percent: u64,
    fail_sync_percent: u64,
    counts: Mutex<CutCounts>,
}

impl PowerCut {
    /// Mounts the file system at `<work>/mnt` over `<work>/backing`.
    pub fn start(
        work: &Path,
        seed: u64,
        partial_percent: u64,
        fail_sync_percent: u64,
    ) -> Result<PowerCut, String> {
        let (backing, mnt) = (work.join("backing"), work.join("mnt"));
        for dir in [&backing, &mnt] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mount = sluice_powercut::mount(&backing, &mnt).map_err(|e| {
            format!(
                "cannot mount the power-cut file system on {}: {e}",
                mnt.display()
            )
        })?;
        Ok(PowerCut {
            mount,
            seed,
            partial_percent,
            fail_sync_percent,
            counts: Mutex::new(CutCounts::default()),
        })
    }

    /// The server's data directory, inside the mount (so its creation and
    /// its own name's durability are judged too).
    pub fn data_dir(&self) -> PathBuf {
        self.mount.path().join("data")
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, CutCounts> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Cuts the power after the `which`-th kill of `cycle` (the server is
    /// dead and reaped); `full` rules out partial writeback. Returns the
    /// cut's description, or the file system's broken invariant.
    pub fn cut_after_kill(&self, cycle: u64, which: u64, full: bool) -> Result<String, String> {
        let mut rng = SimRng::from_parts(self.seed, &[cycle, which, u64::MAX - 2]);
        let partial = rng.below(100) < self.partial_percent && !full;
        let seed = partial.then(|| rng.next_u64());
        self.mount.handle().cut(seed);
        {
            let mut c = self.counts();
            if partial {
                c.partial += 1;
            } else {
                c.full += 1;
            }
        }
        self.mount.handle().check_backing()?;
        Ok(match seed {
            Some(s) => format!("partial cut (writeback seed {s})"),
            None => "full cut".into(),
        })
    }

    /// Before the `n`-th purge of `cycle`: in a seeded fraction of purges,
    /// arms a failing fsync on one partition's `consumers/`, `groups/` or
    /// `segments/` directory (the directories Iggy's purge deletes from).
    pub fn before_purge(&self, cycle: u64, n: u64) {
        let mut rng = SimRng::from_parts(self.seed, &[cycle, n, u64::MAX - 3]);
        if rng.below(100) >= self.fail_sync_percent {
            return;
        }
        let which = FAIL_SYNC_DIRS[rng.below(3) as usize];
        let mut dirs = self.partition_dirs(which);
        if dirs.is_empty() {
            return;
        }
        let dir = dirs.swap_remove(rng.below(dirs.len() as u64) as usize);
        let nth = 1 + u32::try_from(rng.below(2)).unwrap_or(0);
        tracing::debug!(dir = %dir, nth, "soak: arming a failing fsync before a purge");
        self.mount.handle().fail_sync(&dir, nth);
        self.counts().armed += 1;
    }

    /// Before the `n`-th re-creation of `cycle` (issue 27), deleting and
    /// creating again the partitions `re_created` of `topic`: in the same
    /// seeded fraction as before purges, arms a failing fsync on the
    /// `consumers/`, `groups/` or `segments/` directory of one of them. The
    /// rule names a path, so it fails whichever incarnation's directory is
    /// there when the sync runs: the new one's own syncs, or (if it was not
    /// fenced off) a sync the old incarnation's purge cleanup still had to run.
    pub fn before_recreation(
        &self,
        cycle: u64,
        n: u64,
        topic: u32,
        re_created: std::ops::Range<u32>,
    ) {
        let mut rng = SimRng::from_parts(self.seed, &[cycle, n, u64::MAX - 6]);
        if rng.below(100) >= self.fail_sync_percent || re_created.is_empty() {
            return;
        }
        let which = FAIL_SYNC_DIRS[rng.below(3) as usize];
        let width = u64::from(re_created.end - re_created.start);
        let partition = re_created.start + u32::try_from(rng.below(width)).unwrap_or(0);
        let suffix = format!("/topics/{topic}/partitions/{partition}/{which}");
        let Some(dir) = self
            .partition_dirs(which)
            .into_iter()
            .find(|d| d.ends_with(&suffix))
        else {
            return;
        };
        let nth = 1 + u32::try_from(rng.below(2)).unwrap_or(0);
        tracing::debug!(dir = %dir, nth, "soak: arming a failing fsync before a re-creation");
        self.mount.handle().fail_sync(&dir, nth);
        self.counts().armed_recreations += 1;
    }

    /// `…/partitions/<id>/<which>` directories, relative to the mount.
    fn partition_dirs(&self, which: &str) -> Vec<String> {
        let suffix = format!("/{which}");
        self.mount
            .handle()
            .cached_dirs()
            .into_iter()
            .filter(|d| d.ends_with(&suffix) && d.contains("/partitions/"))
            .collect()
    }

    /// Every growth (create, mkdir, growing write, extending truncate) is
    /// refused with ENOSPC while `on`.
    pub fn set_enospc(&self, on: bool) {
        self.mount.handle().set_enospc(on);
    }

    /// Failing fsyncs that fired so far.
    pub fn injected(&self) -> u64 {
        self.mount.handle().stats().injected_sync_failures
    }

    pub fn summary(&self) -> (CutCounts, sluice_powercut::Stats) {
        (*self.counts(), self.mount.handle().stats())
    }
}
