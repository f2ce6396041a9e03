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
//!   tail of the newest segment that holds a batch only; an invalid batch in
//!   a sealed segment is damage to acknowledged data and is reported, never
//!   cut. (While serving, a failed sync of a sealed segment can still cut
//!   batches the kernel evicted: `recheck_unsure`, through `Log::on_segment`.)
//!
//! What the fields satisfy between calls (`check_invariants`, asserted on
//! both sides of every method that changes them: creation, recovery, an
//! append, a sync, a trim, a failed sync's handling and its recheck, a cut;
//! a broken one is a programmer error and stops the process). Recovery makes
//! them hold for any bytes on disk: `load_index` keeps only entries at or
//! above `base_offset` whose last one names a batch of at least one message,
//! which the tail scan then accepts, so the scan ends past it.
//! - `durable_to ≤ carried_to ≤ size`: what is known on disk is carried, and
//!   nothing past the last valid batch is either.
//! - `base_offset ≤ next_offset`, and every index entry names an offset in
//!   `base_offset..next_offset` and a position below `size`, no later than
//!   `newest_timestamp`; `bytes_since_index` counts only bytes after the last
//!   entry (0 with no entry).
//! - `idx_size` is 0 exactly when there is no entry, and between the
//!   smallest and the largest frame of an entry per entry. In debug builds
//!   it is exactly the entries' frames, and the entries strictly increase in
//!   offset and position: both are O(entries) (the first re-encodes every
//!   entry), and every method above calls the check twice.
//! - A recheck owed (`recheck_owed`) means nothing above `durable_to` counts
//!   as carried: the bytes there may be pages a failed writeback evicted.
//! - Under `buffered`, a recovered byte is neither durable nor carried
//!   (`distrust_recovered`): an earlier process's failed sync may have left
//!   it clean in the page cache and not on disk, so the process writes it
//!   again before its first sync of the file (a flush) or its first append.
//! - After a successful append every byte is carried, and durable too if the
//!   append synced; after a successful `sync` every byte is durable.
//! - A batch is written only where the segment ends (`size`) and only with
//!   the segment's `next_offset` as its base: an append whose recheck of the
//!   unsure tail cut batches (kernel-evicted pages) is refused, so the log
//!   rolls rather than writing above a hole.

use std::path::{Path, PathBuf};

use sluice_storage::{DurableFile, DurableStorage, OpenMode};

use bytes::Bytes;

use super::message::{
    BATCH_VERSION, BatchVersion, BatchView, INDEX_VERSION, IndexEntry, MAX_BATCH_BYTES,
    MAX_INDEX_ENTRY,
};
use crate::error::{EngineError, Result};
use crate::frame::{self, FrameError, Framed, HEADER_LEN, Magic};
use crate::layout::{INDEX_EXT, LOG_EXT, segment_name};

/// Index an entry at least every this many bytes of log.
pub(crate) const INDEX_INTERVAL: u64 = 4096;

/// The smallest and the largest frame of an index entry: its three integers
/// take 1 to 9 bytes each as the codec's varints (`index_frame` asserts it).
const INDEX_FRAME_MIN: u64 = HEADER_LEN as u64 + 3;
const INDEX_FRAME_MAX: u64 = HEADER_LEN as u64 + 27;

/// The frame of an index entry. Three integers always encode (the codec
/// fails into a `Vec` only on a sequence without a length or a custom
/// serializer error, neither possible here) and always fit `MAX_INDEX_ENTRY`.
fn index_frame(entry: &IndexEntry) -> Vec<u8> {
    let bytes = match frame::encode(Magic::INDEX, INDEX_VERSION, entry) {
        Ok(bytes) => bytes,
        Err(e) => unreachable!("an index entry always encodes: {e}"),
    };
    let len = bytes.len() as u64;
    assert!(
        (INDEX_FRAME_MIN..=INDEX_FRAME_MAX).contains(&len)
            && bytes.len() - HEADER_LEN <= MAX_INDEX_ENTRY,
        "an index entry framed in {len} bytes"
    );
    bytes
}

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
    /// The log file's blocks are reserved up to here (`reserve_ahead`); 0
    /// before this process reserved any. Advisory: nothing read or
    /// acknowledged depends on it.
    reserved_to: u64,
}

/// A segment that already holds this many bytes has its log file's blocks
/// reserved this far past each append's end (`reserve_ahead`, ADR 0031): a
/// log that grows fast gets its blocks a few MiB at a time, and a partition
/// that stays small never reserves any.
pub(crate) const RESERVE_AHEAD: u64 = 8 << 20;

/// The next reservation is asked for when fewer than this many reserved bytes
/// are left ahead of the appends, so that it has usually run (it is queued,
/// `reserve_ahead`) before they reach its range; an append that gets there
/// first allocates its blocks as it would without one.
const RESERVE_LEAD: u64 = RESERVE_AHEAD / 2;

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

/// How recovery judges a segment's tail that does not check out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The log's newest segment holding data: a torn write is cut (when no
    /// valid batch follows it).
    MayBeTorn,
    /// A sealed segment: any invalid batch is `CorruptFile`.
    Sealed,
    /// A sealed segment of a `buffered` topic, whose bytes no flush promised:
    /// a tail reading as zeros to the end of the file is what a failed
    /// writeback loses (Linux evicts the pages it could not write, and they
    /// read back as the disk's zeros), so it is cut like a torn one; any
    /// other damage is `CorruptFile` as for `Sealed`.
    SealedMayBeLost,
}

/// Positioned reads of a segment's log bytes: its local file, or its object
/// in the remote tier (`partition/tiering`), so both are read and checked by
/// the same code.
pub(crate) trait ReadAt {
    /// Reads up to `buf.len()` bytes at `position`; fewer only at the end.
    fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<usize>;
}

impl ReadAt for dyn DurableFile + '_ {
    fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<usize> {
        Ok(DurableFile::read_at(self, position, buf)?)
    }
}

/// The index entries of a sealed segment as bytes, each framed as the index
/// file frames it: what the remote tier stores as the segment's `.idx`.
pub(crate) fn encode_index(entries: &[IndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(index_frame).collect()
}

/// Decodes index bytes `encode_index` made: every entry must decode, and
/// offsets and positions must increase. Anything else is refused whole (the
/// remote copy is sluice's own upload: damage is not cut, it is reported).
pub(crate) fn decode_index(bytes: &[u8]) -> std::result::Result<Vec<IndexEntry>, FrameError> {
    let mut pos = 0usize;
    let mut entries: Vec<IndexEntry> = Vec::new();
    while pos < bytes.len() {
        let (e, used) = frame::decode::<IndexEntry>(
            Magic::INDEX,
            INDEX_VERSION,
            &bytes[pos..],
            MAX_INDEX_ENTRY,
        )?;
        if entries
            .last()
            .is_some_and(|l| e.offset <= l.offset || e.position <= l.position)
        {
            return Err(FrameError::Decode(format!(
                "index entry at byte {pos} does not increase"
            )));
        }
        entries.push(e);
        pos += used;
    }
    Ok(entries)
}

/// Byte position to start scanning `index`'s segment from to find `offset`.
pub(crate) fn position_in(index: &[IndexEntry], offset: u64) -> u64 {
    let i = index.partition_point(|e| e.offset <= offset);
    if i == 0 { 0 } else { index[i - 1].position }
}

/// Byte position to start scanning from to find the first batch with a
/// timestamp at or after `ts`.
pub(crate) fn position_for_timestamp_in(index: &[IndexEntry], ts: u64) -> u64 {
    let i = index.partition_point(|e| e.timestamp < ts);
    if i == 0 { 0 } else { index[i - 1].position }
}

/// Reads the batch framed at `position` into one buffer, checks it (header,
/// length, payload CRC32C, version, a whole decode) and hands `f` the buffer
/// and the batch decoded in place; returns `f`'s result and the frame's
/// length. `Ok(Err(_))` is a batch that does not check out.
pub(crate) fn read_batch_with<R>(
    file: &(impl ReadAt + ?Sized),
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
    let buffer = super::buffers::read_into(header.payload_len, |payload| {
        file.read_at(position + HEADER_LEN as u64, payload)
    })?;
    // A version this build does not read is checked against the newest, so
    // its checksums still tell damage from a newer writer (ADR 0004 §4).
    let version = BatchVersion::from_code(header.version).unwrap_or(BATCH_VERSION);
    Ok(frame::check_payload(&header, version.code(), &buffer)
        .and_then(|payload| super::decode::batch(payload, version))
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
        let seg = Segment {
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
            reserved_to: 0,
            newest_timestamp: 0,
        };
        seg.check_invariants();
        Ok(seg)
    }

    /// Opens an existing segment, validates its index and scans its tail,
    /// which `tail` says how to judge.
    pub(crate) fn recover(
        storage: &dyn DurableStorage,
        dir: &Path,
        generation: u64,
        base_offset: u64,
        tail: Tail,
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
            reserved_to: 0,
            newest_timestamp: 0,
        };
        let first = seg.load_index(file_len)?;
        let issue = seg.scan_tail(file_len, tail, first)?;
        // Taken as on disk, as everything an earlier process acknowledged is;
        // `redirty_tail` narrows this for the bytes that may not be.
        seg.carried_to = seg.size;
        seg.durable_to = seg.size;
        seg.check_invariants();
        Ok((seg, issue))
    }

    /// Whether every byte of the log from `pos` to `file_len` is zero.
    fn zeros_from(&self, pos: u64, file_len: u64) -> Result<bool> {
        let mut buf = vec![0u8; 64 << 10];
        let mut at = pos;
        while at < file_len {
            let want = usize::try_from(file_len - at)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = self.log.read_at(at, &mut buf[..want])?;
            if n == 0 {
                return Ok(true);
            }
            if buf[..n].iter().any(|b| *b != 0) {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    /// Reads the index, keeping the longest prefix of entries that are
    /// well-formed, increasing, at or above the segment's base offset, and
    /// whose last one points at a batch of at least one message that really
    /// starts there (the tail scan accepts that batch, so it ends past the
    /// entry: see the module invariants). Returns that batch, as checked
    /// here, so the tail scan that starts there does not read it again.
    fn load_index(&mut self, log_len: u64) -> Result<Option<(BatchSummary, u64)>> {
        let bytes = self.idx.read_to_end()?;
        let mut pos = 0usize;
        let mut entries: Vec<IndexEntry> = Vec::new();
        // Where each entry's frame ends, so the kept prefix's length is known.
        let mut ends: Vec<usize> = Vec::new();
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
                    // Exactly the bytes this build writes for it (the codec
                    // reads non-minimal integers too), so the kept prefix's
                    // length is its entries' frames, as `cut_at` counts it.
                    let canonical = bytes[pos..pos + used] == index_frame(&e)[..];
                    if !increasing
                        || !canonical
                        || e.position >= log_len
                        || e.offset < self.base_offset
                    {
                        break;
                    }
                    entries.push(e);
                    pos += used;
                    ends.push(pos);
                }
                Err(_) => break,
            }
        }
        // Trust only entries whose batch checks out; drop from the end until one does.
        let mut checked = None;
        while let Some(last) = entries.last() {
            match read_batch(self.log.as_ref(), last.position, log_len)? {
                Ok((b, len))
                    if b.base_offset == last.offset
                        && b.generation == self.generation
                        && b.count > 0 =>
                {
                    checked = Some((b, len));
                    break;
                }
                _ => {
                    entries.pop();
                }
            }
        }
        // The byte length of the kept prefix, so new entries append after it.
        ends.truncate(entries.len());
        let idx_size = ends.last().copied().unwrap_or(0);
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
        tail: Tail,
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
                    let lost_writeback =
                        tail == Tail::SealedMayBeLost && self.zeros_from(pos, file_len)?;
                    if tail != Tail::MayBeTorn && !lost_writeback {
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
            let bytes = index_frame(&entry);
            self.idx.write_at(self.idx_size, &bytes)?;
            self.idx_size += bytes.len() as u64;
            self.index.push(entry);
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += len;
        Ok(())
    }

    /// Writes one encoded batch at `size`. On failure the segment is unchanged
    /// (a best-effort truncate removes any prefix that landed), except that
    /// a recheck of its unsure tail may have cut batches the kernel evicted.
    ///
    /// # Panics
    /// If the batch does not continue the segment (`base_offset` is not
    /// `next_offset`: the log rolls first), is empty (`Partition::append`
    /// refuses that), or its first timestamp is newer than its newest.
    pub(crate) fn write_batch(
        &mut self,
        encoded: &Framed<'_>,
        base_offset: u64,
        count: u64,
        timestamp: u64,
        newest_timestamp: u64,
        sync: bool,
    ) -> Result<()> {
        assert!(
            base_offset == self.next_offset && count > 0 && timestamp <= newest_timestamp,
            "{}: a batch of {count} at offset {base_offset} (timestamps {timestamp} to {newest_timestamp}) for a segment whose next offset is {}",
            self.log_path.display(),
            self.next_offset
        );
        self.checked(|seg| {
            seg.trim_tail(sync)?;
            let at = seg.size;
            if sync || seg.carried_to < at {
                // This sync acknowledges the batch: every byte before it must be
                // carried too, or it would be durable above a hole. Without one
                // (`buffered`) the same holds for the next sync of the file, the
                // file pool's when it closes it (ADR 0018): after a failed sync,
                // the bytes before the batch may be neither on disk nor dirty,
                // and recovery would read the hole below it as damage (`sim run
                // --max-open-files 2` seed 240: a partition degraded). Only a
                // failed sync leaves `carried_to` short of `size`.
                seg.carry_unsure(true)?;
                if seg.size != at {
                    // Its recheck cut batches whose pages the kernel evicted
                    // (a writeback failure this process did not see, since the
                    // recheck after its own failed sync found them whole). The
                    // batch belongs at `at` with base `next_offset`, which the
                    // segment no longer ends at: written at `at` it would sit
                    // above a hole, written at `size` offsets would repeat. The
                    // log rolls for the next append (its `next_offset` is past
                    // this segment's now).
                    return Err(EngineError::Unavailable(format!(
                        "{}: batches not on disk were lost from the page cache and cut before this append; send again",
                        seg.log_path.display()
                    )));
                }
            }
            seg.reserve_ahead(at + encoded.len() as u64);
            // One write of the whole frame, from its pieces (`Framed`).
            let mut written = seg
                .log
                .write_vectored_at(at, &encoded.slices())
                .map_err(EngineError::from);
            if written.is_ok() {
                if seg.carried_to == at {
                    seg.carried_to = at + encoded.len() as u64;
                }
                if sync {
                    written = seg.sync_log();
                }
            }
            if let Err(e) = written {
                // `size`, not `at`: a failed sync may have cut batches the
                // kernel evicted (`recheck_unsure`).
                seg.carried_to = seg.carried_to.min(seg.size);
                if seg.log.truncate(seg.size).is_err() {
                    // Cut before the next write or the roll that seals this segment.
                    seg.tail_dirty = true;
                }
                return Err(e);
            }
            seg.size = at + encoded.len() as u64;
            seg.next_offset = base_offset + count;
            seg.newest_timestamp = seg.newest_timestamp.max(newest_timestamp);
            // The index is a cache: failing to extend it never fails the append.
            if let Err(e) = seg.maybe_index(base_offset, at, timestamp, encoded.len() as u64) {
                tracing::warn!(path = %seg.idx_path.display(), error = %e, "index entry not written; recovery will rebuild it");
            }
            // What the append acknowledges: every byte is carried (the next
            // sync of the file persists it), and on disk if it synced.
            assert!(
                seg.carried_to == seg.size && (!sync || seg.durable_to == seg.size),
                "{}: an append left bytes uncarried or, synced, not durable (durable to {}, carried to {}, size {})",
                seg.log_path.display(),
                seg.durable_to,
                seg.carried_to,
                seg.size
            );
            Ok(())
        })
    }

    /// Reserves the log file's next `RESERVE_AHEAD` bytes of blocks once the
    /// segment holds `RESERVE_AHEAD` and an append ending at `end` leaves
    /// fewer than `RESERVE_LEAD` reserved bytes ahead of it, so the appends
    /// find their blocks allocated (ADR 0031). The reservation starts at or
    /// past `end`: the append about to be written allocates its own blocks,
    /// since the reservation runs later, on `DiskStorage`'s reserver thread,
    /// without the engine lock. Best effort: a reservation changes no byte,
    /// so a failed one (a full disk, a file system without `fallocate`, a
    /// full queue) is logged and the appends go on without it; the next one
    /// is tried once they have used what is reserved.
    fn reserve_ahead(&mut self, end: u64) {
        if self.size < RESERVE_AHEAD || end.saturating_add(RESERVE_LEAD) <= self.reserved_to {
            return;
        }
        let from = self.reserved_to.max(end);
        let to = from.saturating_add(RESERVE_AHEAD);
        if let Err(e) = self.log.reserve(from, to - from) {
            tracing::debug!(path = %self.log_path.display(), error = %e, "blocks not reserved ahead of appends");
        }
        self.reserved_to = to;
    }

    /// Gives back what `reserve_ahead` reserved past the log's end: called
    /// when the segment is sealed. Best effort, as the reservation: blocks
    /// left reserved waste space until the segment is removed, nothing more.
    pub(crate) fn release_reserved(&mut self) {
        if self.reserved_to == 0 {
            return;
        }
        if let Err(e) = self.log.release_reserved() {
            tracing::debug!(path = %self.log_path.display(), error = %e, "blocks reserved past a sealed segment's end not released");
        }
        self.reserved_to = 0;
    }

    /// Cuts bytes a failed write left beyond `size`, if its own clean-up
    /// could not (`sync`: make the cut durable too, as a `persisted` append
    /// would). Until this succeeds the segment takes no write and is not
    /// sealed, so no later sync of it covers those bytes, and a sealed
    /// segment never ends in them.
    pub(crate) fn trim_tail(&mut self, sync: bool) -> Result<()> {
        self.checked(|seg| {
            if seg.tail_dirty {
                seg.log.truncate(seg.size)?;
                if sync {
                    seg.sync_log()?;
                }
                seg.tail_dirty = false;
            }
            Ok(())
        })
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
    /// Called in the middle of an append too (its sync failed, before
    /// `size` counts the batch), where only `durable_to` is known to be in
    /// bounds; setting `carried_to` to it restores every invariant.
    fn after_failed_sync(&mut self) {
        assert!(
            self.durable_to <= self.carried_to && self.durable_to <= self.size,
            "{}: a failed sync with durable to {} beyond carried to {} or size {}",
            self.log_path.display(),
            self.durable_to,
            self.carried_to,
            self.size
        );
        self.carried_to = self.durable_to;
        self.recheck_owed = true;
        self.check_invariants();
        if let Err(check) = self.settle_recheck() {
            tracing::warn!(path = %self.log_path.display(), error = %check, "segment tail not rechecked after a failed sync; rechecked before the segment is read or written");
        }
        self.check_invariants();
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
        self.checked(Segment::settle_deferred_unchecked)
    }

    /// `settle_deferred` between its checks.
    fn settle_deferred_unchecked(&mut self) -> Result<()> {
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
                // A batch reaching past the segment's `next_offset` is none
                // of its batches: a stale one the disk kept at a position
                // written again after a failed write.
                Ok((batch, len))
                    if batch.generation == self.generation
                        && batch.base_offset == expected
                        && batch.count > 0
                        && batch.count <= self.next_offset.saturating_sub(expected) =>
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
                                "batch of {} at offset {} breaks the sequence (expected offset {expected}, the segment ends before offset {})",
                                b.count, b.base_offset, self.next_offset
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
    ///
    /// # Panics
    /// Unless the cut shortens the segment and moves `next_offset` back
    /// within it: `recheck_unsure` cuts below `size`, at a batch it walked
    /// to from an index entry (whose offset is in `base_offset..next_offset`)
    /// or from the segment's start over batches that end by `next_offset`.
    fn cut_at(&mut self, pos: u64, next_offset: u64) {
        assert!(
            pos < self.size && (self.base_offset..=self.next_offset).contains(&next_offset),
            "{}: a cut at byte {pos} (size {}) to offset {next_offset} (offsets {}..{})",
            self.log_path.display(),
            self.size,
            self.base_offset,
            self.next_offset
        );
        self.checked(|seg| {
            tracing::warn!(path = %seg.log_path.display(), position = pos, bytes = seg.size - pos, "batches not on disk were lost from the page cache; segment cut");
            // Entries at or past the cut, by position or by offset (after a
            // walk over stale batches the two need not agree).
            let keep = seg
                .index
                .partition_point(|e| e.position < pos && e.offset < next_offset);
            if keep < seg.index.len() {
                seg.index.truncate(keep);
                let kept: usize = seg.index.iter().map(|e| index_frame(e).len()).sum();
                seg.idx_size = kept as u64;
                // The index is a cache: recovery drops entries past the log's end.
                if let Err(e) = seg.idx.truncate(seg.idx_size) {
                    tracing::warn!(path = %seg.idx_path.display(), error = %e, "index not cut; recovery will validate it");
                }
            }
            // Only the bytes that are left count towards the next entry.
            seg.bytes_since_index = seg.index.last().map_or(0, |e| pos - e.position);
            seg.size = pos;
            seg.next_offset = next_offset;
            seg.carried_to = seg.carried_to.min(pos);
            seg.durable_to = seg.durable_to.min(pos);
            if seg.log.truncate(pos).is_err() {
                seg.tail_dirty = true;
            }
        });
    }

    /// Writes the bytes from `carried_to` to `size` again, unchanged, so the
    /// next sync carries them. `recheck`: validate them first (see
    /// `recheck_unsure`); only recovery, whose scan has just validated
    /// exactly these bytes with no call on this file in between, skips it.
    fn carry_unsure(&mut self, recheck: bool) -> Result<()> {
        self.checked(|seg| seg.carry_unsure_unchecked(recheck))
    }

    /// `carry_unsure` between its checks.
    fn carry_unsure_unchecked(&mut self, recheck: bool) -> Result<()> {
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
        self.checked(|seg| {
            let from = seg.index.last().map_or(0, |e| e.position);
            seg.carried_to = seg.carried_to.min(from);
            seg.durable_to = seg.durable_to.min(from);
            // Recovery's tail scan read and checked these very bytes a moment
            // ago (`Partition::recover` calls this right after `Log::recover`):
            // checking them again would only read the tail a third time.
            seg.carry_unsure(false)
        })
    }

    /// Recovery takes every byte it found as on disk (`durable_to`), as
    /// everything an earlier process acknowledged under `persisted` is.
    /// Under `buffered` that is not known: the bytes may be pages no sync
    /// ever covered, and a failed sync of this file (the file pool's, ADR
    /// 0018) may evict them, so its recheck (`recheck_unsure`) must cover
    /// them, cutting what no longer reads back instead of reporting it as
    /// damage below `durable_to`.
    ///
    /// Nor are they known to be dirty (`carried_to`): a failed sync in an
    /// earlier process (Linux) drops the dirty state of the pages it leaves
    /// in the cache, and a later sync writes only dirty pages. A flush that
    /// then succeeded would make nothing durable, and a power loss would
    /// take what it promised (`sim run` seed 2997 of session 12: a flush
    /// failed, the process crashed, the next process's flush succeeded).
    /// So nothing recovered counts as carried: the next sync of the file (a
    /// flush, `sync`) and the next append (`write_batch`) write the
    /// recovered bytes again first (`carry_unsure`), once per process.
    pub(crate) fn distrust_recovered(&mut self) {
        self.checked(|seg| {
            seg.durable_to = 0;
            if crate::teeth::enabled(crate::teeth::Mechanism::CarryRecoveredBuffered) {
                seg.carried_to = 0;
            }
        });
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
    ///
    /// # Panics
    /// If the segment holds a batch.
    pub(crate) fn make_durably_empty(&mut self) -> Result<()> {
        assert!(
            self.is_empty(),
            "{}: only an empty segment is emptied",
            self.log_path.display()
        );
        self.checked(|seg| {
            seg.log.truncate(0)?;
            seg.sync_log()?;
            seg.carried_to = 0;
            seg.durable_to = 0;
            Ok(())
        })
    }

    /// Makes this segment's bytes durable (at a graceful shutdown, and
    /// before a roll seals it under `persisted`), rewriting first any bytes
    /// a failed sync may have left neither durable nor dirty.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.checked(|seg| {
            seg.carry_unsure(true)?;
            seg.sync_log()?;
            assert!(
                seg.durable_to == seg.size,
                "{}: a sync succeeded with bytes {} to {} not durable",
                seg.log_path.display(),
                seg.durable_to,
                seg.size
            );
            Ok(())
        })
    }

    /// Runs `step` between two checks of the invariants, as every
    /// transition of the segment's fields is (see the module invariants).
    fn checked<R>(&mut self, step: impl FnOnce(&mut Segment) -> R) -> R {
        self.check_invariants();
        let out = step(self);
        self.check_invariants();
        out
    }

    /// Asserts the module's invariants on the fields: O(1) on every path,
    /// the two that walk the index only in debug builds (simulations and
    /// tests). A broken one is a programmer error, never damage on disk:
    /// recovery makes them hold whatever the files held.
    pub(crate) fn check_invariants(&self) {
        let path = self.log_path.display();
        assert!(
            self.durable_to <= self.carried_to && self.carried_to <= self.size,
            "{path}: durable to {} <= carried to {} <= size {} broken",
            self.durable_to,
            self.carried_to,
            self.size
        );
        assert!(
            self.base_offset <= self.next_offset,
            "{path}: next offset {} below the base offset {}",
            self.next_offset,
            self.base_offset
        );
        assert!(
            !self.recheck_owed || self.carried_to == self.durable_to,
            "{path}: bytes {} to {} count as carried while a recheck is owed",
            self.durable_to,
            self.carried_to
        );
        let entries = self.index.len() as u64;
        assert!(
            (entries * INDEX_FRAME_MIN..=entries * INDEX_FRAME_MAX).contains(&self.idx_size),
            "{path}: {entries} index entries in {} bytes",
            self.idx_size
        );
        match (self.index.first(), self.index.last()) {
            (Some(first), Some(last)) => assert!(
                first.offset >= self.base_offset
                    && last.offset < self.next_offset
                    && last.position < self.size
                    && last.timestamp <= self.newest_timestamp
                    && self.bytes_since_index <= self.size - last.position,
                "{path}: index entries {first:?} to {last:?} outside offsets {}..{}, size {}, newest timestamp {}, or {} bytes since the last",
                self.base_offset,
                self.next_offset,
                self.size,
                self.newest_timestamp,
                self.bytes_since_index
            ),
            _ => assert!(
                self.bytes_since_index == 0,
                "{path}: {} bytes since an index entry with none",
                self.bytes_since_index
            ),
        }
        if cfg!(debug_assertions) {
            let framed: usize = self.index.iter().map(|e| index_frame(e).len()).sum();
            assert!(
                framed as u64 == self.idx_size,
                "{path}: the index entries frame to {framed} bytes, the index counts {}",
                self.idx_size
            );
            assert!(
                self.index
                    .windows(2)
                    .all(|w| w[0].offset < w[1].offset && w[0].position < w[1].position),
                "{path}: index entries not increasing"
            );
        }
    }

    pub(crate) fn file(&self) -> &dyn DurableFile {
        self.log.as_ref()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use sluice_storage::SimStorage;

    use super::super::message::{Message, frame_batch};
    use super::*;
    use crate::frame::FrameBuilder;

    const GENERATION: u64 = 1;
    const BASE: u64 = 100;
    const TIMESTAMP: u64 = 10;

    fn storage() -> SimStorage {
        let sim = SimStorage::default();
        sim.create_dir_all(Path::new("/log-dir")).unwrap();
        sim
    }

    fn dir() -> &'static Path {
        Path::new("/log-dir")
    }

    /// A framed batch of `count` messages from `base`.
    fn batch(base: u64, count: u64) -> Vec<u8> {
        let messages: Vec<Message> = (base..base + count)
            .map(|offset| Message {
                offset,
                timestamp: TIMESTAMP,
                origin_timestamp: None,
                id: u128::from(offset) + 1,
                checksum: crate::crc::crc32c(&[7u8; 40]),
                headers: None,
                payload: Bytes::from(vec![7u8; 40]),
            })
            .collect();
        frame_batch(GENERATION, base, &messages).unwrap().to_vec()
    }

    fn entry(offset: u64, position: u64) -> IndexEntry {
        IndexEntry {
            offset,
            position,
            timestamp: TIMESTAMP,
        }
    }

    /// Writes the two files of the segment at `base` as given, then
    /// recovers it as the log's last segment.
    fn recover_from(base: u64, log: &[u8], idx: &[u8]) -> (Segment, Option<ScanIssue>) {
        let sim = storage();
        for (ext, bytes) in [(LOG_EXT, log), (INDEX_EXT, idx)] {
            let path = dir().join(segment_name(GENERATION, base, ext));
            let file = sim.open(&path, OpenMode::CreateOrOpen).unwrap();
            file.write_at(0, bytes).unwrap();
        }
        Segment::recover(&sim, dir(), GENERATION, base, Tail::MayBeTorn).unwrap()
    }

    /// Recovers a segment at `BASE` of two batches, of 2 and of `second`
    /// messages, whose index names `first_entry` at byte 0 and the second
    /// batch where it starts (returned too).
    fn recover_two_batches(first_entry: u64, second: u64) -> (Segment, Option<ScanIssue>, u64) {
        let first = batch(BASE, 2);
        let position = first.len() as u64;
        let log = [first, batch(BASE + 2, second)].concat();
        let idx = [
            index_frame(&entry(first_entry, 0)),
            index_frame(&entry(BASE + 2, position)),
        ]
        .concat();
        let (seg, issue) = recover_from(BASE, &log, &idx);
        (seg, issue, position)
    }

    #[test]
    fn index_entries_below_the_base_offset_are_dropped_at_recovery() {
        // Given: two batches, and an index whose last entry checks out but
        // whose first names an offset below the segment's base.
        // When: the segment is recovered.
        let (seg, issue, position) = recover_two_batches(5, 3);
        // Then: the index is rebuilt by scanning (its invariants hold).
        assert_eq!(issue, None);
        assert_eq!(seg.index, vec![entry(BASE, 0)]);
        let end = position + batch(BASE + 2, 3).len() as u64;
        assert_eq!((seg.size, seg.next_offset), (end, BASE + 5));
    }

    #[test]
    fn an_index_entry_framed_otherwise_than_this_build_writes_it_is_dropped_at_recovery() {
        // Given: the right entry for the first batch, its offset encoded in
        // three bytes instead of one (the codec reads that too).
        let log = batch(0, 2);
        let mut b = FrameBuilder::new(8);
        b.encode(&(251u8, 0u8, 0u8, 0u8, TIMESTAMP as u8)).unwrap();
        let idx = b.finish(Magic::INDEX, INDEX_VERSION).unwrap().to_vec();
        let (decoded, _) =
            frame::decode::<IndexEntry>(Magic::INDEX, INDEX_VERSION, &idx, MAX_INDEX_ENTRY)
                .unwrap();
        assert_eq!(decoded, entry(0, 0));
        // When: recovered (as a segment based at 0).
        let (seg, _) = recover_from(0, &log, &idx);
        // Then: the index counts the bytes of the frame this build writes.
        assert_eq!(seg.index, vec![entry(0, 0)]);
        assert_eq!(seg.idx_size, index_frame(&entry(0, 0)).len() as u64);
    }

    #[test]
    fn an_index_entry_at_an_empty_batch_is_dropped_at_recovery() {
        // Given: a batch, then a valid batch of no messages (sluice never
        // writes one) that the index's last entry names.
        // When: the segment is recovered.
        let (seg, issue, position) = recover_two_batches(BASE, 0);
        // Then: the empty batch is cut as a torn tail, and no index entry
        // points at the segment's end.
        assert!(matches!(issue, Some(ScanIssue::TailCut { position: p, .. }) if p == position));
        assert_eq!(seg.index, vec![entry(BASE, 0)]);
        assert_eq!((seg.size, seg.next_offset), (position, BASE + 2));
    }

    #[test]
    fn a_broken_invariant_stops_the_process() {
        let sim = storage();
        let mut seg = Segment::create(&sim, dir(), GENERATION, BASE).unwrap();
        let framed = frame_batch(GENERATION, BASE, &[]).unwrap();
        let panics = |f: &mut dyn FnMut()| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
        };
        assert!(
            panics(&mut || {
                let _ = seg.write_batch(&framed, BASE, 0, 0, 0, true);
            }),
            "an empty batch"
        );
        seg.durable_to = 1;
        assert!(
            panics(&mut || seg.check_invariants()),
            "durable past the end"
        );
        assert!(
            panics(&mut || {
                let _ = seg.sync();
            }),
            "checked before a sync"
        );
    }
}
