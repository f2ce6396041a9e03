//! The Apache Iggy HTTP API over the engine (axum on tokio), plus sluice's
//! operator routes `GET /status/purge`, `GET /status/obligations` and
//! `GET /metrics`. A codec over the Iggy layer (`crate::iggy`): requests are
//! decoded here, run through `iggy::AppState::engine`, and answered as
//! Iggy's JSON. docs/adr/0006-http-api-compatibility.md lists what matches
//! Iggy and what sluice adds.
//!
//! Invariants:
//! - Every engine call runs on the blocking pool under the one engine lock
//!   (`iggy::AppState::engine`, its invariants); if an engine call ever
//!   panicked, every later engine request answers 500 until restart.
//! - Every response, including unknown routes, wrong methods, oversized
//!   bodies, auth failures and panics, is either a success or Iggy's JSON
//!   error body (`crate::iggy::error::ApiError`, rendered by `error`).
//! - Every route except `/ping`, `/users/login` and `/users/refresh-token`
//!   requires a valid bearer token (`auth::require_token`). The routes are
//!   declared in two tables (`public_routes`, `authenticated_routes`) that
//!   build the router, so a new route is in exactly one of them and the auth
//!   tests (`core/cli/tests/auth_hardening.rs`) reach it.
//! - This transport imports nothing from the TCP one: what both share is in
//!   `crate::iggy` (`tests/tidy.rs` holds it).

pub(crate) mod access;
pub mod auth;
mod base64;
pub(crate) mod error;
pub(crate) mod extract;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod model;
pub mod obligations;
pub(crate) mod offsets;
mod polled_json;
pub mod status;
pub(crate) mod streams;
pub(crate) mod system;
pub(crate) mod tokens;
pub(crate) mod users;

use std::any::Any;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRef};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::iggy::AppState;
use crate::iggy::error::ApiError;
use metrics::Metrics;

/// The router's state: the state both transports share, and the metrics
/// registry this transport serves and counts its requests in. Handlers
/// extract either part (`State<AppState>`, `State<Arc<Metrics>>`).
#[derive(Debug, Clone)]
pub(crate) struct HttpState {
    pub(crate) app: AppState,
    pub(crate) metrics: Arc<Metrics>,
}

impl FromRef<HttpState> for AppState {
    fn from_ref(state: &HttpState) -> AppState {
        state.app.clone()
    }
}

impl FromRef<HttpState> for Arc<Metrics> {
    fn from_ref(state: &HttpState) -> Arc<Metrics> {
        state.metrics.clone()
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
        fn $router() -> Router<HttpState> {
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
    "/personal-access-tokens/login" => [post(tokens::login)],
});

// Every other route: `auth::require_token` runs before each handler.
route_table!(authenticated_router, authenticated_routes, {
    "/users/logout" => [delete(auth::logout)],
    "/users" => [get(users::list), post(users::create)],
    "/users/{user_id}" => [get(users::get), put(users::update), delete(users::delete)],
    "/users/{user_id}/permissions" => [put(users::update_permissions)],
    "/users/{user_id}/password" => [put(users::change_password)],
    "/personal-access-tokens" => [get(tokens::list), post(tokens::create)],
    "/personal-access-tokens/{name}" => [delete(tokens::delete)],
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
pub(crate) fn router(app: AppState, metrics: Arc<Metrics>) -> Router {
    let public = public_router();
    let private = authenticated_router().route_layer(middleware::from_fn_with_state(
        app.clone(),
        auth::require_token,
    ));
    let max_body_bytes = app.limits.max_body_bytes;
    Router::new()
        .merge(public)
        .merge(private)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(
            metrics.clone(),
            metrics::track,
        ))
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(HttpState { app, metrics })
}
