//! Tiered storage of one partition's sealed segments in an object store
//! (issue 31, ADR 0027): the pure part. What the partition has remotely and
//! owes remotely ([`Tiering`], `state.rs`), where each object lives
//! ([`TierKeys`], `key.rs`), and the durable record of both (`tiering.rec`,
//! `record.rs`). Nothing here does I/O but decode bytes it is given; the
//! engine drives the transitions around its puts, deletes, listings and
//! record writes.
//!
//! Invariants (each module states its own and why it holds):
//! - **No key is ever written twice.** Every upload attempt takes a fresh
//!   attempt number, durable in the record before its put is issued, and the
//!   key names the instance, the partition's ids and incarnation, the purge
//!   generation, the base and the attempt: no two attempts, partitions,
//!   incarnations, generations or servers sharing a bucket meet on a key.
//!   So `AlreadyExists` on a put only ever means "outcome unknown".
//! - **Nothing is deleted that the durable state still reads, and nothing is
//!   forgotten that was meant to be deleted.** An object is doomed in the
//!   transition that stops reads finding it, recorded before its delete, and
//!   leaves the record only when its round applies: every doomed key answered
//!   `Ok` to a delete and every dead generation's prefix was listed empty
//!   afterwards. What a late put lands after that is named by no record: the
//!   orphan sweep's (ADR 0026 §3).
//! - **The record never outgrows its slot**: bounded lists, checked at
//!   compile time, and a `Full` refusal of uploads at the bound.
//! - **Decoding never panics**; a record breaking any invariant is refused
//!   with a typed error. Transitions that break one are programmer errors and
//!   panic.

pub(crate) mod cache;
pub(crate) mod jobs;
mod key;
pub(crate) mod partition;
mod record;
mod state;

pub use key::{Attempt, ObjectKind, PartitionPlace, TierKeys};
pub use record::{
    LoadedTiering, MAX_DEAD_GENERATIONS, MAX_DOOMED, MAX_RECORD_PAYLOAD, MAX_REMOTE_SEGMENTS,
    RoundRecord, TIERING_LAYOUT, TieringDecodeError, TieringRecord, decode_file,
};
pub use state::{
    DeletionRound, RemoteSegment, RoundPhase, Tiering, TieringFull, TieringInvalid, UploadPhase,
};
