//! Two-slot record files: the crash-safe way to overwrite a small record in
//! place. The consumer and group offsets (`partition/offsets.rs`), the purge
//! obligation (`partition/purge`) and the retention low-water mark
//! (`partition/retention`) are such files, and every record of them is
//! written through one type, [`SlotFile`]; [`SlotLayout`] reads them.
//!
//! A file holds two fixed-size slots. Record number `seq` goes to slot
//! `seq % 2`. Reading takes the valid slot with the highest sequence number.
//!
//! Invariants, and why they hold:
//! - **A write never lands on the newest record.** `SlotFile::write` puts
//!   record `seq + 1` into slot `(seq + 1) % 2`, where `seq` is the newest
//!   record written or read; the only other write, of the owed record (below),
//!   puts that record's own bytes back into its own slot.
//! - **A torn or corrupt write damages at most the slot being written**,
//!   which held the *older* record: the state read back goes back at most to
//!   the previous record, never to garbage (every frame carries two
//!   checksums) and never forward to a value that was not written.
//! - **The newest durable record is not overwritten while a newer one is
//!   owed.** The newest record may be in the page cache only: recovery read
//!   it there, or a write failed after it landed. Then the other slot holds
//!   the newest *durable* record, and a torn write there would leave neither.
//!   While it owes the newest record (`owes`), a `SlotFile` writes it again,
//!   the same bytes into its own slot (so a torn rewrite changes nothing it
//!   held), and syncs it before a durable write (`Synced`, `SyncedByCaller`)
//!   overwrites the other slot, and before any `sync`. A plain sync would not
//!   do: after a failed one Linux has dropped the dirty state, and a retry
//!   reports success without persisting anything (ADR 0002). A `Cached` write
//!   overwrites it all the same, by its caller's contract: what it writes may
//!   be lost together with every record since the last durable one.
//! - **The sequence moves only over a completed write.** `seq` advances when
//!   the write, and for `Synced` its sync, succeeded; after a failure the next
//!   write goes into the same slot again, over whatever the failed one left,
//!   never into the slot of the newest completed record.
//! - **A first record goes into an emptied file.** While no record is
//!   confirmed (`seq` 0) and the file was not just created, what it holds is
//!   an earlier attempt at record 1, torn or never synced; two torn attempts
//!   of different content could mix in slot 1 into a frame that reads as
//!   corrupt rather than as a torn first write. So the first write truncates a
//!   non-empty file first: in an empty file a torn record 1 is a prefix of one
//!   record, which reads as `Empty`. (The one exception, `SlotFile::after`
//!   with `seq` 0, is for a file holding something a write must cover.)
//! - Under a policy that syncs each write (`Synced`), the slot just written is
//!   durable before the caller acknowledges, so a later torn write cannot
//!   reach it.

use std::fmt;
use std::ops::Deref;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_storage::{DurableFile, DurableStorage, OpenMode, StorageError};

use crate::frame::{self, FrameError, Magic};

/// One slot's payload: the record number and the value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Slot<T> {
    pub(crate) seq: u64,
    pub(crate) value: T,
}

/// The layout of one kind of slot file.
#[derive(Debug, Clone, Copy)]
pub struct SlotLayout {
    pub magic: Magic,
    pub version: u16,
    pub slot_size: usize,
}

/// What a slot file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotRead<T> {
    /// No complete record was ever written: a zero-length file, or one whose
    /// only written slot is torn (the first write never completed).
    Empty,
    /// The newest valid record; `damaged` says the other slot did not decode
    /// (normal after the very first write, or after a torn write).
    Valid {
        seq: u64,
        value: T,
        damaged: Option<FrameError>,
    },
    /// Neither slot holds a valid record.
    Invalid {
        first: FrameError,
        second: FrameError,
    },
}

impl SlotLayout {
    pub(crate) fn file_len(&self) -> u64 {
        2 * self.slot_size as u64
    }

    /// Writes `value` as record number `seq` (into slot `seq % 2`).
    pub fn encode<T: Serialize>(&self, seq: u64, value: &T) -> Result<Vec<u8>, FrameError> {
        let bytes = frame::encode(self.magic, self.version, &Slot { seq, value })?;
        if bytes.len() > self.slot_size {
            return Err(FrameError::TooLarge {
                len: bytes.len(),
                max: self.slot_size,
            });
        }
        Ok(bytes)
    }

    pub fn slot_offset(&self, seq: u64) -> u64 {
        (seq % 2) * self.slot_size as u64
    }

    /// Record number `seq` holding `value`, framed for its slot. Every kind
    /// bounds its records below its slot size (checked at compile time where
    /// the bound is computed), so a record that does not fit is a bug.
    pub(crate) fn frame<T: Serialize>(&self, seq: u64, value: &T) -> Vec<u8> {
        match self.encode(seq, value) {
            Ok(bytes) => bytes,
            Err(e) => unreachable!(
                "a {:?} record always fits its {}-byte slot: {e}",
                self.magic, self.slot_size
            ),
        }
    }

    /// Decodes a whole slot file held in memory.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> SlotRead<T> {
        let max = self.max_payload();
        self.decode_with(bytes, |window| {
            frame::decode::<Slot<T>>(self.magic, self.version, window, max).map(|(s, _)| s)
        })
    }

    /// The largest payload a slot's frame may declare.
    pub(crate) fn max_payload(&self) -> usize {
        self.slot_size.saturating_sub(frame::HEADER_LEN)
    }

    /// Decodes a whole slot file held in memory, reading each slot's window
    /// (its `slot_size` bytes, fewer at the end of the file) with `slot`:
    /// for a kind that reads more than one payload version, which `decode`
    /// (this layout's `version` only) cannot. The slot rules are the same.
    pub(crate) fn decode_with<T>(
        &self,
        bytes: &[u8],
        read_slot: impl Fn(&[u8]) -> Result<Slot<T>, FrameError>,
    ) -> SlotRead<T> {
        if bytes.is_empty() {
            return SlotRead::Empty;
        }
        let slot = |i: usize| -> Result<Slot<T>, FrameError> {
            let start = (i * self.slot_size).min(bytes.len());
            let end = ((i + 1) * self.slot_size).min(bytes.len());
            read_slot(&bytes[start..end])
        };
        // Record 1 always goes to slot 1, at the end of the file. If slot 0 was
        // never written (absent or zeros) and slot 1 is cut short, the very
        // first write was torn: nothing was ever acknowledged, so the file is
        // empty, not corrupt. So it is if slot 1 holds only zeros: the first
        // write's sync failed and Linux evicted its pages, which then read
        // back as the disk holds them (ADR 0002 §2.3). Damage to a record
        // (a flipped bit) stays Invalid.
        let never_written = |i: usize| {
            let start = (i * self.slot_size).min(bytes.len());
            let end = ((i + 1) * self.slot_size).min(bytes.len());
            bytes[start..end].iter().all(|&b| b == 0)
        };
        match (slot(0), slot(1)) {
            (Err(_), Err(FrameError::Truncated { .. })) if never_written(0) => SlotRead::Empty,
            (Err(_), Err(_)) if never_written(0) && never_written(1) => SlotRead::Empty,
            (Ok(a), Ok(b)) => {
                let (newer, _) = if a.seq >= b.seq { (a, b) } else { (b, a) };
                SlotRead::Valid {
                    seq: newer.seq,
                    value: newer.value,
                    damaged: None,
                }
            }
            (Ok(a), Err(e)) | (Err(e), Ok(a)) => SlotRead::Valid {
                seq: a.seq,
                value: a.value,
                damaged: Some(e),
            },
            (Err(first), Err(second)) => SlotRead::Invalid { first, second },
        }
    }

    pub(crate) fn read<T: DeserializeOwned>(
        &self,
        file: &dyn DurableFile,
    ) -> Result<SlotRead<T>, StorageError> {
        Ok(self.decode(&self.read_bytes(file)?))
    }

    /// The file's bytes as far as this layout reaches (two slots), for a
    /// kind that decodes them itself.
    pub(crate) fn read_bytes(&self, file: &dyn DurableFile) -> Result<Vec<u8>, StorageError> {
        let len = file.len()?.min(self.file_len()) as usize;
        let mut buf = vec![0u8; len];
        let n = file.read_at(0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// How far a [`SlotFile::write`] goes before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Into the page cache only, and nothing is synced. The record takes the
    /// place of the one the file owed, if any: a caller writes `Cached` only
    /// what may be lost together with every record since the last durable
    /// one (a `buffered` offset; a purge obligation's progress, written only
    /// once the removals the owed record named are confirmed).
    Cached,
    /// The owed record made durable first, then this one written and synced:
    /// on disk when the call returns `Ok`.
    Synced,
    /// As `Synced`, but the record's own sync is the caller's, through
    /// [`SlotFile::file`] (the purge plan's, made without the engine lock).
    /// The sequence moves on at the write: if that sync fails, the record
    /// counts as written but is not owed (see [`SlotFile`]).
    SyncedByCaller,
}

/// How the first record (number 1) treats what the file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstRecord {
    /// The file was just created: nothing to remove. After a write attempt
    /// it may hold one, and becomes `Truncate`.
    IntoEmpty,
    /// Whatever it holds is an earlier attempt at record 1: a non-empty file
    /// is truncated first.
    Truncate,
    /// It may hold something the caller needs covered, not removed (a
    /// failed write it could not read back): written over as it is.
    Cover,
}

/// One two-slot file being written: the only writer of the three kinds'
/// records (see the module invariants). It owns the sequence number (the
/// newest record written or read), the file handle, and the newest record's
/// frame while the file owes it: a record recovery read through the page
/// cache, or one a caller knows may have been lost (`after`). The owed frame
/// is written back as given: the obligation's exactly as read, whatever its
/// version; the offsets' and the low-water mark's encoded again from the
/// record read, which for a frame sluice wrote gives the same bytes (equal
/// values encode to equal bytes, ADR 0004 §8.2); for a version-1 low-water
/// mark, record 1 of version 2, which lies past both version-1 slots.
///
/// The handle is kept while the `SlotFile` lives (for the obligation and
/// the low-water mark, the process: `open_kept`), never opened again by
/// name: a re-dirty of the name (`dirsync.rs`) moves the file aside between
/// two renames, and opening the name then would start a second file. `F` is
/// a `Box<dyn DurableFile>` or an `Arc<dyn DurableFile>` (the purge
/// obligation's, shared with a sync made without the engine lock); under a
/// file pool (ADR 0018) it is a pooled handle, whose descriptor may be
/// closed between calls and is reopened wherever the pool saw the file
/// renamed.
///
/// Where the three writers it replaces differed, it keeps the safer rule:
/// - A failed write leaves the sequence where it was, so the next write goes
///   into the same slot (the low-water mark's rule; the obligation moved on
///   once its write landed, even when its sync then failed, and its next
///   write overwrote the slot that may have held its only durable record).
///   The offset store, which must follow what the file now says (memory may
///   never claim less than disk), reads it back and starts a new `SlotFile`
///   from what it finds.
/// - Every writer truncates a non-empty file before its first record (the
///   offsets did not, so two torn first stores could read as a corrupt
///   file), except over a file whose content a failed write left in doubt.
/// - A `Cached` write takes the place of the owed record instead of leaving
///   it owed: the obligation, the only writer to mix the two (an offset
///   store's policy is fixed per topic), wrote that older record again over
///   its newer `Cached` one at its next durable write, putting record `n`
///   into the slot of `n + 1`; a record it writes `Cached` follows confirmed
///   removals, so the older one owes nothing more.
/// - `sync` writes an owed record again before it syncs (the offsets' flush
///   counted a plain sync as making a recovered record durable).
///
/// What stays each writer's, because it differs for a reason: which
/// recovered record is owed (the obligation owes one only when it names
/// removals, see `adopt_obligation`); that a `Cached` record is not owed
/// (an obligation's `Applied` made durable before the next plan would cost
/// each later purge a sync); that a `SyncedByCaller` record whose sync
/// failed is not owed (the plan's: it unlinks nothing, and the failed
/// attempt's record written next carries its names); and what to believe
/// after a failure (the offsets' `reload_after_failure`, in-doubt entries
/// included).
pub(crate) struct SlotFile<F> {
    layout: SlotLayout,
    file: F,
    /// The newest record written or read (0: none is confirmed); the next
    /// write is record `seq + 1`.
    seq: u64,
    /// Record `seq`'s frame while it is owed: not known to be on disk, and
    /// to be made durable before a durable write overwrites the other slot.
    owed: Option<Vec<u8>>,
    first: FirstRecord,
}

impl<F> fmt::Debug for SlotFile<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotFile")
            .field("magic", &self.layout.magic)
            .field("seq", &self.seq)
            .field("owed_bytes", &self.owed.as_ref().map(Vec::len))
            .field("first", &self.first)
            .finish_non_exhaustive()
    }
}

impl<F: Deref<Target = dyn DurableFile>> SlotFile<F> {
    /// A file with no confirmed record (missing, empty, unreadable, or its
    /// first write never completed): the next write is record 1, into an
    /// emptied file.
    pub(crate) fn new(layout: SlotLayout, file: F) -> Self {
        SlotFile {
            layout,
            file,
            seq: 0,
            owed: None,
            first: FirstRecord::Truncate,
        }
    }

    /// A file this process just created, empty: as `new`, without asking
    /// its length before the first write.
    pub(crate) fn created(layout: SlotLayout, file: F) -> Self {
        SlotFile {
            first: FirstRecord::IntoEmpty,
            ..SlotFile::new(layout, file)
        }
    }

    /// A file whose newest record is number `seq`, owed (`owed`: its frame,
    /// see `SlotLayout::frame`) if it may be in the page cache only. With
    /// `seq` 0 (no record known) the first write covers what the file holds
    /// instead of truncating it: a failed write the caller could not read
    /// back may have left a record there that must not come back.
    pub(crate) fn after(layout: SlotLayout, file: F, seq: u64, owed: Option<Vec<u8>>) -> Self {
        debug_assert!(seq > 0 || owed.is_none(), "record 0 does not exist");
        SlotFile {
            layout,
            file,
            seq,
            owed,
            first: FirstRecord::Cover,
        }
    }

    /// The newest record written or read (0: none).
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the newest record is owed: not known to be on disk, and
    /// written again before the other slot is overwritten.
    pub(crate) fn owes(&self) -> bool {
        self.owed.is_some()
    }

    pub(crate) fn file(&self) -> &F {
        &self.file
    }

    pub(crate) fn into_file(self) -> F {
        self.file
    }

    /// Makes the owed record durable, if there is one: the same bytes into
    /// its own slot, then a sync. On error it is still owed.
    pub(crate) fn make_newest_durable(&mut self) -> Result<(), StorageError> {
        if let Some(frame) = &self.owed {
            self.file
                .write_at(self.layout.slot_offset(self.seq), frame)?;
            self.file.sync()?;
            self.owed = None;
        }
        Ok(())
    }

    /// Writes `value` as the next record, as far as `durability` says. On
    /// error the sequence has not moved (the next write goes into the same
    /// slot); an owed record is still owed unless it was made durable.
    pub(crate) fn write<T: Serialize>(
        &mut self,
        value: &T,
        durability: Durability,
    ) -> Result<(), StorageError> {
        let seq = self.seq + 1;
        let frame = self.layout.frame(seq, value);
        if durability != Durability::Cached {
            self.make_newest_durable()?;
        }
        if seq == 1 {
            if self.first == FirstRecord::Truncate && self.file.len()? > 0 {
                self.file.truncate(0)?;
            }
            if self.first == FirstRecord::IntoEmpty {
                // From here on the file may hold an attempt at record 1.
                self.first = FirstRecord::Truncate;
            }
        }
        self.file.write_at(self.layout.slot_offset(seq), &frame)?;
        if durability == Durability::Synced {
            self.file.sync()?;
        }
        self.seq = seq;
        self.owed = None;
        Ok(())
    }

    /// Makes everything written durable: the owed record is written again
    /// first (its dirty state may have been dropped by a failed sync of an
    /// earlier process, which a plain sync cannot tell).
    pub(crate) fn sync(&mut self) -> Result<(), StorageError> {
        if self.owes() {
            return self.make_newest_durable();
        }
        self.file.sync()
    }
}

impl<F: Deref<Target = dyn DurableFile> + From<Box<dyn DurableFile>>> SlotFile<F> {
    /// The slot file kept in `kept`, opened (created if missing) at `path`
    /// on first use, with no confirmed record. Only then: once opened, the
    /// handle is kept (see [`SlotFile`]), and a name never noted for a
    /// re-dirty cannot have been moved aside.
    pub(crate) fn open_kept<'a>(
        kept: &'a mut Option<SlotFile<F>>,
        storage: &dyn DurableStorage,
        path: &Path,
        layout: SlotLayout,
    ) -> Result<&'a mut SlotFile<F>, StorageError> {
        if kept.is_none() {
            let file = storage.open(path, OpenMode::CreateOrOpen)?;
            *kept = Some(SlotFile::new(layout, F::from(file)));
        }
        match kept {
            Some(slots) => Ok(slots),
            None => unreachable!("the slot file was opened just above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: SlotLayout = SlotLayout {
        magic: Magic::OFFSET,
        version: 1,
        slot_size: 64,
    };

    fn file_with(writes: &[(u64, u64)]) -> Vec<u8> {
        let mut buf = vec![0u8; 0];
        for &(seq, v) in writes {
            let rec = L.encode(seq, &v).unwrap();
            let at = L.slot_offset(seq) as usize;
            if buf.len() < at + rec.len() {
                buf.resize(at + rec.len(), 0);
            }
            buf[at..at + rec.len()].copy_from_slice(&rec);
        }
        buf
    }

    #[test]
    fn newest_valid_slot_wins() {
        let buf = file_with(&[(1, 10), (2, 20), (3, 30)]);
        assert!(matches!(
            L.decode::<u64>(&buf),
            SlotRead::Valid {
                seq: 3,
                value: 30,
                ..
            }
        ));
    }

    #[test]
    fn a_torn_newest_slot_falls_back_to_the_previous_value_never_garbage() {
        let mut buf = file_with(&[(1, 10), (2, 20)]);
        // Slot 1 (seq 3) torn: half of a new record over the old seq-1 record.
        let rec = L.encode(3, &30u64).unwrap();
        let at = L.slot_offset(3) as usize;
        for cut in 0..rec.len() {
            let mut b = buf.clone();
            b[at..at + cut].copy_from_slice(&rec[..cut]);
            match L.decode::<u64>(&b) {
                SlotRead::Valid { value, .. } => assert!(value == 20 || value == 10, "cut {cut}"),
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        buf.clear();
        assert_eq!(L.decode::<u64>(&buf), SlotRead::Empty);
    }

    #[test]
    fn a_torn_first_write_is_empty_not_corrupt() {
        let rec = L.encode(1, &10u64).unwrap();
        for cut in 1..rec.len() {
            let mut buf = vec![0u8; L.slot_offset(1) as usize];
            buf.extend_from_slice(&rec[..cut]);
            assert_eq!(L.decode::<u64>(&buf), SlotRead::Empty, "cut {cut}");
        }
    }

    #[test]
    fn a_first_write_read_back_as_zeros_is_empty_not_corrupt() {
        // Given: the first record's sync failed and its pages were evicted,
        // so the file keeps its length but reads as zeros.
        let rec = L.encode(1, &10u64).unwrap();
        let buf = vec![0u8; L.slot_offset(1) as usize + rec.len()];
        // Then: nothing was ever written.
        assert_eq!(L.decode::<u64>(&buf), SlotRead::Empty);
    }

    #[test]
    fn two_bad_slots_are_reported_not_guessed() {
        let buf = vec![0xAB; 128];
        assert!(matches!(L.decode::<u64>(&buf), SlotRead::Invalid { .. }));
    }

    use sluice_storage::{Crash, Fault, FaultMode, OpKind, OpMatcher, SimStorage};

    const PATH: &str = "/slots";

    fn open(sim: &SimStorage) -> Box<dyn DurableFile> {
        sim.open(Path::new(PATH), OpenMode::CreateOrOpen).unwrap()
    }

    fn bytes(sim: &SimStorage) -> Vec<u8> {
        L.read_bytes(open(sim).as_ref()).unwrap()
    }

    /// The newest valid record's number and value.
    fn newest(bytes: &[u8]) -> Option<(u64, u64)> {
        match L.decode::<u64>(bytes) {
            SlotRead::Valid { seq, value, .. } => Some((seq, value)),
            _ => None,
        }
    }

    /// The calls after `from`, by kind.
    fn calls_since(sim: &SimStorage, from: u64) -> Vec<&'static str> {
        let trace = sim.trace();
        trace[from as usize..]
            .iter()
            .map(|e| e.kind.as_str())
            .collect()
    }

    fn fail_next(sim: &SimStorage, kind: OpKind, skip: u32) {
        sim.fail_when(OpMatcher::kind(kind), Fault::io(FaultMode::Before), skip, 1);
    }

    #[test]
    fn an_owed_record_is_written_again_and_synced_before_the_other_slot() {
        // Given: record 1 durable; record 2 written but its sync failed, so
        // (Linux) the page cache shows it and the disk never gets it.
        let sim = SimStorage::with_seed(1);
        let mut first = SlotFile::new(L, open(&sim));
        sim.sync_dir(Path::new("/")).unwrap();
        first.write(&10u64, Durability::Synced).unwrap();
        fail_next(&sim, OpKind::SyncFile, 0);
        assert!(first.write(&20u64, Durability::Synced).is_err());
        // A later reader sees record 2 through the page cache, and owes it.
        let file = open(&sim);
        assert_eq!(newest(&L.read_bytes(file.as_ref()).unwrap()), Some((2, 20)));
        let mut slots = SlotFile::after(L, file, 2, Some(L.frame(2, &20u64)));
        // When: record 3, over record 1's slot, fails, and power is cut.
        let before = sim.op_count();
        fail_next(&sim, OpKind::Write, 1);
        assert!(slots.write(&30u64, Durability::Synced).is_err());
        assert_eq!(calls_since(&sim, before), ["write", "sync_file", "write"]);
        assert!(!slots.owes());
        sim.crash(Crash::PowerLoss);
        // Then: record 2 is on disk: it was written again and synced first.
        assert_eq!(newest(&bytes(&sim)), Some((2, 20)));
    }

    #[test]
    fn a_failed_write_leaves_the_sequence_so_the_next_goes_into_the_same_slot() {
        let sim = SimStorage::with_seed(1);
        let mut slots = SlotFile::new(L, open(&sim));
        slots.write(&10u64, Durability::Synced).unwrap();
        slots.write(&20u64, Durability::Synced).unwrap();
        // A write that lands and whose sync fails does not count.
        fail_next(&sim, OpKind::SyncFile, 0);
        assert!(slots.write(&30u64, Durability::Synced).is_err());
        assert_eq!(slots.seq(), 2);
        slots.write(&31u64, Durability::Synced).unwrap();
        assert_eq!(slots.seq(), 3);
        // Record 2's slot was never written over.
        let bytes = bytes(&sim);
        assert_eq!(newest(&bytes[..L.slot_size]), Some((2, 20)));
        assert_eq!(newest(&bytes), Some((3, 31)));
    }

    #[test]
    fn a_first_record_goes_into_an_emptied_file_unless_it_must_cover_it() {
        for how in ["new", "created", "after"] {
            // Given: a file holding an earlier attempt (junk in both slots),
            // or, for `created`, a file just created.
            let sim = SimStorage::with_seed(1);
            let file = open(&sim);
            if how != "created" {
                file.write_at(0, &[0xAB; 100]).unwrap();
            }
            let mut slots = match how {
                "new" => SlotFile::new(L, file),
                "created" => SlotFile::created(L, file),
                _ => SlotFile::after(L, file, 0, None),
            };
            // When: record 1 is written.
            let before = sim.op_count();
            slots.write(&10u64, Durability::Cached).unwrap();
            // Then: `new` emptied the file first; `created` did not ask its
            // length; `after` with no record wrote over what was there.
            let expected: &[&str] = match how {
                "new" => &["len", "truncate", "write"],
                _ => &["write"],
            };
            assert_eq!(calls_since(&sim, before), expected, "{how}");
            let bytes = bytes(&sim);
            assert_eq!(bytes[0] == 0xAB, how == "after", "{how}");
            assert_eq!(newest(&bytes), Some((1, 10)), "{how}");
        }
    }

    #[test]
    fn a_cached_write_takes_the_owed_records_place_and_a_sync_writes_it_again() {
        // Records 1 and 2 written, and record 2 owed (as if read back from
        // the page cache by a later process).
        let owing = || {
            let sim = SimStorage::with_seed(1);
            let mut slots = SlotFile::new(L, open(&sim));
            slots.write(&10u64, Durability::Synced).unwrap();
            slots.write(&20u64, Durability::Synced).unwrap();
            let slots = SlotFile::after(L, open(&sim), 2, Some(L.frame(2, &20u64)));
            (sim.op_count(), sim, slots)
        };
        // A cached write: no rewrite, no sync, and nothing owed after it.
        let (before, sim, mut slots) = owing();
        slots.write(&30u64, Durability::Cached).unwrap();
        assert!(!slots.owes());
        slots.write(&40u64, Durability::Synced).unwrap();
        assert_eq!(calls_since(&sim, before), ["write", "write", "sync_file"]);
        // A sync while the newest record is owed writes it again first.
        let (before, sim, mut slots) = owing();
        slots.sync().unwrap();
        assert!(!slots.owes());
        slots.sync().unwrap();
        assert_eq!(
            calls_since(&sim, before),
            ["write", "sync_file", "sync_file"]
        );
    }
}
