//! Two-slot record files: the crash-safe way to overwrite a small record in place.
//!
//! A file holds two fixed-size slots. Write number `seq` goes to slot
//! `seq % 2`, so it never overwrites the latest valid record. Reading takes the
//! valid slot with the highest sequence number.
//!
//! Invariants:
//! - A torn or corrupt write damages at most the slot being written, which held
//!   the *older* record: the state can go back at most to the previous
//!   acknowledged value, never to garbage and never forward to a value that was
//!   not written.
//! - Under a policy that syncs each write, the slot just written is durable
//!   before the caller acknowledges, so a later torn write cannot reach it.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_storage::{DurableFile, StorageError};

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

    pub(crate) fn write<T: Serialize>(
        &self,
        file: &dyn DurableFile,
        seq: u64,
        value: &T,
    ) -> Result<Result<(), FrameError>, StorageError> {
        match self.encode(seq, value) {
            Ok(bytes) => file.write_at(self.slot_offset(seq), &bytes).map(Ok),
            Err(e) => Ok(Err(e)),
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
        let len = file.len()?.min(self.file_len()) as usize;
        let mut buf = vec![0u8; len];
        let n = file.read_at(0, &mut buf)?;
        buf.truncate(n);
        Ok(self.decode(&buf))
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
}
