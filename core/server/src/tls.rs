//! TLS on the Iggy TCP listener and on HTTP (docs/adr/0023-tls.md): the
//! certificate chain and key named by `[tcp.tls]` / `[http.tls]`, rustls with
//! the `ring` provider, the handshake with its timeout, and the HTTPS listener
//! that hands axum only connections whose handshake completed.
//!
//! Invariants:
//! - A listener with TLS enabled speaks only TLS on its port, as Iggy's do;
//!   a plaintext client's first bytes fail the handshake and close its
//!   connection, nothing else.
//! - The files are read once, at start-up, through `DurableStorage` (like the
//!   configuration file); a missing, unreadable or invalid one is a
//!   [`TlsError`] naming the setting and the path, before anything is served.
//!   No error, `Debug` output or log line carries a byte of the key: key
//!   errors are fixed sentences, never the parser's text.
//! - A handshake runs on a task of its own, never in an accept loop, and is
//!   abandoned after its timeout.
//! - The crypto provider is chosen here (`ring`), never taken from the
//!   process default, so the server behaves the same in the shipped binary
//!   (where only `ring` is compiled) and in the tests (where the SDK also
//!   compiles `aws-lc-rs` and installs it as the process default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sluice_storage::DurableStorage;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsSettings;

/// The one ALPN protocol HTTPS offers: axum is built with HTTP/1 only.
pub(crate) const HTTP_ALPN: &[&[u8]] = &[b"http/1.1"];

/// How long an HTTPS client may take to complete its handshake. The TCP
/// listener uses its idle timeout (`tcp.idle_timeout_secs`); HTTP has no
/// idle setting, and a browser or SDK completes a handshake in milliseconds.
pub(crate) const HTTP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress on the HTTPS listener at most; beyond it, the
/// listener stops accepting until one completes or times out.
const MAX_PENDING_HTTP_HANDSHAKES: usize = 1024;

/// Why a listener's TLS could not be set up. `listener` is `tcp` or `http`,
/// so every message names the setting to fix (`tcp.tls.cert_file`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("{listener}.tls.enabled is true but {listener}.tls.{key} is not set")]
    NotSet {
        listener: &'static str,
        key: &'static str,
    },
    #[error("{listener}.tls.{key} {}: cannot read it: {reason}", path.display())]
    Read {
        listener: &'static str,
        key: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{listener}.tls.cert_file {}: {reason}", path.display())]
    Certificate {
        listener: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// `reason` is one of this module's sentences, never the parser's text.
    #[error("{listener}.tls.key_file {}: {reason}", path.display())]
    Key {
        listener: &'static str,
        path: PathBuf,
        reason: &'static str,
    },
    #[error(
        "{listener}.tls: the certificate {} and the key {} cannot be used together: {reason}",
        cert.display(),
        key.display()
    )]
    Unusable {
        listener: &'static str,
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// The acceptor of one listener, or `None` when its TLS is off. `listener`
/// names it in errors (`tcp`, `http`); `alpn` is what it offers.
pub(crate) fn acceptor(
    storage: &dyn DurableStorage,
    listener: &'static str,
    settings: &TlsSettings,
    alpn: &[&[u8]],
) -> Result<Option<TlsAcceptor>, TlsError> {
    if !settings.enabled {
        return Ok(None);
    }
    let certs = read_certificates(storage, listener, &settings.cert_file)?;
    let key = read_key(storage, listener, &settings.key_file)?;
    let unusable = |e: rustls::Error| TlsError::Unusable {
        listener,
        cert: settings.cert_file.clone(),
        key: settings.key_file.clone(),
        reason: e.to_string(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(unusable)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(unusable)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tracing::info!(
        listener,
        cert_file = %settings.cert_file.display(),
        key_file = %settings.key_file.display(),
        "TLS enabled"
    );
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

fn read(
    storage: &dyn DurableStorage,
    listener: &'static str,
    key: &'static str,
    path: &Path,
) -> Result<Vec<u8>, TlsError> {
    if path.as_os_str().is_empty() {
        return Err(TlsError::NotSet { listener, key });
    }
    storage.read_file(path).map_err(|e| TlsError::Read {
        listener,
        key,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn read_certificates(
    storage: &dyn DurableStorage,
    listener: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(storage, listener, "cert_file", path)?;
    let invalid = |reason: String| TlsError::Certificate {
        listener,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not a PEM certificate chain ({e})")))?;
    if certs.is_empty() {
        return Err(invalid(
            "no certificate in it (a PEM `CERTIFICATE` block)".into(),
        ));
    }
    Ok(certs)
}

fn read_key(
    storage: &dyn DurableStorage,
    listener: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(storage, listener, "key_file", path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Key {
        listener,
        path: path.to_path_buf(),
        // The parser's messages may quote the file's lines: never show them.
        reason: match e {
            pem::Error::NoItemsFound => {
                "no private key in it (a PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)"
            }
            _ => "not a valid PEM private key",
        },
    })
}

/// The server side of a handshake, abandoned after `timeout`.
pub(crate) async fn handshake<S>(
    acceptor: &TlsAcceptor,
    stream: S,
    timeout: Duration,
) -> std::io::Result<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(timeout, acceptor.accept(stream))
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            ))
        })
}

/// The HTTPS listener axum serves from: it accepts TCP connections, runs each
/// handshake on a task of its own and yields the connections whose handshake
/// completed. Dropping it (axum does when it stops accepting) abandons the
/// handshakes in progress.
pub(crate) struct HttpsListener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl HttpsListener {
    pub(crate) fn new(listener: TcpListener, acceptor: TlsAcceptor) -> Self {
        HttpsListener {
            listener,
            acceptor,
            handshakes: JoinSet::new(),
        }
    }

    fn start_handshake(&mut self, socket: TcpStream, peer: SocketAddr) {
        let acceptor = self.acceptor.clone();
        self.handshakes.spawn(async move {
            match handshake(&acceptor, socket, HTTP_HANDSHAKE_TIMEOUT).await {
                Ok(stream) => Some((stream, peer)),
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "HTTPS handshake failed");
                    None
                }
            }
        });
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    /// Cancel-safe (axum drops it when told to stop): a connection accepted
    /// is handed to its handshake task within the same poll.
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let room = self.handshakes.len() < MAX_PENDING_HTTP_HANDSHAKES;
            tokio::select! {
                accepted = self.listener.accept(), if room => match accepted {
                    Ok((socket, peer)) => self.start_handshake(socket, peer),
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting an HTTPS connection failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    match done {
                        Ok(Some(connection)) => return connection,
                        Ok(None) => {}
                        Err(e) => tracing::error!(error = %e, "an HTTPS handshake task failed"),
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// Installs `ring` as the process's default rustls crypto provider, unless
/// one is installed already. `object_store`'s HTTP client (ADR 0026 §1) is
/// built without a provider of its own, and Cargo unifies that feature into
/// every `reqwest` client of the binary (`sluice status`, `bench`, `soak`):
/// without a default provider, building any of them panics. The `sluice`
/// binary calls this first thing.
pub fn install_default_crypto_provider() {
    // `Err` means one is installed already: nothing to do.
    let _already = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::{OpenMode, SimStorage};

    fn write(storage: &SimStorage, path: &str, bytes: &[u8]) {
        let f = storage
            .open(Path::new(path), OpenMode::CreateNew)
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
        f.write_at(0, bytes)
            .unwrap_or_else(|e| panic!("write {path}: {e}"));
    }

    fn settings(cert: &str, key: &str) -> TlsSettings {
        TlsSettings {
            enabled: true,
            cert_file: PathBuf::from(cert),
            key_file: PathBuf::from(key),
        }
    }

    fn error(storage: &SimStorage, tls: &TlsSettings) -> String {
        match acceptor(storage, "tcp", tls, &[]) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn given_tls_off_when_setting_up_then_no_file_is_read() {
        let storage = SimStorage::default();
        let off = TlsSettings {
            enabled: false,
            ..settings("/missing.pem", "/missing.pem")
        };
        assert!(matches!(
            acceptor(&storage, "http", &off, HTTP_ALPN),
            Ok(None)
        ));
    }

    #[test]
    fn given_bad_files_when_setting_up_then_the_error_names_the_setting_and_path() {
        // Given a certificate file with no certificate, an empty file, and a
        // key file whose contents look secret but are not a PEM key.
        let storage = SimStorage::default();
        write(&storage, "/cert.pem", b"not a certificate");
        write(
            &storage,
            "/key.pem",
            b"-----BEGIN PRIVATE KEY-----\nSECRET\n",
        );
        write(&storage, "/empty.pem", b"");

        // When each is configured, then the error names the setting and path.
        for (cert, expected) in [
            (
                "/nope.pem",
                ["tcp.tls.cert_file /nope.pem", "cannot read it"],
            ),
            (
                "",
                ["tcp.tls.cert_file is not set", "tcp.tls.enabled is true"],
            ),
            (
                "/cert.pem",
                ["tcp.tls.cert_file /cert.pem", "no certificate"],
            ),
            (
                "/empty.pem",
                ["tcp.tls.cert_file /empty.pem", "no certificate"],
            ),
        ] {
            let err = error(&storage, &settings(cert, "/key.pem"));
            assert!(expected.iter().all(|e| err.contains(e)), "{err}");
        }

        // And a bad key's error, message and Debug alike, quotes none of it.
        let bad_key = read_key(&storage, "http", Path::new("/key.pem"))
            .err()
            .map(|e| format!("{e} {e:?}"))
            .unwrap_or_default();
        assert!(bad_key.contains("http.tls.key_file /key.pem"), "{bad_key}");
        assert!(!bad_key.contains("SECRET"), "{bad_key}");
    }
}
