//! The Iggy TCP binary protocol (as the official SDK `iggy = "=0.11.0"`
//! `TcpClient` speaks it) on its own listener, over the same engine as the
//! HTTP API. docs/adr/0011-tcp-transport.md says what is served and what not.
//!
//! Invariants:
//! - One engine, two transports: every request runs the same engine
//!   operations as its HTTP route, through the Iggy layer's
//!   `AppState::engine` (the blocking pool, one engine lock), with the same
//!   validation and error codes (`crate::iggy`); nothing here imports from
//!   the HTTP transport, purges, stores offsets or syncs.
//!   A send is answered only after the engine acknowledged it under the
//!   topic's durability policy, exactly as over HTTP.
//! - Authentication is per connection: until a login succeeds on it, every
//!   command but ping and login answers Iggy's `unauthenticated` (40); a
//!   logout or a new login replaces the connection's session.
//! - Bad input never panics and changes nothing: a frame whose header is
//!   unusable (size below 256 or above `tcp.max_frame_bytes`, not a request,
//!   no client id) closes the connection before its body is read; a
//!   complete frame with an unknown code or a malformed payload is answered
//!   with Iggy's error code and the connection stays usable.
//! - Every connection task ends: at EOF, at an I/O error, after
//!   `tcp.idle_timeout` without a complete frame, or when the server stops.
//!   At most `tcp.max_connections` are open; more are closed on accept.
//! - With `[tcp.tls]` enabled the port speaks only TLS (ADR 0023): the
//!   handshake runs on the connection's task, never in the accept loop, and
//!   is abandoned after `tcp.idle_timeout`; the connection loop is the same
//!   code over either stream (generic, so the plaintext path pays nothing).

mod access;
pub mod codec;
pub mod encode;
pub mod frame;
pub(crate) mod handler;
pub(crate) mod reply;
pub(crate) mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::iggy::AppState;
use frame::{FrameError, HEADER_SIZE, RequestHeader};

/// Settings of the listener (from `config::TcpConfig`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TcpLimits {
    pub(crate) max_frame_bytes: usize,
    pub(crate) max_connections: usize,
    pub(crate) idle_timeout: Duration,
}

/// Session ids handed out by logins, unique for the process (never 0).
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_session() -> u64 {
    NEXT_SESSION.fetch_add(1, Ordering::Relaxed).max(1)
}

/// Accepts connections until `stop` says so, then waits for every
/// connection task to end. With `tls`, every connection is a TLS one.
pub(crate) async fn serve(
    listener: TcpListener,
    state: AppState,
    limits: TcpLimits,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let mut stopping = stop.clone();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped(&mut stopping) => break,
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a TCP connection failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, max = limits.max_connections, "too many TCP connections; closing the new one");
                    drop(socket);
                    continue;
                };
                let state = state.clone();
                let stop = stop.clone();
                let tls = tls.clone();
                tasks.spawn(async move {
                    // The entry is removed when the guard drops, however the task ends.
                    let client = state.info.tcp_clients.register(peer.to_string());
                    let id = client.id();
                    // On a task of its own, so that even a panic while
                    // serving it ends here, as an error, and not past the
                    // membership clean-up below.
                    let served = state.clone();
                    let outcome = tokio::spawn(async move {
                        accepted_connection(socket, tls, &served, limits, stop, id).await
                    })
                    .await;
                    // Membership ends with the connection, as in Iggy: its
                    // groups rebalance before its id can be given out again.
                    handler::leave_all_groups(&state, id).await;
                    // The slot is free before the client leaves the list:
                    // whoever sees the list without it can connect again.
                    drop(permit);
                    drop(client);
                    match outcome {
                        Ok(Ok(())) => {}
                        Ok(Err(reason)) => tracing::debug!(%peer, %reason, "TCP connection closed"),
                        Err(e) => tracing::error!(%peer, error = %e, "a TCP connection's task failed; its memberships were ended"),
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tracing::info!("TCP listener stopped; finishing open connections");
    while tasks.join_next().await.is_some() {}
}

/// Resolves once the server is told to stop (or every sender is gone); the
/// watch guard is dropped inside, so callers' futures stay `Send`.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Why a connection ended early (logged at debug, never sent).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionEnd {
    #[error("idle for longer than the timeout")]
    Idle,
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    #[error("server stopping")]
    Stopping,
    #[error("TLS handshake: {0}")]
    Handshake(std::io::Error),
}

/// An accepted socket: its TLS handshake if the listener has TLS, then the
/// connection loop over the plaintext or the TLS stream.
async fn accepted_connection(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    state: &AppState,
    limits: TcpLimits,
    mut stop: watch::Receiver<bool>,
    client_id: u32,
) -> Result<(), ConnectionEnd> {
    let _ = socket.set_nodelay(true);
    let Some(acceptor) = tls else {
        return connection(socket, state, limits, stop, client_id).await;
    };
    let handshake = crate::tls::handshake(&acceptor, socket, limits.idle_timeout);
    let stream = tokio::select! {
        _ = stopped(&mut stop) => return Err(ConnectionEnd::Stopping),
        done = handshake => done.map_err(ConnectionEnd::Handshake)?,
    };
    connection(stream, state, limits, stop, client_id).await
}

async fn read_exact_or_idle<S: AsyncRead + Unpin>(
    socket: &mut S,
    buf: &mut [u8],
    idle: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, ConnectionEnd> {
    tokio::select! {
        _ = stopped(stop) => Err(ConnectionEnd::Stopping),
        read = tokio::time::timeout(idle, socket.read_exact(buf)) => match read {
            Err(_) => Err(ConnectionEnd::Idle),
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Ok(Err(e)) => Err(e.into()),
        },
    }
}

/// The first step a body buffer grows by (then by what it holds).
const BODY_GROWTH: usize = 64 << 10;

/// Reads exactly `len` body bytes into `buf` (empty on entry) and answers
/// them as one shared buffer: a send's payloads are views of it, written to
/// the log from there (no copy per message). The buffer grows with what
/// arrives, so a header announcing a large body costs memory only once the
/// bytes come; once every view of a body is dropped, the next body reuses
/// its allocation (`BytesMut::reserve` reclaims it). `None` at EOF.
async fn read_body<S: AsyncRead + Unpin>(
    socket: &mut S,
    buf: &mut BytesMut,
    len: usize,
    idle: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Bytes>, ConnectionEnd> {
    debug_assert!(buf.is_empty(), "a body buffer starts empty");
    let fill = async {
        while buf.len() < len {
            let remaining = len - buf.len();
            if buf.capacity() == buf.len() {
                buf.reserve(remaining.min(buf.len().max(BODY_GROWTH)));
            }
            let room = (buf.capacity() - buf.len()).min(remaining);
            let mut limited = (&mut *socket).take(room as u64);
            if limited.read_buf(buf).await? == 0 {
                return Ok(false);
            }
        }
        Ok::<bool, std::io::Error>(true)
    };
    tokio::select! {
        _ = stopped(stop) => Err(ConnectionEnd::Stopping),
        read = tokio::time::timeout(idle, fill) => match read {
            Err(_) => Err(ConnectionEnd::Idle),
            Ok(Ok(true)) => Ok(Some(buf.split_to(len).freeze())),
            Ok(Ok(false)) => Ok(None),
            Ok(Err(e)) => Err(e.into()),
        },
    }
}

/// One client connection: read a frame, answer it, repeat.
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut socket: S,
    state: &AppState,
    limits: TcpLimits,
    mut stop: watch::Receiver<bool>,
    client_id: u32,
) -> Result<(), ConnectionEnd> {
    let mut session = handler::Session::new(client_id);
    let mut header_buf = [0u8; HEADER_SIZE];
    let mut buf = BytesMut::new();
    loop {
        if !read_exact_or_idle(&mut socket, &mut header_buf, limits.idle_timeout, &mut stop).await?
        {
            return Ok(());
        }
        let header = RequestHeader::parse(&header_buf, limits.max_frame_bytes)?;
        let Some(body) = read_body(
            &mut socket,
            &mut buf,
            header.body_len(),
            limits.idle_timeout,
            &mut stop,
        )
        .await?
        else {
            return Ok(());
        };
        let reply = handler::handle(state, &mut session, &header, &body).await;
        write_all_vectored(&mut socket, &mut reply.slices()).await?;
        // A no-op on a plain socket; TLS may still hold the reply's last
        // records.
        socket.flush().await?;
    }
}

/// Writes every slice, however many `writev` calls it takes (the kernel
/// takes at most `IOV_MAX` slices, and maybe not all their bytes, per call).
async fn write_all_vectored<S: AsyncWrite + Unpin>(
    socket: &mut S,
    mut slices: &mut [std::io::IoSlice<'_>],
) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = socket.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// Binds the listener (before anything is served, so a taken port fails
/// start-up).
pub(crate) async fn bind(address: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[tokio::test]
    async fn given_bodies_in_a_row_when_read_then_each_is_whole_and_the_buffer_is_reused() {
        // Given two 1 MiB bodies and a short one on one stream,
        let (a, b, c) = (pattern(1 << 20, 1), pattern(1 << 20, 2), pattern(300, 3));
        let mut stream = std::io::Cursor::new([a.clone(), b.clone(), c.clone()].concat());
        let (_tx, mut stop) = watch::channel(false);
        let idle = Duration::from_secs(5);
        let mut buf = BytesMut::new();
        // when each is read in turn, the first view dropped before the next,
        let first = read_body(&mut stream, &mut buf, a.len(), idle, &mut stop)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first[..], a[..]);
        let at = first.as_ptr();
        drop(first);
        let second = read_body(&mut stream, &mut buf, b.len(), idle, &mut stop)
            .await
            .unwrap()
            .unwrap();
        // then each body is exactly its bytes, and the second reused the
        // first one's allocation (no copy, no new buffer per request),
        assert_eq!(second[..], b[..]);
        assert_eq!(second.as_ptr(), at);
        // while a view still held keeps its bytes when the next body arrives.
        let third = read_body(&mut stream, &mut buf, c.len(), idle, &mut stop)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&second[..], &third[..]), (&b[..], &c[..]));
        // A body cut short by EOF is no body.
        assert!(
            read_body(&mut stream, &mut buf, 10, idle, &mut stop)
                .await
                .unwrap()
                .is_none()
        );
    }
}
