//! `sluice-storage`: the only door between sluice and a disk.
//!
//! Invariants this crate exists to uphold:
//! - Every byte sluice persists, and every name it creates or removes, goes
//!   through [`DurableStorage`] / [`DurableFile`]. No other crate in the
//!   workspace touches `std::fs` in production code, so the simulator sees
//!   exactly what the real disk would see.
//! - The trait promises no more than the kernel does: a write is only in the
//!   page cache until [`DurableFile::sync`]; a new, renamed or removed *name*
//!   is only durable after [`DurableStorage::sync_dir`] on the directory that
//!   holds it. Code that is correct against [`SimStorage`] under power loss is
//!   therefore correct against [`DiskStorage`] on a POSIX file system.
//! - The trait is synchronous (ADR 0002 explains why): a call returns when the
//!   kernel (or the simulator) has answered, and an async server runs it on a
//!   blocking pool. The one exception is advisory: a block reservation
//!   (`DurableFile::reserve`, ADR 0031) may be queued and run later, since it
//!   changes no byte.

mod disk;
mod error;
mod pool;
mod reserver;
mod rng;
pub mod sim;

use std::fmt::Debug;
use std::io::IoSlice;
use std::path::Path;

pub use disk::{DiskStorage, NOOP_DIR_SYNC_ENV, test_faults_compiled};
pub use error::{ErrorKind, OpKind, Result, StorageError};
pub use pool::{MIN_POOL_BOUND, PoolStats, PooledFile, PooledStorage};
/// The seeded PRNG every crate draws from (the engine's message ids and
/// reconciler jitter too), outside `sim` so production code takes nothing
/// from the simulator; `sim::SimRng` names the same type.
pub use rng::SimRng;
pub use sim::{
    Crash, Fault, FaultMode, FaultPlan, InjectedError, OpMatcher, SimConfig, SimStorage,
    SyncFailureSemantics, TraceEntry,
};

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// Existing file, read only.
    Read,
    /// Existing file, read and write.
    ReadWrite,
    /// A new file, read and write; fails with [`ErrorKind::AlreadyExists`] if the name exists.
    CreateNew,
    /// Open read-write, creating the file if the name does not exist.
    CreateOrOpen,
}

impl OpenMode {
    pub(crate) fn writable(self) -> bool {
        !matches!(self, OpenMode::Read)
    }
}

/// An open file. Positioned I/O only: there is no shared cursor, so concurrent
/// readers never disturb each other and a poll never seeks.
pub trait DurableFile: Send + Sync + Debug {
    /// The path this handle was opened with.
    fn path(&self) -> &Path;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (fewer only at end of file).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Writes all of `data` at `offset`, extending the file (with zeros) if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Writes `bufs`, concatenated, at `offset`: one write as `write_at`
    /// of the concatenation would be (the same outcomes under faults and
    /// power loss), without building the concatenation first where the
    /// backend can avoid it (`DiskStorage` uses `pwritev`). Why: a batch's
    /// payloads are written from the request's buffers, not copied into
    /// one frame first.
    fn write_vectored_at(&self, offset: u64, bufs: &[IoSlice<'_>]) -> Result<()> {
        let mut all = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
        for b in bufs {
            all.extend_from_slice(b);
        }
        self.write_at(offset, &all)
    }
    /// Writes all of `data` at the current end of file; returns the offset it was written at.
    fn append(&self, data: &[u8]) -> Result<u64>;
    /// Current length (as the page cache sees it).
    fn len(&self) -> Result<u64>;
    /// Sets the length, cutting or zero-extending.
    fn truncate(&self, len: u64) -> Result<()>;
    /// Makes this file's bytes and length durable. Not its name: see
    /// [`DurableStorage::sync_dir`].
    fn sync(&self) -> Result<()>;

    /// Reserves the file's blocks for `len` bytes from `offset` without
    /// changing its length or its bytes, so that writes there find their
    /// blocks allocated (`DiskStorage`: `fallocate` with `KEEP_SIZE`; on
    /// ext4 a buffered append into reserved blocks skips the delayed
    /// allocation's per-block bookkeeping, ADR 0031). Advisory: a backend
    /// may do nothing (`SimStorage` has no blocks to reserve), and a failure
    /// changes nothing the file holds, so callers may go on without it.
    /// It may return before the blocks are reserved: `DiskStorage` queues
    /// it for a thread of its own, bound to this handle's descriptor, so
    /// the caller never waits for the allocator (`reserver.rs`).
    fn reserve(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Gives back the blocks `reserve` left past the file's end; its length
    /// and bytes are unchanged. Advisory, like `reserve`. No reservation
    /// asked for on this handle's descriptor before the release takes
    /// effect after it (a pooled handle reopened since has a new
    /// descriptor, ADR 0031 names that window).
    fn release_reserved(&self) -> Result<()> {
        Ok(())
    }

    /// A failed sync a layer below made on this handle's behalf and not yet
    /// reported (the file pool syncs a file before it closes it, ADR 0018):
    /// taken once, by whichever comes first, this or the next `sync`, which
    /// then returns it. The owner treats it as its own failed sync. A plain
    /// handle has none.
    fn take_deferred_error(&self) -> Option<StorageError> {
        None
    }

    /// `true` if the file has no bytes.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `Io` naming the short read.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf)?;
        if n == buf.len() {
            Ok(())
        } else {
            Err(
                StorageError::new(OpKind::Read, self.path(), ErrorKind::Io).with_detail(format!(
                    "short read: {n} of {} bytes at offset {offset}",
                    buf.len()
                )),
            )
        }
    }

    /// Reads the whole file.
    fn read_to_end(&self) -> Result<Vec<u8>> {
        let len = self.len()?;
        let len = usize::try_from(len).map_err(|_| {
            StorageError::new(OpKind::Read, self.path(), ErrorKind::Io)
                .with_detail("file larger than address space")
        })?;
        let mut buf = vec![0u8; len];
        let n = self.read_at(0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// The file system as sluice needs it. See the crate docs for the durability contract.
pub trait DurableStorage: Send + Sync + Debug {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn DurableFile>>;
    /// Creates a directory and any missing parents (like `mkdir -p`); succeeds if it exists.
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Names in a directory, sorted bytewise, so every caller iterates in one order.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    /// Unlinks a file. Durable only after `sync_dir` of its parent.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Atomically renames `from` to `to`, replacing `to` if it exists. Durable
    /// only after `sync_dir` of both parents.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a directory and everything below it. Durable only after the
    /// parent (and, for partial progress, each subdirectory) is synced.
    fn remove_dir_all(&self, path: &Path) -> Result<()>;
    /// Makes this one directory's entries durable: not its parent's, not its
    /// children's, not any file's contents.
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Whether a name exists (as the page cache sees it).
    fn exists(&self, path: &Path) -> Result<bool>;

    /// Reads a whole file by path.
    fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        self.open(path, OpenMode::Read)?.read_to_end()
    }
}
