//! The state both transports share: the engine behind its lock, the
//! credentials and sessions, the request limits, and what the server knows
//! about itself (start time, open TCP clients, bound listeners).
//!
//! Invariants:
//! - The engine is single-threaded and its storage synchronous (ADR 0001,
//!   ADR 0002): it sits behind one `std::sync::Mutex`, and every engine call
//!   runs on tokio's blocking pool (`AppState::engine`), never on an async
//!   worker. A call that started runs to completion even if the client goes
//!   away, so no request is ever half-applied by a cancelled future.
//! - If an engine call ever panics, the mutex is poisoned and every later
//!   engine request is refused with an internal error until restart: memory
//!   may no longer match the durable state, and recovery is the only trusted
//!   way back.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use super::clients::ClientRegistry;
use super::error::{ApiError, ApiResult};
use super::stats::Listeners;
use crate::auth::Auth;
use crate::engine::Engine;

/// Request limits and settings the handlers need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_body_bytes: usize,
    pub(crate) max_poll_count: u32,
    pub(crate) reconciler_period: Duration,
}

impl Limits {
    /// How many messages a poll asking for `count` is served at most. Iggy
    /// has no cap; sluice serves at most `max_poll_count` (a poll may always
    /// answer fewer than asked, and clients poll again from where it ended),
    /// so one request cannot make the server hold an unbounded answer, and
    /// a client asking for more still works. 0 stays 0: Iggy's empty poll.
    pub(crate) fn poll_count(&self, count: u32) -> u32 {
        count.min(self.max_poll_count)
    }
}

/// What the server knows about itself, for `/stats` and the cluster metadata
/// (shared by both transports).
#[derive(Debug, Default)]
pub struct ServerInfo {
    pub(crate) started: Option<SystemTime>,
    /// Open TCP connections (Iggy's clients).
    pub tcp_clients: Arc<ClientRegistry>,
    /// Where the listeners are bound (set once both are).
    pub(crate) listeners: OnceLock<Listeners>,
}

impl ServerInfo {
    pub(crate) fn new() -> Self {
        ServerInfo {
            started: Some(SystemTime::now()),
            ..ServerInfo::default()
        }
    }

    pub(crate) fn listeners(&self) -> Listeners {
        self.listeners.get().copied().unwrap_or_default()
    }
}

/// Shared by every handler of both transports.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) engine: Arc<Mutex<Engine>>,
    pub(crate) auth: Arc<Auth>,
    pub(crate) limits: Limits,
    pub info: Arc<ServerInfo>,
}

impl AppState {
    /// Runs `f` with the engine on the blocking pool.
    pub(crate) async fn engine<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Engine) -> ApiResult<T> + Send + 'static,
    {
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = engine.lock().map_err(|_| {
                ApiError::internal(
                    "the engine failed during an earlier request and refuses service until restart",
                )
            })?;
            f(&mut guard)
        })
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "engine task failed");
            ApiError::internal("the engine task failed")
        })?
    }
}
