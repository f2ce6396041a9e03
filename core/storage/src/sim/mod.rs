//! `SimStorage`: a deterministic in-memory file system that keeps only the
//! promises the Linux kernel keeps, fails the way it fails, and loses power.
//!
//! Invariants:
//! - Every call, successful or not, appends one [`TraceEntry`] (index, kind,
//!   path, injected fault, error). The trace, and so [`SimStorage::trace_hash`],
//!   is a pure function of the seed, the configuration and the calls made.
//! - Nothing reads the wall clock, thread timing or hash-map order: all state
//!   lives in `BTreeMap`s behind one mutex, randomness comes from [`SimRng`].
//! - A handle is valid only in the epoch it was opened in; a crash of either
//!   kind starts a new epoch, so using a pre-crash handle is an error, as it
//!   would be in a new process.
//! - See [`fs`] for the cached/durable rules and [`SyncFailureSemantics`] for
//!   what a failed sync does.
//! - The simulator counts the handles open in the current epoch (per inode
//!   and in total, with a high-water mark): a handle counts from its
//!   successful `open` until it is dropped, and a crash closes them all (the
//!   process that held them is gone). Closing is not a storage call and is
//!   not traced. With [`SimStorage::set_lose_unsynced_on_last_close`], the
//!   last close of a file with unsynced changes models a writeback error
//!   that no later descriptor is told of (ADR 0002 §2.4, amended for the
//!   file pool, ADR 0018): under Linux semantics its dirty state is dropped.

mod fault;
mod fs;
pub mod schedule;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::rng::SimRng;
pub use fault::{Fault, FaultMode, FaultPlan, InjectedError, OpMatcher};
pub use fs::NodeView;

use crate::error::{ErrorKind, OpKind, Result, StorageError};
use crate::{DurableFile, DurableStorage, OpenMode};
use fault::Faults;
use fs::{DirNode, FileNode, Fs, Ino, Inode};

/// What a failed `fsync` (file or directory) does to the state it was meant to persist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SyncFailureSemantics {
    /// Linux (ext4, XFS, Btrfs): the failed writeback's dirty state is dropped
    /// and marked clean, so a retried sync reports success without persisting
    /// it ("fsyncgate"). The default, because it is what production sees.
    #[default]
    Linux,
    /// The dirty state is kept and a retried sync really persists it.
    Forgiving,
}

impl SyncFailureSemantics {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncFailureSemantics::Linux => "linux",
            SyncFailureSemantics::Forgiving => "forgiving",
        }
    }
}

/// A crash of the process or of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Crash {
    /// The process dies; the page cache survives. Handles become invalid.
    Process,
    /// Power is cut; only durable state survives.
    PowerLoss,
    /// Power is cut after background writeback flushed a seeded random subset
    /// of the unsynced changes (each dirty directory entry and each dirty file
    /// independently).
    PowerLossPartial { seed: u64 },
}

impl fmt::Display for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Crash::Process => f.write_str("process"),
            Crash::PowerLoss => f.write_str("power-loss"),
            Crash::PowerLossPartial { seed } => write!(f, "power-loss-partial:{seed}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimConfig {
    /// Seeds torn-write lengths.
    pub seed: u64,
    pub sync_failure: SyncFailureSemantics,
    /// Simulated disk size in bytes; writes beyond it fail with ENOSPC.
    pub capacity: Option<u64>,
}

/// One storage call as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    pub(crate) index: u64,
    pub kind: OpKind,
    pub path: String,
    /// The rename target, for renames.
    pub target: Option<String>,
    pub fault: Option<FaultMode>,
    pub error: Option<ErrorKind>,
    /// Bytes a read returned (0 for every other call). Not part of the
    /// rendered trace (`Display`, `trace_hash`): it lets a test bound what
    /// recovery reads without changing any recorded trace.
    pub bytes: u64,
}

impl fmt::Display for TraceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {} {}", self.index, self.kind, self.path)?;
        if let Some(t) = &self.target {
            write!(f, " -> {t}")?;
        }
        if let Some(m) = self.fault {
            write!(f, " [fault {m}]")?;
        }
        if let Some(e) = self.error {
            write!(f, " => {e}")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct SimState {
    config: SimConfig,
    fs: Fs,
    epoch: u64,
    trace: Vec<TraceEntry>,
    faults: Faults,
    rng: SimRng,
    /// Calls with a trace index above this never happen (see `halt_after`).
    halt_after: Option<u64>,
    /// Chance (parts per million) that a failed file sync under Linux
    /// semantics also evicts the pages it failed to write back (see
    /// [`SimStorage::set_eviction_after_failed_sync`]).
    evict_ppm: u32,
    /// Handles of the current epoch open per inode, and in total.
    handles: BTreeMap<Ino, u64>,
    open_handles: u64,
    /// The most handles open at once since the last reset.
    peak_open_handles: u64,
    /// Last closes of a file that still had unsynced changes.
    unsynced_last_closes: u64,
    /// Whether such a close loses the changes (see `set_lose_unsynced_on_last_close`).
    lose_unsynced_on_last_close: bool,
}

/// The simulator. Cloning shares the same file system (like two handles on one
/// disk); use [`SimStorage::fork`] for an independent copy.
#[derive(Debug, Clone)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
}

impl Default for SimStorage {
    fn default() -> Self {
        SimStorage::new(SimConfig::default())
    }
}

/// Normalises a path to its components: `/a/./b` and `a/b` are the same file.
fn components(op: OpKind, path: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(s) => match s.to_str() {
                Some(s) => out.push(s.to_string()),
                None => return Err(StorageError::new(op, path, ErrorKind::InvalidPath)),
            },
            Component::ParentDir | Component::Prefix(_) => {
                return Err(StorageError::new(op, path, ErrorKind::InvalidPath));
            }
        }
    }
    Ok(out)
}

fn display(parts: &[String]) -> String {
    if parts.is_empty() {
        "/".to_string()
    } else {
        parts.iter().fold(String::new(), |mut s, p| {
            s.push('/');
            s.push_str(p);
            s
        })
    }
}

/// Outcome of consulting the fault rules for one call.
enum Plan {
    Run,
    Fail(Fault),
    /// Past the halt point: the machine has stopped; the call never happens.
    Halted,
}

impl SimState {
    fn begin(&mut self, kind: OpKind, path: &str, target: Option<String>) -> (usize, Plan) {
        let index = self.trace.len() as u64;
        if self.halt_after.is_some_and(|h| index > h) {
            return (usize::MAX, Plan::Halted);
        }
        let fault = self.faults.decide(index, kind, path);
        self.trace.push(TraceEntry {
            index,
            kind,
            path: path.to_string(),
            target,
            fault: fault.map(|f| f.mode),
            error: None,
            bytes: 0,
        });
        let plan = match fault {
            Some(f) => Plan::Fail(f),
            None => Plan::Run,
        };
        (index as usize, plan)
    }

    fn end<T>(&mut self, slot: usize, result: Result<T>) -> Result<T> {
        if let (Err(e), Some(entry)) = (&result, self.trace.get_mut(slot)) {
            entry.error = Some(e.kind);
        }
        result
    }

    fn linux(&self) -> bool {
        self.config.sync_failure == SyncFailureSemantics::Linux
    }

    fn check_capacity(&self, growth: u64) -> std::result::Result<(), ErrorKind> {
        match self.config.capacity {
            Some(cap) if self.fs.used_bytes().saturating_add(growth) > cap => {
                Err(ErrorKind::NoSpace)
            }
            _ => Ok(()),
        }
    }
}

fn halted(op: OpKind, path: &Path) -> StorageError {
    StorageError::new(op, path, ErrorKind::Io).with_detail("machine halted (simulated crash point)")
}

fn injected(op: OpKind, path: &Path, fault: Fault) -> StorageError {
    StorageError::new(op, path, fault.error.kind())
        .with_detail(format!("injected fault ({})", fault.mode))
}

impl SimStorage {
    pub fn new(config: SimConfig) -> Self {
        SimStorage {
            state: Arc::new(Mutex::new(SimState {
                config,
                fs: Fs::default(),
                epoch: 0,
                trace: Vec::new(),
                faults: Faults::default(),
                rng: SimRng::new(config.seed),
                halt_after: None,
                evict_ppm: 0,
                handles: BTreeMap::new(),
                open_handles: 0,
                peak_open_handles: 0,
                unsynced_last_closes: 0,
                lose_unsynced_on_last_close: false,
            })),
        }
    }

    /// A simulator with Linux sync-failure semantics and this seed.
    pub fn with_seed(seed: u64) -> Self {
        SimStorage::new(SimConfig {
            seed,
            ..SimConfig::default()
        })
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock can only come from a bug in this
        // module; the state is still consistent enough to inspect, so recover it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An independent deep copy (same files, trace, faults and RNG state).
    /// Handles opened on `self` are not valid on the copy.
    pub fn fork(&self) -> SimStorage {
        let st = self.lock();
        SimStorage {
            state: Arc::new(Mutex::new(SimState {
                config: st.config,
                fs: st.fs.clone(),
                epoch: st.epoch + 1,
                trace: st.trace.clone(),
                faults: st.faults.clone(),
                rng: st.rng.clone(),
                halt_after: st.halt_after,
                evict_ppm: st.evict_ppm,
                // Handles opened on `self` are not valid on the copy.
                handles: BTreeMap::new(),
                open_handles: 0,
                peak_open_handles: 0,
                unsynced_last_closes: 0,
                lose_unsynced_on_last_close: st.lose_unsynced_on_last_close,
            })),
        }
    }

    /// Models Linux page-cache eviction after a failed writeback: under Linux
    /// semantics, each failed file sync (`before` or `torn`) also evicts the
    /// pages it failed to write, with this chance (parts per million, drawn
    /// from the simulator's seeded generator), so later reads of those bytes
    /// return what the disk holds (the old bytes, zeros past its end) instead
    /// of what was written. 0, the default, keeps the written bytes in the
    /// cache (the pages were not evicted yet). ADR 0002 §2.3.
    pub fn set_eviction_after_failed_sync(&self, ppm: u32) {
        self.lock().evict_ppm = ppm;
    }

    /// Models a writeback error nobody hears of: when the last open handle
    /// of a file that still has unsynced changes is closed, under Linux
    /// semantics those changes are dropped (the kernel's later writeback
    /// failed and marked the pages clean), so a descriptor opened afterwards
    /// syncs "successfully" without persisting them. On Linux an error is
    /// reported to the descriptions open when it happens (errseq); whether a
    /// later `open` sees it depends on the kernel version and on whether
    /// anyone else saw it first, so the model takes the worst case. Reads
    /// still return the written bytes (the pages stay cached). Off by
    /// default, which keeps every earlier seed's meaning. ADR 0002 §2.4.
    pub fn set_lose_unsynced_on_last_close(&self, on: bool) {
        self.lock().lose_unsynced_on_last_close = on;
    }

    /// Handles open now (opened in the current epoch and not dropped).
    pub fn open_handles(&self) -> u64 {
        self.lock().open_handles
    }

    /// The most handles open at once since the simulator was made or
    /// [`SimStorage::reset_peak_open_handles`] was called.
    pub fn peak_open_handles(&self) -> u64 {
        self.lock().peak_open_handles
    }

    /// Starts the high-water mark again from the handles open now.
    pub fn reset_peak_open_handles(&self) {
        let mut st = self.lock();
        st.peak_open_handles = st.open_handles;
    }

    /// How many times the last handle of a file with unsynced changes was
    /// closed (counted whether or not those changes are then lost).
    pub fn unsynced_last_closes(&self) -> u64 {
        self.lock().unsynced_last_closes
    }

    /// Sets (or removes) the simulated disk size.
    pub fn set_capacity(&self, capacity: Option<u64>) {
        self.lock().config.capacity = capacity;
    }

    /// Fails exactly the operation with this trace index.
    pub fn fail_at(&self, index: u64, mode: FaultMode) {
        self.fail_at_with(index, Fault::io(mode));
    }

    pub fn fail_at_with(&self, index: u64, fault: Fault) {
        self.lock().faults.fail_at(index, fault);
    }

    /// Fails the next `times` operations that match, after letting `skip` matching ones pass.
    pub fn fail_when(&self, matcher: OpMatcher, fault: Fault, skip: u32, times: u32) {
        self.lock().faults.fail_when(matcher, fault, skip, times);
    }

    pub fn set_fault_plan(&self, plan: Option<FaultPlan>) {
        self.lock().faults.set_plan(plan);
    }

    /// Stops the machine after the call with trace index `index`: every later
    /// call fails with EIO, has no effect and is not traced, as if the process
    /// or the machine died right there. The next `crash` lifts it. This is how
    /// the crash-point explorer crashes "right after operation i" while the
    /// code under test is in the middle of a request.
    pub fn halt_after(&self, index: Option<u64>) {
        self.lock().halt_after = index;
    }

    /// Removes every fault rule and plan.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Crashes the process or the machine. The trace records no entry: a crash
    /// is not a storage call (the epoch it starts is what a stale handle meets).
    pub fn crash(&self, crash: Crash) {
        let mut st = self.lock();
        st.epoch += 1;
        st.halt_after = None;
        // The process that held the handles is gone: so are its descriptors.
        st.handles.clear();
        st.open_handles = 0;
        match crash {
            Crash::Process => st.fs.collect_garbage(false),
            Crash::PowerLoss => st.fs.power_loss(None),
            Crash::PowerLossPartial { seed } => {
                let mut rng = SimRng::new(seed);
                st.fs.power_loss(Some(&mut rng));
            }
        }
    }

    pub fn trace(&self) -> Vec<TraceEntry> {
        self.lock().trace.clone()
    }

    /// Number of operations so far (the index the next one will get).
    pub fn op_count(&self) -> u64 {
        self.lock().trace.len() as u64
    }

    /// FNV-1a over the rendered trace: equal hashes mean equal traces (for all
    /// practical purposes), and the value is stable across platforms.
    pub fn trace_hash(&self) -> u64 {
        schedule::trace_hash(self.lock().trace.iter())
    }

    /// Every path and its contents as the page cache sees them.
    pub fn cached_view(&self) -> BTreeMap<String, NodeView> {
        self.lock().fs.view(false)
    }

    /// Every path and its contents as they would be after a power loss now.
    pub fn durable_view(&self) -> BTreeMap<String, NodeView> {
        self.lock().fs.view(true)
    }

    /// Runs one path-addressed call with tracing and fault handling. `body`
    /// performs the effect; `on_failed_sync` is what a failed sync does under
    /// Linux semantics (drop dirty state).
    fn path_op<T>(
        &self,
        kind: OpKind,
        path: &Path,
        target: Option<&Path>,
        body: impl FnOnce(&mut SimState, &[String], Option<&[String]>) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.lock();
        let parts = components(kind, path);
        let target_parts = target.map(|t| components(kind, t)).transpose();
        let shown = parts
            .as_deref()
            .map_or_else(|_| path.display().to_string(), display);
        let shown_target = match (&target_parts, target) {
            (Ok(Some(t)), _) => Some(display(t)),
            (_, Some(t)) => Some(t.display().to_string()),
            _ => None,
        };
        let (slot, plan) = st.begin(kind, &shown, shown_target);
        let result = (|| {
            let parts = parts?;
            let target_parts = target_parts?;
            match plan {
                Plan::Halted => Err(halted(kind, path)),
                Plan::Run => body(&mut st, &parts, target_parts.as_deref()),
                Plan::Fail(fault) => match fault.mode {
                    FaultMode::After => {
                        body(&mut st, &parts, target_parts.as_deref())?;
                        Err(injected(kind, path, fault))
                    }
                    FaultMode::Before | FaultMode::TornWrite => {
                        // The injected error decides the result in both semantics;
                        // under Linux's, a failed sync also drops dirty state.
                        if kind == OpKind::SyncDir
                            && st.linux()
                            && let Ok(ino) = st.fs.resolve(&parts)
                        {
                            st.fs.drop_dir_dirty(ino);
                        }
                        Err(injected(kind, path, fault))
                    }
                },
            }
        })();
        st.end(slot, result)
    }
}

/// An open simulated file: an inode number plus the epoch it was opened in.
#[derive(Debug)]
struct SimFile {
    sim: SimStorage,
    ino: Ino,
    epoch: u64,
    path: PathBuf,
    shown: String,
    writable: bool,
}

impl SimFile {
    /// Runs one handle call with tracing, epoch check and fault handling.
    fn file_op<T>(
        &self,
        kind: OpKind,
        body: impl FnOnce(&mut SimState, Option<Fault>) -> std::result::Result<T, ErrorKind>,
    ) -> Result<T> {
        let mut st = self.sim.lock();
        let (slot, plan) = st.begin(kind, &self.shown, None);
        let result = if matches!(plan, Plan::Halted) {
            Err(halted(kind, &self.path))
        } else if st.epoch != self.epoch {
            Err(StorageError::new(kind, &self.path, ErrorKind::BadHandle)
                .with_detail("handle opened before a crash"))
        } else if kind.is_mutation() && kind != OpKind::SyncFile && !self.writable {
            Err(StorageError::new(kind, &self.path, ErrorKind::BadHandle)
                .with_detail("handle is read-only"))
        } else {
            let fault = match plan {
                Plan::Run | Plan::Halted => None,
                Plan::Fail(f) => Some(f),
            };
            match body(&mut st, fault) {
                Ok(v) => match fault {
                    Some(f) => Err(injected(kind, &self.path, f)),
                    None => Ok(v),
                },
                Err(k) => Err(StorageError::new(kind, &self.path, k)),
            }
        };
        st.end(slot, result)
    }

    /// Writes `data` at `offset` (or at the end when `None`) under `fault`.
    fn write_common(&self, kind: OpKind, offset: Option<u64>, data: &[u8]) -> Result<u64> {
        let ino = self.ino;
        let mut torn_err = None;
        let r = self.file_op(kind, |st, fault| {
            let at = match offset {
                Some(o) => o,
                None => st.fs.file(ino)?.cached.len() as u64,
            };
            let len = match fault.map(|f| f.mode) {
                Some(FaultMode::Before) => {
                    return Err(fault.map_or(ErrorKind::Io, |f| f.error.kind()));
                }
                Some(FaultMode::TornWrite) => {
                    torn_err = fault;
                    st.rng.below(data.len() as u64) as usize
                }
                Some(FaultMode::After) | None => data.len(),
            };
            let file = st.fs.file(ino)?;
            let growth = (at + len as u64).saturating_sub(file.cached.len() as u64);
            st.check_capacity(growth)?;
            st.fs.file_mut(ino)?.write(at, &data[..len])?;
            Ok(at)
        });
        if let (Err(e), Some(f)) = (&r, torn_err) {
            // Keep the message honest: the prefix landed.
            return Err(e
                .clone()
                .with_detail(format!("injected fault ({}): prefix written", f.mode)));
        }
        r
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = self.sim.lock();
        if st.epoch != self.epoch {
            // Closed already, by the crash that ended its epoch.
            return;
        }
        st.open_handles = st.open_handles.saturating_sub(1);
        let last = match st.handles.get_mut(&self.ino) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                st.handles.remove(&self.ino);
                true
            }
            None => false,
        };
        if !last {
            return;
        }
        let linux = st.linux();
        let lose = st.lose_unsynced_on_last_close;
        if let Ok(file) = st.fs.file_mut(self.ino)
            && file.is_dirty()
        {
            if lose && linux {
                file.drop_dirty();
            }
            st.unsynced_last_closes += 1;
        }
    }
}

impl DurableFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let ino = self.ino;
        self.file_op(OpKind::Read, |st, fault| {
            if let Some(f) = fault.filter(|f| f.mode != FaultMode::After) {
                return Err(f.error.kind());
            }
            let data = &st.fs.file(ino)?.cached;
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            if let Some(entry) = st.trace.last_mut() {
                entry.bytes = n as u64;
            }
            Ok(n)
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_common(OpKind::Write, Some(offset), data)
            .map(|_| ())
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[std::io::IoSlice<'_>]) -> Result<()> {
        // One write of the concatenation: the same trace entry, the same
        // torn-write and power-loss outcomes as `write_at`.
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.write_common(OpKind::Write, Some(offset), &all)
            .map(|_| ())
    }

    fn append(&self, data: &[u8]) -> Result<u64> {
        self.write_common(OpKind::Append, None, data)
    }

    fn len(&self) -> Result<u64> {
        let ino = self.ino;
        self.file_op(OpKind::Len, |st, fault| {
            if let Some(f) = fault.filter(|f| f.mode != FaultMode::After) {
                return Err(f.error.kind());
            }
            Ok(st.fs.file(ino)?.cached.len() as u64)
        })
    }

    fn truncate(&self, len: u64) -> Result<()> {
        let ino = self.ino;
        self.file_op(OpKind::Truncate, |st, fault| {
            if let Some(f) = fault.filter(|f| f.mode != FaultMode::After) {
                return Err(f.error.kind());
            }
            let cur = st.fs.file(ino)?.cached.len() as u64;
            st.check_capacity(len.saturating_sub(cur))?;
            st.fs.file_mut(ino)?.truncate(len)
        })
    }

    fn sync(&self) -> Result<()> {
        let ino = self.ino;
        self.file_op(OpKind::SyncFile, |st, fault| {
            let linux = st.linux();
            let failed = matches!(
                fault.map(|f| f.mode),
                Some(FaultMode::Before | FaultMode::TornWrite)
            );
            // Drawn only when eviction is modelled, so traces without it are unchanged.
            let evict = failed && linux && st.evict_ppm > 0 && {
                let ppm = st.evict_ppm;
                st.rng.chance_ppm(ppm)
            };
            let file = st.fs.file_mut(ino)?;
            if !failed {
                file.flush();
                return Ok(());
            }
            if evict {
                file.evict_dirty();
            } else if linux {
                file.drop_dirty();
            }
            Err(fault.map_or(ErrorKind::Io, |f| f.error.kind()))
        })
    }
}

impl DurableStorage for SimStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Box<dyn DurableFile>> {
        let (ino, epoch, shown) = self.path_op(OpKind::Open, path, None, |st, parts, _| {
            let err = |k| StorageError::new(OpKind::Open, path, k);
            let (parent, name) = st.fs.resolve_parent(parts).map_err(err)?;
            let existing = st.fs.dir(parent).map_err(err)?.cached.get(name).copied();
            let ino = match (existing, mode) {
                (Some(_), OpenMode::CreateNew) => return Err(err(ErrorKind::AlreadyExists)),
                (Some(ino), _) => {
                    if matches!(st.fs.get(ino), Some(Inode::Dir(_))) {
                        return Err(err(ErrorKind::IsADirectory));
                    }
                    ino
                }
                (None, OpenMode::Read | OpenMode::ReadWrite) => {
                    return Err(err(ErrorKind::NotFound));
                }
                (None, OpenMode::CreateNew | OpenMode::CreateOrOpen) => {
                    let ino = st.fs.alloc(Inode::File(FileNode::default()));
                    st.fs.dir_mut(parent).map_err(err)?.set(name, Some(ino));
                    ino
                }
            };
            Ok((ino, st.epoch, display(parts)))
        })?;
        {
            // Counted only once a handle is returned (a creating `open`
            // failing after its effect leaves the name but no handle).
            let mut st = self.lock();
            if st.epoch == epoch {
                *st.handles.entry(ino).or_insert(0) += 1;
                st.open_handles += 1;
                st.peak_open_handles = st.peak_open_handles.max(st.open_handles);
            }
        }
        Ok(Box::new(SimFile {
            sim: self.clone(),
            ino,
            epoch,
            path: path.to_path_buf(),
            shown,
            writable: mode.writable(),
        }))
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.path_op(OpKind::CreateDir, path, None, |st, parts, _| {
            let err = |k| StorageError::new(OpKind::CreateDir, path, k);
            let mut cur = fs::ROOT;
            for (i, part) in parts.iter().enumerate() {
                let dir = st.fs.dir(cur).map_err(err)?;
                cur = match dir.cached.get(part).copied() {
                    Some(child) => match st.fs.get(child) {
                        Some(Inode::Dir(_)) => child,
                        _ if i + 1 == parts.len() => return Err(err(ErrorKind::AlreadyExists)),
                        _ => return Err(err(ErrorKind::NotADirectory)),
                    },
                    None => {
                        let child = st.fs.alloc(Inode::Dir(DirNode::default()));
                        st.fs.dir_mut(cur).map_err(err)?.set(part, Some(child));
                        child
                    }
                };
            }
            Ok(())
        })
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.path_op(OpKind::ListDir, path, None, |st, parts, _| {
            let err = |k| StorageError::new(OpKind::ListDir, path, k);
            let ino = st.fs.resolve(parts).map_err(err)?;
            Ok(st
                .fs
                .dir(ino)
                .map_err(err)?
                .cached
                .keys()
                .cloned()
                .collect())
        })
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.path_op(OpKind::RemoveFile, path, None, |st, parts, _| {
            let err = |k| StorageError::new(OpKind::RemoveFile, path, k);
            let (parent, name) = st.fs.resolve_parent(parts).map_err(err)?;
            let ino = *st
                .fs
                .dir(parent)
                .map_err(err)?
                .cached
                .get(name)
                .ok_or(err(ErrorKind::NotFound))?;
            if matches!(st.fs.get(ino), Some(Inode::Dir(_))) {
                return Err(err(ErrorKind::IsADirectory));
            }
            st.fs.dir_mut(parent).map_err(err)?.set(name, None);
            Ok(())
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.path_op(OpKind::Rename, from, Some(to), |st, src, dst| {
            let err = |k| StorageError::new(OpKind::Rename, from, k);
            let dst = dst.ok_or(err(ErrorKind::InvalidPath))?;
            // Linux looks up both parents before either entry.
            let (sp, sname) = st.fs.resolve_parent(src).map_err(err)?;
            let (dp, dname) = st.fs.resolve_parent(dst).map_err(err)?;
            let ino = *st
                .fs
                .dir(sp)
                .map_err(err)?
                .cached
                .get(sname)
                .ok_or(err(ErrorKind::NotFound))?;
            if src == dst {
                return Ok(());
            }
            // The target is an ancestor of the source: never empty (ENOTEMPTY).
            if src.starts_with(dst) {
                return Err(err(ErrorKind::DirectoryNotEmpty));
            }
            // Two names of one file: rename(2) does nothing.
            if st.fs.dir(dp).map_err(err)?.cached.get(dname) == Some(&ino) {
                return Ok(());
            }
            let moving_dir = matches!(st.fs.get(ino), Some(Inode::Dir(_)));
            if moving_dir && dst.starts_with(src) {
                return Err(err(ErrorKind::InvalidPath));
            }
            if let Some(existing) = st.fs.dir(dp).map_err(err)?.cached.get(dname).copied() {
                match (moving_dir, st.fs.get(existing)) {
                    (false, Some(Inode::Dir(_))) => return Err(err(ErrorKind::IsADirectory)),
                    (true, Some(Inode::File(_))) => return Err(err(ErrorKind::NotADirectory)),
                    (true, Some(Inode::Dir(d))) if !d.cached.is_empty() => {
                        return Err(err(ErrorKind::DirectoryNotEmpty));
                    }
                    _ => {}
                }
            }
            st.fs.dir_mut(sp).map_err(err)?.set(sname, None);
            st.fs.dir_mut(dp).map_err(err)?.set(dname, Some(ino));
            Ok(())
        })
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.path_op(OpKind::RemoveDirAll, path, None, |st, parts, _| {
            let err = |k| StorageError::new(OpKind::RemoveDirAll, path, k);
            let (parent, name) = st.fs.resolve_parent(parts).map_err(err)?;
            let ino = *st
                .fs
                .dir(parent)
                .map_err(err)?
                .cached
                .get(name)
                .ok_or(err(ErrorKind::NotFound))?;
            st.fs.clear_tree(ino).map_err(err)?;
            st.fs.dir_mut(parent).map_err(err)?.set(name, None);
            Ok(())
        })
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        self.path_op(OpKind::SyncDir, path, None, |st, parts, _| {
            let err = |k| StorageError::new(OpKind::SyncDir, path, k);
            let ino = st.fs.resolve(parts).map_err(err)?;
            st.fs.flush_dir(ino).map_err(err)?;
            Ok(())
        })
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.path_op(OpKind::Exists, path, None, |st, parts, _| {
            match st.fs.resolve(parts) {
                Ok(_) => Ok(true),
                Err(ErrorKind::NotFound) => Ok(false),
                Err(k) => Err(StorageError::new(OpKind::Exists, path, k)),
            }
        })
    }
}
