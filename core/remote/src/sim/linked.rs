//! One process, two doors: a `SimRemote` whose client process dies with the
//! simulated disk's, and the other way round.
//!
//! Invariants:
//! - [`Halts`] holds where each door's process dies: a `SimStorage` op index
//!   (the process died right after it) or a `SimRemote` call index. Every
//!   clone of a [`LinkedRemote`] shares one `Halts`, so the world (or the
//!   test) that sets a crash point and the engine that calls the store see
//!   the same one.
//! - Before a remote call: once the disk is past its halt point, the remote
//!   is halted (`SimRemote::halt_now`) and the call never happens. After a
//!   remote call: once the remote is past its halt point, the disk is halted
//!   right after its last operation, so nothing more reaches it. A crash
//!   point drawn on either door is thus one crash of one process (ADR 0026,
//!   "Consequences").
//! - Lifting the halts is the caller's, when it crashes both doors
//!   (`SimStorage::crash`, `SimRemote::crash`) and starts the next process.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use sluice_storage::SimStorage;

use super::SimRemote;
use crate::{ListedObject, RemoteKey, RemoteStore, Result};

/// Where each door's process dies: operations past these indices never happen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Halts {
    /// The disk op after which the process died.
    pub storage: Option<u64>,
    /// The remote call after which the process died.
    pub remote: Option<u64>,
}

/// The store as the engine sees it in a simulation: a `SimRemote` whose
/// process dies with the disk's, and the other way round.
#[derive(Debug, Clone)]
pub struct LinkedRemote {
    remote: SimRemote,
    storage: SimStorage,
    halts: Arc<Mutex<Halts>>,
}

fn lock(m: &Mutex<Halts>) -> MutexGuard<'_, Halts> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl LinkedRemote {
    /// Links `remote` and `storage` through `halts` (shared with every clone
    /// and with whoever sets the crash points).
    pub fn new(remote: &SimRemote, storage: &SimStorage, halts: Arc<Mutex<Halts>>) -> Self {
        LinkedRemote {
            remote: remote.clone(),
            storage: storage.clone(),
            halts,
        }
    }

    /// The process dies right after disk operation `index` (`None`: never),
    /// and stops calling the store with it.
    pub fn halt_storage_after(&self, index: Option<u64>) {
        lock(&self.halts).storage = index;
        self.storage.halt_after(index);
    }

    /// The process dies right after remote call `index`, and stops touching
    /// the disk with it.
    pub fn halt_remote_after(&self, index: Option<u64>) {
        lock(&self.halts).remote = index;
        self.remote.halt_after(index);
    }

    /// Both doors crashed: the next process has no halt point.
    pub fn lift_halts(&self) {
        *lock(&self.halts) = Halts::default();
    }

    /// The disk's process died: this call never happens either.
    fn before(&self) {
        let h = *lock(&self.halts);
        if h.storage.is_some_and(|s| self.storage.op_count() > s) {
            self.remote.halt_now();
        }
    }

    /// The remote's process died right after this call: so does the disk's
    /// (its next operation never happens).
    fn after(&self) {
        let mut h = lock(&self.halts);
        if h.remote.is_some_and(|r| self.remote.op_count() > r) {
            let at = self.storage.op_count().saturating_sub(1);
            if h.storage.is_none_or(|s| s > at) {
                h.storage = Some(at);
                self.storage.halt_after(Some(at));
            }
        }
    }

    fn call<T>(&self, f: impl FnOnce(&SimRemote) -> T) -> T {
        self.before();
        let r = f(&self.remote);
        self.after();
        r
    }
}

impl RemoteStore for LinkedRemote {
    fn put_new(&self, key: &RemoteKey, data: Bytes) -> Result<()> {
        self.call(|r| r.put_new(key, data))
    }

    fn get_range(&self, key: &RemoteKey, range: Range<u64>) -> Result<Bytes> {
        self.call(|r| r.get_range(key, range))
    }

    fn head(&self, key: &RemoteKey) -> Result<u64> {
        self.call(|r| r.head(key))
    }

    fn delete(&self, key: &RemoteKey) -> Result<()> {
        self.call(|r| r.delete(key))
    }

    fn list(&self, prefix: &RemoteKey) -> Result<Vec<ListedObject>> {
        self.call(|r| r.list(prefix))
    }
}
