//! One segment: a `.log` file of framed batches and its sparse `.idx`.
//!
//! Invariants:
//! - `size` is the end of the last whole, valid batch. Nothing at or beyond it
//!   is ever served, and the next batch is written at `size` (not at the file's
//!   end), so the bytes of a failed write are overwritten, never exposed.
//! - Every index entry points at the start of a valid batch whose base offset
//!   it names; entries are strictly increasing in offset and position.
//! - The index is a cache of the log: losing or tearing it loses nothing,
//!   recovery re-validates it and rebuilds what is missing by scanning, and
//!   says so (a log line naming the index) whenever it trusts less than all
//!   of it. Recovery reads every byte of the tail it scans exactly once.
//! - Only the last segment of a log can end in a torn write: a segment is
//!   sealed by the roll to the next one, and a roll first cuts any bytes a
//!   failed write left beyond `size` (`tail_dirty`). So recovery may cut the
//!   tail of the last segment only; an invalid batch in a sealed segment is
//!   damage to acknowledged data and is reported, never cut.

use std::path::{Path, PathBuf};

use sluice_storage::{DurableFile, DurableStorage, OpenMode};

use bytes::Bytes;

use super::message::{
    BATCH_VERSION, BatchView, INDEX_VERSION, IndexEntry, MAX_BATCH_BYTES, MAX_INDEX_ENTRY,
};
use crate::error::{EngineError, Result};
use crate::frame::{self, FrameError, Framed, HEADER_LEN, Magic};
use crate::layout::{INDEX_EXT, LOG_EXT, segment_name};

/// Index an entry at least every this many bytes of log.
pub(crate) const INDEX_INTERVAL: u64 = 4096;

#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) generation: u64,
    pub(crate) base_offset: u64,
    pub(crate) log_path: PathBuf,
    pub(crate) idx_path: PathBuf,
    log: Box<dyn DurableFile>,
    idx: Box<dyn DurableFile>,
    pub(crate) size: u64,
    /// One past the last offset stored here (== `base_offset` when empty).
    pub(crate) next_offset: u64,
    pub(crate) index: Vec<IndexEntry>,
    idx_size: u64,
    bytes_since_index: u64,
    /// A failed write left bytes beyond `size` that could not be cut yet.
    tail_dirty: bool,
    /// Every byte below this is on disk or dirty in the page cache, so the
    /// next successful sync makes it durable. Bytes from here to `size` may
    /// be neither: under Linux a failed sync drops the dirty state of every
    /// byte it covered, and bytes recovered from the page cache may be the
    /// leftovers of such a sync in an earlier process. They are written
    /// again before any sync that acknowledges data after them.
    carried_to: u64,
    /// Every byte below this is known to be on disk (a sync covered it).
    durable_to: u64,
    /// A failed sync's recheck of the unsure tail (`recheck_unsure`) could
    /// not read the file (through the file pool a read may have to open it
    /// again, and that open can fail): until it is done, the bytes from
    /// `durable_to` may be pages the failed writeback evicted, so the
    /// segment is neither read nor written before it (`settle_deferred`).
    recheck_owed: bool,
    /// The newest message timestamp stored here (0 when empty): retention by
    /// age removes a sealed segment only once this is older than the expiry.
    /// Timestamps never decrease within a log (`Partition::append` keeps them
    /// so), so recovery finds it in the last batch, which its tail scan reads.
    pub(crate) newest_timestamp: u64,
}

/// What a recovery scan found wrong with a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanIssue {
    /// A torn or corrupt tail was cut: `bytes` removed from `position`.
    TailCut {
        position: u64,
        bytes: u64,
        reason: String,
    },
}

/// What recovery and its checks need of one valid batch (its messages are
/// looked at in place, never copied out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSummary {
    pub(crate) generation: u64,
    pub(crate) base_offset: u64,
    pub(crate) count: u64,
    /// The first message's timestamp (0 for an empty batch).
    pub(crate) first_timestamp: u64,
    pub(crate) newest_timestamp: u64,
}

/// Reads the batch framed at `position` into one buffer, checks it (header,
/// length, payload CRC32C, version, a whole decode) and hands `f` the buffer
/// and the batch decoded in place; returns `f`'s result and the frame's
/// length. `Ok(Err(_))` is a batch that does not check out.
pub(crate) fn read_batch_with<R>(
    file: &dyn DurableFile,
    position: u64,
    limit: u64,
    f: impl FnOnce(&Bytes, BatchView<'_>) -> R,
) -> Result<Result<(R, u64), FrameError>> {
    let avail = limit.saturating_sub(position);
    let mut head = [0u8; HEADER_LEN];
    let want = (HEADER_LEN as u64).min(avail) as usize;
    let n = file.read_at(position, &mut head[..want])?;
    let header = match frame::decode_header(Magic::BATCH, &head[..n], MAX_BATCH_BYTES) {
        Ok(h) => h,
        Err(e) => return Ok(Err(e)),
    };
    if header.frame_len() as u64 > avail {
        return Ok(Err(FrameError::Truncated {
            need: header.frame_len(),
            have: avail as usize,
        }));
    }
    let mut payload = vec![0u8; header.payload_len];
    let n = file.read_at(position + HEADER_LEN as u64, &mut payload)?;
    payload.truncate(n);
    let buffer = Bytes::from(payload);
    Ok(frame::check_payload(&header, BATCH_VERSION, &buffer)
        .and_then(super::decode::batch)
        .map(|view| (f(&buffer, view), header.frame_len() as u64)))
}

/// Reads and validates the batch framed at `position`.
pub(crate) fn read_batch(
    file: &dyn DurableFile,
    position: u64,
    limit: u64,
) -> Result<Result<(BatchSummary, u64), FrameError>> {
    read_batch_with(file, position, limit, |_, view| BatchSummary {
        generation: view.generation,
        base_offset: view.base_offset,
        count: view.messages.len() as u64,
        first_timestamp: view.messages.first().map_or(0, |m| m.timestamp),
        newest_timestamp: view.messages.iter().map(|m| m.timestamp).max().unwrap_or(0),
    })
}

impl Segment {
    /// Creates a new, empty segment (both files). The caller syncs the directory
    /// when the policy needs the new names durable.
    pub(crate) fn create(
        storage: &dyn DurableStorage,
        dir: &Path,
        generation: u64,
        base_offset: u64,
    ) -> Result<Segment> {
        let log_path = dir.join(segment_name(generation, base_offset, LOG_EXT));
        let idx_path = dir.join(segment_name(generation, base_offset, INDEX_EXT));
        let log = storage.open(&log_path, OpenMode::CreateOrOpen)?;
        let idx = storage.open(&idx_path, OpenMode::CreateOrOpen)?;
        // A leftover from an earlier failed attempt at this same segment holds
        // nothing acknowledged (its batches would have advanced the offset).
        // Only a file that holds something is truncated: on ext4 (default
        // `auto_da_alloc`) any truncate to 0, even of an empty file, makes
        // the file's last close start writeback of its dirty pages, so each
        // purge or deletion paid one flush per segment file this process
        // had created, inside the call (docs/performance.md, "Profiles
        // (session 8)").
        for file in [&log, &idx] {
            if file.len()? > 0 {
                file.truncate(0)?;
            }
        }
        Ok(Segment {
            generation,
            base_offset,
            log_path,
            idx_path,
            log,
            idx,
            size: 0,
            next_offset: base_offset,
            index: Vec::new(),
            idx_size: 0,
            bytes_since_index: 0,
            tail_dirty: false,
            carried_to: 0,
            durable_to: 0,
            recheck_owed: false,
            newest_timestamp: 0,
        })
    }

    /// Opens an existing segment, validates its index and scans its tail.
    /// `is_last`: whether this is the log's last segment, the only one whose
    /// tail may be cut as torn; in a sealed segment any invalid batch is
    /// `CorruptFile`.
    pub(crate) fn recover(
        storage: &dyn DurableStorage,
        dir: &Path,
        generation: u64,
        base_offset: u64,
        is_last: bool,
    ) -> Result<(Segment, Option<ScanIssue>)> {
        let log_path = dir.join(segment_name(generation, base_offset, LOG_EXT));
        let idx_path = dir.join(segment_name(generation, base_offset, INDEX_EXT));
        let log = storage.open(&log_path, OpenMode::ReadWrite)?;
        let idx = storage.open(&idx_path, OpenMode::CreateOrOpen)?;
        let file_len = log.len()?;
        let mut seg = Segment {
            generation,
            base_offset,
            log_path,
            idx_path,
            log,
            idx,
            size: 0,
            next_offset: base_offset,
            index: Vec::new(),
            idx_size: 0,
            bytes_since_index: 0,
            tail_dirty: false,
            carried_to: 0,
            durable_to: 0,
            recheck_owed: false,
            newest_timestamp: 0,
        };
        let first = seg.load_index(file_len)?;
        let issue = seg.scan_tail(file_len, is_last, first)?;
        // Taken as on disk, as everything an earlier process acknowledged is;
        // `redirty_tail` narrows this for the bytes that may not be.
        seg.carried_to = seg.size;
        seg.durable_to = seg.size;
        Ok((seg, issue))
    }

    /// Reads the index, keeping the longest prefix of entries that are
    /// well-formed, increasing, and point at a batch that really starts there.
    /// Returns the batch the last kept entry points at, as checked here, so
    /// the tail scan that starts there does not read it a second time.
    fn load_index(&mut self, log_len: u64) -> Result<Option<(BatchSummary, u64)>> {
        let bytes = self.idx.read_to_end()?;
        let mut pos = 0usize;
        let mut entries: Vec<IndexEntry> = Vec::new();
        while pos < bytes.len() {
            match frame::decode::<IndexEntry>(
                Magic::INDEX,
                INDEX_VERSION,
                &bytes[pos..],
                MAX_INDEX_ENTRY,
            ) {
                Ok((e, used)) => {
                    let increasing = entries
                        .last()
                        .is_none_or(|l| e.offset > l.offset && e.position > l.position);
                    if !increasing || e.position >= log_len {
                        break;
                    }
                    entries.push(e);
                    pos += used;
                }
                Err(_) => break,
            }
        }
        // Trust only entries whose batch checks out; drop from the end until one does.
        let mut checked = None;
        while let Some(last) = entries.last() {
            match read_batch(self.log.as_ref(), last.position, log_len)? {
                Ok((b, len)) if b.base_offset == last.offset && b.generation == self.generation => {
                    checked = Some((b, len));
                    break;
                }
                _ => {
                    entries.pop();
                }
            }
        }
        let keep = entries.len();
        // Re-derive the byte length of the kept prefix so new entries append after it.
        let mut idx_size = 0usize;
        for _ in 0..keep {
            let h = frame::decode_header(Magic::INDEX, &bytes[idx_size..], MAX_INDEX_ENTRY)
                .map_err(|e| EngineError::Internal(format!("index re-read: {e}")))?;
            idx_size += h.frame_len();
        }
        // Recovery trusts the index only this far: say so when it could not
        // trust all of it, since the scan then reads more of the segment.
        let scan_from = entries.last().map_or(0, |e| e.position);
        if bytes.is_empty() && log_len > 0 {
            tracing::info!(path = %self.idx_path.display(), log_bytes = log_len, "index missing or empty; rebuilding it by scanning the segment from byte 0");
        } else if idx_size != bytes.len() {
            tracing::warn!(path = %self.idx_path.display(), kept_bytes = idx_size, index_bytes = bytes.len(), scan_from, "index stale or damaged past the kept entries; dropped them, scanning the segment from the last kept one");
        }
        if idx_size as u64 != bytes.len() as u64 {
            self.idx.truncate(idx_size as u64)?;
        }
        self.idx_size = idx_size as u64;
        self.newest_timestamp = entries.iter().map(|e| e.timestamp).max().unwrap_or(0);
        self.index = entries;
        Ok(checked)
    }

    /// Validates batches from the last index entry to the end of the file,
    /// rebuilding index entries, and cuts a torn tail (last segment only).
    /// `first`: the batch at the last index entry, already read and checked
    /// by `load_index` (each byte of the tail is read once).
    fn scan_tail(
        &mut self,
        file_len: u64,
        is_last: bool,
        mut first: Option<(BatchSummary, u64)>,
    ) -> Result<Option<ScanIssue>> {
        let (mut pos, mut expected) = match self.index.last() {
            Some(e) => (e.position, e.offset),
            None => (0, self.base_offset),
        };
        // Entries before `pos` are already indexed; don't index `pos` twice.
        let mut skip_index_at = self.index.last().map(|e| e.position);
        while pos < file_len {
            let read = match first.take() {
                Some(checked) if self.index.last().is_some_and(|e| e.position == pos) => {
                    Ok(checked)
                }
                _ => read_batch(self.log.as_ref(), pos, file_len)?,
            };
            match read {
                Ok((batch, len))
                    if batch.generation == self.generation
                        && batch.base_offset == expected
                        && batch.count > 0 =>
                {
                    let count = batch.count;
                    let ts = batch.first_timestamp;
                    self.newest_timestamp = self.newest_timestamp.max(batch.newest_timestamp);
                    if skip_index_at != Some(pos) {
                        self.maybe_index(batch.base_offset, pos, ts, len)?;
                    } else {
                        self.bytes_since_index = len;
                    }
                    skip_index_at = None;
                    expected += count;
                    pos += len;
                }
                other => {
                    let reason = match &other {
                        Ok((b, _)) => format!(
                            "batch at offset {} of generation {} breaks the sequence (expected offset {expected}, generation {})",
                            b.base_offset, b.generation, self.generation
                        ),
                        Err(e) => e.to_string(),
                    };
                    // A record whose checksums hold but which this build cannot
                    // read (newer version, undecodable, over the bound) is not a
                    // torn tail: cutting it would drop acknowledged batches.
                    let unreadable = matches!(
                        other,
                        Err(FrameError::UnsupportedVersion { .. }
                            | FrameError::Decode(_)
                            | FrameError::TooLarge { .. })
                    );
                    if unreadable {
                        return Err(EngineError::CorruptFile {
                            path: self.log_path.clone(),
                            offset: pos,
                            reason: format!(
                                "{reason}; the record is intact but unreadable by this build"
                            ),
                        });
                    }
                    if !is_last {
                        return Err(EngineError::CorruptFile {
                            path: self.log_path.clone(),
                            offset: pos,
                            reason: format!(
                                "{reason}; the segment is sealed (a later segment exists), so this is not a torn tail"
                            ),
                        });
                    }
                    if let Some(after) = self.valid_batch_after(pos, file_len)? {
                        return Err(EngineError::CorruptFile {
                            path: self.log_path.clone(),
                            offset: pos,
                            reason: format!(
                                "{reason}; a valid batch follows at byte {after}, so this is not a torn tail"
                            ),
                        });
                    }
                    self.log.truncate(pos)?;
                    self.size = pos;
                    self.next_offset = expected;
                    return Ok(Some(ScanIssue::TailCut {
                        position: pos,
                        bytes: file_len - pos,
                        reason,
                    }));
                }
            }
        }
        self.size = pos;
        self.next_offset = expected;
        Ok(None)
    }

    /// If the header at `pos` is intact, whether a valid batch starts right after its frame.
    fn valid_batch_after(&self, pos: u64, file_len: u64) -> Result<Option<u64>> {
        let mut head = [0u8; HEADER_LEN];
        let n = self.log.read_at(pos, &mut head)?;
        let Ok(h) = frame::decode_header(Magic::BATCH, &head[..n], MAX_BATCH_BYTES) else {
            return Ok(None);
        };
        let next = pos + h.frame_len() as u64;
        if next >= file_len {
            return Ok(None);
        }
        Ok(read_batch(self.log.as_ref(), next, file_len)?
            .ok()
            .map(|_| next))
    }

    fn maybe_index(&mut self, offset: u64, position: u64, timestamp: u64, len: u64) -> Result<()> {
        if self.index.is_empty() || self.bytes_since_index >= INDEX_INTERVAL {
            let entry = IndexEntry {
                offset,
                position,
                timestamp,
            };
            let bytes = frame::encode(Magic::INDEX, INDEX_VERSION, &entry)
                .map_err(|e| EngineError::Internal(e.to_string()))?;
            self.idx.write_at(self.idx_size, &bytes)?;
            self.idx_size += bytes.len() as u64;
            self.index.push(entry);
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        Ok(())
    }

    /// Writes one encoded batch at `size`. On failure the segment is unchanged
    /// (a best-effort truncate removes any prefix that landed).
    pub(crate) fn write_batch(
        &mut self,
        encoded: &Framed<'_>,
        base_offset: u64,
        count: u64,
        timestamp: u64,
        newest_timestamp: u64,
        sync: bool,
    ) -> Result<()> {
        self.trim_tail(sync)?;
        let at = self.size;
        if sync || self.carried_to < at {
            // This sync acknowledges the batch: every byte before it must be
            // carried too, or it would be durable above a hole. Without one
            // (`buffered`) the same holds for the next sync of the file, the
            // file pool's when it closes it (ADR 0018): after a failed sync,
            // the bytes before the batch may be neither on disk nor dirty,
            // and recovery would read the hole below it as damage (`sim run
            // --max-open-files 2` seed 240: a partition degraded). Only a
            // failed sync leaves `carried_to` short of `size`.
            self.carry_unsure(true)?;
        }
        // One write of the whole frame, from its pieces (`Framed`).
        let mut written = self
            .log
            .write_vectored_at(at, &encoded.slices())
            .map_err(EngineError::from);
        if written.is_ok() {
            if self.carried_to == at {
                self.carried_to = at + encoded.len() as u64;
            }
            if sync {
                written = self.sync_log();
            }
        }
        if let Err(e) = written {
            // `size`, not `at`: a failed sync may have cut batches the
            // kernel evicted (`recheck_unsure`).
            self.carried_to = self.carried_to.min(self.size);
            if self.log.truncate(self.size).is_err() {
                // Cut before the next write or the roll that seals this segment.
                self.tail_dirty = true;
            }
            return Err(e);
        }
        self.size = at + encoded.len() as u64;
        self.next_offset = base_offset + count;
        self.newest_timestamp = self.newest_timestamp.max(newest_timestamp);
        // The index is a cache: failing to extend it never fails the append.
        if let Err(e) = self.maybe_index(base_offset, at, timestamp, encoded.len() as u64) {
            tracing::warn!(path = %self.idx_path.display(), error = %e, "index entry not written; recovery will rebuild it");
        }
        Ok(())
    }

    /// Cuts bytes a failed write left beyond `size`, if its own clean-up
    /// could not (`sync`: make the cut durable too, as a `persisted` append
    /// would). Until this succeeds the segment takes no write and is not
    /// sealed, so no later sync of it covers those bytes, and a sealed
    /// segment never ends in them.
    pub(crate) fn trim_tail(&mut self, sync: bool) -> Result<()> {
        if self.tail_dirty {
            self.log.truncate(self.size)?;
            if sync {
                self.sync_log()?;
            }
            self.tail_dirty = false;
        }
        Ok(())
    }

    /// Syncs the log file, keeping `carried_to` and `durable_to` true: a
    /// success makes everything carried durable; a failure (Linux) drops the
    /// dirty state of everything not yet durable.
    fn sync_log(&mut self) -> Result<()> {
        match self.log.sync() {
            Ok(()) => {
                self.durable_to = self.carried_to;
                Ok(())
            }
            Err(e) => {
                self.after_failed_sync();
                Err(e.into())
            }
        }
    }

    /// What a failed sync of the log leaves: nothing above `durable_to` is
    /// carried any more, and what the failed writeback evicted reads back as
    /// the disk holds it, so the unsure tail is rechecked (and cut).
    fn after_failed_sync(&mut self) {
        self.carried_to = self.durable_to;
        self.recheck_owed = true;
        if let Err(check) = self.settle_recheck() {
            tracing::warn!(path = %self.log_path.display(), error = %check, "segment tail not rechecked after a failed sync; rechecked before the segment is read or written");
        }
    }

    /// Does the recheck a failed sync owes, if any. A storage error leaves
    /// it owed (the next settle tries again); damage below `durable_to` is
    /// reported once, as the read that meets it reports it.
    fn settle_recheck(&mut self) -> Result<()> {
        if !self.recheck_owed {
            return Ok(());
        }
        match self.recheck_unsure(self.durable_to) {
            Err(e @ EngineError::Storage(_)) => Err(e),
            other => {
                self.recheck_owed = false;
                other
            }
        }
    }

    /// Handles a sync the file pool made for this segment and saw fail (ADR
    /// 0018) as this segment's own failed sync, before anything reads or
    /// appends: the failed writeback may have evicted the unsure tail's
    /// pages, and a poll would read zeros where batches were. The index is a
    /// cache rebuilt by recovery: its failure needs nothing.
    /// An error: the recheck it owes could not be done yet (a storage
    /// error); nothing of the segment may be read or written until a later
    /// settle does it.
    pub(crate) fn settle_deferred(&mut self) -> Result<()> {
        if let Some(e) = self.idx.take_deferred_error() {
            tracing::warn!(path = %self.idx_path.display(), error = %e, "index sync failed when the file pool closed it; recovery will validate it");
        }
        if let Some(e) = self.log.take_deferred_error() {
            tracing::warn!(path = %self.log_path.display(), error = %e, "log sync failed when the file pool closed it; its unsure tail is rechecked");
            self.after_failed_sync();
            // That sync may have been the one meant to make a cut durable (a
            // failed append's clean-up, whose bytes a sync reporting an error
            // may have written): under Linux it dropped the length's dirty
            // state, and no later sync writes it, so the disk keeps the cut
            // bytes. A later roll would seal the segment over them, where
            // recovery reads them as batches of the sealed segment (`sim run
            // --max-open-files 2` seed 41: an offset served twice). Cut
            // again, so the next sync carries the length; if that fails, the
            // next write or roll retries it first (`trim_tail`). An append's
            // own failed sync is followed by this cut already (`write_batch`).
            if self.log.truncate(self.size).is_err() {
                self.tail_dirty = true;
            }
        }
        self.settle_recheck()
    }

    /// Validates the batches from `from` to `size` and cuts the segment at
    /// the first one that no longer reads back whole. Bytes not known to be
    /// on disk (recovered from the page cache, or written under `buffered`
    /// and not synced since) are only as good as the pages holding them:
    /// after a failed writeback Linux may evict those pages, and a read then
    /// returns what the disk holds (old bytes, zeros past its end). Such a
    /// batch was never acknowledged under `persisted` (an acknowledgement
    /// needs a sync that covered it), so it is dropped: serving it fails
    /// with `CorruptFile`, and writing it again "unchanged" before the next
    /// acknowledging sync would make the garbage durable below the
    /// acknowledged batch, where recovery cuts it as a torn tail, taking
    /// the acknowledged batch with it (`sim run` seed 260). The log keeps
    /// its `next_offset`, so the cut offsets are never given out again and
    /// the next append starts a segment of its own. Below `durable_to`
    /// nothing is cut: an invalid batch there is damage, reported.
    fn recheck_unsure(&mut self, from: u64) -> Result<()> {
        if from >= self.size || !crate::teeth::enabled(crate::teeth::Mechanism::RecheckEvictedTail)
        {
            return Ok(());
        }
        let i = self.index.partition_point(|e| e.position <= from);
        let (mut pos, mut expected) = match i.checked_sub(1).map(|i| &self.index[i]) {
            Some(e) => (e.position, e.offset),
            None => (0, self.base_offset),
        };
        while pos < self.size {
            match read_batch(self.log.as_ref(), pos, self.size)? {
                Ok((batch, len))
                    if batch.generation == self.generation
                        && batch.base_offset == expected
                        && batch.count > 0 =>
                {
                    expected += batch.count;
                    pos += len;
                }
                other if pos < self.durable_to => {
                    return Err(EngineError::CorruptFile {
                        path: self.log_path.clone(),
                        offset: pos,
                        reason: match other {
                            Err(e) => e.to_string(),
                            Ok((b, _)) => format!(
                                "batch at offset {} breaks the sequence (expected offset {expected})",
                                b.base_offset
                            ),
                        },
                    });
                }
                _ => {
                    self.cut_at(pos, expected);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Ends the segment at `pos` (one past offset `next_offset - 1`),
    /// dropping the index entries past it. If the truncate fails, the next
    /// write or roll retries it (`trim_tail`).
    fn cut_at(&mut self, pos: u64, next_offset: u64) {
        tracing::warn!(path = %self.log_path.display(), position = pos, bytes = self.size - pos, "batches not on disk were lost from the page cache; segment cut");
        let keep = self.index.partition_point(|e| e.position < pos);
        if keep < self.index.len() {
            self.index.truncate(keep);
            let kept: usize = self
                .index
                .iter()
                .filter_map(|e| frame::encode(Magic::INDEX, INDEX_VERSION, e).ok())
                .map(|b| b.len())
                .sum();
            self.idx_size = kept as u64;
            // The index is a cache: recovery drops entries past the log's end.
            if let Err(e) = self.idx.truncate(self.idx_size) {
                tracing::warn!(path = %self.idx_path.display(), error = %e, "index not cut; recovery will validate it");
            }
        }
        self.size = pos;
        self.next_offset = next_offset;
        self.carried_to = self.carried_to.min(pos);
        self.durable_to = self.durable_to.min(pos);
        if self.log.truncate(pos).is_err() {
            self.tail_dirty = true;
        }
    }

    /// Writes the bytes from `carried_to` to `size` again, unchanged, so the
    /// next sync carries them. `recheck`: validate them first (see
    /// `recheck_unsure`); only recovery, whose scan has just validated
    /// exactly these bytes with no call on this file in between, skips it.
    fn carry_unsure(&mut self, recheck: bool) -> Result<()> {
        // Never copy bytes the kernel may have replaced with the disk's.
        if recheck {
            self.recheck_unsure(self.carried_to)?;
        }
        let from = self.carried_to;
        let len = usize::try_from(self.size.saturating_sub(from))
            .map_err(|_| EngineError::Internal("segment tail too large".into()))?;
        if len == 0 {
            return Ok(());
        }
        let mut bytes = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            let n = self
                .log
                .read_at(from + filled as u64, &mut bytes[filled..])?;
            if n == 0 {
                return Err(EngineError::CorruptFile {
                    path: self.log_path.clone(),
                    offset: from + filled as u64,
                    reason: "segment shorter than recovery measured".into(),
                });
            }
            filled += n;
        }
        self.log.write_at(from, &bytes)?;
        self.carried_to = self.size;
        Ok(())
    }

    /// Byte position to start scanning from to find `offset`.
    pub(crate) fn position_for(&self, offset: u64) -> u64 {
        let i = self.index.partition_point(|e| e.offset <= offset);
        if i == 0 {
            0
        } else {
            self.index[i - 1].position
        }
    }

    /// Byte position to start scanning from to find the first batch with a timestamp >= `ts`.
    pub(crate) fn position_for_timestamp(&self, ts: u64) -> u64 {
        let i = self.index.partition_point(|e| e.timestamp < ts);
        if i == 0 {
            0
        } else {
            self.index[i - 1].position
        }
    }

    /// Writes the bytes from the last index entry to the end again, unchanged,
    /// so the next sync of the file carries them whatever an earlier process
    /// did. Recovery found them in the page cache; under Linux a failed sync
    /// in that process may have dropped them while leaving them there, and a
    /// later sync writes only dirty ranges: an append after them would then
    /// be durable above a hole, and a power loss would cut the log at the
    /// hole, taking the acknowledged append with it. Only a failed append's
    /// bytes can be in that state, and they are always the last batch (an
    /// append after a failure first cuts it, or fails), which starts at or
    /// after the last index entry.
    pub(crate) fn redirty_tail(&mut self) -> Result<()> {
        let from = self.index.last().map_or(0, |e| e.position);
        self.carried_to = self.carried_to.min(from);
        self.durable_to = self.durable_to.min(from);
        // Recovery's tail scan read and checked these very bytes a moment
        // ago (`Partition::recover` calls this right after `Log::recover`):
        // checking them again would only read the tail a third time.
        self.carry_unsure(false)
    }

    /// Recovery takes every byte it found as on disk (`durable_to`), as
    /// everything an earlier process acknowledged under `persisted` is.
    /// Under `buffered` that is not known: the bytes may be pages no sync
    /// ever covered, and a failed sync of this file (the file pool's, ADR
    /// 0018) may evict them, so its recheck (`recheck_unsure`) must cover
    /// them, cutting what no longer reads back instead of reporting it as
    /// damage below `durable_to`.
    pub(crate) fn distrust_recovered(&mut self) {
        self.durable_to = 0;
    }

    /// Makes an empty recovered segment durably empty before its offsets
    /// can be given out again. Recovery found no batch in the page cache,
    /// but the disk may still hold one: a failed send's sync can take effect
    /// while reporting an error, and its clean-up truncate can reach only
    /// the page cache. Recovery skips the segment, the next send reuses its
    /// base offset in an earlier segment, and a power loss would bring the
    /// never acknowledged batch back at that same offset. The truncate is
    /// redone first so the length is dirty again even if a failed sync of
    /// an earlier process dropped that state.
    pub(crate) fn make_durably_empty(&mut self) -> Result<()> {
        debug_assert!(self.is_empty(), "only an empty segment is emptied");
        self.log.truncate(0)?;
        self.sync_log()?;
        self.carried_to = 0;
        self.durable_to = 0;
        Ok(())
    }

    /// Makes this segment's bytes durable (at a graceful shutdown, and
    /// before a roll seals it under `persisted`), rewriting first any bytes
    /// a failed sync may have left neither durable nor dirty.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.carry_unsure(true)?;
        self.sync_log()
    }

    pub(crate) fn file(&self) -> &dyn DurableFile {
        self.log.as_ref()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }
}
