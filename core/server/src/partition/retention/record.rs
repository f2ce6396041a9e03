//! The low-water mark record: `retention.lwm` in the partition directory, a
//! two-slot file (slots.rs) of `{generation, low_water_mark}` records
//! (ADR 0004 §8.9, ADR 0016).
//!
//! Invariants:
//! - A torn or failed write damages only the older slot, so the mark read
//!   back is the last one written or the one before it, never garbage.
//! - Every record fits its 64-byte slot: three varints of at most 9 bytes
//!   each (27) plus the 20-byte frame header (`MAX_PAYLOAD`, asserted at
//!   compile time).
//! - A record counts only for the generation it names: recovery reads a
//!   record of an older purge generation as "nothing expired yet" (a purge
//!   starts the new history at mark 0), and one of a newer generation, which
//!   no commit can have written, as nothing at all (reported).

use serde::{Deserialize, Serialize};

use crate::frame::{HEADER_LEN, Magic};
use crate::slots::{SlotLayout, SlotRead};

/// One low-water mark record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LowWaterRecord {
    /// The purge generation the mark was committed under.
    pub generation: u64,
    /// The first retained offset of that generation.
    pub low_water_mark: u64,
}

/// `SLLW` version 1, 64-byte slots.
pub const LOW_WATER_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::LOW_WATER,
    version: 1,
    slot_size: 64,
};

/// The widest payload: `{seq, generation, low_water_mark}`, each a varint
/// of at most 9 bytes (bincode's `0xFD` tag and 8 bytes).
const MAX_PAYLOAD: usize = 3 * 9;
const _: () = assert!(HEADER_LEN + MAX_PAYLOAD <= LOW_WATER_LAYOUT.slot_size);

/// What a partition's low-water mark file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedLowWater {
    /// No file, or no record was ever completed (a torn first write).
    Missing,
    Valid {
        seq: u64,
        record: LowWaterRecord,
    },
    /// Neither slot decodes: damage, never a crash of the write protocol.
    Invalid(String),
}

/// Decodes a whole low-water mark file held in memory.
pub fn decode_file(bytes: &[u8]) -> LoadedLowWater {
    match LOW_WATER_LAYOUT.decode::<LowWaterRecord>(bytes) {
        SlotRead::Empty => LoadedLowWater::Missing,
        SlotRead::Valid { seq, value, .. } => LoadedLowWater::Valid { seq, record: value },
        SlotRead::Invalid { first, second } => {
            LoadedLowWater::Invalid(format!("slot 0: {first}; slot 1: {second}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_format_is_pinned_byte_for_byte() {
        let record = LowWaterRecord {
            generation: 2,
            low_water_mark: 300,
        };
        let bytes = LOW_WATER_LAYOUT.encode(1, &record).unwrap();
        // magic "SLLW", version 1, flags 0, payload length 5, payload CRC32C,
        // header CRC32C; payload: seq 1, generation 2, mark 300 (0xFB + u16 LE).
        let golden: [u8; 25] = [
            0x53, 0x4c, 0x4c, 0x57, 0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0xcf, 0x77,
            0xa1, 0x93, 0xb8, 0xd3, 0x0f, 0x74, 0x01, 0x02, 0xfb, 0x2c, 0x01,
        ];
        assert_eq!(bytes, golden, "{bytes:02x?}");
        assert_eq!(&bytes[..4], b"SLLW");
        assert_eq!(&bytes[20..], &[0x01, 0x02, 0xFB, 0x2C, 0x01]);
    }

    #[test]
    fn the_widest_record_fits_its_slot() {
        let record = LowWaterRecord {
            generation: u64::MAX,
            low_water_mark: u64::MAX,
        };
        let bytes = LOW_WATER_LAYOUT.encode(u64::MAX, &record).unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + MAX_PAYLOAD);
    }

    #[test]
    fn the_newest_slot_wins_and_a_torn_first_write_is_missing() {
        let a = LOW_WATER_LAYOUT
            .encode(
                1,
                &LowWaterRecord {
                    generation: 0,
                    low_water_mark: 10,
                },
            )
            .unwrap();
        let b = LOW_WATER_LAYOUT
            .encode(
                2,
                &LowWaterRecord {
                    generation: 0,
                    low_water_mark: 20,
                },
            )
            .unwrap();
        let mut file = vec![0u8; 64 + a.len()];
        file[64..].copy_from_slice(&a);
        file[..b.len()].copy_from_slice(&b);
        assert_eq!(
            decode_file(&file),
            LoadedLowWater::Valid {
                seq: 2,
                record: LowWaterRecord {
                    generation: 0,
                    low_water_mark: 20
                }
            }
        );
        let mut torn = vec![0u8; 64];
        torn.extend_from_slice(&a[..a.len() - 1]);
        assert_eq!(decode_file(&torn), LoadedLowWater::Missing);
        assert!(matches!(
            decode_file(&[0xAB; 128]),
            LoadedLowWater::Invalid(_)
        ));
    }
}
