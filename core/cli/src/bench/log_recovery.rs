//! Scenario 7, log recovery (issue 16 item 5): opening a partition whose log
//! holds a large amount of messages against one holding 1 MB.
//!
//! Invariants:
//! - Both data sets are one stream, one topic, one partition, written the
//!   same way (1 KiB messages in batches of 1,000, the topic's default
//!   segment size, `buffered`), flushed (`sync_all`) before anything is
//!   measured; only their log length differs: 1 MB against the messages
//!   scenario's size (`--quick` 100 MB, the full run 1 GB, `--tiny` 2 MB).
//! - Each side is measured as `Engine::open` of its directory, in this
//!   process, three times alternating, and the fastest run counts (a warm
//!   page cache on both sides: the figure is the CPU and read cost of
//!   recovery, not the disk's cold read speed).
//! - Bytes read come from the kernel's own count for this process
//!   (`rchar` in `/proc/self/io`), so nothing in the engine is wrapped or
//!   changed to measure them; the bench is single-threaded while opening.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use sluice_server::Engine;
use sluice_server::clock::SystemClock;
use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::{Identifier, Partitioning};

use super::{BenchError, Ctx, Figure, Result, Target, engine_config};

const SMALL_BYTES: u64 = 1_000_000;
const MESSAGE_BYTES: usize = 1024;
const BATCH: u64 = 1000;
const RUNS: usize = 3;

/// Writes a one-partition log of about `bytes` of payload into `data`.
fn build(ctx: &Ctx, data: &Path, bytes: u64) -> Result<u64> {
    let (mut engine, _) = Engine::open(
        ctx.disk.clone(),
        Arc::new(SystemClock),
        engine_config(data, 7, &ctx.reconciler),
    )?;
    engine.create_stream(None, "bench")?;
    let stream = Identifier::from("bench");
    let options = TopicOptions {
        durability: Durability::Buffered,
        ..TopicOptions::default()
    };
    engine.create_topic(&stream, None, "log", 1, options, 0, 0, 1)?;
    let topic = Identifier::from("log");
    let messages = bytes.div_ceil(MESSAGE_BYTES as u64);
    let mut sent = 0u64;
    while sent < messages {
        let n = BATCH.min(messages - sent);
        let batch = (0..n)
            .map(|i| NewMessage::new(vec![(sent + i) as u8; MESSAGE_BYTES]))
            .collect();
        engine.send(&stream, &topic, &Partitioning::PartitionId(0), batch)?;
        sent += n;
    }
    engine.sync_all()?;
    Ok(sent)
}

/// Bytes this process has read through `read`-family calls so far.
fn rchar() -> Result<u64> {
    let io =
        std::fs::read_to_string("/proc/self/io").map_err(|e| BenchError::io("/proc/self/io", e))?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| BenchError::io("/proc/self/io", "no rchar line"))
}

/// One `Engine::open` of `data`: seconds and bytes read.
fn open_once(ctx: &Ctx, data: &Path) -> Result<(f64, u64, u64)> {
    let before = rchar()?;
    let t0 = Instant::now();
    let (engine, report) = Engine::open(
        ctx.disk.clone(),
        Arc::new(SystemClock),
        engine_config(data, 7, &ctx.reconciler),
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let read = rchar()?.saturating_sub(before);
    drop(engine);
    Ok((secs, read, report.messages))
}

pub fn run(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let large_bytes = (ctx.sizes.messages * ctx.sizes.message_bytes as u64).max(SMALL_BYTES);
    let small = ctx.dir("log-recovery-small")?.join("data");
    let large = ctx.dir("log-recovery-large")?.join("data");
    let small_msgs = build(ctx, &small, SMALL_BYTES)?;
    let large_msgs = build(ctx, &large, large_bytes)?;
    let mut best = [(f64::MAX, 0u64, 0u64); 2];
    for _ in 0..RUNS {
        for (i, dir) in [&small, &large].into_iter().enumerate() {
            let (secs, read, msgs) = open_once(ctx, dir)?;
            if secs < best[i].0 {
                best[i] = (secs, read, msgs);
            }
        }
    }
    let [
        (small_s, small_read, small_seen),
        (large_s, large_read, large_seen),
    ] = best;
    if small_seen != small_msgs || large_seen != large_msgs {
        return Err(BenchError::io(
            "log recovery",
            format!(
                "recovered {small_seen} and {large_seen} messages, wrote {small_msgs} and {large_msgs}"
            ),
        ));
    }
    let mb = |b: u64| b as f64 / 1e6;
    ctx.note(format!(
        "log recovery: {:.0} MB against {:.0} MB of messages in one partition (1 KiB messages, batches of 1,000, 64 MiB segments); --quick uses 100 MB as the large log, the full run 1 GB; warm page cache, fastest of {RUNS} opens each",
        mb(large_bytes),
        mb(SMALL_BYTES)
    ));
    Ok(vec![
        Figure::new(
            "log_recovery.large_vs_small_s",
            format!("open a partition of {:.0} MB of messages", mb(large_bytes)),
            large_s,
            "s",
            small_s,
            format!("open the same with {:.0} MB", mb(SMALL_BYTES)),
        )
        .target(Target::AtMost(2.0))
        .detail(format!(
            "read {} bytes against {} ({} and {} messages)",
            large_read, small_read, large_msgs, small_msgs
        )),
        Figure::new(
            "log_recovery.bytes_read",
            format!("bytes read opening {:.0} MB of messages", mb(large_bytes)),
            large_read as f64,
            "B",
            small_read as f64,
            format!("the same with {:.0} MB", mb(SMALL_BYTES)),
        ),
    ])
}
