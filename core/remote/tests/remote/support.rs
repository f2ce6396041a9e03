//! Fixtures: a local `ObjectStoreRemote` in a temporary directory, and `s3s-fs` (an
//! S3-compatible server over a directory) served in-process on 127.0.0.1 over hyper.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_remote::{ObjectStoreRemote, RemoteKey, RuntimeHandle, S3Settings};
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

pub const BUCKET: &str = "sluice-test";
const ACCESS_KEY: &str = "AKIASLUICETEST";
const SECRET_KEY: &str = "sluice-test-secret";

/// `s3s-fs` on an ephemeral loopback port, on a runtime of its own. Dropping it stops the
/// server (the runtime's drop cancels the accept loop and every connection).
pub struct S3Server {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    _dir: TempDir,
}

impl S3Server {
    pub fn start() -> S3Server {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        use hyper_util::server::conn::auto::Builder as ConnBuilder;
        use s3s::auth::SimpleAuth;
        use s3s::service::S3ServiceBuilder;

        let dir = tempfile::tempdir().unwrap();
        // A bucket of s3s-fs is a directory under its root.
        // Through DiskStorage: only core/storage touches std::fs (tests/tidy.rs rule 2).
        sluice_storage::DiskStorage::new()
            .create_dir_all(&dir.path().join(BUCKET))
            .unwrap();
        let store = s3s_fs::FileSystem::new(dir.path()).unwrap();
        let mut builder = S3ServiceBuilder::new(store);
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
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
            runtime,
            addr,
            _dir: dir,
        }
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
        ObjectStoreRemote::s3(
            &settings,
            RuntimeHandle::Borrowed(self.runtime.handle().clone()),
        )
        .unwrap()
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
