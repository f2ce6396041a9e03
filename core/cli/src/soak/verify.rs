//! A cycle's verification: with no client running, the catalog (what a
//! re-creation left unfinished, which incarnation each partition is), the
//! quiet period, each partition's generation, every partition's log, every
//! offset and `next` from it, and every user (`userstep`), checked against
//! the oracle.
//!
//! Invariants:
//! - Verification starts only after the server answers and the clients are
//!   stopped, so what it reads is the recovered state, not a race with load.
//! - Whatever it confirms is recorded at one tick (`confirmed_at`), so later
//!   checks treat it as acknowledged then.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{Ctx, Reply, SCAN_PAGE, call, expect_ok, parse_polled};
use sluice_sim::ack::{Generation, Served};

use super::oracle::{Kind, NEVER, OffKey, Oracle, Tick, check_log, check_offset, show};
use super::topics::Scope;
use super::{QUIET_TIMEOUT, STREAM, continuation, recreate, topics, userstep};

pub(super) async fn create_resources(ctx: &Ctx, clients: u32) -> Result<(), String> {
    expect_ok(
        ctx.http
            .post(ctx.url("/streams"))
            .bearer_auth(&ctx.token)
            .json(&json!({"name": STREAM})),
        "create stream",
    )
    .await?;
    let stream = match call(ctx.get(ctx.url(&format!("/streams/{STREAM}")))).await {
        Reply::Answer { status: 200, body } => serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["id"].as_u64())
            .and_then(|id| u32::try_from(id).ok()),
        _ => None,
    };
    ctx.oracle().stream_id = stream.ok_or("the soak stream's id cannot be read")?;
    for topic in 0..topics::count() {
        let name = topics::spec(topic).name;
        let reply = call(create_topic(ctx, topic, false)).await;
        let id = match &reply {
            Reply::Answer { status, body } if (200..300).contains(status) => {
                serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v["id"].as_u64())
            }
            other => return Err(format!("create topic {name}: {}", other.describe())),
        };
        if id != Some(u64::from(topic)) {
            return Err(format!(
                "topic {name} got id {id:?}, the soak expects {topic} (ADR 0013 numbering)"
            ));
        }
        for k in 1..=clients {
            expect_ok(create_group(ctx, topic, k), "create consumer group").await?;
        }
    }
    Ok(())
}

/// `POST` of soaked topic `topic` with its partitions and options; with
/// `same_id`, under its id (a re-creation: Iggy would otherwise pick the
/// lowest free one, which is the same here but not promised).
pub(super) fn create_topic(ctx: &Ctx, topic: u32, same_id: bool) -> reqwest::RequestBuilder {
    let spec = topics::spec(topic);
    let mut body = json!({
        "name": spec.name,
        "partitions_count": ctx.partitions,
        "compression_algorithm": "none",
        "message_expiry": 0,
        "max_topic_size": 0,
        "options": {
            "durability": spec.messages.as_str(),
            "consumer_offset_durability": spec.offsets.as_str(),
            "segment_size": ctx.segment_size.to_string(),
        }
    });
    if same_id {
        body["topic_id"] = json!(topic);
    }
    ctx.http
        .post(ctx.url(&format!("/streams/{STREAM}/topics")))
        .bearer_auth(&ctx.token)
        .json(&body)
}

/// `POST` of client `k`'s consumer group `g<k>` in `topic`.
pub(super) fn create_group(ctx: &Ctx, topic: u32, k: u32) -> reqwest::RequestBuilder {
    ctx.http
        .post(ctx.topic_url(topic, "/consumer-groups"))
        .bearer_auth(&ctx.token)
        .json(&json!({"name": format!("g{k}")}))
}

/// Waits for the quiet period's end: every obligation `applied`, nothing
/// stuck or degraded. Returns the committed generation of every partition,
/// per topic.
pub(super) async fn quiet_generations(ctx: &Ctx) -> Result<Vec<Vec<u64>>, String> {
    let deadline = Instant::now() + QUIET_TIMEOUT;
    loop {
        let reply = call(ctx.get(ctx.url(&format!("/status/purge?stream_id={STREAM}")))).await;
        let Reply::Answer { status: 200, body } = &reply else {
            return Err(format!("GET /status/purge: {}", reply.describe()));
        };
        let v: Value = serde_json::from_str(body).map_err(|e| format!("status not JSON: {e}"))?;
        let rows = v["partitions"].as_array().cloned().unwrap_or_default();
        let mut pending = Vec::new();
        let mut generations = vec![Vec::new(); topics::count() as usize];
        for row in &rows {
            let topic = row["topic_id"].as_u64().unwrap_or(u64::MAX);
            match generations.get_mut(topic as usize) {
                Some(g) => g.push(row["committed_generation"].as_u64().unwrap_or(u64::MAX)),
                None => {
                    return Err(format!(
                        "GET /status/purge: a row of no soaked topic: {row}"
                    ));
                }
            }
            let ob = &row["obligation"];
            let settled = ob.is_null() || ob["state"] == "applied";
            if !settled || row["degraded"] == true || ob["degraded"] == true || ob["stuck"] == true
            {
                pending.push(row.to_string());
            }
        }
        if pending.is_empty()
            && generations
                .iter()
                .all(|g| g.len() == ctx.partitions as usize)
        {
            return Ok(generations);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after a quiet period of {QUIET_TIMEOUT:?} not every obligation is applied: {}",
                pending.join("; ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Counts, from each topic's details, the partitions whose log has rolled
/// (more than one segment) since its last purge.
pub(super) async fn count_segments(ctx: &Ctx) -> Result<(), String> {
    for topic in 0..topics::count() {
        let v = get_topic(ctx, topic)
            .await?
            .ok_or_else(|| format!("topic {} is gone", topics::spec(topic).name))?;
        let partitions = v["partitions"].as_array().cloned().unwrap_or_default();
        let mut o = ctx.oracle();
        for p in &partitions {
            let segments = p["segments_count"]
                .as_u64()
                .ok_or_else(|| format!("a partition without segments_count: {p}"))?;
            if segments > 1 {
                o.counts.partitions_rolled += 1;
            }
            o.counts.segments_most = o.counts.segments_most.max(segments);
        }
    }
    Ok(())
}

/// A soaked topic's details (`None`: it does not exist).
pub(super) async fn get_topic(ctx: &Ctx, topic: u32) -> Result<Option<Value>, String> {
    let reply = call(ctx.get(ctx.topic_url(topic, ""))).await;
    match &reply {
        Reply::Answer { status: 200, body } => serde_json::from_str(body)
            .map(Some)
            .map_err(|e| format!("topic not JSON: {e}")),
        Reply::Answer { status: 404, .. }
            if reply.code().as_deref() == Some("topic_id_not_found") =>
        {
            Ok(None)
        }
        other => Err(format!(
            "GET topic {}: {}",
            topics::spec(topic).name,
            other.describe()
        )),
    }
}

pub(super) async fn read_partition(
    ctx: &Ctx,
    topic: u32,
    partition: u32,
) -> Result<Vec<(u64, String)>, String> {
    let mut all = Vec::new();
    let mut next = 0u64;
    loop {
        let reply = call(ctx.get(ctx.topic_url(topic, &format!(
            "/messages?consumer_id=1&partition_id={partition}&kind=offset&value={next}&count={SCAN_PAGE}"
        ))))
        .await;
        let Reply::Answer { status: 200, body } = &reply else {
            return Err(format!(
                "reading {} partition {partition}: {}",
                topics::spec(topic).name,
                reply.describe()
            ));
        };
        let (_, page) = parse_polled(body)?;
        let done = (page.len() as u64) < SCAN_PAGE;
        if let Some((last, _)) = page.last() {
            next = last + 1;
        }
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

pub(super) async fn read_offset(ctx: &Ctx, key: OffKey) -> Result<Option<u64>, String> {
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/consumer-offsets?consumer_id={}&partition_id={}{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    match &reply {
        Reply::Answer { status: 200, body } => serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["stored_offset"].as_u64())
            .map(Some)
            .ok_or_else(|| format!("offset of {key}: no stored_offset in {body}")),
        Reply::Answer { status: 404, .. }
            if reply.code().as_deref() == Some("consumer_offset_not_found") =>
        {
            Ok(None)
        }
        other => Err(format!("offset of {key}: {}", other.describe())),
    }
}

/// The verification after a (re)start, with no client running. Errors are
/// reported as violations by the caller; a failed request here is one too.
/// `last`: the final verification, before the graceful stop.
pub(super) async fn verify(ctx: &Ctx, clients: u32, last: bool) -> Result<(), String> {
    let t_v = ctx.tick();
    let _confirm = ctx.tick();
    let confirmed_at = t_v + 1;

    // 1. The catalog: what a re-creation left unfinished is completed, and
    // which re-creations took effect is decided. Then the quiet period and
    // the committed generation of every partition.
    recreate::settle(ctx, clients, t_v).await?;
    let generations = quiet_generations(ctx).await?;
    settle_purges(ctx, &generations, t_v);

    // 2. Every partition's log.
    let mut logs: BTreeMap<(u32, u32), Vec<(u64, String)>> = BTreeMap::new();
    for topic in 0..topics::count() {
        for partition in 0..ctx.partitions {
            let log = read_partition(ctx, topic, partition).await?;
            let mut o = ctx.oracle();
            let cut = ctx.powercut.is_some();
            check_log(
                &mut o,
                ctx.cycle,
                (topic, partition),
                &log,
                confirmed_at,
                cut,
            );
            logs.insert((topic, partition), log);
        }
    }
    count_segments(ctx).await?;
    // The highest offset stored per partition, for ADR 0010's continuation.
    let mut highest: BTreeMap<(u32, u32), u64> = BTreeMap::new();

    // 3. Every offset, and `next` from it.
    for key in offset_keys(clients, ctx.partitions) {
        let log = logs
            .get(&(key.topic, key.partition))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let observed = read_offset(ctx, key).await?;
        if let Some(s) = observed {
            let h = highest.entry((key.topic, key.partition)).or_insert(s);
            *h = (*h).max(s);
        }
        let cut = ctx.powercut.is_some() && ctx.cycle > 0;
        check_offset(&mut ctx.oracle(), ctx.cycle, key, observed, log, cut);
        check_next(ctx, key, observed, log).await?;
    }

    // 4. Every user the clients own, its permissions and its tokens.
    userstep::verify_users(ctx, clients, last).await?;
    let continuation = {
        let mut o = ctx.oracle();
        record_floors(&mut o, &logs, &highest, confirmed_at);
        o.base_tick = t_v;
        o.kill_tick = NEVER;
        o.continuation.take()
    };
    if let Some((key, stored)) = continuation {
        let end = logs
            .get(&(key.topic, key.partition))
            .and_then(|log| log.last())
            .map_or(0, |(last, _)| last + 1);
        continuation::probe(ctx, key, stored, end).await?;
    }
    Ok(())
}

/// After a verification: per partition, the offset new messages must reach
/// (past the log and every stored offset, ADR 0010), and the continuation
/// the recovery made, if any.
pub(super) fn record_floors(
    o: &mut Oracle,
    logs: &BTreeMap<(u32, u32), Vec<(u64, String)>>,
    highest: &BTreeMap<(u32, u32), u64>,
    confirmed_at: Tick,
) {
    for ((topic, partition), log) in logs {
        let generation = o.generation(*topic, *partition);
        let end = log.last().map_or(0, |(last, _)| last + 1);
        let ceiling =
            sluice_sim::ack::continue_ceiling(highest.get(&(*topic, *partition)).copied());
        let floor = match ceiling {
            Some(to) if to > end => {
                o.counts.continuations += 1;
                o.jumps
                    .entry((*topic, *partition))
                    .or_default()
                    .push((generation, end, to));
                to
            }
            _ => end,
        };
        o.floors
            .insert((*topic, *partition), (generation, confirmed_at, floor));
    }
}

/// Every offset the clients own: per topic, client, partition and kind.
pub(super) fn offset_keys(clients: u32, partitions: u32) -> Vec<OffKey> {
    let mut keys = Vec::new();
    for topic in 0..topics::count() {
        for client in 1..=clients {
            for partition in 0..partitions {
                for kind in [Kind::Consumer, Kind::Group] {
                    keys.push(OffKey {
                        topic,
                        kind,
                        client,
                        partition,
                    });
                }
            }
        }
    }
    keys
}

/// Decides, from the committed generations, which purges since the last
/// verification took effect, and moves each partition's fence. The
/// re-creations are decided already (`recreate::settle`): one that took
/// effect starts its partitions' generations over at 0.
pub(super) fn settle_purges(ctx: &Ctx, generations: &[Vec<u64>], t_v: Tick) {
    let cycle = ctx.cycle;
    let mut o = ctx.oracle();
    let kill_tick = o.kill_tick;
    let since = o.base_tick;
    // Purges in doubt that may have reached the server, in the order sent.
    let doubtful: Vec<usize> = o
        .purges
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.start > since && !p.acked && p.start < kill_tick && p.scope.recreation().is_none()
        })
        .map(|(i, _)| i)
        .collect();
    // Per partition, the model's verdict on the generation served: whether
    // its topic's purge in doubt landed (a purge answered with an error
    // leaves the server's generation as it was, so the purges in doubt of
    // one topic all aim at the one after the acknowledged one: at most one
    // lands). The partitions of a topic must agree; a re-creation that took
    // effect comes after every purge in doubt (the workload starts none
    // while one is), so it hides none of them.
    let mut landed = Vec::new();
    let mut explained = true;
    for (topic, gens) in generations.iter().enumerate() {
        let topic = topic as u32;
        let name = topics::spec(topic).name;
        let mut moved_in = Vec::new();
        for (partition, seen) in gens.iter().enumerate() {
            let partition = partition as u32;
            let mut generation = o
                .generations
                .get(&(topic, partition))
                .copied()
                .unwrap_or_default();
            for p in o
                .purges
                .iter()
                .filter(|p| p.start > since && p.scope.covers(topic, partition))
            {
                if p.scope.recreation().is_some() {
                    if p.effective == Some(true) {
                        generation = Generation::default();
                    }
                } else if p.acked {
                    generation.purge_acknowledged();
                } else if p.start < kill_tick {
                    generation.purge_failed();
                    if p.failed_at.is_some_and(|t| o.write_acked_after(topic, t)) {
                        generation.write_acknowledged();
                    }
                }
            }
            let acknowledged = generation.acknowledged();
            let problem = match generation.observe(*seen) {
                Served::Acknowledged => None,
                Served::InDoubtLanded { lost_acked } => lost_acked.then(|| {
                    format!(
                        "a purge of {name} answered with an error landed (generation {seen} of partition {partition}) after the server acknowledged a write to the old generation"
                    )
                }),
                Served::WentBack => Some(format!(
                    "{name} partition {partition} serves purge generation {seen}, below the acknowledged {acknowledged}: an acknowledged purge was lost"
                )),
                Served::NeverRequested => Some(format!(
                    "{name} partition {partition} serves purge generation {seen}, acknowledged {acknowledged}: a purge nobody sent landed"
                )),
            };
            let moved = generation.acknowledged() != acknowledged;
            if let Some(problem) = problem {
                o.violation(cycle, problem);
                if !moved {
                    explained = false;
                    generation.judge_on_from(*seen);
                }
            }
            moved_in.push(moved);
            o.generations.insert((topic, partition), generation);
        }
        let moved = moved_in.iter().any(|m| *m);
        if moved && !moved_in.iter().all(|m| *m) {
            explained = false;
            o.violation(
                cycle,
                format!(
                    "partitions of {name} disagree on whether a purge in doubt landed (per partition: {moved_in:?}; committed generations {gens:?})"
                ),
            );
        }
        landed.push(u64::from(moved));
    }
    let scopes: Vec<Scope> = doubtful.iter().map(|i| o.purges[*i].scope).collect();
    let choice = explained
        .then(|| topics::landed_purges(&scopes, &landed))
        .flatten();
    let choice = match choice {
        Some(c) => c,
        None => {
            if explained {
                let msg = format!(
                    "committed purge generations {generations:?} (per topic and partition), with these purges in doubt: {scopes:?}: a purge in doubt landed in part of its scope"
                );
                o.violation(cycle, msg);
            }
            vec![false; doubtful.len()]
        }
    };
    for (i, landed) in doubtful.iter().zip(choice) {
        if let Some(p) = o.purges.get_mut(*i) {
            p.effective = Some(landed);
            if landed {
                p.end = t_v;
            }
        }
    }
    for p in o.purges.iter_mut() {
        if p.start > since && p.effective.is_none() {
            p.effective = Some(p.acked);
        }
    }
    for (topic, gens) in generations.iter().enumerate() {
        let topic = topic as u32;
        for partition in 0..gens.len() as u32 {
            let fence = o
                .purges
                .iter()
                .filter(|p| p.effective == Some(true) && p.scope.covers(topic, partition))
                .map(|p| (p.start, p.end))
                .max();
            match fence {
                Some(f) => o.fences.insert((topic, partition), f),
                None => o.fences.remove(&(topic, partition)),
            };
        }
    }
}

/// `next` from the stored offset returns the complete rest of the fresh
/// history: every message past the offset, in order, with none skipped (the
/// log may have ADR 0010 gaps), up to a page.
pub(super) async fn check_next(
    ctx: &Ctx,
    key: OffKey,
    observed: Option<u64>,
    log: &[(u64, String)],
) -> Result<(), String> {
    let reply = call(ctx.get(ctx.topic_url(
        key.topic,
        &format!(
            "/messages?consumer_id={}&partition_id={}&kind=next&count={SCAN_PAGE}{}",
            key.consumer_id(),
            key.partition,
            key.kind_query()
        ),
    )))
    .await;
    let Reply::Answer { status: 200, body } = &reply else {
        return Err(format!("poll next for {key}: {}", reply.describe()));
    };
    let (_, polled) = parse_polled(body)?;
    let expected: Vec<&(u64, String)> = sluice_sim::ack::next_after(log, observed)
        .take(SCAN_PAGE as usize)
        .collect();
    let got: Vec<&(u64, String)> = polled.iter().collect();
    if got != expected {
        let end = log.last().map_or(0, |(last, _)| last + 1);
        let first = |v: &[&(u64, String)]| v.first().map(|(o, _)| *o);
        ctx.violation(format!(
            "poll next for {key} with stored offset {} in a log ending at {end} returned {} message(s) from offset {:?}, expected the {} from {:?}",
            show(observed),
            got.len(),
            first(&got),
            expected.len(),
            first(&expected)
        ));
    }
    Ok(())
}
