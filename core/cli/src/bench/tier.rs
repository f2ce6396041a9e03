//! The remote tier (issue 31): what tiering costs against the store it writes to, and what a
//! poll served from the store costs against one served from the local disk.
//!
//! One partition of `tier_messages` messages of `message_bytes` in `tier_segment_bytes`
//! segments, buffered, on `DiskStorage`; the store is `ObjectStoreRemote::local` (object_store's
//! `LocalFileSystem` with fsync, as `[tiering] store = "local"` builds it) in the benchmark
//! directory, so both sides pay the same disk.
//!
//! - `tier.upload_mib_per_s`: the engine's tiering passes (`tier_pass`: plan under the engine,
//!   recorded intents, the puts, the recorded outcomes) until every sealed segment is uploaded,
//!   against the same store's raw `put_new` of the same bytes (the objects the passes wrote,
//!   read back untimed and put again under a fresh prefix, one put per object).
//! - `tier.poll_cold_us` and `tier.poll_warm_us`: `tier_polls` polls of `tier_poll_count`
//!   messages by offset, walking the sealed history from offset 0 (wrapping), served from the
//!   store through a fresh block cache (cold: the tier re-attached before the pass) and through
//!   the cache the cold pass filled (warm), against the same polls served from the local
//!   segments before they were released (page cache warm, after an untimed pass).
//!
//! Invariants: nothing here asserts a time; the local store's files were just written, so a
//! "cold" remote read still finds them in the page cache (the figure is the tier's own cost:
//! the object_store calls, the block cache, decoding), which the detail line says.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use sluice_remote::{ObjectStoreRemote, RemoteKey, RemoteStore, RuntimeHandle};
use sluice_server::metadata::{PartitionKey, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{
    Engine, Identifier, LocalRetention, Partitioning, TierReport, TieredTopic, TieringConfig,
};

use super::counting::CountingStorage;
use super::{BenchError, Ctx, Figure, Result, purge};

const STREAM: &str = "bench-tier";
const TOPIC: &str = "tiered";
const INSTANCE: &str = "bench";
/// Local retention that keeps everything (the upload phase) and that keeps nothing once
/// uploaded (the release before the remote polls).
const KEEP_ALL: LocalRetention = LocalRetention {
    max_bytes: u64::MAX,
    max_age_us: 0,
};
const RELEASE_AT_ONCE: LocalRetention = LocalRetention {
    max_bytes: 0,
    max_age_us: 0,
};

fn remote_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::io(format!("remote store: {what}"), e)
}

fn tiering(local: LocalRetention, cache_bytes: u64) -> TieringConfig {
    let mut config = TieringConfig::new(INSTANCE);
    config.cache_bytes = cache_bytes;
    config.topics.push(TieredTopic {
        stream: STREAM.into(),
        topic: TOPIC.into(),
        local,
    });
    config
}

/// Tiering and reconciler passes until neither has anything left (bounded).
fn tier_until_idle(engine: &mut Engine) -> Result<()> {
    for _ in 0..100_000 {
        let report = engine.tier_pass();
        engine.reconcile_until_idle(1_000);
        if report.errors > 0 || report.failed_uploads > 0 {
            return Err(remote_err("tiering pass", format!("{report:?}")));
        }
        if report == TierReport::default()
            && !engine.tier_owes()
            && engine.reconciler().pending().is_empty()
        {
            return Ok(());
        }
    }
    Err(remote_err("tiering", "did not become idle"))
}

/// The base offset of the partition's newest local segment (the end of the sealed history,
/// while every segment is still local).
fn active_base(partition_dir: &Path) -> Result<u64> {
    let mut newest = None;
    let mut stack = vec![partition_dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| BenchError::io(d.display().to_string(), e))?;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let parsed = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(sluice_server::layout::parse_segment_name);
            if let Some((_, base, "log")) = parsed {
                newest = newest.max(Some(base));
            }
        }
    }
    newest.ok_or_else(|| BenchError::io("tier", "no segment log in the data directory"))
}

/// `polls` polls of `count` by offset over `[0, end)`, from offset 0, wrapping; the seconds.
fn poll_pass(engine: &mut Engine, polls: u64, count: u64, end: u64) -> Result<f64> {
    let stream = Identifier::from(STREAM);
    let topic = Identifier::from(TOPIC);
    let span = (end / count).max(1) * count;
    let t0 = Instant::now();
    for i in 0..polls {
        let offset = (i * count) % span;
        let p = engine.poll(
            &stream,
            &topic,
            0,
            Consumer::consumer(1),
            PollingStrategy::Offset(offset),
            count,
            false,
        )?;
        if p.messages.is_empty() {
            return Err(BenchError::io(
                "tier poll",
                format!("no messages at offset {offset}"),
            ));
        }
        std::hint::black_box(&p);
    }
    Ok(t0.elapsed().as_secs_f64())
}

pub fn run(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let s = ctx.sizes;
    let data = ctx.dir("tier")?.join("data");
    let store_dir = ctx.dir("tier-store")?;
    let store = Arc::new(
        ObjectStoreRemote::local(
            &store_dir,
            RuntimeHandle::owned().map_err(|e| remote_err("runtime", e))?,
        )
        .map_err(|e| remote_err("build", e))?,
    );
    let storage = CountingStorage::new(ctx.disk.clone());
    let mut engine = purge::open(ctx, &storage, &data)?;
    engine.create_stream(None, STREAM)?;
    let stream = Identifier::from(STREAM);
    let topic = Identifier::from(TOPIC);
    engine.create_topic(
        &stream,
        None,
        TOPIC,
        1,
        TopicOptions {
            segment_size: s.tier_segment_bytes,
            ..TopicOptions::default()
        },
        0,
        0,
        1,
    )?;
    let batch = s.batch.min(s.tier_messages).max(1);
    let batches = (s.tier_messages / batch).max(1);
    for b in 0..batches {
        let msgs = (0..batch)
            .map(|i| NewMessage::new(vec![(b + i) as u8; s.message_bytes]))
            .collect();
        engine.send(&stream, &topic, &Partitioning::PartitionId(0), msgs)?;
    }
    engine.sync_all()?;
    let key = PartitionKey {
        stream: 0,
        topic: 0,
        partition: 0,
    };

    // (a) Upload: the engine's passes, then the raw puts of the same objects.
    let cache_bytes = 2 * s.tier_messages * (s.message_bytes as u64 + 256) + (64 << 20);
    let as_store: Arc<dyn RemoteStore> = store.clone();
    engine
        .attach_tier(as_store.clone(), tiering(KEEP_ALL, cache_bytes))
        .map_err(|e| remote_err("attach", e))?;
    let t0 = Instant::now();
    tier_until_idle(&mut engine)?;
    let tier_s = t0.elapsed().as_secs_f64();
    let figures = engine
        .tier_figures()
        .ok_or_else(|| remote_err("figures", "no tier attached"))?;
    let prefix = RemoteKey::new(INSTANCE).map_err(|e| remote_err("key", e))?;
    let objects = store.list(&prefix).map_err(|e| remote_err("list", e))?;
    let mut bodies = Vec::with_capacity(objects.len());
    for o in &objects {
        bodies.push(
            store
                .get_range(&o.key, 0..o.size)
                .map_err(|e| remote_err("get", e))?,
        );
    }
    let bytes: u64 = bodies.iter().map(|b| b.len() as u64).sum();
    let t0 = Instant::now();
    for (i, body) in bodies.into_iter().enumerate() {
        let k = RemoteKey::new(format!("raw/object-{i:06}")).map_err(|e| remote_err("key", e))?;
        store.put_new(&k, body).map_err(|e| remote_err("put", e))?;
    }
    let raw_s = t0.elapsed().as_secs_f64();
    let mib = |b: u64, secs: f64| b as f64 / f64::from(1u32 << 20) / secs.max(f64::MIN_POSITIVE);
    let mut out = vec![
        Figure::new(
            "tier.upload_mib_per_s",
            format!(
                "tiering {} sealed segments ({} objects) to a local ObjectStoreRemote",
                figures.uploads,
                objects.len()
            ),
            mib(figures.uploaded_bytes, tier_s),
            "MiB/s",
            mib(bytes, raw_s),
            "raw put_new of the same objects, same store",
        )
        .detail(format!(
            "{:.1} MiB in {:.3} s vs {:.1} MiB in {:.3} s; {} messages x {} B, {} B segments; the engine's passes include their recorded intents and outcomes (tiering.rec writes and syncs)",
            figures.uploaded_bytes as f64 / f64::from(1u32 << 20),
            tier_s,
            bytes as f64 / f64::from(1u32 << 20),
            raw_s,
            s.tier_messages,
            s.message_bytes,
            s.tier_segment_bytes
        )),
    ];

    // (b) Polls: local first (every segment still on disk), then released and remote.
    let partition_dir = data.clone();
    let sealed_end = active_base(&partition_dir)?;
    let (polls, count) = (s.tier_polls, s.tier_poll_count);
    poll_pass(&mut engine, polls, count, sealed_end)?; // untimed: the page cache
    let local_s = poll_pass(&mut engine, polls, count, sealed_end)?;
    engine
        .attach_tier(as_store.clone(), tiering(RELEASE_AT_ONCE, cache_bytes))
        .map_err(|e| remote_err("attach", e))?;
    tier_until_idle(&mut engine)?;
    let low = engine
        .partition(key)
        .map(|p| p.log().low_water())
        .unwrap_or(0);
    if low < sealed_end {
        return Err(remote_err(
            "release",
            format!("low-water mark {low}, sealed history ends at {sealed_end}"),
        ));
    }
    // A fresh tier: an empty block cache.
    engine
        .attach_tier(as_store.clone(), tiering(RELEASE_AT_ONCE, cache_bytes))
        .map_err(|e| remote_err("attach", e))?;
    let cold_s = poll_pass(&mut engine, polls, count, sealed_end)?;
    let cold = engine.tier_figures().map(|f| f.cache).unwrap_or_default();
    let warm_s = poll_pass(&mut engine, polls, count, sealed_end)?;
    let warm = engine.tier_figures().map(|f| f.cache).unwrap_or_default();
    let per = |secs: f64| secs * 1e6 / polls as f64;
    let detail = |pass: &str, hits: u64, misses: u64| {
        format!(
            "{polls} polls of {count} messages by offset over the sealed history [0, {sealed_end}), wrapping; {pass}: {hits} block cache hits, {misses} misses; local: page cache warm (after an untimed pass); the store's files were just written, so remote reads find them in the page cache too"
        )
    };
    out.push(
        Figure::new(
            "tier.poll_cold_us",
            "poll served from the store, block cache cold",
            per(cold_s),
            "us/poll",
            per(local_s),
            "the same polls served from local segments",
        )
        .detail(detail("cold pass", cold.hits, cold.misses)),
    );
    out.push(
        Figure::new(
            "tier.poll_warm_us",
            "poll served from the store, block cache warm",
            per(warm_s),
            "us/poll",
            per(local_s),
            "the same polls served from local segments",
        )
        .detail(detail(
            "warm pass",
            warm.hits.saturating_sub(cold.hits),
            warm.misses.saturating_sub(cold.misses),
        )),
    );
    Ok(out)
}
