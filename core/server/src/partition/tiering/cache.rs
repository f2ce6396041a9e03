//! The bounded cache of remote object bytes that polls of tiered segments
//! read through.
//!
//! Invariants:
//! - An object is read in aligned blocks of `block` bytes, each fetched by one
//!   ranged get (`RemoteStore::get_range`), never whole: a poll of a few
//!   messages from a 64 MiB segment fetches one or two blocks.
//! - The cache holds at most `capacity` bytes of blocks (one block more only
//!   while a single read needs it); the least recently used block goes first.
//! - Remote keys are never reused (every upload attempt has a fresh key,
//!   ADR 0027), so a cached block can never be stale: it is either the
//!   object's bytes or the object is gone, and then nobody asks for it (reads
//!   name only recorded, live segments). Dropped objects' blocks simply age
//!   out; `forget` frees them early.
//! - Nothing here decides what is valid: the log checks every batch read
//!   through the cache by its CRC32C, as it checks one read from disk.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use sluice_remote::{RemoteKey, RemoteStore};

/// Default block: large enough that a poll of 1,000 small messages is one
/// or two gets, small enough that a cache miss is cheap.
pub const DEFAULT_BLOCK_BYTES: u64 = 1 << 20;
/// Default capacity.
pub const DEFAULT_CACHE_BYTES: u64 = 256 << 20;

/// What the cache has done, for `/metrics` and `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheFigures {
    pub hits: u64,
    pub misses: u64,
    pub bytes: u64,
    pub fetched_bytes: u64,
}

#[derive(Debug, Default)]
struct Blocks {
    /// (key, block number) → (bytes, last use).
    map: BTreeMap<(RemoteKey, u64), (Bytes, u64)>,
    /// Last use → entry, the oldest first.
    by_use: BTreeMap<u64, (RemoteKey, u64)>,
    bytes: u64,
    clock: u64,
}

impl Blocks {
    fn touch(&mut self, id: &(RemoteKey, u64)) -> Option<Bytes> {
        self.clock += 1;
        let clock = self.clock;
        let (bytes, used) = self.map.get_mut(id)?;
        self.by_use.remove(used);
        *used = clock;
        self.by_use.insert(clock, id.clone());
        Some(bytes.clone())
    }

    fn insert(&mut self, id: (RemoteKey, u64), bytes: Bytes, capacity: u64) {
        self.clock += 1;
        let len = bytes.len() as u64;
        if let Some((old, used)) = self.map.insert(id.clone(), (bytes, self.clock)) {
            self.bytes -= old.len() as u64;
            self.by_use.remove(&used);
        }
        self.by_use.insert(self.clock, id);
        self.bytes += len;
        while self.bytes > capacity && self.map.len() > 1 {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((gone, _)) = self.map.remove(&oldest) {
                self.bytes -= gone.len() as u64;
            }
        }
    }
}

/// Blocks of remote objects, shared by every partition of the engine.
#[derive(Debug)]
pub struct BlockCache {
    block: u64,
    capacity: u64,
    blocks: Mutex<Blocks>,
    hits: AtomicU64,
    misses: AtomicU64,
    fetched: AtomicU64,
}

impl BlockCache {
    pub fn new(block: u64, capacity: u64) -> BlockCache {
        BlockCache {
            block: block.max(1),
            capacity,
            blocks: Mutex::new(Blocks::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        // A panic while holding the lock cannot leave the maps half-changed
        // in a way that matters: they are a cache.
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Block `n` of `key` (an object of `len` bytes), from the cache or one
    /// ranged get.
    fn block_of(
        &self,
        store: &dyn RemoteStore,
        key: &RemoteKey,
        len: u64,
        n: u64,
    ) -> sluice_remote::Result<Bytes> {
        let id = (key.clone(), n);
        if let Some(bytes) = self.lock().touch(&id) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let start = n * self.block;
        let end = (start + self.block).min(len);
        let bytes = store.get_range(key, start..end)?;
        self.fetched
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.lock().insert(id, bytes.clone(), self.capacity);
        Ok(bytes)
    }

    /// Reads up to `buf.len()` bytes of `key` (an object of `len` bytes) at
    /// `position`; fewer only at the object's end.
    pub fn read_at(
        &self,
        store: &dyn RemoteStore,
        key: &RemoteKey,
        len: u64,
        position: u64,
        buf: &mut [u8],
    ) -> sluice_remote::Result<usize> {
        let mut filled = 0usize;
        while filled < buf.len() {
            let at = position + filled as u64;
            if at >= len {
                break;
            }
            let n = at / self.block;
            let block = self.block_of(store, key, len, n)?;
            let within = (at - n * self.block) as usize;
            if within >= block.len() {
                // The store returned less than the recorded size: the
                // caller's checks report it as a short read.
                break;
            }
            let take = (block.len() - within).min(buf.len() - filled);
            buf[filled..filled + take].copy_from_slice(&block[within..within + take]);
            filled += take;
        }
        Ok(filled)
    }

    /// The whole object (an index: small), through the blocks.
    pub fn read_all(
        &self,
        store: &dyn RemoteStore,
        key: &RemoteKey,
        len: u64,
    ) -> sluice_remote::Result<Vec<u8>> {
        let size = usize::try_from(len).unwrap_or(usize::MAX);
        let mut bytes = vec![0u8; size];
        let n = self.read_at(store, key, len, 0, &mut bytes)?;
        bytes.truncate(n);
        Ok(bytes)
    }

    /// Drops every cached block of `key` (its object was deleted).
    pub fn forget(&self, key: &RemoteKey) {
        let mut blocks = self.lock();
        let ids: Vec<(RemoteKey, u64)> = blocks
            .map
            .range((key.clone(), 0)..=(key.clone(), u64::MAX))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some((gone, used)) = blocks.map.remove(&id) {
                blocks.bytes -= gone.len() as u64;
                blocks.by_use.remove(&used);
            }
        }
    }

    pub fn figures(&self) -> CacheFigures {
        CacheFigures {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.lock().bytes,
            fetched_bytes: self.fetched.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use sluice_remote::{SimRemote, SimRemoteConfig};

    fn store_with(key: &RemoteKey, bytes: &[u8]) -> SimRemote {
        let store = SimRemote::new(SimRemoteConfig::default());
        store.put_new(key, Bytes::copy_from_slice(bytes)).unwrap();
        store
    }

    #[test]
    fn given_an_object_when_read_at_any_range_then_the_bytes_match_and_only_touched_blocks_are_fetched()
     {
        let key = RemoteKey::new("i/obj").unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let store = store_with(&key, &data);
        let cache = BlockCache::new(1024, 1 << 20);
        for (pos, len) in [
            (0, 10),
            (1000, 100),
            (1020, 10),
            (9_990, 50),
            (5_000, 3_000),
        ] {
            let mut buf = vec![0u8; len];
            let n = cache
                .read_at(&store, &key, data.len() as u64, pos, &mut buf)
                .unwrap();
            let end = (pos as usize + len).min(data.len());
            assert_eq!(&buf[..n], &data[pos as usize..end], "at {pos}+{len}");
        }
        // Blocks 0, 1 (twice), 9, 4..7: 1, 0..=1, 9, 4..=7 = 7 distinct blocks.
        let f = cache.figures();
        assert_eq!(f.misses, 7);
        assert!(f.hits >= 1);
    }

    #[test]
    fn given_a_small_capacity_when_many_blocks_are_read_then_the_cache_stays_bounded_and_evicts_the_oldest()
     {
        let key = RemoteKey::new("i/obj").unwrap();
        let data = vec![7u8; 8 * 1024];
        let store = store_with(&key, &data);
        let cache = BlockCache::new(1024, 3 * 1024);
        let mut buf = [0u8; 1];
        for n in 0..8u64 {
            cache
                .read_at(&store, &key, 8192, n * 1024, &mut buf)
                .unwrap();
        }
        assert_eq!(cache.figures().bytes, 3 * 1024);
        // Block 7 is cached; block 0 was evicted.
        cache
            .read_at(&store, &key, 8192, 7 * 1024, &mut buf)
            .unwrap();
        assert_eq!(cache.figures().misses, 8);
        cache.read_at(&store, &key, 8192, 0, &mut buf).unwrap();
        assert_eq!(cache.figures().misses, 9);
        cache.forget(&key);
        assert_eq!(cache.figures().bytes, 0);
    }
}
