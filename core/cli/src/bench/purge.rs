//! Scenario 1, purge, and the data set that scenario 2 (recovery) reads.
//!
//! Invariants:
//! - The data set is the issue's: one topic of `purge_partitions`
//!   partitions, each holding one segment, `offsets_per_kind` consumer
//!   offsets and as many group offsets; plus a one-partition topic of the
//!   same shape whose purge is traced sync by sync.
//! - The data set is built with syncs skipped, then flushed (`sync -f`) and
//!   the engine reopened with syncs on: what is measured is a purge of a
//!   durable data set, with every sync the engine asks for.
//! - The engine's reconciler is the server's (`super::engine_config`):
//!   cleanup of up to `concurrency` partitions at once within a pass.
//! - A purge is timed from the call to every obligation `Applied`
//!   (reconciler passes run back to back); the server runs the next pass at
//!   once only after a pass that reached its bound, and otherwise waits for
//!   its next tick: those waits are added in `purge.topic_server_paced_s`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use sluice_server::clock::SystemClock;
use sluice_server::metadata::TopicOptions;
use sluice_server::partition::Consumer;
use sluice_server::partition::log::NewMessage;
use sluice_server::{Engine, Identifier, Partitioning};

use super::counting::{CountingStorage, SyncKind};
use super::{Ctx, Figure, Result, Target, engine_config, flush_fs, recovery, reference};

pub const STREAM: &str = "bench";
pub const BIG: &str = "big";
pub const ONE: &str = "one";

/// A class of syncs on one partition's purge, with why each is there.
#[derive(Debug, Clone, Serialize)]
pub struct SyncClass {
    pub kind: String,
    pub class: String,
    pub count: u64,
    pub in_floor: u64,
    pub why: String,
}

/// An engine on `data` configured as `sluice server` configures it.
pub fn open(ctx: &Ctx, storage: &CountingStorage, data: &Path) -> Result<Engine> {
    open_bounded(
        ctx,
        storage,
        data,
        engine_config(data, 6, &ctx.reconciler).max_open_files,
    )
}

/// As `open`, with the file pool bounded at `max_open_files` (ADR 0018).
pub fn open_bounded(
    ctx: &Ctx,
    storage: &CountingStorage,
    data: &Path,
    max_open_files: Option<usize>,
) -> Result<Engine> {
    let mut config = engine_config(data, 6, &ctx.reconciler);
    config.max_open_files = max_open_files;
    let (engine, _) = Engine::open(Arc::new(storage.clone()), Arc::new(SystemClock), config)?;
    Ok(engine)
}

/// Builds the data set in `data` (syncs skipped, then flushed).
pub fn build_data_set(ctx: &Ctx, data: &Path) -> Result<()> {
    let storage = CountingStorage::new(ctx.disk.clone());
    storage.set_skip_syncs(true);
    let mut engine = open(ctx, &storage, data)?;
    engine.create_stream(None, STREAM)?;
    let per = ctx.sizes.offsets_per_kind;
    for (topic, partitions) in [(BIG, ctx.sizes.purge_partitions), (ONE, 1)] {
        fill_topic(&mut engine, topic, partitions, per)?;
    }
    drop(engine);
    flush_fs(data)
}

/// Creates `topic` in `STREAM` with `partitions` partitions, each holding
/// one 1 KiB message and `per` consumer and `per` group offsets (the issue's
/// purge data set shape).
pub fn fill_topic(engine: &mut Engine, topic: &str, partitions: u32, per: u32) -> Result<()> {
    let stream = Identifier::from(STREAM);
    engine.create_topic(
        &stream,
        None,
        topic,
        partitions,
        TopicOptions::default(),
        0,
        0,
        1,
    )?;
    let t = Identifier::from(topic);
    for g in 1..=per {
        engine.create_group(&stream, &t, Some(g), &format!("group-{g}"))?;
    }
    for p in 0..partitions {
        engine.send(
            &stream,
            &t,
            &Partitioning::PartitionId(p),
            vec![NewMessage::new(vec![7u8; 1024])],
        )?;
        for id in 1..=per {
            engine.store_offset(&stream, &t, p, Consumer::consumer(id), 0)?;
            engine.store_offset(&stream, &t, p, Consumer::group(id), 0)?;
        }
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx) -> Result<(Vec<Figure>, Vec<SyncClass>)> {
    let base = ctx.dir("purge")?;
    let data = base.join("data");
    let started = Instant::now();
    build_data_set(ctx, &data)?;
    tracing::info!(
        took_s = started.elapsed().as_secs_f64(),
        "purge data set built"
    );

    // Scenario 2 reads this very data set before it is purged.
    let mut figures = recovery::run(ctx, &data)?;

    let storage = CountingStorage::new(ctx.disk.clone());
    let mut engine = open(ctx, &storage, &data)?;
    let stream = Identifier::from(STREAM);

    // One partition's purge, sync by sync.
    storage.set_record_syncs(true);
    let before = storage.counts();
    engine.purge_partition(&stream, &Identifier::from(ONE), 0)?;
    engine.reconcile_until_idle(1000);
    let one = storage.counts().since(before);
    let recorded = storage.recorded_syncs();
    storage.set_record_syncs(false);
    let breakdown = classify(&data, &recorded);
    let floor: u64 = breakdown.iter().map(|c| c.in_floor).sum();
    let total = one.file_syncs + one.dir_syncs;
    figures.push(
        Figure::new(
            "purge.partition_syncs",
            "syncs on one partition's purge (call to Applied)",
            total as f64,
            "syncs",
            floor as f64,
            "floor: commit (2) + 1 per dir that lost names",
        )
        .detail(format!(
            "{} file syncs + {} directory syncs; every one is listed below",
            one.file_syncs, one.dir_syncs
        )),
    );

    // A topic's purge, wall time from the call to every obligation Applied.
    let bound = engine.reconciler().config().max_per_pass;
    let before = storage.counts();
    let t0 = Instant::now();
    engine.purge_topic(&stream, &Identifier::from(BIG))?;
    let acked = t0.elapsed();
    // The purge call answers at its commit point and wakes the server's
    // reconciler task, which runs a pass at once, then goes again at once
    // after every pass that reached its bound (and at its next tick after
    // one that did not).
    let mut later_passes = 0u32;
    let mut server_waits = 0u32;
    while !engine.reconciler().pending().is_empty() && later_passes < 100_000 {
        let pass = engine.reconcile_at(u64::MAX);
        later_passes += 1;
        if pass.attempted.len() < bound && pass.still_pending > 0 {
            server_waits += 1;
        }
    }
    let wall = t0.elapsed();
    let counts = storage.counts().since(before);
    let pending = engine.reconciler().pending().len();
    if pending > 0 {
        ctx.note(format!(
            "{pending} partitions still pending after the topic purge"
        ));
    }
    drop(engine);
    let raw = reference::raw_syncs(
        ctx.disk.as_ref(),
        &ctx.dir("purge-ref")?,
        counts.file_syncs,
        counts.dir_syncs,
        512,
    )?;
    let p = ctx.sizes.purge_partitions;
    figures.push(
        Figure::new(
            "purge.topic_wall_s",
            format!("purge a topic of {p} partitions, call to all Applied"),
            wall.as_secs_f64(),
            "s",
            raw.as_secs_f64(),
            format!(
                "{} file + {} dir raw syncs, one thread",
                counts.file_syncs, counts.dir_syncs
            ),
        )
        .target(Target::AtMost(1.5))
        .detail(format!(
            "cleanup concurrency {}; the purge call returned after {:.3} s (its commit point; the cleanup is the reconciler's); {} passes back to back; {:.0} µs per sync in the reference",
            ctx.reconciler.concurrency,
            acked.as_secs_f64(),
            later_passes,
            raw.as_secs_f64() * 1e6 / (counts.file_syncs + counts.dir_syncs).max(1) as f64
        )),
    );
    let per = ctx.sizes.offsets_per_kind;
    let unlinks = reference::raw_unlinks(ctx.disk.as_ref(), &ctx.dir("purge-unlinks")?, p, per)?;
    figures.push(
        Figure::new(
            "purge.topic_vs_raw_unlinks_s",
            "the same purge against deleting the same files bare",
            wall.as_secs_f64(),
            "s",
            unlinks.as_secs_f64(),
            format!("unlink {} files + 1 sync per dir", u64::from(p) * (2 * u64::from(per) + 2)),
        )
        .detail("not the issue's reference (syncs only): the physical floor of removing the files at all"),
    );
    let period = ctx.reconciler.period;
    let paced = wall + period * server_waits;
    figures.push(
        Figure::new(
            "purge.topic_server_paced_s",
            "the same purge as the server paces it",
            paced.as_secs_f64(),
            "s",
            raw.as_secs_f64(),
            "the same raw syncs",
        )
        .detail(format!(
            "a pass cleans at most {bound} partitions, {} at a time; the server's next pass follows at once after a pass that reached that bound, otherwise at its next tick (period {} ms): + {server_waits} periods at most",
            ctx.reconciler.concurrency,
            period.as_millis(),
        )),
    );
    Ok((figures, breakdown))
}

/// Groups recorded syncs by what they make durable.
fn classify(data: &Path, recorded: &[(SyncKind, std::path::PathBuf)]) -> Vec<SyncClass> {
    let mut by: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (kind, path) in recorded {
        let kind = match kind {
            SyncKind::File => "file",
            SyncKind::Dir => "dir",
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let class = match (kind, name) {
            ("file", "metadata.tmp") => "metadata",
            ("dir", _) if path == data => "data dir",
            ("file", "purge.obligation") => "obligation file",
            ("dir", "segments") => "segments dir",
            ("dir", "consumers") => "consumers dir",
            ("dir", "groups") => "groups dir",
            ("dir", _)
                if path.parent().and_then(|p| p.file_name()) == Some("partitions".as_ref()) =>
            {
                "partition dir"
            }
            _ => "other",
        };
        *by.entry((kind, class)).or_default() += 1;
    }
    by.into_iter()
        .map(|((kind, class), count)| {
            let (in_floor, why) = match class {
                "metadata" => (
                    count.min(1),
                    "commit point: the new metadata's bytes before its rename",
                ),
                "data dir" => (count.min(1), "commit point: the metadata rename"),
                "obligation file" => (
                    0,
                    "the plan (a round's names) synced before its unlinks (ADR 0003 §9)",
                ),
                "partition dir" => (
                    0,
                    "the new obligation file's name (first purge of the partition)",
                ),
                "segments dir" | "consumers dir" | "groups dir" => {
                    (count.min(1), "removed names made durable (lost entries)")
                }
                _ => (0, "unclassified"),
            };
            SyncClass {
                kind: kind.into(),
                class: class.into(),
                count,
                in_floor,
                why: why.into(),
            }
        })
        .collect()
}
