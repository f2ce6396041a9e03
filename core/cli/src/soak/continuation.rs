//! The ADR 0010 cycle, on purpose rather than by thread timing (issue 14).
//!
//! A seeded fraction of `--powercut` cycles ends with the clients stopped
//! and, on the `buffered` topic whose offsets are `persisted`: messages sent,
//! the last one's offset stored (acknowledged, so synced), the server killed
//! and the power cut in full. No sync ever reaches a buffered segment while
//! the server runs (only a graceful stop flushes them), so the cut takes the
//! messages and keeps the offset: the recovery must continue the log past it
//! (ADR 0010), and the next verification probes that `Next` from that offset
//! returns the next message sent, which a reused offset would skip.
//!
//! Invariants, and why they hold:
//! - The scenario runs with no other client and no ENOSPC window (the
//!   killer closes it first), so every request it makes is judged by the
//!   same oracle as the clients' and nothing races it.
//! - It claims nothing the server did not promise: if its send or store is
//!   not acknowledged (an armed failing fsync fired), it stores nothing and
//!   the cycle is an ordinary one. If a future sluice synced buffered
//!   segments, the log would simply not end before the offset, and the
//!   probe would report that the path was not reached, not a violation.

use super::client::{Ctx, Reply, call, parse_polled};
use super::oracle::{Kind, OffKey};
use super::verify::read_partition;
use super::workload::{send_payloads, store_offset};
use sluice_storage::sim::SimRng;

use super::topics;

/// Sends to the buffered topic, stores the last message's offset and
/// records it for the next verification's probe.
pub(super) async fn store_past_the_durable_log(ctx: &Ctx, rng: &mut SimRng) {
    let topic = topics::ADR_0010_TOPIC;
    let partition = u32::try_from(rng.below(u64::from(ctx.partitions))).unwrap_or(0);
    let n = rng.range(1, 3);
    let first = ctx
        .harness_seq
        .fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    let (_, Some(payloads)) = send_payloads(ctx, 0, (topic, partition), first, n).await else {
        return;
    };
    let start = ctx.tick();
    let log = match read_partition(ctx, topic, partition).await {
        Ok(log) => log,
        Err(e) => {
            ctx.violation(format!("the ADR 0010 cycle could not read the log: {e}"));
            return;
        }
    };
    ctx.oracle().check_poll(
        ctx.cycle,
        (topic, partition),
        start,
        "the ADR 0010 cycle's read",
        &log,
    );
    let Some(offset) = payloads
        .last()
        .and_then(|last| log.iter().find(|(_, p)| p == last).map(|(o, _)| *o))
    else {
        ctx.violation(format!(
            "the ADR 0010 cycle sent {payloads:?} (acknowledged) to {} partition {partition} and a read right after does not serve the last one",
            topics::spec(topic).name
        ));
        return;
    };
    let key = OffKey {
        topic,
        kind: Kind::Consumer,
        client: 1,
        partition,
    };
    let (_, acked) = store_offset(ctx, key, offset).await;
    if acked {
        let mut o = ctx.oracle();
        o.continuation = Some((key, offset));
        o.counts.continuation_cycles += 1;
    }
}

/// After the recovery that followed an ADR 0010 cycle (whose log of the
/// partition now ends at `end`): if the stored offset outlived the log, a
/// message sent now must be all that `Next` returns.
pub(super) async fn probe(ctx: &Ctx, key: OffKey, stored: u64, end: u64) -> Result<(), String> {
    let observed = ctx.oracle().offsets.get(&key).map(|h| h.last());
    // A different offset was already judged by the offset check; a log that
    // kept the messages did not reach the path.
    if observed != Some(Some(stored)) || end > stored {
        tracing::info!(%key, stored, ?observed, end, "soak: the ADR 0010 cycle's offset did not outlive the log");
        return Ok(());
    }
    let first = ctx
        .harness_seq
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let (_, sent) = send_payloads(ctx, 0, (key.topic, key.partition), first, 1).await;
    let Some(sent) = sent else {
        return Err(format!(
            "the ADR 0010 probe's send to {key} was not acknowledged"
        ));
    };
    let start = ctx.tick();
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/messages?consumer_id={}&partition_id={}&kind=next&count=10{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    let Reply::Answer { status: 200, body } = &reply else {
        return Err(format!("the ADR 0010 probe's poll: {}", reply.describe()));
    };
    let (_, polled) = parse_polled(body)?;
    ctx.oracle().check_poll(
        ctx.cycle,
        (key.topic, key.partition),
        start,
        &format!("the ADR 0010 probe's poll next {key}"),
        &polled,
    );
    let got: Vec<&String> = polled.iter().map(|(_, p)| p).collect();
    let past = polled.first().is_some_and(|(o, _)| *o > stored);
    if got == sent.iter().collect::<Vec<_>>() && past {
        ctx.oracle().counts.continuation_probes += 1;
    } else {
        ctx.violation(format!(
            "after a power cut took the messages up to stored offset {stored} of {key}, it sent {sent:?} and Next returned {polled:?}: a message acknowledged after the loss is skipped or misplaced"
        ));
    }
    Ok(())
}
