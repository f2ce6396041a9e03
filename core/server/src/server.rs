//! `sluice server`: recovery, then the reconciler, then serving HTTP and the
//! Iggy TCP protocol (`crate::tcp`) over the same engine; and a graceful stop.
//!
//! Invariants:
//! - Nothing is served before recovery finished: the engine is opened (and
//!   every partition recovered) before the listener accepts a connection.
//! - The reconciler runs one pass per period (and one as soon as a purge or
//!   deletion commits) on the blocking pool. Its steps take the same engine
//!   lock as requests, so a step and a request never interleave inside the
//!   engine; the purge cleanups' syncs run between the steps without the
//!   lock (engine/purge.rs, reconciler/pass.rs), so requests to every topic,
//!   the purged one included, wait for at most one step, never for a sync
//!   of cleanup. A pass attempts at most `max_per_pass` obligations; one
//!   that reached its bound is followed by the next one at once.
//! - Expired personal access tokens are removed once per
//!   `auth.token_cleaner_period` (a minute, Iggy's token cleaner).
//! - Stopping: the listener stops accepting, in-flight requests finish (an
//!   engine call that started always completes), the reconciler stops, and
//!   the engine is dropped only after the last request released it.
//! - With `[tcp.tls]` / `[http.tls]` enabled, that listener speaks only TLS;
//!   its certificate and key are read before recovery, so a bad file stops
//!   the start before anything is opened or served (`crate::tls`).
//! - Used in-process by the tests exactly as the binary uses it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_storage::DurableStorage;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::{Auth, AuthError, RootSource, setup_root};
use crate::clock::SystemClock;
use crate::config::ServerConfig;
use crate::engine::{Engine, EngineConfig, ReconcilerWaker, RecoveryReport};
use crate::error::EngineError;
use crate::http::metrics::Metrics;
use crate::http::router;
use crate::iggy::error::ApiError;
use crate::iggy::state::Limits;
use crate::iggy::stats::Listeners;
use crate::iggy::{AppState, ServerInfo};
use crate::partition::reconciler::PassReport;
use crate::sessions::{Sessions, SessionsError, unix_now};
use crate::tcp::TcpLimits;
use crate::tls::TlsError;
use crate::users::{Users, UsersError};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("recovery failed: {0}")]
    Engine(#[from] EngineError),
    #[error("root user: {0}")]
    Auth(#[from] AuthError),
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("users: {0}")]
    Users(#[from] UsersError),
    #[error("HTTP logins: {0}")]
    Sessions(#[from] SessionsError),
    #[error("cannot listen on {address}: {reason}")]
    Bind { address: SocketAddr, reason: String },
    #[error("HTTP server failed: {0}")]
    Serve(String),
    #[error("a start-up task failed: {0}")]
    Task(String),
    #[error("remote tier: {0}")]
    Tier(String),
}

/// Selects the naive purge under `SLUICE_TEST_NAIVE_PURGE=1` in a build with
/// the `naive-purge` feature (tests only: the power-cut soak's teeth). A
/// build without the feature (or without `naive-users-save` for
/// `SLUICE_TEST_NAIVE_USERS_SAVE=1`, which `users` reads itself, or without
/// sluice-storage's `test-faults`) refuses to start when asked for the
/// fault, so a test can never believe a fault was on when it was not.
fn apply_test_faults(engine_config: &mut EngineConfig) -> Result<(), ServerError> {
    let wants = |key: &str| std::env::var_os(key).is_some_and(|v| v == "1");
    if wants(NAIVE_PURGE_ENV) {
        #[cfg(feature = "naive-purge")]
        {
            tracing::warn!("test fault active: the naive (Iggy-order) purge");
            engine_config.purge_mode = crate::engine::PurgeMode::NaiveIggyOrder;
        }
        #[cfg(not(feature = "naive-purge"))]
        {
            let _ = engine_config;
            return Err(ServerError::Task(format!(
                "{NAIVE_PURGE_ENV}=1 needs a build with the naive-purge feature"
            )));
        }
    }
    if wants(crate::users::NAIVE_USERS_SAVE_ENV) && !cfg!(feature = "naive-users-save") {
        return Err(ServerError::Task(format!(
            "{}=1 needs a build with the naive-users-save feature",
            crate::users::NAIVE_USERS_SAVE_ENV
        )));
    }
    if wants(sluice_storage::NOOP_DIR_SYNC_ENV) && !sluice_storage::test_faults_compiled() {
        return Err(ServerError::Task(format!(
            "{}=1 needs a build with sluice-storage's test-faults feature",
            sluice_storage::NOOP_DIR_SYNC_ENV
        )));
    }
    Ok(())
}

/// Environment variable selecting the naive purge (see [`apply_test_faults`]).
pub const NAIVE_PURGE_ENV: &str = "SLUICE_TEST_NAIVE_PURGE";

/// What `start` needs besides the storage backend.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub config: ServerConfig,
    pub root: RootSource,
    /// Seeds server-assigned message ids and reconciler jitter.
    pub seed: u64,
}

/// A server that is accepting connections. Its `Debug` leaves out the
/// generated password (and `AppState`'s leaves out every token).
pub struct RunningServer {
    pub local_addr: SocketAddr,
    /// Whether `local_addr` serves HTTPS (`[http.tls]`).
    pub https: bool,
    /// The Iggy TCP listener's address (`None` when `tcp.enabled` is false).
    pub tcp_addr: Option<SocketAddr>,
    /// The generated root password, on the first start of a data directory
    /// without configured credentials. Show it once; it is stored nowhere.
    pub generated_password: Option<String>,
    pub recovery: RecoveryReport,
    pub state: AppState,
    stop: watch::Sender<bool>,
    serve: JoinHandle<Result<(), ServerError>>,
    tcp: Option<JoinHandle<()>>,
    reconciler: JoinHandle<()>,
    token_cleaner: JoinHandle<()>,
    tierer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningServer")
            .field("local_addr", &self.local_addr)
            .field("https", &self.https)
            .field("tcp_addr", &self.tcp_addr)
            .field(
                "generated_password",
                &self.generated_password.as_ref().map(|_| "<redacted>"),
            )
            .field("recovery", &self.recovery)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl RunningServer {
    /// The HTTP API's base URL: `http://` or, with `[http.tls]`, `https://`.
    pub fn http_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.local_addr)
    }

    /// Stops accepting, lets in-flight requests finish, stops the reconciler.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        // A send fails only if every receiver is gone, i.e. both tasks ended.
        let _ = self.stop.send(true);
        self.wait().await
    }

    /// Waits until the server stopped (after `shutdown` or a serve failure).
    pub async fn wait(self) -> Result<(), ServerError> {
        let served = self
            .serve
            .await
            .map_err(|e| ServerError::Task(e.to_string()))?;
        let _ = self.stop.send(true);
        if let Some(tcp) = self.tcp {
            tcp.await.map_err(|e| ServerError::Task(e.to_string()))?;
        }
        self.reconciler
            .await
            .map_err(|e| ServerError::Task(e.to_string()))?;
        self.token_cleaner
            .await
            .map_err(|e| ServerError::Task(e.to_string()))?;
        if let Some(tierer) = self.tierer {
            tierer.await.map_err(|e| ServerError::Task(e.to_string()))?;
        }
        // Buffered topics were acknowledged from the page cache; a graceful
        // stop makes them durable before the process exits.
        match self.state.engine(|e| Ok(e.sync_all())).await {
            Ok(Ok(())) => tracing::info!("flushed buffered data"),
            Ok(Err(e)) => tracing::error!(error = %e, "flushing buffered data failed"),
            Err(e) => tracing::error!(error = ?e, "flushing buffered data failed"),
        }
        tracing::info!("server stopped");
        served
    }

    /// A handle that stops the server when sent `true` (for signal handlers).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }
}

/// Recovers the engine from `options.config.data_dir`, sets up the root
/// user, starts the reconciler and starts serving.
pub async fn start(
    storage: Arc<dyn DurableStorage>,
    options: ServeOptions,
) -> Result<RunningServer, ServerError> {
    let config = options.config;
    let mut engine_config = EngineConfig::new(config.data_dir.clone(), options.seed);
    engine_config.reconciler.concurrency = config.reconciler.concurrency;
    engine_config.reconciler.max_per_pass = config.reconciler.concurrency.max(1);
    engine_config.reconciler.steps_per_hold = SERVER_STEPS_PER_HOLD;
    engine_config.max_open_files = config.files.max_open;
    engine_config.append_concurrency = config.files.append_concurrency;
    engine_config.default_message_expiry_us = config
        .retention
        .message_expiry
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    apply_test_faults(&mut engine_config)?;
    let tcp_tls = if config.tcp.enabled {
        crate::tls::acceptor(storage.as_ref(), "tcp", &config.tcp.tls, &[])?
    } else {
        None
    };
    let http_tls = crate::tls::acceptor(
        storage.as_ref(),
        "http",
        &config.http.tls,
        crate::tls::HTTP_ALPN,
    )?;
    let data_dir = config.data_dir.clone();
    let root = options.root;
    let started = Instant::now();
    let tiering = config.tiering.clone();
    let runtime = tokio::runtime::Handle::current();
    let (engine, recovery, (users, sessions, generated_password)) =
        tokio::task::spawn_blocking(move || {
            let (mut engine, recovery) =
                Engine::open(storage.clone(), Arc::new(SystemClock), engine_config)?;
            if let Some(tiering) = tiering {
                attach_tier(&mut engine, &data_dir, tiering, runtime)?;
            }
            let root = setup_root(storage.as_ref(), &data_dir, root)?;
            let users = Users::load(storage.clone(), &data_dir, root.user)?;
            let sessions = Sessions::open(storage.clone(), &data_dir, unix_now())?;
            Ok::<_, ServerError>((engine, recovery, (users, sessions, root.generated_password)))
        })
        .await
        .map_err(|e| ServerError::Task(e.to_string()))??;
    tracing::info!(
        data_dir = %config.data_dir.display(),
        partitions = recovery.partitions,
        messages = recovery.messages,
        consumer_offsets = recovery.consumer_offsets,
        group_offsets = recovery.group_offsets,
        stale_records = recovery.stale_records,
        corrupt_offset_records = recovery.corrupt_offset_records,
        tail_cuts = recovery.tail_cuts,
        degraded = recovery.degraded.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "recovery finished"
    );

    // A purge or deletion answers at its commit point and wakes the
    // reconciler, which starts the cleanup without waiting for its period.
    let wake = Arc::new(tokio::sync::Notify::new());
    let mut engine = engine;
    let waker = wake.clone();
    engine.set_reconciler_waker(ReconcilerWaker::new(move || waker.notify_one()));
    let state = AppState {
        engine: Arc::new(Mutex::new(engine)),
        sends: Arc::default(),
        auth: Arc::new(Auth::new(
            Arc::new(users),
            sessions,
            config.auth.token_expiry,
            config.auth.failed_login_delay,
        )),
        limits: Limits {
            max_body_bytes: config.http.max_body_bytes,
            max_poll_count: config.http.max_poll_count,
            reconciler_period: config.reconciler.period,
        },
        info: Arc::new(ServerInfo::new()),
    };
    // Served and counted by the HTTP transport, fed by the reconciler.
    let metrics = Arc::new(Metrics::new(recovery.stale_records));
    let (stop, stop_rx) = watch::channel(false);

    let reconciler = tokio::spawn(run_reconciler(
        state.clone(),
        metrics.clone(),
        wake,
        stop_rx.clone(),
    ));
    let tierer = config
        .tiering
        .as_ref()
        .map(|t| tokio::spawn(run_tierer(state.clone(), t.period, stop_rx.clone())));
    let token_cleaner = tokio::spawn(run_token_cleaner(
        state.clone(),
        config.auth.token_cleaner_period,
        stop_rx.clone(),
    ));

    let listener = TcpListener::bind(config.http.address)
        .await
        .map_err(|e| ServerError::Bind {
            address: config.http.address,
            reason: e.to_string(),
        })?;
    let local_addr = listener.local_addr().map_err(|e| ServerError::Bind {
        address: config.http.address,
        reason: e.to_string(),
    })?;
    let tcp_bound = if config.tcp.enabled {
        let (listener, addr) =
            crate::tcp::bind(config.tcp.address)
                .await
                .map_err(|e| ServerError::Bind {
                    address: config.tcp.address,
                    reason: e.to_string(),
                })?;
        tracing::info!(address = %addr, tls = tcp_tls.is_some(), "serving the Iggy TCP protocol");
        Some((listener, addr))
    } else {
        None
    };
    let tcp_addr = tcp_bound.as_ref().map(|(_, a)| *a);
    let _ = state.info.listeners.set(Listeners {
        http: Some(local_addr),
        tcp: tcp_addr,
    });
    let tcp = tcp_bound.map(|(listener, _)| {
        let limits = TcpLimits {
            max_frame_bytes: config.tcp.max_frame_bytes,
            max_connections: config.tcp.max_connections,
            idle_timeout: config.tcp.idle_timeout,
        };
        tokio::spawn(crate::tcp::serve(
            listener,
            state.clone(),
            limits,
            tcp_tls,
            stop_rx.clone(),
        ))
    });
    let https = http_tls.is_some();
    tracing::info!(address = %local_addr, tls = https, "serving the Iggy HTTP API");
    let app = router(state.clone(), metrics);
    let serve = match http_tls {
        None => tokio::spawn(serve_http(listener, app, stop_rx)),
        Some(acceptor) => tokio::spawn(serve_http(
            crate::tls::HttpsListener::new(listener, acceptor),
            app,
            stop_rx,
        )),
    };

    Ok(RunningServer {
        local_addr,
        https,
        tcp_addr,
        generated_password,
        recovery,
        state,
        stop,
        serve,
        tcp,
        reconciler,
        token_cleaner,
        tierer,
    })
}

/// Serves the HTTP API from `listener` (plain TCP or HTTPS) until told to
/// stop, then lets in-flight requests finish.
async fn serve_http<L>(
    listener: L,
    app: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ServerError>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            // Ends when `true` is sent or every sender is gone.
            let _ = stop.wait_for(|stop| *stop).await;
            tracing::info!("no longer accepting connections; finishing in-flight requests");
        })
        .await
        .map_err(|e| ServerError::Serve(e.to_string()))
}

/// One reconciler pass per period, and one as soon as a commit made an
/// obligation pending (`wake`), until told to stop.
async fn run_reconciler(
    state: AppState,
    metrics: Arc<Metrics>,
    wake: Arc<tokio::sync::Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(state.limits.reconciler_period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            _ = ticks.tick() => {}
            _ = wake.notified() => {}
        }
        let pass = reconciler_pass(&state).await;
        match pass {
            Ok((report, took, bound)) => {
                metrics.record_pass(took);
                if report.attempted.len() >= bound {
                    // The pass stopped at its bound with work possibly left
                    // (a purge of a big topic): go again without waiting a
                    // period; requests still get the engine between passes.
                    ticks.reset_immediately();
                }
                if !report.attempted.is_empty() {
                    tracing::info!(
                        attempted = report.attempted.len(),
                        applied = report.applied.len(),
                        failed = report.failed.len(),
                        still_pending = report.still_pending,
                        took_ms = took.as_millis() as u64,
                        "reconciler pass"
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e.body.reason, "reconciler pass could not run");
            }
        }
    }
}

/// Builds the configured object store, checks that it refuses a second
/// create of one key (ADR 0026 §5: every upload relies on create-only puts
/// never overwriting), and attaches it to the engine.
fn attach_tier(
    engine: &mut Engine,
    data_dir: &std::path::Path,
    tiering: crate::config::TieringSettings,
    runtime: tokio::runtime::Handle,
) -> Result<(), ServerError> {
    use crate::config::TierStore;
    use sluice_remote::{ObjectStoreRemote, RuntimeHandle, S3Settings};
    let handle = RuntimeHandle::Borrowed(runtime);
    let store = match &tiering.store {
        TierStore::Local(path) => {
            let root = data_dir.join(path);
            engine
                .storage()
                .create_dir_all(&root)
                .map_err(|e| ServerError::Tier(format!("{}: {e}", root.display())))?;
            ObjectStoreRemote::local(&root, handle)
        }
        TierStore::S3 {
            bucket,
            region,
            endpoint,
            access_key_id,
            secret_access_key,
            allow_http,
        } => ObjectStoreRemote::s3(
            &S3Settings {
                bucket: bucket.clone(),
                region: region.clone(),
                endpoint: endpoint.clone(),
                access_key_id: access_key_id.clone(),
                secret_access_key: secret_access_key.clone(),
                allow_http: *allow_http,
                virtual_hosted_style: false,
                request_timeout: None,
                max_retries: None,
            },
            handle,
        ),
    }
    .map_err(|e| ServerError::Tier(e.to_string()))?;
    let prefix = sluice_remote::RemoteKey::new(tiering.engine.instance.clone())
        .map_err(|e| ServerError::Tier(e.to_string()))?;
    let report = sluice_remote::probe_conditional_create(&store, &prefix)
        .map_err(|e| ServerError::Tier(format!("the store did not answer its probe: {e}")))?;
    if report.verdict != sluice_remote::ConditionalCreate::Honoured {
        return Err(ServerError::Tier(format!(
            "{store:?} accepted a second create of {}: it ignores conditional writes, which tiering relies on (ADR 0026 §5)",
            report.key
        )));
    }
    if !report.cleaned_up {
        // Every deletion round ends in deletes: a store that cannot delete
        // what it was just given (an S3 look-alike without the bulk delete
        // `object_store` sends, say) would leave every round pending.
        return Err(ServerError::Tier(format!(
            "{store:?} did not delete the probe's object {}: remote deletions (purge, retention, topic deletion) would never complete",
            report.key
        )));
    }
    tracing::info!(store = ?tiering.store, instance = %tiering.engine.instance, topics = tiering.engine.topics.len(), "remote tier attached");
    engine
        .attach_tier(Arc::new(store), tiering.engine)
        .map_err(|e| ServerError::Tier(e.to_string()))
}

/// One tiering pass per `period` until told to stop: the plan and the
/// outcomes under the engine lock, the remote calls without it.
async fn run_tierer(state: AppState, period: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            _ = ticks.tick() => {}
        }
        let plan = match state.engine(|e| Ok(e.plan_tiering())).await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(error = %e.body.reason, "tiering pass could not plan");
                continue;
            }
        };
        if plan.is_empty() {
            continue;
        }
        let plan = match tokio::task::spawn_blocking(move || {
            let mut plan = plan;
            plan.run();
            plan
        })
        .await
        {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!(error = %e, "tiering I/O task failed");
                continue;
            }
        };
        match state.engine(move |e| Ok(e.finish_tiering(plan))).await {
            Ok(report) => {
                tracing::debug!(?report, "tiering pass");
                if report.uploaded > 0 || report.rounds_applied > 0 {
                    ticks.reset_immediately();
                }
            }
            Err(e) => tracing::error!(error = %e.body.reason, "tiering pass could not finish"),
        }
    }
}

/// Removes expired personal access tokens once per `period`, as Iggy's
/// token cleaner does (until then an expired token is listed, and refused
/// at login), until told to stop.
async fn run_token_cleaner(state: AppState, period: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            _ = ticks.tick() => {}
        }
        match crate::iggy::users::remove_expired_tokens(&state).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "expired personal access tokens removed"),
            Err(e) => {
                tracing::error!(error = %e.body.reason, "removing expired personal access tokens failed");
            }
        }
    }
}

/// Cleanup steps the server's reconciler takes per hold of the engine lock.
/// A step of one partition's cleanup takes a fraction of a millisecond (a
/// scan, a plan write, renames); eight of them in one hold were a
/// request's p99 during a big purge (docs/performance.md). Requests queued
/// for the lock get it between two steps.
pub const SERVER_STEPS_PER_HOLD: usize = 1;

/// One reconciler pass: its steps under the engine lock, one partition's
/// step per hold, and the waits of its purge cleanups (the plan's sync, the
/// unlinks, the directories' syncs) without it, all of them at once, so
/// requests, to the purged partitions too, are served while cleanup waits
/// for the disk. Returns the report, how long the pass took, and the pass's
/// bound.
async fn reconciler_pass(
    state: &AppState,
) -> Result<(PassReport, std::time::Duration, usize), ApiError> {
    let started = Instant::now();
    let (mut run, bound) = state
        .engine(|e| Ok((e.begin_reconcile(), e.reconciler().config().max_per_pass)))
        .await?;
    while !run.is_finished() {
        // Every step that is due, each in its own engine call, so the
        // attempts' next waits are all under way together.
        while run.ready() > 0 {
            run = state
                .engine(move |e| {
                    e.resume_reconcile(&mut run);
                    Ok(run)
                })
                .await?;
        }
        if run.waiting() > 0 {
            run = tokio::task::spawn_blocking(move || {
                run.perform_waits();
                run
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "cleanup I/O task failed");
                ApiError::internal("the cleanup I/O task failed")
            })?;
        }
    }
    Ok((run.into_report(), started.elapsed(), bound))
}
