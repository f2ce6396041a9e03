//! The obligation as `purge.obligation` stores it, and the only door from
//! disk into an `Obligation`.
//!
//! Invariants:
//! - `ObligationRecord` (SLOB version 2) is plain data: whatever bincode
//!   decodes. It becomes an `Obligation` only through `TryFrom`, which
//!   checks what the record's types cannot: the bounds of `Removals`, the
//!   error text's length, no error in `Applied`. A record that fails counts
//!   as invalid: with a purge committed, recovery warns and owes cleanup of
//!   the committed generation from a fresh listing (ADR 0003 §3.3).
//! - A version-1 record, what sluice wrote before, is read and upgraded to a
//!   version-2 record first, with the version-1 reader's checks (`cutoff`
//!   equals `generation`; no recorded name in `DirsSynced` or `Applied`).
//!   Its `confirmed` set is dropped: it meant something only inside the
//!   attempt that wrote it, and every attempt starts without confirmations.
//!   Only version 2 is written.
//! - A full round of the longest names, the longest error and the fixed
//!   fields fit one slot: asserted at compile time below, and the bound is
//!   checked against a real encoding by a test.
//! - The newest valid slot's frame is kept byte for byte, so that rewriting
//!   it to make it durable (the file's `SlotFile` owes it, see
//!   `adopt_obligation`) puts the same bytes into the same slot and a torn
//!   rewrite damages nothing, whatever version it holds.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::removals::{MAX_DEAD_NAME_LEN, MAX_NAMES_PER_ROUND, Removals};
use super::state::{MAX_ERROR_LEN, Obligation, Phase};
use crate::frame::{self, FrameError, HEADER_LEN, Magic};
use crate::layout::DirKind;
use crate::slots::{Slot, SlotLayout, SlotRead};

/// The obligation file's layout; records are written in version 2.
pub const OBLIGATION_LAYOUT: SlotLayout = SlotLayout {
    magic: Magic::OBLIGATION,
    version: 2,
    slot_size: 64 << 10,
};

/// The format before phases carried their data (ADR 0004 §8.8): still read.
const VERSION_1: u16 = 1;

/// Names per directory, as a record holds them.
pub(crate) type NameMap = BTreeMap<DirKind, BTreeSet<String>>;

/// One obligation as version 2 stores it (ADR 0004 §8.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObligationRecord {
    pub(crate) generation: u64,
    pub(crate) phase: PhaseRecord,
    pub(crate) attempts: u32,
    pub(crate) last_error: Option<String>,
}

/// `Phase` as stored: variant order is the encoding (0 to 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum PhaseRecord {
    Requested { carried: NameMap },
    FilesDeleted { removed: NameMap },
    DirsSynced,
    Applied,
}

/// The widest a version-2 slot payload can be, each varint at its widest
/// (9 bytes for a `u64` or a length, 5 for a `u32` or an enum tag): `seq`,
/// `generation`, the phase tag, the map's count and per directory its tag
/// and count, every name with its length, `attempts`, and the error.
pub(crate) const MAX_RECORD_PAYLOAD: usize = 9
    + 9
    + 5
    + 9
    + DirKind::ALL.len() * (5 + 9)
    + MAX_NAMES_PER_ROUND * (9 + MAX_DEAD_NAME_LEN)
    + 5
    + 1
    + 9
    + MAX_ERROR_LEN;

// A full round always fits a slot, so a plan write can never fail for size.
const _: () = assert!(MAX_RECORD_PAYLOAD <= OBLIGATION_LAYOUT.slot_size - HEADER_LEN);

impl From<&Obligation> for ObligationRecord {
    fn from(ob: &Obligation) -> ObligationRecord {
        let phase = match ob.phase() {
            Phase::Requested { carried } => PhaseRecord::Requested {
                carried: carried.as_map().clone(),
            },
            Phase::FilesDeleted { removed } => PhaseRecord::FilesDeleted {
                removed: removed.as_map().clone(),
            },
            Phase::DirsSynced => PhaseRecord::DirsSynced,
            Phase::Applied => PhaseRecord::Applied,
        };
        ObligationRecord {
            generation: ob.generation(),
            phase,
            attempts: ob.attempts(),
            last_error: ob.last_error().map(str::to_string),
        }
    }
}

/// The only door from disk into an `Obligation`.
impl TryFrom<ObligationRecord> for Obligation {
    type Error = String;

    fn try_from(r: ObligationRecord) -> Result<Obligation, String> {
        let phase = match r.phase {
            PhaseRecord::Requested { carried } => Phase::Requested {
                carried: Removals::try_from(carried)?,
            },
            PhaseRecord::FilesDeleted { removed } => Phase::FilesDeleted {
                removed: Removals::try_from(removed)?,
            },
            PhaseRecord::DirsSynced => Phase::DirsSynced,
            PhaseRecord::Applied => Phase::Applied,
        };
        Obligation::from_parts(r.generation, phase, r.attempts, r.last_error)
    }
}

/// A version-1 record (ADR 0004 §8.8, before version 2).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct ObligationRecordV1 {
    generation: u64,
    cutoff: u64,
    state: StateV1,
    removed: NameMap,
    confirmed: BTreeSet<DirKind>,
    attempts: u32,
    last_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
enum StateV1 {
    Requested,
    FilesDeleted,
    DirsSynced,
    Applied,
}

impl TryFrom<ObligationRecordV1> for ObligationRecord {
    type Error = String;

    fn try_from(v1: ObligationRecordV1) -> Result<ObligationRecord, String> {
        if v1.cutoff != v1.generation {
            return Err(format!(
                "cutoff {} differs from generation {}",
                v1.cutoff, v1.generation
            ));
        }
        let phase = match v1.state {
            StateV1::Requested => PhaseRecord::Requested {
                carried: v1.removed,
            },
            StateV1::FilesDeleted => PhaseRecord::FilesDeleted {
                removed: v1.removed,
            },
            state if !v1.removed.is_empty() => {
                return Err(format!("{state:?} with unconfirmed removals"));
            }
            StateV1::DirsSynced => PhaseRecord::DirsSynced,
            StateV1::Applied => PhaseRecord::Applied,
        };
        // The version-1 writer recorded the failure of the `Applied` write
        // itself into the `Applied` record: not an error of the obligation.
        let last_error = match phase {
            PhaseRecord::Applied => None,
            _ => v1.last_error,
        };
        Ok(ObligationRecord {
            generation: v1.generation,
            phase,
            attempts: v1.attempts,
            last_error,
        })
    }
}

/// The newest valid slot's frame, exactly as read (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredFrame(Vec<u8>);

impl RecoveredFrame {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What the obligation file said at recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedObligation {
    /// No file, or an empty one (including a torn first write).
    Missing,
    Valid {
        seq: u64,
        obligation: Obligation,
        frame: RecoveredFrame,
    },
    /// Neither slot is valid, or the newest valid record breaks an invariant.
    Invalid(String),
}

enum AnyRecord {
    V1(ObligationRecordV1),
    V2(ObligationRecord),
}

/// One slot's window, read as the version its header names.
fn read_slot(window: &[u8]) -> Result<Slot<(AnyRecord, RecoveredFrame)>, FrameError> {
    let header = frame::decode_header(Magic::OBLIGATION, window, OBLIGATION_LAYOUT.max_payload())?;
    let payload = &window[HEADER_LEN..];
    let (seq, record) = if header.version == VERSION_1 {
        let slot: Slot<ObligationRecordV1> = frame::decode_payload(&header, VERSION_1, payload)?;
        (slot.seq, AnyRecord::V1(slot.value))
    } else {
        // Any other version than 1 is read as the current one, which also
        // reports a damaged payload before an unknown version.
        let slot: Slot<ObligationRecord> =
            frame::decode_payload(&header, OBLIGATION_LAYOUT.version, payload)?;
        (slot.seq, AnyRecord::V2(slot.value))
    };
    // `decode_payload` checked that the whole frame is inside the window.
    let frame = RecoveredFrame(window[..header.frame_len()].to_vec());
    Ok(Slot {
        seq,
        value: (record, frame),
    })
}

/// Reads a whole obligation file: the newest valid slot (either version)
/// wins by the two-slot rules, and becomes an `Obligation` only through
/// `TryFrom<ObligationRecord>`.
pub fn decode_file(bytes: &[u8]) -> LoadedObligation {
    match OBLIGATION_LAYOUT.decode_with(bytes, read_slot) {
        SlotRead::Empty => LoadedObligation::Missing,
        SlotRead::Valid {
            seq,
            value: (record, frame),
            ..
        } => {
            let record = match record {
                AnyRecord::V1(v1) => ObligationRecord::try_from(v1),
                AnyRecord::V2(v2) => Ok(v2),
            };
            match record.and_then(Obligation::try_from) {
                Ok(obligation) => LoadedObligation::Valid {
                    seq,
                    obligation,
                    frame,
                },
                Err(reason) => LoadedObligation::Invalid(reason),
            }
        }
        SlotRead::Invalid { first, second } => {
            LoadedObligation::Invalid(format!("slot 0: {first}; slot 1: {second}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::purge::PurgeState;

    /// A two-slot file holding `records[i]` as record number `i + 1`.
    fn file_of(records: &[Vec<u8>]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (seq, rec) in (1u64..).zip(records) {
            let at = OBLIGATION_LAYOUT.slot_offset(seq) as usize;
            if buf.len() < at + rec.len() {
                buf.resize(at + rec.len(), 0);
            }
            buf[at..at + rec.len()].copy_from_slice(rec);
        }
        buf
    }

    fn v1_frame(seq: u64, v1: &ObligationRecordV1) -> Vec<u8> {
        frame::encode(Magic::OBLIGATION, VERSION_1, &Slot { seq, value: v1 }).unwrap()
    }

    fn v1(state: StateV1, removed: &[&str]) -> ObligationRecordV1 {
        ObligationRecordV1 {
            generation: 4,
            cutoff: 4,
            state,
            removed: if removed.is_empty() {
                NameMap::new()
            } else {
                NameMap::from([(
                    DirKind::Consumers,
                    removed.iter().map(|s| s.to_string()).collect(),
                )])
            },
            confirmed: BTreeSet::from([DirKind::Consumers]),
            attempts: 2,
            last_error: Some("storage: sync failed".into()),
        }
    }

    fn load(bytes: &[u8]) -> Result<(u64, Obligation), String> {
        match decode_file(bytes) {
            LoadedObligation::Valid {
                seq, obligation, ..
            } => Ok((seq, obligation)),
            other => Err(format!("{other:?}")),
        }
    }

    /// The bytes of a version-1 obligation file exactly as the code before
    /// version 2 wrote them (captured from it at commit 6844544): record 1,
    /// `Requested` for generation 1, then record 2, `FilesDeleted` with the
    /// consumer offset file `1` and the group offset file `3` recorded,
    /// `confirmed` holding `consumers/` (never trusted), attempt 1 and an
    /// error. Slot 0 (record 2) comes first, then slot 1 (record 1).
    fn golden_v1_file() -> Vec<u8> {
        let mut file = vec![0u8; 2 * OBLIGATION_LAYOUT.slot_size];
        let mut lines = GOLDEN_V1.lines();
        let slot0 = hex(lines.next().unwrap());
        let slot1 = hex(lines.next().unwrap());
        file[..slot0.len()].copy_from_slice(&slot0);
        let at = OBLIGATION_LAYOUT.slot_size;
        file[at..at + slot1.len()].copy_from_slice(&slot1);
        file.truncate(at + slot1.len());
        file
    }

    /// Slot 0's record (record 2), then slot 1's (record 1), in hex; shared
    /// with the integration test that loads them through recovery.
    const GOLDEN_V1: &str = include_str!("../../../../../tests/fixtures/obligation-v1.hex");

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_version_1_file_written_by_the_previous_code_loads() {
        // Given: the bytes the version-1 writer left.
        let bytes = golden_v1_file();
        // When: they are read through the only door.
        let (seq, ob) = load(&bytes).unwrap();
        // Then: the newest record, its names still owed, its error kept.
        assert_eq!(seq, 2);
        assert_eq!(ob.generation(), 1);
        assert_eq!(ob.state(), PurgeState::FilesDeleted);
        assert_eq!(ob.attempts(), 1);
        assert_eq!(ob.last_error(), Some("storage: sync_dir failed"));
        let removed: Vec<(DirKind, Vec<String>)> = ob
            .removed()
            .iter()
            .map(|(d, n)| (d, n.iter().cloned().collect()))
            .collect();
        assert_eq!(
            removed,
            vec![
                (DirKind::Consumers, vec!["1".to_string()]),
                (DirKind::Groups, vec!["3".to_string()]),
            ]
        );
    }

    #[test]
    fn every_version_1_state_upgrades_and_confirmations_are_dropped() {
        for (state, expected) in [
            (StateV1::Requested, PurgeState::Requested),
            (StateV1::FilesDeleted, PurgeState::FilesDeleted),
        ] {
            let (_, ob) = load(&file_of(&[v1_frame(1, &v1(state, &["9"]))])).unwrap();
            assert_eq!((ob.state(), ob.removed().len()), (expected, 1));
            assert_eq!(ob.last_error(), Some("storage: sync failed"));
        }
        let (_, ob) = load(&file_of(&[v1_frame(1, &v1(StateV1::DirsSynced, &[]))])).unwrap();
        assert_eq!(ob.state(), PurgeState::DirsSynced);
        // The version-1 writer could leave the error of the `Applied` write
        // in the `Applied` record; it is not an error of the obligation.
        let (_, ob) = load(&file_of(&[v1_frame(1, &v1(StateV1::Applied, &[]))])).unwrap();
        assert_eq!((ob.state(), ob.last_error()), (PurgeState::Applied, None));
    }

    #[test]
    fn a_version_1_record_that_breaks_its_rules_is_invalid() {
        let mut cut = v1(StateV1::Requested, &[]);
        cut.cutoff = 3;
        let dirty = v1(StateV1::Applied, &["9"]);
        for bad in [cut, dirty] {
            assert!(matches!(
                decode_file(&file_of(&[v1_frame(1, &bad)])),
                LoadedObligation::Invalid(_)
            ));
        }
    }

    #[test]
    fn a_version_2_record_round_trips_and_the_newest_slot_wins_across_versions() {
        // Given: a version-1 record 1, then a version-2 record 2.
        let mut ob = Obligation::request(4);
        let mut round = Removals::new();
        round.insert(
            DirKind::Segments,
            crate::layout::segment_name(3, 0, crate::layout::LOG_EXT),
        );
        ob.plan_removals(&round);
        let v2 = OBLIGATION_LAYOUT
            .encode(2, &ObligationRecord::from(&ob))
            .unwrap();
        let bytes = file_of(&[v1_frame(1, &v1(StateV1::Requested, &[])), v2.clone()]);
        // Then: record 2 is read back as written, and its frame is kept.
        match decode_file(&bytes) {
            LoadedObligation::Valid {
                seq,
                obligation,
                frame,
            } => {
                assert_eq!((seq, &obligation), (2, &ob));
                assert_eq!(frame.bytes(), &v2[..]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_version_2_record_the_obligation_types_cannot_hold_is_invalid() {
        let bad = [
            ObligationRecord {
                generation: 1,
                phase: PhaseRecord::Applied,
                attempts: 0,
                last_error: Some("x".into()),
            },
            ObligationRecord {
                generation: 1,
                phase: PhaseRecord::Requested {
                    carried: NameMap::from([(
                        DirKind::Segments,
                        (0..=MAX_NAMES_PER_ROUND as u64)
                            .map(|i| crate::layout::segment_name(0, i, crate::layout::LOG_EXT))
                            .collect(),
                    )]),
                },
                attempts: 0,
                last_error: None,
            },
            ObligationRecord {
                generation: 1,
                phase: PhaseRecord::FilesDeleted {
                    removed: NameMap::new(),
                },
                attempts: 0,
                last_error: Some("e".repeat(MAX_ERROR_LEN + 1)),
            },
        ];
        for record in bad {
            let bytes = file_of(&[OBLIGATION_LAYOUT.encode(1, &record).unwrap()]);
            assert!(
                matches!(decode_file(&bytes), LoadedObligation::Invalid(_)),
                "{record:?}"
            );
        }
    }

    #[test]
    fn the_widest_record_stays_within_the_asserted_bound() {
        // Given: a full round of the longest names, the widest numbers and
        // the longest error.
        let mut round = Removals::new();
        for i in 0..MAX_NAMES_PER_ROUND as u64 {
            round.insert(
                DirKind::Segments,
                crate::layout::segment_name(u64::MAX, u64::MAX - i, crate::layout::LOG_EXT),
            );
        }
        let mut ob = Obligation::request(u64::MAX);
        ob.plan_removals(&round);
        ob.record_error(&"e".repeat(MAX_ERROR_LEN));
        let mut record = ObligationRecord::from(&ob);
        record.attempts = u32::MAX;
        // Then: its payload is within the bound the slot size is checked
        // against, and the frame fits a slot.
        let frame = OBLIGATION_LAYOUT.encode(u64::MAX, &record).unwrap();
        assert!(frame.len() - HEADER_LEN <= MAX_RECORD_PAYLOAD);
        assert!(frame.len() <= OBLIGATION_LAYOUT.slot_size);
    }
}
