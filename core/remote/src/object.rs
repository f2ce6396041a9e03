//! `ObjectStoreRemote`: [`RemoteStore`] over the `object_store` crate, for S3 and compatible
//! servers (`aws`) and for the local file system (`LocalFileSystem`, the embedded default).
//!
//! Invariants, and why they hold:
//! - A put is create-only on every backend: it is always `PutMode::Create`. On S3 that is a
//!   `PUT` with `If-None-Match: *` (a 412 comes back as `AlreadyExists`); on the local file
//!   system the object is written to a staging file `<key>#<n>` and published with
//!   `hard_link`, which refuses an existing name. No call here can overwrite an object.
//! - A call blocks the calling thread on the runtime's `block_on`. It must be a blocking
//!   thread (`spawn_blocking`, or a thread the server owns), never an async worker: tokio
//!   itself refuses that, by panicking ("Cannot start a runtime from within a runtime"), a
//!   programmer error that stops the process, as an illegal state transition does. Tokio
//!   offers no cheaper public check: `Handle::try_current` succeeds on `spawn_blocking`
//!   threads too, so it cannot tell them apart (`calling_from_an_async_worker_panics`).
//! - Local durability (ADR 0026 §4). `object_store` 0.14's `LocalFileSystem` does not fsync
//!   by default. [`ObjectStoreRemote::local`] turns on `with_fsync(true)`: the staged file's
//!   bytes are synced before it is published, and the parent directory (and every directory
//!   the put created) after, so an answered put is durable. Its deletes are never synced
//!   (`with_fsync` "does not apply to standalone deletes", its source says), so a power loss
//!   could bring a deleted object back after its obligation recorded `Applied`. This backend
//!   therefore syncs the parent directory itself after every local delete, through
//!   `sluice_storage::DiskStorage` (the one door to the disk), also when the object was
//!   already missing (an earlier delete's removal may be in the page cache only).
//! - Every error names the operation and key (`RemoteError`); what a kind proves about the
//!   call's effect is in `error.rs`. Telling `Unavailable` from `Other` for an S3 error is
//!   best effort (`object_store` does not export its retry error's status); both mean
//!   "outcome unknown", so no decision depends on which one is reported.

use std::fmt;
use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sluice_storage::{DiskStorage, DurableStorage, ErrorKind as StorageErrorKind};

use crate::error::{RemoteError, RemoteErrorKind, RemoteOp, Result};
use crate::key::RemoteKey;
use crate::{ListedObject, RemoteStore, check_range};

/// The tokio runtime an [`ObjectStoreRemote`] blocks on.
#[derive(Clone)]
pub enum RuntimeHandle {
    /// A runtime someone else owns (the server's).
    Borrowed(tokio::runtime::Handle),
    /// A small runtime of its own (tests, tools). It is shut down when the last clone of the
    /// remote is dropped, which, like any runtime's drop, must not happen on an async worker.
    Owned(Arc<tokio::runtime::Runtime>),
}

impl RuntimeHandle {
    /// A one-worker runtime owned by the remote.
    pub fn owned() -> std::io::Result<RuntimeHandle> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-remote")
            .enable_all()
            .build()?;
        Ok(RuntimeHandle::Owned(Arc::new(rt)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            RuntimeHandle::Borrowed(h) => h,
            RuntimeHandle::Owned(rt) => rt.handle(),
        }
    }
}

impl fmt::Debug for RuntimeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuntimeHandle::Borrowed(_) => "RuntimeHandle::Borrowed",
            RuntimeHandle::Owned(_) => "RuntimeHandle::Owned",
        })
    }
}

/// How to reach an S3 or S3-compatible bucket.
#[derive(Clone, Default)]
pub struct S3Settings {
    pub bucket: String,
    pub region: String,
    /// `None` for AWS itself; `http://127.0.0.1:9000` for a compatible server.
    pub endpoint: Option<String>,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Plain `http://` endpoints (tests, a server on loopback).
    pub allow_http: bool,
    /// `bucket.host` addressing instead of `host/bucket` (path style, the default here:
    /// every compatible server supports it).
    pub virtual_hosted_style: bool,
    /// Per-request timeout; `None` keeps `object_store`'s default (30 s).
    pub request_timeout: Option<Duration>,
    /// How often the client retries a connection error, a 5xx or (for reads and deletes) a
    /// timeout; `None` keeps `object_store`'s default (10, within 3 minutes).
    pub max_retries: Option<usize>,
}

impl fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("allow_http", &self.allow_http)
            .field("virtual_hosted_style", &self.virtual_hosted_style)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

/// A backend that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("remote store {store}: {detail}")]
pub struct RemoteBuildError {
    pub store: String,
    pub detail: String,
}

/// The real backend. Cloning shares the store and the runtime.
#[derive(Clone)]
pub struct ObjectStoreRemote {
    store: Arc<dyn ObjectStore>,
    runtime: RuntimeHandle,
    /// For logs and errors: `local:/path` or `s3://bucket`.
    describe: String,
    /// The local backend's root: a delete syncs the directory that held the object.
    local_root: Option<PathBuf>,
}

impl fmt::Debug for ObjectStoreRemote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreRemote")
            .field("store", &self.describe)
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

impl ObjectStoreRemote {
    /// Any `object_store` backend. It must honour `PutMode::Create` (check with
    /// [`crate::probe_conditional_create`]); deletes are taken as durable once answered.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        describe: impl Into<String>,
        runtime: RuntimeHandle,
    ) -> ObjectStoreRemote {
        ObjectStoreRemote {
            store,
            runtime,
            describe: describe.into(),
            local_root: None,
        }
    }

    /// The embedded default: objects as files under `root` (created if missing), with
    /// `fsync` on for puts and a directory sync after every delete (module docs).
    pub fn local(
        root: &FsPath,
        runtime: RuntimeHandle,
    ) -> std::result::Result<Self, RemoteBuildError> {
        let describe = format!("local:{}", root.display());
        let fail = |detail: String| RemoteBuildError {
            store: describe.clone(),
            detail,
        };
        let disk = DiskStorage::new();
        disk.create_dir_all(root).map_err(|e| fail(e.to_string()))?;
        let fs = LocalFileSystem::new_with_prefix(root)
            .map_err(|e| fail(e.to_string()))?
            .with_fsync(true);
        // The canonical root, so a delete's directory is the one `LocalFileSystem` used.
        let canonical = fs
            .path_to_filesystem(&ObjectPath::from("x"))
            .ok()
            .and_then(|p| p.parent().map(FsPath::to_path_buf))
            .ok_or_else(|| fail("cannot resolve the root directory".into()))?;
        Ok(ObjectStoreRemote {
            store: Arc::new(fs),
            runtime,
            describe,
            local_root: Some(canonical),
        })
    }

    /// An S3 bucket or an S3-compatible server. Conditional puts use `If-None-Match: *`
    /// (`object_store`'s default); whether the server honours it is the probe's question.
    pub fn s3(
        settings: &S3Settings,
        runtime: RuntimeHandle,
    ) -> std::result::Result<Self, RemoteBuildError> {
        let describe = match &settings.endpoint {
            Some(e) => format!("s3:{e}/{}", settings.bucket),
            None => format!("s3://{}", settings.bucket),
        };
        // reqwest is built without a TLS provider of its own (Cargo.toml): make ring the
        // process default unless something (the server's TLS) already chose one.
        let _already = rustls::crypto::ring::default_provider().install_default();
        let mut client = ClientOptions::new().with_allow_http(settings.allow_http);
        if let Some(t) = settings.request_timeout {
            client = client.with_timeout(t);
        }
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&settings.bucket)
            .with_region(&settings.region)
            .with_access_key_id(&settings.access_key_id)
            .with_secret_access_key(&settings.secret_access_key)
            .with_virtual_hosted_style_request(settings.virtual_hosted_style)
            .with_client_options(client);
        if let Some(e) = &settings.endpoint {
            builder = builder.with_endpoint(e);
        }
        if let Some(n) = settings.max_retries {
            builder = builder.with_retry(object_store::RetryConfig {
                max_retries: n,
                ..object_store::RetryConfig::default()
            });
        }
        let store = builder.build().map_err(|e| RemoteBuildError {
            store: describe.clone(),
            detail: e.to_string(),
        })?;
        Ok(ObjectStoreRemote::new(Arc::new(store), describe, runtime))
    }

    /// What this remote is, for logs.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    fn block<F: std::future::Future>(&self, fut: F) -> F::Output {
        self.runtime.handle().block_on(fut)
    }

    fn path(key: &RemoteKey) -> ObjectPath {
        // `RemoteKey`'s alphabet makes this lossless (key.rs).
        ObjectPath::from(key.as_str())
    }

    fn traced<T>(
        &self,
        op: RemoteOp,
        key: &RemoteKey,
        started: Instant,
        r: Result<T>,
    ) -> Result<T> {
        let micros = started.elapsed().as_micros() as u64;
        match &r {
            Ok(_) => {
                tracing::debug!(store = %self.describe, op = %op, key = %key, micros, "remote call")
            }
            Err(e) => tracing::warn!(
                store = %self.describe, op = %op, key = %key, micros,
                kind = %e.kind, may_have_applied = e.may_have_applied(), error = %e,
                "remote call failed"
            ),
        }
        r
    }

    /// Makes a local delete durable: syncs the directory that held the object.
    fn sync_local_parent(&self, key: &RemoteKey) -> Result<()> {
        let Some(root) = &self.local_root else {
            return Ok(());
        };
        let file = root.join(key.as_str());
        let Some(dir) = file.parent() else {
            return Ok(());
        };
        match DiskStorage::new().sync_dir(dir) {
            Ok(()) => Ok(()),
            // No directory: nothing was ever there, nothing to persist.
            Err(e) if e.kind == StorageErrorKind::NotFound => Ok(()),
            Err(e) => Err(
                RemoteError::new(RemoteOp::Delete, key, RemoteErrorKind::Other).with_detail(
                    format!("object removed, but its directory sync failed: {e}"),
                ),
            ),
        }
    }
}

/// Maps an `object_store` error to a kind (module docs: `Unavailable` versus `Other` is best
/// effort and changes no decision).
fn classify(op: RemoteOp, e: &object_store::Error) -> RemoteErrorKind {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => RemoteErrorKind::NotFound,
        E::AlreadyExists { .. } => RemoteErrorKind::AlreadyExists,
        // A conditional put refused by a store that answers 412 or 304 to If-None-Match.
        E::Precondition { .. } | E::NotModified { .. } if op == RemoteOp::Put => {
            RemoteErrorKind::AlreadyExists
        }
        E::InvalidPath { .. } => RemoteErrorKind::InvalidRequest,
        E::Generic { source, .. } => classify_source(op, source.as_ref()),
        _ => RemoteErrorKind::Other,
    }
}

fn classify_source(op: RemoteOp, source: &(dyn std::error::Error + 'static)) -> RemoteErrorKind {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(source);
    let mut text = String::new();
    while let Some(e) = cur {
        if let Some(h) = e.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind as K;
            return match h.kind() {
                K::Connect | K::Request | K::Timeout | K::Interrupted => {
                    RemoteErrorKind::Unavailable
                }
                _ => RemoteErrorKind::Other,
            };
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::NotConnected
            )
        {
            return RemoteErrorKind::Unavailable;
        }
        text.push_str(&e.to_string());
        text.push('\n');
        cur = e.source();
    }
    // The retry error's status is not exported; its message carries it.
    // (Keys hold no space or colon, so a key in the message cannot fake these.)
    if op == RemoteOp::Get
        && (text.contains("Wanted range starting at") || text.contains("status code: 416"))
    {
        return RemoteErrorKind::InvalidRequest;
    }
    let server_side = ["status code: 5", "status code: 429", "status code: 408"];
    if server_side.iter().any(|s| text.contains(s)) {
        return RemoteErrorKind::Unavailable;
    }
    RemoteErrorKind::Other
}

fn map_err(op: RemoteOp, key: &RemoteKey, e: object_store::Error) -> RemoteError {
    RemoteError::new(op, key, classify(op, &e)).with_detail(e.to_string())
}

impl RemoteStore for ObjectStoreRemote {
    fn put_new(&self, key: &RemoteKey, data: Bytes) -> Result<()> {
        let started = Instant::now();
        let path = Self::path(key);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let r = self
            .block(
                self.store
                    .put_opts(&path, PutPayload::from_bytes(data), opts),
            )
            .map(|_| ())
            .map_err(|e| map_err(RemoteOp::Put, key, e));
        self.traced(RemoteOp::Put, key, started, r)
    }

    fn get_range(&self, key: &RemoteKey, range: Range<u64>) -> Result<Bytes> {
        check_range(key, &range)?;
        let started = Instant::now();
        let path = Self::path(key);
        let r = self
            .block(self.store.get_range(&path, range))
            .map_err(|e| map_err(RemoteOp::Get, key, e));
        self.traced(RemoteOp::Get, key, started, r)
    }

    fn head(&self, key: &RemoteKey) -> Result<u64> {
        let started = Instant::now();
        let path = Self::path(key);
        let r = self
            .block(self.store.head(&path))
            .map(|meta| meta.size)
            .map_err(|e| map_err(RemoteOp::Head, key, e));
        self.traced(RemoteOp::Head, key, started, r)
    }

    fn delete(&self, key: &RemoteKey) -> Result<()> {
        let started = Instant::now();
        let path = Self::path(key);
        let r = match self.block(self.store.delete(&path)) {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_err(RemoteOp::Delete, key, e)),
        }
        .and_then(|()| self.sync_local_parent(key));
        self.traced(RemoteOp::Delete, key, started, r)
    }

    fn list(&self, prefix: &RemoteKey) -> Result<Vec<ListedObject>> {
        let started = Instant::now();
        let path = Self::path(prefix);
        let found = self.block(self.store.list(Some(&path)).try_collect::<Vec<_>>());
        let r = found
            .map_err(|e| map_err(RemoteOp::List, prefix, e))
            .map(|metas| {
                let mut out: Vec<ListedObject> = metas
                    .into_iter()
                    .filter_map(|m| match RemoteKey::new(m.location.as_ref()) {
                        Ok(key) if key.is_below(prefix) => Some(ListedObject { key, size: m.size }),
                        Ok(key) => {
                            tracing::warn!(store = %self.describe, prefix = %prefix, key = %key,
                                "listing returned a key outside its prefix; ignored");
                            None
                        }
                        Err(why) => {
                            // Not a key sluice writes: logged and left alone (as ADR 0015 treats
                            // names it does not write).
                            tracing::warn!(store = %self.describe, prefix = %prefix,
                                key = %m.location, %why, "object with a key sluice never writes; ignored");
                            None
                        }
                    })
                    .collect();
                out.sort();
                out
            });
        self.traced(RemoteOp::List, prefix, started, r)
    }
}
