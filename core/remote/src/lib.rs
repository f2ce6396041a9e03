//! `sluice-remote`: the one door between sluice and an object store (issue 31's foundation).
//!
//! Invariants this crate exists to uphold (ADR 0026 states them with their reasons):
//! - Every object sluice puts, reads, lists or deletes goes through [`RemoteStore`]. It has a
//!   real backend, [`ObjectStoreRemote`] (the `object_store` crate: S3 and compatible servers,
//!   or the local file system), and a deterministic double, [`SimRemote`], so code that tiers
//!   and deletes remote objects runs unchanged against either, and a simulated run is a pure
//!   function of its seeds.
//! - The trait promises no more than S3 does: a `put` is create-only (an existing key is
//!   refused, never overwritten) and, once answered `Ok`, durable and visible to every later
//!   `get`, `head` and `list` (S3 is strongly consistent for these since December 2020); an
//!   error may hide an effect ([`RemoteError::may_have_applied`]), and a request whose answer
//!   was lost may land later. A `delete` of a missing object succeeds, so a delete whose answer
//!   was lost is simply retried. Nothing in this crate decides that an object is garbage: that
//!   is the obligation's job, from its own durable record (ADR 0003, ADR 0015).
//! - The trait is synchronous, like `sluice_storage::DurableStorage` (ADR 0002): the engine
//!   and the simulator are synchronous, and a blocking call completes in program order. The
//!   async server calls it from a blocking thread (`spawn_blocking`, or a thread it owns).
//! - Only this crate carries `object_store` and its HTTP stack; `sluice-storage` stays small.

mod error;
mod key;
mod object;
mod probe;
pub mod sim;

pub mod contract;

use std::fmt::Debug;
use std::ops::Range;

use bytes::Bytes;

pub use error::{RemoteError, RemoteErrorKind, RemoteOp, Result};
pub use key::{KeyError, MAX_KEY_LEN, MAX_SEGMENT_LEN, RemoteKey};
pub use object::{ObjectStoreRemote, RemoteBuildError, RuntimeHandle, S3Settings};
pub use probe::{
    ConditionalCreate, PROBE_SEGMENT, ProbeError, ProbeReport, probe_conditional_create,
    probe_conditional_create_with_nonce,
};
pub use sim::{
    Halts, Landing, LinkedRemote, RemoteFault, RemoteFaultMode, RemoteFaultPlan, RemoteMatcher,
    RemoteTraceEntry, SimRemote, SimRemoteConfig,
};

/// One object a listing found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListedObject {
    pub key: RemoteKey,
    /// Size in bytes.
    pub size: u64,
}

/// An object store as sluice needs it. See the crate docs for the contract; ADR 0026 §2 for
/// each call's rules and the backends' agreement on them (`contract::check`).
pub trait RemoteStore: Send + Sync + Debug {
    /// Creates the object `key` holding `data`, only if no object is there: an existing key
    /// is [`RemoteErrorKind::AlreadyExists`] and is left as it was. `Ok` means the whole object
    /// is durable and visible. On an error that [`RemoteError::may_have_applied`], the object
    /// may exist (whole: a put is atomic), now or later.
    fn put_new(&self, key: &RemoteKey, data: Bytes) -> Result<()>;

    /// The bytes of `range` of the object: `range.start < range.end` (else `InvalidRequest`,
    /// before any call), `range.start` below the object's size (else `InvalidRequest`); a range
    /// running past the end is cut at the end, as S3 does. A missing object is `NotFound`.
    fn get_range(&self, key: &RemoteKey, range: Range<u64>) -> Result<Bytes>;

    /// The object's size in bytes; `NotFound` if it does not exist.
    fn head(&self, key: &RemoteKey) -> Result<u64>;

    /// Removes the object. A missing object counts as deleted (`Ok`), so a delete whose answer
    /// was lost is retried, never turned into an error. `Ok` means the object is gone for
    /// every later call.
    fn delete(&self, key: &RemoteKey) -> Result<()>;

    /// Every object strictly below `prefix` (segment-wise, at any depth: `a/b` lists `a/b/c`
    /// and `a/b/c/d`, not `a/bc`), sorted by key bytewise. An empty prefix lists as empty.
    fn list(&self, prefix: &RemoteKey) -> Result<Vec<ListedObject>>;
}

/// The range check every backend makes before calling anything, so all agree on it.
pub(crate) fn check_range(key: &RemoteKey, range: &Range<u64>) -> Result<()> {
    if range.start >= range.end {
        return Err(
            RemoteError::new(RemoteOp::Get, key, RemoteErrorKind::InvalidRequest).with_detail(
                format!("empty or reversed range {}..{}", range.start, range.end),
            ),
        );
    }
    Ok(())
}
