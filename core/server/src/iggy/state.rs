//! The state both transports share: the engine behind its lock, the
//! credentials and sessions, the request limits, and what the server knows
//! about itself (start time, open TCP clients, bound listeners).
//!
//! Invariants:
//! - The engine is single-threaded and its storage synchronous (ADR 0001,
//!   ADR 0002): it sits behind one `std::sync::Mutex`, and no async worker
//!   ever waits for that lock or for a sync. An engine call runs on tokio's
//!   blocking pool (`AppState::engine`), except a data-path call that the
//!   engine says waits on no sync (`Engine::waits_on_no_sync`: a `buffered`
//!   send, a poll, a `buffered` offset store) while the lock is free at once
//!   (`try_lock`): that one runs on the connection's own worker
//!   (`AppState::engine_quick`), which saves two thread hand-offs per request
//!   (docs/performance.md, "Issue 30"). Such a call writes into the page
//!   cache and reads, as the blocking pool would have done for it. A send
//!   that may sync joins the send queue on the blocking pool instead
//!   (`AppState::send`, `iggy/sends.rs`, ADR 0030).
//! - A call that started runs to completion even if the client goes away, so
//!   no request is ever half-applied by a cancelled future: on the blocking
//!   pool because the task is not cancelled, on the worker because the call
//!   has no await point.
//! - If an engine call ever panics, the mutex is poisoned and every later
//!   engine request is refused with an internal error until restart: memory
//!   may no longer match the durable state, and recovery is the only trusted
//!   way back.

use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::time::{Duration, SystemTime};

use super::clients::ClientRegistry;
use super::error::{ApiError, ApiResult};
use super::sends::{self, SendQueue};
use super::stats::Listeners;
use crate::auth::Auth;
use crate::engine::{DataWrite, Engine, SendRequest, Sent};

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
    /// Sends that may sync, waiting on the blocking pool for one leader to
    /// take them into one engine call (`iggy/sends.rs`).
    pub(crate) sends: Arc<SendQueue>,
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
        on_blocking_pool(move || {
            let mut guard = engine.lock().map_err(|_| ApiError::engine_failed())?;
            f(&mut guard)
        })
        .await
    }

    /// Runs `f(engine, args)` on the calling worker if the lock is free and
    /// `waits_on_no_sync(engine, &args)` holds (the call waits on no sync);
    /// otherwise as [`AppState::engine`], which reports a poisoned lock.
    /// `args` is what both need (the identifiers the check resolves).
    ///
    /// A lock held by another call is tried again after yielding the worker
    /// to its other tasks, up to `BUSY_YIELDS` times, before the call goes to
    /// the blocking pool: under eight producers the lock was taken at the
    /// first try by half the sends, and each of those crossed to a blocking
    /// thread and back (docs/performance.md, issue 30). The lock itself is
    /// never waited for on a worker.
    pub(crate) async fn engine_quick<A, T, Q, F>(
        &self,
        args: A,
        waits_on_no_sync: Q,
        f: F,
    ) -> ApiResult<T>
    where
        A: Send + 'static,
        T: Send + 'static,
        Q: Fn(&Engine, &A) -> bool + Send,
        F: FnOnce(&mut Engine, A) -> ApiResult<T> + Send + 'static,
    {
        match self.try_quick(args, waits_on_no_sync, f, BUSY_YIELDS).await {
            Ok(out) => out,
            Err(Slow::MaySync(args, f) | Slow::Busy(args, f)) => {
                self.engine(move |e| f(e, args)).await
            }
        }
    }

    /// A send: as [`AppState::engine_quick`] when it waits on no sync;
    /// otherwise (it syncs) combined on the blocking pool with the other
    /// sends waiting there (`iggy/sends.rs`, ADR 0030). A send that found
    /// the lock held through every yield cannot ask the engine whether it
    /// syncs: it joins the queue if its topic's last send synced
    /// (`SendQueue::last_synced`), and goes to the blocking pool alone
    /// otherwise. (Combining `buffered` sends held the lock longer for no
    /// gain: 10-message batches measured 5 to 10% slower; sending every
    /// busy send alone left most `persisted` ones uncombined, since they
    /// arrive while the leader holds the lock: 10 to 20% slower.)
    pub(crate) async fn send(&self, request: SendRequest) -> ApiResult<Sent> {
        let quick = |e: &Engine, r: &SendRequest| {
            e.waits_on_no_sync(&r.stream, &r.topic, DataWrite::Messages)
        };
        let alone = |e: &mut Engine, r: SendRequest| Ok(e.send_request(r)?);
        let topic = (request.stream.clone(), request.topic.clone());
        // A busy lock is waited for on the worker only by a send that will
        // likely not sync: a syncing send's leader holds it for a sync, and
        // the queue is where the send will end up anyway.
        let likely_syncs = self.sends.last_synced(&topic);
        let busy_tries = if likely_syncs { 1 } else { BUSY_YIELDS };
        let sent = match self.try_quick(request, quick, alone, busy_tries).await {
            Ok(out) => out,
            Err(Slow::Busy(request, alone)) if !likely_syncs => {
                self.engine(move |e| alone(e, request)).await
            }
            Err(Slow::MaySync(request, _) | Slow::Busy(request, _)) => {
                let (engine, queue) = (self.engine.clone(), self.sends.clone());
                on_blocking_pool(move || sends::send_combined(&engine, &queue, request)).await
            }
        };
        if let Ok(sent) = &sent {
            self.sends
                .note_synced(topic, sent.durability.is_persisted());
        }
        sent
    }

    /// `f(engine, args)` on the calling worker if it waits on no sync and
    /// the lock is free, tried up to `tries` times (yielding between tries)
    /// while the lock is held; `Err` hands `f` and `args` back, not run,
    /// for the blocking pool (which reports a poisoned lock).
    async fn try_quick<A, T, Q, F>(
        &self,
        args: A,
        waits_on_no_sync: Q,
        f: F,
        tries: usize,
    ) -> Result<ApiResult<T>, Slow<A, F>>
    where
        Q: Fn(&Engine, &A) -> bool,
        F: FnOnce(&mut Engine, A) -> ApiResult<T>,
    {
        let (mut args, mut f) = (args, f);
        for try_number in 1..=tries.max(1) {
            match run_if_free(&self.engine, args, &waits_on_no_sync, f) {
                Quick::Ran(out) => return Ok(out),
                Quick::Deferred(a, g) => return Err(Slow::MaySync(a, g)),
                Quick::Busy(a, g) => {
                    (args, f) = (a, g);
                    if try_number < tries {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
        Err(Slow::Busy(args, f))
    }
}

/// Why a call did not run on its worker: `f` and its arguments, not run.
enum Slow<A, F> {
    /// It may sync (or the lock is poisoned).
    MaySync(A, F),
    /// The lock stayed held through every yield.
    Busy(A, F),
}

/// Runs `f` on tokio's blocking pool; a task that failed (panicked) is an
/// internal error.
async fn on_blocking_pool<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!(error = %e, "engine task failed");
        ApiError::internal("the engine task failed")
    })?
}

/// How many times a quick call finds the engine lock held, yielding between
/// tries, before it goes to the blocking pool. A `buffered` append of a
/// 10-message batch holds the lock for tens of microseconds; four tries
/// (the first value) often ran out within one such hold, and the hop to a
/// blocking thread and back (two futex wake-ups) cost more than the append.
/// Sixty-four, measured at 10 messages per batch (docs/performance.md
/// "Issue 30, fifth session"): alone, 14% less server CPU at the same
/// throughput (eleven paired runs); with a syncing topic's send trying once
/// (`AppState::send`), about 30% less CPU and 170 to 219 MB/s on average
/// (four pairs, 156 to 268 MB/s); nothing measurable at 1,000 per batch.
/// Each try yields to the worker's other tasks first, so the wait does
/// their work meanwhile; with none ready it spins, at most 63 yields
/// (tens of microseconds) before the blocking pool.
const BUSY_YIELDS: usize = 64;

/// What [`run_if_free`] did.
enum Quick<T, A, F> {
    /// `f` ran on this thread and answered this.
    Ran(T),
    /// The lock was held by another call: `f` and its arguments, not run.
    Busy(A, F),
    /// The lock is poisoned, or the call may sync: `f` and its arguments,
    /// not run, for the blocking path.
    Deferred(A, F),
}

/// Runs `f(guarded, args)` on this thread, under the lock, only if the lock
/// is free at once and `quick(guarded, &args)` holds; never waits for the
/// lock.
fn run_if_free<E, A, T, Q, F>(lock: &Mutex<E>, args: A, quick: &Q, f: F) -> Quick<T, A, F>
where
    Q: Fn(&E, &A) -> bool,
    F: FnOnce(&mut E, A) -> T,
{
    match lock.try_lock() {
        Ok(mut guard) if quick(&guard, &args) => Quick::Ran(f(&mut guard, args)),
        Ok(_) | Err(TryLockError::Poisoned(_)) => Quick::Deferred(args, f),
        Err(TryLockError::WouldBlock) => Quick::Busy(args, f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_call_runs_here_when_the_lock_is_free() {
        // given a free lock and a call that waits on no sync
        let lock = Mutex::new(1u32);
        // when it is offered
        let out = run_if_free(&lock, 1, &|_: &u32, _: &u32| true, |v: &mut u32, by| {
            *v += by;
            *v
        });
        // then it ran here, under the lock
        assert!(matches!(out, Quick::Ran(2)));
        assert_eq!(*lock.lock().unwrap(), 2);
    }

    #[test]
    fn a_call_that_may_sync_is_handed_back_unrun() {
        let lock = Mutex::new(1u32);
        let out = run_if_free(&lock, 1, &|_: &u32, _: &u32| false, |v: &mut u32, by| {
            *v += by
        });
        assert!(matches!(out, Quick::Deferred(1, _)));
        assert_eq!(*lock.lock().unwrap(), 1, "the call must not have run");
    }

    #[test]
    fn a_taken_lock_is_never_waited_for() {
        // given the lock held elsewhere
        let lock = Mutex::new(1u32);
        let held = lock.lock().unwrap();
        // when a quick call is offered, then it comes back unrun at once, as busy
        let out = run_if_free(&lock, 1, &|_: &u32, _: &u32| true, |v: &mut u32, by| {
            *v += by
        });
        assert!(matches!(out, Quick::Busy(1, _)));
        drop(held);
        assert_eq!(*lock.lock().unwrap(), 1);
    }

    #[test]
    fn a_poisoned_lock_is_left_to_the_blocking_path_to_report() {
        let lock = std::sync::Arc::new(Mutex::new(1u32));
        let l2 = lock.clone();
        let _ = std::thread::spawn(move || {
            let _g = l2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        let out = run_if_free(&lock, 1, &|_: &u32, _: &u32| true, |v: &mut u32, by| {
            *v += by
        });
        assert!(matches!(out, Quick::Deferred(1, _)));
    }
}
