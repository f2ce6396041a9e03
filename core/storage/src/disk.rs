//! `DiskStorage`: the real backend, a thin layer over `std::fs`.
//!
//! Invariants:
//! - File sync is `fdatasync` when only bytes changed and `fsync` after a
//!   length change, so a grown or cut file has its new length durable too.
//! - Directory sync opens the directory read-only and calls `fsync` on it:
//!   that is the only way POSIX offers to make a create, unlink or rename durable.
//! - Errors carry the operation and the path; the OS message goes in `detail`.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{ErrorKind, OpKind, Result, StorageError};
use crate::reserver::{self, Releases};
use crate::{DurableFile, DurableStorage, OpenMode};

/// The real file system. Paths are used as given (absolute or relative to the
/// process's working directory).
#[derive(Debug, Clone, Copy)]
pub struct DiskStorage {
    /// Whether `reserve` reaches the file system (`[files]
    /// reserve_blocks`, ADR 0031); off, it does nothing, as on `SimStorage`.
    reserves: bool,
}

impl Default for DiskStorage {
    fn default() -> Self {
        DiskStorage::new()
    }
}

impl DiskStorage {
    pub fn new() -> Self {
        DiskStorage { reserves: true }
    }

    /// The same backend with block reservations off: the files it opens
    /// take `reserve` as a no-op, so every block is allocated by the write
    /// that needs it. `release_reserved` still gives back what an earlier
    /// run reserved past a file's end.
    pub fn without_reservations() -> Self {
        DiskStorage { reserves: false }
    }

    /// The file's length and the bytes the file system has allocated to it
    /// (what `du` counts: blocks reserved past its end included, ADR 0031).
    pub fn allocation(&self, path: &Path) -> Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let meta =
            std::fs::metadata(path).map_err(|e| StorageError::from_io(OpKind::Len, path, &e))?;
        Ok((meta.len(), meta.blocks().saturating_mul(512)))
    }

    /// Waits until every block reservation queued so far in this process
    /// (by any `DiskStorage`) has run or been skipped: they run on one thread
    /// of their own (`reserver`), so a file's `allocation` may lag its
    /// `reserve` calls until then.
    pub fn settle_reservations(&self) {
        reserver::settle();
    }

    /// Whether this backend reserves blocks on the file system under `dir`
    /// (ADR 0031): a probe file there gets 1 MiB reserved, is measured once
    /// the reservation ran, and is removed. `false` where `fallocate` does
    /// nothing (some FUSE file systems) or reservations are off; tests use
    /// it to skip what they cannot check.
    pub fn reserves_blocks(&self, dir: &Path) -> Result<bool> {
        const PROBE: u64 = 1 << 20;
        let path = dir.join(".sluice-reserve-probe");
        let file = self.open(&path, OpenMode::CreateNew)?;
        // Held open until the reservation ran: one for a closed handle is skipped.
        let reserved = file.reserve(0, PROBE).and_then(|()| {
            self.settle_reservations();
            self.allocation(&path)
        });
        drop(file);
        self.remove_file(&path)?;
        Ok(reserved?.1 >= PROBE)
    }
}

#[derive(Debug)]
struct DiskFile {
    /// Shared only with the reservations queued for this handle, which hold
    /// it weakly (`reserver`): they never keep a closed handle's file open.
    file: Arc<File>,
    path: PathBuf,
    writable: bool,
    /// Serialises appends on this handle so two appends never pick the same end.
    append_lock: Mutex<()>,
    /// Set when the length changed since the last sync, so `sync` knows it
    /// needs `fsync` (metadata) rather than `fdatasync`.
    len_changed: AtomicBool,
    /// Orders this handle's reservations with its releases (`reserver`).
    releases: Arc<Releases>,
    /// `DiskStorage::reserves` when it was opened.
    reserves: bool,
}

impl DiskFile {
    fn check_writable(&self, op: OpKind) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(StorageError::new(op, &self.path, ErrorKind::BadHandle)
                .with_detail("handle is read-only"))
        }
    }
}

impl DurableFile for DiskFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::from_io(OpKind::Read, &self.path, &e)),
            }
        }
        Ok(done)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_writable(OpKind::Write)?;
        self.file
            .write_all_at(data, offset)
            .map_err(|e| StorageError::from_io(OpKind::Write, &self.path, &e))?;
        self.len_changed.store(true, Ordering::Release);
        Ok(())
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[std::io::IoSlice<'_>]) -> Result<()> {
        self.check_writable(OpKind::Write)?;
        let err = |e: std::io::Error| StorageError::from_io(OpKind::Write, &self.path, &e);
        // The kernel takes at most IOV_MAX (1024 on Linux) slices per call,
        // and may write fewer bytes than asked: go on from where it stopped.
        const IOV_MAX: usize = 1024;
        let mut slices: Vec<std::io::IoSlice<'_>> = bufs.to_vec();
        let mut rest: &mut [std::io::IoSlice<'_>] = &mut slices;
        let mut at = offset;
        while !rest.is_empty() {
            let n = rest.len().min(IOV_MAX);
            match rustix::io::pwritev(&self.file, &rest[..n], at) {
                Ok(0) => {
                    return Err(err(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        "pwritev wrote nothing",
                    )));
                }
                Ok(written) => {
                    at += written as u64;
                    std::io::IoSlice::advance_slices(&mut rest, written);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(err(e.into())),
            }
        }
        self.len_changed.store(true, Ordering::Release);
        Ok(())
    }

    fn append(&self, data: &[u8]) -> Result<u64> {
        self.check_writable(OpKind::Append)?;
        let _guard = self
            .append_lock
            .lock()
            .map_err(|_| StorageError::new(OpKind::Append, &self.path, ErrorKind::Io))?;
        let at = self
            .file
            .metadata()
            .map_err(|e| StorageError::from_io(OpKind::Append, &self.path, &e))?
            .len();
        self.file
            .write_all_at(data, at)
            .map_err(|e| StorageError::from_io(OpKind::Append, &self.path, &e))?;
        self.len_changed.store(true, Ordering::Release);
        Ok(at)
    }

    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| StorageError::from_io(OpKind::Len, &self.path, &e))
    }

    fn truncate(&self, len: u64) -> Result<()> {
        self.check_writable(OpKind::Truncate)?;
        self.file
            .set_len(len)
            .map_err(|e| StorageError::from_io(OpKind::Truncate, &self.path, &e))?;
        self.len_changed.store(true, Ordering::Release);
        Ok(())
    }

    /// Queued for the reserver thread: returns at once (ADR 0031).
    fn reserve(&self, offset: u64, len: u64) -> Result<()> {
        self.check_writable(OpKind::Reserve)?;
        if !self.reserves {
            return Ok(());
        }
        reserver::reserve(&self.file, &self.releases, &self.path, offset, len)
    }

    fn release_reserved(&self) -> Result<()> {
        self.check_writable(OpKind::Reserve)?;
        // Even with reservations off: an earlier run's (with them on) are
        // given back at the roll as they would have been.
        let err = |e: std::io::Error| StorageError::from_io(OpKind::Reserve, &self.path, &e);
        // Setting the length it has frees the blocks past it and changes no
        // byte below it (ext4 zeroes the rest of the last block past the
        // end, which nothing reads): nothing for a later sync to carry
        // (`len_changed` stays). No reservation queued before this runs
        // after it (`Releases`).
        self.releases.release(|| {
            let len = self.file.metadata().map_err(err)?.len();
            self.file.set_len(len).map_err(err)
        })
    }

    fn sync(&self) -> Result<()> {
        let result = if self.len_changed.swap(false, Ordering::AcqRel) {
            self.file.sync_all()
        } else {
            self.file.sync_data()
        };
        result.map_err(|e| {
            // A failed sync may have dropped the dirty state; the next sync must
            // still use fsync so a length change is not silently skipped.
            self.len_changed.store(true, Ordering::Release);
            StorageError::from_io(OpKind::SyncFile, &self.path, &e)
        })
    }
}

impl DurableStorage for DiskStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn DurableFile>> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                options.write(true);
            }
            OpenMode::CreateNew => {
                options.write(true).create_new(true);
            }
            OpenMode::CreateOrOpen => {
                options.write(true).create(true);
            }
        }
        let file = options
            .open(path)
            .map_err(|e| StorageError::from_io(OpKind::Open, path, &e))?;
        let meta = file
            .metadata()
            .map_err(|e| StorageError::from_io(OpKind::Open, path, &e))?;
        if meta.is_dir() {
            return Err(StorageError::new(
                OpKind::Open,
                path,
                ErrorKind::IsADirectory,
            ));
        }
        Ok(Box::new(DiskFile {
            file: Arc::new(file),
            path: path.to_path_buf(),
            writable: mode.writable(),
            append_lock: Mutex::new(()),
            len_changed: AtomicBool::new(mode != OpenMode::Read),
            releases: Arc::default(),
            reserves: self.reserves,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        fs::create_dir_all(path).map_err(|e| StorageError::from_io(OpKind::CreateDir, path, &e))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let entries =
            fs::read_dir(path).map_err(|e| StorageError::from_io(OpKind::ListDir, path, &e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::from_io(OpKind::ListDir, path, &e))?;
            match entry.file_name().into_string() {
                Ok(name) => names.push(name),
                // sluice never writes such a name; one that appears is foreign
                // and not ours to interpret.
                Err(raw) => {
                    tracing::warn!(dir = %path.display(), name = ?raw, "skipping non-UTF-8 directory entry")
                }
            }
        }
        names.sort_unstable();
        Ok(names)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(|e| StorageError::from_io(OpKind::RemoveFile, path, &e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(|e| {
            StorageError::from_io(OpKind::Rename, from, &e)
                .with_detail(format!("to {}: {e}", to.display()))
        })
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        fs::remove_dir_all(path).map_err(|e| StorageError::from_io(OpKind::RemoveDirAll, path, &e))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        #[cfg(feature = "test-faults")]
        if test_faults::noop_dir_sync() {
            // The fault the power-cut soak must catch: a directory sync that
            // claims success and persists nothing.
            return Ok(());
        }
        let dir = File::open(path).map_err(|e| StorageError::from_io(OpKind::SyncDir, path, &e))?;
        let meta = dir
            .metadata()
            .map_err(|e| StorageError::from_io(OpKind::SyncDir, path, &e))?;
        if !meta.is_dir() {
            return Err(StorageError::new(
                OpKind::SyncDir,
                path,
                ErrorKind::NotADirectory,
            ));
        }
        dir.sync_all()
            .map_err(|e| StorageError::from_io(OpKind::SyncDir, path, &e))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists()
            .map_err(|e| StorageError::from_io(OpKind::Exists, path, &e))
    }
}

/// Test-only faults of the real backend, compiled in only with the
/// `test-faults` feature (never in a shipped build) and switched on by the
/// environment of the process under test.
#[cfg(feature = "test-faults")]
mod test_faults {
    use std::sync::OnceLock;

    /// `SLUICE_TEST_NOOP_DIR_SYNC=1`: every `sync_dir` returns `Ok` at once.
    pub(crate) fn noop_dir_sync() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        *ON.get_or_init(|| {
            let on = std::env::var_os(super::NOOP_DIR_SYNC_ENV).is_some_and(|v| v == "1");
            if on {
                tracing::warn!("test fault active: directory syncs are no-ops");
            }
            on
        })
    }
}

/// The environment variable that turns directory syncs into no-ops in a
/// build with the `test-faults` feature (see [`test_faults_compiled`]).
pub const NOOP_DIR_SYNC_ENV: &str = "SLUICE_TEST_NOOP_DIR_SYNC";

/// Whether this build honours [`NOOP_DIR_SYNC_ENV`]; a server started with the
/// variable set on a build without it must refuse to start, not run correctly
/// and let a test believe the fault was on.
pub fn test_faults_compiled() -> bool {
    cfg!(feature = "test-faults")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::IoSlice;

    use super::*;
    use crate::{SimStorage, sim::SimConfig};

    /// More slices than one `pwritev` takes (IOV_MAX), some empty, at an
    /// offset past the end: the file holds exactly the concatenation there,
    /// on the disk, in the simulator and through a file pool alike.
    #[test]
    fn a_vectored_write_of_more_slices_than_iov_max_lands_whole_on_every_backend() {
        let pieces: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize])
            .collect();
        let slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        let mut want = vec![0u8; 5];
        for p in &pieces {
            want.extend_from_slice(p);
        }
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskStorage::new();
        let sim = SimStorage::new(SimConfig::default());
        let pooled = crate::PooledStorage::new(std::sync::Arc::new(DiskStorage::new()), 2);
        let backends: [(&dyn DurableStorage, std::path::PathBuf); 3] = [
            (&disk, dir.path().join("f")),
            (&sim, std::path::PathBuf::from("/f")),
            (&pooled, dir.path().join("g")),
        ];
        for (storage, path) in backends {
            let f = storage.open(&path, OpenMode::CreateNew).unwrap();
            f.write_vectored_at(5, &slices).unwrap();
            assert_eq!(f.read_to_end().unwrap(), want, "{path:?}");
        }
    }

    /// `DiskStorage::reserves_blocks`, saying the test is skipped if not.
    fn reserves_blocks(disk: &DiskStorage, dir: &Path) -> bool {
        let reserves = disk.reserves_blocks(dir).unwrap();
        if !reserves {
            eprintln!("skipped: the file system reserves no blocks");
        }
        reserves
    }

    /// ADR 0031: a handle's release goes through its gate, so a
    /// reservation queued on it before the release (a segment sealed right
    /// after an append asked for one) is skipped, not run after it.
    #[test]
    fn given_a_reservation_queued_on_a_file_when_the_file_is_released_before_it_runs_then_nothing_stays_reserved()
     {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskStorage::new();
        if !reserves_blocks(&disk, dir.path()) {
            return;
        }
        let path = dir.path().join("segment");
        let file = disk.open(&path, OpenMode::CreateNew).unwrap();
        file.write_at(0, &[1u8; 4096]).unwrap();
        // Given a reservation queued and not yet run.
        let held = crate::reserver::hold();
        file.reserve(4096, 1 << 20).unwrap();
        // When the file is released before it runs.
        file.release_reserved().unwrap();
        drop(held);
        disk.settle_reservations();
        // Then nothing is reserved past its end, and its bytes are unchanged.
        let (len, allocated) = disk.allocation(&path).unwrap();
        assert_eq!(len, 4096);
        assert!(
            allocated < 64 << 10,
            "{allocated} bytes allocated after the release"
        );
        assert_eq!(file.read_to_end().unwrap(), vec![1u8; 4096]);
    }

    /// `[files] reserve_blocks = false`: a backend without reservations
    /// reserves nothing, whatever its files are asked, and still gives back
    /// blocks an earlier run reserved.
    #[test]
    fn given_reservations_off_when_a_file_reserves_then_nothing_is_reserved() {
        let dir = tempfile::tempdir().unwrap();
        if !reserves_blocks(&DiskStorage::new(), dir.path()) {
            return;
        }
        let disk = DiskStorage::without_reservations();
        let path = dir.path().join("segment");
        let file = disk.open(&path, OpenMode::CreateNew).unwrap();
        file.write_at(0, &[1u8; 4096]).unwrap();
        file.reserve(4096, 1 << 20).unwrap();
        disk.settle_reservations();
        let (len, allocated) = disk.allocation(&path).unwrap();
        assert_eq!(len, 4096);
        assert!(allocated < 64 << 10, "{allocated} bytes allocated");
        // Blocks an earlier run reserved (with them on) are given back.
        let earlier = DiskStorage::new().open(&path, OpenMode::ReadWrite).unwrap();
        earlier.reserve(4096, 1 << 20).unwrap();
        disk.settle_reservations();
        assert!(disk.allocation(&path).unwrap().1 >= 1 << 20);
        file.release_reserved().unwrap();
        let (len, allocated) = disk.allocation(&path).unwrap();
        assert_eq!(len, 4096);
        assert!(allocated < 64 << 10, "{allocated} bytes after the release");
        assert_eq!(file.read_to_end().unwrap(), vec![1u8; 4096]);
    }

    /// ADR 0031: a reservation through a file pool reaches the file, and
    /// neither it nor its release dirties the handle (an eviction after them
    /// syncs nothing). Skipped where the file system has no `fallocate`.
    #[test]
    fn given_a_pooled_file_when_blocks_are_reserved_and_released_then_they_reach_the_disk_and_dirty_nothing()
     {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskStorage::new();
        if !reserves_blocks(&disk, dir.path()) {
            return;
        }
        let pool = crate::PooledStorage::new(std::sync::Arc::new(DiskStorage::new()), 2);
        let a = dir.path().join("a");
        let file = pool.open(&a, OpenMode::CreateNew).unwrap();
        file.write_at(0, &[1u8; 4096]).unwrap();
        file.sync().unwrap();
        let syncs = pool.stats().eviction_syncs;
        // Given a reservation through the pool.
        file.reserve(4096, 1 << 20).unwrap();
        disk.settle_reservations();
        let (len, allocated) = disk.allocation(&a).unwrap();
        assert_eq!(len, 4096, "the length is unchanged");
        assert!(allocated >= 1 << 20, "{allocated} bytes allocated");
        // Two more files, written (so that the pool would evict `a` first
        // were it dirty), evict its descriptor: with no sync of it.
        let evict_a = |what: &str| {
            let others: Vec<_> = ["b", "c"]
                .iter()
                .map(|name| {
                    let f = pool
                        .open(&dir.path().join(name), OpenMode::CreateOrOpen)
                        .unwrap();
                    f.write_at(0, b"x").unwrap();
                    f
                })
                .collect();
            assert!(pool.stats().open <= 2, "the pool holds its bound");
            assert_eq!(pool.stats().eviction_syncs, syncs, "{what} dirties nothing");
            drop(others);
        };
        // When its descriptor is evicted, and it is released.
        evict_a("a reservation");
        file.release_reserved().unwrap();
        // Then the blocks went back, the bytes did not change, and nothing was dirtied.
        let (len, allocated) = disk.allocation(&a).unwrap();
        assert_eq!(len, 4096);
        assert!(
            allocated < 64 << 10,
            "{allocated} bytes allocated after the release"
        );
        assert_eq!(file.read_to_end().unwrap(), vec![1u8; 4096]);
        evict_a("a release");
    }
}
