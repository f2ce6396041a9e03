//! Remote-store fixtures (formerly `core/remote/tests/remote/support.rs`): a local
//! `ObjectStoreRemote` in a temporary directory, and `s3s-fs` (an S3-compatible server over a
//! directory) served in-process on 127.0.0.1 over hyper (ADR 0026 §6), honest or, with
//! [`S3Server::start_ignoring_conditional_creates`], a double that overwrites on a create-only
//! put as garage does. Used by `sluice-remote`'s tests and the integration suites alike.
//!
//! Invariant: every call through [`S3Server::remote`] blocks on the server's own runtime, so
//! it must come from a thread that is not an async worker; [`S3Server::keys`] makes its
//! listing on a thread of its own and may be called from anywhere.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_remote::{ObjectStoreRemote, RemoteKey, RemoteStore, RuntimeHandle, S3Settings};
use sluice_storage::DurableStorage;
use tempfile::TempDir;

pub fn key(s: &str) -> RemoteKey {
    RemoteKey::new(s).unwrap()
}

/// A local-file-system remote and the directory it lives in.
pub fn local() -> (ObjectStoreRemote, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let remote =
        ObjectStoreRemote::local(&dir.path().join("objects"), RuntimeHandle::owned().unwrap())
            .unwrap();
    (remote, dir)
}

/// The one bucket every [`S3Server`] has, created before it serves.
pub const BUCKET: &str = "sluice-test";
/// The server's credentials (`SimpleAuth`: one key pair).
pub const ACCESS_KEY: &str = "AKIASLUICETEST";
pub const SECRET_KEY: &str = "sluice-test-secret";

/// `s3s-fs` on an ephemeral loopback port, on a runtime of its own. Dropping it stops the
/// server (the runtime's drop cancels the accept loop and every connection).
pub struct S3Server {
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    dir: TempDir,
}

/// `s3s-fs` with `If-None-Match` dropped from every `PutObject`: a create-only put of a key
/// that exists overwrites it, as garage (and some other S3-compatible servers) do. Every other
/// call the tiering makes (get, head, delete, which object_store sends as a bulk
/// `DeleteObjects`, and list) is `s3s-fs`'s own.
struct IgnoresConditionalCreates(s3s_fs::FileSystem);

#[async_trait::async_trait]
impl s3s::S3 for IgnoresConditionalCreates {
    async fn put_object(
        &self,
        mut req: s3s::S3Request<s3s::dto::PutObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::PutObjectOutput>> {
        req.input.if_none_match = None;
        self.0.put_object(req).await
    }

    async fn get_object(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectOutput>> {
        self.0.get_object(req).await
    }

    async fn head_object(
        &self,
        req: s3s::S3Request<s3s::dto::HeadObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::HeadObjectOutput>> {
        self.0.head_object(req).await
    }

    async fn delete_object(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteObjectOutput>> {
        self.0.delete_object(req).await
    }

    async fn delete_objects(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteObjectsOutput>> {
        self.0.delete_objects(req).await
    }

    async fn list_objects_v2(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsV2Input>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListObjectsV2Output>> {
        self.0.list_objects_v2(req).await
    }
}

impl S3Server {
    /// `s3s-fs` as it is: it honours `If-None-Match: *` (ADR 0026 §6).
    pub fn start() -> S3Server {
        S3Server::serve(false)
    }

    /// The double that overwrites on a create-only put (see [`IgnoresConditionalCreates`]).
    pub fn start_ignoring_conditional_creates() -> S3Server {
        S3Server::serve(true)
    }

    fn serve(ignore_conditional_creates: bool) -> S3Server {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        use hyper_util::server::conn::auto::Builder as ConnBuilder;
        use s3s::auth::SimpleAuth;
        use s3s::service::S3ServiceBuilder;

        let dir = tempfile::tempdir().unwrap();
        // A bucket of s3s-fs is a directory under its root.
        sluice_storage::DiskStorage::new()
            .create_dir_all(&dir.path().join(BUCKET))
            .unwrap();
        let store = s3s_fs::FileSystem::new(dir.path()).unwrap();
        let mut builder = if ignore_conditional_creates {
            S3ServiceBuilder::new(IgnoresConditionalCreates(store))
        } else {
            S3ServiceBuilder::new(store)
        };
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // Bound without blocking on the runtime, so an async test can start one.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let http = ConnBuilder::new(TokioExecutor::new());
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        });
        S3Server {
            runtime: Some(runtime),
            addr,
            dir,
        }
    }

    fn handle(&self) -> tokio::runtime::Handle {
        self.runtime.as_ref().unwrap().handle().clone()
    }

    /// The directory `s3s-fs` serves (the bucket is its subdirectory [`BUCKET`]).
    pub fn root(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Every key under `prefix`, sorted, as the server lists them over S3 (on a thread of its
    /// own, so callable from an async test).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let remote = self.remote();
        let prefix = key(prefix);
        let mut keys: Vec<String> = std::thread::scope(|s| {
            s.spawn(|| remote.list(&prefix).unwrap())
                .join()
                .unwrap()
                .into_iter()
                .map(|o| o.key.as_str().to_string())
                .collect()
        });
        keys.sort();
        keys
    }

    /// The `[tiering]` lines naming this server as the store (`store = "s3"`, plain http).
    pub fn tiering_store_toml(&self) -> String {
        format!(
            "store = \"s3\"\nbucket = \"{BUCKET}\"\nregion = \"us-east-1\"\nendpoint = \"{}\"\naccess_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{SECRET_KEY}\"\nallow_http = true\n",
            self.endpoint()
        )
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `ObjectStoreRemote` pointed at it: path style, plain http, the server's credentials,
    /// blocking on the server's runtime (from the test's own thread, never a worker).
    pub fn remote(&self) -> ObjectStoreRemote {
        let settings = S3Settings {
            bucket: BUCKET.into(),
            region: "us-east-1".into(),
            endpoint: Some(format!("http://{}", self.addr)),
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            allow_http: true,
            virtual_hosted_style: false,
            request_timeout: Some(Duration::from_secs(10)),
            max_retries: None,
        };
        ObjectStoreRemote::s3(&settings, RuntimeHandle::Borrowed(self.handle())).unwrap()
    }
}

impl Drop for S3Server {
    /// Stops the server without waiting for its tasks, so it may be dropped inside an async
    /// test as well as outside one.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A remote pointed at `addr` with no retries and a short timeout (for the error tests).
pub fn s3_remote_at(addr: SocketAddr) -> ObjectStoreRemote {
    let settings = S3Settings {
        bucket: BUCKET.into(),
        region: "us-east-1".into(),
        endpoint: Some(format!("http://{addr}")),
        access_key_id: ACCESS_KEY.into(),
        secret_access_key: SECRET_KEY.into(),
        allow_http: true,
        virtual_hosted_style: false,
        request_timeout: Some(Duration::from_millis(300)),
        max_retries: Some(0),
    };
    ObjectStoreRemote::s3(&settings, RuntimeHandle::owned().unwrap()).unwrap()
}
