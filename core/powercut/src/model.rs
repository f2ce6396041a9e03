//! The power-cut file system's state: every node with what the page cache
//! shows (`cached`) and what a power cut keeps (`durable`), by the rules of
//! ADR 0002 (docs/adr/0012-powercut-file-system.md maps them one to one).
//!
//! Invariants, and why they hold:
//! - Writes, truncates, creates, unlinks and renames change only `cached` and
//!   mark what they changed (byte ranges of a file, names of a directory);
//!   only `fsync_file` / `fsync_dir` (or the writeback coins of a partial cut)
//!   move marked changes to `durable`, each for one node only.
//! - The backing directory equals the durable view reachable from the root
//!   after every call returns: each place that changes `durable` also writes
//!   the change under the node's durable path ([`Model::persist_file`],
//!   [`Model::persist_name`]); [`Model::check_backing`] compares the two.
//! - A rename's two names reach `durable` together (a flush of one side
//!   flushes the other; a failed sync that drops one drops the other), as on
//!   the journaling file systems sluice requires (ADR 0002 §4).
//! - Inode numbers are never reused, so a kernel that still holds an inode
//!   from before a cut can never mistake a new node for it.
//! - Nodes no name reaches are kept until the next cut, as the simulator keeps
//!   them, so a partial cut draws its writeback coins over the same nodes in
//!   the same order as `SimStorage` does for the same history.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sluice_storage::sim::SimRng;

use crate::ranges::Ranges;

pub type Ino = u64;
pub const ROOT: Ino = 1;
/// The control file's inode (see `control.rs`); never a node of the tree.
pub const CONTROL: Ino = 2;
const FIRST_INO: Ino = 3;
/// The control file's name in the root directory; no node may take it.
pub const CONTROL_NAME: &str = ".powercut";

/// Why a call failed; `fuse.rs` maps each to its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsError {
    NotFound,
    Exists,
    NotDir,
    IsDir,
    NotEmpty,
    Invalid,
    NoSpace,
    Io,
    Reserved,
}

#[derive(Debug, Clone, Default)]
pub struct FileNode {
    pub cached: Vec<u8>,
    durable: Vec<u8>,
    dirty: Ranges,
    /// A truncate changed the length and no sync has persisted it.
    len_dirty: bool,
}

#[derive(Debug, Clone, Default)]
pub struct DirNode {
    pub cached: BTreeMap<String, Ino>,
    durable: BTreeMap<String, Ino>,
    dirty: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub enum Node {
    File(FileNode),
    Dir(DirNode),
}

/// What a path holds in one view (files with their bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File(Vec<u8>),
    Dir,
}

/// Counters for the control file and the soak's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub cuts: u64,
    pub partial_cuts: u64,
    pub file_syncs: u64,
    pub dir_syncs: u64,
    pub injected_sync_failures: u64,
    pub enospc_refusals: u64,
    /// Unsynced changes (dirty names and dirty files) dropped by cuts.
    pub dropped_changes: u64,
    /// Unsynced changes kept by partial cuts' writeback.
    pub written_back: u64,
    pub backing_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FailRule {
    path: String,
    /// Matching syncs still to pass before one fails.
    skip: u32,
}

#[derive(Debug)]
pub struct Model {
    nodes: BTreeMap<Ino, Node>,
    next_ino: Ino,
    backing: PathBuf,
    fail_rules: Vec<FailRule>,
    enospc: bool,
    pub stats: Stats,
}

impl FileNode {
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), FsError> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::NoSpace)?;
        let (start, stop) = (to_usize(offset)?, to_usize(end)?);
        let old_len = self.cached.len() as u64;
        if self.cached.len() < stop {
            self.cached.resize(stop, 0);
        }
        self.cached[start..stop].copy_from_slice(data);
        // A hole between the old end and `offset` reads as zeros and must
        // reach the disk as zeros.
        self.dirty.insert(old_len.min(offset), end);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> Result<(), FsError> {
        let old_len = self.cached.len() as u64;
        self.cached.resize(to_usize(len)?, 0);
        self.dirty.clip(len);
        if len > old_len {
            self.dirty.insert(old_len, len);
        }
        self.len_dirty = true;
        Ok(())
    }

    fn is_dirty(&self) -> bool {
        self.len_dirty || !self.dirty.is_empty()
    }

    /// Copies the marked changes to `durable`; returns the ranges copied.
    fn flush(&mut self) -> Vec<(u64, u64)> {
        let ranges: Vec<(u64, u64)> = self.dirty.iter().collect();
        if self.len_dirty {
            self.durable.resize(self.cached.len(), 0);
        }
        for &(s, e) in &ranges {
            let (s, e) = (s as usize, (e as usize).min(self.cached.len()));
            if s >= e {
                continue;
            }
            if self.durable.len() < e {
                self.durable.resize(e, 0);
            }
            self.durable[s..e].copy_from_slice(&self.cached[s..e]);
        }
        self.drop_dirty();
        ranges
    }

    fn drop_dirty(&mut self) {
        self.dirty.clear();
        self.len_dirty = false;
    }
}

fn to_usize(v: u64) -> Result<usize, FsError> {
    usize::try_from(v).map_err(|_| FsError::NoSpace)
}

fn join(prefix: &str, name: &str) -> String {
    format!("{prefix}/{name}")
}

impl Model {
    /// A model whose cached and durable views are both what `backing` holds.
    pub fn load(backing: &Path) -> io::Result<Model> {
        let mut m = Model {
            nodes: BTreeMap::new(),
            next_ino: FIRST_INO,
            backing: backing.to_path_buf(),
            fail_rules: Vec::new(),
            enospc: false,
            stats: Stats::default(),
        };
        m.nodes.insert(ROOT, Node::Dir(DirNode::default()));
        m.load_dir(ROOT, backing)?;
        Ok(m)
    }

    fn load_dir(&mut self, ino: Ino, dir: &Path) -> io::Result<()> {
        let mut names: Vec<(String, PathBuf, bool)> = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().into_string().map_err(|n| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("non-UTF-8 name {n:?} in the backing directory"),
                )
            })?;
            names.push((name, entry.path(), entry.file_type()?.is_dir()));
        }
        names.sort();
        for (name, path, is_dir) in names {
            if ino == ROOT && name == CONTROL_NAME {
                continue;
            }
            let child = if is_dir {
                let child = self.alloc(Node::Dir(DirNode::default()));
                self.load_dir(child, &path)?;
                child
            } else {
                let bytes = fs::read(&path)?;
                self.alloc(Node::File(FileNode {
                    cached: bytes.clone(),
                    durable: bytes,
                    ..FileNode::default()
                }))
            };
            if let Some(Node::Dir(d)) = self.nodes.get_mut(&ino) {
                d.cached.insert(name.clone(), child);
                d.durable.insert(name, child);
            }
        }
        Ok(())
    }

    fn alloc(&mut self, node: Node) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    pub fn node(&self, ino: Ino) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn dir(&self, ino: Ino) -> Result<&DirNode, FsError> {
        match self.nodes.get(&ino) {
            Some(Node::Dir(d)) => Ok(d),
            Some(Node::File(_)) => Err(FsError::NotDir),
            None => Err(FsError::NotFound),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut DirNode, FsError> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(d)) => Ok(d),
            Some(Node::File(_)) => Err(FsError::NotDir),
            None => Err(FsError::NotFound),
        }
    }

    pub fn file(&self, ino: Ino) -> Result<&FileNode, FsError> {
        match self.nodes.get(&ino) {
            Some(Node::File(f)) => Ok(f),
            Some(Node::Dir(_)) => Err(FsError::IsDir),
            None => Err(FsError::NotFound),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut FileNode, FsError> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(f)) => Ok(f),
            Some(Node::Dir(_)) => Err(FsError::IsDir),
            None => Err(FsError::NotFound),
        }
    }

    pub fn lookup(&self, parent: Ino, name: &str) -> Result<Ino, FsError> {
        self.dir(parent)?
            .cached
            .get(name)
            .copied()
            .ok_or(FsError::NotFound)
    }

    fn set_name(&mut self, dir: Ino, name: &str, ino: Option<Ino>) -> Result<(), FsError> {
        let d = self.dir_mut(dir)?;
        match ino {
            Some(i) => d.cached.insert(name.to_string(), i),
            None => d.cached.remove(name),
        };
        d.dirty.insert(name.to_string());
        Ok(())
    }

    fn check_new_name(&self, parent: Ino, name: &str) -> Result<(), FsError> {
        if parent == ROOT && name == CONTROL_NAME {
            return Err(FsError::Reserved);
        }
        if self.dir(parent)?.cached.contains_key(name) {
            return Err(FsError::Exists);
        }
        if self.enospc {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    fn refuse_growth(&mut self) -> Result<(), FsError> {
        if self.enospc {
            self.stats.enospc_refusals += 1;
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    pub fn create(&mut self, parent: Ino, name: &str) -> Result<Ino, FsError> {
        self.check_new_name(parent, name)
            .inspect_err(|e| self.count_refusal(*e))?;
        let ino = self.alloc(Node::File(FileNode::default()));
        self.set_name(parent, name, Some(ino))?;
        Ok(ino)
    }

    pub fn mkdir(&mut self, parent: Ino, name: &str) -> Result<Ino, FsError> {
        self.check_new_name(parent, name)
            .inspect_err(|e| self.count_refusal(*e))?;
        let ino = self.alloc(Node::Dir(DirNode::default()));
        self.set_name(parent, name, Some(ino))?;
        Ok(ino)
    }

    fn count_refusal(&mut self, e: FsError) {
        if e == FsError::NoSpace {
            self.stats.enospc_refusals += 1;
        }
    }

    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let len = self.file(ino)?.cached.len() as u64;
        if !data.is_empty() && offset.saturating_add(data.len() as u64) > len {
            self.refuse_growth()?;
        }
        self.file_mut(ino)?.write(offset, data)
    }

    pub fn set_len(&mut self, ino: Ino, len: u64) -> Result<(), FsError> {
        if len > self.file(ino)?.cached.len() as u64 {
            self.refuse_growth()?;
        }
        self.file_mut(ino)?.set_len(len)
    }

    pub fn unlink(&mut self, parent: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        if matches!(self.nodes.get(&ino), Some(Node::Dir(_))) {
            return Err(FsError::IsDir);
        }
        self.set_name(parent, name, None)
    }

    pub fn rmdir(&mut self, parent: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.lookup(parent, name)?;
        if !self.dir(ino)?.cached.is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.set_name(parent, name, None)
    }

    /// rename(2) with flags 0 or `RENAME_NOREPLACE` (`no_replace`).
    pub fn rename(
        &mut self,
        from_dir: Ino,
        from: &str,
        to_dir: Ino,
        to: &str,
        no_replace: bool,
    ) -> Result<(), FsError> {
        self.dir(to_dir)?;
        let ino = self.lookup(from_dir, from)?;
        if (to_dir == ROOT && to == CONTROL_NAME) || (from_dir == ROOT && from == CONTROL_NAME) {
            return Err(FsError::Reserved);
        }
        let moving_dir = matches!(self.nodes.get(&ino), Some(Node::Dir(_)));
        if let Some(existing) = self.dir(to_dir)?.cached.get(to).copied() {
            if existing == ino {
                return Ok(());
            }
            if no_replace {
                return Err(FsError::Exists);
            }
            match (moving_dir, self.nodes.get(&existing)) {
                (false, Some(Node::Dir(_))) => return Err(FsError::IsDir),
                (true, Some(Node::File(_))) => return Err(FsError::NotDir),
                (true, Some(Node::Dir(d))) if !d.cached.is_empty() => {
                    return Err(FsError::NotEmpty);
                }
                _ => {}
            }
        }
        if moving_dir && self.is_ancestor(ino, to_dir) {
            return Err(FsError::Invalid);
        }
        self.set_name(from_dir, from, None)?;
        self.set_name(to_dir, to, Some(ino))
    }

    /// Whether `dir` is `ancestor` or lies below it in the cached tree.
    fn is_ancestor(&self, ancestor: Ino, dir: Ino) -> bool {
        let mut stack = vec![ancestor];
        let mut seen = BTreeSet::new();
        while let Some(i) = stack.pop() {
            if i == dir {
                return true;
            }
            if !seen.insert(i) {
                continue;
            }
            if let Some(Node::Dir(d)) = self.nodes.get(&i) {
                stack.extend(d.cached.values().copied());
            }
        }
        false
    }

    // ---- syncs -----------------------------------------------------------

    /// Arms a failure: the `nth` (1-based) next sync of `path` fails with EIO.
    pub fn fail_sync(&mut self, path: &str, nth: u32) {
        self.fail_rules.push(FailRule {
            path: normalise(path),
            skip: nth.saturating_sub(1),
        });
    }

    pub fn set_enospc(&mut self, on: bool) {
        self.enospc = on;
    }

    /// Consults the failure rules for a sync of `ino`, in the order they were
    /// armed: each matching rule still counting down counts this sync and the
    /// next is asked; the first whose count is done fires (and is used up),
    /// and the rules after it do not see this sync (the simulator's order).
    fn sync_fails(&mut self, ino: Ino) -> bool {
        let Some(path) = self.cached_path(ino) else {
            return false;
        };
        let mut fired = None;
        for (i, rule) in self.fail_rules.iter_mut().enumerate() {
            if rule.path != path {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            fired = Some(i);
            break;
        }
        let Some(i) = fired else {
            return false;
        };
        self.fail_rules.remove(i);
        self.stats.injected_sync_failures += 1;
        true
    }

    /// fsync/fdatasync of a file: its bytes and length, never its name.
    pub fn fsync_file(&mut self, ino: Ino) -> Result<(), FsError> {
        self.file(ino)?;
        self.stats.file_syncs += 1;
        if self.sync_fails(ino) {
            // Linux after fsyncgate: the pages are marked clean all the same.
            self.file_mut(ino)?.drop_dirty();
            return Err(FsError::Io);
        }
        let ranges = self.file_mut(ino)?.flush();
        self.persist_file(ino, &ranges)
    }

    /// fsync of a directory: its own names, nothing below or above it.
    pub fn fsync_dir(&mut self, ino: Ino) -> Result<(), FsError> {
        self.dir(ino)?;
        self.stats.dir_syncs += 1;
        if self.sync_fails(ino) {
            let names: Vec<String> = self.dir(ino)?.dirty.iter().cloned().collect();
            for name in names {
                if let Some((pd, pn)) = self.rename_partner(ino, &name)
                    && let Ok(d) = self.dir_mut(pd)
                {
                    d.dirty.remove(&pn);
                }
            }
            self.dir_mut(ino)?.dirty.clear();
            return Err(FsError::Io);
        }
        let names: Vec<String> = std::mem::take(&mut self.dir_mut(ino)?.dirty)
            .into_iter()
            .collect();
        let mut result = Ok(());
        for name in names {
            if let Err(e) = self.flush_name(ino, &name) {
                result = Err(e);
            }
        }
        result
    }

    /// The other name of a rename not yet durable: for a name whose cached
    /// node differs from its durable one, where that node's durable name is
    /// (if it was renamed in) or where its cached name is (renamed away).
    fn rename_partner(&self, dir: Ino, name: &str) -> Option<(Ino, String)> {
        let d = self.dir(dir).ok()?;
        let (c, du) = (d.cached.get(name).copied(), d.durable.get(name).copied());
        let (node, want_durable_side) = match (c, du) {
            (a, b) if a == b => return None,
            (Some(n), _) => (n, true),
            (None, Some(n)) => (n, false),
            (None, None) => return None,
        };
        for (&other, n) in &self.nodes {
            let Node::Dir(od) = n else { continue };
            let side = if want_durable_side {
                &od.durable
            } else {
                &od.cached
            };
            for (oname, &oino) in side {
                if oino != node || (other == dir && oname == name) {
                    continue;
                }
                let opposite = if want_durable_side {
                    od.cached.get(oname)
                } else {
                    od.durable.get(oname)
                };
                if opposite != Some(&node) {
                    return Some((other, oname.clone()));
                }
            }
        }
        None
    }

    /// Makes `name` in `dir` durable, with its rename partner.
    fn flush_name(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let partner = self.rename_partner(dir, name);
        let mut result = self.flush_one_name(dir, name);
        if let Some((pd, pn)) = partner {
            let r = self.flush_one_name(pd, &pn);
            result = result.and(r);
        }
        result
    }

    fn flush_one_name(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let d = self.dir_mut(dir)?;
        d.dirty.remove(name);
        match d.cached.get(name).copied() {
            Some(i) => d.durable.insert(name.to_string(), i),
            None => d.durable.remove(name),
        };
        self.persist_name(dir, name)
    }

    // ---- the backing directory --------------------------------------------

    /// Durable path ("/a/b", "" for the root) of every node the durable view
    /// reaches.
    fn durable_paths(&self) -> BTreeMap<Ino, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(ROOT, String::new())];
        while let Some((ino, path)) = stack.pop() {
            if out.contains_key(&ino) {
                continue;
            }
            if let Some(Node::Dir(d)) = self.nodes.get(&ino) {
                for (name, &child) in &d.durable {
                    stack.push((child, join(&path, name)));
                }
            }
            out.insert(ino, path);
        }
        out
    }

    /// The path ("/a/b") the cached view reaches `ino` by.
    pub fn cached_path(&self, ino: Ino) -> Option<String> {
        let mut stack = vec![(ROOT, String::new())];
        let mut seen = BTreeSet::new();
        while let Some((i, path)) = stack.pop() {
            if i == ino {
                return Some(if path.is_empty() { "/".into() } else { path });
            }
            if !seen.insert(i) {
                continue;
            }
            if let Some(Node::Dir(d)) = self.nodes.get(&i) {
                for (name, &child) in &d.cached {
                    stack.push((child, join(&path, name)));
                }
            }
        }
        None
    }

    fn backing_path(&self, rel: &str) -> PathBuf {
        self.backing.join(rel.trim_start_matches('/'))
    }

    fn backing_failed(&mut self, what: &str, e: &io::Error) -> FsError {
        self.stats.backing_errors += 1;
        tracing::error!(what, error = %e, "powercut: the backing directory could not follow the durable view");
        FsError::Io
    }

    /// Writes a file's newly durable ranges and length under its durable path.
    fn persist_file(&mut self, ino: Ino, ranges: &[(u64, u64)]) -> Result<(), FsError> {
        let Some(rel) = self.durable_paths().get(&ino).cloned() else {
            // No durable name yet: the bytes reach the backing directory with
            // the name (see `persist_name`).
            return Ok(());
        };
        let path = self.backing_path(&rel);
        let durable = &self.file(ino)?.durable;
        let r = (|| {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
            f.set_len(durable.len() as u64)?;
            for &(s, e) in ranges {
                let (s, e) = (s as usize, (e as usize).min(durable.len()));
                if s < e {
                    f.write_all_at(&durable[s..e], s as u64)?;
                }
            }
            Ok::<(), io::Error>(())
        })();
        r.map_err(|e| self.backing_failed(&rel, &e))
    }

    /// Makes the backing directory hold `dir`'s durable entry `name` (or not).
    fn persist_name(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let paths = self.durable_paths();
        let Some(dir_rel) = paths.get(&dir) else {
            return Ok(());
        };
        let rel = join(dir_rel, name);
        let target = self.backing_path(&rel);
        let child = self.dir(dir)?.durable.get(name).copied();
        let r = (|| {
            match fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&target)?,
                Ok(_) => fs::remove_file(&target)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            match child {
                Some(c) => self.materialise(c, &target, &mut BTreeSet::new()),
                None => Ok(()),
            }
        })();
        r.map_err(|e| self.backing_failed(&rel, &e))
    }

    fn materialise(&self, ino: Ino, at: &Path, on_path: &mut BTreeSet<Ino>) -> io::Result<()> {
        match self.nodes.get(&ino) {
            Some(Node::File(f)) => fs::write(at, &f.durable),
            Some(Node::Dir(d)) => {
                if !on_path.insert(ino) {
                    return Ok(());
                }
                fs::create_dir(at)?;
                for (name, &child) in &d.durable {
                    self.materialise(child, &at.join(name), on_path)?;
                }
                on_path.remove(&ino);
                Ok(())
            }
            None => Ok(()),
        }
    }

    // ---- cuts ----------------------------------------------------------------

    /// Power loss. With `seed`, background writeback first persists each
    /// dirty name and then each dirty file with probability one half, drawn
    /// from SplitMix64(`seed`) in the order `SimStorage` draws them (names by
    /// directory inode and name, then files by inode).
    pub fn cut(&mut self, seed: Option<u64>) {
        self.stats.cuts += 1;
        if let Some(seed) = seed {
            self.stats.partial_cuts += 1;
            let mut rng = SimRng::new(seed);
            let names: Vec<(Ino, String)> = self
                .nodes
                .iter()
                .filter_map(|(&i, n)| match n {
                    Node::Dir(d) => Some(d.dirty.iter().map(move |s| (i, s.clone()))),
                    Node::File(_) => None,
                })
                .flatten()
                .collect();
            for (dir, name) in names {
                if rng.coin() {
                    self.stats.written_back += 1;
                    let _ = self.flush_name(dir, &name);
                }
            }
            let files: Vec<Ino> = self
                .nodes
                .iter()
                .filter_map(|(&i, n)| match n {
                    Node::File(f) if f.is_dirty() => Some(i),
                    _ => None,
                })
                .collect();
            for ino in files {
                if rng.coin()
                    && let Ok(f) = self.file_mut(ino)
                {
                    let ranges = f.flush();
                    self.stats.written_back += 1;
                    let _ = self.persist_file(ino, &ranges);
                }
            }
        }
        let mut dropped = 0;
        for node in self.nodes.values_mut() {
            match node {
                Node::Dir(d) => {
                    dropped += d.dirty.len() as u64;
                    d.dirty.clear();
                    d.cached = d.durable.clone();
                }
                Node::File(f) => {
                    dropped += u64::from(f.is_dirty());
                    f.drop_dirty();
                    f.cached = f.durable.clone();
                }
            }
        }
        self.stats.dropped_changes += dropped;
        let live = self.durable_paths();
        self.nodes.retain(|ino, _| live.contains_key(ino));
        self.fail_rules.clear();
    }

    /// Every path and what it holds in the durable (or cached) view.
    pub fn view(&self, durable: bool) -> BTreeMap<String, Entry> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(ROOT, String::new())];
        let mut seen = BTreeSet::new();
        while let Some((ino, path)) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            let Some(Node::Dir(d)) = self.nodes.get(&ino) else {
                continue;
            };
            for (name, &child) in if durable { &d.durable } else { &d.cached } {
                let p = join(&path, name);
                match self.nodes.get(&child) {
                    Some(Node::File(f)) => {
                        let bytes = if durable { &f.durable } else { &f.cached };
                        out.insert(p, Entry::File(bytes.clone()));
                    }
                    Some(Node::Dir(_)) => {
                        out.insert(p.clone(), Entry::Dir);
                        stack.push((child, p));
                    }
                    None => {}
                }
            }
        }
        out
    }

    /// Every directory path of the cached view (no file bytes copied).
    pub fn cached_dirs(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![(ROOT, String::new())];
        let mut seen = BTreeSet::new();
        while let Some((ino, path)) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            if let Some(Node::Dir(d)) = self.nodes.get(&ino) {
                for (name, &child) in &d.cached {
                    if matches!(self.nodes.get(&child), Some(Node::Dir(_))) {
                        let p = join(&path, name);
                        out.push(p.clone());
                        stack.push((child, p));
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// Checks the invariant that the backing directory is the durable view.
    pub fn check_backing(&self) -> Result<(), String> {
        let on_disk =
            read_tree(&self.backing).map_err(|e| format!("reading the backing directory: {e}"))?;
        let durable = self.view(true);
        if on_disk == durable {
            return Ok(());
        }
        let keys: BTreeSet<&String> = on_disk.keys().chain(durable.keys()).collect();
        let differ: Vec<String> = keys
            .into_iter()
            .filter(|k| on_disk.get(*k) != durable.get(*k))
            .take(5)
            .map(|k| {
                format!(
                    "{k}: backing {}, durable {}",
                    describe(on_disk.get(k)),
                    describe(durable.get(k))
                )
            })
            .collect();
        Err(format!(
            "the backing directory differs from the durable view: {}",
            differ.join("; ")
        ))
    }

    /// Unsynced changes now held only in memory (dirty names and files).
    pub fn pending_changes(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match n {
                Node::Dir(d) => d.dirty.len() as u64,
                Node::File(f) => u64::from(f.is_dirty()),
            })
            .sum()
    }

    pub fn enospc(&self) -> bool {
        self.enospc
    }

    pub fn armed_failures(&self) -> Vec<(String, u32)> {
        self.fail_rules
            .iter()
            .map(|r| (r.path.clone(), r.skip + 1))
            .collect()
    }
}

fn describe(e: Option<&Entry>) -> String {
    match e {
        None => "absent".into(),
        Some(Entry::Dir) => "a directory".into(),
        Some(Entry::File(b)) => format!("{} bytes", b.len()),
    }
}

/// "/a/b" for any of "a/b", "/a/b/", "./a/b".
pub fn normalise(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() {
        "/".into()
    } else {
        format!("/{}", parts.join("/"))
    }
}

/// Every path below `root` ("/a/b") with what it holds, as [`Model::view`] shows it.
pub fn read_tree(root: &Path) -> io::Result<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if rel.is_empty() && name == CONTROL_NAME {
                continue;
            }
            let p = join(&rel, &name);
            if entry.file_type()?.is_dir() {
                out.insert(p.clone(), Entry::Dir);
                stack.push((entry.path(), p));
            } else {
                out.insert(p, Entry::File(fs::read(entry.path())?));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> (tempfile::TempDir, Model) {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = Model::load(dir.path()).expect("load");
        (dir, m)
    }

    #[test]
    fn a_synced_file_needs_its_directory_synced_to_survive_a_cut() {
        let (_d, mut m) = model();
        let f = m.create(ROOT, "x").unwrap();
        m.write(f, 0, b"hello").unwrap();
        m.fsync_file(f).unwrap();
        m.cut(None);
        assert!(m.view(true).is_empty());
        let f = m.create(ROOT, "x").unwrap();
        m.write(f, 0, b"hello").unwrap();
        m.fsync_file(f).unwrap();
        m.fsync_dir(ROOT).unwrap();
        m.write(f, 5, b" world").unwrap();
        m.cut(None);
        assert_eq!(
            m.view(true).get("/x"),
            Some(&Entry::File(b"hello".to_vec()))
        );
        m.check_backing().unwrap();
    }

    #[test]
    fn a_failed_sync_drops_the_change_and_the_retry_persists_nothing() {
        let (_d, mut m) = model();
        let a = m.mkdir(ROOT, "a").unwrap();
        m.fsync_dir(ROOT).unwrap();
        m.create(a, "f").unwrap();
        m.fail_sync("a", 1);
        assert_eq!(m.fsync_dir(a), Err(FsError::Io));
        m.fsync_dir(a).unwrap();
        m.cut(None);
        assert_eq!(m.view(true).keys().collect::<Vec<_>>(), vec!["/a"]);
        assert_eq!(m.stats.injected_sync_failures, 1);
        m.check_backing().unwrap();
    }

    #[test]
    fn the_nth_sync_fails_when_asked() {
        let (_d, mut m) = model();
        let f = m.create(ROOT, "x").unwrap();
        m.fail_sync("/x", 2);
        m.fsync_file(f).unwrap();
        assert_eq!(m.fsync_file(f), Err(FsError::Io));
        m.fsync_file(f).unwrap();
    }

    #[test]
    fn enospc_refuses_growth_but_not_overwrites() {
        let (_d, mut m) = model();
        let f = m.create(ROOT, "x").unwrap();
        m.write(f, 0, b"abc").unwrap();
        m.set_enospc(true);
        assert_eq!(m.write(f, 2, b"de"), Err(FsError::NoSpace));
        m.write(f, 0, b"z").unwrap();
        assert_eq!(m.create(ROOT, "y"), Err(FsError::NoSpace));
        assert_eq!(m.set_len(f, 10), Err(FsError::NoSpace));
        m.set_enospc(false);
        m.write(f, 2, b"de").unwrap();
        assert_eq!(m.file(f).unwrap().cached, b"zbde");
    }

    #[test]
    fn a_durable_rename_moves_the_backing_file() {
        let (d, mut m) = model();
        let f = m.create(ROOT, "x").unwrap();
        m.write(f, 0, b"1").unwrap();
        m.fsync_file(f).unwrap();
        m.fsync_dir(ROOT).unwrap();
        let a = m.mkdir(ROOT, "a").unwrap();
        m.fsync_dir(ROOT).unwrap();
        m.rename(ROOT, "x", a, "y", false).unwrap();
        m.fsync_dir(a).unwrap();
        // The rename's other side went with it.
        assert!(!d.path().join("x").exists());
        assert_eq!(fs::read(d.path().join("a/y")).unwrap(), b"1");
        m.check_backing().unwrap();
    }
}
