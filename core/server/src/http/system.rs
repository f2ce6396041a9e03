//! `GET /stats` (Iggy's `Stats`) and `GET /cluster/metadata` (a single-node
//! cluster, this node the healthy leader), shared with the TCP commands.
//!
//! Invariants:
//! - Both read and never change anything; the counts are one engine snapshot.

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::error::ApiResult;
use crate::stats::{self, ClusterMetadata, Stats};

/// The stats both transports answer.
pub async fn collect_stats(state: &AppState) -> ApiResult<Stats> {
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

pub async fn stats(State(state): State<AppState>) -> ApiResult<Json<Stats>> {
    Ok(Json(collect_stats(&state).await?))
}

pub async fn cluster_metadata(State(state): State<AppState>) -> Json<ClusterMetadata> {
    Json(state.info.listeners().cluster())
}
