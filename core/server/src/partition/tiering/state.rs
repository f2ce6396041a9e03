//! What one partition has in the object store, and what it owes it, as closed
//! state machines (ADR 0027 §2).
//!
//! One segment's upload:
//!
//! ```text
//!          intend (attempt durable)        uploaded (same attempt)
//!   (none) ─────────────────────▶ Intended ─────────────────────▶ Uploaded
//!                                    │
//!                                    └── abandoned: its two keys are doomed
//! ```
//!
//! One deletion round:
//!
//! ```text
//!            keys_deleted              listed([])                applied
//!  Recorded ─────────────▶ KeysDeleted ──────────▶ ListedEmpty ─────────▶ Applied
//!     ▲                        │   └──────────── applied (no dead generation) ──▶ Applied
//!     ├── listed(found) ───────┘
//!     └── more doomed, or another dead generation (from any phase)
//! ```
//!
//! Invariants, and why they hold:
//! - **An attempt number is never taken twice.** `intend` takes
//!   `next_attempt` and increments it; the caller makes the record holding
//!   the increment durable before it issues the put (ADR 0027 §5). Every
//!   attempt of the live generation (uploaded, in flight, doomed) is below
//!   `next_attempt` and their numbers are pairwise distinct, so no two
//!   uploads ever write one key, and `AlreadyExists` can only be the put's own
//!   retry (ADR 0026 §2): "outcome unknown".
//! - **At most one upload is in flight** (`intent`), of the live generation,
//!   starting at or above `remote_low` and inside no uploaded segment.
//! - **Uploaded segments are sorted, non-empty and never overlap**; each
//!   ends above `remote_low` (one that ends at or below it is doomed), so
//!   `segment_for` never answers from a segment the round may be deleting.
//! - **An object is deleted only once it is doomed, and doomed only once no
//!   state names it for reading**: a segment leaves `segments` (so reads stop
//!   finding it) in the same transition that adds its attempt to the round,
//!   and the round's delete is issued only once the round is recorded
//!   (`needs_record` false): a crash never forgets an object it meant to
//!   delete, and never deletes one the durable state still serves.
//! - **A dead generation is below the live one**, and every doomed attempt
//!   is of the live generation or a dead one of the round. A round is never
//!   empty: it has something doomed or a dead generation to list.
//! - **A round is `Applied` only when nothing it is about can be found**:
//!   every doomed key answered `Ok` to a delete (a missing object counts),
//!   and, if it has dead generations, a listing of their prefixes issued
//!   after those deletes found nothing. A listing that finds keys adds them
//!   and goes back to `Recorded`, so they are recorded before their delete.
//!   (A put still in flight may land after the listing: the orphan sweep's,
//!   ADR 0026 §3.)
//! - **The record always fits its slot**: at most `MAX_REMOTE_SEGMENTS`
//!   segments, at most `MAX_DOOMED` segments, doomed attempts and intent
//!   together, at most `MAX_DEAD_GENERATIONS` dead generations (record.rs
//!   checks the widest record at compile time). Every transition moves
//!   entries one for one between `segments`, `intent` and the doomed set,
//!   except the two that add: `try_intend` (refused, `TieringFull`, at the
//!   limit) and `round_listed` (which keeps within the limit, see there), and
//!   a purge adds a dead generation only if `can_purge`.
//! - Each transition asserts its source state; a wrong one is a programmer
//!   error and stops the process, never an error value. The state changes
//!   only through them (its fields are private), each ends with `check`, and
//!   a state read from disk passes `validate` first (record.rs), so every
//!   `Tiering` keeps these invariants between calls.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::key::Attempt;
use super::record::{MAX_DEAD_GENERATIONS, MAX_DOOMED, MAX_REMOTE_SEGMENTS};

/// One uploaded segment: its offsets, the attempt whose two objects hold it,
/// and what reads need without a `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    pub base: u64,
    /// One past the segment's last offset (`base < next_offset`).
    pub next_offset: u64,
    /// The attempt number whose objects hold the segment.
    pub attempt: u64,
    /// Bytes of the `.log` object.
    pub log_len: u64,
    /// Bytes of the `.idx` object.
    pub index_len: u64,
    /// The newest message timestamp in the segment (time-based retention).
    pub newest_timestamp: u64,
}

impl RemoteSegment {
    /// Whether `offset` lies in the segment.
    pub fn contains(&self, offset: u64) -> bool {
        self.base <= offset && offset < self.next_offset
    }

    /// The upload attempt that wrote the segment, in `generation`.
    pub fn attempt_in(&self, generation: u64) -> Attempt {
        Attempt {
            generation,
            base: self.base,
            attempt: self.attempt,
        }
    }
}

/// Where one segment's upload stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadPhase {
    /// The attempt is recorded (durable): its put may be issued, and after
    /// a crash its keys may exist whatever the put answered.
    Intended { attempt: Attempt },
    /// Both objects answered `Ok`, and the segment is recorded as uploaded.
    Uploaded {
        attempt: Attempt,
        segment: RemoteSegment,
    },
}

impl UploadPhase {
    pub fn intended(attempt: Attempt) -> UploadPhase {
        UploadPhase::Intended { attempt }
    }

    pub fn attempt(&self) -> Attempt {
        match *self {
            UploadPhase::Intended { attempt } | UploadPhase::Uploaded { attempt, .. } => attempt,
        }
    }

    /// Both puts of `attempt` answered `Ok`, holding `segment`.
    pub fn uploaded(self, attempt: Attempt, segment: RemoteSegment) -> UploadPhase {
        let UploadPhase::Intended { attempt: intended } = self else {
            panic!("invariant: uploaded from {self:?}");
        };
        assert_eq!(
            intended, attempt,
            "invariant: uploaded names the intended attempt"
        );
        assert!(
            segment.base == attempt.base && segment.attempt == attempt.attempt,
            "invariant: the segment uploaded is the attempt's ({segment:?}, {attempt:?})"
        );
        assert!(
            segment.base < segment.next_offset,
            "invariant: a segment is not empty ({segment:?})"
        );
        UploadPhase::Uploaded { attempt, segment }
    }

    /// The upload failed or its outcome is unknown: the attempt's two keys
    /// are doomed (returned), and a new attempt takes new keys.
    pub fn abandoned(self) -> Attempt {
        let UploadPhase::Intended { attempt } = self else {
            panic!("invariant: abandoned from {self:?}");
        };
        attempt
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            UploadPhase::Intended { .. } => "Intended",
            UploadPhase::Uploaded { .. } => "Uploaded",
        }
    }
}

/// Where a deletion round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundPhase {
    /// The doomed attempts and dead generations are (or, while
    /// `needs_record`, are being) written in the record; deletes may be
    /// issued once they are.
    Recorded,
    /// Every doomed attempt's two keys answered `Ok` to a delete.
    KeysDeleted,
    /// A listing of every dead generation's prefix, issued after the
    /// deletes, found nothing.
    ListedEmpty,
    /// Done: the round leaves the state (`Tiering::round_applied`).
    Applied,
}

impl RoundPhase {
    /// The phase's name as the product shows it (`/status`).
    pub fn as_str(self) -> &'static str {
        match self {
            RoundPhase::Recorded => "Recorded",
            RoundPhase::KeysDeleted => "KeysDeleted",
            RoundPhase::ListedEmpty => "ListedEmpty",
            RoundPhase::Applied => "Applied",
        }
    }
}

/// The remote deletions one partition owes: objects of attempts no state
/// reads any more, and whole dead generations whose prefixes must be found
/// empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionRound {
    dead_generations: BTreeSet<u64>,
    doomed: BTreeSet<Attempt>,
    phase: RoundPhase,
    /// The round holds something the durable record does not: no delete
    /// may be issued until the record is written (`Tiering::record_written`).
    /// Not itself recorded: a round read from disk is recorded.
    needs_record: bool,
}

impl DeletionRound {
    /// A round that begins with `doomed` and `dead_generations`, to be
    /// recorded before any delete. `live_generation` is the partition's.
    pub fn recorded(
        doomed: BTreeSet<Attempt>,
        dead_generations: BTreeSet<u64>,
        live_generation: u64,
    ) -> DeletionRound {
        let round = DeletionRound {
            dead_generations,
            doomed,
            phase: RoundPhase::Recorded,
            needs_record: true,
        };
        round.check_against(live_generation);
        round
    }

    /// A round as the record holds it: recorded, so `Recorded`. Every later
    /// phase is a claim about answers an earlier process heard; after a crash
    /// they are asked again (deletes and listings repeat harmlessly).
    pub(crate) fn from_disk(
        doomed: BTreeSet<Attempt>,
        dead_generations: BTreeSet<u64>,
    ) -> DeletionRound {
        DeletionRound {
            dead_generations,
            doomed,
            phase: RoundPhase::Recorded,
            needs_record: false,
        }
    }

    pub fn phase(&self) -> RoundPhase {
        self.phase
    }

    /// The attempts whose two keys the round deletes.
    pub fn doomed(&self) -> &BTreeSet<Attempt> {
        &self.doomed
    }

    /// The purged generations whose prefixes must be listed empty.
    pub fn dead_generations(&self) -> &BTreeSet<u64> {
        &self.dead_generations
    }

    /// Whether the record must be written before the next delete.
    pub fn needs_record(&self) -> bool {
        self.needs_record
    }

    /// The round's shape, whatever the partition's state around it.
    fn validate_shape(&self) -> Result<(), TieringInvalid> {
        if self.doomed.is_empty() && self.dead_generations.is_empty() {
            return Err(TieringInvalid::EmptyRound);
        }
        if self.doomed.len() > MAX_DOOMED {
            return Err(TieringInvalid::TooManyEntries {
                count: self.doomed.len(),
            });
        }
        if self.dead_generations.len() > MAX_DEAD_GENERATIONS {
            return Err(TieringInvalid::TooManyDeadGenerations {
                count: self.dead_generations.len(),
            });
        }
        if self.needs_record && self.phase != RoundPhase::Recorded {
            return Err(TieringInvalid::UnrecordedClaim {
                phase: self.phase.as_str(),
            });
        }
        if self.phase == RoundPhase::ListedEmpty && self.dead_generations.is_empty() {
            return Err(TieringInvalid::ListedWithoutDeadGeneration);
        }
        Ok(())
    }

    /// The round against the partition's live generation.
    fn validate_against(&self, live_generation: u64) -> Result<(), TieringInvalid> {
        self.validate_shape()?;
        if let Some(&dead) = self.dead_generations.last()
            && dead >= live_generation
        {
            return Err(TieringInvalid::DeadGenerationNotBelow {
                dead,
                generation: live_generation,
            });
        }
        if let Some(attempt) = self.doomed.iter().find(|a| {
            a.generation != live_generation && !self.dead_generations.contains(&a.generation)
        }) {
            return Err(TieringInvalid::DoomedOfOtherGeneration { attempt: *attempt });
        }
        Ok(())
    }

    fn check_shape(&self) {
        if let Err(e) = self.validate_shape() {
            panic!("invariant: {e} ({self:?})");
        }
    }

    fn check_against(&self, live_generation: u64) {
        if let Err(e) = self.validate_against(live_generation) {
            panic!("invariant: {e} ({self:?})");
        }
    }

    /// More is doomed, or another generation died: back to `Recorded`, to
    /// be recorded before the next delete, from any phase but `Applied`.
    fn extended(
        mut self,
        doomed: impl IntoIterator<Item = Attempt>,
        dead_generation: Option<u64>,
        live_generation: u64,
    ) -> DeletionRound {
        self.check_shape();
        assert!(
            self.phase != RoundPhase::Applied,
            "invariant: extended from {:?}",
            self.phase
        );
        self.doomed.extend(doomed);
        self.dead_generations.extend(dead_generation);
        self.phase = RoundPhase::Recorded;
        self.needs_record = true;
        self.check_against(live_generation);
        self
    }

    /// The record holding the round is durable.
    fn record_written(&mut self) {
        self.needs_record = false;
    }

    /// Every doomed attempt's two keys answered `Ok` to a delete.
    pub fn keys_deleted(self) -> DeletionRound {
        self.check_shape();
        assert!(
            self.phase == RoundPhase::Recorded,
            "invariant: keys_deleted from {:?}",
            self.phase
        );
        assert!(
            !self.needs_record,
            "invariant: keys_deleted before the round was recorded"
        );
        let round = DeletionRound {
            phase: RoundPhase::KeysDeleted,
            ..self
        };
        round.check_shape();
        round
    }

    /// A fresh listing of every dead generation's prefix, issued after the
    /// deletes, found `found` (parsed from the keys below those prefixes).
    /// Nothing: `ListedEmpty`. Something: back to `Recorded` with it added
    /// to the doomed set (`needs_record` if anything is new). At most
    /// `MAX_DOOMED` are kept (see [`Tiering::round_listed`] for the room).
    pub fn listed(self, found: Vec<Attempt>) -> DeletionRound {
        self.listed_within(found, MAX_DOOMED)
    }

    /// `listed`, keeping the doomed set within `room` attempts. Every attempt
    /// doomed before is deleted (this is `KeysDeleted`), so forgetting one is
    /// what `Applied` would do: those make room first, then what was found
    /// beyond the room is left out (lowest kept) for the next listing to
    /// find again. With `room` at least 1 the round always progresses.
    fn listed_within(mut self, found: Vec<Attempt>, room: usize) -> DeletionRound {
        self.check_shape();
        assert!(
            self.phase == RoundPhase::KeysDeleted,
            "invariant: listed from {:?}",
            self.phase
        );
        assert!(
            !self.dead_generations.is_empty(),
            "invariant: listed without a dead generation (a round of the live generation does \
             not list)"
        );
        assert!(room > 0, "invariant: a listing has room for what it finds");
        if let Some(a) = found
            .iter()
            .find(|a| !self.dead_generations.contains(&a.generation))
        {
            panic!("invariant: a listing of dead generations found {a:?} of another");
        }
        if found.is_empty() {
            self.phase = RoundPhase::ListedEmpty;
            self.check_shape();
            return self;
        }
        let found: BTreeSet<Attempt> = found.into_iter().collect();
        let new = found.iter().any(|a| !self.doomed.contains(a));
        let mut doomed: BTreeSet<Attempt> = found.into_iter().take(room).collect();
        let keep = room - doomed.len();
        doomed.extend(
            self.doomed
                .iter()
                .filter(|a| !doomed.contains(a))
                .take(keep)
                .copied()
                .collect::<Vec<_>>(),
        );
        self.doomed = doomed;
        self.phase = RoundPhase::Recorded;
        self.needs_record = new;
        self.check_shape();
        self
    }

    /// Nothing the round is about can be found any more.
    pub fn applied(self) -> DeletionRound {
        self.check_shape();
        let done = match self.phase {
            RoundPhase::ListedEmpty => true,
            RoundPhase::KeysDeleted => self.dead_generations.is_empty(),
            RoundPhase::Recorded | RoundPhase::Applied => false,
        };
        assert!(
            done,
            "invariant: applied from {:?} with {} dead generation(s)",
            self.phase,
            self.dead_generations.len()
        );
        let round = DeletionRound {
            phase: RoundPhase::Applied,
            ..self
        };
        round.check_shape();
        round
    }
}

/// An invariant a state breaks: what `validate` reports and `check` panics
/// with, and why the record read from disk is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TieringInvalid {
    #[error("{count} remote segments, more than {MAX_REMOTE_SEGMENTS}")]
    TooManySegments { count: usize },
    #[error("{count} remote segments, doomed attempts and intent together, more than {MAX_DOOMED}")]
    TooManyEntries { count: usize },
    #[error("{count} dead generations, more than {MAX_DEAD_GENERATIONS}")]
    TooManyDeadGenerations { count: usize },
    #[error("segment at {base} is empty or reversed (next offset {next_offset})")]
    EmptySegment { base: u64, next_offset: u64 },
    #[error("segment at {base} overlaps or precedes the one ending at {previous_end}")]
    SegmentsOverlap { base: u64, previous_end: u64 },
    #[error("segment at {base} ends at {next_offset}, not above the remote low {remote_low}")]
    SegmentBelowRemoteLow {
        base: u64,
        next_offset: u64,
        remote_low: u64,
    },
    #[error("intent {intent:?} is not of the live generation {generation}")]
    IntentOfOtherGeneration { intent: Attempt, generation: u64 },
    #[error("intent at {base} is below the remote low {remote_low}")]
    IntentBelowRemoteLow { base: u64, remote_low: u64 },
    #[error("intent at {base} lies inside an uploaded segment")]
    IntentInsideSegment { base: u64 },
    #[error("attempt {attempt} of the live generation is not below next_attempt {next_attempt}")]
    AttemptNotTaken { attempt: u64, next_attempt: u64 },
    #[error("attempt number {attempt} is used twice in the live generation")]
    AttemptReused { attempt: u64 },
    #[error("a deletion round with nothing doomed and no dead generation")]
    EmptyRound,
    #[error("dead generation {dead} is not below the live generation {generation}")]
    DeadGenerationNotBelow { dead: u64, generation: u64 },
    #[error("doomed {attempt:?} is neither of the live generation nor of a dead one")]
    DoomedOfOtherGeneration { attempt: Attempt },
    #[error("a round in {phase} holds what is not recorded")]
    UnrecordedClaim { phase: &'static str },
    #[error("a round listed empty without a dead generation")]
    ListedWithoutDeadGeneration,
    #[error("an applied round is kept")]
    AppliedRoundKept,
    #[error("the record's {what} are not strictly increasing")]
    Unsorted { what: &'static str },
}

/// `try_intend` at the limit: no upload starts until a round or retention
/// frees room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("tiering state full: {segments} remote segments, {doomed} doomed attempts")]
pub struct TieringFull {
    pub segments: usize,
    pub doomed: usize,
}

/// One partition's tiering state (see the module invariants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiering {
    /// Which life of the partition's ids the keys are for (ADR 0027 §1).
    incarnation: u64,
    /// The purge generation uploads are for: the partition's committed one.
    generation: u64,
    /// The next attempt number; every attempt named is below it.
    next_attempt: u64,
    /// The first offset retained remotely.
    remote_low: u64,
    /// Uploaded segments by base.
    segments: BTreeMap<u64, RemoteSegment>,
    /// The upload in flight, recorded before its put.
    intent: Option<Attempt>,
    round: Option<DeletionRound>,
}

impl Tiering {
    /// A partition that never tiered anything.
    pub fn new(incarnation: u64, generation: u64) -> Tiering {
        Tiering {
            incarnation,
            generation,
            next_attempt: 0,
            remote_low: 0,
            segments: BTreeMap::new(),
            intent: None,
            round: None,
        }
    }

    /// A state from its parts, as the record holds them: `validate`d, never
    /// trusted.
    pub(crate) fn from_parts(
        incarnation: u64,
        generation: u64,
        next_attempt: u64,
        remote_low: u64,
        segments: BTreeMap<u64, RemoteSegment>,
        intent: Option<Attempt>,
        round: Option<DeletionRound>,
    ) -> Result<Tiering, TieringInvalid> {
        let tiering = Tiering {
            incarnation,
            generation,
            next_attempt,
            remote_low,
            segments,
            intent,
            round,
        };
        tiering.validate()?;
        Ok(tiering)
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn next_attempt(&self) -> u64 {
        self.next_attempt
    }

    pub fn remote_low(&self) -> u64 {
        self.remote_low
    }

    /// The upload in flight. Compare it with the attempt an upload was
    /// started for before calling `uploaded`: `raise_remote_low` and
    /// `purge_to` may have doomed it meanwhile.
    pub fn intent(&self) -> Option<Attempt> {
        self.intent
    }

    pub fn round(&self) -> Option<&DeletionRound> {
        self.round.as_ref()
    }

    fn doomed_len(&self) -> usize {
        self.round.as_ref().map_or(0, |r| r.doomed.len())
    }

    /// Entries the record's bound counts: segments, doomed, intent.
    fn entries(&self) -> usize {
        self.segments.len() + self.doomed_len() + usize::from(self.intent.is_some())
    }

    /// Whether an intent would break a bound of the record: the caller
    /// stops uploading until retention or a round frees room.
    pub fn is_full(&self) -> bool {
        self.segments.len() >= MAX_REMOTE_SEGMENTS || self.entries() + 1 > MAX_DOOMED
    }

    /// Whether a purge can be taken in: the round has room for one more
    /// dead generation. A purge the engine would commit otherwise must wait
    /// (or be refused) until the round applies.
    pub fn can_purge(&self) -> bool {
        self.round
            .as_ref()
            .is_none_or(|r| r.dead_generations.len() < MAX_DEAD_GENERATIONS)
    }

    /// Starts the upload of the segment at `base`: takes a fresh attempt
    /// number. The caller writes the record (durable) before the put.
    /// Refused at the limit (`is_full`).
    pub fn try_intend(&mut self, base: u64) -> Result<Attempt, TieringFull> {
        if self.is_full() {
            return Err(TieringFull {
                segments: self.segments.len(),
                doomed: self.doomed_len(),
            });
        }
        Ok(self.intend(base))
    }

    /// `try_intend` where the caller checked `is_full`: intending while full
    /// is a programmer error.
    pub fn intend(&mut self, base: u64) -> Attempt {
        assert!(
            self.intent.is_none(),
            "invariant: intend at {base} while {:?} is in flight",
            self.intent
        );
        assert!(
            !self.is_full(),
            "invariant: intend while the tiering state is full"
        );
        assert!(
            base >= self.remote_low,
            "invariant: intend at {base}, below the remote low {}",
            self.remote_low
        );
        assert!(
            self.covering(base).is_none(),
            "invariant: intend at {base}, inside an uploaded segment"
        );
        let Some(next) = self.next_attempt.checked_add(1) else {
            panic!("invariant: attempt numbers are exhausted");
        };
        let attempt = Attempt {
            generation: self.generation,
            base,
            attempt: self.next_attempt,
        };
        self.next_attempt = next;
        self.intent = Some(UploadPhase::intended(attempt).attempt());
        self.check();
        attempt
    }

    /// Both objects of `attempt`, the intent, answered `Ok` holding `segment`.
    pub fn uploaded(&mut self, attempt: Attempt, segment: RemoteSegment) {
        let Some(intent) = self.intent else {
            panic!("invariant: uploaded {attempt:?} with no intent in flight");
        };
        let UploadPhase::Uploaded { segment, .. } =
            UploadPhase::intended(intent).uploaded(attempt, segment)
        else {
            unreachable!("uploaded returns Uploaded");
        };
        if let Some(next) = self.segments.range(segment.base..).next() {
            assert!(
                segment.next_offset <= next.1.base,
                "invariant: segment {segment:?} overlaps the one at {}",
                next.1.base
            );
        }
        self.intent = None;
        self.segments.insert(segment.base, segment);
        self.check();
    }

    /// The upload in flight failed or its outcome is unknown: its attempt's
    /// keys are doomed (the round is created or extended, to be recorded).
    /// Returns the attempt, or `None` if no upload was in flight.
    pub fn abandon_intent(&mut self) -> Option<Attempt> {
        let attempt = UploadPhase::intended(self.intent.take()?).abandoned();
        self.doom(vec![attempt], None);
        self.check();
        Some(attempt)
    }

    /// Retention raised the first offset retained remotely to `mark` (equal:
    /// nothing changes): every segment ending at or below it is doomed, and
    /// so is an upload in flight that starts below it (marks fall on segment
    /// boundaries, so such a segment lies wholly below).
    pub fn raise_remote_low(&mut self, mark: u64) {
        assert!(
            mark >= self.remote_low,
            "invariant: the remote low only grows ({} -> {mark})",
            self.remote_low
        );
        let below: Vec<u64> = self
            .segments
            .values()
            .take_while(|s| s.next_offset <= mark)
            .map(|s| s.base)
            .collect();
        let mut doomed: Vec<Attempt> = below
            .iter()
            .filter_map(|base| self.segments.remove(base))
            .map(|s| s.attempt_in(self.generation))
            .collect();
        if let Some(intent) = self.intent
            && intent.base < mark
        {
            self.intent = None;
            doomed.push(UploadPhase::intended(intent).abandoned());
        }
        self.remote_low = mark;
        self.doom(doomed, None);
        self.check();
    }

    /// The partition was purged to `new_generation`: everything of the
    /// current one dies. Every segment and the intent are doomed, the
    /// generation becomes a dead generation of the round, and the history
    /// starts again at 0. Attempt numbers go on (never reused).
    pub fn purge_to(&mut self, new_generation: u64) {
        assert!(
            new_generation > self.generation,
            "invariant: the generation only grows ({} -> {new_generation})",
            self.generation
        );
        assert!(
            self.can_purge(),
            "invariant: purge_to with {MAX_DEAD_GENERATIONS} dead generations waiting"
        );
        let old = self.generation;
        let mut doomed: Vec<Attempt> = std::mem::take(&mut self.segments)
            .into_values()
            .map(|s| s.attempt_in(old))
            .collect();
        if let Some(intent) = self.intent.take() {
            doomed.push(UploadPhase::intended(intent).abandoned());
        }
        self.generation = new_generation;
        self.remote_low = 0;
        self.doom(doomed, Some(old));
        self.check();
    }

    /// Adds to the round (creating it), back to `Recorded`, unless there is
    /// nothing to add.
    fn doom(&mut self, doomed: Vec<Attempt>, dead_generation: Option<u64>) {
        if doomed.is_empty() && dead_generation.is_none() {
            return;
        }
        self.round = Some(match self.round.take() {
            None => DeletionRound::recorded(
                doomed.into_iter().collect(),
                dead_generation.into_iter().collect(),
                self.generation,
            ),
            Some(round) => round.extended(doomed, dead_generation, self.generation),
        });
    }

    /// The segment holding `offset`, if it is retained remotely.
    pub fn segment_for(&self, offset: u64) -> Option<&RemoteSegment> {
        if offset < self.remote_low {
            return None;
        }
        self.covering(offset)
    }

    fn covering(&self, offset: u64) -> Option<&RemoteSegment> {
        self.segments
            .range(..=offset)
            .next_back()
            .map(|(_, s)| s)
            .filter(|s| s.contains(offset))
    }

    /// The uploaded segments in base order.
    pub fn segments(&self) -> impl Iterator<Item = &RemoteSegment> {
        self.segments.values()
    }

    /// One past the highest uploaded segment.
    pub fn uploaded_end(&self) -> Option<u64> {
        self.segments.values().next_back().map(|s| s.next_offset)
    }

    /// The record of the current state is durable: the round's deletes may
    /// be issued.
    pub fn record_written(&mut self) {
        if let Some(round) = &mut self.round {
            round.record_written();
        }
        self.check();
    }

    fn take_round(&mut self, what: &str) -> DeletionRound {
        let Some(round) = self.round.take() else {
            panic!("invariant: {what} without a deletion round");
        };
        round
    }

    /// Every doomed key answered `Ok` to a delete.
    pub fn round_keys_deleted(&mut self) {
        let round = self.take_round("round_keys_deleted");
        self.round = Some(round.keys_deleted());
        self.check();
    }

    /// A fresh listing of the dead generations' prefixes found `found`. The
    /// doomed set keeps within the room the record leaves besides the
    /// segments and the intent, at least `MAX_DOOMED - MAX_REMOTE_SEGMENTS -
    /// 1` (see `DeletionRound::listed`).
    pub fn round_listed(&mut self, found: Vec<Attempt>) {
        let round = self.take_round("round_listed");
        let room = MAX_DOOMED - self.segments.len() - usize::from(self.intent.is_some());
        self.round = Some(round.listed_within(found, room));
        self.check();
    }

    /// The round is done: it leaves the state (the caller records that).
    pub fn round_applied(&mut self) {
        let round = self.take_round("round_applied");
        let _applied = round.applied();
        self.check();
    }

    /// Asserts every invariant (see the module docs).
    pub fn check(&self) {
        if let Err(e) = self.validate() {
            panic!("invariant: {e}");
        }
    }

    /// Every invariant, as a typed refusal (the door from disk).
    pub fn validate(&self) -> Result<(), TieringInvalid> {
        if self.segments.len() > MAX_REMOTE_SEGMENTS {
            return Err(TieringInvalid::TooManySegments {
                count: self.segments.len(),
            });
        }
        if self.entries() > MAX_DOOMED {
            return Err(TieringInvalid::TooManyEntries {
                count: self.entries(),
            });
        }
        let mut previous_end: Option<u64> = None;
        for (&base, s) in &self.segments {
            if s.base != base || s.base >= s.next_offset {
                return Err(TieringInvalid::EmptySegment {
                    base: s.base,
                    next_offset: s.next_offset,
                });
            }
            if let Some(end) = previous_end
                && s.base < end
            {
                return Err(TieringInvalid::SegmentsOverlap {
                    base,
                    previous_end: end,
                });
            }
            if s.next_offset <= self.remote_low {
                return Err(TieringInvalid::SegmentBelowRemoteLow {
                    base,
                    next_offset: s.next_offset,
                    remote_low: self.remote_low,
                });
            }
            previous_end = Some(s.next_offset);
        }
        if let Some(intent) = self.intent {
            if intent.generation != self.generation {
                return Err(TieringInvalid::IntentOfOtherGeneration {
                    intent,
                    generation: self.generation,
                });
            }
            if intent.base < self.remote_low {
                return Err(TieringInvalid::IntentBelowRemoteLow {
                    base: intent.base,
                    remote_low: self.remote_low,
                });
            }
            if self.covering(intent.base).is_some() {
                return Err(TieringInvalid::IntentInsideSegment { base: intent.base });
            }
        }
        if let Some(round) = &self.round {
            round.validate_against(self.generation)?;
            if round.phase == RoundPhase::Applied {
                return Err(TieringInvalid::AppliedRoundKept);
            }
        }
        // Every attempt of the live generation: below next_attempt, and
        // each number once.
        let doomed_live = self
            .round
            .iter()
            .flat_map(|r| r.doomed.iter())
            .filter(|a| a.generation == self.generation)
            .map(|a| a.attempt);
        let live = self
            .segments
            .values()
            .map(|s| s.attempt)
            .chain(self.intent.map(|a| a.attempt))
            .chain(doomed_live);
        let mut seen = BTreeSet::new();
        for attempt in live {
            if attempt >= self.next_attempt {
                return Err(TieringInvalid::AttemptNotTaken {
                    attempt,
                    next_attempt: self.next_attempt,
                });
            }
            if !seen.insert(attempt) {
                return Err(TieringInvalid::AttemptReused { attempt });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: u64, next_offset: u64, attempt: u64) -> RemoteSegment {
        RemoteSegment {
            base,
            next_offset,
            attempt,
            log_len: 100,
            index_len: 10,
            newest_timestamp: 7,
        }
    }

    fn at(generation: u64, base: u64, attempt: u64) -> Attempt {
        Attempt {
            generation,
            base,
            attempt,
        }
    }

    /// A partition of generation 3 with segments [0,10) and [10,25)
    /// uploaded (attempts 0 and 1).
    fn two_uploaded() -> Tiering {
        let mut t = Tiering::new(9, 3);
        let a = t.intend(0);
        t.uploaded(a, seg(0, 10, a.attempt));
        let b = t.intend(10);
        t.uploaded(b, seg(10, 25, b.attempt));
        t
    }

    fn set<T: Ord + Copy>(items: &[T]) -> BTreeSet<T> {
        items.iter().copied().collect()
    }

    // ---- one segment's upload ------------------------------------------

    #[test]
    fn an_upload_goes_intended_then_uploaded() {
        // Given: an intended attempt.
        let a = at(1, 5, 2);
        let p = UploadPhase::intended(a);
        assert_eq!(p.as_str(), "Intended");
        // When: its puts succeed.
        let p = p.uploaded(a, seg(5, 9, 2));
        // Then: it is uploaded, same attempt.
        assert_eq!(p.as_str(), "Uploaded");
        assert_eq!(p.attempt(), a);
        assert_eq!(UploadPhase::intended(a).abandoned(), a);
    }

    #[test]
    #[should_panic(expected = "invariant: uploaded names the intended attempt")]
    fn an_upload_of_another_attempt_is_refused() {
        let _ = UploadPhase::intended(at(1, 5, 2)).uploaded(at(1, 5, 3), seg(5, 9, 3));
    }

    #[test]
    #[should_panic(expected = "invariant: the segment uploaded is the attempt's")]
    fn an_uploaded_segment_of_another_base_is_refused() {
        let _ = UploadPhase::intended(at(1, 5, 2)).uploaded(at(1, 5, 2), seg(6, 9, 2));
    }

    #[test]
    #[should_panic(expected = "invariant: a segment is not empty")]
    fn an_empty_uploaded_segment_is_refused() {
        let _ = UploadPhase::intended(at(1, 5, 2)).uploaded(at(1, 5, 2), seg(5, 5, 2));
    }

    #[test]
    #[should_panic(expected = "invariant: uploaded from")]
    fn an_upload_is_not_uploaded_twice() {
        let a = at(1, 5, 2);
        let _ = UploadPhase::intended(a)
            .uploaded(a, seg(5, 9, 2))
            .uploaded(a, seg(5, 9, 2));
    }

    #[test]
    #[should_panic(expected = "invariant: abandoned from")]
    fn an_uploaded_segment_is_not_abandoned() {
        let a = at(1, 5, 2);
        let _ = UploadPhase::intended(a)
            .uploaded(a, seg(5, 9, 2))
            .abandoned();
    }

    // ---- a deletion round ----------------------------------------------

    #[test]
    fn a_round_of_the_live_generation_deletes_then_applies_without_listing() {
        // Given: a recorded round of two doomed attempts of generation 3.
        let mut r = DeletionRound::recorded(set(&[at(3, 0, 0), at(3, 10, 1)]), set(&[]), 3);
        assert!(r.needs_record());
        r.record_written();
        assert_eq!(r.phase().as_str(), "Recorded");
        // When: the keys are deleted.
        let r = r.keys_deleted();
        assert_eq!(r.phase().as_str(), "KeysDeleted");
        // Then: it applies straight away.
        assert_eq!(r.applied().phase().as_str(), "Applied");
    }

    #[test]
    fn a_round_with_a_dead_generation_lists_it_empty_before_applying() {
        // Given: a recorded round with generation 2 dead, its keys deleted.
        let mut r = DeletionRound::recorded(set(&[at(2, 0, 0)]), set(&[2]), 3);
        r.record_written();
        let r = r.keys_deleted();
        // When: the listing finds nothing.
        let r = r.listed(Vec::new());
        // Then: listed empty, then applied.
        assert_eq!(r.phase().as_str(), "ListedEmpty");
        assert_eq!(r.applied().phase(), RoundPhase::Applied);
    }

    #[test]
    fn a_listing_that_finds_keys_goes_back_to_recorded_with_them_added() {
        // Given: a round of generation 2, keys deleted.
        let mut r = DeletionRound::recorded(set(&[at(2, 0, 0)]), set(&[2]), 3);
        r.record_written();
        let r = r.keys_deleted();
        // When: the listing finds a put that landed late.
        let r = r.listed(vec![at(2, 50, 7)]);
        // Then: back to Recorded, both doomed, to be recorded first.
        assert_eq!(r.phase(), RoundPhase::Recorded);
        assert!(r.needs_record());
        assert_eq!(r.doomed(), &set(&[at(2, 0, 0), at(2, 50, 7)]));
        // And: finding only what the round already dooms needs no record.
        let mut r = r;
        r.record_written();
        let r = r.keys_deleted().listed(vec![at(2, 0, 0)]);
        assert_eq!(r.phase(), RoundPhase::Recorded);
        assert!(!r.needs_record());
    }

    #[test]
    fn a_listing_over_the_room_forgets_deleted_attempts_first() {
        // Given: a round whose three doomed attempts were deleted.
        let mut r =
            DeletionRound::recorded(set(&[at(2, 0, 0), at(2, 1, 1), at(2, 2, 2)]), set(&[2]), 3);
        r.record_written();
        let r = r.keys_deleted();
        // When: a listing finds three more, with room for four.
        let r = r.listed_within(vec![at(2, 9, 9), at(2, 7, 7), at(2, 8, 8)], 4);
        // Then: every found one is kept, one deleted one too.
        assert_eq!(
            r.doomed(),
            &set(&[at(2, 0, 0), at(2, 7, 7), at(2, 8, 8), at(2, 9, 9)])
        );
        // And: with room for two, the two lowest found.
        let mut r = DeletionRound::recorded(set(&[at(2, 0, 0)]), set(&[2]), 3);
        r.record_written();
        let r = r
            .keys_deleted()
            .listed_within(vec![at(2, 9, 9), at(2, 7, 7), at(2, 8, 8)], 2);
        assert_eq!(r.doomed(), &set(&[at(2, 7, 7), at(2, 8, 8)]));
    }

    #[test]
    #[should_panic(expected = "invariant: keys_deleted before the round was recorded")]
    fn no_delete_before_the_round_is_recorded() {
        let _ = DeletionRound::recorded(set(&[at(3, 0, 0)]), set(&[]), 3).keys_deleted();
    }

    #[test]
    #[should_panic(expected = "invariant: keys_deleted from")]
    fn keys_are_not_deleted_twice_without_a_new_record() {
        let mut r = DeletionRound::recorded(set(&[at(3, 0, 0)]), set(&[]), 3);
        r.record_written();
        let _ = r.keys_deleted().keys_deleted();
    }

    #[test]
    #[should_panic(expected = "invariant: listed from")]
    fn a_listing_before_the_deletes_is_refused() {
        let mut r = DeletionRound::recorded(set(&[]), set(&[2]), 3);
        r.record_written();
        let _ = r.listed(Vec::new());
    }

    #[test]
    #[should_panic(expected = "invariant: listed without a dead generation")]
    fn a_round_of_the_live_generation_does_not_list() {
        let mut r = DeletionRound::recorded(set(&[at(3, 0, 0)]), set(&[]), 3);
        r.record_written();
        let _ = r.keys_deleted().listed(Vec::new());
    }

    #[test]
    #[should_panic(expected = "of another")]
    fn a_listing_finding_a_live_attempt_is_refused() {
        let mut r = DeletionRound::recorded(set(&[]), set(&[2]), 3);
        r.record_written();
        let _ = r.keys_deleted().listed(vec![at(3, 0, 0)]);
    }

    #[test]
    #[should_panic(expected = "invariant: applied from Recorded")]
    fn a_recorded_round_is_not_applied() {
        let mut r = DeletionRound::recorded(set(&[at(3, 0, 0)]), set(&[]), 3);
        r.record_written();
        let _ = r.applied();
    }

    #[test]
    #[should_panic(expected = "invariant: applied from KeysDeleted with 1 dead")]
    fn a_round_with_a_dead_generation_is_not_applied_before_listing() {
        let mut r = DeletionRound::recorded(set(&[]), set(&[2]), 3);
        r.record_written();
        let _ = r.keys_deleted().applied();
    }

    #[test]
    #[should_panic(expected = "invariant: applied from Applied")]
    fn a_round_is_not_applied_twice() {
        let mut r = DeletionRound::recorded(set(&[at(3, 0, 0)]), set(&[]), 3);
        r.record_written();
        let _ = r.keys_deleted().applied().applied();
    }

    #[test]
    #[should_panic(expected = "nothing doomed and no dead generation")]
    fn an_empty_round_is_refused() {
        let _ = DeletionRound::recorded(set(&[]), set(&[]), 3);
    }

    #[test]
    #[should_panic(expected = "not below the live generation")]
    fn the_live_generation_is_never_dead() {
        let _ = DeletionRound::recorded(set(&[]), set(&[3]), 3);
    }

    #[test]
    #[should_panic(expected = "neither of the live generation nor of a dead one")]
    fn a_doomed_attempt_of_an_unknown_generation_is_refused() {
        let _ = DeletionRound::recorded(set(&[at(1, 0, 0)]), set(&[2]), 3);
    }

    // ---- the partition's state ------------------------------------------

    #[test]
    fn intents_take_fresh_attempt_numbers_and_uploads_make_segments() {
        // Given: a new partition state.
        let mut t = Tiering::new(9, 3);
        assert_eq!((t.incarnation(), t.generation()), (9, 3));
        // When: two segments are intended and uploaded, one abandoned between.
        let a = t.intend(0);
        assert_eq!(a, at(3, 0, 0));
        assert_eq!(t.intent(), Some(a));
        t.uploaded(a, seg(0, 10, 0));
        let b = t.intend(10);
        assert_eq!(t.abandon_intent(), Some(b));
        assert_eq!(t.abandon_intent(), None);
        let c = t.intend(10);
        t.uploaded(c, seg(10, 25, c.attempt));
        // Then: numbers 0, 1, 2; the abandoned one doomed; reads find both.
        assert_eq!(c, at(3, 10, 2));
        assert_eq!(t.next_attempt(), 3);
        let round = t.round().unwrap();
        assert_eq!(round.doomed(), &set(&[b]));
        assert!(round.needs_record());
        assert_eq!(t.segment_for(9).map(|s| s.base), Some(0));
        assert_eq!(t.segment_for(10).map(|s| s.base), Some(10));
        assert_eq!(t.segment_for(25), None);
        assert_eq!(t.uploaded_end(), Some(25));
        assert_eq!(t.segments().count(), 2);
    }

    #[test]
    fn segments_may_leave_gaps_and_fill_them_later() {
        let mut t = Tiering::new(1, 0);
        let a = t.intend(20);
        t.uploaded(a, seg(20, 30, a.attempt));
        let b = t.intend(0);
        t.uploaded(b, seg(0, 10, b.attempt));
        assert_eq!(t.segment_for(15), None);
        assert_eq!(t.uploaded_end(), Some(30));
    }

    #[test]
    fn raising_the_remote_low_dooms_the_segments_below_it() {
        // Given: [0,10) and [10,25) uploaded, an upload of 25 in flight.
        let mut t = two_uploaded();
        let c = t.intend(25);
        // When: the mark rises to 10, then to 10 again, then to 26.
        t.raise_remote_low(10);
        // Then: [0,10) is doomed, reads below 10 find nothing.
        assert_eq!(t.round().unwrap().doomed(), &set(&[at(3, 0, 0)]));
        assert_eq!(t.segment_for(5), None);
        assert_eq!(t.segment_for(10).map(|s| s.base), Some(10));
        t.raise_remote_low(10);
        assert_eq!(t.round().unwrap().doomed().len(), 1);
        t.raise_remote_low(26);
        // And: the rest and the upload in flight below the mark, too.
        assert_eq!(
            t.round().unwrap().doomed(),
            &set(&[at(3, 0, 0), at(3, 10, 1), c])
        );
        assert_eq!(t.intent(), None);
        assert_eq!(t.remote_low(), 26);
        assert_eq!(t.uploaded_end(), None);
    }

    #[test]
    fn a_purge_dooms_the_whole_generation_and_starts_again_at_zero() {
        // Given: two segments and an upload in flight in generation 3.
        let mut t = two_uploaded();
        let c = t.intend(25);
        t.raise_remote_low(10);
        // When: the partition is purged to generation 4.
        t.purge_to(4);
        // Then: everything of 3 is doomed, 3 is dead, the history restarts.
        let round = t.round().unwrap();
        assert_eq!(round.doomed(), &set(&[at(3, 0, 0), at(3, 10, 1), c]));
        assert_eq!(round.dead_generations(), &set(&[3]));
        assert_eq!(round.phase(), RoundPhase::Recorded);
        assert_eq!((t.generation(), t.remote_low()), (4, 0));
        assert_eq!(t.segments().count(), 0);
        assert_eq!(t.intent(), None);
        // And: attempt numbers go on.
        assert_eq!(t.intend(0), at(4, 0, 3));
    }

    #[test]
    fn a_round_is_driven_to_applied_and_leaves_the_state() {
        // Given: a purged partition with a round, recorded.
        let mut t = two_uploaded();
        t.purge_to(4);
        t.record_written();
        // When: the keys are deleted and the listing finds a late put.
        t.round_keys_deleted();
        t.round_listed(vec![at(3, 30, 0)]);
        // Then: back to Recorded, to be recorded before its delete.
        assert!(t.round().unwrap().needs_record());
        t.record_written();
        t.round_keys_deleted();
        t.round_listed(Vec::new());
        assert_eq!(t.round().unwrap().phase(), RoundPhase::ListedEmpty);
        t.round_applied();
        assert!(t.round().is_none());
    }

    #[test]
    fn more_doomed_during_a_round_sends_it_back_to_recorded() {
        // Given: a round whose keys were deleted.
        let mut t = two_uploaded();
        t.raise_remote_low(10);
        t.record_written();
        t.round_keys_deleted();
        // When: the mark rises again.
        t.raise_remote_low(25);
        // Then: the round is Recorded again and must be written first.
        let round = t.round().unwrap();
        assert_eq!(round.phase(), RoundPhase::Recorded);
        assert!(round.needs_record());
        assert_eq!(round.doomed().len(), 2);
    }

    #[test]
    fn at_the_limit_an_intent_is_refused_with_full() {
        // Given: MAX_REMOTE_SEGMENTS segments uploaded.
        let mut t = Tiering::new(1, 0);
        for i in 0..MAX_REMOTE_SEGMENTS as u64 {
            let a = t.intend(i);
            t.uploaded(a, seg(i, i + 1, a.attempt));
        }
        // Then: full; try_intend refuses and changes nothing.
        assert!(t.is_full());
        let before = t.clone();
        assert_eq!(
            t.try_intend(MAX_REMOTE_SEGMENTS as u64),
            Err(TieringFull {
                segments: MAX_REMOTE_SEGMENTS,
                doomed: 0
            })
        );
        assert_eq!(t, before);
        // When: retention dooms half, then a round keeps the doomed set.
        t.raise_remote_low(MAX_REMOTE_SEGMENTS as u64 / 2);
        // Then: room again, until segments and doomed reach MAX_DOOMED.
        assert!(!t.is_full());
        let mut next = MAX_REMOTE_SEGMENTS as u64;
        while !t.is_full() {
            let a = t.try_intend(next).unwrap();
            t.uploaded(a, seg(next, next + 1, a.attempt));
            next += 1;
        }
        assert_eq!(
            t.segments().count() + t.round().unwrap().doomed().len(),
            MAX_DOOMED
        );
    }

    #[test]
    fn a_listing_keeps_the_round_within_the_room_the_record_leaves() {
        // Given: a purged partition, its round deleted, then the new
        // generation filled to MAX_REMOTE_SEGMENTS segments.
        let mut t = Tiering::new(1, 0);
        let a = t.intend(0);
        t.uploaded(a, seg(0, 1, a.attempt));
        t.purge_to(1);
        t.record_written();
        t.round_keys_deleted();
        for i in 0..MAX_REMOTE_SEGMENTS as u64 {
            let a = t.intend(i);
            t.uploaded(a, seg(i, i + 1, a.attempt));
        }
        // When: a listing finds far more than fits.
        let found: Vec<Attempt> = (0..MAX_DOOMED as u64).map(|i| at(0, i, i)).collect();
        t.round_listed(found);
        // Then: the doomed set filled the room exactly, lowest first.
        let doomed = t.round().unwrap().doomed();
        assert_eq!(doomed.len(), MAX_DOOMED - MAX_REMOTE_SEGMENTS);
        assert_eq!(doomed.first(), Some(&at(0, 0, 0)));
    }

    #[test]
    fn a_purge_is_refused_only_while_dead_generations_are_at_the_limit() {
        let mut t = Tiering::new(1, 0);
        for g in 1..=MAX_DEAD_GENERATIONS as u64 {
            assert!(t.can_purge());
            t.purge_to(g);
        }
        assert!(!t.can_purge());
        t.record_written();
        t.round_keys_deleted();
        t.round_listed(Vec::new());
        t.round_applied();
        assert!(t.can_purge());
    }

    #[test]
    #[should_panic(expected = "invariant: purge_to with")]
    fn a_purge_past_the_dead_generation_limit_panics() {
        let mut t = Tiering::new(1, 0);
        for g in 1..=MAX_DEAD_GENERATIONS as u64 + 1 {
            t.purge_to(g);
        }
    }

    #[test]
    #[should_panic(expected = "while Some")]
    fn a_second_intent_while_one_is_in_flight_panics() {
        let mut t = Tiering::new(1, 0);
        t.intend(0);
        t.intend(10);
    }

    #[test]
    #[should_panic(expected = "below the remote low")]
    fn an_intent_below_the_remote_low_panics() {
        let mut t = two_uploaded();
        t.raise_remote_low(10);
        t.intend(5);
    }

    #[test]
    #[should_panic(expected = "inside an uploaded segment")]
    fn an_intent_of_an_uploaded_base_panics() {
        let mut t = two_uploaded();
        t.intend(10);
    }

    #[test]
    #[should_panic(expected = "inside an uploaded segment")]
    fn an_intent_inside_an_uploaded_segment_panics() {
        let mut t = two_uploaded();
        t.intend(12);
    }

    #[test]
    #[should_panic(expected = "invariant: intend while the tiering state is full")]
    fn intend_while_full_panics() {
        let mut t = Tiering::new(1, 0);
        for i in 0..=MAX_REMOTE_SEGMENTS as u64 {
            let a = t.intend(i);
            t.uploaded(a, seg(i, i + 1, a.attempt));
        }
    }

    #[test]
    #[should_panic(expected = "with no intent in flight")]
    fn uploaded_without_an_intent_panics() {
        let mut t = Tiering::new(1, 0);
        t.uploaded(at(0, 0, 0), seg(0, 1, 0));
    }

    #[test]
    #[should_panic(expected = "invariant: uploaded names the intended attempt")]
    fn uploaded_of_an_abandoned_attempt_panics() {
        let mut t = two_uploaded();
        let c = t.intend(25);
        t.raise_remote_low(30);
        let d = t.intend(30);
        assert_ne!(c, d);
        t.uploaded(c, seg(25, 30, c.attempt));
    }

    #[test]
    #[should_panic(expected = "overlaps the one at 10")]
    fn an_upload_overlapping_the_next_segment_panics() {
        let mut t = Tiering::new(1, 0);
        let a = t.intend(10);
        t.uploaded(a, seg(10, 20, a.attempt));
        let b = t.intend(0);
        t.uploaded(b, seg(0, 11, b.attempt));
    }

    #[test]
    #[should_panic(expected = "the remote low only grows")]
    fn the_remote_low_never_goes_back() {
        let mut t = two_uploaded();
        t.raise_remote_low(10);
        t.raise_remote_low(9);
    }

    #[test]
    #[should_panic(expected = "the generation only grows")]
    fn a_purge_to_the_same_generation_panics() {
        let mut t = two_uploaded();
        t.purge_to(3);
    }

    #[test]
    #[should_panic(expected = "invariant: round_keys_deleted without a deletion round")]
    fn driving_a_round_that_does_not_exist_panics() {
        Tiering::new(1, 0).round_keys_deleted();
    }

    #[test]
    #[should_panic(expected = "invariant: keys_deleted before the round was recorded")]
    fn a_tiering_round_is_not_deleted_before_its_record() {
        let mut t = two_uploaded();
        t.raise_remote_low(10);
        t.round_keys_deleted();
    }

    #[test]
    #[should_panic(expected = "invariant: applied from KeysDeleted with 1 dead")]
    fn a_purged_generation_is_listed_before_the_round_applies() {
        let mut t = two_uploaded();
        t.purge_to(4);
        t.record_written();
        t.round_keys_deleted();
        t.round_applied();
    }

    #[test]
    fn phase_names_are_stable() {
        let names: Vec<&str> = [
            RoundPhase::Recorded,
            RoundPhase::KeysDeleted,
            RoundPhase::ListedEmpty,
            RoundPhase::Applied,
        ]
        .into_iter()
        .map(RoundPhase::as_str)
        .collect();
        assert_eq!(names, ["Recorded", "KeysDeleted", "ListedEmpty", "Applied"]);
    }
}
