//! Issue 16 item 4, descriptors: how many descriptors the engine holds with
//! N partitions (one message each) × 4 consumers each with a stored offset
//! (6 files a partition: 4 offset files and a segment's log and index), against the
//! configured bound of the file pool (ADR 0018), after building and after a
//! recovery; and what eviction costs: offset stores spread over more files
//! than the bound, against the same stores within it.
//!
//! Invariants:
//! - Descriptors are counted as the kernel sees them (`/proc/self/fd`), less
//!   those open before the engine was (the bench's own, the standard
//!   streams), so the figure is the engine's whatever else the process holds.
//! - N is the reconciler scenario's partition count (100,000 in a full run,
//!   3,000 in `--quick`), printed in the notes; the data set is built with
//!   syncs skipped, as every large data set here is; measured stores issue
//!   every sync the engine asks for.
//! - Both store runs use the same engine configuration, bound and number of
//!   stores; only the number of consumers (files) differs.

use std::time::Instant;

use sluice_server::Identifier;
use sluice_server::config::SUGGESTED_MAX_OPEN_FILES;
use sluice_server::engine::MAX_PARTITIONS;
use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::Consumer;
use sluice_server::partition::log::NewMessage;

use super::counting::CountingStorage;
use super::{BenchError, Ctx, Figure, Result, Target, purge};

const CONSUMERS: u32 = 4;

/// Descriptors this process has open now.
fn open_descriptors() -> Result<u64> {
    let entries =
        std::fs::read_dir("/proc/self/fd").map_err(|e| BenchError::io("/proc/self/fd", e))?;
    Ok(entries.count() as u64)
}

pub fn run(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let bound = SUGGESTED_MAX_OPEN_FILES as u64;
    let partitions = ctx.sizes.reconciler_partitions;
    ctx.note(format!(
        "descriptors: {partitions} partitions x {CONSUMERS} consumers with a stored offset (a full run has 100,000), against the suggested bound [files] max_open = {bound} (the pool is opt-in)"
    ));
    let mut figures = Vec::new();
    let baseline = open_descriptors()?;
    let data = ctx.dir("descriptors")?.join("data");
    {
        let storage = CountingStorage::new(ctx.disk.clone());
        storage.set_skip_syncs(true);
        let mut engine = purge::open_bounded(ctx, &storage, &data, Some(bound as usize))?;
        engine.create_stream(None, "bench")?;
        let stream = Identifier::from("bench");
        let mut left = partitions;
        let mut t = 0;
        while left > 0 {
            let n = left.min(MAX_PARTITIONS);
            t += 1;
            let name = format!("t{t}");
            engine.create_topic(&stream, None, &name, n, TopicOptions::default(), 0, 0, 1)?;
            let topic = Identifier::from(name.as_str());
            for p in 0..n {
                // A stored offset needs a message to point at.
                engine.send(
                    &stream,
                    &topic,
                    &sluice_server::Partitioning::PartitionId(p),
                    vec![NewMessage::new(vec![1u8; 16])],
                )?;
                for c in 0..CONSUMERS {
                    engine.store_offset(&stream, &topic, p, Consumer::consumer(c), 0)?;
                }
            }
            left -= n;
        }
        engine.sync_all()?;
        let built = open_descriptors()?.saturating_sub(baseline);
        let stats = engine.file_pool_stats().unwrap_or_default();
        figures.push(
            Figure::new(
                "descriptors.open_built",
                format!("open descriptors, {partitions} partitions x {CONSUMERS} offsets"),
                built as f64,
                "fds",
                bound as f64,
                "[files] max_open",
            )
            .target(Target::AtMost(1.0))
            .detail(format!(
                "{} handles, {} evictions, {} eviction syncs, {} reopens",
                stats.handles, stats.evictions, stats.eviction_syncs, stats.reopens
            )),
        );
        storage.set_skip_syncs(false);
    }
    super::flush_fs(&data)?;
    {
        let storage = CountingStorage::new(ctx.disk.clone());
        let t0 = Instant::now();
        let engine = purge::open_bounded(ctx, &storage, &data, Some(bound as usize))?;
        let took = t0.elapsed();
        let recovered = open_descriptors()?.saturating_sub(baseline);
        let stats = engine.file_pool_stats().unwrap_or_default();
        figures.push(
            Figure::new(
                "descriptors.open_recovered",
                "open descriptors after recovering them",
                recovered as f64,
                "fds",
                bound as f64,
                "[files] max_open",
            )
            .target(Target::AtMost(1.0))
            .detail(format!(
                "recovery {:.1} s; {} handles, {} evictions",
                took.as_secs_f64(),
                stats.handles,
                stats.evictions
            )),
        );
    }
    figures.extend(eviction_cost(ctx, bound)?);
    Ok(figures)
}

/// Stores per second over `bound / 2` consumers (never an eviction) and over
/// `4 × bound` consumers (an eviction, and a reopen, on nearly every store;
/// under `buffered` the evicted file has an unsynced store, so the eviction
/// syncs it first).
fn eviction_cost(ctx: &mut Ctx, bound: u64) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let within = u32::try_from(bound / 2).unwrap_or(1).max(1);
    let beyond = u32::try_from(bound * 4).unwrap_or(u32::MAX);
    for (name, durability, stores) in [
        ("buffered", Durability::Buffered, ctx.sizes.buffered_stores),
        (
            "persisted",
            Durability::Persisted,
            ctx.sizes.persisted_stores,
        ),
    ] {
        let mut rates = Vec::new();
        let mut details = Vec::new();
        for consumers in [within, beyond] {
            let storage = CountingStorage::new(ctx.disk.clone());
            let data = ctx
                .dir(&format!("descriptors-{name}-{consumers}"))?
                .join("data");
            let mut engine = purge::open_bounded(ctx, &storage, &data, Some(bound as usize))?;
            engine.create_stream(None, "bench")?;
            let stream = Identifier::from("bench");
            let options = TopicOptions {
                consumer_offset_durability: durability,
                ..TopicOptions::default()
            };
            engine.create_topic(&stream, None, name, 1, options, 0, 0, 1)?;
            let topic = Identifier::from(name);
            let batch = (0..1000).map(|_| NewMessage::new(vec![1u8; 16])).collect();
            engine.send(
                &stream,
                &topic,
                &sluice_server::Partitioning::PartitionId(0),
                batch,
            )?;
            // Every consumer's file exists before the measured stores.
            for c in 0..consumers {
                engine.store_offset(&stream, &topic, 0, Consumer::consumer(c), 0)?;
            }
            engine.sync_all()?;
            let before = engine.file_pool_stats().unwrap_or_default();
            let t0 = Instant::now();
            for i in 0..stores {
                let c = u32::try_from(i % u64::from(consumers)).unwrap_or(0);
                engine.store_offset(&stream, &topic, 0, Consumer::consumer(c), i % 1000)?;
            }
            let took = t0.elapsed();
            let after = engine.file_pool_stats().unwrap_or_default();
            rates.push(stores as f64 / took.as_secs_f64());
            details.push(format!(
                "{consumers} files: {} evictions, {} eviction syncs",
                after.evictions - before.evictions,
                after.eviction_syncs - before.eviction_syncs
            ));
        }
        figures.push(
            Figure::new(
                &format!("descriptors.eviction_{name}_per_s"),
                format!("offset stores/s, {name}, {beyond} files (bound {bound})"),
                rates[1],
                "stores/s",
                rates[0],
                format!("the same over {within} files"),
            )
            .detail(format!("{stores} stores; {}", details.join("; "))),
        );
    }
    Ok(figures)
}
