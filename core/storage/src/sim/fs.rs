//! The simulator's in-memory file system: inodes with a cached and a durable view.
//!
//! Invariants (each is what Linux promises, no more):
//! - Writes, truncates, creates, unlinks and renames change only the cached
//!   view and mark what they changed as dirty (byte ranges of a file, names of
//!   a directory).
//! - A file flush copies that file's dirty ranges (and, after a truncate, its
//!   length) to the durable view. It never touches a directory entry.
//! - A directory flush copies that directory's dirty names to its durable
//!   entries. It never touches another directory or any file's bytes.
//! - Dropping dirty state (Linux after a failed fsync) clears the marks without
//!   copying anything: a later flush has nothing left to persist.
//! - After a power loss only what is reachable from the root through durable
//!   entries exists, with its durable bytes.
//! - Maps are `BTreeMap`s so every walk happens in one order (determinism).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::ErrorKind;
use crate::rng::SimRng;

pub(crate) type Ino = u64;
pub(crate) const ROOT: Ino = 0;

#[derive(Debug, Clone, Default)]
pub(crate) struct FileNode {
    pub(crate) cached: Vec<u8>,
    pub(crate) durable: Vec<u8>,
    /// Sorted, disjoint, non-adjacent half-open byte ranges not yet durable.
    dirty: Vec<(u64, u64)>,
    /// The length changed by a truncate that is not durable yet.
    len_dirty: bool,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct DirNode {
    pub(crate) cached: BTreeMap<String, Ino>,
    pub(crate) durable: BTreeMap<String, Ino>,
    dirty: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum Inode {
    File(FileNode),
    Dir(DirNode),
}

/// What a path names, as seen by one view: used by tests and the differential check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeView {
    File(Vec<u8>),
    Dir,
}

#[derive(Debug, Clone)]
pub(crate) struct Fs {
    inodes: BTreeMap<Ino, Inode>,
    next_ino: Ino,
}

fn add_range(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let (mut s, mut e) = (start, end);
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges.iter() {
        if b < s || a > e {
            out.push((a, b));
        } else {
            s = s.min(a);
            e = e.max(b);
        }
    }
    out.push((s, e));
    out.sort_unstable();
    *ranges = out;
}

fn usize_of(v: u64) -> Result<usize, ErrorKind> {
    usize::try_from(v).map_err(|_| ErrorKind::NoSpace)
}

impl FileNode {
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), ErrorKind> {
        if data.is_empty() {
            // pwrite of zero bytes changes nothing, not even past the end.
            return Ok(());
        }
        let start = usize_of(offset)?;
        let end = start.checked_add(data.len()).ok_or(ErrorKind::NoSpace)?;
        if self.cached.len() < end {
            // Zero-filled gap up to `offset` is part of what became dirty.
            let old = self.cached.len() as u64;
            self.cached.resize(end, 0);
            add_range(&mut self.dirty, old.min(offset), offset);
        }
        self.cached[start..end].copy_from_slice(data);
        add_range(&mut self.dirty, offset, end as u64);
        Ok(())
    }

    pub(crate) fn truncate(&mut self, len: u64) -> Result<(), ErrorKind> {
        let new = usize_of(len)?;
        let old = self.cached.len();
        self.cached.resize(new, 0);
        self.len_dirty = true;
        // Bytes beyond the new end are gone; an extension is zeros that must
        // reach the durable view as zeros, not as whatever it held before.
        self.dirty.retain(|&(a, _)| a < len);
        for r in self.dirty.iter_mut() {
            r.1 = r.1.min(len);
        }
        if new > old {
            add_range(&mut self.dirty, old as u64, len);
        }
        Ok(())
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.len_dirty || !self.dirty.is_empty()
    }

    pub(crate) fn flush(&mut self) {
        if self.len_dirty {
            self.durable.resize(self.cached.len(), 0);
        }
        for &(a, b) in &self.dirty {
            let (a, b) = (a as usize, (b as usize).min(self.cached.len()));
            if a >= b {
                continue;
            }
            if self.durable.len() < b {
                self.durable.resize(b, 0);
            }
            self.durable[a..b].copy_from_slice(&self.cached[a..b]);
        }
        self.dirty.clear();
        self.len_dirty = false;
    }

    pub(crate) fn drop_dirty(&mut self) {
        self.dirty.clear();
        self.len_dirty = false;
    }

    /// Drops the dirty state and, like Linux evicting the pages of a failed
    /// writeback, makes every byte that was dirty read back as the disk holds
    /// it: the durable bytes where the disk has them, zeros past its end. The
    /// length stays (it is inode state, not page content).
    pub(crate) fn evict_dirty(&mut self) {
        for &(a, b) in &self.dirty {
            let (a, b) = (a as usize, (b as usize).min(self.cached.len()));
            for i in a..b {
                self.cached[i] = self.durable.get(i).copied().unwrap_or(0);
            }
        }
        self.drop_dirty();
    }
}

impl DirNode {
    pub(crate) fn set(&mut self, name: &str, ino: Option<Ino>) {
        match ino {
            Some(i) => {
                self.cached.insert(name.to_string(), i);
            }
            None => {
                self.cached.remove(name);
            }
        }
        self.dirty.insert(name.to_string());
    }

    fn flush_name(&mut self, name: &str) {
        match self.cached.get(name) {
            Some(&i) => {
                self.durable.insert(name.to_string(), i);
            }
            None => {
                self.durable.remove(name);
            }
        }
    }
}

impl Default for Fs {
    fn default() -> Self {
        let mut inodes = BTreeMap::new();
        inodes.insert(ROOT, Inode::Dir(DirNode::default()));
        Fs {
            inodes,
            next_ino: ROOT + 1,
        }
    }
}

impl Fs {
    pub(crate) fn get(&self, ino: Ino) -> Option<&Inode> {
        self.inodes.get(&ino)
    }

    pub(crate) fn file_mut(&mut self, ino: Ino) -> Result<&mut FileNode, ErrorKind> {
        match self.inodes.get_mut(&ino) {
            Some(Inode::File(f)) => Ok(f),
            Some(Inode::Dir(_)) => Err(ErrorKind::IsADirectory),
            None => Err(ErrorKind::BadHandle),
        }
    }

    pub(crate) fn file(&self, ino: Ino) -> Result<&FileNode, ErrorKind> {
        match self.inodes.get(&ino) {
            Some(Inode::File(f)) => Ok(f),
            Some(Inode::Dir(_)) => Err(ErrorKind::IsADirectory),
            None => Err(ErrorKind::BadHandle),
        }
    }

    pub(crate) fn dir_mut(&mut self, ino: Ino) -> Result<&mut DirNode, ErrorKind> {
        match self.inodes.get_mut(&ino) {
            Some(Inode::Dir(d)) => Ok(d),
            Some(Inode::File(_)) => Err(ErrorKind::NotADirectory),
            None => Err(ErrorKind::NotFound),
        }
    }

    pub(crate) fn dir(&self, ino: Ino) -> Result<&DirNode, ErrorKind> {
        match self.inodes.get(&ino) {
            Some(Inode::Dir(d)) => Ok(d),
            Some(Inode::File(_)) => Err(ErrorKind::NotADirectory),
            None => Err(ErrorKind::NotFound),
        }
    }

    pub(crate) fn alloc(&mut self, node: Inode) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, node);
        ino
    }

    /// Follows cached entries from the root.
    pub(crate) fn resolve(&self, parts: &[String]) -> Result<Ino, ErrorKind> {
        let mut cur = ROOT;
        for part in parts {
            let dir = self.dir(cur)?;
            cur = *dir.cached.get(part).ok_or(ErrorKind::NotFound)?;
        }
        Ok(cur)
    }

    /// The directory holding the last component, and that component.
    pub(crate) fn resolve_parent<'a>(
        &self,
        parts: &'a [String],
    ) -> Result<(Ino, &'a str), ErrorKind> {
        let (name, dirs) = parts.split_last().ok_or(ErrorKind::InvalidPath)?;
        let parent = self.resolve(dirs)?;
        self.dir(parent)?;
        Ok((parent, name))
    }

    /// Bytes of the files the cached view reaches, for the simulated disk
    /// capacity: an unlinked file frees its space (as it does once its last
    /// handle closes; the simulator does not count handles).
    pub(crate) fn used_bytes(&self) -> u64 {
        let mut total = 0u64;
        let mut stack = vec![ROOT];
        let mut seen = BTreeSet::new();
        while let Some(ino) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            match self.inodes.get(&ino) {
                Some(Inode::Dir(d)) => stack.extend(d.cached.values().copied()),
                Some(Inode::File(f)) => total += f.cached.len() as u64,
                None => {}
            }
        }
        total
    }

    /// Empties a directory tree in the cached view, marking every removed name
    /// dirty in the directory that held it (as `rm -r` unlinks child by child).
    pub(crate) fn clear_tree(&mut self, ino: Ino) -> Result<(), ErrorKind> {
        let children: Vec<(String, Ino)> = self
            .dir(ino)?
            .cached
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (name, child) in children {
            if matches!(self.get(child), Some(Inode::Dir(_))) {
                self.clear_tree(child)?;
            }
            self.dir_mut(ino)?.set(&name, None);
        }
        Ok(())
    }

    /// Makes one directory's dirty names durable (a successful directory sync).
    pub(crate) fn flush_dir(&mut self, ino: Ino) -> Result<(), ErrorKind> {
        let names = std::mem::take(&mut self.dir_mut(ino)?.dirty);
        for name in names {
            self.flush_name_linked(ino, &name);
        }
        Ok(())
    }

    /// Flushes `name` in `dir`. A rename is journalled as one transaction by
    /// the journaling file systems sluice supports (ext4, XFS, btrfs): the
    /// removal of the old name and the new entry become durable together, so
    /// the durable tree can never hold a directory twice (or a cycle), and a
    /// renamed file can come back under its old name or its new one, never
    /// under neither.
    fn flush_name_linked(&mut self, dir: Ino, name: &str) {
        let partner = self.move_partner(dir, name);
        if let Some(Inode::Dir(d)) = self.inodes.get_mut(&dir) {
            d.flush_name(name);
            d.dirty.remove(name);
        }
        if let Some((ino, n)) = partner
            && let Some(Inode::Dir(d)) = self.inodes.get_mut(&ino)
        {
            d.flush_name(&n);
            d.dirty.remove(&n);
        }
    }

    /// Drops a directory's dirty names (a failed sync under Linux semantics),
    /// and with a renamed node's name, the other side of the same rename.
    pub(crate) fn drop_dir_dirty(&mut self, dir: Ino) {
        let names: Vec<String> = match self.inodes.get(&dir) {
            Some(Inode::Dir(d)) => d.dirty.iter().cloned().collect(),
            _ => return,
        };
        for name in names {
            if let Some((ino, n)) = self.move_partner(dir, &name)
                && let Some(Inode::Dir(d)) = self.inodes.get_mut(&ino)
            {
                d.dirty.remove(&n);
            }
        }
        if let Some(Inode::Dir(d)) = self.inodes.get_mut(&dir) {
            d.dirty.clear();
        }
    }

    /// If `name` in `dir` is one side of a not-yet-durable rename, the other
    /// side: the old durable name of a node renamed in, or the new cached name
    /// of a node renamed away. (No hard links: a node has one name.)
    fn move_partner(&self, dir: Ino, name: &str) -> Option<(Ino, String)> {
        let Some(Inode::Dir(d)) = self.inodes.get(&dir) else {
            return None;
        };
        let (cached, durable) = (d.cached.get(name).copied(), d.durable.get(name).copied());
        if cached == durable {
            return None;
        }
        let (moved, find_old_name) = match (cached, durable) {
            (Some(m), _) => (m, true),
            (None, Some(m)) => (m, false),
            (None, None) => return None,
        };
        for (&ino, node) in &self.inodes {
            let Inode::Dir(y) = node else { continue };
            let names: BTreeSet<&String> = y.durable.keys().chain(y.cached.keys()).collect();
            for n in names {
                if ino == dir && n == name {
                    continue;
                }
                let (c, du) = (y.cached.get(n), y.durable.get(n));
                let hit = if find_old_name {
                    du == Some(&moved) && c != Some(&moved)
                } else {
                    c == Some(&moved) && du != Some(&moved)
                };
                if hit {
                    return Some((ino, n.clone()));
                }
            }
        }
        None
    }

    /// Power loss: every node falls back to its durable view. With `writeback`,
    /// each dirty name and each dirty file first independently reaches the
    /// disk with probability one half, as background writeback would have.
    pub(crate) fn power_loss(&mut self, mut writeback: Option<&mut SimRng>) {
        if let Some(rng) = writeback.as_deref_mut() {
            let dirty: Vec<(Ino, String)> = self
                .inodes
                .iter()
                .filter_map(|(&ino, n)| match n {
                    Inode::Dir(d) => Some(d.dirty.iter().map(move |name| (ino, name.clone()))),
                    Inode::File(_) => None,
                })
                .flatten()
                .collect();
            for (ino, name) in dirty {
                if rng.coin() {
                    self.flush_name_linked(ino, &name);
                }
            }
        }
        for node in self.inodes.values_mut() {
            match node {
                Inode::Dir(d) => {
                    d.dirty.clear();
                    d.cached = d.durable.clone();
                }
                Inode::File(f) => {
                    if let Some(rng) = writeback.as_deref_mut()
                        && f.is_dirty()
                        && rng.coin()
                    {
                        f.flush();
                    }
                    f.drop_dirty();
                    f.cached = f.durable.clone();
                }
            }
        }
        self.collect_garbage(false);
    }

    /// Drops inodes no name reaches (through durable entries, and also cached
    /// ones unless `durable_only`). Open handles must be invalid when called.
    pub(crate) fn collect_garbage(&mut self, durable_only: bool) {
        let mut live = BTreeSet::new();
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if !live.insert(ino) {
                continue;
            }
            if let Some(Inode::Dir(d)) = self.inodes.get(&ino) {
                stack.extend(d.durable.values().copied());
                if !durable_only {
                    stack.extend(d.cached.values().copied());
                }
            }
        }
        self.inodes.retain(|ino, _| live.contains(ino));
    }

    /// Every path and what it holds, in one view (cached or durable).
    pub(crate) fn view(&self, durable: bool) -> BTreeMap<String, NodeView> {
        let mut out = BTreeMap::new();
        let mut on_path = BTreeSet::new();
        self.walk(ROOT, String::new(), durable, &mut out, &mut on_path);
        out
    }

    fn walk(
        &self,
        ino: Ino,
        prefix: String,
        durable: bool,
        out: &mut BTreeMap<String, NodeView>,
        on_path: &mut BTreeSet<Ino>,
    ) {
        let Some(Inode::Dir(d)) = self.inodes.get(&ino) else {
            return;
        };
        // A directory reached again below itself would make the walk endless;
        // the linked flush above keeps that from happening, this keeps a bug
        // from turning into a hang.
        if !on_path.insert(ino) {
            return;
        }
        let entries = if durable { &d.durable } else { &d.cached };
        for (name, &child) in entries {
            let path = format!("{prefix}/{name}");
            match self.inodes.get(&child) {
                Some(Inode::File(f)) => {
                    let bytes = if durable { &f.durable } else { &f.cached };
                    out.insert(path, NodeView::File(bytes.clone()));
                }
                Some(Inode::Dir(_)) => {
                    out.insert(path.clone(), NodeView::Dir);
                    self.walk(child, path, durable, out, on_path);
                }
                None => {}
            }
        }
        on_path.remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_ranges_merge_and_stay_sorted() {
        let mut r = Vec::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 0, 5);
        add_range(&mut r, 20, 25);
        add_range(&mut r, 4, 10);
        assert_eq!(r, vec![(0, 25)]);
        add_range(&mut r, 30, 31);
        assert_eq!(r, vec![(0, 25), (30, 31)]);
    }

    #[test]
    fn eviction_after_a_failed_writeback_reads_back_the_disk_bytes() {
        let mut f = FileNode::default();
        f.write(0, b"abcd").unwrap();
        f.flush();
        f.write(2, b"XYZW").unwrap();
        f.evict_dirty();
        // Bytes 2..4 were on disk ("cd"), 4..6 never were (zeros).
        assert_eq!(f.cached, b"abcd\0\0");
        assert!(!f.is_dirty());
        assert_eq!(f.durable, b"abcd");
    }

    #[test]
    fn truncate_then_extend_reaches_disk_as_zeros() {
        let mut f = FileNode::default();
        f.write(0, b"abcdefgh").unwrap();
        f.flush();
        f.truncate(2).unwrap();
        f.truncate(6).unwrap();
        f.flush();
        assert_eq!(f.durable, b"ab\0\0\0\0");
    }
}
