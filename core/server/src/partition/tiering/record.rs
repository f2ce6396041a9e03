//! The tiering record: `tiering.rec` in the partition directory, a two-slot
//! file (slots.rs) holding one partition's whole [`Tiering`] state (ADR 0004
//! §8.10, ADR 0027 §4).
//!
//! Invariants:
//! - A torn or failed write damages only the older slot, so the state read
//!   back is the last one written or the one before it, never garbage.
//! - [`decode_file`] is the one door from disk, and it never panics: a
//!   record that decodes but breaks any invariant of [`Tiering`] (overlapping
//!   or empty segments, an intent below the remote low or inside a segment, an
//!   attempt not below `next_attempt` or used twice, a dead generation not
//!   below the live one, a doomed attempt of neither, an empty round, lists
//!   out of order or past their bounds) is refused with a typed error,
//!   never repaired, and never answered by the older slot instead: a record
//!   that checksums but lies was written by a bug, and the older record
//!   could name deleted objects as readable.
//! - The widest record fits its 256 KiB slot: asserted at compile time from
//!   `MAX_REMOTE_SEGMENTS`, `MAX_DOOMED`, `MAX_DEAD_GENERATIONS` and the widest
//!   varints, so a write can never fail for size (`SlotLayout::frame`).
//! - A round is recorded without its phase: read back it is `Recorded`, and
//!   its deletes and listing are issued again (both are idempotent).
//! - Which incarnation a record is for is the caller's to compare: a record
//!   of another incarnation of the same ids is not this partition's.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::key::Attempt;
use super::state::{DeletionRound, RemoteSegment, Tiering, TieringInvalid};
use crate::frame::{FrameError, HEADER_LEN, Magic};
use crate::slots::{SlotLayout, SlotRead};

/// The most uploaded segments one partition keeps remotely (256 GiB of the
/// default 64 MiB segments).
pub const MAX_REMOTE_SEGMENTS: usize = 4096;
/// The most entries the record holds besides dead generations: uploaded
/// segments, doomed attempts and the intent together. A listing always has
/// room for `MAX_DOOMED - MAX_REMOTE_SEGMENTS - 1` (1,023) found attempts.
pub const MAX_DOOMED: usize = 5120;
/// The most purged generations one round lists.
pub const MAX_DEAD_GENERATIONS: usize = 1024;

/// `SLTR` version 1, 256 KiB slots.
pub const TIERING_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::TIERING,
    version: 1,
    slot_size: 256 << 10,
};

/// A round as recorded: what it dooms and which generations it lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// Strictly increasing.
    pub dead_generations: Vec<u64>,
    /// Strictly increasing.
    pub doomed: Vec<Attempt>,
}

/// One tiering record: every field of [`Tiering`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieringRecord {
    pub incarnation: u64,
    pub generation: u64,
    pub next_attempt: u64,
    pub remote_low: u64,
    /// Strictly increasing by base.
    pub segments: Vec<RemoteSegment>,
    pub intent: Option<Attempt>,
    pub round: Option<RoundRecord>,
}

/// The widest varint (bincode's `0xFD` tag and 8 bytes).
const VARINT: usize = 9;
const SEGMENT: usize = 6 * VARINT;
const ATTEMPT: usize = 3 * VARINT;
/// The widest payload: `seq`, four numbers, the segments (length and at
/// most `MAX_REMOTE_SEGMENTS`), the intent (tag and attempt), the round
/// (tag, dead generations and doomed attempts, each with its length). With
/// the segments at their limit, at most `MAX_DOOMED - MAX_REMOTE_SEGMENTS`
/// doomed attempts remain; with fewer segments, more doomed attempts take
/// less room than the segments they replace (27 bytes against 54).
pub const MAX_RECORD_PAYLOAD: usize = VARINT
    + 4 * VARINT
    + VARINT
    + MAX_REMOTE_SEGMENTS * SEGMENT
    + 1
    + ATTEMPT
    + 1
    + VARINT
    + MAX_DEAD_GENERATIONS * VARINT
    + VARINT
    + (MAX_DOOMED - MAX_REMOTE_SEGMENTS) * ATTEMPT;
const _: () = assert!(HEADER_LEN + MAX_RECORD_PAYLOAD <= TIERING_LAYOUT.slot_size);
const _: () = assert!(MAX_DOOMED > MAX_REMOTE_SEGMENTS + 1);
const _: () = assert!(SEGMENT >= ATTEMPT);

/// Why a tiering file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TieringDecodeError {
    /// Neither slot holds a valid frame: damage, never a crash of the write
    /// protocol.
    #[error("no valid tiering record: slot 0: {first}; slot 1: {second}")]
    NoValidSlot {
        first: FrameError,
        second: FrameError,
    },
    /// The newest record decodes but breaks an invariant.
    #[error("tiering record {seq} refused: {reason}")]
    Invalid { seq: u64, reason: TieringInvalid },
}

/// A state read from `tiering.rec`, with the record number it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedTiering {
    pub seq: u64,
    pub tiering: Tiering,
}

fn strictly_increasing<T: Ord>(items: &[T], what: &'static str) -> Result<(), TieringInvalid> {
    if items.windows(2).all(|w| w[0] < w[1]) {
        Ok(())
    } else {
        Err(TieringInvalid::Unsorted { what })
    }
}

impl Tiering {
    /// The state as its record.
    pub fn to_record(&self) -> TieringRecord {
        TieringRecord {
            incarnation: self.incarnation(),
            generation: self.generation(),
            next_attempt: self.next_attempt(),
            remote_low: self.remote_low(),
            segments: self.segments().copied().collect(),
            intent: self.intent(),
            round: self.round().map(|r| RoundRecord {
                dead_generations: r.dead_generations().iter().copied().collect(),
                doomed: r.doomed().iter().copied().collect(),
            }),
        }
    }

    /// A state from its record, refused (never repaired) if it breaks an
    /// invariant. A round comes back `Recorded`.
    pub fn from_record(record: TieringRecord) -> Result<Tiering, TieringInvalid> {
        // Bounds first, before anything is built from the lists.
        if record.segments.len() > MAX_REMOTE_SEGMENTS {
            return Err(TieringInvalid::TooManySegments {
                count: record.segments.len(),
            });
        }
        if let Some(round) = &record.round {
            if round.doomed.len() > MAX_DOOMED {
                return Err(TieringInvalid::TooManyEntries {
                    count: round.doomed.len(),
                });
            }
            if round.dead_generations.len() > MAX_DEAD_GENERATIONS {
                return Err(TieringInvalid::TooManyDeadGenerations {
                    count: round.dead_generations.len(),
                });
            }
            strictly_increasing(&round.dead_generations, "dead generations")?;
            strictly_increasing(&round.doomed, "doomed attempts")?;
        }
        let bases: Vec<u64> = record.segments.iter().map(|s| s.base).collect();
        strictly_increasing(&bases, "remote segments")?;
        let segments: BTreeMap<u64, RemoteSegment> =
            record.segments.into_iter().map(|s| (s.base, s)).collect();
        let round = record.round.map(|r| {
            DeletionRound::from_disk(
                r.doomed.into_iter().collect::<BTreeSet<_>>(),
                r.dead_generations.into_iter().collect::<BTreeSet<_>>(),
            )
        });
        Tiering::from_parts(
            record.incarnation,
            record.generation,
            record.next_attempt,
            record.remote_low,
            segments,
            record.intent,
            round,
        )
    }
}

/// Decodes a whole tiering file held in memory: `None` if no record was
/// ever completed (an empty file, or a torn first write).
pub fn decode_file(bytes: &[u8]) -> Result<Option<LoadedTiering>, TieringDecodeError> {
    match TIERING_LAYOUT.decode::<TieringRecord>(bytes) {
        SlotRead::Empty => Ok(None),
        SlotRead::Valid { seq, value, .. } => match Tiering::from_record(value) {
            Ok(tiering) => Ok(Some(LoadedTiering { seq, tiering })),
            Err(reason) => Err(TieringDecodeError::Invalid { seq, reason }),
        },
        SlotRead::Invalid { first, second } => {
            Err(TieringDecodeError::NoValidSlot { first, second })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(base: u64, next_offset: u64, attempt: u64) -> RemoteSegment {
        RemoteSegment {
            base,
            next_offset,
            attempt,
            log_len: 1 << 20,
            index_len: 4096,
            newest_timestamp: 1_700_000_000_000_000,
        }
    }

    fn at(generation: u64, base: u64, attempt: u64) -> Attempt {
        Attempt {
            generation,
            base,
            attempt,
        }
    }

    /// A legal record: generation 5, segments [10,20) and [20,30), an
    /// upload of 30 in flight, a round dooming [0,10) and an attempt of
    /// dead generation 4.
    fn legal() -> TieringRecord {
        TieringRecord {
            incarnation: 77,
            generation: 5,
            next_attempt: 10,
            remote_low: 10,
            segments: vec![seg(10, 20, 2), seg(20, 30, 3)],
            intent: Some(at(5, 30, 9)),
            round: Some(RoundRecord {
                dead_generations: vec![4],
                doomed: vec![at(4, 0, 1), at(5, 0, 0)],
            }),
        }
    }

    /// A file holding `frames` (seq, bytes) at their slots.
    fn file_of(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut file = vec![0u8; 2 * TIERING_LAYOUT.slot_size];
        for (seq, bytes) in frames {
            let at = TIERING_LAYOUT.slot_offset(*seq) as usize;
            file[at..at + bytes.len()].copy_from_slice(bytes);
        }
        file
    }

    fn file_with(seq: u64, record: &TieringRecord) -> Vec<u8> {
        file_of(&[(seq, TIERING_LAYOUT.encode(seq, record).unwrap())])
    }

    fn refused(record: TieringRecord) -> TieringInvalid {
        match decode_file(&file_with(1, &record)) {
            Err(TieringDecodeError::Invalid { seq: 1, reason }) => reason,
            other => panic!("{record:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn a_legal_record_decodes_to_its_state_with_the_round_recorded() {
        // Given: a legal record in slot 1.
        let loaded = decode_file(&file_with(1, &legal())).unwrap().unwrap();
        // Then: the state is the record's, its round Recorded and recorded.
        assert_eq!(loaded.seq, 1);
        assert_eq!(loaded.tiering.to_record(), legal());
        let round = loaded.tiering.round().unwrap();
        assert_eq!(round.phase().as_str(), "Recorded");
        assert!(!round.needs_record());
        loaded.tiering.check();
    }

    #[test]
    fn the_record_format_is_pinned_byte_for_byte() {
        let r = TieringRecord {
            incarnation: 3,
            generation: 1,
            next_attempt: 2,
            remote_low: 0,
            segments: vec![seg_small(0, 300, 0)],
            intent: Some(at(1, 300, 1)),
            round: None,
        };
        let bytes = TIERING_LAYOUT.encode(1, &r).unwrap();
        // magic "SLTR", version 1, flags 0, payload length 21; payload: seq
        // 1, incarnation 3, generation 1, next_attempt 2, remote_low 0, one
        // segment {0, 300 (0xFB + u16 LE), attempt 0, log 9, index 8,
        // timestamp 7}, intent Some {1, 300, 1}, round None.
        assert_eq!(&bytes[..4], b"SLTR");
        assert_eq!(
            &bytes[4..12],
            &[0x01, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00]
        );
        assert_eq!(
            &bytes[HEADER_LEN..],
            &[
                0x01, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0xFB, 0x2C, 0x01, 0x00, 0x09, 0x08, 0x07,
                0x01, 0x01, 0xFB, 0x2C, 0x01, 0x01, 0x00
            ][..]
        );
    }

    fn seg_small(base: u64, next_offset: u64, attempt: u64) -> RemoteSegment {
        RemoteSegment {
            base,
            next_offset,
            attempt,
            log_len: 9,
            index_len: 8,
            newest_timestamp: 7,
        }
    }

    #[test]
    fn the_widest_legal_record_fits_its_slot_and_decodes() {
        // Given: every list at its limit and every number at its widest
        // varint, still keeping every invariant.
        let big = u64::MAX / 2;
        let segments: Vec<RemoteSegment> = (0..MAX_REMOTE_SEGMENTS as u64)
            .map(|i| RemoteSegment {
                base: big + 2 * i,
                next_offset: big + 2 * i + 1,
                attempt: big + i,
                log_len: u64::MAX,
                index_len: u64::MAX,
                newest_timestamp: u64::MAX,
            })
            .collect();
        let dead: Vec<u64> = (0..MAX_DEAD_GENERATIONS as u64).map(|i| big + i).collect();
        let doomed_count = MAX_DOOMED - MAX_REMOTE_SEGMENTS - 1;
        let doomed: Vec<Attempt> = (0..doomed_count as u64)
            .map(|i| at(big, u64::MAX - i, u64::MAX - i))
            .rev()
            .collect();
        let r = TieringRecord {
            incarnation: u64::MAX,
            generation: u64::MAX,
            next_attempt: u64::MAX,
            remote_low: big,
            segments,
            intent: Some(at(u64::MAX, u64::MAX - 1, u64::MAX - 1)),
            round: Some(RoundRecord {
                dead_generations: dead,
                doomed,
            }),
        };
        // Then: it encodes within the slot, and within the computed bound
        // (which is tight but for the three lists' lengths and one doomed
        // attempt the intent takes the place of).
        let bytes = TIERING_LAYOUT.encode(u64::MAX, &r).unwrap();
        assert!(bytes.len() <= HEADER_LEN + MAX_RECORD_PAYLOAD);
        assert_eq!(
            HEADER_LEN + MAX_RECORD_PAYLOAD - bytes.len(),
            3 * (VARINT - 3) + ATTEMPT
        );
        let loaded = decode_file(&file_of(&[(1, TIERING_LAYOUT.encode(1, &r).unwrap())]));
        assert_eq!(loaded.unwrap().unwrap().tiering.to_record(), r);
    }

    #[test]
    fn an_empty_file_or_a_torn_first_write_holds_no_state() {
        assert_eq!(decode_file(&[]), Ok(None));
        let first = TIERING_LAYOUT.encode(1, &legal()).unwrap();
        for cut in [1, HEADER_LEN, first.len() - 1] {
            let mut torn = vec![0u8; TIERING_LAYOUT.slot_size];
            torn.extend_from_slice(&first[..cut]);
            assert_eq!(decode_file(&torn), Ok(None), "cut {cut}");
        }
    }

    #[test]
    fn a_torn_or_corrupt_newest_slot_falls_back_to_the_older_record() {
        // Given: record 1 (slot 1) and record 2 (slot 0) written.
        let mut older = legal();
        older.intent = None;
        let newer = legal();
        let one = TIERING_LAYOUT.encode(1, &older).unwrap();
        let two = TIERING_LAYOUT.encode(2, &newer).unwrap();
        let file = file_of(&[(1, one), (2, two.clone())]);
        assert_eq!(decode_file(&file).unwrap().unwrap().seq, 2);
        // When: record 3 is torn over record 1's slot.
        // (Its last byte differs from record 1's, so no cut is complete.)
        let mut third = older.clone();
        third.round = Some(RoundRecord {
            dead_generations: vec![4],
            doomed: vec![at(4, 0, 1), at(5, 0, 5)],
        });
        let three = TIERING_LAYOUT.encode(3, &third).unwrap();
        let at = TIERING_LAYOUT.slot_offset(3) as usize;
        for cut in [1, HEADER_LEN + 3, three.len() - 1] {
            let mut torn = file.clone();
            torn[at..at + cut].copy_from_slice(&three[..cut]);
            // Then: record 2 is read, whole.
            let loaded = decode_file(&torn).unwrap().unwrap();
            assert_eq!((loaded.seq, loaded.tiering.to_record()), (2, legal()));
        }
        // When: a bit of record 2 rots instead.
        let mut rotten = file.clone();
        rotten[HEADER_LEN + two.len() / 2] ^= 0x10;
        // Then: record 1 is read.
        let loaded = decode_file(&rotten).unwrap().unwrap();
        assert_eq!((loaded.seq, loaded.tiering.to_record()), (1, older));
        // And: both slots damaged is an error, not a guess.
        let mut both = rotten;
        let at1 = TIERING_LAYOUT.slot_offset(1) as usize;
        both[at1 + 2] ^= 0x01;
        assert!(matches!(
            decode_file(&both),
            Err(TieringDecodeError::NoValidSlot { .. })
        ));
    }

    #[test]
    fn a_record_breaking_an_invariant_is_refused_not_replaced_by_the_older() {
        // Given: a legal record 1 and a record 2 that lies.
        let mut bad = legal();
        bad.segments[0].next_offset = 25;
        let file = file_of(&[
            (1, TIERING_LAYOUT.encode(1, &legal()).unwrap()),
            (2, TIERING_LAYOUT.encode(2, &bad).unwrap()),
        ]);
        // Then: refused, naming the record.
        assert!(matches!(
            decode_file(&file),
            Err(TieringDecodeError::Invalid {
                seq: 2,
                reason: TieringInvalid::SegmentsOverlap { .. }
            })
        ));
    }

    #[test]
    fn decode_refuses_overlapping_segments() {
        let mut r = legal();
        r.segments[1].base = 19;
        assert!(matches!(
            refused(r),
            TieringInvalid::SegmentsOverlap {
                base: 19,
                previous_end: 20
            }
        ));
    }

    #[test]
    fn decode_refuses_segments_out_of_order_or_twice() {
        let mut r = legal();
        r.segments.swap(0, 1);
        assert_eq!(
            refused(r),
            TieringInvalid::Unsorted {
                what: "remote segments"
            }
        );
        let mut r = legal();
        r.segments[1] = r.segments[0];
        assert_eq!(
            refused(r),
            TieringInvalid::Unsorted {
                what: "remote segments"
            }
        );
    }

    #[test]
    fn decode_refuses_an_empty_or_reversed_segment() {
        for next_offset in [20, 19] {
            let mut r = legal();
            r.segments[1].next_offset = next_offset;
            assert!(matches!(
                refused(r),
                TieringInvalid::EmptySegment { base: 20, .. }
            ));
        }
    }

    #[test]
    fn decode_refuses_a_segment_at_or_below_the_remote_low() {
        let mut r = legal();
        r.remote_low = 20;
        r.intent = None;
        assert!(matches!(
            refused(r),
            TieringInvalid::SegmentBelowRemoteLow { base: 10, .. }
        ));
    }

    #[test]
    fn decode_refuses_an_intent_below_the_remote_low() {
        let mut r = legal();
        r.intent = Some(at(5, 5, 9));
        assert!(matches!(
            refused(r),
            TieringInvalid::IntentBelowRemoteLow {
                base: 5,
                remote_low: 10
            }
        ));
    }

    #[test]
    fn decode_refuses_an_intent_inside_a_segment() {
        let mut r = legal();
        r.intent = Some(at(5, 25, 9));
        assert_eq!(refused(r), TieringInvalid::IntentInsideSegment { base: 25 });
    }

    #[test]
    fn decode_refuses_an_intent_of_another_generation() {
        let mut r = legal();
        r.intent = Some(at(4, 30, 9));
        assert!(matches!(
            refused(r),
            TieringInvalid::IntentOfOtherGeneration { .. }
        ));
    }

    #[test]
    fn decode_refuses_an_attempt_not_below_next_attempt() {
        // The intent's, a segment's, a live doomed attempt's.
        let mut r = legal();
        r.intent = Some(at(5, 30, 10));
        assert!(matches!(
            refused(r),
            TieringInvalid::AttemptNotTaken {
                attempt: 10,
                next_attempt: 10
            }
        ));
        let mut r = legal();
        r.segments[0].attempt = 11;
        assert!(matches!(
            refused(r),
            TieringInvalid::AttemptNotTaken { attempt: 11, .. }
        ));
        let mut r = legal();
        r.next_attempt = 9;
        r.intent = None;
        r.round = Some(RoundRecord {
            dead_generations: vec![],
            doomed: vec![at(5, 0, 9)],
        });
        assert!(matches!(
            refused(r),
            TieringInvalid::AttemptNotTaken { attempt: 9, .. }
        ));
    }

    #[test]
    fn decode_refuses_an_attempt_number_used_twice() {
        let mut r = legal();
        r.segments[1].attempt = 2;
        assert_eq!(refused(r), TieringInvalid::AttemptReused { attempt: 2 });
        let mut r = legal();
        r.intent = Some(at(5, 30, 0));
        assert_eq!(refused(r), TieringInvalid::AttemptReused { attempt: 0 });
    }

    #[test]
    fn decode_refuses_a_dead_generation_not_below_the_live_one() {
        for dead in [5, 6] {
            let mut r = legal();
            r.round = Some(RoundRecord {
                dead_generations: vec![4, dead],
                doomed: vec![],
            });
            assert!(matches!(
                refused(r),
                TieringInvalid::DeadGenerationNotBelow { generation: 5, .. }
            ));
        }
    }

    #[test]
    fn decode_refuses_a_doomed_attempt_of_neither_live_nor_dead_generation() {
        let mut r = legal();
        r.round = Some(RoundRecord {
            dead_generations: vec![4],
            doomed: vec![at(3, 0, 1)],
        });
        assert!(matches!(
            refused(r),
            TieringInvalid::DoomedOfOtherGeneration { .. }
        ));
    }

    #[test]
    fn decode_refuses_an_empty_round() {
        let mut r = legal();
        r.round = Some(RoundRecord {
            dead_generations: vec![],
            doomed: vec![],
        });
        assert_eq!(refused(r), TieringInvalid::EmptyRound);
    }

    #[test]
    fn decode_refuses_round_lists_out_of_order_or_twice() {
        let mut r = legal();
        r.round = Some(RoundRecord {
            dead_generations: vec![3, 2],
            doomed: vec![],
        });
        assert_eq!(
            refused(r),
            TieringInvalid::Unsorted {
                what: "dead generations"
            }
        );
        let mut r = legal();
        r.round = Some(RoundRecord {
            dead_generations: vec![4],
            doomed: vec![at(4, 0, 1), at(4, 0, 1)],
        });
        assert_eq!(
            refused(r),
            TieringInvalid::Unsorted {
                what: "doomed attempts"
            }
        );
    }

    #[test]
    fn decode_refuses_too_many_entries() {
        // Too many segments.
        let mut r = legal();
        let n = MAX_REMOTE_SEGMENTS as u64 + 1;
        r.segments = (0..n).map(|i| seg(10 + i, 11 + i, i)).collect();
        r.next_attempt = n + 10;
        r.intent = None;
        r.round = None;
        assert!(matches!(refused(r), TieringInvalid::TooManySegments { .. }));
        // Too many doomed.
        let mut r = legal();
        r.round = Some(RoundRecord {
            dead_generations: vec![4],
            doomed: (0..=MAX_DOOMED as u64).map(|i| at(4, i, i)).collect(),
        });
        assert!(matches!(refused(r), TieringInvalid::TooManyEntries { .. }));
        // Segments, doomed and intent together past the bound.
        let mut r = legal();
        let doomed = (MAX_DOOMED - 2) as u64;
        r.round = Some(RoundRecord {
            dead_generations: vec![4],
            doomed: (0..doomed).map(|i| at(4, i, i)).collect(),
        });
        assert_eq!(
            refused(r),
            TieringInvalid::TooManyEntries {
                count: MAX_DOOMED + 1
            }
        );
        // Too many dead generations.
        let mut r = legal();
        r.generation = 5_000;
        r.intent = None;
        r.segments.clear();
        r.round = Some(RoundRecord {
            dead_generations: (0..=MAX_DEAD_GENERATIONS as u64).collect(),
            doomed: vec![],
        });
        assert!(matches!(
            refused(r),
            TieringInvalid::TooManyDeadGenerations { .. }
        ));
    }

    #[test]
    fn decode_never_panics_on_any_single_bit_flip() {
        let file = file_with(1, &legal());
        let len = TIERING_LAYOUT.encode(1, &legal()).unwrap().len();
        let at = TIERING_LAYOUT.slot_offset(1) as usize;
        for bit in 0..len * 8 {
            let mut b = file.clone();
            b[at + bit / 8] ^= 1 << (bit % 8);
            assert!(decode_file(&b).is_err(), "bit {bit}");
        }
    }

    // ---- round trip over states built through the transitions ------------

    #[derive(Debug, Clone)]
    enum Op {
        Intend { gap: u64 },
        Upload { len: u64 },
        Abandon,
        Raise { by: u64, to_boundary: bool },
        Purge,
        RecordWritten,
        KeysDeleted,
        Listed { found: Vec<(u64, u64)> },
        Applied,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..3).prop_map(|gap| Op::Intend { gap }),
            3 => (1u64..50).prop_map(|len| Op::Upload { len }),
            1 => Just(Op::Abandon),
            1 => (0u64..60, any::<bool>()).prop_map(|(by, to_boundary)| Op::Raise { by, to_boundary }),
            1 => Just(Op::Purge),
            2 => Just(Op::RecordWritten),
            2 => Just(Op::KeysDeleted),
            1 => proptest::collection::vec((0u64..100, any::<u64>()), 0..3)
                .prop_map(|found| Op::Listed { found }),
            1 => Just(Op::Applied),
        ]
    }

    /// Applies `op` if it is legal in `t`'s state (the engine's job);
    /// `cursor` is where the next local segment starts.
    fn apply(t: &mut Tiering, cursor: &mut u64, op: Op) {
        use crate::partition::tiering::RoundPhase;
        let phase = t.round().map(|r| (r.phase(), r.needs_record()));
        let has_dead = t.round().is_some_and(|r| !r.dead_generations().is_empty());
        match op {
            Op::Intend { gap } => {
                if t.intent().is_none() {
                    let base = (*cursor + gap).max(t.remote_low());
                    if t.segment_for(base).is_none() && t.uploaded_end().is_none_or(|e| base >= e) {
                        let _ = t.try_intend(base);
                    }
                }
            }
            Op::Upload { len } => {
                if let Some(a) = t.intent() {
                    let s = RemoteSegment {
                        base: a.base,
                        next_offset: a.base + len,
                        attempt: a.attempt,
                        log_len: len * 100,
                        index_len: len,
                        newest_timestamp: a.base,
                    };
                    t.uploaded(a, s);
                    *cursor = a.base + len;
                }
            }
            Op::Abandon => {
                t.abandon_intent();
            }
            Op::Raise { by, to_boundary } => {
                let mark = if to_boundary {
                    t.segments()
                        .next()
                        .map_or(t.remote_low(), |s| s.next_offset)
                } else {
                    t.remote_low() + by
                };
                t.raise_remote_low(mark.max(t.remote_low()));
            }
            Op::Purge => {
                if t.can_purge() {
                    t.purge_to(t.generation() + 1);
                    *cursor = 0;
                }
            }
            Op::RecordWritten => t.record_written(),
            Op::KeysDeleted => {
                if phase == Some((RoundPhase::Recorded, false)) {
                    t.round_keys_deleted();
                }
            }
            Op::Listed { found } => {
                if phase == Some((RoundPhase::KeysDeleted, false)) && has_dead {
                    let dead: Vec<u64> = t
                        .round()
                        .map(|r| r.dead_generations().iter().copied().collect())
                        .unwrap_or_default();
                    let found = found
                        .into_iter()
                        .map(|(base, attempt)| Attempt {
                            generation: dead[(attempt % dead.len() as u64) as usize],
                            base,
                            attempt,
                        })
                        .collect();
                    t.round_listed(found);
                }
            }
            Op::Applied => {
                let done = match phase {
                    Some((RoundPhase::ListedEmpty, _)) => true,
                    Some((RoundPhase::KeysDeleted, _)) => !has_dead,
                    _ => false,
                };
                if done {
                    t.round_applied();
                }
            }
        }
    }

    proptest! {
        #[test]
        fn every_reachable_state_survives_its_record(
            incarnation in any::<u64>(),
            generation in 0u64..1_000,
            ops in proptest::collection::vec(op(), 0..80),
        ) {
            // Given: a state built through legal transitions.
            let mut t = Tiering::new(incarnation, generation);
            let mut cursor = 0;
            for op in ops {
                apply(&mut t, &mut cursor, op);
                t.check();
            }
            // When: it is written as record n and read back.
            let record = t.to_record();
            let file = file_with(7, &record);
            let loaded = decode_file(&file);
            // Then: the same state, its round Recorded and recorded.
            let Ok(Some(loaded)) = loaded else {
                return Err(TestCaseError::fail(format!("{loaded:?}")));
            };
            prop_assert_eq!(loaded.seq, 7);
            prop_assert_eq!(loaded.tiering.to_record(), record);
            if let Some(round) = loaded.tiering.round() {
                prop_assert_eq!(round.phase().as_str(), "Recorded");
                prop_assert!(!round.needs_record());
            }
            prop_assert_eq!(loaded.tiering.next_attempt(), t.next_attempt());
            prop_assert_eq!(
                loaded.tiering.segments().collect::<Vec<_>>(),
                t.segments().collect::<Vec<_>>()
            );
        }

        #[test]
        fn decode_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let _ = decode_file(&bytes);
        }
    }
}
