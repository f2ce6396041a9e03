//! A `DurableStorage` wrapper that counts what the benchmarks need to know.
//!
//! Invariants:
//! - Every call is forwarded unchanged to the wrapped backend, except file and
//!   directory syncs while `skip_syncs` is set. That switch exists only to
//!   build large data sets quickly; the builder flushes the whole file system
//!   (`sync(1)`) afterwards, and no measured phase ever runs with it set.
//! - Counters only grow; a phase's figure is the difference of two snapshots.
//! - When `record_syncs` is set, each sync's path is kept, so the purge
//!   scenario can name every sync on its critical path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sluice_storage::{DurableFile, DurableStorage, OpenMode, Result};

/// Which kind of sync a recorded entry was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    File,
    Dir,
}

#[derive(Debug, Default)]
struct Counters {
    file_syncs: AtomicU64,
    dir_syncs: AtomicU64,
    bytes_written: AtomicU64,
    skip_syncs: AtomicBool,
    record_syncs: AtomicBool,
    recorded: Mutex<Vec<(SyncKind, PathBuf)>>,
}

impl Counters {
    fn note_sync(&self, kind: SyncKind, path: &Path) {
        match kind {
            SyncKind::File => self.file_syncs.fetch_add(1, Ordering::Relaxed),
            SyncKind::Dir => self.dir_syncs.fetch_add(1, Ordering::Relaxed),
        };
        if self.record_syncs.load(Ordering::Relaxed)
            && let Ok(mut v) = self.recorded.lock()
        {
            v.push((kind, path.to_path_buf()));
        }
    }
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub file_syncs: u64,
    pub dir_syncs: u64,
    pub bytes_written: u64,
}

impl Counts {
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            file_syncs: self.file_syncs - earlier.file_syncs,
            dir_syncs: self.dir_syncs - earlier.dir_syncs,
            bytes_written: self.bytes_written - earlier.bytes_written,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CountingStorage {
    inner: Arc<dyn DurableStorage>,
    counters: Arc<Counters>,
}

impl CountingStorage {
    pub fn new(inner: Arc<dyn DurableStorage>) -> Self {
        CountingStorage {
            inner,
            counters: Arc::new(Counters::default()),
        }
    }

    pub fn counts(&self) -> Counts {
        Counts {
            file_syncs: self.counters.file_syncs.load(Ordering::Relaxed),
            dir_syncs: self.counters.dir_syncs.load(Ordering::Relaxed),
            bytes_written: self.counters.bytes_written.load(Ordering::Relaxed),
        }
    }

    /// Setup only: syncs return at once (see the module invariants).
    pub fn set_skip_syncs(&self, skip: bool) {
        self.counters.skip_syncs.store(skip, Ordering::Relaxed);
    }

    /// Starts (or stops) keeping the path of every sync; starting clears the list.
    pub fn set_record_syncs(&self, record: bool) {
        if record && let Ok(mut v) = self.counters.recorded.lock() {
            v.clear();
        }
        self.counters.record_syncs.store(record, Ordering::Relaxed);
    }

    pub fn recorded_syncs(&self) -> Vec<(SyncKind, PathBuf)> {
        self.counters
            .recorded
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug)]
struct CountingFile {
    inner: Box<dyn DurableFile>,
    counters: Arc<Counters>,
}

impl DurableFile for CountingFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write_at(offset, data)
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[std::io::IoSlice<'_>]) -> Result<()> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.counters
            .bytes_written
            .fetch_add(n as u64, Ordering::Relaxed);
        self.inner.write_vectored_at(offset, bufs)
    }
    fn reserve(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.reserve(offset, len)
    }
    fn release_reserved(&self) -> Result<()> {
        self.inner.release_reserved()
    }
    fn append(&self, data: &[u8]) -> Result<u64> {
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.append(data)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn truncate(&self, len: u64) -> Result<()> {
        self.inner.truncate(len)
    }
    fn sync(&self) -> Result<()> {
        if self.counters.skip_syncs.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.counters.note_sync(SyncKind::File, self.inner.path());
        self.inner.sync()
    }
    fn read_to_end(&self) -> Result<Vec<u8>> {
        self.inner.read_to_end()
    }
}

impl DurableStorage for CountingStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn DurableFile>> {
        Ok(Box::new(CountingFile {
            inner: self.inner.open(path, mode)?,
            counters: self.counters.clone(),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.remove_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        if self.counters.skip_syncs.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.counters.note_sync(SyncKind::Dir, path);
        self.inner.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        self.inner.read_file(path)
    }
}
