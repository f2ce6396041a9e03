//! Scenario 5a, messages in process: append and poll throughput (1 KiB
//! messages, batches of 1,000) against raw sequential write and read of the
//! same bytes.
//!
//! Invariants:
//! - The reference writes exactly the bytes the engine wrote (counted by
//!   the storage layer: framing and index included), in as many appends,
//!   with as many file syncs; it reads them back in as many reads.
//! - Building a batch's messages is not timed (a client builds them); the
//!   engine's `send` (ids, checksums, offsets, encoding, write) is.

use std::time::Instant;

use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::{Consumer, PollingStrategy};
use sluice_server::{Identifier, Partitioning};

use super::counting::CountingStorage;
use super::{BenchError, Ctx, Figure, Result, Target, purge, quantile, reference};

/// In-process figures the HTTP scenario compares itself with.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess {
    pub append_msgs_per_s: f64,
    pub append_p50_ms: f64,
    pub append_p99_ms: f64,
    pub poll_msgs_per_s: f64,
}

fn batch(n: u64, size: usize, seed: u64) -> Vec<NewMessage> {
    (0..n)
        .map(|i| NewMessage::new(vec![(seed + i) as u8; size]))
        .collect()
}

pub fn run(ctx: &mut Ctx) -> Result<(Vec<Figure>, InProcess)> {
    let s = ctx.sizes;
    let storage = CountingStorage::new(ctx.disk.clone());
    let data = ctx.dir("messages")?.join("data");
    let refs = ctx.dir("messages-ref")?;
    let mut engine = purge::open(ctx, &storage, &data)?;
    engine.create_stream(None, "bench")?;
    let stream = Identifier::from("bench");
    let batches = (s.messages / s.batch).max(1);
    let messages = batches * s.batch;
    let payload_mb = (messages as f64) * s.message_bytes as f64 / 1e6;
    let mut figures = Vec::new();
    let mut inproc = InProcess::default();
    for (name, durability) in [
        ("buffered", Durability::Buffered),
        ("persisted", Durability::Persisted),
    ] {
        let options = TopicOptions {
            durability,
            ..TopicOptions::default()
        };
        engine.create_topic(&stream, None, name, 1, options, 0, 0, 1)?;
        let topic = Identifier::from(name);
        let before = storage.counts();
        let mut took = 0.0f64;
        let mut lat = Vec::with_capacity(batches as usize);
        for b in 0..batches {
            let msgs = batch(s.batch, s.message_bytes, b);
            let t0 = Instant::now();
            engine.send(&stream, &topic, &Partitioning::PartitionId(0), msgs)?;
            let dt = t0.elapsed().as_secs_f64();
            took += dt;
            lat.push(dt * 1e3);
        }
        let c = storage.counts().since(before);
        let raw = reference::raw_sequential_write(
            ctx.disk.as_ref(),
            &refs.join(name),
            c.bytes_written,
            batches,
            c.file_syncs,
        )?
        .as_secs_f64();
        let rate = messages as f64 / took;
        let raw_rate = messages as f64 / raw;
        if name == "buffered" {
            inproc.append_msgs_per_s = rate;
            inproc.append_p50_ms = quantile(&mut lat, 0.5);
            inproc.append_p99_ms = quantile(&mut lat, 0.99);
        }
        figures.push(
            Figure::new(
                &format!("messages.append_{name}_msgs_per_s"),
                format!("append, {name}, {} B x {}", s.message_bytes, s.batch),
                rate,
                "msgs/s",
                raw_rate,
                "raw sequential write of the same bytes",
            )
            .target(Target::AtLeast(0.8))
            .detail(format!(
                "{:.0} MB/s of payload; raw {:.0} MB/s of {} bytes written ({} file syncs, {} dir syncs by the engine)",
                payload_mb / took,
                c.bytes_written as f64 / 1e6 / raw,
                c.bytes_written,
                c.file_syncs,
                c.dir_syncs
            )),
        );
    }
    // Poll the buffered topic from the start, a batch at a time.
    let topic = Identifier::from("buffered");
    let t0 = Instant::now();
    let mut offset = 0u64;
    let mut polled = 0u64;
    while polled < messages {
        let p = engine.poll(
            &stream,
            &topic,
            0,
            Consumer::consumer(1),
            PollingStrategy::Offset(offset),
            s.batch,
            false,
        )?;
        let n = p.messages.len() as u64;
        if n == 0 {
            return Err(BenchError::io(
                "poll",
                format!("no messages at offset {offset}"),
            ));
        }
        std::hint::black_box(&p);
        polled += n;
        offset += n;
    }
    let took = t0.elapsed().as_secs_f64();
    drop(engine);
    let raw = reference::raw_sequential_read(ctx.disk.as_ref(), &refs.join("buffered"), batches)?
        .as_secs_f64();
    inproc.poll_msgs_per_s = messages as f64 / took;
    figures.push(
        Figure::new(
            "messages.poll_msgs_per_s",
            format!("poll, {} per call, from the page cache", s.batch),
            messages as f64 / took,
            "msgs/s",
            messages as f64 / raw,
            "raw sequential read of the same bytes",
        )
        .target(Target::AtLeast(0.8))
        .detail(format!("{:.0} MB/s of payload", payload_mb / took)),
    );
    Ok((figures, inproc))
}
