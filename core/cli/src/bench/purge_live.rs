//! Scenario 1b, a topic purge as a client of the real server sees it (issue
//! 16): how long the purge call takes to answer, how long until its cleanup
//! is done, and what the cleanup does to sends and polls of another topic.
//!
//! Invariants:
//! - The server is `sluice server`'s own (`server::start`, in this process,
//!   on loopback, on the disk, through the Iggy HTTP API), with the bench's
//!   reconciler settings. Its reconciler task runs passes on the blocking
//!   pool through the same engine lock as every request, as in production,
//!   so whatever the engine does under that lock (today the commit, the
//!   obligations and the first cleanup pass inside the purge call; perhaps
//!   later only the commit, with cleanup off the lock) is what is measured.
//!   Nothing here assumes either.
//! - The data set has the purge scenario's shape (`purge::fill_topic`): a
//!   topic of `live_purge_partitions` partitions, and a buffered
//!   one-partition topic `other` holding `PREFILL_BATCHES` batches. It is
//!   built with syncs skipped, flushed, then served with every sync on.
//! - One send loop and one poll loop (batches of `BATCH` × 1 KiB on
//!   `other`, one request due every `EVERY`, one in flight) and a status
//!   poller (every `STATUS_EVERY`) run without a break from before the
//!   first window to after the last, so the no-purge window and the purge
//!   window differ only by the purge. A request's latency counts from when
//!   it was due, not from when the loop got to send it: a stall then
//!   counts once for every request it held back, as it would for clients
//!   sending at that rate (a closed loop would count it once); a request
//!   sent on time counts from when it was sent. A request
//!   counts in the no-purge window if it lies wholly inside it, in the
//!   purge window if it overlaps it (from the purge call to the first
//!   status, asked after the call answered, that shows no purge pending).
//! - Only the measured windows matter: the server is not stopped
//!   gracefully (its final flush is not measured), and the data set is
//!   removed with the benchmark directory.
//! - References, all measured in this run: the p99s of the no-purge window;
//!   for the purge call, the median of `COMMITS` topic updates over the
//!   same HTTP path under the same load, each costing one metadata commit
//!   (encode, write, sync, rename, directory sync of the same metadata) and
//!   nothing else, with a bare replace of a file of the metadata's size
//!   printed next to it; for the wall time, the raw syncs the cleanup
//!   issued (counted by `CountingStorage` under the server).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sluice_server::config::{ReconcilerSettings, ServerConfig};
use sluice_server::http::auth::RootSource;
use sluice_server::partition::log::NewMessage;
use sluice_server::server::{self, RunningServer, ServeOptions};
use sluice_server::{Identifier, Partitioning};
use sluice_storage::{DurableStorage, OpenMode};
use tokio::sync::watch;

use super::counting::{CountingStorage, Counts};
use super::purge::{self, BIG, STREAM};
use super::{BenchError, Ctx, Figure, Result, Target, flush_fs, quantile, reference};

/// The topic sent to and polled while the other one is purged.
const OTHER: &str = "other";
/// Messages per send and per poll.
const BATCH: u64 = 10;
const MESSAGE_BYTES: usize = 1024;
/// Batches `other` holds before the load starts (polls cycle over them).
const PREFILL_BATCHES: u64 = 100;
/// Each load loop has one request due every `EVERY` (one in flight: a late
/// answer makes the next requests due at once, back to back).
const EVERY: Duration = Duration::from_millis(2);
/// Topic updates (metadata commits) timed for the purge call's reference.
const COMMITS: usize = 15;
/// How often the status poller asks whether a purge is pending.
const STATUS_EVERY: Duration = Duration::from_millis(20);
/// Before the first window: connections opened, loops running.
const WARM_UP: Duration = Duration::from_millis(300);
/// Between the commit window and the purge: the last commit's wake settles.
const GAP: Duration = Duration::from_millis(100);
/// At most this many raw syncs are timed for the wall time's reference; a
/// larger count is scaled from their mean (said in the reference).
const RAW_SYNC_SAMPLE: u64 = 1000;
/// A purge not done after this long fails the run.
const PURGE_TIMEOUT: Duration = Duration::from_secs(3600);

fn http(e: impl std::fmt::Display) -> BenchError {
    BenchError::Http(e.to_string())
}

async fn call(req: reqwest::RequestBuilder) -> Result<Value> {
    let r = req.send().await.map_err(http)?;
    let status = r.status();
    let text = r.text().await.map_err(http)?;
    if !status.is_success() {
        return Err(BenchError::Http(format!("{status}: {text}")));
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// One request of a load loop: when it started to count (`held_since`: when
/// it was due if a slow answer held it back, so a stall counts once for
/// every request it held back, not once for the request it caught), and
/// when its answer was read.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Instant,
    end: Instant,
}

impl Sample {
    fn ms(self) -> f64 {
        (self.end - self.start).as_secs_f64() * 1e3
    }
    fn within(self, from: Instant, to: Instant) -> bool {
        self.start >= from && self.end <= to
    }
    fn overlaps(self, from: Instant, to: Instant) -> bool {
        self.start < to && self.end > from
    }
}

/// Latencies (ms) of the samples `keep` selects.
fn latencies(samples: &[Sample], keep: impl Fn(Sample) -> bool) -> Vec<f64> {
    samples
        .iter()
        .copied()
        .filter(|s| keep(*s))
        .map(Sample::ms)
        .collect()
}

/// What one run against the server measured.
struct Measured {
    started_s: f64,
    sends: Vec<Sample>,
    polls: Vec<Sample>,
    /// Each status question, and how many purges its answer had pending.
    status: Vec<(Sample, u64)>,
    baseline: (Instant, Instant),
    purge: (Instant, Instant),
    call_s: f64,
    commit_ms: Vec<f64>,
    raw_commit_ms: Vec<f64>,
    metadata_bytes: u64,
    baseline_syncs: Counts,
    purge_syncs: Counts,
}

pub fn run(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let partitions = ctx.sizes.live_purge_partitions;
    let wanted = ctx.sizes.offsets_per_kind;
    let per = offsets_that_fit(partitions, wanted);
    if per < wanted {
        ctx.note(format!(
            "purge under load: {per} consumer and {per} group offsets per partition instead of {wanted} (open files limit)"
        ));
    }
    let base = ctx.dir("purge-live")?;
    let data = base.join("data");
    let started = Instant::now();
    build(ctx, &data, partitions, per)?;
    let built_s = started.elapsed().as_secs_f64();
    tracing::info!(
        took_s = built_s,
        partitions,
        per,
        "purge-under-load data set built"
    );

    let storage = CountingStorage::new(ctx.disk.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(http)?;
    let baseline = Duration::from_millis(ctx.sizes.live_baseline_ms);
    let served = Instant::now();
    let m = runtime.block_on(measure(
        data.clone(),
        storage,
        ctx.disk.clone(),
        ctx.reconciler.clone(),
        baseline,
        ctx.dir("purge-live-commit-ref")?,
    ));
    runtime.shutdown_timeout(Duration::from_secs(60));
    let m = m?;
    let served_s = served.elapsed().as_secs_f64();

    // The wall time's reference on the disk alone, after the server stopped.
    let refs = Instant::now();
    let total_syncs = m.purge_syncs.file_syncs + m.purge_syncs.dir_syncs;
    let (raw_s, sampled) = sampled_raw_syncs(
        ctx.disk.as_ref(),
        &ctx.dir("purge-live-sync-ref")?,
        m.purge_syncs,
    )?;
    let refs_s = refs.elapsed().as_secs_f64();
    ctx.note(format!(
        "purge under load took: {built_s:.1} s building the data set, {:.1} s starting the server (recovery), {:.1} s serving the windows, {refs_s:.1} s of raw syncs (its files are removed with the benchmark directory)",
        m.started_s,
        served_s - m.started_s,
    ));

    let (b0, b1) = m.baseline;
    let (p0, p1) = m.purge;
    let wall = (p1 - p0).as_secs_f64();
    let mut base_send = latencies(&m.sends, |s| s.within(b0, b1));
    let mut base_poll = latencies(&m.polls, |s| s.within(b0, b1));
    let mut purge_send = latencies(&m.sends, |s| s.overlaps(p0, p1));
    let mut purge_poll = latencies(&m.polls, |s| s.overlaps(p0, p1));
    let mut commit_ms = m.commit_ms.clone();
    let commit = quantile(&mut commit_ms, 0.5);
    let mut raw_commit_ms = m.raw_commit_ms.clone();
    let raw_commit = quantile(&mut raw_commit_ms, 0.5);
    let metadata_bytes = m.metadata_bytes;
    let (commit_min, commit_max) = (
        commit_ms.first().copied().unwrap_or(0.0),
        commit_ms.last().copied().unwrap_or(0.0),
    );
    let window = format!(
        "the purge window is {wall:.3} s (call to the first status, asked after the call answered, showing none pending; status asked every {} ms in both windows), the no-purge window {:.1} s",
        STATUS_EVERY.as_millis(),
        (b1 - b0).as_secs_f64()
    );
    let mut figures = vec![
        Figure::new(
            "purge.call_latency_s",
            format!("purge call (HTTP DELETE) of a {partitions}-partition topic, under load"),
            m.call_s,
            "s",
            commit / 1e3,
            "1 metadata commit: topic update over HTTP",
        )
        .target(Target::AtMost(2.0))
        .detail(format!(
            "reference: median of {COMMITS} `PUT /streams/{STREAM}/topics/{OTHER}` under the same send/poll load (min {commit_min:.3}, max {commit_max:.3} ms), each one metadata commit of the same {metadata_bytes} B metadata and nothing else; a bare replace of a {metadata_bytes} B file (write, fsync, rename, dir fsync), timed after each of them: median {raw_commit:.3} ms"
        )),
    ];
    for (key, what, during, before) in [
        (
            "purge.other_topic_send_p99_ms",
            "send",
            &mut purge_send,
            &mut base_send,
        ),
        (
            "purge.other_topic_poll_p99_ms",
            "poll",
            &mut purge_poll,
            &mut base_poll,
        ),
    ] {
        let (n_during, n_before) = (during.len(), before.len());
        let p99 = quantile(during, 0.99);
        let p50 = quantile(during, 0.5);
        let max = during.last().copied().unwrap_or(0.0);
        let ref_p99 = quantile(before, 0.99);
        let ref_p50 = quantile(before, 0.5);
        let ref_max = before.last().copied().unwrap_or(0.0);
        figures.push(
            Figure::new(
                key,
                format!("{what} p99 to another topic while the purge cleans"),
                p99,
                "ms",
                ref_p99,
                format!("the same {what} p99, no purge running"),
            )
            .target(Target::AtMost(1.2))
            .detail(format!(
                "{n_during} {what}s overlapping the purge vs {n_before} with none (batches of {BATCH} x {MESSAGE_BYTES} B to a buffered one-partition topic over HTTP, one due every {} ms, 1 in flight, latency from when it was due if an earlier answer held it back); p50 {p50:.3} vs {ref_p50:.3} ms, max {max:.3} vs {ref_max:.3} ms; {window}",
                EVERY.as_millis()
            )),
        );
    }
    let mut status_ms: Vec<f64> = m
        .status
        .iter()
        .filter(|(_, pending)| *pending > 0)
        .map(|(s, _)| s.ms())
        .collect();
    let status_n = status_ms.len();
    let status_p50 = quantile(&mut status_ms, 0.5);
    let status_max = status_ms.last().copied().unwrap_or(0.0);
    let sample_note = if sampled < total_syncs {
        format!(" ({sampled} timed, scaled)")
    } else {
        String::new()
    };
    figures.push(
        Figure::new(
            "purge.server_topic_wall_s",
            format!("purge a {partitions}-partition topic on the server, call to none pending"),
            wall,
            "s",
            raw_s,
            format!(
                "{} file + {} dir raw syncs{sample_note}, one thread",
                m.purge_syncs.file_syncs, m.purge_syncs.dir_syncs
            ),
        )
        .target(Target::AtMost(1.5))
        .detail(format!(
            "the real server's reconciler (period {} ms, concurrency {}), under the send/poll load; the call answered after {:.3} s; {:.0} µs per raw sync; the load and the status poller issued {} syncs in the no-purge window; status answers with a purge pending: {status_n}, p50 {status_p50:.3} ms, max {status_max:.3} ms (each one engine call listing the pending obligations)",
            ctx.reconciler.period.as_millis(),
            ctx.reconciler.concurrency,
            m.call_s,
            raw_s * 1e6 / total_syncs.max(1) as f64,
            m.baseline_syncs.file_syncs + m.baseline_syncs.dir_syncs,
        )),
    );
    ctx.note(format!(
        "purge under load: `sluice server` in this process on {partitions} + 1 partitions ({per} consumer and {per} group offsets each); purge.call_latency_s's reference is one metadata commit as the same client sees it (a topic update), purge.other_topic_*_p99_ms's the same loop's p99 with no purge running, purge.server_topic_wall_s's the raw syncs the cleanup issued"
    ));
    Ok(figures)
}

/// Offsets per kind (at most `wanted`) whose open files fit the open files
/// limit with `partitions` partitions served (raised first where allowed).
fn offsets_that_fit(partitions: u32, wanted: u32) -> u32 {
    let p = u64::from(partitions) + 1;
    let want = p * (2 * u64::from(wanted) + super::FDS_PER_PARTITION) + super::FDS_SPARE;
    let limit = super::raise_open_files_limit(want);
    let fit = limit.saturating_sub(super::FDS_SPARE + p * super::FDS_PER_PARTITION) / (2 * p);
    u32::try_from(fit.clamp(1, u64::from(wanted.max(1)))).unwrap_or(1)
}

/// The data set: `BIG` as the purge scenario builds it, and `OTHER`.
fn build(ctx: &Ctx, data: &Path, partitions: u32, per: u32) -> Result<()> {
    let storage = CountingStorage::new(ctx.disk.clone());
    storage.set_skip_syncs(true);
    let mut engine = purge::open(ctx, &storage, data)?;
    engine.create_stream(None, STREAM)?;
    purge::fill_topic(&mut engine, BIG, partitions, per)?;
    purge::fill_topic(&mut engine, OTHER, 1, 0)?;
    let (stream, topic) = (Identifier::from(STREAM), Identifier::from(OTHER));
    for b in 0..PREFILL_BATCHES {
        let batch = (0..BATCH)
            .map(|i| NewMessage::new(vec![(b + i) as u8; MESSAGE_BYTES]))
            .collect();
        engine.send(&stream, &topic, &Partitioning::PartitionId(0), batch)?;
    }
    drop(engine);
    flush_fs(data)
}

/// Starts the server on `data`, measures, stops it.
async fn measure(
    data: PathBuf,
    storage: CountingStorage,
    disk: Arc<dyn DurableStorage>,
    reconciler: ReconcilerSettings,
    baseline: Duration,
    ref_dir: PathBuf,
) -> Result<Measured> {
    let started = Instant::now();
    let metadata = data.join("metadata");
    let mut config = ServerConfig {
        data_dir: data,
        ..ServerConfig::default()
    };
    config.http.address = ([127, 0, 0, 1], 0).into();
    config.tcp.address = ([127, 0, 0, 1], 0).into();
    config.reconciler = reconciler;
    let server = server::start(
        Arc::new(storage.clone()),
        ServeOptions {
            config,
            root: RootSource::DefaultIggy,
            seed: 6,
        },
    )
    .await
    .map_err(http)?;
    let started_s = started.elapsed().as_secs_f64();
    tracing::info!(took_s = started_s, "purge under load: server started");
    let measured = drive(
        &server,
        &storage,
        baseline,
        Reference {
            disk,
            dir: ref_dir,
            metadata,
        },
    )
    .await;
    // Not `shutdown()`: a graceful stop syncs every partition's files
    // (`sync_all`, seconds for a thousand partitions on a slow disk), which
    // nothing here measures and the discarded data set does not need. The
    // caller drops the runtime, and with it the server and its engine.
    let _ = server.stopper().send(true);
    let measured = measured?;
    Ok(Measured {
        started_s,
        ..measured
    })
}

/// Where and on what the bare metadata replaces run, and the file whose
/// size they copy.
struct Reference {
    disk: Arc<dyn DurableStorage>,
    dir: PathBuf,
    metadata: PathBuf,
}

async fn drive(
    server: &RunningServer,
    storage: &CountingStorage,
    baseline: Duration,
    reference: Reference,
) -> Result<Measured> {
    let Reference {
        disk,
        dir: ref_dir,
        metadata,
    } = reference;
    let base = format!("http://{}", server.local_addr);
    let client = reqwest::Client::new();
    let token = crate::login::login_default_root(&client, &base)
        .await
        .map_err(http)?;
    let topic_url = format!("{base}/streams/{STREAM}/topics/{OTHER}");
    let messages_url = format!("{topic_url}/messages");
    let stop = Arc::new(AtomicBool::new(false));
    let (until_tx, until) = watch::channel(None::<Instant>);
    let (status_tx, mut status_rx) = watch::channel(None::<(Instant, u64)>);
    let sender = tokio::spawn(send_loop(
        client.clone(),
        messages_url.clone(),
        token.clone(),
        until.clone(),
    ));
    let poller = tokio::spawn(poll_loop(
        client.clone(),
        messages_url,
        token.clone(),
        until,
    ));
    let status = tokio::spawn(status_loop(
        client.clone(),
        format!("{base}/status/obligations?kind=purge"),
        token.clone(),
        stop.clone(),
        status_tx,
    ));
    let windows = async {
        tokio::time::sleep(WARM_UP).await;
        // No purge: the load alone.
        let syncs = storage.counts();
        let b0 = Instant::now();
        tokio::time::sleep(baseline).await;
        let b1 = Instant::now();
        let baseline_syncs = storage.counts().since(syncs);
        // One metadata commit at a time, each followed by a bare replace of
        // a file of the metadata's size (this window's samples are unused).
        let mut commit_ms = Vec::with_capacity(COMMITS);
        let mut raw_commit_ms = Vec::with_capacity(COMMITS);
        let mut metadata_bytes = 0;
        for _ in 0..COMMITS {
            let t0 = Instant::now();
            call(
                client
                    .put(&topic_url)
                    .bearer_auth(&token)
                    .json(&json!({ "name": OTHER })),
            )
            .await?;
            commit_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            metadata_bytes = std::fs::metadata(&metadata)
                .map_err(|e| BenchError::io(metadata.display().to_string(), e))?
                .len();
            let (disk, dir) = (disk.clone(), ref_dir.clone());
            let bytes =
                usize::try_from(metadata_bytes).map_err(|e| BenchError::io("metadata size", e))?;
            raw_commit_ms.push(
                tokio::task::spawn_blocking(move || raw_replace(disk.as_ref(), &dir, bytes))
                    .await
                    .map_err(http)??,
            );
        }
        tokio::time::sleep(GAP).await;
        // The purge, until the server says none is pending.
        let syncs = storage.counts();
        let p0 = Instant::now();
        call(
            client
                .delete(format!("{base}/streams/{STREAM}/topics/{BIG}/purge"))
                .bearer_auth(&token),
        )
        .await?;
        let answered = Instant::now();
        let done = tokio::time::timeout(
            PURGE_TIMEOUT,
            status_rx
                .wait_for(|s| s.is_some_and(|(asked, pending)| asked >= answered && pending == 0)),
        )
        .await;
        let p1 = Instant::now();
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err(BenchError::Http("the status poller stopped".into())),
            Err(_) => {
                return Err(BenchError::Http(format!(
                    "the purge was still pending after {} s",
                    PURGE_TIMEOUT.as_secs()
                )));
            }
        }
        let purge_syncs = storage.counts().since(syncs);
        tracing::info!(
            baseline_s = (b1 - b0).as_secs_f64(),
            commits_s = (p0 - b1).as_secs_f64(),
            purge_s = (p1 - p0).as_secs_f64(),
            "purge under load: windows done"
        );
        Ok::<_, BenchError>((
            (b0, b1),
            (p0, p1),
            (answered - p0).as_secs_f64(),
            commit_ms,
            raw_commit_ms,
            metadata_bytes,
            baseline_syncs,
            purge_syncs,
        ))
    }
    .await;
    // The loops still send every request that came due before now (those a
    // stall held back are the point), then stop.
    until_tx.send_replace(Some(Instant::now()));
    let stopping = Instant::now();
    let sends = sender.await.map_err(http);
    let polls = poller.await.map_err(http);
    stop.store(true, Ordering::Relaxed);
    let status_polls = status.await.map_err(http);
    tracing::info!(
        took_s = stopping.elapsed().as_secs_f64(),
        "purge under load: load stopped"
    );
    let (
        baseline,
        purge,
        call_s,
        commit_ms,
        raw_commit_ms,
        metadata_bytes,
        baseline_syncs,
        purge_syncs,
    ) = windows?;
    Ok(Measured {
        started_s: 0.0,
        sends: sends??,
        polls: polls??,
        status: status_polls??,
        baseline,
        purge,
        call_s,
        commit_ms,
        raw_commit_ms,
        metadata_bytes,
        baseline_syncs,
        purge_syncs,
    })
}

/// Sends batches to `OTHER`, one due every `EVERY`, until a request would
/// be due at `until` or later.
async fn send_loop(
    client: reqwest::Client,
    url: String,
    token: String,
    until: watch::Receiver<Option<Instant>>,
) -> Result<Vec<Sample>> {
    let messages: Vec<Value> = (0..BATCH)
        .map(|i| json!({ "payload": STANDARD.encode(vec![i as u8; MESSAGE_BYTES]) }))
        .collect();
    let body = serde_json::to_vec(&json!({
        "partitioning": { "kind": "balanced", "value": "" },
        "messages": messages,
    }))
    .map_err(http)?;
    let mut ticks = paced();
    let mut out = Vec::new();
    let mut last_end = Instant::now();
    loop {
        let due = ticks.tick().await.into_std();
        if until.borrow().is_some_and(|end| due >= end) {
            break;
        }
        let start = held_since(due, last_end);
        call(
            client
                .post(&url)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body.clone()),
        )
        .await?;
        last_end = Instant::now();
        out.push(Sample {
            start,
            end: last_end,
        });
    }
    Ok(out)
}

/// Polls `OTHER` by offset over its prefilled batches, one due every
/// `EVERY`, until a request would be due at `until` or later.
async fn poll_loop(
    client: reqwest::Client,
    url: String,
    token: String,
    until: watch::Receiver<Option<Instant>>,
) -> Result<Vec<Sample>> {
    let mut ticks = paced();
    let mut out = Vec::new();
    let mut i = 0u64;
    let mut last_end = Instant::now();
    loop {
        let due = ticks.tick().await.into_std();
        if until.borrow().is_some_and(|end| due >= end) {
            break;
        }
        let start = held_since(due, last_end);
        let offset = (i % PREFILL_BATCHES) * BATCH;
        i += 1;
        let v = call(
            client
                .get(format!(
                    "{url}?consumer_id=1&partition_id=0&kind=offset&value={offset}&count={BATCH}"
                ))
                .bearer_auth(&token),
        )
        .await?;
        let end = Instant::now();
        last_end = end;
        if v["messages"].as_array().is_none_or(|a| a.is_empty()) {
            return Err(BenchError::Http(format!(
                "poll at {offset} of {OTHER} returned nothing"
            )));
        }
        out.push(Sample { start, end });
    }
    Ok(out)
}

/// When a request due at `due` starts to count: at `due` if the previous
/// answer (read at `last_end`) came after it, i.e. a slow answer held this
/// request back; otherwise now, when it is sent (the timer's own lateness
/// is not the server's).
fn held_since(due: Instant, last_end: Instant) -> Instant {
    if last_end > due { due } else { Instant::now() }
}

/// One tick every `EVERY`; ticks missed while a request was in flight all
/// come due at once (each keeps its own due time).
fn paced() -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    ticks
}

/// Asks every `STATUS_EVERY` how many purges are pending; publishes when
/// each question was asked and the answer. Returns every question.
async fn status_loop(
    client: reqwest::Client,
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
    tx: watch::Sender<Option<(Instant, u64)>>,
) -> Result<Vec<(Sample, u64)>> {
    let mut ticks = tokio::time::interval(STATUS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut asked = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        let at = Instant::now();
        let v = call(client.get(&url).bearer_auth(&token)).await?;
        let pending = v["summary"]["pending"]
            .as_u64()
            .ok_or_else(|| BenchError::Http(format!("no summary.pending in {v}")))?;
        asked.push((
            Sample {
                start: at,
                end: Instant::now(),
            },
            pending,
        ));
        tx.send_replace(Some((at, pending)));
    }
    Ok(asked)
}

/// Times one bare replace of a `bytes`-byte file as the metadata store does
/// one (fresh temporary file, write, sync, rename over the target,
/// directory sync); returns it in ms.
fn raw_replace(disk: &dyn DurableStorage, dir: &Path, bytes: usize) -> Result<f64> {
    let buf = vec![0x6du8; bytes.max(1)];
    let (tmp, target) = (dir.join("metadata.tmp"), dir.join("metadata"));
    let t0 = Instant::now();
    let file = disk.open(&tmp, OpenMode::CreateNew)?;
    file.write_at(0, &buf)?;
    file.sync()?;
    drop(file);
    disk.rename(&tmp, &target)?;
    disk.sync_dir(dir)?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// Raw syncs in the proportion `counts` has, at most `RAW_SYNC_SAMPLE` of
/// them timed; returns the time scaled to every sync in `counts`, and how
/// many were timed.
fn sampled_raw_syncs(disk: &dyn DurableStorage, dir: &Path, counts: Counts) -> Result<(f64, u64)> {
    let total = counts.file_syncs + counts.dir_syncs;
    if total == 0 {
        return Ok((0.0, 0));
    }
    let sample = total.min(RAW_SYNC_SAMPLE);
    let files = counts.file_syncs * sample / total;
    let dirs = sample - files;
    let took = reference::raw_syncs(disk, dir, files, dirs, 512)?;
    Ok((took.as_secs_f64() * total as f64 / sample as f64, sample))
}
