//! The block reserver: one background thread per process that runs
//! `DiskStorage`'s block reservations (`fallocate` with `KEEP_SIZE`,
//! ADR 0031), so the append that asks for one never waits for the file
//! system's block allocator. With a cold cache that allocator reads block
//! bitmaps from the disk, and the engine lock used to be held across those
//! reads: about 7% of a 2 GB produce's send window (docs/performance.md).
//!
//! Invariants, and why they hold:
//! - **A reservation reaches only the file it was asked for.** A job holds
//!   a `Weak` of the handle's own descriptor, never a path. If the handle
//!   was closed before the job runs (a file pool evicted it, its owner
//!   dropped it), the job does nothing. A descriptor stays bound to its
//!   inode whatever happens to its name afterwards, so a reservation planned
//!   for one incarnation of a segment never lands on a file created later at
//!   the same path (the lesson of ADR 0022: work done without the engine lock
//!   is bound to what it was planned for).
//! - **A reservation queued before a release on the same descriptor never
//!   runs after it.** Each handle keeps a count of its releases and a gate
//!   (`Releases`). A job carries the count from when it was queued, and
//!   runs holding the gate only if the count is still that. A release holds
//!   the gate while it bumps the count and gives the blocks back. So the
//!   blocks given back when a segment is sealed stay given back, except in
//!   one window ADR 0031 names: a pooled handle evicted while its
//!   reservation runs, reopened, and released through the new descriptor
//!   (which has a gate of its own) before that reservation's `fallocate`
//!   starts. It costs space only, up to one reservation, until the segment
//!   is removed.
//! - **The caller never waits for the allocator on the queue.** The queue is
//!   bounded; a reservation that does not fit is refused at once (the caller
//!   goes on without it, as after any failed reservation). A release waits at
//!   most for the one reservation of its own handle that may be running. On
//!   ext4 a running `fallocate` holds the file's inode lock, which every
//!   buffered write to that file takes too: a write to the *same* file while
//!   it runs still waits for it (under the engine lock). Writes to every
//!   other file no longer do.
//! - **Nothing read or acknowledged depends on it.** `KEEP_SIZE` changes
//!   neither the file's length nor a byte below it, so a reservation that
//!   runs late, or never, changes only how fast later writes are.
//! - While a job runs it holds the descriptor open: a pool that evicts the
//!   handle meanwhile closes it when the job ends (one descriptor over the
//!   pool's bound for the length of one `fallocate`, at most).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::error::{ErrorKind, OpKind, Result, StorageError};

/// Reservations waiting for the thread, at most. One is queued per
/// `RESERVE_AHEAD` (8 MiB) a segment grows, so a full queue means the
/// allocator is far behind the appends; refusing more loses only speed.
const QUEUE_BOUND: usize = 256;

/// What a handle shares with the reservations queued for it.
#[derive(Debug)]
pub(crate) struct Releases {
    count: AtomicU64,
    gate: Mutex<()>,
    /// Off only in the test that shows the ordering has teeth: a queued
    /// reservation then runs whatever was released since.
    #[cfg(test)]
    ordered: bool,
}

impl Default for Releases {
    fn default() -> Self {
        Releases {
            count: AtomicU64::new(0),
            gate: Mutex::new(()),
            #[cfg(test)]
            ordered: true,
        }
    }
}

impl Releases {
    #[cfg(not(test))]
    fn ordered(&self) -> bool {
        true
    }

    #[cfg(test)]
    fn ordered(&self) -> bool {
        self.ordered
    }

    /// Runs `release` so that no reservation queued before it runs after it
    /// (waiting for the one that may be running now).
    pub(crate) fn release<T>(&self, release: impl FnOnce() -> T) -> T {
        let _gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        self.count.fetch_add(1, Ordering::AcqRel);
        release()
    }
}

enum Job {
    Reserve {
        file: Weak<File>,
        releases: Arc<Releases>,
        /// `releases.count` when it was queued.
        released: u64,
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    /// Answered once every job queued before it has run.
    Barrier(SyncSender<()>),
    /// Keeps the thread until its sender is dropped (tests: the jobs queued
    /// meanwhile run afterwards, in order).
    #[cfg(test)]
    Hold(Receiver<()>),
}

/// The queue to the thread, started on first use; `None` if the thread
/// could not be started (then every reservation is refused).
fn queue() -> Option<&'static SyncSender<Job>> {
    static QUEUE: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = sync_channel(QUEUE_BOUND);
            match std::thread::Builder::new()
                .name("sluice-reserve".into())
                .spawn(move || work(rx))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "the block reserver thread did not start; segments grow without reservations");
                    None
                }
            }
        })
        .as_ref()
}

/// Queues a reservation of `len` bytes from `offset` on `file`.
pub(crate) fn reserve(
    file: &Arc<File>,
    releases: &Arc<Releases>,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<()> {
    let refused =
        |why: &str| StorageError::new(OpKind::Reserve, path, ErrorKind::Io).with_detail(why);
    let Some(queue) = queue() else {
        return Err(refused("the block reserver thread is not running"));
    };
    let job = Job::Reserve {
        file: Arc::downgrade(file),
        releases: Arc::clone(releases),
        released: releases.count.load(Ordering::Acquire),
        path: path.to_path_buf(),
        offset,
        len,
    };
    queue.try_send(job).map_err(|e| match e {
        TrySendError::Full(_) => refused("the reservation queue is full"),
        TrySendError::Disconnected(_) => refused("the block reserver thread is not running"),
    })
}

/// Keeps the reserver thread busy until the returned sender is dropped:
/// every reservation queued meanwhile runs after that, in order.
#[cfg(test)]
pub(crate) fn hold() -> SyncSender<()> {
    let (tx, rx) = sync_channel(0);
    if let Some(queue) = queue() {
        let _ = queue.send(Job::Hold(rx));
    }
    tx
}

/// Waits until every reservation queued so far in this process has run or
/// been skipped (tests and tools that read a file's allocation).
pub(crate) fn settle() {
    let Some(queue) = queue() else {
        return;
    };
    let (tx, rx) = sync_channel(1);
    if queue.send(Job::Barrier(tx)).is_ok() {
        let _ = rx.recv();
    }
}

fn work(jobs: Receiver<Job>) {
    for job in jobs {
        match job {
            Job::Reserve {
                file,
                releases,
                released,
                path,
                offset,
                len,
            } => {
                let Some(file) = file.upgrade() else {
                    continue;
                };
                let _gate = releases.gate.lock().unwrap_or_else(PoisonError::into_inner);
                if releases.count.load(Ordering::Acquire) != released && releases.ordered() {
                    continue;
                }
                if let Err(e) = fallocate(&file, offset, len) {
                    tracing::debug!(path = %path.display(), offset, len, error = %e, "blocks not reserved ahead of appends");
                }
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
            #[cfg(test)]
            Job::Hold(until) => {
                let _ = until.recv();
            }
        }
    }
}

/// `fallocate(KEEP_SIZE)`, retried when a signal interrupts it.
fn fallocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    let flags = rustix::fs::FallocateFlags::KEEP_SIZE;
    loop {
        match rustix::fs::fallocate(file, flags, offset, len) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::{FileExt, MetadataExt};

    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        /// A file of 4 KiB, and its handle's release state.
        fn file(&self, name: &str, ordered: bool) -> (Arc<File>, Arc<Releases>, PathBuf) {
            let path = self.dir.path().join(name);
            let file = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .unwrap();
            file.write_all_at(&[1u8; 4096], 0).unwrap();
            let releases = Releases {
                ordered,
                ..Releases::default()
            };
            (Arc::new(file), Arc::new(releases), path)
        }

        fn allocated(&self, path: &Path) -> u64 {
            std::fs::metadata(path).unwrap().blocks() * 512
        }

        /// Runs `while_held` while the reserver thread is held: every job
        /// queued meanwhile runs after `while_held` returns, in order.
        fn with_reserver_held(&self, while_held: impl FnOnce()) {
            let held = hold();
            while_held();
            drop(held);
            settle();
        }
    }

    const MIB: u64 = 1 << 20;

    /// `None` where the file system has no `fallocate` (the test is skipped).
    fn reserves_blocks(fx: &Fixture) -> Option<()> {
        let (file, releases, path) = fx.file("probe", true);
        reserve(&file, &releases, &path, 4096, MIB).unwrap();
        settle();
        if fx.allocated(&path) < MIB {
            eprintln!("skipped: the file system reserves no blocks");
            return None;
        }
        Some(())
    }

    #[test]
    fn given_a_reservation_queued_before_a_release_when_the_release_runs_first_then_the_reservation_is_skipped()
     {
        let fx = Fixture::new();
        if reserves_blocks(&fx).is_none() {
            return;
        }
        for ordered in [true, false] {
            // Given a reservation queued and not yet run.
            let name = format!("segment-{ordered}");
            let (file, releases, path) = fx.file(&name, ordered);
            fx.with_reserver_held(|| {
                reserve(&file, &releases, &path, 4096, MIB).unwrap();
                // When the segment is sealed: its reserved blocks are given back.
                releases.release(|| file.set_len(4096).unwrap());
            });
            // Then the reservation never ran: nothing is reserved past the end.
            let allocated = fx.allocated(&path);
            if ordered {
                assert!(
                    allocated < 64 << 10,
                    "{allocated} bytes allocated after the release"
                );
            } else {
                // Teeth: without the ordering the late reservation holds the blocks.
                assert!(allocated >= MIB, "unordered, {allocated} bytes allocated");
            }
        }
    }

    #[test]
    fn given_a_reservation_queued_when_its_handle_is_closed_before_it_runs_then_it_does_nothing() {
        let fx = Fixture::new();
        if reserves_blocks(&fx).is_none() {
            return;
        }
        let (file, releases, path) = fx.file("evicted", true);
        fx.with_reserver_held(|| {
            // Given a reservation queued for a handle.
            reserve(&file, &releases, &path, 4096, MIB).unwrap();
            // When the handle is closed (a pool evicted it) before it runs.
            drop(file);
        });
        // Then nothing was reserved: the job held the descriptor weakly.
        let allocated = fx.allocated(&path);
        assert!(allocated < 64 << 10, "{allocated} bytes allocated");
    }
}
