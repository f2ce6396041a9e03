//! `GET /stats` (Iggy's `Stats`), `GET /cluster/metadata` (a single-node
//! cluster, this node the healthy leader) and `GET /clients[/{id}]` (the open
//! TCP connections, as Iggy's HTTP API lists its TCP and QUIC clients),
//! shared with the TCP commands.
//!
//! Invariants:
//! - Both read and never change anything; the counts are one engine snapshot.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::extract::ApiPath;
use crate::stats::{self, ClusterMetadata, Stats};
use crate::tcp::clients::ClientEntry;

/// The stats both transports answer.
pub(crate) async fn collect_stats(state: &AppState) -> ApiResult<Stats> {
    let started = state
        .info
        .started
        .unwrap_or_else(std::time::SystemTime::now);
    let clients = state.info.tcp_clients.len() + state.auth.live_sessions();
    state
        .engine(move |e| {
            let mut s = Stats::default();
            stats::engine_counts(e, &mut s);
            stats::process(e, started, clients, &mut s);
            Ok(s)
        })
        .await
}

pub(crate) async fn stats(State(state): State<AppState>) -> ApiResult<Json<Stats>> {
    Ok(Json(collect_stats(&state).await?))
}

pub(crate) async fn cluster_metadata(State(state): State<AppState>) -> Json<ClusterMetadata> {
    Json(state.info.listeners().cluster())
}

/// Iggy's `ClientInfo` (and, with `consumer_groups`, `ClientInfoDetails`).
#[derive(Debug, Serialize)]
pub(crate) struct ClientInfo {
    client_id: u32,
    user_id: Option<u32>,
    address: String,
    transport: &'static str,
    consumer_groups_count: u32,
    /// Only in the details of one client; sluice has no group membership.
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_groups: Option<Vec<()>>,
}

fn client_info(id: u32, entry: ClientEntry, details: bool) -> ClientInfo {
    ClientInfo {
        client_id: id,
        user_id: entry.user_id,
        address: entry.address,
        transport: "TCP",
        consumer_groups_count: 0,
        consumer_groups: details.then(Vec::new),
    }
}

pub(crate) async fn clients(State(state): State<AppState>) -> Json<Vec<ClientInfo>> {
    let list = state.info.tcp_clients.list();
    Json(
        list.into_iter()
            .map(|(id, e)| client_info(id, e, false))
            .collect(),
    )
}

pub(crate) async fn client(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
) -> ApiResult<Json<ClientInfo>> {
    let id: u32 = raw
        .parse()
        .map_err(|_| ApiError::bad_request("client_id", "must be a number"))?;
    let entry = state
        .info
        .tcp_clients
        .get(id)
        .ok_or_else(|| ApiError::client_not_found(id))?;
    Ok(Json(client_info(id, entry, true)))
}
