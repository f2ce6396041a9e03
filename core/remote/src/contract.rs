//! The contract every [`RemoteStore`] backend keeps, as one executable check.
//!
//! `check` runs the same calls against any backend and stops at the first answer the trait's
//! contract (lib.rs, ADR 0026 §2) does not allow. The crate's tests run it against
//! `SimRemote`, `ObjectStoreRemote` on the local file system and `ObjectStoreRemote` on an
//! in-process S3 server, so the simulator cannot drift from the real stores unnoticed (the
//! role `tests/storage_differential.rs` plays for `SimStorage`). It is public so a later
//! `sluice self-check` can run it against a configured store.
//!
//! Invariants: it writes only below `prefix` and at `<prefix>-outside/`, which must be
//! empty when it starts, and deletes everything it wrote before returning `Ok`.

use bytes::Bytes;

use crate::error::{RemoteError, RemoteErrorKind};
use crate::key::RemoteKey;
use crate::{ListedObject, RemoteStore};

/// The first answer that broke the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("remote contract broken at {check}: {detail}")]
pub struct ContractViolation {
    /// Which check failed.
    pub check: &'static str,
    pub detail: String,
}

fn violated(check: &'static str, detail: impl Into<String>) -> ContractViolation {
    ContractViolation {
        check,
        detail: detail.into(),
    }
}

fn key(base: &RemoteKey, rest: &str) -> Result<RemoteKey, ContractViolation> {
    RemoteKey::new(format!("{base}/{rest}")).map_err(|e| violated("key", e.to_string()))
}

fn expect_ok<T>(check: &'static str, r: Result<T, RemoteError>) -> Result<T, ContractViolation> {
    r.map_err(|e| violated(check, format!("expected success, got {e}")))
}

fn expect_kind<T: std::fmt::Debug>(
    check: &'static str,
    r: Result<T, RemoteError>,
    kind: RemoteErrorKind,
) -> Result<(), ContractViolation> {
    match r {
        Err(e) if e.kind == kind => Ok(()),
        Err(e) => Err(violated(check, format!("expected {kind}, got {e}"))),
        Ok(v) => Err(violated(check, format!("expected {kind}, got Ok({v:?})"))),
    }
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(
    check: &'static str,
    got: T,
    want: T,
) -> Result<(), ContractViolation> {
    if got == want {
        Ok(())
    } else {
        Err(violated(check, format!("expected {want:?}, got {got:?}")))
    }
}

/// Runs the contract against `store` under `prefix` (empty, and `<prefix>-outside` too).
pub fn check(store: &dyn RemoteStore, prefix: &RemoteKey) -> Result<(), ContractViolation> {
    let outside_base =
        RemoteKey::new(format!("{prefix}-outside")).map_err(|e| violated("key", e.to_string()))?;
    let alpha = key(prefix, "alpha")?;
    let alpha2 = key(prefix, "alpha-2")?;
    let zeta = key(prefix, "Zeta")?;
    let nested = key(prefix, "m/nested")?;
    let outside = key(&outside_base, "obj")?;
    let missing = key(prefix, "never-written")?;
    let body = Bytes::from_static(b"0123456789abcdef");
    let len = body.len() as u64;

    expect_eq(
        "empty prefix lists empty",
        expect_ok("list empty", store.list(prefix))?,
        vec![],
    )?;

    // Create-only.
    expect_ok("put new", store.put_new(&alpha, body.clone()))?;
    expect_kind(
        "second create refused",
        store.put_new(&alpha, Bytes::from_static(b"overwrite")),
        RemoteErrorKind::AlreadyExists,
    )?;
    expect_eq(
        "refused create left the first object",
        expect_ok("get after refused create", store.get_range(&alpha, 0..len))?,
        body.clone(),
    )?;

    // Head and ranges.
    expect_eq(
        "head is the size",
        expect_ok("head", store.head(&alpha))?,
        len,
    )?;
    expect_eq(
        "range get",
        expect_ok("range get", store.get_range(&alpha, 2..5))?,
        body.slice(2..5),
    )?;
    expect_eq(
        "range past the end is cut",
        expect_ok("range past the end", store.get_range(&alpha, 10..len + 100))?,
        body.slice(10..),
    )?;
    expect_kind(
        "range starting at the end is refused",
        store.get_range(&alpha, len..len + 1),
        RemoteErrorKind::InvalidRequest,
    )?;
    expect_kind(
        "empty range is refused",
        store.get_range(&alpha, 3..3),
        RemoteErrorKind::InvalidRequest,
    )?;
    expect_kind(
        "missing get is NotFound",
        store.get_range(&missing, 0..1),
        RemoteErrorKind::NotFound,
    )?;
    expect_kind(
        "missing head is NotFound",
        store.head(&missing),
        RemoteErrorKind::NotFound,
    )?;

    // Listing: sorted bytewise, any depth, strictly below the prefix (segment-wise).
    expect_ok("put zeta", store.put_new(&zeta, Bytes::from_static(b"z")))?;
    expect_ok(
        "put alpha-2",
        store.put_new(&alpha2, Bytes::from_static(b"22")),
    )?;
    expect_ok(
        "put nested",
        store.put_new(&nested, Bytes::from_static(b"nnn")),
    )?;
    expect_ok(
        "put outside",
        store.put_new(&outside, Bytes::from_static(b"out")),
    )?;
    let want = vec![
        ListedObject {
            key: zeta.clone(),
            size: 1,
        },
        ListedObject {
            key: alpha.clone(),
            size: len,
        },
        ListedObject {
            key: alpha2.clone(),
            size: 2,
        },
        ListedObject {
            key: nested.clone(),
            size: 3,
        },
    ];
    expect_eq(
        "list sorted by key",
        expect_ok("list", store.list(prefix))?,
        want,
    )?;
    expect_eq(
        "list of a nested prefix",
        expect_ok("list nested", store.list(&key(prefix, "m")?))?,
        vec![ListedObject {
            key: nested.clone(),
            size: 3,
        }],
    )?;

    // Idempotent delete.
    expect_ok("delete", store.delete(&alpha))?;
    expect_ok("delete twice", store.delete(&alpha))?;
    expect_ok("delete never written", store.delete(&missing))?;
    expect_kind(
        "deleted get is NotFound",
        store.get_range(&alpha, 0..1),
        RemoteErrorKind::NotFound,
    )?;
    expect_kind(
        "deleted head is NotFound",
        store.head(&alpha),
        RemoteErrorKind::NotFound,
    )?;
    let listed: Vec<RemoteKey> = expect_ok("list after delete", store.list(prefix))?
        .into_iter()
        .map(|o| o.key)
        .collect();
    expect_eq(
        "list after delete",
        listed,
        vec![zeta.clone(), alpha2.clone(), nested.clone()],
    )?;
    // A deleted key can be created again (the tiering design never does; the store allows it).
    expect_ok(
        "create after delete",
        store.put_new(&alpha, Bytes::from_static(b"again")),
    )?;

    for k in [&alpha, &alpha2, &zeta, &nested, &outside] {
        expect_ok("clean up", store.delete(k))?;
    }
    expect_eq(
        "cleaned up",
        expect_ok("list after clean up", store.list(prefix))?,
        vec![],
    )?;
    expect_eq(
        "cleaned up outside",
        expect_ok("list outside after clean up", store.list(&outside_base))?,
        vec![],
    )?;
    Ok(())
}
