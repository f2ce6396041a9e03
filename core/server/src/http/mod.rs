//! The Apache Iggy HTTP API over the engine (axum on tokio), plus sluice's
//! operator routes `GET /status/purge`, `GET /status/obligations` and
//! `GET /metrics`.
//! docs/adr/0006-http-api-compatibility.md lists what matches Iggy and what
//! sluice adds.
//!
//! Invariants:
//! - The engine is single-threaded and its storage synchronous (ADR 0001,
//!   ADR 0002): it sits behind one `std::sync::Mutex`, and every engine call
//!   runs on tokio's blocking pool (`AppState::engine`), never on an async
//!   worker. A call that started runs to completion even if the client goes
//!   away, so no request is ever half-applied by a cancelled future.
//! - If an engine call ever panics, the mutex is poisoned and every later
//!   engine request answers 500 until restart: memory may no longer match
//!   the durable state, and recovery is the only trusted way back.
//! - Every response, including unknown routes, wrong methods, oversized
//!   bodies, auth failures and panics, is either a success or Iggy's JSON
//!   error body (`error::ApiError`).
//! - Every route except `/ping`, `/users/login` and `/users/refresh-token`
//!   requires a valid bearer token (`auth::require_token`). The routes are
//!   declared in two tables (`public_routes`, `authenticated_routes`) that
//!   build the router, so a new route is in exactly one of them and the auth
//!   tests (`core/cli/tests/auth_hardening.rs`) reach it.

pub mod auth;
pub(crate) mod error;
pub(crate) mod extract;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod model;
pub mod obligations;
pub(crate) mod offsets;
pub mod status;
pub(crate) mod streams;
pub(crate) mod system;

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::engine::Engine;
use auth::Auth;
use error::{ApiError, ApiResult};
use metrics::Metrics;

/// Request limits and settings the handlers need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_body_bytes: usize,
    pub(crate) max_poll_count: u32,
    pub(crate) reconciler_period: Duration,
}

/// What the server knows about itself, for `/stats` and the cluster metadata
/// (shared by both transports).
#[derive(Debug, Default)]
pub struct ServerInfo {
    pub(crate) started: Option<std::time::SystemTime>,
    /// Open TCP connections (Iggy's clients).
    pub tcp_clients: Arc<crate::tcp::clients::ClientRegistry>,
    /// Where the listeners are bound (set once both are).
    pub(crate) listeners: std::sync::OnceLock<crate::stats::Listeners>,
}

impl ServerInfo {
    pub(crate) fn new() -> Self {
        ServerInfo {
            started: Some(std::time::SystemTime::now()),
            ..ServerInfo::default()
        }
    }

    pub(crate) fn listeners(&self) -> crate::stats::Listeners {
        self.listeners.get().copied().unwrap_or_default()
    }
}

/// Shared by every handler.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) engine: Arc<Mutex<Engine>>,
    pub(crate) auth: Arc<Auth>,
    pub(crate) metrics: Arc<Metrics>,
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

async fn ping() -> &'static str {
    "pong"
}

async fn not_found() -> ApiError {
    ApiError::route_not_found()
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

fn panic_response(_: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal("internal error").into_response()
}

const TOPIC: &str = "/streams/{stream_id}/topics/{topic_id}";

/// Declares a set of routes once, as both a `Router` and a table of
/// `(method, path template)`, so the two can never disagree: the auth tests
/// walk the table, and a route added here is in it by construction.
macro_rules! route_table {
    ($router:ident, $table:ident, { $( $path:expr => [ $( $method:ident ( $handler:path ) ),+ $(,)? ] ),+ $(,)? }) => {
        fn $router() -> Router<AppState> {
            Router::new() $( .route(&$path, MethodRouter::new() $( .$method($handler) )+ ) )+
        }

        /// `(method, path template)` of every route in this table; methods
        /// are upper case (`GET`), path parameters are `{name}`.
        pub fn $table() -> Vec<(&'static str, String)> {
            vec![ $( $( (method_name(stringify!($method)), String::from($path)), )+ )+ ]
        }
    };
}

fn method_name(method: &str) -> &'static str {
    match method {
        "get" => "GET",
        "post" => "POST",
        "put" => "PUT",
        "delete" => "DELETE",
        "patch" => "PATCH",
        _ => "OTHER",
    }
}

// The only routes served without a token.
route_table!(public_router, public_routes, {
    "/ping" => [get(ping)],
    "/users/login" => [post(auth::login)],
    "/users/refresh-token" => [post(auth::refresh_token)],
});

// Every other route: `auth::require_token` runs before each handler.
route_table!(authenticated_router, authenticated_routes, {
    "/users/logout" => [delete(auth::logout)],
    "/streams" => [get(streams::list_streams), post(streams::create_stream)],
    "/streams/{stream_id}" => [
        get(streams::get_stream),
        put(streams::update_stream),
        delete(streams::delete_stream),
    ],
    "/streams/{stream_id}/purge" => [delete(streams::purge_stream)],
    "/streams/{stream_id}/topics" => [get(streams::list_topics), post(streams::create_topic)],
    TOPIC => [
        get(streams::get_topic),
        put(streams::update_topic),
        delete(streams::delete_topic),
    ],
    format!("{TOPIC}/purge") => [delete(streams::purge_topic)],
    format!("{TOPIC}/partitions") => [
        post(streams::create_partitions),
        delete(streams::delete_partitions),
    ],
    format!("{TOPIC}/messages") => [get(messages::poll), post(messages::send)],
    format!("{TOPIC}/consumer-offsets") => [get(offsets::get_offset), put(offsets::store_offset)],
    format!("{TOPIC}/consumer-offsets/{{consumer_id}}") => [delete(offsets::delete_offset)],
    format!("{TOPIC}/consumer-groups") => [get(offsets::list_groups), post(offsets::create_group)],
    format!("{TOPIC}/consumer-groups/{{group_id}}") => [
        get(offsets::get_group),
        delete(offsets::delete_group),
    ],
    "/stats" => [get(system::stats)],
    "/clients" => [get(system::clients)],
    "/clients/{client_id}" => [get(system::client)],
    "/cluster/metadata" => [get(system::cluster_metadata)],
    "/status/purge" => [get(status::purge_status)],
    "/status/obligations" => [get(obligations::obligations_status)],
    "/metrics" => [get(metrics::scrape)],
});

/// The whole API.
pub(crate) fn router(state: AppState) -> Router {
    let public = public_router();
    let private = authenticated_router().route_layer(middleware::from_fn_with_state(
        state.clone(),
        auth::require_token,
    ));
    Router::new()
        .merge(public)
        .merge(private)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
}
