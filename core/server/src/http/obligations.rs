//! `GET /status/obligations`: every pending cleanup obligation, of every
//! kind (a partition's purge, a deleted resource's removal, a partition's
//! segments below its retention low-water mark), with where it stands. `/status/purge` keeps answering as before; this is its sibling.
//!
//! Answer: `{"summary": {pending, stuck, degraded, by_kind: {kind: n},
//! by_state: {"kind/state": n}}, "obligations": [{kind, resource, stream_id,
//! topic_id, partition_id, group_id, state, attempts, consecutive_failures,
//! last_error, next_attempt_in_ms, stuck, degraded}]}`. Filter: `kind`
//! (`purge`, `delete` or `retention`).
//!
//! Invariants:
//! - One consistent snapshot, taken in a single engine call.
//! - Lists exactly what the reconciler tracks (a purge whose obligation is
//!   `Applied` in memory but whose record write failed is listed, since it
//!   is still pending), in the reconciler's key order.
//! - The types below are the one definition of this JSON: the server
//!   serialises them and `sluice status --obligations` deserialises them.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::extract::ApiQuery;
use crate::clock::{Clock, SystemClock};
use crate::engine::Engine;
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult};
use crate::metadata::ResourceKey;
use crate::partition::reconciler::ObligationKey;

/// The obligation kinds, as the `kind` filter and the answer name them.
pub const KINDS: [&str; 5] = [
    "purge",
    "delete",
    "retention",
    "remote_upload",
    "remote_deletion",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObligationsStatus {
    pub summary: ObligationsSummary,
    pub obligations: Vec<ObligationEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObligationsSummary {
    pub pending: u64,
    pub stuck: u64,
    pub degraded: u64,
    /// Pending obligations per kind (every kind listed, zeros included).
    pub by_kind: BTreeMap<String, u64>,
    /// Pending obligations per `kind/state` (`purge/requested`, ...).
    pub by_state: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObligationEntry {
    /// `purge`, `delete` or `retention`.
    pub kind: String,
    /// What the obligation is about: `partition`, `stream`, `topic`, `group`.
    pub resource: String,
    pub stream_id: u32,
    pub topic_id: Option<u32>,
    pub partition_id: Option<u32>,
    pub group_id: Option<u32>,
    /// The phase, in snake case: `requested`, `files_deleted`,
    /// `dirs_synced`, `applied` (a purge whose `Applied` record is not yet
    /// written); a retention's `low_water_committed` or `files_deleted`.
    pub state: String,
    /// A purge's attempts as its obligation record counts them (`null` for
    /// a deletion, whose record is the metadata).
    pub attempts: Option<u32>,
    /// Failed attempts in a row, as the reconciler counts them.
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    pub next_attempt_in_ms: u64,
    pub stuck: bool,
    /// A purge of a partition that refuses service (cleanup waits for it).
    pub degraded: bool,
    /// A retention's committed low-water mark (the first retained offset);
    /// absent for other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_water_mark: Option<u64>,
    /// A remote deletion round's objects still to delete (two per doomed
    /// upload attempt), and the dead generations whose prefix it must find
    /// empty; absent for other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_keys: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_generations: Option<Vec<u64>>,
    /// A remote upload's segment (its base offset); absent for other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_base: Option<u64>,
}

/// `Requested` → `requested`, `FilesDeleted` → `files_deleted`.
fn snake(state: &str) -> String {
    let mut out = String::with_capacity(state.len() + 4);
    for (i, c) in state.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Takes the snapshot (call inside one engine call). `kind`: only that kind.
pub fn snapshot(engine: &Engine, kind: Option<&str>) -> ObligationsStatus {
    let now_ms = SystemClock.now_micros() / 1000;
    let deletions: BTreeMap<ResourceKey, _> = engine.pending_deletions().collect();
    let mut obligations = Vec::new();
    for (key, entry) in engine.reconciler().pending() {
        if kind.is_some_and(|k| k != key.kind()) {
            continue;
        }
        let mut row = ObligationEntry {
            kind: key.kind().to_string(),
            resource: String::new(),
            stream_id: 0,
            topic_id: None,
            partition_id: None,
            group_id: None,
            state: String::new(),
            attempts: None,
            consecutive_failures: entry.consecutive_failures,
            last_error: entry.last_error.clone(),
            next_attempt_in_ms: entry.next_attempt_at_ms.saturating_sub(now_ms),
            stuck: entry.stuck,
            degraded: false,
            low_water_mark: None,
            remote_keys: None,
            dead_generations: None,
            segment_base: None,
        };
        match *key {
            ObligationKey::Purge(k) => {
                row.resource = "partition".into();
                (row.stream_id, row.topic_id, row.partition_id) =
                    (k.stream, Some(k.topic), Some(k.partition));
                if let Some(p) = engine.partition(k) {
                    row.degraded = p.degraded_reason().is_some();
                    if let Some(o) = p.obligation() {
                        row.state = snake(o.state().as_str());
                        row.attempts = Some(o.attempts());
                    }
                }
            }
            ObligationKey::Retention(k) => {
                row.resource = "partition".into();
                (row.stream_id, row.topic_id, row.partition_id) =
                    (k.stream, Some(k.topic), Some(k.partition));
                if let Some(p) = engine.partition(k) {
                    row.degraded = p.degraded_reason().is_some();
                    if let Some(r) = p.retention() {
                        row.state = snake(r.phase().as_str());
                        row.low_water_mark = Some(r.low_water_mark());
                    }
                }
            }
            ObligationKey::Delete(r) => {
                row.resource = r.kind().into();
                match r {
                    ResourceKey::Stream { stream } => row.stream_id = stream,
                    ResourceKey::Topic { stream, topic } => {
                        (row.stream_id, row.topic_id) = (stream, Some(topic));
                    }
                    ResourceKey::Partition(k) => {
                        (row.stream_id, row.topic_id, row.partition_id) =
                            (k.stream, Some(k.topic), Some(k.partition));
                    }
                    ResourceKey::Group {
                        stream,
                        topic,
                        group,
                    } => {
                        (row.stream_id, row.topic_id, row.group_id) =
                            (stream, Some(topic), Some(group));
                    }
                }
                if let Some(phase) = deletions.get(&r) {
                    row.state = snake(phase.as_str());
                }
            }
        }
        obligations.push(row);
    }
    // The remote tier's obligations are the partitions' tiering records
    // (driven by the tiering passes, not the reconciler's schedule).
    for t in engine.remote_obligations() {
        if kind.is_some_and(|k| k != t.kind) {
            continue;
        }
        obligations.push(ObligationEntry {
            kind: t.kind.to_string(),
            resource: "partition".into(),
            stream_id: t.key.stream,
            topic_id: Some(t.key.topic),
            partition_id: Some(t.key.partition),
            group_id: None,
            state: t.state.to_string(),
            attempts: None,
            consecutive_failures: t.consecutive_failures,
            last_error: t.last_error,
            next_attempt_in_ms: 0,
            stuck: false,
            degraded: t.degraded,
            low_water_mark: None,
            remote_keys: t.remote_keys,
            dead_generations: t.dead_generations,
            segment_base: t.segment_base,
        });
    }
    let mut by_kind: BTreeMap<String, u64> = KINDS
        .iter()
        .filter(|k| kind.is_none_or(|f| f == **k))
        .map(|k| (k.to_string(), 0))
        .collect();
    let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
    for o in &obligations {
        *by_kind.entry(o.kind.clone()).or_default() += 1;
        *by_state
            .entry(format!("{}/{}", o.kind, o.state))
            .or_default() += 1;
    }
    ObligationsStatus {
        summary: ObligationsSummary {
            pending: obligations.len() as u64,
            stuck: obligations.iter().filter(|o| o.stuck).count() as u64,
            degraded: obligations.iter().filter(|o| o.degraded).count() as u64,
            by_kind,
            by_state,
        },
        obligations,
    }
}

pub(crate) async fn obligations_status(
    State(state): State<AppState>,
    query: ApiQuery,
) -> ApiResult<Json<ObligationsStatus>> {
    let kind = match query.get("kind") {
        None => None,
        Some(k) if KINDS.contains(&k) => Some(k.to_string()),
        Some(other) => {
            return Err(ApiError::bad_request(
                "kind",
                format!("kind must be one of {}, got {other:?}", KINDS.join(", ")),
            ));
        }
    };
    let status = state
        .engine(move |e| Ok(snapshot(e, kind.as_deref())))
        .await?;
    Ok(Json(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_the_phase_names_when_snake_cased_then_they_match_the_purge_status_names() {
        assert_eq!(snake("Requested"), "requested");
        assert_eq!(snake("FilesDeleted"), "files_deleted");
        assert_eq!(snake("DirsSynced"), "dirs_synced");
        assert_eq!(snake("Applied"), "applied");
        assert_eq!(snake("LowWaterCommitted"), "low_water_committed");
    }
}
