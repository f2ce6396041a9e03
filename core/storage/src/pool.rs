//! `PooledStorage`: a bounded pool of open files in front of any
//! [`DurableStorage`] (ADR 0018).
//!
//! Every `open` through the pool returns a [`DurableFile`] whose descriptor
//! the pool may close while the caller still holds the handle, and reopens by
//! path on the handle's next call. At most `bound` descriptors are open at
//! once; when a call needs one more, the least recently used evictable handle
//! is closed.
//!
//! Invariants, and why they hold:
//! - **Never more than `bound` descriptors open**, except while more than
//!   `bound` handles are *pinned* (below): every open and reopen first makes
//!   room under the pool's one mutex, and a handle's descriptor is counted
//!   from the inner `open` until it is dropped or evicted.
//! - **No write is ever closed away unsynced (fsyncgate).** On Linux a
//!   writeback error is reported to the descriptions open when it happens; a
//!   descriptor opened later may never see it, so closing a file with
//!   unsynced writes and reopening it to sync can report success for lost
//!   data. A handle is *dirty* from a write, append or truncate through it
//!   until a sync through it returns. A reservation and its release
//!   (`reserve`, `release_reserved`, ADR 0031) do not dirty it: they change
//!   no byte below the file's end, so no sync has anything of theirs to
//!   carry (a release may zero the rest of the last block past the end,
//!   which nothing reads). Clean handles are evicted first; a
//!   dirty victim is synced before its descriptor is closed, and if that
//!   sync fails the error is kept with the handle and returned by the
//!   handle's next `sync` (as the kernel would have, had the descriptor
//!   stayed open), so the failure is the owner's, never swallowed.
//! - **A reopen finds the same file or fails; never another file.** The pool
//!   sees every rename and removal made through it: a rename moves the
//!   handles open on its source to the target (a re-dirty renames a name
//!   aside and back, and an evicted handle reopens wherever its file is
//!   now). Before a rename or a removal, the evicted handles at the names it
//!   touches are opened again, and every handle there is *held* (not
//!   evictable) until the call's bookkeeping is done, so their descriptors
//!   follow their files whatever the call does, whatever other threads
//!   open meanwhile. If one cannot be opened, the call is refused with that
//!   error and changes no name (a closed handle stays where its file is;
//!   `refusals` counts it, and the caller retries as after any failed
//!   call). Afterwards a handle whose name is replaced (renamed over) or
//!   removed, or whose rename failed (moved or not, the pool cannot tell),
//!   is *pinned*: never evicted, it keeps its file as a plain descriptor
//!   would. A handle still closed then is one whose name led to no file
//!   (its reopen found none); it follows a successful rename by path, and
//!   after a removal or a failed rename it is cut off: its calls fail with
//!   `NotFound` rather than reach another file. So is every closed handle
//!   under a directory `remove_dir_all` is asked to remove, whatever the
//!   outcome (only deleted trees are removed whole, and their handles are
//!   not opened again first). A reopen never creates: it opens an existing
//!   name read-write (or read-only).
//! - **Deterministic.** Eviction order is least-recently-used by a counter
//!   the pool bumps on each call (no clock), kept in `BTreeMap`s (no hash
//!   order); on `SimStorage` every reopen and eviction sync is a traced call.
//! - Files are only renamed and removed through the pool (sluice never
//!   renames directories, and every path comes from one `Layout`); the pool
//!   tracks exact paths, so a rename of a directory holding open handles is
//!   not followed (ADR 0018 notes it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{ErrorKind, OpKind, Result, StorageError};
use crate::{DurableFile, DurableStorage, OpenMode};

/// The pool's counters, readable without its lock (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// The configured bound.
    pub bound: u64,
    /// Descriptors open now.
    pub open: u64,
    /// Handles held by callers (open or evicted).
    pub handles: u64,
    /// Handles pinned now (their name was replaced or removed while open).
    pub pinned: u64,
    /// Descriptors closed to make room, since the pool was made.
    pub evictions: u64,
    /// Of those, how many had to be synced first, and how many of those syncs failed.
    pub eviction_syncs: u64,
    pub eviction_sync_failures: u64,
    /// Descriptors opened again for an evicted handle.
    pub reopens: u64,
    /// Renames and removals refused because a handle at a name they touch
    /// could not be opened again first (they changed no name).
    pub refusals: u64,
}

#[derive(Debug, Default)]
struct Counters {
    bound: AtomicU64,
    open: AtomicU64,
    handles: AtomicU64,
    pinned: AtomicU64,
    evictions: AtomicU64,
    eviction_syncs: AtomicU64,
    eviction_sync_failures: AtomicU64,
    reopens: AtomicU64,
    refusals: AtomicU64,
}

#[derive(Debug)]
struct Slot {
    /// Where the file is now (follows renames made through the pool).
    path: PathBuf,
    /// How an evicted descriptor is opened again: never creating.
    reopen: OpenMode,
    file: Option<Arc<dyn DurableFile>>,
    /// Writes, appends and truncates started through this handle, and how
    /// many of them a returned sync (started after them) covered: the handle
    /// is dirty while the first is larger.
    writes: u64,
    synced_writes: u64,
    /// Calls in flight: the descriptor is not evictable meanwhile.
    in_use: u32,
    /// An eviction's failed sync, returned by the next `sync`.
    pending: Option<StorageError>,
    /// Open, and never to be evicted: its name no longer leads to its file.
    pinned: bool,
    /// Closed, and its name no longer leads to its file: calls fail.
    gone: bool,
    /// Last use, by the pool's counter.
    tick: u64,
}

impl Slot {
    fn dirty(&self) -> bool {
        self.writes > self.synced_writes
    }

    fn evictable(&self) -> bool {
        self.file.is_some() && !self.pinned && self.in_use == 0
    }
}

#[derive(Debug)]
struct PoolState {
    bound: usize,
    next_id: u64,
    tick: u64,
    open: usize,
    slots: BTreeMap<u64, Slot>,
    by_path: BTreeMap<PathBuf, BTreeSet<u64>>,
    /// Evictable handles (open, not pinned) by last use: clean ones are
    /// evicted before dirty ones, which need a sync first.
    clean: BTreeMap<u64, u64>,
    dirty: BTreeMap<u64, u64>,
}

impl PoolState {
    fn unlist(&mut self, id: u64) {
        if let Some(slot) = self.slots.get(&id) {
            let tick = slot.tick;
            self.clean.remove(&tick);
            self.dirty.remove(&tick);
        }
    }

    /// Bumps `id`'s last use and files it under clean or dirty (if evictable).
    fn touch(&mut self, id: u64) {
        self.unlist(id);
        self.tick += 1;
        let tick = self.tick;
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.tick = tick;
            if slot.evictable() {
                if slot.dirty() {
                    self.dirty.insert(tick, id);
                } else {
                    self.clean.insert(tick, id);
                }
            }
        }
    }

    /// Re-files `id` after its dirty flag changed, keeping its last use.
    fn refile(&mut self, id: u64) {
        self.unlist(id);
        if let Some(slot) = self.slots.get(&id)
            && slot.evictable()
        {
            if slot.dirty() {
                self.dirty.insert(slot.tick, id);
            } else {
                self.clean.insert(slot.tick, id);
            }
        }
    }

    fn unindex_path(&mut self, id: u64, path: &Path) {
        if let Some(ids) = self.by_path.get_mut(path) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_path.remove(path);
            }
        }
    }
}

/// A bounded pool of open files over `inner`. Cloning shares the pool.
#[derive(Clone)]
pub struct PooledStorage {
    inner: Arc<dyn DurableStorage>,
    state: Arc<Mutex<PoolState>>,
    counters: Arc<Counters>,
}

impl fmt::Debug for PooledStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledStorage")
            .field("inner", &self.inner)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The smallest bound the pool accepts: one call needs one descriptor, and a
/// second lets two files alternate without an eviction on every call.
pub const MIN_POOL_BOUND: usize = 2;

impl PooledStorage {
    /// A pool of at most `bound` open descriptors (at least [`MIN_POOL_BOUND`]).
    pub fn new(inner: Arc<dyn DurableStorage>, bound: usize) -> Self {
        let bound = bound.max(MIN_POOL_BOUND);
        let counters = Counters::default();
        counters.bound.store(bound as u64, Ordering::Relaxed);
        PooledStorage {
            inner,
            state: Arc::new(Mutex::new(PoolState {
                bound,
                next_id: 0,
                tick: 0,
                open: 0,
                slots: BTreeMap::new(),
                by_path: BTreeMap::new(),
                clean: BTreeMap::new(),
                dirty: BTreeMap::new(),
            })),
            counters: Arc::new(counters),
        }
    }

    /// The storage the pool opens files on.
    pub fn inner(&self) -> &Arc<dyn DurableStorage> {
        &self.inner
    }

    pub fn stats(&self) -> PoolStats {
        let c = &self.counters;
        PoolStats {
            bound: c.bound.load(Ordering::Relaxed),
            open: c.open.load(Ordering::Relaxed),
            handles: c.handles.load(Ordering::Relaxed),
            pinned: c.pinned.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            eviction_syncs: c.eviction_syncs.load(Ordering::Relaxed),
            eviction_sync_failures: c.eviction_sync_failures.load(Ordering::Relaxed),
            reopens: c.reopens.load(Ordering::Relaxed),
            refusals: c.refusals.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        lock(&self.state)
    }

    /// Opens again every evicted handle at `path`, before a rename or
    /// removal that may make the name lead elsewhere, and holds every handle
    /// there open until [`PooledStorage::release`]: an open descriptor
    /// follows its file whatever the call does, and a held one is not
    /// evictable (`in_use`), so no other thread's open, nor the same call's
    /// reopen at its other name, closes it between this and the call. If a
    /// handle cannot be opened, the holds taken so far are released and the
    /// error is returned, and the caller does not make the call: a failed
    /// call's outcome is unknown (a torn rename may have moved the file),
    /// and a closed handle would have to be cut off for good rather than
    /// reopen by a name that may lead to another file. Refused, the call
    /// changed no name and the handle stays where its file is (`sim run
    /// --seed 32 --steps 1000 --max-open-files 2`: a re-dirty's failed
    /// rename of a live segment, after its reopen failed, cut the log off
    /// its own segment until a restart). `NotFound` is not an error here: no
    /// file is at `path`, so the call has nothing of the handle's to move or
    /// remove. The handles held are added to `held`; on an error every hold
    /// in `held` (earlier names' too) is given back.
    fn hold_at(&self, path: &Path, held: &mut Vec<u64>) -> Result<()> {
        let mut st = self.lock();
        let Some(ids) = st.by_path.get(path).cloned() else {
            return Ok(());
        };
        for id in ids {
            let closed = st
                .slots
                .get(&id)
                .is_some_and(|s| s.file.is_none() && !s.gone);
            if closed {
                let mode = st.slots.get(&id).map_or(OpenMode::Read, |s| s.reopen);
                self.make_room(&mut st);
                match self.inner.open(path, mode) {
                    Ok(file) => {
                        st.open += 1;
                        self.counters.open.fetch_add(1, Ordering::Relaxed);
                        self.counters.reopens.fetch_add(1, Ordering::Relaxed);
                        if let Some(slot) = st.slots.get_mut(&id) {
                            slot.file = Some(Arc::from(file));
                        }
                        st.touch(id);
                    }
                    Err(e) if e.kind == ErrorKind::NotFound => continue,
                    Err(e) => {
                        drop(st);
                        self.release(held);
                        self.counters.refusals.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(path = %path.display(), error = %e, "a rename or removal is refused: a pooled handle at the name could not be opened again first");
                        return Err(e);
                    }
                }
            }
            if let Some(slot) = st.slots.get_mut(&id)
                && slot.file.is_some()
            {
                slot.in_use += 1;
                st.unlist(id);
                held.push(id);
            }
        }
        Ok(())
    }

    /// Gives back the holds of [`PooledStorage::hold_at`].
    fn release(&self, held: &[u64]) {
        if held.is_empty() {
            return;
        }
        let mut st = self.lock();
        for &id in held {
            if let Some(slot) = st.slots.get_mut(&id) {
                slot.in_use = slot.in_use.saturating_sub(1);
            }
            st.refile(id);
        }
    }

    /// The handles at `path` no longer reach their file by that name: an
    /// open one is pinned (kept open for good, as a plain descriptor would
    /// keep an unlinked file), a closed one is cut off.
    fn unname(&self, path: &Path) {
        let mut st = self.lock();
        let Some(ids) = st.by_path.remove(path) else {
            return;
        };
        for id in ids {
            st.unlist(id);
            if let Some(slot) = st.slots.get_mut(&id) {
                if slot.file.is_none() {
                    slot.gone = true;
                } else if !slot.pinned {
                    slot.pinned = true;
                    self.counters.pinned.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// A successful rename: the handles at `from` now reach their file at `to`.
    fn moved(&self, from: &Path, to: &Path) {
        let mut st = self.lock();
        let Some(ids) = st.by_path.remove(from) else {
            return;
        };
        for &id in &ids {
            if let Some(slot) = st.slots.get_mut(&id) {
                slot.path = to.to_path_buf();
            }
        }
        st.by_path.entry(to.to_path_buf()).or_default().extend(ids);
    }

    /// Makes room for one more descriptor: closes least recently used ones
    /// (clean first; a dirty one is synced first, see the module invariants)
    /// while the pool is full. With only pinned descriptors left it stops,
    /// and the pool goes over its bound until they are dropped.
    fn make_room(&self, st: &mut PoolState) {
        while st.open >= st.bound {
            let victim = match st.clean.first_key_value() {
                Some((_, &id)) => id,
                None => match st.dirty.first_key_value() {
                    Some((_, &id)) => id,
                    None => return,
                },
            };
            st.unlist(victim);
            let Some(slot) = st.slots.get_mut(&victim) else {
                return;
            };
            if let Some(file) = slot.file.take() {
                if slot.dirty() {
                    self.counters.eviction_syncs.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = file.sync() {
                        self.counters
                            .eviction_sync_failures
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(path = %slot.path.display(), error = %e, "sync before closing a pooled file failed; its owner's next sync reports it");
                        slot.pending.get_or_insert(e);
                    }
                    slot.synced_writes = slot.writes;
                }
                drop(file);
                st.open -= 1;
                self.counters.open.fetch_sub(1, Ordering::Relaxed);
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn lock(state: &Mutex<PoolState>) -> MutexGuard<'_, PoolState> {
    // Every mutation of the state completes before the lock is released or a
    // call that could panic is made; a poisoned lock is still consistent.
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl DurableStorage for PooledStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn DurableFile>> {
        let mut st = self.lock();
        self.make_room(&mut st);
        let file = self.inner.open(path, mode)?;
        let id = st.next_id;
        st.next_id += 1;
        st.slots.insert(
            id,
            Slot {
                path: path.to_path_buf(),
                reopen: if mode.writable() {
                    OpenMode::ReadWrite
                } else {
                    OpenMode::Read
                },
                file: Some(Arc::from(file)),
                writes: 0,
                synced_writes: 0,
                in_use: 0,
                pending: None,
                pinned: false,
                gone: false,
                tick: 0,
            },
        );
        st.by_path.entry(path.to_path_buf()).or_default().insert(id);
        st.open += 1;
        st.touch(id);
        self.counters.open.fetch_add(1, Ordering::Relaxed);
        self.counters.handles.fetch_add(1, Ordering::Relaxed);
        drop(st);
        Ok(Box::new(PooledFile {
            pool: self.clone(),
            id,
            path: path.to_path_buf(),
        }))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.inner.list_dir(path)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        // Whether or not the removal happened, the name may no longer lead
        // to the file the handles there hold.
        let mut held = Vec::new();
        self.hold_at(path, &mut held)?;
        let r = self.inner.remove_file(path);
        self.unname(path);
        self.release(&held);
        r
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if from == to {
            return self.inner.rename(from, to);
        }
        let mut held = Vec::new();
        self.hold_at(from, &mut held)?;
        self.hold_at(to, &mut held)?;
        let r = self.inner.rename(from, to);
        // The target's old file is replaced (or, after a failure, may be).
        self.unname(to);
        match &r {
            Ok(()) => self.moved(from, to),
            // Moved or not: the name is not known to lead to the file.
            Err(_) => self.unname(from),
        }
        self.release(&held);
        r
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        let r = self.inner.remove_dir_all(path);
        let under: Vec<PathBuf> = {
            let st = self.lock();
            st.by_path
                .range(path.to_path_buf()..)
                .take_while(|(p, _)| p.starts_with(path))
                .map(|(p, _)| p.clone())
                .collect()
        };
        for p in under {
            self.unname(&p);
        }
        r
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        self.inner.sync_dir(path)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
}

/// A handle from [`PooledStorage::open`]: its descriptor may be closed and
/// reopened between calls (see the module invariants).
pub struct PooledFile {
    pool: PooledStorage,
    id: u64,
    /// The path it was opened with (what `path()` reports, as a plain handle's does).
    path: PathBuf,
}

impl fmt::Debug for PooledFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledFile")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish()
    }
}

/// What a call does to the handle's dirty flag.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    Read,
    Write,
    Sync,
}

impl PooledFile {
    /// Runs `call` on this handle's descriptor, reopening it first if the
    /// pool closed it. The pool's lock is held to find (or reopen) the
    /// descriptor and to record the outcome, not during the call: calls on
    /// different files run concurrently (the reconciler's cleanups do), and a
    /// descriptor in use is never evicted.
    fn with<T>(
        &self,
        op: OpKind,
        effect: Effect,
        call: impl FnOnce(&dyn DurableFile) -> Result<T>,
    ) -> Result<T> {
        let pool = &self.pool;
        let (file, writes_before) = {
            let mut st = pool.lock();
            let Some(slot) = st.slots.get(&self.id) else {
                return Err(StorageError::new(op, &self.path, ErrorKind::BadHandle)
                    .with_detail("pooled handle unknown to its pool"));
            };
            if slot.file.is_none() {
                if slot.gone {
                    return Err(StorageError::new(op, &self.path, ErrorKind::NotFound)
                        .with_detail(
                            "the file was renamed over or removed while the pool had closed its descriptor",
                        ));
                }
                let (path, mode) = (slot.path.clone(), slot.reopen);
                pool.make_room(&mut st);
                let file = pool.inner.open(&path, mode)?;
                st.open += 1;
                pool.counters.open.fetch_add(1, Ordering::Relaxed);
                pool.counters.reopens.fetch_add(1, Ordering::Relaxed);
                if let Some(slot) = st.slots.get_mut(&self.id) {
                    slot.file = Some(Arc::from(file));
                }
            }
            st.touch(self.id);
            st.unlist(self.id);
            let Some(slot) = st.slots.get_mut(&self.id) else {
                return Err(StorageError::new(op, &self.path, ErrorKind::BadHandle));
            };
            let Some(file) = slot.file.clone() else {
                return Err(StorageError::new(op, &self.path, ErrorKind::BadHandle));
            };
            slot.in_use += 1;
            if effect == Effect::Write {
                // Dirty whatever the outcome: a failed write may have landed in part.
                slot.writes += 1;
            }
            (file, slot.writes)
        };
        let result = call(file.as_ref());
        drop(file);
        let mut st = pool.lock();
        let result = match st.slots.get_mut(&self.id) {
            Some(slot) => {
                slot.in_use = slot.in_use.saturating_sub(1);
                match effect {
                    Effect::Read | Effect::Write => result,
                    Effect::Sync => {
                        // Either way the outcome reaches the owner: the
                        // kernel reported this descriptor's errors, and an
                        // eviction's failed sync is reported now.
                        slot.synced_writes = slot.synced_writes.max(writes_before);
                        match slot.pending.take() {
                            Some(earlier) => Err(earlier),
                            None => result,
                        }
                    }
                }
            }
            None => result,
        };
        st.refile(self.id);
        result
    }
}

impl Drop for PooledFile {
    fn drop(&mut self) {
        let pool = &self.pool;
        let mut st = pool.lock();
        st.unlist(self.id);
        if let Some(slot) = st.slots.remove(&self.id) {
            let path = slot.path.clone();
            st.unindex_path(self.id, &path);
            if slot.file.is_some() {
                st.open -= 1;
                pool.counters.open.fetch_sub(1, Ordering::Relaxed);
            }
            if slot.pinned {
                pool.counters.pinned.fetch_sub(1, Ordering::Relaxed);
            }
            pool.counters.handles.fetch_sub(1, Ordering::Relaxed);
            // The descriptor (if open) closes here, as a plain handle's would.
            drop(slot);
        }
    }
}

impl DurableFile for PooledFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.with(OpKind::Read, Effect::Read, |f| f.read_at(offset, buf))
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.with(OpKind::Write, Effect::Write, |f| f.write_at(offset, data))
    }

    // Passed through, not the trait's default (which concatenates the
    // slices first: a copy of every payload of a batch).
    fn write_vectored_at(&self, offset: u64, bufs: &[std::io::IoSlice<'_>]) -> Result<()> {
        self.with(OpKind::Write, Effect::Write, |f| {
            f.write_vectored_at(offset, bufs)
        })
    }

    fn append(&self, data: &[u8]) -> Result<u64> {
        self.with(OpKind::Append, Effect::Write, |f| f.append(data))
    }

    fn len(&self) -> Result<u64> {
        self.with(OpKind::Len, Effect::Read, |f| f.len())
    }

    fn truncate(&self, len: u64) -> Result<()> {
        self.with(OpKind::Truncate, Effect::Write, |f| f.truncate(len))
    }

    // A reservation or release changes no byte below the file's end:
    // nothing for an eviction's sync to carry, so it dirties nothing
    // (`Effect::Read`; the module invariants).
    fn reserve(&self, offset: u64, len: u64) -> Result<()> {
        self.with(OpKind::Reserve, Effect::Read, |f| f.reserve(offset, len))
    }

    fn release_reserved(&self) -> Result<()> {
        self.with(OpKind::Reserve, Effect::Read, |f| f.release_reserved())
    }

    fn sync(&self) -> Result<()> {
        self.with(OpKind::SyncFile, Effect::Sync, |f| f.sync())
    }

    fn take_deferred_error(&self) -> Option<StorageError> {
        let mut st = self.pool.lock();
        st.slots
            .get_mut(&self.id)
            .and_then(|slot| slot.pending.take())
    }
}
