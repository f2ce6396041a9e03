//! `GET /status/purge`: the operator's view of every purge obligation.
//!
//! Answer: `{"summary": {...}, "partitions": [{stream_id, topic_id,
//! partition_id, committed_generation, degraded, obligation: {generation,
//! state, attempts, last_error, next_attempt_in_ms, stuck, degraded} | null}]}`.
//! Filters: `stream_id`, `topic_id` (ids or names) and `state`
//! (`requested`, `files_deleted`, `dirs_synced`, `applied`, or `none` for a
//! partition that was never purged).
//!
//! Invariants:
//! - The answer is one consistent snapshot: it is taken in a single engine
//!   call, so no purge or cleanup step can land half-way through it.
//! - The summary counts the partitions the filters kept; the reconciler
//!   figures are global.
//! - The response types below are the one definition of this JSON: the
//!   server serialises them and `sluice status` deserialises the same types,
//!   so the two cannot drift. Names are owned strings (not typed enums) so a
//!   client still reads an answer naming a state or directory kind it does
//!   not know, and the maps keep their alphabetical key order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::extract::{ApiQuery, identifier};
use super::metrics::Metrics;
use crate::clock::{Clock, SystemClock};
use crate::engine::Engine;
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult};
#[cfg(test)]
use crate::partition::purge::PurgeState;
use crate::partition::purge::{DirKind, FailureSite};
use crate::partition::reconciler::ObligationKey;

pub const STATES: [&str; 5] = [
    "requested",
    "files_deleted",
    "dirs_synced",
    "applied",
    "none",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PurgeStatus {
    pub summary: Summary,
    pub partitions: Vec<PartitionRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub partitions: u64,
    /// Partitions per obligation state (`none`: never purged).
    pub states: BTreeMap<String, u64>,
    pub stuck: u64,
    pub degraded: u64,
    pub reconciler: ReconcilerSummary,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcilerSummary {
    pub passes: u64,
    pub attempts: u64,
    pub failures: u64,
    /// Attempts that worked on each directory kind (removed a file from it
    /// or synced it): `segments`, `consumers`, `groups`. Empty when read
    /// from a server that predates it.
    #[serde(default)]
    pub(crate) attempts_by_dir: BTreeMap<String, u64>,
    /// Failed attempts by where the failing operation was: a directory kind,
    /// `obligation` (the obligation file) or `other`. Empty when read from a
    /// server that predates it.
    #[serde(default)]
    pub(crate) failures_by_site: BTreeMap<String, u64>,
    pub pending: u64,
    /// Duration of the last periodic pass, `null` before the first one.
    pub last_pass_duration_ms: Option<f64>,
    pub period_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionRow {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub committed_generation: u64,
    pub degraded: bool,
    pub obligation: Option<ObligationRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObligationRow {
    pub generation: u64,
    /// One of [`STATES`] other than `none`.
    pub state: String,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// Time until the reconciler retries; `null` when nothing is pending.
    pub next_attempt_in_ms: Option<u64>,
    pub stuck: bool,
    pub degraded: bool,
}

/// What the filters select.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub(crate) stream: Option<crate::identifier::Identifier>,
    pub(crate) topic: Option<crate::identifier::Identifier>,
    pub(crate) state: Option<String>,
}

impl Filter {
    pub(crate) fn from_query(query: &ApiQuery) -> ApiResult<Filter> {
        let state = match query.get("state") {
            None => None,
            Some(s) if STATES.contains(&s) => Some(s.to_string()),
            Some(other) => {
                return Err(ApiError::bad_request(
                    "state",
                    format!("state must be one of {}, got {other:?}", STATES.join(", ")),
                ));
            }
        };
        let topic = query
            .get("topic_id")
            .map(|t| identifier("topic_id", t))
            .transpose()?;
        let stream = query
            .get("stream_id")
            .map(|s| identifier("stream_id", s))
            .transpose()?;
        if topic.is_some() && stream.is_none() {
            return Err(ApiError::bad_request(
                "topic_id",
                "topic_id needs stream_id (topic ids are per stream)",
            ));
        }
        Ok(Filter {
            stream,
            topic,
            state,
        })
    }
}

/// Takes the snapshot (call inside one engine call).
pub fn snapshot(
    engine: &Engine,
    filter: &Filter,
    last_pass_us: Option<u64>,
    period_ms: u64,
) -> crate::error::Result<PurgeStatus> {
    let stream = filter
        .stream
        .as_ref()
        .map(|s| engine.resolve_stream(s))
        .transpose()?;
    let topic = match (&filter.stream, &filter.topic) {
        (Some(s), Some(t)) => Some(engine.resolve_topic(s, t)?.topic),
        _ => None,
    };
    let now_ms = SystemClock.now_micros() / 1000;
    let reconciler = engine.reconciler();
    let mut states: BTreeMap<String, u64> = STATES.iter().map(|s| (s.to_string(), 0)).collect();
    let (mut stuck, mut degraded) = (0, 0);
    let mut rows = Vec::new();
    for p in engine.partitions() {
        let key = p.key;
        if stream.is_some_and(|s| s != key.stream) || topic.is_some_and(|t| t != key.topic) {
            continue;
        }
        let is_degraded = p.degraded_reason().is_some();
        let pending = reconciler.status(ObligationKey::Purge(key));
        let obligation = p.obligation().map(|o| ObligationRow {
            generation: o.generation(),
            state: o.state().as_str().to_string(),
            attempts: o.attempts(),
            last_error: o
                .last_error()
                .map(str::to_string)
                .or_else(|| pending.and_then(|e| e.last_error.clone())),
            next_attempt_in_ms: pending.map(|e| e.next_attempt_at_ms.saturating_sub(now_ms)),
            stuck: pending.is_some_and(|e| e.stuck),
            degraded: is_degraded,
        });
        let state = obligation.as_ref().map_or("none", |o| o.state.as_str());
        if filter.state.as_deref().is_some_and(|f| f != state) {
            continue;
        }
        *states.entry(state.to_string()).or_default() += 1;
        if obligation.as_ref().is_some_and(|o| o.stuck) {
            stuck += 1;
        }
        if is_degraded {
            degraded += 1;
        }
        rows.push(PartitionRow {
            stream_id: key.stream,
            topic_id: key.topic,
            partition_id: key.partition,
            committed_generation: p.generation(),
            degraded: is_degraded,
            obligation,
        });
    }
    let stats = reconciler.stats();
    Ok(PurgeStatus {
        summary: Summary {
            partitions: rows.len() as u64,
            states,
            stuck,
            degraded,
            reconciler: ReconcilerSummary {
                passes: stats.passes,
                attempts: stats.attempts,
                failures: stats.failures,
                attempts_by_dir: DirKind::ALL
                    .iter()
                    .map(|d| (d.as_str().to_string(), stats.dir_attempts(*d)))
                    .collect(),
                failures_by_site: FailureSite::ALL
                    .iter()
                    .map(|f| (f.as_str().to_string(), stats.site_failures(*f)))
                    .collect(),
                pending: reconciler.pending_purges().count() as u64,
                last_pass_duration_ms: last_pass_us.map(|us| us as f64 / 1000.0),
                period_ms,
            },
        },
        partitions: rows,
    })
}

/// Keeps `PurgeState` and the state names above in step.
#[cfg(test)]
pub(crate) fn state_name(state: PurgeState) -> &'static str {
    state.as_str()
}

pub(crate) async fn purge_status(
    State(state): State<AppState>,
    State(metrics): State<Arc<Metrics>>,
    query: ApiQuery,
) -> ApiResult<Json<PurgeStatus>> {
    let filter = Filter::from_query(&query)?;
    let last = metrics.last_pass_micros.load(Ordering::Relaxed);
    let last = (last != u64::MAX).then_some(last);
    let period_ms = u64::try_from(state.limits.reconciler_period.as_millis()).unwrap_or(u64::MAX);
    let status = state
        .engine(move |e| Ok(snapshot(e, &filter, last, period_ms)?))
        .await?;
    Ok(Json(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_every_purge_state_when_named_then_the_filter_accepts_it() {
        for s in [
            PurgeState::Requested,
            PurgeState::FilesDeleted,
            PurgeState::DirsSynced,
            PurgeState::Applied,
        ] {
            assert!(STATES.contains(&state_name(s)));
        }
    }

    #[test]
    fn given_a_status_answer_when_read_back_then_it_serialises_to_the_same_bytes() {
        // Given an answer with every field set, as the endpoint sends it.
        let row = |partition_id, obligation| PartitionRow {
            stream_id: 1,
            topic_id: 2,
            partition_id,
            committed_generation: 3,
            degraded: false,
            obligation,
        };
        let status = PurgeStatus {
            summary: Summary {
                partitions: 2,
                states: STATES.iter().map(|s| (s.to_string(), 1)).collect(),
                stuck: 1,
                degraded: 0,
                reconciler: ReconcilerSummary {
                    passes: 7,
                    attempts: 3,
                    failures: 2,
                    attempts_by_dir: DirKind::ALL
                        .iter()
                        .map(|d| (d.as_str().to_string(), 4))
                        .collect(),
                    failures_by_site: FailureSite::ALL
                        .iter()
                        .map(|f| (f.as_str().to_string(), 5))
                        .collect(),
                    pending: 1,
                    last_pass_duration_ms: Some(0.25),
                    period_ms: 1000,
                },
            },
            partitions: vec![
                row(0, None),
                row(
                    1,
                    Some(ObligationRow {
                        generation: 3,
                        state: state_name(PurgeState::Requested).to_string(),
                        attempts: 2,
                        last_error: Some("EIO, injected fault".to_string()),
                        next_attempt_in_ms: Some(400),
                        stuck: true,
                        degraded: false,
                    }),
                ),
            ],
        };
        let sent = serde_json::to_string(&status).unwrap();
        // When a client deserialises it into the same types and serialises
        // it again, then nothing is lost or reordered.
        let read: PurgeStatus = serde_json::from_str(&sent).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), sent);
    }
}
