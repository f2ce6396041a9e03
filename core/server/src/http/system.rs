//! `GET /stats` (Iggy's `Stats`), `GET /cluster/metadata` (a single-node
//! cluster, this node the healthy leader) and `GET /clients[/{id}]` (the open
//! TCP connections, as Iggy's HTTP API lists its TCP and QUIC clients), from
//! the Iggy layer's collector and registry (`crate::iggy::stats`,
//! `crate::iggy::clients`), as the TCP commands answer them.
//!
//! Invariants:
//! - Both read and never change anything; the counts are one engine snapshot.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::extract::ApiPath;
use crate::iggy::AppState;
use crate::iggy::clients::ClientEntry;
use crate::iggy::error::{ApiError, ApiResult};
use crate::iggy::stats::{ClusterMetadata, Stats, collect_stats};

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
