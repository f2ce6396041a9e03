//! `GET /metrics`: Prometheus (OpenMetrics) text, encoded by `prometheus-client`.
//!
//! Exposed:
//! - `sluice_purge_obligations{state}`: partitions per obligation state
//!   (`none`: never purged); `sluice_purge_stuck_partitions`,
//!   `sluice_degraded_partitions`, `sluice_reconciler_pending`.
//! - `sluice_purge_cleanup_attempts_total`, `sluice_purge_cleanup_failures_total`;
//!   per directory kind, `sluice_purge_cleanup_dir_attempts_total{dir}`
//!   (attempts that removed a file from or synced `segments`, `consumers` or
//!   `groups`) and `sluice_purge_cleanup_site_failures_total{site}` (failed
//!   attempts by where the failing operation was: a directory kind,
//!   `obligation` or `other`).
//! - `sluice_obligations{kind, state}`: pending cleanup obligations of every
//!   kind (`purge`, `delete`, `retention`) per state, as `/status/obligations` lists them.
//! - `sluice_recovery_stale_records_total`: records of purged generations
//!   ignored when this process started.
//! - `sluice_reconciler_passes_total`, `sluice_reconciler_pass_duration_seconds`
//!   (histogram of the periodic passes).
//! - `sluice_http_requests_total{route, method, status}`.
//! - The bounded pool of open files (ADR 0018): `sluice_open_files` (data
//!   files open now), `sluice_open_files_limit` (the configured bound),
//!   `sluice_open_files_pinned` (open files the pool may not close: their
//!   name was replaced or removed), `sluice_file_evictions_total` (files
//!   closed to make room), `sluice_file_eviction_syncs_total` and
//!   `sluice_file_eviction_sync_failures_total` (closed with unsynced writes,
//!   synced first; a failure is reported to the file's next sync),
//!   `sluice_file_reopens_total`, `sluice_file_refusals_total` (renames and
//!   removals refused because a file at the name could not be opened again
//!   first; they changed nothing and their owner retries them).
//! - The remote tier (ADR 0027), when one is attached:
//!   `sluice_tier_uploads_total`, `sluice_tier_uploaded_bytes_total`,
//!   `sluice_tier_failed_uploads_total`, `sluice_tier_deleted_objects_total`,
//!   `sluice_tier_rounds_applied_total`, `sluice_tier_remote_errors_total`,
//!   `sluice_tier_pending_uploads` (sealed local segments with no remote copy
//!   yet), `sluice_tier_cache_hits_total`, `sluice_tier_cache_misses_total`,
//!   `sluice_tier_cache_bytes`.
//!
//! Invariants:
//! - Engine figures are read in one engine call per scrape, then encoded, so a
//!   scrape is one consistent snapshot and never holds the engine while
//!   formatting.
//! - Route labels are the matched route template (`/streams/{stream_id}`),
//!   never the raw path, so label cardinality is bounded by the route table.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::status::{Filter, snapshot};
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HttpLabels {
    pub(crate) route: String,
    pub(crate) method: String,
    pub(crate) status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindStateLabel {
    kind: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabel {
    dir: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteLabel {
    site: String,
}

/// Engine figures as of the last scrape.
#[derive(Debug, Default, Clone)]
struct EngineView {
    states: BTreeMap<String, u64>,
    stuck: u64,
    degraded: u64,
    pending: u64,
    attempts: u64,
    failures: u64,
    attempts_by_dir: BTreeMap<String, u64>,
    failures_by_site: BTreeMap<String, u64>,
    passes: u64,
    /// Pending obligations per `kind/state`.
    obligations: BTreeMap<String, u64>,
    /// The file pool's counters, when the engine has one.
    files: Option<sluice_storage::PoolStats>,
    /// The remote tier's counters and pending uploads, when one is attached.
    tier: Option<(crate::engine::TierFigures, u64)>,
}

#[derive(Debug)]
struct EngineCollector {
    view: Arc<Mutex<EngineView>>,
    stale_records_at_recovery: u64,
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(m)
}

/// One counter family with a single label.
fn counter_family<L: EncodeLabelSet + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family =
        encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for (labels, n) in values {
        ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let view = self
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        {
            let g = ConstGauge::new(0i64);
            let mut family = encoder.encode_descriptor(
                "sluice_purge_obligations",
                "Partitions per purge obligation state (none: never purged)",
                None,
                g.metric_type(),
            )?;
            for (state, n) in &view.states {
                let labels = StateLabel {
                    state: state.clone(),
                };
                ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let g = ConstGauge::new(0i64);
            let mut family = encoder.encode_descriptor(
                "sluice_obligations",
                "Pending cleanup obligations per kind (purge, delete, retention) and state",
                None,
                g.metric_type(),
            )?;
            for (kind_state, n) in &view.obligations {
                let (kind, state) = kind_state.split_once('/').unwrap_or((kind_state, ""));
                let labels = KindStateLabel {
                    kind: kind.to_string(),
                    state: state.to_string(),
                };
                ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        gauge(
            &mut encoder,
            "sluice_purge_stuck_partitions",
            "Partitions whose purge cleanup is flagged stuck",
            view.stuck,
        )?;
        gauge(
            &mut encoder,
            "sluice_degraded_partitions",
            "Partitions that refuse service because recovery could not trust their files",
            view.degraded,
        )?;
        gauge(
            &mut encoder,
            "sluice_reconciler_pending",
            "Partitions whose purge cleanup is not yet applied",
            view.pending,
        )?;
        counter(
            &mut encoder,
            "sluice_purge_cleanup_attempts",
            "Purge cleanup attempts since start",
            view.attempts,
        )?;
        counter(
            &mut encoder,
            "sluice_purge_cleanup_failures",
            "Failed purge cleanup attempts since start",
            view.failures,
        )?;
        counter_family(
            &mut encoder,
            "sluice_purge_cleanup_dir_attempts",
            "Purge cleanup attempts that removed a file from or synced each directory kind",
            view.attempts_by_dir
                .iter()
                .map(|(d, n)| (DirLabel { dir: d.clone() }, *n)),
        )?;
        counter_family(
            &mut encoder,
            "sluice_purge_cleanup_site_failures",
            "Failed purge cleanup attempts by where the failing operation was",
            view.failures_by_site
                .iter()
                .map(|(site, n)| (SiteLabel { site: site.clone() }, *n)),
        )?;
        counter(
            &mut encoder,
            "sluice_reconciler_passes",
            "Reconciler passes since start",
            view.passes,
        )?;
        counter(
            &mut encoder,
            "sluice_recovery_stale_records",
            "Records of purged generations ignored by recovery at start-up",
            self.stale_records_at_recovery,
        )?;
        if let Some((tier, pending)) = view.tier {
            for (name, help, value) in [
                (
                    "sluice_tier_uploads",
                    "Segments uploaded to the remote tier",
                    tier.uploads,
                ),
                (
                    "sluice_tier_uploaded_bytes",
                    "Bytes uploaded to the remote tier (segments and indexes)",
                    tier.uploaded_bytes,
                ),
                (
                    "sluice_tier_failed_uploads",
                    "Upload attempts that failed (their keys are doomed, a new attempt follows)",
                    tier.failed_uploads,
                ),
                (
                    "sluice_tier_deleted_objects",
                    "Remote objects deleted by deletion rounds",
                    tier.deleted_objects,
                ),
                (
                    "sluice_tier_rounds_applied",
                    "Remote deletion rounds applied",
                    tier.rounds_applied,
                ),
                (
                    "sluice_tier_remote_errors",
                    "Remote calls that failed",
                    tier.remote_errors,
                ),
                (
                    "sluice_tier_cache_hits",
                    "Remote reads served by the block cache",
                    tier.cache.hits,
                ),
                (
                    "sluice_tier_cache_misses",
                    "Remote reads that fetched a block",
                    tier.cache.misses,
                ),
            ] {
                counter(&mut encoder, name, help, value)?;
            }
            gauge(
                &mut encoder,
                "sluice_tier_pending_uploads",
                "Sealed local segments of tiered topics with no remote copy yet",
                pending,
            )?;
            gauge(
                &mut encoder,
                "sluice_tier_cache_bytes",
                "Bytes of remote blocks cached",
                tier.cache.bytes,
            )?;
        }
        if let Some(files) = view.files {
            gauge(
                &mut encoder,
                "sluice_open_files",
                "Data files open now (the bounded file pool)",
                files.open,
            )?;
            gauge(
                &mut encoder,
                "sluice_open_files_limit",
                "The most data files open at once ([files] max_open)",
                files.bound,
            )?;
            gauge(
                &mut encoder,
                "sluice_open_files_pinned",
                "Open data files the pool may not close (renamed over or removed while open)",
                files.pinned,
            )?;
            counter(
                &mut encoder,
                "sluice_file_evictions",
                "Data files closed to stay within the bound",
                files.evictions,
            )?;
            counter(
                &mut encoder,
                "sluice_file_eviction_syncs",
                "Evicted files that had unsynced writes and were synced before closing",
                files.eviction_syncs,
            )?;
            counter(
                &mut encoder,
                "sluice_file_eviction_sync_failures",
                "Syncs before an eviction that failed (reported to the file's next sync)",
                files.eviction_sync_failures,
            )?;
            counter(
                &mut encoder,
                "sluice_file_reopens",
                "Evicted data files opened again",
                files.reopens,
            )?;
            counter(
                &mut encoder,
                "sluice_file_refusals",
                "Renames and removals refused: a file at the name could not be opened again first",
                files.refusals,
            )?;
        }
        Ok(())
    }
}

/// The registry and the metrics the server updates as it runs.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    http_requests: Family<HttpLabels, Counter>,
    pass_duration: Histogram,
    view: Arc<Mutex<EngineView>>,
    /// Duration of the last periodic reconciler pass (µs); `u64::MAX` before the first.
    pub(crate) last_pass_micros: AtomicU64,
}

impl Metrics {
    pub(crate) fn new(stale_records_at_recovery: u64) -> Metrics {
        let mut registry = Registry::default();
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "sluice_http_requests",
            "HTTP requests by route template, method and status",
            http_requests.clone(),
        );
        let pass_duration = Histogram::new(exponential_buckets(0.0001, 4.0, 10));
        registry.register(
            "sluice_reconciler_pass_duration_seconds",
            "Duration of the periodic reconciler passes",
            pass_duration.clone(),
        );
        let view = Arc::new(Mutex::new(EngineView::default()));
        registry.register_collector(Box::new(EngineCollector {
            view: view.clone(),
            stale_records_at_recovery,
        }));
        Metrics {
            registry,
            http_requests,
            pass_duration,
            view,
            last_pass_micros: AtomicU64::new(u64::MAX),
        }
    }

    pub(crate) fn record_pass(&self, took: Duration) {
        self.pass_duration.observe(took.as_secs_f64());
        self.last_pass_micros.store(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX - 1),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn record_request(&self, route: String, method: String, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels {
                route,
                method,
                status,
            })
            .inc();
    }

    /// Encodes every metric as OpenMetrics text.
    pub(crate) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Middleware counting every request by route template and status.
pub(crate) async fn track(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().to_string();
    let response = next.run(req).await;
    metrics.record_request(route, method, response.status().as_u16());
    response
}

/// `GET /metrics`.
pub(crate) async fn scrape(
    State(state): State<AppState>,
    State(metrics): State<Arc<Metrics>>,
) -> ApiResult<Response> {
    let (status, obligations, files, tier) = state
        .engine(|e| {
            Ok((
                snapshot(e, &Filter::default(), None, 0)?,
                super::obligations::snapshot(e, None),
                e.file_pool_stats(),
                e.tier_figures().map(|f| (f, e.pending_uploads())),
            ))
        })
        .await?;
    {
        let mut view = metrics
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let r = &status.summary.reconciler;
        *view = EngineView {
            states: status.summary.states.clone(),
            stuck: status.summary.stuck,
            degraded: status.summary.degraded,
            pending: r.pending,
            attempts: r.attempts,
            failures: r.failures,
            attempts_by_dir: r.attempts_by_dir.clone(),
            failures_by_site: r.failures_by_site.clone(),
            passes: r.passes,
            obligations: obligations.summary.by_state,
            files,
            tier,
        };
    }
    let text = metrics
        .encode()
        .map_err(|e| ApiError::internal(format!("metrics did not encode: {e}")))?;
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(response)
}
