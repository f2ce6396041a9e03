//! Typed remote-store errors.
//!
//! Invariants:
//! - Every error names the operation and the key it concerned, so a log line, an
//!   obligation's `last_error` or a status page can say *which* object failed and *how*
//!   without the caller threading that context through by hand.
//! - The kind says what the caller may conclude about the call's effect, and nothing more
//!   ([`RemoteError::may_have_applied`]): only `InvalidRequest` proves that a failed put or
//!   delete changed nothing. A timeout, a dropped connection, a 5xx or anything unclassified
//!   may have taken effect, and so may a put answered `AlreadyExists` (the object there may be
//!   its own, written by the client's internal retry). Code that deletes or records on the
//!   strength of an answer must treat these so (ADR 0026 §2).

use std::fmt;

use crate::key::RemoteKey;

/// The operations of [`crate::RemoteStore`]. The simulator's trace and fault rules speak in
/// these kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RemoteOp {
    /// A create-only put.
    Put,
    /// A ranged read.
    Get,
    /// Size of an object.
    Head,
    /// An idempotent delete.
    Delete,
    /// A listing under a prefix.
    List,
}

impl RemoteOp {
    pub const ALL: [RemoteOp; 5] = [
        RemoteOp::Put,
        RemoteOp::Get,
        RemoteOp::Head,
        RemoteOp::Delete,
        RemoteOp::List,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RemoteOp::Put => "put",
            RemoteOp::Get => "get",
            RemoteOp::Head => "head",
            RemoteOp::Delete => "delete",
            RemoteOp::List => "list",
        }
    }

    /// Operations that can change what the store holds.
    pub fn is_mutation(self) -> bool {
        matches!(self, RemoteOp::Put | RemoteOp::Delete)
    }
}

impl fmt::Display for RemoteOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong, independent of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteErrorKind {
    /// The object (for `get`, `head`) does not exist. `delete` never returns it: a missing
    /// object counts as deleted.
    NotFound,
    /// A create-only `put` found an object under the key. It may be this very call's own
    /// earlier attempt: `object_store` retries a put that met a 5xx, and the retry meets the
    /// first attempt's object (ADR 0026 §2). Nothing was overwritten.
    AlreadyExists,
    /// The store did not answer in time or could not be reached (timeout, connection lost,
    /// 5xx after the client's retries). **The outcome is unknown**: a put or delete may have
    /// taken effect, now or later.
    Unavailable,
    /// A key, prefix or range this crate or the store refuses; the call had no effect.
    InvalidRequest,
    /// Anything else (refused credentials, an unsupported request, an unclassified client
    /// error). Treated as outcome unknown too.
    Other,
}

impl RemoteErrorKind {
    /// A stable short name (the simulator's trace renders it, so changing one changes every
    /// recorded trace hash).
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteErrorKind::NotFound => "not_found",
            RemoteErrorKind::AlreadyExists => "already_exists",
            RemoteErrorKind::Unavailable => "unavailable",
            RemoteErrorKind::InvalidRequest => "invalid_request",
            RemoteErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for RemoteErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RemoteErrorKind::NotFound => "not found",
            RemoteErrorKind::AlreadyExists => "already exists",
            RemoteErrorKind::Unavailable => "unavailable (outcome unknown)",
            RemoteErrorKind::InvalidRequest => "invalid request",
            RemoteErrorKind::Other => "other error",
        })
    }
}

/// A failed remote operation: which one, on which key (or prefix), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("remote {op} {key}: {kind}{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
pub struct RemoteError {
    pub op: RemoteOp,
    /// The key, or for `list` the prefix; the raw text when it was not a valid key.
    pub key: String,
    pub kind: RemoteErrorKind,
    /// Backend-specific detail (the store's message, the injected fault); may be empty.
    pub detail: String,
}

impl RemoteError {
    pub fn new(op: RemoteOp, key: &RemoteKey, kind: RemoteErrorKind) -> Self {
        RemoteError {
            op,
            key: key.as_str().to_string(),
            kind,
            detail: String::new(),
        }
    }

    /// An error about text that is not (or not yet) a [`RemoteKey`].
    pub fn for_raw(op: RemoteOp, key: &str, kind: RemoteErrorKind) -> Self {
        RemoteError {
            op,
            key: key.to_string(),
            kind,
            detail: String::new(),
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Whether the failed call may have changed the store (now, or later: a request in
    /// flight can land after its answer was lost). `false` for reads, and for a mutation only
    /// when the store refused the request itself (`InvalidRequest`). A put answered
    /// `AlreadyExists` may have written the object it found.
    pub fn may_have_applied(&self) -> bool {
        self.op.is_mutation()
            && !matches!(
                self.kind,
                RemoteErrorKind::InvalidRequest | RemoteErrorKind::NotFound
            )
    }
}

pub type Result<T> = std::result::Result<T, RemoteError>;
