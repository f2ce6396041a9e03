//! The start-up probe: does this store refuse a second create of the same key?
//!
//! Every remote copy in the tiering design is a fresh key written create-only, and an
//! obligation relies on "an answered put was never overwritten, and a late retry of an old
//! attempt cannot replace a newer object". A store that ignores `If-None-Match: *` (garage
//! does; some S3-compatible servers accept the header and overwrite) breaks that silently, so
//! sluice asks before it relies on it.
//!
//! Invariants:
//! - The probe tells the truth, never passes by default: `Honoured` only when the second
//!   create was answered `AlreadyExists` *and* the object still holds the first body; a second
//!   create answered `Ok`, or an object that now holds the second body, is `Ignored`. Any other
//!   answer is an error (`ProbeError`), not a verdict: the caller retries or refuses to start.
//! - It writes only under `<prefix>/_probe/` (`PROBE_SEGMENT`), a key nobody else uses (a
//!   nonce), and deletes it before returning (the report says whether that delete was
//!   answered; a key left behind is tiny and named, for the orphan sweep or an operator).
//! - It checks sequential refusal only. Whether two *concurrent* creates can both succeed (a
//!   check-then-write server, as `s3s-fs` is) cannot be learnt from one client reliably; ADR
//!   0026 §5 says why the tiering design does not need it.

use bytes::Bytes;

use crate::RemoteStore;
use crate::error::{RemoteError, RemoteErrorKind};
use crate::key::RemoteKey;

/// The segment under an instance's prefix that probe keys live in.
pub const PROBE_SEGMENT: &str = "_probe";

const FIRST: &[u8] = b"sluice conditional-create probe: first";
const SECOND: &[u8] = b"sluice conditional-create probe: second, must be refused";

/// Whether the store refuses a second create of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionalCreate {
    /// Refused with `AlreadyExists`, and the first object was kept.
    Honoured,
    /// The second create was accepted (or overwrote the first): create-only puts cannot be
    /// relied on with this store.
    Ignored,
}

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    pub key: RemoteKey,
    pub verdict: ConditionalCreate,
    /// Whether the probe's own object was deleted (answered `Ok`).
    pub cleaned_up: bool,
}

/// Why the probe gave no verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("probe prefix or nonce makes no valid key: {0}")]
    Key(#[from] crate::key::KeyError),
    #[error("probe key {0} already held an object before the probe wrote it")]
    KeyNotFresh(RemoteKey),
    #[error("probe could not finish: {0}")]
    Remote(#[from] RemoteError),
}

/// Probes with a nonce from the clock and the process id (a fresh key for every start).
/// The simulator uses [`probe_conditional_create_with_nonce`] to stay a function of its seed.
pub fn probe_conditional_create(
    store: &dyn RemoteStore,
    prefix: &RemoteKey,
) -> Result<ProbeReport, ProbeError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let nonce = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(17);
    probe_conditional_create_with_nonce(store, prefix, nonce)
}

/// Puts `<prefix>/_probe/create-<nonce>` twice and reads what the store kept.
pub fn probe_conditional_create_with_nonce(
    store: &dyn RemoteStore,
    prefix: &RemoteKey,
    nonce: u64,
) -> Result<ProbeReport, ProbeError> {
    let key = prefix
        .join(PROBE_SEGMENT)?
        .join(&format!("create-{nonce:016x}"))?;
    let verdict = verdict(store, &key);
    // Clean up whatever happened, then report. A missing object counts as deleted.
    let cleaned_up = match store.delete(&key) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "probe object not deleted; left for the orphan sweep");
            false
        }
    };
    let verdict = verdict?;
    tracing::info!(key = %key, ?verdict, cleaned_up, "conditional-create probe");
    Ok(ProbeReport {
        key,
        verdict,
        cleaned_up,
    })
}

fn verdict(store: &dyn RemoteStore, key: &RemoteKey) -> Result<ConditionalCreate, ProbeError> {
    match store.put_new(key, Bytes::from_static(FIRST)) {
        Ok(()) => {}
        Err(e) if e.kind == RemoteErrorKind::AlreadyExists => {
            return Err(ProbeError::KeyNotFresh(key.clone()));
        }
        Err(e) => return Err(e.into()),
    }
    let second = store.put_new(key, Bytes::from_static(SECOND));
    let kept = store.get_range(key, 0..SECOND.len().max(FIRST.len()) as u64)?;
    match second {
        Ok(()) => Ok(ConditionalCreate::Ignored),
        Err(e) if e.kind == RemoteErrorKind::AlreadyExists => {
            if kept.as_ref() == FIRST {
                Ok(ConditionalCreate::Honoured)
            } else {
                // Refused in words, overwritten in fact.
                Ok(ConditionalCreate::Ignored)
            }
        }
        Err(e) => Err(e.into()),
    }
}
