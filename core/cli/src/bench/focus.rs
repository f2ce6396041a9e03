//! Focused harnesses for profiling one figure at a time (`--only`): the
//! engine call a figure times, repeated in process with nothing else
//! running, so a profile of the process is a profile of that call.
//!
//! Invariants:
//! - Each harness prints a figure with the same reference as the full
//!   scenario, measured in the same process, interleaved with the value so
//!   that load from other processes hits both alike.
//! - Work that the figure does not time (the cleanup after a purge) runs
//!   between the timed calls, never inside them.

use std::time::Instant;

use sluice_server::partition::Consumer;
use sluice_server::partition::log::NewMessage;
use sluice_server::{Engine, Identifier, Partitioning};

use super::counting::CountingStorage;
use super::purge::{self, BIG, STREAM};
use super::{Ctx, Figure, Result, Target, quantile};

/// Timed purge calls (and as many topic updates) per run.
const ROUNDS: usize = 5;

/// `purge.call_latency_s` without HTTP and without the send/poll load: the
/// engine's `purge_topic` on a topic of `live_purge_partitions` partitions
/// (the live scenario's shape), against `update_topic` (one metadata
/// commit of the same metadata). Each purge's cleanup runs to completion,
/// untimed, and the topic is refilled (a message and the offsets in every
/// partition, so each partition holds open files again), before the next
/// round: every timed purge is a first purge of an applied partition with
/// files, as in the live scenario.
pub fn purge_call(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let partitions = ctx.sizes.live_purge_partitions;
    let per = ctx.sizes.offsets_per_kind.min(7);
    let data = ctx.dir("focus-purge-call")?.join("data");
    {
        let storage = CountingStorage::new(ctx.disk.clone());
        storage.set_skip_syncs(true);
        let mut engine = purge::open(ctx, &storage, &data)?;
        engine.create_stream(None, STREAM)?;
        purge::fill_topic(&mut engine, BIG, partitions, per)?;
        purge::fill_topic(&mut engine, "other", 1, 1)?;
    }
    super::flush_fs(&data)?;
    let storage = CountingStorage::new(ctx.disk.clone());
    let mut engine = purge::open(ctx, &storage, &data)?;
    let stream = Identifier::from(STREAM);
    let big = Identifier::from(BIG);
    let other = Identifier::from("other");
    let (mut purges, mut updates) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round > 0 {
            refill(&mut engine, partitions, per)?;
        }
        let t0 = Instant::now();
        // Alternating expiry: every update is a real change.
        engine.update_topic(&stream, &other, "other", 1_000_000 + round as u64, 0)?;
        updates.push(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        engine.purge_topic(&stream, &big)?;
        purges.push(t0.elapsed().as_secs_f64());
        // The cleanup, untimed: the next purge starts from applied partitions.
        engine.reconcile_until_idle(1_000_000);
    }
    let each: Vec<String> = purges.iter().map(|s| format!("{:.1}", s * 1e3)).collect();
    let (purge_min, update_min) = (
        purges.iter().copied().fold(f64::INFINITY, f64::min),
        updates.iter().copied().fold(f64::INFINITY, f64::min),
    );
    let purge_med = quantile(&mut purges, 0.5);
    let update_med = quantile(&mut updates, 0.5);
    Ok(vec![
        Figure::new(
            "focus.purge_call_in_process_s",
            format!("purge_topic of {partitions} partitions, in process, no load"),
            purge_med,
            "s",
            update_med,
            "update_topic: 1 metadata commit, in process",
        )
        .target(Target::AtMost(2.0))
        .detail(format!(
            "median of {ROUNDS} each, alternating; min {:.3} vs {:.3} ms; {per} consumer and {per} group offsets per partition; cleanup run untimed between rounds; each purge (ms): [{}] (the first on files this process opened, the later ones on files it created)",
            purge_min * 1e3,
            update_min * 1e3,
            each.join(", ")
        )),
    ])
}

/// What `purge::fill_topic` put in each partition of `BIG`, again (its
/// groups still exist): one message, `per` consumer and `per` group offsets.
fn refill(engine: &mut Engine, partitions: u32, per: u32) -> Result<()> {
    let stream = Identifier::from(STREAM);
    let t = Identifier::from(BIG);
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

/// Passes over the whole log per run of `poll`.
const POLL_ROUNDS: usize = 15;

/// `messages.poll_msgs_per_s` with more samples: the messages scenario's
/// buffered topic (`messages` × `message_bytes`, batches of `batch`) is
/// polled from offset 0 to its end `POLL_ROUNDS` times, each pass followed
/// by the raw sequential read of a file of the same bytes in as many
/// reads; both from the page cache. One pass is 30 ms or so here, short
/// enough that another process's burst decides a single-pass ratio.
pub fn poll(ctx: &mut Ctx) -> Result<Vec<Figure>> {
    let s = ctx.sizes;
    let storage = CountingStorage::new(ctx.disk.clone());
    let data = ctx.dir("focus-poll")?.join("data");
    let refs = ctx.dir("focus-poll-ref")?;
    let mut engine = purge::open(ctx, &storage, &data)?;
    engine.create_stream(None, STREAM)?;
    let stream = Identifier::from(STREAM);
    engine.create_topic(
        &stream,
        None,
        "polled",
        1,
        sluice_server::metadata::TopicOptions::default(),
        0,
        0,
        1,
    )?;
    let topic = Identifier::from("polled");
    let batches = (s.messages / s.batch).max(1);
    let messages = batches * s.batch;
    let before = storage.counts();
    for b in 0..batches {
        let msgs = (0..s.batch)
            .map(|i| NewMessage::new(vec![(b + i) as u8; s.message_bytes]))
            .collect();
        engine.send(&stream, &topic, &Partitioning::PartitionId(0), msgs)?;
    }
    let written = storage.counts().since(before).bytes_written;
    let raw_path = refs.join("raw");
    super::reference::raw_sequential_write(ctx.disk.as_ref(), &raw_path, written, batches, 0)?;
    let (mut polls, mut raws) = (Vec::new(), Vec::new());
    for _ in 0..POLL_ROUNDS {
        let t0 = Instant::now();
        let mut offset = 0u64;
        while offset < messages {
            let p = engine.poll(
                &stream,
                &topic,
                0,
                Consumer::consumer(1),
                sluice_server::partition::PollingStrategy::Offset(offset),
                s.batch,
                false,
            )?;
            let n = p.messages.len() as u64;
            if n == 0 {
                return Err(super::BenchError::io(
                    "poll",
                    format!("no messages at offset {offset}"),
                ));
            }
            std::hint::black_box(&p);
            offset += n;
        }
        polls.push(t0.elapsed().as_secs_f64());
        raws.push(
            super::reference::raw_sequential_read(ctx.disk.as_ref(), &raw_path, batches)?
                .as_secs_f64(),
        );
    }
    let ratios: Vec<String> = polls
        .iter()
        .zip(&raws)
        .map(|(p, r)| format!("{:.2}", r / p))
        .collect();
    let poll_s = quantile(&mut polls, 0.5);
    let raw_s = quantile(&mut raws, 0.5);
    Ok(vec![
        Figure::new(
            "focus.poll_msgs_per_s",
            format!(
                "poll, {} per call, from the page cache, median pass",
                s.batch
            ),
            messages as f64 / poll_s,
            "msgs/s",
            messages as f64 / raw_s,
            "raw sequential read of the same bytes, median pass",
        )
        .target(Target::AtLeast(0.8))
        .detail(format!(
            "{POLL_ROUNDS} passes each, alternating; per-pass ratios [{}]",
            ratios.join(", ")
        )),
    ])
}
