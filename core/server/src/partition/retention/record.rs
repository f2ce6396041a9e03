//! The low-water mark record: `retention.lwm` in the partition directory, a
//! two-slot file (slots.rs) of `{generation, low_water_mark, removing}`
//! records (ADR 0004 §8.9, ADR 0016).
//!
//! Invariants:
//! - A torn or failed write damages only the older slot, so the mark read
//!   back is the last one written or the one before it, never garbage.
//! - `removing` lists the bases (of the record's generation) of the segments
//!   whose `.log` and `.idx` a retention round is removing and whose removal
//!   no sync of `segments/` has confirmed yet: written and synced before the
//!   first unlink, so a process that inherits the removals (whose names the
//!   page cache no longer shows) knows what to redo. At most
//!   `MAX_REMOVING_PER_ROUND` bases, strictly increasing, each below the
//!   mark: `decode_file` (the one door from disk) refuses anything else.
//! - A full round fits its 4 KiB slot: asserted at compile time from
//!   `MAX_REMOVING_PER_ROUND` and the widest varints.
//! - A record's mark counts only for the generation it names: recovery reads
//!   a record of an older purge generation as "nothing expired yet" (a purge
//!   starts the new history at mark 0), and one of a newer generation, which
//!   no commit can have written, as nothing at all (reported). Its
//!   `removing` is redone whatever its generation (a redo never removes a
//!   file holding bytes, so redoing too much loses nothing).
//! - Version 1 (64-byte slots, no `removing`), written only by unreleased
//!   builds before this version, is still read; the first write after it
//!   goes to slot 1 of the version-2 layout (offset 4096), past both
//!   version-1 slots, so a torn upgrade leaves the version-1 record readable.

use serde::{Deserialize, Serialize};

use crate::frame::{HEADER_LEN, Magic};
use crate::slots::{SlotLayout, SlotRead};

/// One low-water mark record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LowWaterRecord {
    /// The purge generation the mark was committed under.
    pub generation: u64,
    /// The first retained offset of that generation.
    pub low_water_mark: u64,
    /// Bases of the segments of `generation` a round is removing, not yet
    /// confirmed by a sync of `segments/` (empty between rounds).
    pub removing: Vec<u64>,
}

/// The most segments one retention round removes (each a `.log` and an
/// `.idx`): more below a mark take several rounds.
pub const MAX_REMOVING_PER_ROUND: usize = 256;

/// `SLLW` version 2, 4 KiB slots.
pub const LOW_WATER_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::LOW_WATER,
    version: 2,
    slot_size: 4 << 10,
};

/// The version-1 layout, still read (see the module comment).
const LOW_WATER_LAYOUT_V1: SlotLayout = SlotLayout {
    magic: Magic::LOW_WATER,
    version: 1,
    slot_size: 64,
};

/// A version-1 record: what unreleased builds wrote before `removing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct LowWaterRecordV1 {
    generation: u64,
    low_water_mark: u64,
}

/// The widest payload: `{seq, generation, low_water_mark}`, the list's
/// length and a full round of bases, each a varint of at most 9 bytes
/// (bincode's `0xFD` tag and 8 bytes).
const MAX_PAYLOAD: usize = 4 * 9 + MAX_REMOVING_PER_ROUND * 9;
const _: () = assert!(HEADER_LEN + MAX_PAYLOAD <= LOW_WATER_LAYOUT.slot_size);

/// What a partition's low-water mark file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedLowWater {
    /// No file, or no record was ever completed (a torn first write).
    Missing,
    Valid {
        seq: u64,
        record: LowWaterRecord,
        /// Read from a version-1 file: the next write upgrades it.
        legacy: bool,
    },
    /// Neither slot decodes: damage, never a crash of the write protocol.
    Invalid(String),
}

/// Whether a record read from disk keeps the invariants its type cannot.
fn check(record: &LowWaterRecord) -> Result<(), String> {
    if record.removing.len() > MAX_REMOVING_PER_ROUND {
        return Err(format!(
            "{} segments recorded for removal, more than {MAX_REMOVING_PER_ROUND}",
            record.removing.len()
        ));
    }
    if !record.removing.windows(2).all(|w| w[0] < w[1]) {
        return Err("segments recorded for removal out of order".into());
    }
    if record
        .removing
        .last()
        .is_some_and(|&b| b >= record.low_water_mark)
    {
        return Err(format!(
            "a segment recorded for removal is not below the mark {}",
            record.low_water_mark
        ));
    }
    Ok(())
}

/// Decodes a whole low-water mark file held in memory.
pub fn decode_file(bytes: &[u8]) -> LoadedLowWater {
    match LOW_WATER_LAYOUT.decode::<LowWaterRecord>(bytes) {
        SlotRead::Empty => LoadedLowWater::Missing,
        SlotRead::Valid { seq, value, .. } => match check(&value) {
            Ok(()) => LoadedLowWater::Valid {
                seq,
                record: value,
                legacy: false,
            },
            Err(e) => LoadedLowWater::Invalid(e),
        },
        SlotRead::Invalid { first, second } => {
            match LOW_WATER_LAYOUT_V1.decode::<LowWaterRecordV1>(bytes) {
                SlotRead::Valid { seq, value, .. } => LoadedLowWater::Valid {
                    seq,
                    record: LowWaterRecord {
                        generation: value.generation,
                        low_water_mark: value.low_water_mark,
                        removing: Vec::new(),
                    },
                    legacy: true,
                },
                _ => LoadedLowWater::Invalid(format!("slot 0: {first}; slot 1: {second}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(mark: u64, removing: &[u64]) -> LowWaterRecord {
        LowWaterRecord {
            generation: 0,
            low_water_mark: mark,
            removing: removing.to_vec(),
        }
    }

    /// A file holding `frames` (seq, bytes) at their slots of `layout`.
    fn file_of(layout: SlotLayout, frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut file = vec![0u8; 2 * layout.slot_size];
        for (seq, bytes) in frames {
            let at = layout.slot_offset(*seq) as usize;
            file[at..at + bytes.len()].copy_from_slice(bytes);
        }
        file
    }

    #[test]
    fn the_record_format_is_pinned_byte_for_byte() {
        let r = LowWaterRecord {
            generation: 2,
            low_water_mark: 300,
            removing: vec![7, 260],
        };
        let bytes = LOW_WATER_LAYOUT.encode(1, &r).unwrap();
        // magic "SLLW", version 2, flags 0, payload length 10, payload CRC32C,
        // header CRC32C; payload: seq 1, generation 2, mark 300 (0xFB + u16
        // LE), two bases: 7 and 260 (0xFB + u16 LE).
        assert_eq!(&bytes[..4], b"SLLW");
        assert_eq!(
            &bytes[4..12],
            &[0x02, 0x00, 0x00, 0x00, 0x0A, 0x00, 0x00, 0x00]
        );
        assert_eq!(
            &bytes[20..],
            &[0x01, 0x02, 0xFB, 0x2C, 0x01, 0x02, 0x07, 0xFB, 0x04, 0x01]
        );
        assert_eq!(bytes.len(), HEADER_LEN + 10);
    }

    #[test]
    fn the_widest_record_fits_its_slot() {
        let r = LowWaterRecord {
            generation: u64::MAX,
            low_water_mark: u64::MAX,
            removing: (0..MAX_REMOVING_PER_ROUND as u64)
                .map(|i| u64::MAX - 1 - i)
                .rev()
                .collect(),
        };
        let bytes = LOW_WATER_LAYOUT.encode(u64::MAX, &r).unwrap();
        // The bound is tight but for the list's length, 3 bytes, not 9.
        assert_eq!(bytes.len(), HEADER_LEN + MAX_PAYLOAD - 6);
        assert!(matches!(
            decode_file(&file_of(LOW_WATER_LAYOUT, &[(1, bytes)])),
            LoadedLowWater::Valid { .. }
        ));
    }

    #[test]
    fn the_newest_slot_wins_and_a_torn_first_write_is_missing() {
        let a = LOW_WATER_LAYOUT.encode(1, &record(10, &[])).unwrap();
        let b = LOW_WATER_LAYOUT.encode(2, &record(20, &[3])).unwrap();
        assert_eq!(
            decode_file(&file_of(LOW_WATER_LAYOUT, &[(1, a.clone()), (2, b)])),
            LoadedLowWater::Valid {
                seq: 2,
                record: record(20, &[3]),
                legacy: false,
            }
        );
        let mut torn = vec![0u8; LOW_WATER_LAYOUT.slot_size];
        torn.extend_from_slice(&a[..a.len() - 1]);
        assert_eq!(decode_file(&torn), LoadedLowWater::Missing);
        assert!(matches!(
            decode_file(&[0xAB; 128]),
            LoadedLowWater::Invalid(_)
        ));
    }

    #[test]
    fn a_record_whose_removals_break_their_bounds_is_invalid() {
        let too_many: Vec<u64> = (0..=MAX_REMOVING_PER_ROUND as u64).collect();
        for bad in [
            record(1_000, &too_many),
            record(10, &[4, 3]),
            record(10, &[4, 4]),
            record(10, &[10]),
        ] {
            let bytes = LOW_WATER_LAYOUT.encode(1, &bad).unwrap();
            assert!(
                matches!(
                    decode_file(&file_of(LOW_WATER_LAYOUT, &[(1, bytes)])),
                    LoadedLowWater::Invalid(_)
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_version_1_file_is_read_and_a_torn_upgrade_keeps_it_readable() {
        let v1 = LowWaterRecordV1 {
            generation: 1,
            low_water_mark: 9,
        };
        let old = file_of(
            LOW_WATER_LAYOUT_V1,
            &[(3, LOW_WATER_LAYOUT_V1.encode(3, &v1).unwrap())],
        );
        let expected = LoadedLowWater::Valid {
            seq: 3,
            record: LowWaterRecord {
                generation: 1,
                low_water_mark: 9,
                removing: Vec::new(),
            },
            legacy: true,
        };
        assert_eq!(decode_file(&old), expected);
        // The upgrade writes record 1 of version 2 at slot 1 (offset 4096),
        // past both version-1 slots: torn, the version-1 record still reads;
        // whole, the version-2 one wins.
        let upgrade = LOW_WATER_LAYOUT
            .encode(
                1,
                &LowWaterRecord {
                    generation: 1,
                    low_water_mark: 9,
                    removing: Vec::new(),
                },
            )
            .unwrap();
        assert_eq!(LOW_WATER_LAYOUT.slot_offset(1), 4096);
        let mut torn = old.clone();
        torn.resize(4096, 0);
        torn.extend_from_slice(&upgrade[..upgrade.len() - 2]);
        assert_eq!(decode_file(&torn), expected);
        let mut whole = old;
        whole.resize(4096, 0);
        whole.extend_from_slice(&upgrade);
        assert!(matches!(
            decode_file(&whole),
            LoadedLowWater::Valid {
                seq: 1,
                legacy: false,
                ..
            }
        ));
    }
}
