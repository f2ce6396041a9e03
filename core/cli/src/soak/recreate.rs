//! Re-creations under the same ids while a purge cleans (issue 27).
//!
//! A purge's cleanup syncs and unlinks without the engine lock (ADR 0019,
//! 0020), and Iggy reuses ids: a topic or partition deleted while its
//! cleanup waits can be created again at the same paths before that I/O
//! runs. In a seeded share of topic purges the purging client therefore
//! goes on, still holding the purge gate, to delete the topic (or its last
//! partitions) and create it again under the same ids (the topic by its
//! explicit id and name, with its consumer groups; partitions by a `POST`
//! that hands the freed ids back), then sends to it, while the other
//! clients keep sending, polling and storing offsets on it. With
//! `--powercut` a failing directory sync is armed first, in the same
//! seeded share as before purges, on a directory the new incarnation gets
//! at the old one's path.
//!
//! The oracle judges a re-creation as a new history, like a purge's, that
//! starts at generation 0 (`Scope::Recreate`): what was acknowledged before
//! its delete was sent is gone and must never be served again, what is
//! acknowledged after its last step was answered must survive like anything
//! else, and what overlapped it in real time took effect on either side.
//!
//! Invariants:
//! - At most one purge or re-creation is in flight (the purge gate), none
//!   starts while a purge or re-creation since the last verification is in
//!   doubt, and no purge is sent while a re-creation is unfinished (the
//!   workload checks `Oracle::reset_in_doubt` and `recreation_unfinished`):
//!   so every re-creation that takes effect on a partition follows all of
//!   its purges in doubt, and the generations decide those as before.
//! - Whether a re-creation in doubt landed is read from the catalog, never
//!   guessed: a partition's `created_at` names its incarnation (the
//!   verification before, and every acknowledged re-creation, record it), and
//!   a topic, partition or group the delete took away and no creation
//!   brought back is created again by the verification, as the client would
//!   have (`settle`). A missing resource no unfinished re-creation explains,
//!   or an incarnation nobody made, is a violation.
//! - A 404 for a topic, partition or group (or a send's 400 for a topic
//!   with no partition left) is a refusal (not acknowledged, nothing
//!   changed) only for a request that overlapped a re-creation of it
//!   (`Oracle::recreating`); anywhere else it is a violation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::STREAM;
use super::client::{Ctx, Reply, call, expect_ok};
use super::oracle::{Oracle, PurgeRec, Tick};
use super::topics::{self, Recreation, Scope};
use super::verify::{create_group, create_topic, get_topic};
use super::workload::{Outcome, Step, classify};
use sluice_storage::sim::SimRng;

/// Draws, for a purge of `topic` (`None`: the stream, never re-created),
/// whether the purging client then re-creates the topic and how: the whole
/// topic, or its last 1 to all partitions. Always draws the same numbers,
/// so a client's sequence does not depend on which branch is taken.
pub(super) fn draw(ctx: &Ctx, rng: &mut SimRng, topic: Option<u32>) -> Option<Recreation> {
    let chosen = rng.below(100) < ctx.recreate_percent;
    let whole = rng.below(2) == 0;
    let count = rng.range(1, u64::from(ctx.partitions));
    let topic = topic?;
    let count = u32::try_from(count).unwrap_or(1).min(ctx.partitions);
    chosen.then_some(Recreation {
        topic,
        from: if whole { 0 } else { ctx.partitions - count },
        whole,
    })
}

/// Deletes and creates again what `r` names, right after the purge of its
/// topic (the caller holds the purge gate), then hands back to the client,
/// which sends to it. Stops the client when a step's answer is lost.
pub(super) async fn run(ctx: &Ctx, r: Recreation) -> Step {
    if ctx.oracle().reset_in_doubt() {
        return Step::Continue;
    }
    let cleaning = cleanup_pending(ctx, r).await;
    if let Some(pc) = &ctx.powercut {
        let n = ctx.recreations_started.fetch_add(1, Ordering::SeqCst);
        pc.before_recreation(ctx.cycle, n, r.topic, r.from..ctx.partitions);
    }
    ctx.purge_in_flight.store(true, Ordering::SeqCst);
    let start = ctx.tick();
    let index = {
        let mut o = ctx.oracle();
        o.purges.push(PurgeRec::sent(Scope::Recreate(r), start));
        o.purges.len() - 1
    };
    let step = steps(ctx, r, index, cleaning).await;
    ctx.purge_in_flight.store(false, Ordering::SeqCst);
    tracing::debug!(
        cycle = ctx.cycle,
        recreation = %Scope::Recreate(r),
        cleaning,
        acknowledged = ctx.oracle().purges.get(index).is_some_and(|p| p.acked),
        "soak: re-creation"
    );
    step
}

/// How one step of a re-creation ended.
enum Next {
    /// Acknowledged: on to the next step.
    Go,
    /// Not acknowledged, the server serves on: the re-creation stays
    /// unfinished (the verification decides it) and the client goes on.
    Unfinished,
    /// No answer: in doubt, the client stops.
    Stop,
}

fn next(ctx: &Ctx, outcome: &Outcome) -> Next {
    match outcome {
        Outcome::Acked(_) => Next::Go,
        Outcome::Full => {
            ctx.oracle().counts.refused_full += 1;
            Next::Unfinished
        }
        Outcome::Refused | Outcome::Gone => Next::Unfinished,
        Outcome::InDoubt => {
            ctx.oracle().counts.in_doubt += 1;
            Next::Stop
        }
        Outcome::NotSent => Next::Stop,
    }
}

async fn steps(ctx: &Ctx, r: Recreation, index: usize, cleaning: bool) -> Step {
    let name = topics::spec(r.topic).name;
    let what = Scope::Recreate(r).to_string();
    // Its own steps overlap it: a 404 to one of them is no refusal but a
    // resource lost (the gate keeps every other re-creation out).
    let at = None;
    // 1. The delete: once acknowledged, the old history is gone.
    let start = ctx.tick();
    let url = if r.whole {
        ctx.topic_url(r.topic, "")
    } else {
        ctx.topic_url(
            r.topic,
            &format!("/partitions?partitions_count={}", ctx.partitions - r.from),
        )
    };
    let reply = call(ctx.http.delete(url).bearer_auth(&ctx.token)).await;
    let outcome = classify(
        ctx,
        start,
        &reply,
        204,
        None,
        &format!("{what}: delete"),
        at,
    );
    match outcome {
        Outcome::Acked(_) => {
            if let Some(p) = ctx.oracle().purges.get_mut(index) {
                p.deleted = true;
            }
        }
        // Nothing was deleted: no re-creation happened.
        Outcome::NotSent | Outcome::Refused | Outcome::Full | Outcome::Gone => {
            let mut o = ctx.oracle();
            if let Some(p) = o.purges.get_mut(index) {
                p.start = 0;
            }
            o.purges.retain(|p| p.start != 0);
            if matches!(outcome, Outcome::Full) {
                o.counts.refused_full += 1;
            }
            return match outcome {
                Outcome::NotSent => Step::Stop,
                _ => Step::Continue,
            };
        }
        Outcome::InDoubt => {
            ctx.oracle().counts.in_doubt += 1;
            return Step::Stop;
        }
    }
    // 2. The creation under the same ids, and the topic's groups.
    let start = ctx.tick();
    let (request, ok) = if r.whole {
        (create_topic(ctx, r.topic, true), 200)
    } else {
        let count = ctx.partitions - r.from;
        let url = ctx.topic_url(r.topic, "/partitions");
        let request = ctx
            .http
            .post(url)
            .bearer_auth(&ctx.token)
            .json(&json!({"partitions_count": count}));
        (request, 201)
    };
    let reply = call(request).await;
    let outcome = classify(ctx, start, &reply, ok, None, &format!("{what}: create"), at);
    match next(ctx, &outcome) {
        Next::Go => {}
        Next::Unfinished => return Step::Continue,
        Next::Stop => return Step::Stop,
    }
    if r.whole {
        for k in 1..=ctx.clients {
            let start = ctx.tick();
            let reply = call(create_group(ctx, r.topic, k)).await;
            let what = format!("{what}: create group g{k}");
            let outcome = classify(ctx, start, &reply, 200, None, &what, at);
            match next(ctx, &outcome) {
                Next::Go => {}
                Next::Unfinished => return Step::Continue,
                Next::Stop => return Step::Stop,
            }
        }
    }
    let end = ctx.tick();
    {
        let mut o = ctx.oracle();
        if let Some(p) = o.purges.get_mut(index) {
            p.acked = true;
            p.end = end;
            p.effective = Some(true);
        }
        if r.whole {
            o.counts.recreated_topics += 1;
        } else {
            o.counts.recreated_partitions += 1;
        }
        if cleaning {
            o.counts.recreated_while_cleaning += 1;
        }
    }
    // 3. Which incarnation it made, and under which ids.
    match get_topic(ctx, r.topic).await {
        Ok(Some(details)) => {
            let partitions = partitions_of(&details);
            let expected: Vec<u32> = (0..ctx.partitions).collect();
            if partitions.keys().copied().collect::<Vec<_>>() != expected {
                ctx.violation(format!(
                    "after the {what} (acknowledged) {name} has partitions {:?}, expected {expected:?}: the ids were not given back",
                    partitions.keys().collect::<Vec<_>>()
                ));
            }
            let made: BTreeSet<u64> = partitions
                .range(r.from..)
                .map(|(_, created)| *created)
                .collect();
            if made.len() == 1 {
                if let Some(p) = ctx.oracle().purges.get_mut(index) {
                    p.created_at = made.first().copied();
                }
            } else {
                ctx.violation(format!(
                    "the {what} (acknowledged) made partitions created at {made:?}: one creation gives one time"
                ));
            }
            if details["id"].as_u64() != Some(u64::from(r.topic)) || details["name"] != name {
                ctx.violation(format!(
                    "the {what} (acknowledged) made topic {} {}, expected {} {name}",
                    details["id"], details["name"], r.topic
                ));
            }
            Step::Continue
        }
        Ok(None) => {
            ctx.violation(format!(
                "topic {name} is gone right after its {what} was acknowledged"
            ));
            Step::Continue
        }
        // The server is gone (a kill): a read changes nothing.
        Err(_) => Step::Stop,
    }
}

/// Whether a purge's cleanup of a partition `r` re-creates is still pending
/// (`/status/purge`): the delete then ends an incarnation whose cleanup has
/// work planned (or under way) without the engine lock.
async fn cleanup_pending(ctx: &Ctx, r: Recreation) -> bool {
    let reply = call(ctx.get(ctx.url(&format!(
        "/status/purge?stream_id={STREAM}&topic_id={}",
        r.topic
    ))))
    .await;
    let Reply::Answer { status: 200, body } = &reply else {
        return false;
    };
    let rows = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["partitions"].as_array().cloned())
        .unwrap_or_default();
    rows.iter().any(|row| {
        let ob = &row["obligation"];
        row["partition_id"].as_u64().unwrap_or(0) >= u64::from(r.from)
            && !ob.is_null()
            && ob["state"] != "applied"
    })
}

/// A topic's partitions, by id, with their `created_at`.
fn partitions_of(details: &Value) -> BTreeMap<u32, u64> {
    details["partitions"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    let id = u32::try_from(p["id"].as_u64()?).ok()?;
                    Some((id, p["created_at"].as_u64()?))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the catalog holds of one soaked topic.
struct Found {
    partitions: BTreeMap<u32, u64>,
    groups: BTreeSet<String>,
}

async fn read_catalog(ctx: &Ctx) -> Result<Vec<Option<Found>>, String> {
    let mut out = Vec::new();
    for topic in 0..topics::count() {
        let Some(details) = get_topic(ctx, topic).await? else {
            out.push(None);
            continue;
        };
        let name = topics::spec(topic).name;
        if details["name"] != name {
            return Err(format!(
                "topic {topic} is named {}, the soak made it {name}",
                details["name"]
            ));
        }
        let reply = call(ctx.get(ctx.topic_url(topic, "/consumer-groups"))).await;
        let Reply::Answer { status: 200, body } = &reply else {
            return Err(format!(
                "the consumer groups of {name}: {}",
                reply.describe()
            ));
        };
        let groups = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|g| g["name"].as_str().map(str::to_string))
            .collect();
        out.push(Some(Found {
            partitions: partitions_of(&details),
            groups,
        }));
    }
    Ok(out)
}

/// At a verification, before the quiet period: completes what unfinished
/// re-creations left gone (the topic, its partitions, its groups, as the
/// client would have made them), decides from each partition's `created_at`
/// which of them took effect, checks that every acknowledged one did and
/// that no partition changed incarnation otherwise, and records the
/// incarnations found.
pub(super) async fn settle(ctx: &Ctx, clients: u32, t_v: Tick) -> Result<(), String> {
    let unfinished = unfinished(&ctx.oracle());
    let mut catalog = read_catalog(ctx).await?;
    let mut made: BTreeSet<(u32, u32)> = BTreeSet::new();
    for (topic, found) in catalog.iter().enumerate() {
        let topic = topic as u32;
        let name = topics::spec(topic).name;
        let open = unfinished
            .iter()
            .find(|(_, r)| r.topic == topic)
            .map(|(_, r)| *r);
        let missing: Vec<u32> = (0..ctx.partitions)
            .filter(|p| found.as_ref().is_none_or(|f| !f.partitions.contains_key(p)))
            .collect();
        let groups_missing: Vec<u32> = (1..=clients)
            .filter(|k| {
                found
                    .as_ref()
                    .is_none_or(|f| !f.groups.contains(&format!("g{k}")))
            })
            .collect();
        let explained = match open {
            Some(r) if r.whole => true,
            Some(r) => {
                found.is_some() && groups_missing.is_empty() && missing.iter().all(|p| *p >= r.from)
            }
            None => false,
        };
        if !explained && (!missing.is_empty() || !groups_missing.is_empty()) {
            return Err(format!(
                "{name} lacks partitions {missing:?} and groups {groups_missing:?}, and no unfinished re-creation of it explains that"
            ));
        }
        if found.is_none() {
            expect_ok(
                create_topic(ctx, topic, true),
                &format!("re-create topic {name}"),
            )
            .await?;
        } else if !missing.is_empty() {
            expect_ok(
                ctx.http
                    .post(ctx.topic_url(topic, "/partitions"))
                    .bearer_auth(&ctx.token)
                    .json(&json!({"partitions_count": missing.len()})),
                &format!("re-create partitions {missing:?} of {name}"),
            )
            .await?;
        }
        for k in &groups_missing {
            expect_ok(
                create_group(ctx, topic, *k),
                &format!("re-create group g{k} of {name}"),
            )
            .await?;
        }
        made.extend(missing.iter().map(|p| (topic, *p)));
    }
    if !made.is_empty() {
        catalog = read_catalog(ctx).await?;
    }
    let at = Verification {
        cycle: ctx.cycle,
        partitions: ctx.partitions,
        t_v,
    };
    judge(&mut ctx.oracle(), &at, &catalog, &unfinished, &made);
    Ok(())
}

/// The re-creations since the last verification left unfinished, with their
/// index in `Oracle::purges`.
fn unfinished(o: &Oracle) -> Vec<(usize, Recreation)> {
    o.purges
        .iter()
        .enumerate()
        .filter(|(_, p)| p.start > o.base_tick && !p.acked && p.effective.is_none())
        .filter_map(|(i, p)| p.scope.recreation().map(|r| (i, r)))
        .collect()
}

/// The verification `judge` decides for.
struct Verification {
    cycle: u64,
    /// Partitions of each soaked topic.
    partitions: u32,
    /// The verification's tick: when an unfinished re-creation that landed
    /// is known to have ended.
    t_v: Tick,
}

/// The decisions of `settle`, once the catalog is complete (`made`: the
/// partitions the verification created itself).
fn judge(
    o: &mut Oracle,
    at: &Verification,
    catalog: &[Option<Found>],
    unfinished: &[(usize, Recreation)],
    made: &BTreeSet<(u32, u32)>,
) {
    let Verification {
        cycle,
        partitions,
        t_v,
    } = *at;
    let since = o.base_tick;
    // Per unfinished re-creation, whether each partition it covers says it landed.
    let mut landed: BTreeMap<usize, Vec<bool>> = BTreeMap::new();
    for (topic, found) in catalog.iter().enumerate() {
        let topic = topic as u32;
        let name = topics::spec(topic).name;
        for partition in 0..partitions {
            let Some(observed) = found
                .as_ref()
                .and_then(|f| f.partitions.get(&partition).copied())
            else {
                o.violation(
                    cycle,
                    format!("{name} partition {partition} is missing after the verification re-created it"),
                );
                continue;
            };
            // The incarnation the oracle knows: the last acknowledged
            // re-creation's since the last verification, or the one found then.
            let acked = o.purges.iter().rfind(|p| {
                p.start > since
                    && p.acked
                    && p.scope.recreation().is_some()
                    && p.scope.covers(topic, partition)
            });
            let known = match acked {
                Some(p) => p.created_at,
                None => o.incarnations.get(&(topic, partition)).copied(),
            };
            let open = unfinished
                .iter()
                .find(|(_, r)| Scope::Recreate(*r).covers(topic, partition))
                .map(|(i, _)| *i);
            let changed = known.is_some_and(|k| k != observed);
            match open {
                Some(i) => {
                    let deleted = o.purges.get(i).is_some_and(|p| p.deleted);
                    let here = deleted || changed || made.contains(&(topic, partition));
                    if deleted && !changed && !made.contains(&(topic, partition)) && known.is_some()
                    {
                        o.violation(
                            cycle,
                            format!(
                                "{name} partition {partition} serves the incarnation created at {observed}, which an acknowledged delete ended: a deletion was undone"
                            ),
                        );
                    }
                    landed.entry(i).or_default().push(here);
                }
                None if changed => {
                    let was = if acked.is_some() {
                        "the acknowledged re-creation made"
                    } else {
                        "the last verification found"
                    };
                    o.violation(
                        cycle,
                        format!(
                            "{name} partition {partition} serves the incarnation created at {observed}, not the one created at {} that {was}: a re-creation was lost, or one nobody asked for happened",
                            known.unwrap_or_default()
                        ),
                    );
                }
                None => {}
            }
            o.incarnations.insert((topic, partition), observed);
        }
    }
    for (i, verdicts) in landed {
        let all = verdicts.iter().all(|v| *v);
        if !all && verdicts.iter().any(|v| *v) {
            let what = o
                .purges
                .get(i)
                .map(|p| p.scope.to_string())
                .unwrap_or_default();
            o.violation(
                cycle,
                format!("the {what} (in doubt) landed in part of its partitions: {verdicts:?}"),
            );
        }
        let landed = verdicts.iter().any(|v| *v);
        o.counts.recreations_in_doubt += 1;
        if landed {
            o.counts.recreations_landed += 1;
        }
        if let Some(p) = o.purges.get_mut(i) {
            p.effective = Some(landed);
            if landed {
                p.end = t_v;
            }
        }
    }
    // The new logs start at 0: nothing of the old ones' shape applies.
    let reset: Vec<(u32, u32)> = o
        .purges
        .iter()
        .filter(|p| p.start > since && p.effective == Some(true))
        .filter_map(|p| p.scope.recreation())
        .flat_map(|r| (r.from..partitions).map(move |q| (r.topic, q)))
        .collect();
    for at in reset {
        o.forget_log_shape(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::oracle::NEVER;

    const WHOLE: Recreation = Recreation {
        topic: 0,
        from: 0,
        whole: true,
    };
    const LAST: Recreation = Recreation {
        topic: 0,
        from: 1,
        whole: false,
    };
    const AT: Verification = Verification {
        cycle: 1,
        partitions: 2,
        t_v: 100,
    };

    /// An oracle whose last verification (at tick 10) found every partition
    /// created at 1, with `recs` since.
    fn oracle(recs: Vec<PurgeRec>) -> Oracle {
        let mut o = Oracle::new(1);
        o.base_tick = 10;
        for topic in 0..topics::count() {
            for partition in 0..2 {
                o.incarnations.insert((topic, partition), 1);
            }
        }
        o.purges = recs;
        o
    }

    /// A re-creation sent at tick 20; acknowledged ones were answered at 30.
    fn rec(r: Recreation, acked: bool, deleted: bool, created_at: Option<u64>) -> PurgeRec {
        PurgeRec {
            end: if acked { 30 } else { NEVER },
            acked,
            effective: acked.then_some(true),
            deleted,
            created_at,
            ..PurgeRec::sent(Scope::Recreate(r), 20)
        }
    }

    /// The catalog after the verification: topic 0's partitions created at
    /// `created`, the other topics' at 1.
    fn catalog(created: [u64; 2]) -> Vec<Option<Found>> {
        let found = |c: [u64; 2]| {
            Some(Found {
                partitions: (0..2).zip(c).collect(),
                groups: BTreeSet::new(),
            })
        };
        let mut out = vec![found(created)];
        out.extend((1..topics::count()).map(|_| found([1, 1])));
        out
    }

    fn judged(mut o: Oracle, created: [u64; 2], made: &[(u32, u32)]) -> Oracle {
        let open = unfinished(&o);
        let made: BTreeSet<(u32, u32)> = made.iter().copied().collect();
        judge(&mut o, &AT, &catalog(created), &open, &made);
        o
    }

    #[test]
    fn an_acknowledged_recreation_must_be_the_incarnation_served() {
        // Given a whole topic re-created (acknowledged) at created_at 5,
        let o = judged(oracle(vec![rec(WHOLE, true, true, Some(5))]), [5, 5], &[]);
        // then partitions created at 5 are what it made,
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.incarnations.get(&(0, 1)), Some(&5));
        // and the old incarnation served again means it was lost.
        let o = judged(oracle(vec![rec(WHOLE, true, true, Some(5))]), [1, 1], &[]);
        assert_eq!(o.violations.len(), 2, "{:?}", o.violations);
        o.assert_violation("a re-creation was lost");
    }

    #[test]
    fn a_partition_changing_incarnation_without_a_recreation_is_a_violation() {
        let o = judged(oracle(Vec::new()), [1, 7], &[]);
        assert_eq!(o.violations.len(), 1, "{:?}", o.violations);
        assert!(o.violations[0].contains("partition 1"));
    }

    #[test]
    fn a_recreation_in_doubt_landed_exactly_when_its_partitions_changed_incarnation() {
        // Given the last partition's re-creation in doubt (no step acknowledged),
        let doubt = || oracle(vec![rec(LAST, false, false, None)]);
        // then the same incarnation says it did not land,
        let o = judged(doubt(), [1, 1], &[]);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.purges[0].effective, Some(false));
        assert_eq!(o.purges[0].end, NEVER);
        // and a new one that it did, ending by the verification.
        let o = judged(doubt(), [1, 9], &[]);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.purges[0].effective, Some(true));
        assert_eq!(o.purges[0].end, AT.t_v);
        assert_eq!(
            (o.counts.recreations_in_doubt, o.counts.recreations_landed),
            (1, 1)
        );
    }

    #[test]
    fn an_acknowledged_delete_ends_the_old_incarnation_whatever_became_of_the_creation() {
        // Given a topic re-creation whose delete was acknowledged and whose
        // creation never was,
        let deleted = || oracle(vec![rec(WHOLE, false, true, None)]);
        // then the topic the verification had to create again is a landing,
        let o = judged(deleted(), [9, 9], &[(0, 0), (0, 1)]);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.purges[0].effective, Some(true));
        // and the old incarnation still there is a deletion undone.
        judged(deleted(), [1, 1], &[]).assert_violation("a deletion was undone");
    }

    #[test]
    fn a_recreation_in_doubt_lands_in_all_its_partitions_or_in_none() {
        let o = judged(oracle(vec![rec(WHOLE, false, false, None)]), [1, 9], &[]);
        o.assert_violation("landed in part");
    }

    #[test]
    fn a_landed_recreation_forgets_the_old_logs_shape_of_its_partitions_only() {
        let mut o = oracle(vec![rec(LAST, true, true, Some(9))]);
        for partition in 0..2 {
            o.jumps.insert((0, partition), vec![(0, 2, 5)]);
            o.floors.insert((0, partition), (0, 5, 5));
        }
        let o = judged(o, [1, 9], &[]);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert!(o.jumps.contains_key(&(0, 0)) && o.floors.contains_key(&(0, 0)));
        assert!(!o.jumps.contains_key(&(0, 1)) && !o.floors.contains_key(&(0, 1)));
    }
}
