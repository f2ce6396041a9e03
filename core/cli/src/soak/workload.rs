//! The clients' workload: seeded operations (send, poll `next`, scan, store
//! and delete offsets, purges, and a seeded share of users changes,
//! `userstep`) and how each answer is classified.
//!
//! Invariants:
//! - Every operation that can change state (send, store, delete, purge,
//!   poll with `auto_commit`, a users change) is recorded in the oracle before it is sent
//!   and completed after its answer, so a kill can cut it at any point and
//!   it stays in doubt; reads take their start tick before they are sent.
//! - Each client's operations are a function of the seed; only their
//!   interleaving depends on timing.
//! - At most one purge (or a purge and the re-creation that follows it) is
//!   in flight at a time (`purge_gate`), which the in-doubt purge
//!   arithmetic (`topics::landed_purges`) relies on; no purge is sent while
//!   a re-creation is unfinished (`recreate`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::client::{Ctx, Reply, call, parse_polled, wire_payload};
use super::oracle::{Counts, Kind, Msg, NEVER, OffKey, OffOp, PurgeRec, Tick, Val};
use super::topics::{Durability, Scope};
use super::{STREAM, recreate, topics, userstep};
use sluice_storage::sim::SimRng;

pub(super) enum Step {
    Continue,
    Stop,
}

/// What a client last learnt of each `(topic, partition)`'s log end (the
/// poll answer's `current_offset`), to pick offsets worth storing.
pub(super) struct Known {
    pub(super) partitions: u32,
    pub(super) current: Vec<Option<u64>>,
}

impl Known {
    pub(super) fn new(partitions: u32) -> Known {
        Known {
            partitions,
            current: vec![None; (partitions * topics::count()) as usize],
        }
    }

    pub(super) fn slot(&mut self, topic: u32, partition: u32) -> Option<&mut Option<u64>> {
        self.current
            .get_mut((topic * self.partitions + partition) as usize)
    }

    pub(super) fn get(&self, topic: u32, partition: u32) -> Option<u64> {
        self.current
            .get((topic * self.partitions + partition) as usize)
            .copied()
            .flatten()
    }

    pub(super) fn learn(&mut self, topic: u32, partition: u32, current: u64, polled: bool) {
        if let Some(slot) = self.slot(topic, partition) {
            *slot = (current > 0 || polled).then_some(current);
        }
    }
}

/// One client's operations until the kill (or its first in doubt): `rng`
/// draws the messages and offsets ones, `users_rng` (its own stream, so the
/// other operations are the same with or without users) which of them are
/// replaced by a change of a user (`userstep`).
pub(super) async fn client_loop(
    ctx: Arc<Ctx>,
    client: u32,
    mut rng: SimRng,
    mut users_rng: SimRng,
) {
    let partitions = u64::from(ctx.partitions);
    let mut known = Known::new(ctx.partitions);
    let mut sent = 0u64;
    loop {
        if ctx.killed.load(Ordering::SeqCst) {
            return;
        }
        ctx.started_ops.fetch_add(1, Ordering::SeqCst);
        if users_rng.below(100) < ctx.users_percent {
            match userstep::step(&ctx, client, &mut users_rng).await {
                Step::Continue => continue,
                Step::Stop => return,
            }
        }
        let topic = u32::try_from(rng.below(u64::from(topics::count()))).unwrap_or(0);
        let partition = u32::try_from(rng.below(partitions)).unwrap_or(0);
        let kind = if rng.below(2) == 0 {
            Kind::Consumer
        } else {
            Kind::Group
        };
        let key = OffKey {
            topic,
            kind,
            client,
            partition,
        };
        let at = (topic, partition);
        let roll = rng.below(100);
        let step = match roll {
            0..40 => {
                let n = rng.range(1, 3);
                sent += n;
                send(&ctx, client, at, sent - n, n).await
            }
            40..60 => {
                let auto_commit = rng.below(2) == 0;
                let count = rng.range(1, 10);
                poll_next(&ctx, key, count, auto_commit, &mut known).await
            }
            60..68 => scan(&ctx, client, at, &mut known).await,
            68..82 => match known.get(topic, partition) {
                Some(last) => {
                    let value = rng.range(0, last);
                    store(&ctx, key, value).await
                }
                None => match scan(&ctx, client, at, &mut known).await {
                    Step::Stop => Step::Stop,
                    Step::Continue => match known.get(topic, partition) {
                        Some(last) => store(&ctx, key, rng.range(0, last)).await,
                        None => Step::Continue,
                    },
                },
            },
            82..95 => delete(&ctx, key).await,
            _ => {
                // A topic purge of one of the topics, or a stream purge; a
                // seeded share of topic purges is followed by a re-creation
                // of the topic or its last partitions under their ids.
                let which = rng.below(u64::from(topics::count()) + 1);
                let topic = u32::try_from(which).ok().filter(|t| *t < topics::count());
                let recreation = recreate::draw(&ctx, &mut rng, topic);
                let gate = ctx.purge_gate.try_lock();
                if gate.is_ok() && !ctx.oracle().recreation_unfinished() {
                    match (purge(&ctx, topic).await, recreation) {
                        ((Step::Continue, true), Some(r)) => match recreate::run(&ctx, r).await {
                            // The new incarnation's first send, while the
                            // old one's cleanup may still be running.
                            Step::Continue => {
                                let n = rng.range(1, 3);
                                sent += n;
                                send(&ctx, client, (r.topic, r.from), sent - n, n).await
                            }
                            Step::Stop => Step::Stop,
                        },
                        ((step, _), _) => step,
                    }
                } else {
                    let n = rng.range(1, 3);
                    sent += n;
                    send(&ctx, client, at, sent - n, n).await
                }
            }
        };
        if matches!(step, Step::Stop) {
            return;
        }
    }
}

/// The outcome of an operation that changes state, for the oracle.
pub(super) enum Outcome {
    Acked(Tick),
    /// Refused with an answer that promises nothing changed.
    Refused,
    /// Refused because the disk was full (507 `storage_full`, or 503
    /// `unavailable` while a metadata save cannot be redone): not
    /// acknowledged, nothing changed.
    Full,
    /// Refused with a 404 because its topic, partition or group was gone
    /// while a re-creation of it ran (or a send's 400: the topic had no
    /// partition left): not acknowledged, nothing changed.
    Gone,
    InDoubt,
    NotSent,
}

/// Classifies the answer to a request sent at `start`; `at` is the topic
/// (and partition) it addresses, where a re-creation may have taken it away.
pub(super) fn classify(
    ctx: &Ctx,
    start: Tick,
    reply: &Reply,
    ok: u16,
    refusal: Option<(u16, &str)>,
    what: &str,
    at: Option<(u32, Option<u32>)>,
) -> Outcome {
    let end = ctx.tick();
    let code = reply.code();
    match reply {
        Reply::Answer { status, .. } if *status == ok => Outcome::Acked(end),
        Reply::Answer { status, .. }
            if refusal.is_some_and(|(s, c)| *status == s && code.as_deref() == Some(c)) =>
        {
            Outcome::Refused
        }
        Reply::Answer { status, .. }
            if at.is_some_and(|(topic, partition)| {
                let partition = match (*status, code.as_deref()) {
                    (404, Some("partition_not_found"))
                    // A send to a topic whose partitions are all gone.
                    | (400, Some("invalid_key_value_length")) => partition,
                    // Only a whole topic's re-creation takes these away.
                    (404, Some("topic_id_not_found" | "consumer_group_id_not_found")) => None,
                    _ => return false,
                };
                ctx.oracle().recreating(topic, partition, start, end)
            }) =>
        {
            Outcome::Gone
        }
        // The file system refused growth while this request ran: a full
        // disk refuses, it never half-applies.
        Reply::Answer { status, .. }
            if matches!(
                (*status, code.as_deref()),
                (507, Some("storage_full")) | (503, Some("unavailable"))
            ) && ctx.in_enospc_window(start, end) =>
        {
            Outcome::Full
        }
        // A failing fsync armed by --powercut may fail the request that hit
        // it: its effect is then in doubt, as at a kill.
        Reply::Answer { status, .. }
            if *status >= 500
                && ctx
                    .powercut
                    .as_ref()
                    .is_some_and(|p| p.injected() > ctx.injected_at_start) =>
        {
            Outcome::InDoubt
        }
        Reply::Answer { .. } => {
            ctx.violation(format!("{what}: unexpected answer {}", reply.describe()));
            Outcome::InDoubt
        }
        Reply::NotSent => Outcome::NotSent,
        Reply::Lost(_) => Outcome::InDoubt,
    }
}

pub(super) fn count(ctx: &Ctx, outcome: &Outcome, bump: impl FnOnce(&mut Counts)) -> Step {
    let mut o = ctx.oracle();
    match outcome {
        Outcome::Acked(_) => {
            bump(&mut o.counts);
            Step::Continue
        }
        Outcome::Refused => {
            o.counts.refused += 1;
            Step::Continue
        }
        Outcome::Full => {
            o.counts.refused_full += 1;
            Step::Continue
        }
        Outcome::Gone => {
            o.counts.refused_gone += 1;
            Step::Continue
        }
        Outcome::InDoubt => {
            o.counts.in_doubt += 1;
            Step::Stop
        }
        Outcome::NotSent => Step::Stop,
    }
}

/// Sends `n` messages to one partition as `client` (0: the harness), its
/// sequence numbers `first..first + n`; returns the step and the payloads.
pub(super) async fn send_payloads(
    ctx: &Ctx,
    client: u32,
    (topic, partition): (u32, u32),
    first: u64,
    n: u64,
) -> (Step, Option<Vec<String>>) {
    let seqs: Vec<u64> = (first..first + n).collect();
    let payloads: Vec<String> = seqs
        .iter()
        .map(|i| format!("s{}-c{}-t{topic}-k{client}-n{i}", ctx.seed, ctx.cycle))
        .collect();
    let start = ctx.tick();
    {
        let mut o = ctx.oracle();
        for (seq, p) in seqs.iter().zip(&payloads) {
            o.messages.insert(
                p.clone(),
                Msg {
                    topic,
                    partition,
                    client,
                    seq: *seq,
                    cycle: ctx.cycle,
                    start,
                    end: NEVER,
                    acked: false,
                    never: false,
                },
            );
        }
    }
    let messages: Vec<Value> = payloads
        .iter()
        .map(|p| json!({"id": 0, "payload": STANDARD.encode(wire_payload(p))}))
        .collect();
    let reply = call(
        ctx.http
            .post(ctx.topic_url(topic, "/messages"))
            .bearer_auth(&ctx.token)
            .json(&json!({
                "partitioning": {"kind": "partition_id", "value": STANDARD.encode(partition.to_le_bytes())},
                "messages": messages,
            })),
    )
    .await;
    let at = Some((topic, Some(partition)));
    let outcome = classify(ctx, start, &reply, 201, None, "send", at);
    {
        let mut o = ctx.oracle();
        for p in &payloads {
            if let Some(m) = o.messages.get_mut(p) {
                match outcome {
                    Outcome::Acked(end) => {
                        m.acked = true;
                        m.end = end;
                    }
                    // Refused by a full disk or a topic gone: never
                    // written, so it must never be served.
                    Outcome::NotSent | Outcome::Full | Outcome::Gone => m.never = true,
                    Outcome::Refused | Outcome::InDoubt => {}
                }
            }
        }
    }
    let acked = matches!(outcome, Outcome::Acked(_));
    let buffered = topics::spec(topic).messages == Durability::Buffered;
    let step = count(ctx, &outcome, |c| {
        c.sends += 1;
        c.messages += n;
        if buffered {
            c.messages_buffered += n;
        }
    });
    (step, acked.then_some(payloads))
}

pub(super) async fn send(ctx: &Ctx, client: u32, at: (u32, u32), first: u64, n: u64) -> Step {
    send_payloads(ctx, client, at, first, n).await.0
}

pub(super) async fn poll_next(
    ctx: &Ctx,
    key: OffKey,
    count_: u64,
    auto_commit: bool,
    known: &mut Known,
) -> Step {
    let start = ctx.tick();
    let index =
        auto_commit.then(|| record_offset_op(ctx, key, start, Val::Any, "poll next auto_commit"));
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/messages?consumer_id={}&partition_id={}&kind=next&count={count_}&auto_commit={auto_commit}{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    let outcome = classify(ctx, start, &reply, 200, None, "poll next", key.at());
    let mut effect = None;
    if let (Outcome::Acked(_), Reply::Answer { body, .. }) = (&outcome, &reply) {
        match parse_polled(body) {
            Ok((cur, polled)) => {
                known.learn(key.topic, key.partition, cur, !polled.is_empty());
                effect = Some(polled.last().map(|(o, _)| *o));
                ctx.oracle().check_poll(
                    ctx.cycle,
                    (key.topic, key.partition),
                    start,
                    &format!("poll next {key}"),
                    &polled,
                );
            }
            Err(e) => ctx.violation(format!("poll next {key}: {e}")),
        }
    }
    if let Some(i) = index {
        let mut o = ctx.oracle();
        if let Some(op) = o.offset_ops.get_mut(&key).and_then(|ops| ops.get_mut(i)) {
            match (&outcome, effect) {
                (Outcome::Acked(end), Some(Some(last))) => {
                    op.acked = true;
                    op.end = *end;
                    op.effect = Val::At(last);
                }
                (Outcome::Acked(_) | Outcome::NotSent | Outcome::Full | Outcome::Gone, _) => {
                    // Nothing polled, never sent, or refused: no commit happened.
                    op.acked = false;
                    op.start = NEVER;
                }
                _ => {}
            }
        }
        if let Some(ops) = o.offset_ops.get_mut(&key) {
            ops.retain(|op| op.start != NEVER);
        }
    }
    count(ctx, &outcome, |c| c.polls += 1)
}

pub(super) async fn scan(
    ctx: &Ctx,
    client: u32,
    (topic, partition): (u32, u32),
    known: &mut Known,
) -> Step {
    let start = ctx.tick();
    let reply = call(ctx.get(ctx.topic_url(
        topic,
        &format!(
            "/messages?consumer_id={client}&partition_id={partition}&kind=offset&value=0&count=100"
        ),
    )))
    .await;
    let at = Some((topic, Some(partition)));
    let outcome = classify(ctx, start, &reply, 200, None, "scan", at);
    let name = topics::spec(topic).name;
    if let (Outcome::Acked(_), Reply::Answer { body, .. }) = (&outcome, &reply) {
        match parse_polled(body) {
            Ok((cur, polled)) => {
                known.learn(topic, partition, cur, !polled.is_empty());
                ctx.oracle().check_poll(
                    ctx.cycle,
                    (topic, partition),
                    start,
                    &format!("scan of {name} partition {partition}"),
                    &polled,
                );
            }
            Err(e) => ctx.violation(format!("scan of {name} partition {partition}: {e}")),
        }
    }
    count(ctx, &outcome, |c| c.polls += 1)
}

/// Records an offset operation before it is sent; `finish` completes it.
pub(super) fn begin_offset_op(
    ctx: &Ctx,
    key: OffKey,
    effect: Val,
    what: &'static str,
) -> (Tick, usize) {
    let start = ctx.tick();
    (start, record_offset_op(ctx, key, start, effect, what))
}

/// Records an offset operation sent at `start`, not yet answered; returns
/// its index in the key's history.
fn record_offset_op(ctx: &Ctx, key: OffKey, start: Tick, effect: Val, what: &'static str) -> usize {
    let mut o = ctx.oracle();
    let ops = o.offset_ops.entry(key).or_default();
    ops.push(OffOp {
        start,
        end: NEVER,
        acked: false,
        effect,
        what,
    });
    ops.len() - 1
}

pub(super) fn finish_offset_op(ctx: &Ctx, key: OffKey, index: usize, outcome: &Outcome) {
    let mut o = ctx.oracle();
    let Some(ops) = o.offset_ops.get_mut(&key) else {
        return;
    };
    match outcome {
        Outcome::Acked(end) => {
            if let Some(op) = ops.get_mut(index) {
                op.acked = true;
                op.end = *end;
            }
        }
        Outcome::Refused | Outcome::Full | Outcome::Gone | Outcome::NotSent => {
            if index < ops.len() {
                ops.remove(index);
            }
        }
        Outcome::InDoubt => {}
    }
}

pub(super) fn count_offset_op(ctx: &Ctx, key: OffKey, outcome: &Outcome, store: bool) -> Step {
    let buffered = topics::spec(key.topic).offsets == Durability::Buffered;
    count(ctx, outcome, |c| {
        if store {
            c.stores += 1;
        } else {
            c.deletes += 1;
        }
        if buffered {
            c.offsets_buffered += 1;
        }
    })
}

pub(super) async fn store(ctx: &Ctx, key: OffKey, value: u64) -> Step {
    store_offset(ctx, key, value).await.0
}

/// Stores `value` as `key`'s offset; also says whether it was acknowledged.
pub(super) async fn store_offset(ctx: &Ctx, key: OffKey, value: u64) -> (Step, bool) {
    let (start, index) = begin_offset_op(ctx, key, Val::At(value), "store");
    let mut body = json!({
        "consumer_id": key.consumer_id(),
        "partition_id": key.partition,
        "offset": value,
    });
    if key.kind == Kind::Group {
        body["consumer_kind"] = json!("consumer_group");
    }
    let reply = call(
        ctx.http
            .put(ctx.topic_url(key.topic, "/consumer-offsets"))
            .bearer_auth(&ctx.token)
            .json(&body),
    )
    .await;
    // An offset beyond the log (a purge got in between) is refused.
    let outcome = classify(
        ctx,
        start,
        &reply,
        204,
        Some((400, "invalid_offset")),
        "store offset",
        key.at(),
    );
    finish_offset_op(ctx, key, index, &outcome);
    let acked = matches!(outcome, Outcome::Acked(_));
    (count_offset_op(ctx, key, &outcome, true), acked)
}

pub(super) async fn delete(ctx: &Ctx, key: OffKey) -> Step {
    let (start, index) = begin_offset_op(ctx, key, Val::None, "delete");
    let reply = call(
        ctx.http
            .delete(ctx.topic_url(
                key.topic,
                &format!(
                    "/consumer-offsets/{}?partition_id={}{}",
                    key.consumer_id(),
                    key.partition,
                    key.kind_query()
                ),
            ))
            .bearer_auth(&ctx.token),
    )
    .await;
    // 404: there was no offset, which leaves it none, like a delete.
    let outcome = match classify(
        ctx,
        start,
        &reply,
        204,
        Some((404, "consumer_offset_not_found")),
        "delete offset",
        key.at(),
    ) {
        Outcome::Refused => Outcome::Acked(ctx.tick()),
        other => other,
    };
    finish_offset_op(ctx, key, index, &outcome);
    count_offset_op(ctx, key, &outcome, false)
}

/// Purges one topic (`None`: the stream); also says whether it was
/// acknowledged.
pub(super) async fn purge(ctx: &Ctx, topic: Option<u32>) -> (Step, bool) {
    let scope = topic.map_or(Scope::Stream, Scope::Topic);
    if let Some(pc) = &ctx.powercut {
        pc.before_purge(ctx.cycle, ctx.purges_started.fetch_add(1, Ordering::SeqCst));
    }
    ctx.purge_in_flight.store(true, Ordering::SeqCst);
    let start = ctx.tick();
    let index = {
        let mut o = ctx.oracle();
        o.purges.push(PurgeRec::sent(scope, start));
        o.purges.len() - 1
    };
    let url = match topic {
        Some(t) => ctx.topic_url(t, "/purge"),
        None => ctx.url(&format!("/streams/{STREAM}/purge")),
    };
    let at = topic.map(|t| (t, None));
    let reply = call(ctx.http.delete(url).bearer_auth(&ctx.token)).await;
    let outcome = classify(ctx, start, &reply, 204, None, &format!("purge {scope}"), at);
    {
        let mut o = ctx.oracle();
        match outcome {
            Outcome::Acked(end) => {
                if let Some(p) = o.purges.get_mut(index) {
                    p.acked = true;
                    p.end = end;
                }
            }
            Outcome::NotSent | Outcome::Refused | Outcome::Full | Outcome::Gone => {
                if let Some(p) = o.purges.get_mut(index) {
                    p.effective = Some(false);
                    p.start = 0;
                }
            }
            // An error answer (not a lost one): the server serves on.
            Outcome::InDoubt => {
                if let (Reply::Answer { .. }, Some(p)) = (&reply, o.purges.get_mut(index)) {
                    p.failed_at = Some(ctx.tick());
                }
            }
        }
        o.purges.retain(|p| p.start != 0);
    }
    ctx.purge_in_flight.store(false, Ordering::SeqCst);
    let acked = matches!(outcome, Outcome::Acked(_));
    let step = count(ctx, &outcome, |c| match topic {
        Some(_) => c.purges += 1,
        None => c.stream_purges += 1,
    });
    (step, acked)
}
