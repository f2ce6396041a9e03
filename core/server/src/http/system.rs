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
use crate::membership::GroupKey;

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
    /// Only in the details of one client: the groups it is a member of.
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_groups: Option<Vec<ClientGroup>>,
}

/// Iggy's `ConsumerGroupInfo` in a client's details.
#[derive(Debug, Serialize)]
pub(crate) struct ClientGroup {
    stream_id: u32,
    topic_id: u32,
    group_id: u32,
}

fn client_info(id: u32, entry: ClientEntry, groups: Vec<GroupKey>, details: bool) -> ClientInfo {
    ClientInfo {
        client_id: id,
        user_id: entry.user_id,
        address: entry.address,
        transport: "TCP",
        consumer_groups_count: u32::try_from(groups.len()).unwrap_or(u32::MAX),
        consumer_groups: details.then(|| {
            groups
                .into_iter()
                .map(|g| ClientGroup {
                    stream_id: g.stream,
                    topic_id: g.topic,
                    group_id: g.group,
                })
                .collect()
        }),
    }
}

pub(crate) async fn clients(State(state): State<AppState>) -> ApiResult<Json<Vec<ClientInfo>>> {
    let list = state.info.tcp_clients.list();
    let ids: Vec<u32> = list.iter().map(|(id, _)| *id).collect();
    let groups = state
        .engine(move |e| {
            Ok(ids
                .iter()
                .map(|id| e.client_groups(*id))
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(Json(
        list.into_iter()
            .zip(groups)
            .map(|((id, e), groups)| client_info(id, e, groups, false))
            .collect(),
    ))
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
    let groups = state.engine(move |e| Ok(e.client_groups(id))).await?;
    Ok(Json(client_info(id, entry, groups, true)))
}
