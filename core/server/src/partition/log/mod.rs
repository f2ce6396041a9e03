//! A partition's message log for one purge generation.
//!
//! Invariants:
//! - Every segment and every batch belongs to `generation`; segments of other
//!   generations are never opened by the log (recovery reports them, purge
//!   cleanup removes the older ones).
//! - Offsets never repeat, and within a segment they are dense: an append
//!   either lands whole (and advances `next_offset`) or fails and leaves it
//!   unchanged, and a segment holds consecutive offsets from its base.
//!   Between segments they may have a gap, which reads step over: after a
//!   power loss under `buffered` a segment may come back shorter than the
//!   one after it began; recovery continues after the highest stored offset
//!   (`continue_from`, ADR 0010) and never below the low-water mark; and a
//!   failed sync's recheck that cuts batches the kernel evicted
//!   (`Segment::recheck_unsure`) keeps `next_offset`, so the cut offsets are
//!   never given out again (under `persisted` they were never acknowledged).
//!   Whenever `next_offset` is not the last segment's end, the next append
//!   starts a segment.
//! - After recovery every segment the log serves holds at least one batch:
//!   empty ones are made durably empty and skipped (and left on disk, since
//!   only cleanup unlinks, ADR 0008), so `next_offset` always comes from real
//!   data, never from the base of a segment whose bytes were lost. (While
//!   serving, a cut can empty a segment, which then stays in the log.)
//! - One write per batch (vectored: the frame's own bytes and the payloads
//!   of 512 B and more straight from the messages' buffers, never copied
//!   into one frame first), one positioned read per header and per batch
//!   payload on polls; no per-message syscall, allocation or payload copy
//!   (a served payload is a view of its batch's read buffer, checked whole
//!   by the batch's CRC32C before anything in it is served).
//! - Recovery reads each segment's index and its tail from the last index
//!   entry once (the batch the index check reads is the scan's first), the
//!   newest segment's tail once more to write it again under `persisted`;
//!   never the rest of the log (`tests/engine_recovery.rs` bounds it).
//! - Nothing below `low_water` (the partition's committed retention
//!   low-water mark, ADR 0016) is loaded or served: recovery leaves segments
//!   below it unopened (reported for the retention obligation), `set_low_water`
//!   drops them from memory, reads start at it whatever survived on disk, and
//!   `next_offset` never falls below it (an offset below it is never reused).
//!   The mark always lies on a segment boundary, so no segment straddles it.
//! - `sealed_bytes` is the size of every segment but the last: only the last
//!   segment is ever written, so it changes only when a roll seals one,
//!   retention drops some, a purge restarts the log, or a failed sync of a
//!   sealed one (the file pool's, or a flush's) cut its lost batches. Every
//!   operation that can cut a segment runs through `on_segment` (used by
//!   `settle_segment` and `sync_segment`), which counts them again when a
//!   sealed one shrank; a log's size costs O(1), and `check` compares it with
//!   the segments.
//! - A segment's bytes are read only after the syncs the file pool made of
//!   it and saw fail are handled (`settle_segment`), and that is done for
//!   each segment right before a poll reads it, not only when the poll
//!   starts: reading one segment may reopen its log, and the pool may then
//!   close another segment's, whose failed sync may evict the very pages
//!   the poll reads next (ADR 0018; `sim run --max-open-files 2` seed 4).
//!   Nothing between that settle and the segment's reads opens another
//!   file, so no eviction can come in between.

mod buffers;
mod decode;
mod message;
mod segment;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use message::BatchView;
pub use message::{
    BatchRecord, HeaderKey, HeaderValue, Headers, IndexEntry, MAX_BATCH_BYTES, Message, NewMessage,
    STRING_KEY_KIND, v1,
};
pub use segment::ScanIssue;
pub(crate) use segment::{ReadAt, decode_index};
use segment::{Segment, Tail, read_batch_with};
use sluice_storage::DurableStorage;

use crate::error::{EngineError, Result};
use crate::frame::{FrameError, HEADER_LEN};
use crate::layout::{INDEX_EXT, LOG_EXT, parse_segment_name, segment_name};

/// What recovery found in a segment directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogRecovery {
    /// Segment files of older generations: dead, left for purge cleanup.
    pub stale_files: Vec<String>,
    /// Segment files of a *newer* generation than the committed one, or with
    /// names sluice does not write. Ignored and reported.
    pub(crate) foreign_files: Vec<String>,
    /// Torn tails that were cut, per segment path.
    pub tail_cuts: Vec<(PathBuf, ScanIssue)>,
    /// Segments (their `.log` names) that held no batch: not served, left in
    /// place for a roll at the same base to reuse or the next purge to remove.
    pub(crate) skipped_empty: Vec<String>,
    /// Name changes made repairing interrupted re-dirty renames, for the
    /// segments directory's tracker (see `repair_redirty_leftovers`).
    pub(crate) repaired: Vec<(String, crate::dirsync::NameChange)>,
    /// Segment files of the served generation below the low-water mark: never
    /// opened, left for the retention obligation to remove.
    pub below_low_water: Vec<String>,
}

/// What retention needs to know of one sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SealedSegment {
    pub(crate) base_offset: u64,
    /// One past its last offset: the low-water mark that removes it.
    pub(crate) next_offset: u64,
    pub(crate) size: u64,
    pub(crate) newest_timestamp: u64,
}

#[derive(Debug)]
pub struct Log {
    storage: Arc<dyn DurableStorage>,
    dir: PathBuf,
    generation: u64,
    segment_size: u64,
    segments: Vec<Segment>,
    /// Offset the next message gets.
    next_offset: u64,
    /// The committed retention low-water mark: the first retained offset.
    low_water: u64,
    /// Bytes of every segment but the last (see the module invariants).
    sealed_bytes: u64,
    /// Base offset of the last segment a roll tried to create, until the
    /// caller takes it (`take_roll_attempt`) to note its names for a
    /// directory sync.
    roll_attempt: Option<u64>,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    pub(crate) base_offset: u64,
    pub(crate) count: u64,
    /// Whether this append created a new segment file.
    pub(crate) new_segment: bool,
}

/// The open segment files of a history a purge replaced (see
/// `Log::restart_at`): closed when dropped.
#[derive(Debug)]
pub(crate) struct RetiredSegments {
    _files: Vec<Segment>,
}

impl Log {
    /// A log with no segments yet (the first append creates one).
    pub(crate) fn empty(
        storage: Arc<dyn DurableStorage>,
        dir: &Path,
        generation: u64,
        segment_size: u64,
    ) -> Log {
        Log {
            storage,
            dir: dir.to_path_buf(),
            generation,
            segment_size: segment_size.max(1),
            segments: Vec::new(),
            next_offset: 0,
            low_water: 0,
            sealed_bytes: 0,
            roll_attempt: None,
        }
    }

    /// Starts the empty history of `generation` in place (a purge's commit)
    /// and hands back the replaced one's open files. The same state as
    /// `Log::empty` of the same directory, built without allocating.
    pub(crate) fn restart_at(&mut self, generation: u64) -> RetiredSegments {
        assert!(
            generation > self.generation,
            "generations only grow ({} -> {generation})",
            self.generation
        );
        self.generation = generation;
        self.next_offset = 0;
        self.low_water = 0;
        self.sealed_bytes = 0;
        self.roll_attempt = None;
        RetiredSegments {
            _files: std::mem::take(&mut self.segments),
        }
    }

    /// Rebuilds the log of `generation` from its directory.
    /// Segments of a generation below `floor` are stale (reported, never
    /// opened). Production passes `floor == generation`; only the naive purge
    /// kept for tests passes a lower floor (no filtering, as Iggy recovers).
    /// Segments of `generation` whose base is below `low_water` are not
    /// opened either (`below_low_water`): the mark is a segment boundary, so
    /// such a segment holds only offsets below it. `buffered`: the topic's
    /// appends are acknowledged before any sync, so a sealed segment's tail
    /// that a failed writeback zeroed is cut, not corruption (`Tail`).
    pub fn recover(
        storage: Arc<dyn DurableStorage>,
        dir: &Path,
        generation: u64,
        floor: u64,
        segment_size: u64,
        low_water: u64,
        buffered: bool,
    ) -> Result<(Log, LogRecovery)> {
        let mut log = Log::empty(storage.clone(), dir, generation, segment_size);
        let mut report = LogRecovery::default();
        let mut names = storage.list_dir(dir)?;
        if names
            .iter()
            .any(|n| n.ends_with(crate::dirsync::REDIRTY_SUFFIX))
        {
            report.repaired =
                crate::dirsync::repair_redirty_leftovers(storage.as_ref(), dir, &names)?;
            names = storage.list_dir(dir)?;
        }
        let mut bases = Vec::new();
        for name in &names {
            if name
                .strip_suffix(crate::layout::PURGED_SUFFIX)
                .and_then(parse_segment_name)
                .is_some()
            {
                // Renamed by purge cleanup before its unlink (ADR 0020): dead
                // whatever its name says; the pending cleanup removes it.
                report.stale_files.push(name.clone());
                continue;
            }
            match parse_segment_name(name) {
                Some((g, _, _)) if g < floor => report.stale_files.push(name.clone()),
                Some((g, base, LOG_EXT | INDEX_EXT)) if g == generation && base < low_water => {
                    report.below_low_water.push(name.clone())
                }
                Some((g, base, LOG_EXT)) if g <= generation => bases.push((g, base)),
                Some((g, _, INDEX_EXT)) if g <= generation => {}
                _ => report.foreign_files.push(name.clone()),
            }
        }
        // The listing is sorted, so `bases` is in offset order. Only the
        // newest segment that holds data may end in a torn write; segments
        // after it hold nothing (see below). Walk from the newest back.
        let mut recovered = Vec::with_capacity(bases.len());
        let mut data_seen = false;
        for &(seg_generation, base) in bases.iter().rev() {
            let (seg, issue) = Segment::recover(
                storage.as_ref(),
                dir,
                seg_generation,
                base,
                match (data_seen, buffered) {
                    (false, _) => Tail::MayBeTorn,
                    (true, false) => Tail::Sealed,
                    (true, true) => Tail::SealedMayBeLost,
                },
            )?;
            if let Some(issue) = issue {
                tracing::warn!(path = %seg.log_path.display(), ?issue, "cut a torn segment tail");
                report.tail_cuts.push((seg.log_path.clone(), issue));
            }
            if seg.is_empty() {
                let mut seg = seg;
                seg.make_durably_empty()?;
                // Nothing acknowledged: a roll whose first write was lost, or
                // a name a power loss kept without its bytes. Its base may lie
                // beyond the real data, so it must not set `next_offset`. It
                // is left in place, not unlinked: an unlink outside the purge
                // protocol is recorded nowhere, so a failed directory sync and
                // a crash could leave it durable after a purge has applied. A
                // later roll at the same base reuses it; otherwise the next
                // purge removes it with the rest of its generation.
                report
                    .skipped_empty
                    .push(segment_name(seg_generation, base, LOG_EXT));
                continue;
            }
            data_seen = true;
            recovered.push(seg);
        }
        recovered.reverse();
        log.segments = recovered;
        log.sealed_bytes = sealed_bytes(&log.segments);
        // Offsets below the mark are never given out again, even if every
        // segment above it was lost (a buffered tail taken by a power loss).
        log.low_water = low_water;
        log.next_offset = log
            .segments
            .last()
            .map_or(0, |s| s.next_offset)
            .max(low_water);
        Ok((log, report))
    }

    pub(crate) fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Makes the next message get at least `next`: the offsets below it are
    /// never given out again (see `Partition::recover`). The next append
    /// starts a segment at `next`.
    pub(crate) fn continue_from(&mut self, next: u64) {
        self.next_offset = self.next_offset.max(next);
    }

    /// The offset of the last message, `None` when the log is empty.
    pub fn last_offset(&self) -> Option<u64> {
        // The newest segment holding data (not `next_offset - 1`: after
        // `continue_from` the offsets below `next_offset` may name nothing).
        self.segments
            .iter()
            .rev()
            .find(|s| !s.is_empty())
            .and_then(|s| s.next_offset.checked_sub(1))
    }

    /// The first offset still stored.
    pub(crate) fn first_offset(&self) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| !s.is_empty())
            .map(|s| s.base_offset)
    }

    pub(crate) fn message_count(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.next_offset - s.base_offset)
            .sum()
    }

    pub fn size_bytes(&self) -> u64 {
        self.sealed_bytes + self.segments.last().map_or(0, |s| s.size)
    }

    /// The committed retention low-water mark (0: nothing was ever expired).
    pub fn low_water(&self) -> u64 {
        self.low_water
    }

    /// The sealed segments (every one but the last, which is active), oldest
    /// first: the only ones retention may remove.
    pub(crate) fn sealed(&self) -> impl Iterator<Item = SealedSegment> + '_ {
        let n = self.segments.len().saturating_sub(1);
        self.segments[..n].iter().map(|s| SealedSegment {
            base_offset: s.base_offset,
            next_offset: s.next_offset,
            size: s.size,
            newest_timestamp: s.newest_timestamp,
        })
    }

    /// The newest message timestamp in the log (0 when empty).
    pub(crate) fn newest_timestamp(&self) -> u64 {
        // The newest segment holding data (the last may be an empty roll).
        self.segments
            .iter()
            .rev()
            .find(|s| !s.is_empty())
            .map_or(0, |s| s.newest_timestamp)
    }

    /// Raises the low-water mark to `mark`, just committed durably: the
    /// sealed segments below it leave memory (their files are the retention
    /// obligation's). Returns how many segments left.
    pub(crate) fn set_low_water(&mut self, mark: u64) -> usize {
        assert!(
            mark >= self.low_water,
            "invariant: the low-water mark only grows ({} -> {mark})",
            self.low_water
        );
        // The last segment is the active one and never leaves, even empty: a
        // roll whose first write failed leaves a new segment whose base is
        // the sealed one's end, so it "ends" at a mark placed there too
        // (retention-by-size explorer, two faults). That the active segment
        // holds nothing below the mark is the boundary check below.
        let below = self
            .segments
            .partition_point(|s| s.next_offset <= mark)
            .min(self.segments.len().saturating_sub(1));
        assert!(
            self.segments
                .get(below)
                .is_none_or(|s| s.base_offset >= mark),
            "invariant: the low-water mark {mark} lies on a segment boundary"
        );
        self.segments.drain(..below);
        self.sealed_bytes = sealed_bytes(&self.segments);
        self.low_water = mark;
        self.next_offset = self.next_offset.max(mark);
        below
    }

    /// The log's own invariants, for `Engine::check_invariants`.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if let Some(s) = self
            .segments
            .iter()
            .find(|s| s.base_offset < self.low_water)
        {
            return Err(format!(
                "segment at {} is loaded below the low-water mark {}",
                s.base_offset, self.low_water
            ));
        }
        if self.next_offset < self.low_water {
            return Err(format!(
                "next offset {} is below the low-water mark {}",
                self.next_offset, self.low_water
            ));
        }
        if self.sealed_bytes != sealed_bytes(&self.segments) {
            return Err(format!(
                "sealed bytes {} but the sealed segments hold {}",
                self.sealed_bytes,
                sealed_bytes(&self.segments)
            ));
        }
        Ok(())
    }

    /// Syncs every segment file (a graceful shutdown's flush of buffered appends).
    pub(crate) fn sync_all(&mut self) -> Result<()> {
        for i in 0..self.segments.len() {
            self.sync_segment(i)?;
        }
        Ok(())
    }

    /// `Segment::sync` for segment `i`: a failed sync rechecks the unsure
    /// tail and may cut it (`sim run` seed 85 of session 11: a flush's failed
    /// sync of a sealed `buffered` segment).
    fn sync_segment(&mut self, i: usize) -> Result<()> {
        self.on_segment(i, Segment::sync)
    }

    /// Runs `f` on segment `i`, which may cut the segment (a failed sync's
    /// recheck); a sealed one cut is counted again in `sealed_bytes`.
    fn on_segment(&mut self, i: usize, f: impl FnOnce(&mut Segment) -> Result<()>) -> Result<()> {
        let sealed = i + 1 < self.segments.len();
        let Some(segment) = self.segments.get_mut(i) else {
            return Ok(());
        };
        let before = segment.size;
        let done = f(segment);
        if sealed && segment.size != before {
            self.sealed_bytes = sealed_bytes(&self.segments);
        }
        done
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// See `Segment::redirty_tail`: the newest segment's recovered tail is
    /// written again so that the next `persisted` append's sync carries it.
    pub(crate) fn redirty_tail(&mut self) -> Result<()> {
        match self.segments.last_mut() {
            Some(seg) => seg.redirty_tail(),
            None => Ok(()),
        }
    }

    /// See `Segment::distrust_recovered`: under `buffered`, no recovered
    /// byte is known to be on disk.
    pub(crate) fn distrust_recovered(&mut self) {
        for seg in &mut self.segments {
            seg.distrust_recovered();
        }
    }

    /// Base offsets of every segment, oldest first.
    pub(crate) fn segment_bases(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.base_offset).collect()
    }

    /// The base offset of the segment the last append tried to create, if it
    /// rolled, whether or not the append succeeded. Its files may exist even
    /// if the roll failed (the opens create them before the truncates and
    /// the write), so the caller must count their names as created: a later
    /// roll at the same base reuses the files, and a directory sync that
    /// fails in between drops names its tracker does not know, leaving
    /// nothing for the redo to make dirty again.
    pub(crate) fn take_roll_attempt(&mut self) -> Option<u64> {
        self.roll_attempt.take()
    }

    /// Handles the syncs the file pool made for these segments and saw
    /// fail (ADR 0018), as far as it can: a segment whose recheck could not
    /// be done yet (a storage error) is settled again right before it is
    /// read or written (`settle_segment`), which then fails instead.
    pub(crate) fn settle_deferred(&mut self) {
        for i in 0..self.segments.len() {
            if let Err(e) = self.settle_segment(i) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "a segment's failed sync could not be rechecked yet; it is settled again before the segment is read or written");
            }
        }
    }

    /// `Segment::settle_deferred` for segment `i`.
    fn settle_segment(&mut self, i: usize) -> Result<()> {
        self.on_segment(i, Segment::settle_deferred)
    }

    /// Appends one batch. `sync` makes it durable before returning (and, when
    /// it rolled, see `take_roll_attempt`, the caller must also sync the
    /// directory). Refused (`Unavailable`) if the recheck of the last
    /// segment's unsure bytes just before the write cut batches: the retried
    /// send starts a segment (`Segment::write_batch`).
    ///
    /// # Panics
    /// On an empty batch (`Partition::append` refuses one).
    pub(crate) fn append(&mut self, messages: Vec<Message>, sync: bool) -> Result<Appended> {
        assert!(!messages.is_empty(), "an empty batch reached the log");
        self.settle_deferred();
        // The segment written (or sealed by a roll) must be settled.
        if let Some(last) = self.segments.len().checked_sub(1) {
            self.settle_segment(last)?;
        }
        let count = messages.len() as u64;
        let base_offset = self.next_offset;
        let timestamp = messages.first().map_or(0, |m| m.timestamp);
        let newest = messages.iter().map(|m| m.timestamp).max().unwrap_or(0);
        // Payloads are written from the messages' own buffers (one
        // vectored write), not copied into one frame first.
        let too_large = |len: usize| EngineError::Invalid {
            what: "batch",
            reason: format!("{len} bytes exceeds the limit of {MAX_BATCH_BYTES}"),
        };
        let encoded = match message::frame_batch(self.generation, base_offset, &messages) {
            Ok(encoded) if encoded.len() > MAX_BATCH_BYTES => return Err(too_large(encoded.len())),
            Ok(encoded) => encoded,
            // A payload whose length does not fit the frame's u32: a send of
            // over 4 GiB, which a large body bound lets through.
            Err(FrameError::TooLarge { len, .. }) => {
                return Err(too_large(len.saturating_add(HEADER_LEN)));
            }
            // The values always encode: the codec fails into a `Vec` only on
            // a sequence without a length or a custom serializer error.
            Err(e) => unreachable!("a batch's fields always encode: {e}"),
        };
        // A failed write's leftover bytes go before this write, and before a
        // roll seals the segment they are in.
        if let Some(last) = self.segments.last_mut() {
            last.trim_tail(sync)?;
        }
        // A segment holds consecutive offsets: after `continue_from` the next
        // batch starts a segment of its own.
        let roll = self.segments.last().is_none_or(|s| {
            s.next_offset != base_offset
                || (s.size > 0 && s.size + encoded.len() as u64 > self.segment_size)
        });
        if roll {
            if sync && let Some(last) = self.segments.len().checked_sub(1) {
                // A sealed segment must be durable before a later one holds
                // acknowledged data: its recovered tail (`redirty_tail`) may
                // be dirty with no append left to sync it, and a power loss
                // would then leave a gap below acknowledged offsets. (Still
                // the last segment: `sealed_bytes` does not count it yet.)
                self.sync_segment(last)?;
            }
            self.roll_attempt = Some(base_offset);
            let seg = Segment::create(
                self.storage.as_ref(),
                &self.dir,
                self.generation,
                base_offset,
            )?;
            // The segment being sealed is written no more: its size is final,
            // and the blocks reserved past it are not needed.
            if let Some(sealed) = self.segments.last_mut() {
                self.sealed_bytes += sealed.size;
                sealed.release_reserved();
            }
            self.segments.push(seg);
        }
        let Some(seg) = self.segments.last_mut() else {
            unreachable!("a log has a segment after a roll (no roll means it had one)");
        };
        seg.write_batch(&encoded, base_offset, count, timestamp, newest, sync)?;
        self.next_offset = base_offset + count;
        Ok(Appended {
            base_offset,
            count,
            new_segment: roll,
        })
    }

    /// Up to `count` messages starting at `offset` (or at the first stored one after it).
    /// Each batch is read into one buffer and checked once; the messages
    /// served from it are views of that buffer (no copy per message).
    pub fn read(&mut self, offset: u64, count: u64) -> Result<Vec<Message>> {
        // By the committed mark, never by what happens to be loaded.
        let offset = offset.max(self.low_water);
        if count == 0 {
            return Ok(Vec::new());
        }
        let want = usize::try_from(count).unwrap_or(usize::MAX);
        // Sized for what the log holds from `offset` on: growing a `Vec` of
        // 1,000 messages by doubling moved them about twice over (a few
        // percent of a poll). Bounded, so a huge `count` on a huge log
        // reserves no more up front than it did by growing.
        let held = usize::try_from(self.next_offset.saturating_sub(offset)).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(want.min(held).min(PREALLOCATE_AT_MOST));
        let first = self.segments.partition_point(|s| s.next_offset <= offset);
        for i in first..self.segments.len() {
            // Reading the segments before it may have made the pool close
            // this one's log (see the module invariants).
            self.settle_segment(i)?;
            let seg = &self.segments[i];
            read_into(
                seg.file(),
                &seg.index,
                seg.size,
                offset,
                want,
                &mut out,
                &seg.log_path,
            )?;
            if out.len() == want {
                return Ok(out);
            }
        }
        Ok(out)
    }

    /// A copy of the sealed segment at `base`, for the remote tier: its
    /// bytes made durable first (a sync of a sealed segment, which may cut
    /// lost batches: the copy is of what stays), then read whole, with its
    /// index re-encoded canonically. `None` if no such sealed segment holds
    /// data.
    pub(crate) fn sealed_copy(&mut self, base: u64) -> Result<Option<SealedCopy>> {
        let sealed = self.segments.len().saturating_sub(1);
        let Some(i) = self.segments[..sealed]
            .iter()
            .position(|s| s.base_offset == base)
        else {
            return Ok(None);
        };
        self.settle_segment(i)?;
        self.sync_segment(i)?;
        let seg = &self.segments[i];
        if seg.is_empty() {
            return Ok(None);
        }
        let len = usize::try_from(seg.size)
            .map_err(|_| EngineError::Internal(format!("segment of {} bytes", seg.size)))?;
        let mut bytes = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            let n = segment::ReadAt::read_at(seg.file(), filled as u64, &mut bytes[filled..])?;
            if n == 0 {
                return Err(EngineError::CorruptFile {
                    path: seg.log_path.clone(),
                    offset: filled as u64,
                    reason: format!("ends at {filled} bytes, {len} expected"),
                });
            }
            filled += n;
        }
        Ok(Some(SealedCopy {
            base: seg.base_offset,
            next_offset: seg.next_offset,
            newest_timestamp: seg.newest_timestamp,
            log: bytes::Bytes::from(bytes),
            index: bytes::Bytes::from(segment::encode_index(&seg.index)),
        }))
    }

    /// The offset of the first message with a timestamp >= `ts`.
    pub(crate) fn offset_for_timestamp(&mut self, ts: u64) -> Result<Option<u64>> {
        for i in 0..self.segments.len() {
            // As in `read`: settled right before it is read.
            self.settle_segment(i)?;
            let seg = &self.segments[i];
            let found = find_timestamp_in(seg.file(), &seg.index, seg.size, ts, &seg.log_path)?;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}

/// A sealed segment's bytes and index, copied for the remote tier.
#[derive(Debug, Clone)]
pub(crate) struct SealedCopy {
    pub(crate) base: u64,
    pub(crate) next_offset: u64,
    pub(crate) newest_timestamp: u64,
    pub(crate) log: bytes::Bytes,
    pub(crate) index: bytes::Bytes,
}

/// Appends to `out`, up to `want` in all, the messages at or after `offset`
/// of the sealed or active segment whose log bytes `reader` gives (`size`
/// of them, indexed by `index`). Every batch is checked whole before
/// anything in it is served; one that does not check out is `CorruptFile`,
/// naming `name` (a path, or a remote key) and the position.
pub(crate) fn read_into(
    reader: &(impl ReadAt + ?Sized),
    index: &[IndexEntry],
    size: u64,
    offset: u64,
    want: usize,
    out: &mut Vec<Message>,
    name: &Path,
) -> Result<()> {
    let mut pos = segment::position_in(index, offset);
    while pos < size && out.len() < want {
        let len = batch_in(reader, pos, size, name, |buffer, view| {
            for m in &view.messages {
                if m.offset >= offset && out.len() < want {
                    out.push(m.to_message(buffer));
                }
            }
        })?;
        pos += len;
    }
    Ok(())
}

/// The offset of the first message with a timestamp at or after `ts` in the
/// segment `reader` gives, if it holds one.
pub(crate) fn find_timestamp_in(
    reader: &(impl ReadAt + ?Sized),
    index: &[IndexEntry],
    size: u64,
    ts: u64,
    name: &Path,
) -> Result<Option<u64>> {
    let mut pos = segment::position_for_timestamp_in(index, ts);
    while pos < size {
        let mut found = None;
        let len = batch_in(reader, pos, size, name, |_, view| {
            found = view
                .messages
                .iter()
                .find(|m| m.timestamp >= ts)
                .map(|m| m.offset);
        })?;
        if found.is_some() {
            return Ok(found);
        }
        pos += len;
    }
    Ok(None)
}

/// `read_batch_with`, with a batch that does not check out as `CorruptFile`.
fn batch_in(
    reader: &(impl ReadAt + ?Sized),
    pos: u64,
    size: u64,
    name: &Path,
    f: impl FnOnce(&bytes::Bytes, BatchView<'_>),
) -> Result<u64> {
    read_batch_with(reader, pos, size, f)?
        .map(|((), len)| len)
        .map_err(|e| EngineError::CorruptFile {
            path: name.to_path_buf(),
            offset: pos,
            reason: e.to_string(),
        })
}

/// Messages a read reserves room for before it has read any (see `read`).
const PREALLOCATE_AT_MOST: usize = 16_384;

/// The bytes of every segment but the last.
fn sealed_bytes(segments: &[Segment]) -> u64 {
    let n = segments.len().saturating_sub(1);
    segments[..n].iter().map(|s| s.size).sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use bytes::Bytes;
    use sluice_storage::{DurableStorage, SimStorage};

    use super::*;

    /// A poll's payloads are views of their batch's one read buffer, at the
    /// places the batch encoding puts them (no per-message copy): within a
    /// batch each payload starts exactly where the stored bytes between it
    /// and the previous one end. Separately allocated payloads would not
    /// sit at those distances.
    #[test]
    fn polled_payloads_are_views_into_their_batchs_read_buffer() {
        let sim = SimStorage::default();
        let dir = Path::new("/log-dir");
        sim.create_dir_all(dir).unwrap();
        let storage: Arc<dyn DurableStorage> = Arc::new(sim);
        let mut log = Log::empty(storage, dir, 1, 1 << 20);
        let messages: Vec<Message> = (0..4u64)
            .map(|i| Message {
                offset: i,
                timestamp: 10 + i,
                origin_timestamp: None,
                id: u128::from(i) + 1,
                checksum: crate::crc::crc32c(&vec![i as u8; 700 + i as usize]),
                headers: None,
                payload: Bytes::from(vec![i as u8; 700 + i as usize]),
            })
            .collect();
        log.append(messages.clone(), false).unwrap();
        let polled = log.read(0, 10).unwrap();
        assert_eq!(polled, messages);
        for pair in polled.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let gap = (b.payload.as_ptr() as usize).wrapping_sub(a.payload.as_ptr() as usize);
            // Between them in the record: a's payload, then b's fields as
            // bincode varints: offset, timestamp, id (1 byte each, all below
            // 251), the checksum (its payload's CRC32C, at least 251: 0xFC
            // and a u32, 5 bytes), `headers: None` (1 byte) and the
            // payload's length (701 to 703: 0xFB and a u16, 3 bytes).
            assert!(b.checksum >= 251);
            assert_eq!(
                gap,
                a.payload.len() + 12,
                "payload of {} at {gap}",
                b.offset
            );
        }
    }

    /// The length of the file at `path` and the bytes allocated to it.
    fn allocation(path: &Path) -> (u64, u64) {
        sluice_storage::DiskStorage::new().allocation(path).unwrap()
    }

    /// ADR 0031: on a real disk, a segment that has grown past
    /// `RESERVE_AHEAD` has blocks reserved past its end, and gives them back
    /// when it is sealed; what it serves is unchanged.
    #[test]
    fn given_a_growing_segment_on_disk_when_it_is_sealed_then_its_reserved_blocks_are_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn DurableStorage> = Arc::new(sluice_storage::DiskStorage::new());
        let disk = sluice_storage::DiskStorage::new();
        if !disk.reserves_blocks(dir.path()).unwrap() {
            eprintln!("skipped: the file system reserves no blocks");
            return;
        }
        let segment_size = 3 * super::segment::RESERVE_AHEAD;
        let mut log = Log::empty(storage, dir.path(), 1, segment_size);
        let payload = Bytes::from(vec![7u8; 64 << 10]);
        let batch = |first: u64| -> Vec<Message> {
            (first..first + 16)
                .map(|i| Message {
                    offset: i,
                    timestamp: 10 + i,
                    origin_timestamp: None,
                    id: u128::from(i) + 1,
                    checksum: crate::crc::crc32c(&payload),
                    headers: None,
                    payload: payload.clone(),
                })
                .collect()
        };
        log.append(batch(0), false).unwrap();
        let mut next = 16;
        // Given a segment past RESERVE_AHEAD (1 MiB batches).
        while log.segments[0].size < super::segment::RESERVE_AHEAD + (2 << 20) {
            log.append(batch(next), false).unwrap();
            next += 16;
        }
        let first = log.segments[0].log_path.clone();
        disk.settle_reservations();
        let (len, allocated) = allocation(&first);
        assert!(
            allocated >= len + super::segment::RESERVE_AHEAD / 2,
            "reserved ahead: {allocated} bytes allocated for {len}"
        );
        // When it is sealed by a roll.
        while log.segments.len() == 1 {
            log.append(batch(next), false).unwrap();
            next += 16;
        }
        // Then the blocks past its end are given back, and every message reads back.
        let (len, allocated) = allocation(&first);
        assert!(
            allocated < len + (1 << 20),
            "released: {allocated} bytes allocated for {len}"
        );
        let read = log.read(0, next).unwrap();
        assert_eq!(read.len() as u64, next);
        assert!(read.iter().all(|m| m.payload == payload));
    }
}
