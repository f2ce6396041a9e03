//! The oracle: what the soak knows of every request, and the checks that
//! judge a recovered server against it.
//!
//! Invariants:
//! - Every request is recorded with a tick taken before it was sent and one
//!   after its answer (`NEVER` without one), so "answered before sent" is
//!   exact and anything in doubt allows both outcomes.
//! - The checks are pure functions of the record and what the server served
//!   (no I/O here), so they are unit-tested below on hand-made histories.
//! - What was acknowledged is kept in `sluice_sim::ack`'s state, the model
//!   the simulator and the purge proptest keep theirs in: each offset's
//!   history in an `OffsetHistory`, each partition's purge generation in a
//!   `Generation`; what a cut may take, what `Next` must return and where
//!   ADR 0010 lets a log continue are its rules. What is here is how the soak
//!   observes: ticks of concurrent clients (which order a purge and an
//!   offset operation of another client may have taken effect in), answers
//!   lost to a kill. The ticks of offset operations live only until the
//!   verification that folds them into the history (`check_offset`).
//! - A `persisted` log is gap-free but for ADR 0010 continuations and what
//!   a power cut took of sends in doubt with nothing acknowledged after them
//!   (`cut_may_skip`); a `buffered` log may also skip what a power cut took
//!   from a sealed segment (ADR 0004 §3 step 4). Such a gap is allowed from
//!   then on, never a repeated offset.
//! - Users (issue 29) are kept per name in `users`, with their own two ticks
//!   per change; their model and its check are the `users` module's.

use std::collections::{BTreeMap, HashMap};

use sluice_sim::ack::{Generation, Lapse, OffsetHistory};

use super::topics;
use super::topics::{Durability, Scope};
use super::users::{DeadTokens, UserKey, UserRec};

/// `(generation, from, to)`: a recovery found a partition's log ending at
/// `from` with an offset `to - 1` stored, so the log continues at `to`.
pub(super) type Continuation = (u64, u64, u64);

/// A value of the global logical clock.
pub(super) type Tick = u64;
/// "Not answered": after every tick.
pub(super) const NEVER: Tick = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    Consumer,
    Group,
}

/// One offset: an individual consumer (id = client number) or a consumer
/// group (`g<client number>`), in one partition. Each is used by one client
/// only, so its operations are sequential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct OffKey {
    pub(super) topic: u32,
    pub(super) kind: Kind,
    pub(super) client: u32,
    pub(super) partition: u32,
}

impl OffKey {
    pub(super) fn consumer_id(&self) -> String {
        match self.kind {
            Kind::Consumer => self.client.to_string(),
            Kind::Group => format!("g{}", self.client),
        }
    }

    /// Where a request about this offset goes, for `workload::classify`.
    pub(super) fn at(&self) -> Option<(u32, Option<u32>)> {
        Some((self.topic, Some(self.partition)))
    }

    pub(super) fn kind_query(&self) -> &'static str {
        match self.kind {
            Kind::Consumer => "",
            Kind::Group => "&consumer_kind=consumer_group",
        }
    }
}

impl std::fmt::Display for OffKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Consumer => "consumer",
            Kind::Group => "group",
        };
        write!(
            f,
            "{kind} {} of {} partition {}",
            self.consumer_id(),
            topics::spec(self.topic).name,
            self.partition
        )
    }
}

/// What an offset operation sets: none, an offset, or unknown (an
/// `auto_commit` poll in doubt may have stored any offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Val {
    None,
    At(u64),
    Any,
}

impl Val {
    /// The offset set, as `ack` records it; `None` when unknown.
    pub(super) fn set(self) -> Option<Option<u64>> {
        match self {
            Val::None => Some(None),
            Val::At(o) => Some(Some(o)),
            Val::Any => None,
        }
    }
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::None => write!(f, "none"),
            Val::At(o) => write!(f, "{o}"),
            Val::Any => write!(f, "any"),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Msg {
    pub(super) topic: u32,
    pub(super) partition: u32,
    pub(super) client: u32,
    /// The client's send sequence in its cycle: a client sends one batch at
    /// a time, so its messages must keep (cycle, seq) order in the log.
    pub(super) seq: u64,
    pub(super) cycle: u64,
    pub(super) start: Tick,
    pub(super) end: Tick,
    pub(super) acked: bool,
    /// Found absent once (or could not have been sent): must never be served.
    pub(super) never: bool,
}

#[derive(Debug, Clone)]
pub(super) struct PurgeRec {
    pub(super) scope: Scope,
    pub(super) start: Tick,
    pub(super) end: Tick,
    pub(super) acked: bool,
    /// Answered with an error at this tick (in doubt): the server serves on
    /// after it, so a write acknowledged later says it did not land.
    pub(super) failed_at: Option<Tick>,
    /// Decided at the next verification.
    pub(super) effective: Option<bool>,
    /// A re-creation whose delete was acknowledged: the old history is gone,
    /// whatever became of the creation.
    pub(super) deleted: bool,
    /// A re-creation's partitions' `created_at`, once read back: what
    /// identifies the incarnation it made.
    pub(super) created_at: Option<u64>,
}

impl PurgeRec {
    /// A request sent at `start`, not answered yet.
    pub(super) fn sent(scope: Scope, start: Tick) -> PurgeRec {
        PurgeRec {
            scope,
            start,
            end: NEVER,
            acked: false,
            failed_at: None,
            effective: None,
            deleted: false,
            created_at: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct OffOp {
    pub(super) start: Tick,
    pub(super) end: Tick,
    pub(super) acked: bool,
    pub(super) effect: Val,
    pub(super) what: &'static str,
}

#[derive(Debug, Default, Clone)]
pub(super) struct Counts {
    pub(super) sends: u64,
    pub(super) messages: u64,
    /// Of `messages`, those acknowledged under `buffered`.
    pub(super) messages_buffered: u64,
    pub(super) polls: u64,
    pub(super) stores: u64,
    pub(super) deletes: u64,
    /// Of `stores` and `deletes`, those acknowledged under `buffered`.
    pub(super) offsets_buffered: u64,
    pub(super) purges: u64,
    pub(super) stream_purges: u64,
    pub(super) refused: u64,
    /// Refused with 507 `storage_full` or 503 `unavailable` while the file
    /// system refused growth (not acknowledged: nothing may have changed).
    pub(super) refused_full: u64,
    pub(super) enospc_windows: u64,
    /// ENOSPC windows that ended while the server kept serving.
    pub(super) enospc_closed_live: u64,
    /// Cycles that ended with an offset stored on an unsynced `buffered`
    /// message, a kill and a full cut (ADR 0010's path, on purpose).
    pub(super) continuation_cycles: u64,
    /// Of those, recoveries that continued the log and whose `Next` then
    /// returned the message sent after the loss.
    pub(super) continuation_probes: u64,
    pub(super) in_doubt: u64,
    pub(super) kills_in_purge: u64,
    pub(super) kills_at_start: u64,
    pub(super) cuts: u64,
    /// Recoveries that found an offset stored past the log's end, so the log
    /// continues after it (ADR 0010).
    pub(super) continuations: u64,
    /// Partitions found at a verification with more than one segment: the
    /// log rolled since its last purge (proof that rolls are soaked).
    pub(super) partitions_rolled: u64,
    /// The most segments one partition had at a verification.
    pub(super) segments_most: u64,
    /// Gaps a power cut left in a log: a sealed segment lost its unsynced
    /// tail and a later one kept its own (ADR 0004 §3 step 4), under
    /// `buffered`; and under `persisted`, with nothing acknowledged after it.
    pub(super) cut_gaps: u64,
    pub(super) cut_gaps_persisted: u64,
    /// Re-creations under the same ids acknowledged (every step): of whole
    /// topics, and of a topic's last partitions.
    pub(super) recreated_topics: u64,
    pub(super) recreated_partitions: u64,
    /// Of those, the ones whose delete found a purge's cleanup of the topic
    /// still pending (`/status/purge`): the old cleanup's work was planned
    /// for the incarnation the delete ended.
    pub(super) recreated_while_cleaning: u64,
    /// Re-creations left unfinished (a kill, an error answer, a full disk),
    /// and how many of them a verification found landed.
    pub(super) recreations_in_doubt: u64,
    pub(super) recreations_landed: u64,
    /// Requests refused with a 404 because their topic, partition or group
    /// was gone while a re-creation of it ran (not acknowledged).
    pub(super) refused_gone: u64,
    /// Users changes acknowledged (`userstep`): users created, given
    /// permissions, activated or deactivated, given a password, deleted;
    /// tokens created and deleted by their users.
    pub(super) user_creates: u64,
    pub(super) user_permissions: u64,
    pub(super) user_statuses: u64,
    pub(super) user_passwords: u64,
    pub(super) user_deletes: u64,
    pub(super) tokens_created: u64,
    pub(super) tokens_deleted: u64,
    /// User states verified after a restart; of them, those with a change in
    /// doubt, and those where the change in doubt had landed.
    pub(super) users_verified: u64,
    pub(super) users_doubtful: u64,
    pub(super) users_landed: u64,
    /// Token logins a verification tried (with secrets of live tokens, which
    /// must log in, and of deleted ones, which must not).
    pub(super) token_logins_tried: u64,
}

impl Counts {
    pub(super) fn acknowledged(&self) -> u64 {
        self.sends
            + self.polls
            + self.stores
            + self.deletes
            + self.purges
            + self.stream_purges
            + self.recreated_topics
            + self.recreated_partitions
            + self.refused
            + self.users_acknowledged()
    }

    /// Users changes acknowledged, of every kind.
    pub(super) fn users_acknowledged(&self) -> u64 {
        self.user_creates
            + self.user_permissions
            + self.user_statuses
            + self.user_passwords
            + self.user_deletes
            + self.tokens_created
            + self.tokens_deleted
    }
}

#[derive(Debug)]
pub(super) struct Oracle {
    pub(super) seed: u64,
    pub(super) messages: HashMap<String, Msg>,
    pub(super) purges: Vec<PurgeRec>,
    /// Offset operations since the last verification, per key, with their
    /// ticks: folded into `offsets` by the next verification, once it knows
    /// which purges took effect.
    pub(super) offset_ops: BTreeMap<OffKey, Vec<OffOp>>,
    /// Per key, its history in its partition's current generation, up to
    /// the last verification.
    pub(super) offsets: BTreeMap<OffKey, OffsetHistory>,
    /// The tick of the last verification: every later operation starts after it.
    pub(super) base_tick: Tick,
    /// Per `(topic, partition)`, the acknowledged purge generation and a
    /// purge in doubt (a re-creation starts it over at 0).
    pub(super) generations: BTreeMap<(u32, u32), Generation>,
    /// Per `(topic, partition)`, `(start, end)` of the last purge or
    /// re-creation that took effect on it.
    pub(super) fences: BTreeMap<(u32, u32), (Tick, Tick)>,
    /// Per `(topic, partition)`, the `created_at` of the incarnation the
    /// last verification found: a re-creation changes it.
    pub(super) incarnations: BTreeMap<(u32, u32), u64>,
    /// When the current cycle's server was dead and reaped.
    pub(super) kill_tick: Tick,
    pub(super) counts: Counts,
    pub(super) violations: Vec<String>,
    /// Every payload a poll served at `(topic, partition, offset)`: what a
    /// stored offset may have named.
    pub(super) served_at: HashMap<(u32, u32, u64), Vec<String>>,
    /// The offset each payload was first served at: a message keeps its
    /// offset for as long as it exists.
    pub(super) offset_of: HashMap<String, u64>,
    /// Per `(topic, partition)`, the ADR 0010 continuations seen at
    /// verifications: `(generation, from, to)`: the recovered log ended at
    /// `from` while an offset `to - 1 >= from` was stored, so the log
    /// continues at `to`.
    pub(super) jumps: BTreeMap<(u32, u32), Vec<Continuation>>,
    /// Per `(topic, partition)`, `(generation, confirmed_at, floor)` of the
    /// last verification: a message sent after it in that generation must
    /// get an offset `>= floor` (past the log and every stored offset, ADR
    /// 0010).
    pub(super) floors: BTreeMap<(u32, u32), (u64, Tick, u64)>,
    /// The offset an ADR 0010 cycle stored before its cut: the next
    /// verification probes that the log continues past it.
    pub(super) continuation: Option<(OffKey, u64)>,
    /// The users the clients own, by name (`users`, issue 29).
    pub(super) users: BTreeMap<UserKey, UserRec>,
    /// Secrets of tokens found deleted: never to log in again.
    pub(super) dead_tokens: DeadTokens,
    /// The soak stream's id, which permission sets grant on.
    pub(super) stream_id: u32,
}

impl Oracle {
    /// An oracle that knows nothing yet: no message, purge or offset.
    pub(super) fn new(seed: u64) -> Oracle {
        Oracle {
            seed,
            messages: HashMap::new(),
            purges: Vec::new(),
            offset_ops: BTreeMap::new(),
            offsets: BTreeMap::new(),
            base_tick: 0,
            generations: BTreeMap::new(),
            fences: BTreeMap::new(),
            incarnations: BTreeMap::new(),
            kill_tick: NEVER,
            counts: Counts::default(),
            violations: Vec::new(),
            served_at: HashMap::new(),
            offset_of: HashMap::new(),
            jumps: BTreeMap::new(),
            floors: BTreeMap::new(),
            continuation: None,
            users: BTreeMap::new(),
            dead_tokens: DeadTokens::default(),
            stream_id: 0,
        }
    }

    /// Test helper: a violation containing `text` was reported.
    #[cfg(test)]
    pub(super) fn assert_violation(&self, text: &str) {
        assert!(
            self.violations.iter().any(|v| v.contains(text)),
            "no violation with {text:?} in {:?}",
            self.violations
        );
    }

    pub(super) fn violation(&mut self, cycle: u64, what: String) {
        let line = format!("seed {} cycle {cycle}: {what}", self.seed);
        eprintln!("VIOLATION {line}");
        self.violations.push(line);
    }

    /// The start of the last acknowledged purge (or re-creation) of
    /// `(topic, partition)` answered before `tick`: messages acknowledged
    /// before it must not be served at `tick`.
    pub(super) fn live_fence(&self, (topic, partition): (u32, u32), tick: Tick) -> Option<Tick> {
        let mut fence = self.fence(topic, partition).map(|(s, _)| s);
        for p in &self.purges {
            if p.acked && p.end < tick && p.scope.covers(topic, partition) {
                fence = Some(fence.map_or(p.start, |f: Tick| f.max(p.start)));
            }
        }
        fence
    }

    pub(super) fn fence(&self, topic: u32, partition: u32) -> Option<(Tick, Tick)> {
        self.fences.get(&(topic, partition)).copied()
    }

    pub(super) fn generation(&self, topic: u32, partition: u32) -> u64 {
        self.generations
            .get(&(topic, partition))
            .map_or(0, Generation::acknowledged)
    }

    /// A re-creation of `(topic, partition)` took effect: what the oracle
    /// kept of the old incarnation's log by offset (ADR 0010 continuations,
    /// cut gaps, the floor for new messages) no longer applies; the new log
    /// starts at 0.
    pub(super) fn forget_log_shape(&mut self, at: (u32, u32)) {
        self.jumps.remove(&at);
        self.floors.remove(&at);
    }

    /// A re-creation covering `(topic, partition)` (all of the topic when
    /// `partition` is `None`) ran at some point between `start` and `end`:
    /// a 404 for its topic, partition or group then refuses a request that
    /// changed nothing.
    pub(super) fn recreating(
        &self,
        topic: u32,
        partition: Option<u32>,
        start: Tick,
        end: Tick,
    ) -> bool {
        self.purges.iter().any(|p| {
            p.start < end
                && start < p.end
                && p.scope
                    .recreation()
                    .is_some_and(|r| r.topic == topic && partition.map_or(r.whole, |q| q >= r.from))
        })
    }

    /// Whether a purge or re-creation since the last verification is still
    /// in doubt (answered with an error, or unfinished): the workload starts
    /// no re-creation then, so that a re-creation never hides a purge in
    /// doubt from the generations that decide it.
    pub(super) fn reset_in_doubt(&self) -> bool {
        self.purges
            .iter()
            .any(|p| p.start > self.base_tick && !p.acked && p.effective.is_none())
    }

    /// Whether a re-creation since the last verification is unfinished: the
    /// workload sends no purge then (a stream purge could not land in a
    /// topic that is gone, and the verification re-creates it at 0).
    pub(super) fn recreation_unfinished(&self) -> bool {
        self.purges.iter().any(|p| {
            p.start > self.base_tick
                && !p.acked
                && p.effective.is_none()
                && p.scope.recreation().is_some()
        })
    }

    /// Whether a write (send, offset store or delete) to `topic` sent after
    /// `tick` was acknowledged: the server then served the generation it
    /// had at `tick` as current.
    pub(super) fn write_acked_after(&self, topic: u32, tick: Tick) -> bool {
        self.messages
            .values()
            .any(|m| m.topic == topic && m.acked && m.start > tick)
            || self.offset_ops.iter().any(|(key, ops)| {
                key.topic == topic && ops.iter().any(|op| op.acked && op.start > tick)
            })
    }

    /// A message keeps the offset it was first served at; `problems` gets
    /// the one it moved from.
    pub(super) fn note_offset(&mut self, payload: &str, offset: u64) -> Option<u64> {
        match self.offset_of.get(payload) {
            Some(first) if *first != offset => Some(*first),
            Some(_) => None,
            None => {
                self.offset_of.insert(payload.to_string(), offset);
                None
            }
        }
    }

    /// Checks one poll answer from a live server.
    pub(super) fn check_poll(
        &mut self,
        cycle: u64,
        (topic, partition): (u32, u32),
        poll_start: Tick,
        what: &str,
        polled: &[(u64, String)],
    ) {
        let fence = self.live_fence((topic, partition), poll_start);
        let jumps = jumps_of(self, (topic, partition));
        let mut problems = Vec::new();
        for w in polled.windows(2) {
            if w[1].0 != w[0].0 + 1 && !jumps.contains(&(w[0].0 + 1, w[1].0)) {
                problems.push(format!(
                    "{what}: offsets not consecutive ({} then {}; ADR 0010 continuations {jumps:?})",
                    w[0].0, w[1].0
                ));
            }
        }
        for (offset, payload) in polled {
            let seen = self
                .served_at
                .entry((topic, partition, *offset))
                .or_default();
            if !seen.contains(payload) {
                seen.push(payload.clone());
            }
            if let Some(first) = self.note_offset(payload, *offset) {
                problems.push(format!(
                    "{what}: served {payload} at offset {offset}, first served at offset {first}: a message changed its offset"
                ));
            }
            match self.messages.get(payload) {
                None => problems.push(format!(
                    "{what}: served a message never sent: offset {offset} payload {payload:?}"
                )),
                Some(m) if m.partition != partition || m.topic != topic => problems.push(format!(
                    "{what}: message {payload} of {} partition {} served from {} partition {partition}",
                    topics::spec(m.topic).name,
                    m.partition,
                    topics::spec(topic).name
                )),
                Some(m) if m.never => problems.push(format!(
                    "{what}: served message {payload} (offset {offset}) which an earlier verification found purged or never written"
                )),
                Some(m) if fence.is_some_and(|f| m.end < f) => problems.push(format!(
                    "{what}: served purged message {payload} (offset {offset}): acknowledged before a purge that was acknowledged before this poll"
                )),
                Some(_) => {}
            }
        }
        for p in problems {
            self.violation(cycle, p);
        }
    }
}

/// Folds one key's offset operations since the last verification (in
/// order: one owner's) into its history. `purge` is `(start, end)` of the
/// last purge (or re-creation) of its partition that took effect since
/// then, if any: a new
/// generation, so the history starts over, without the operations answered
/// before the purge was sent; one that overlapped it may have taken effect
/// on either side of it (`OffsetHistory::raced`).
pub(super) fn fold_offset_ops(
    history: OffsetHistory,
    ops: &[OffOp],
    purge: Option<(Tick, Tick)>,
) -> OffsetHistory {
    let mut h = if purge.is_some() {
        OffsetHistory::default()
    } else {
        history
    };
    for op in ops {
        let raced = match purge {
            Some((start, _)) if op.end < start => continue,
            Some((_, end)) => op.start <= end,
            None => false,
        };
        match (op.effect.set(), op.acked) {
            // Only an `auto_commit` poll in doubt sets an unknown value (an
            // acknowledged one names the offset it committed).
            (None, _) => h.failed_unknown(),
            (Some(value), true) if raced => h.raced(value),
            (Some(value), true) => h.acknowledged(value),
            (Some(value), false) => h.failed(value),
        }
    }
    h
}

/// Checks one offset read at a verification against its history, the
/// operations on it and the purges since the last one, and against ADR
/// 0010. `power_cut`: the recovery followed a power cut.
pub(super) fn check_offset(
    o: &mut Oracle,
    cycle: u64,
    key: OffKey,
    observed: Option<u64>,
    log: &[(u64, String)],
    power_cut: bool,
) {
    // The log's end: one past its last message (it may have ADR 0010 gaps).
    let end = log.last().map_or(0, |(last, _)| last + 1);
    let since = o.base_tick;
    let kill_tick = o.kill_tick;
    let purge = o
        .purges
        .iter()
        .filter(|p| {
            p.start > since && p.effective == Some(true) && p.scope.covers(key.topic, key.partition)
        })
        .map(|p| (p.start, p.end))
        .next_back();
    let ops: Vec<OffOp> = o
        .offset_ops
        .remove(&key)
        .unwrap_or_default()
        .into_iter()
        .filter(|op| op.acked || op.start < kill_tick)
        .collect();
    let before = o.offsets.remove(&key).unwrap_or_default();
    let mut history = fold_offset_ops(before, &ops, purge);
    let durability = topics::spec(key.topic).offsets;
    if !history.may_show(observed, Lapse::of(durability.policy(), power_cut)) {
        let ops: Vec<String> = ops
            .iter()
            .map(|op| {
                format!(
                    "{} {} [{}..{}]{}",
                    op.what,
                    op.effect,
                    op.start,
                    show_tick(op.end),
                    if op.acked { "" } else { " in doubt" }
                )
            })
            .collect();
        o.violation(
            cycle,
            format!(
                "offset of {key} ({}{}) is {}, history {:?} (in doubt {:?}); operations since the last verification: {}; last purge since: {purge:?}",
                durability.as_str(),
                if power_cut { ", after a power cut" } else { "" },
                show(observed),
                history.acked(),
                history.in_doubt(),
                ops.join(", ")
            ),
        );
    }
    // ADR 0010: an offset past the recovered log is legitimate only if the
    // message it named was never acknowledged, was purged, or was
    // acknowledged under `buffered`; one that had to survive is a violation.
    if let Some(s) = observed
        && s >= end
    {
        let fence = o.fence(key.topic, key.partition);
        let named = o
            .served_at
            .get(&(key.topic, key.partition, s))
            .cloned()
            .unwrap_or_default();
        for payload in named {
            let required = o
                .messages
                .get(&payload)
                .is_some_and(|m| must_survive(m, fence, power_cut));
            if required {
                o.violation(
                    cycle,
                    format!(
                        "offset of {key} is {s}, beyond the log ending at {end}, and names acknowledged message {payload}, which had to survive"
                    ),
                );
            }
        }
    }
    if power_cut {
        history.recovered_from_disk(observed);
    } else {
        history.settle(observed);
    }
    o.offsets.insert(key, history);
}

/// An offset as the report names it.
pub(super) fn show(offset: Option<u64>) -> String {
    offset.map_or_else(|| "none".to_string(), |o| o.to_string())
}

/// Whether a recovery (after a power cut if `power_cut`) must leave `m` in
/// its log: acknowledged, not purged since (`fence`: its partition's last
/// purge or re-creation that took effect), and not `buffered` under a power
/// cut (a kill alone
/// keeps the page cache).
pub(super) fn must_survive(m: &Msg, fence: Option<(Tick, Tick)>, power_cut: bool) -> bool {
    !m.never
        && m.acked
        && !sluice_sim::ack::may_roll_back(topics::spec(m.topic).messages.policy(), power_cut)
        && fence.is_none_or(|(_, e)| e < m.start)
}

/// The ADR 0010 continuations allowed in a partition's log of the current
/// generation, as `(from, to)`.
pub(super) fn jumps_of(o: &Oracle, (topic, partition): (u32, u32)) -> Vec<(u64, u64)> {
    let generation = o.generation(topic, partition);
    o.jumps
        .get(&(topic, partition))
        .map(|jumps| {
            jumps
                .iter()
                .filter(|(g, _, _)| *g == generation)
                .map(|(_, from, to)| (*from, *to))
                .collect()
        })
        .unwrap_or_default()
}

/// The gaps of `log` (from 0) that `jumps` does not explain, as `(from, to)`.
pub(super) fn cut_gaps(jumps: &[(u64, u64)], log: &[(u64, String)]) -> Vec<(u64, u64)> {
    let mut expected = 0u64;
    let mut gaps = Vec::new();
    for (offset, _) in log {
        if *offset > expected && !jumps.contains(&(expected, *offset)) {
            gaps.push((expected, *offset));
        }
        expected = offset + 1;
    }
    gaps
}

/// Whether a power cut may have left a `persisted` log skipping to `to`:
/// only if no message from `to` on was acknowledged. Every acknowledged
/// `persisted` send syncs `segments/` after redoing what an earlier failed
/// sync dropped, so a skipped segment's name is durable once anything after
/// it is acknowledged. Without that, two sends in doubt (one answered with
/// an error after its new segment's directory sync failed, the next cut by
/// the kill while it redid the names) leave both segments' names unsynced,
/// and a partial cut may keep the later one's alone.
fn cut_may_skip(o: &Oracle, log: &[(u64, String)], to: u64) -> bool {
    log.iter()
        .filter(|(offset, _)| *offset >= to)
        .all(|(_, payload)| o.messages.get(payload).is_some_and(|m| !m.acked))
}

/// What polls served at the offsets of `gaps` (as `(from, to)`) of messages
/// not found absent since, and what the oracle knows of each: for a
/// violation's report.
fn skipped_messages(o: &Oracle, (topic, partition): (u32, u32), gaps: &[(u64, u64)]) -> String {
    let mut out = Vec::new();
    for (from, to) in gaps {
        for offset in *from..*to {
            let served = o.served_at.get(&(topic, partition, offset));
            for payload in served.into_iter().flatten() {
                let state = match o.messages.get(payload) {
                    None => "never sent".to_string(),
                    Some(m) if m.never => continue,
                    Some(m) => format!(
                        "cycle {}, [{}..{}] {}",
                        m.cycle,
                        m.start,
                        show_tick(m.end),
                        if m.acked { "acknowledged" } else { "in doubt" },
                    ),
                };
                out.push(format!("{offset}: {payload} ({state})"));
            }
        }
    }
    if out.is_empty() {
        "nothing".into()
    } else {
        out.join("; ")
    }
}

/// A tick as a report shows it.
pub(super) fn show_tick(tick: Tick) -> String {
    if tick == NEVER {
        "-".to_string()
    } else {
        tick.to_string()
    }
}

/// A log starts at 0 and is gap-free, except that it may skip from `from`
/// straight to `to` for each allowed `(from, to)` (ADR 0010) and nowhere else.
pub(super) fn gap_problem(jumps: &[(u64, u64)], log: &[(u64, String)]) -> Option<String> {
    let mut expected = 0u64;
    for (i, (offset, _)) in log.iter().enumerate() {
        if *offset != expected && !jumps.contains(&(expected, *offset)) {
            return Some(format!(
                "the log is not gap-free from 0 (but for ADR 0010 continuations {jumps:?}): position {i} holds offset {offset}, expected {expected}"
            ));
        }
        expected = offset + 1;
    }
    None
}

/// Checks one partition's whole log after a restart and records what it
/// proved: present messages are confirmed, absent ones may never come back.
pub(super) fn check_log(
    o: &mut Oracle,
    cycle: u64,
    (topic, partition): (u32, u32),
    log: &[(u64, String)],
    confirmed_at: Tick,
    power_cut: bool,
) {
    let fence = o.fence(topic, partition);
    let generation = o.generation(topic, partition);
    let name = topics::spec(topic).name;
    let mut problems = Vec::new();
    if power_cut {
        // A power cut may take a sealed segment (or its unsynced tail) and
        // keep a later one's, so the log skips offsets, never repeats one:
        // under `buffered` (ADR 0004 §3 step 4) anywhere, under `persisted`
        // only where nothing after the gap was acknowledged (`cut_may_skip`).
        // Such a gap is allowed from now on, like an ADR 0010 continuation;
        // whether a skipped message had to survive is judged below.
        let known = jumps_of(o, (topic, partition));
        let buffered = topics::spec(topic).messages == Durability::Buffered;
        let gaps: Vec<(u64, u64)> = cut_gaps(&known, log)
            .into_iter()
            .filter(|(_, to)| buffered || cut_may_skip(o, log, *to))
            .collect();
        if buffered {
            o.counts.cut_gaps += gaps.len() as u64;
        } else {
            o.counts.cut_gaps_persisted += gaps.len() as u64;
        }
        let jumps = o.jumps.entry((topic, partition)).or_default();
        jumps.extend(gaps.into_iter().map(|(from, to)| (generation, from, to)));
    }
    let jumps = jumps_of(o, (topic, partition));
    if let Some(problem) = gap_problem(&jumps, log) {
        let skipped = skipped_messages(o, (topic, partition), &cut_gaps(&jumps, log));
        problems.push(format!(
            "{name} partition {partition}: {problem}; served at the skipped offsets before: {skipped}"
        ));
    }
    // ADR 0010: a message sent after the last verification (in the same
    // generation) gets an offset past every offset stored at that recovery.
    let floor = o
        .floors
        .get(&(topic, partition))
        .copied()
        .filter(|(g, _, _)| *g == generation);
    let mut present = HashMap::new();
    for (offset, payload) in log {
        if let Some(first) = o.note_offset(payload, *offset) {
            problems.push(format!(
                "{name} partition {partition}: {payload} is at offset {offset}, first served at offset {first}: a message changed its offset"
            ));
        }
        if let Some((_, after, floor)) = floor
            && *offset < floor
            && o.messages.get(payload).is_some_and(|m| m.start > after)
        {
            problems.push(format!(
                "{name} partition {partition}: {payload}, sent after the last recovery, got offset {offset}, below {floor} (past the log and every stored offset then): Next may skip it"
            ));
        }
        if present.insert(payload.clone(), *offset).is_some() {
            problems.push(format!(
                "{name} partition {partition}: message {payload} is served twice"
            ));
        }
        match o.messages.get(payload) {
            None => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds a message never sent: {payload:?}"
            )),
            Some(m) if m.partition != partition || m.topic != topic => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds {payload}, sent to {} partition {}",
                topics::spec(m.topic).name,
                m.partition
            )),
            Some(m) if m.never => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds {payload} (sent in cycle {}), which an earlier verification found purged, lost or never written: resurrected",
                m.cycle
            )),
            Some(m) if fence.is_some_and(|(s, _)| m.end < s) => problems.push(format!(
                "{name} partition {partition}: offset {offset} holds {payload} (cycle {}), acknowledged before a purge that took effect: a purged message is served",
                m.cycle
            )),
            Some(_) => {}
        }
    }
    // Lost acknowledged messages, and each client's order.
    // Per client: (offset, (cycle, seq), payload) of each present message.
    type Seen<'a> = Vec<(u64, (u64, u64), &'a str)>;
    let mut by_client: BTreeMap<u32, Seen<'_>> = BTreeMap::new();
    let mut lost = Vec::new();
    for (payload, m) in &o.messages {
        if m.partition != partition || m.topic != topic || m.never {
            continue;
        }
        match present.get(payload) {
            Some(offset) => by_client.entry(m.client).or_default().push((
                *offset,
                (m.cycle, m.seq),
                payload.as_str(),
            )),
            None => {
                if must_survive(m, fence, power_cut) {
                    lost.push(format!("{payload} (cycle {})", m.cycle));
                }
            }
        }
    }
    if !lost.is_empty() {
        lost.sort();
        problems.push(format!(
            "{name} partition {partition}: {} acknowledged message(s) lost: {}",
            lost.len(),
            lost.join(", ")
        ));
    }
    for (client, mut seen) in by_client {
        seen.sort();
        for w in seen.windows(2) {
            if w[1].1 < w[0].1 {
                problems.push(format!(
                    "{name} partition {partition}: client {client}'s messages out of send order: {} at offset {} before {} at offset {}",
                    w[0].2, w[0].0, w[1].2, w[1].0
                ));
            }
        }
    }
    for p in problems {
        o.violation(cycle, p);
    }
    for (payload, m) in o.messages.iter_mut() {
        if m.partition != partition || m.topic != topic || m.never {
            continue;
        }
        if present.contains_key(payload) {
            m.acked = true;
            m.start = confirmed_at;
            m.end = confirmed_at;
        } else {
            m.never = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(offsets: &[u64]) -> Vec<(u64, String)> {
        offsets.iter().map(|o| (*o, format!("m{o}"))).collect()
    }

    #[test]
    fn the_log_may_skip_only_at_an_adr_0010_continuation() {
        // Given a recovery that found the log ending at 2 and an offset 4 stored,
        let jumps = [(2, 5)];
        // then skipping exactly from 2 to 5 is allowed,
        assert_eq!(gap_problem(&jumps, &log_of(&[0, 1, 5, 6])), None);
        assert_eq!(gap_problem(&jumps, &log_of(&[0, 1])), None);
        // and every other gap, or a start past 0, is not.
        assert!(gap_problem(&jumps, &log_of(&[0, 1, 4])).is_some());
        assert!(gap_problem(&jumps, &log_of(&[0, 2])).is_some());
        assert!(gap_problem(&[], &log_of(&[0, 1, 5])).is_some());
        assert!(gap_problem(&[], &log_of(&[1])).is_some());
        // The gaps a cut left, those no continuation explains.
        assert_eq!(cut_gaps(&[], &log_of(&[3, 4, 8])), vec![(0, 3), (5, 8)]);
        assert_eq!(cut_gaps(&[(0, 3)], &log_of(&[3, 4, 8])), vec![(5, 8)]);
        assert!(cut_gaps(&[], &log_of(&[0, 1, 2])).is_empty());
        assert_eq!(gap_problem(&[(0, 3)], &log_of(&[3, 4])), None);
    }

    /// An oracle that saw `n` messages `m0..` acknowledged in `topic`'s
    /// partition 0, the i-th at ticks (2i+1, 2i+2).
    fn acknowledged(topic: u32, n: u64) -> Oracle {
        let mut o = Oracle::new(1);
        for i in 0..n {
            o.messages.insert(
                format!("m{i}"),
                Msg {
                    topic,
                    partition: 0,
                    client: 1,
                    seq: i,
                    cycle: 0,
                    start: 2 * i + 1,
                    end: 2 * i + 2,
                    acked: true,
                    never: false,
                },
            );
        }
        o
    }

    #[test]
    fn a_cut_may_leave_a_gap_in_a_buffered_log_and_in_a_persisted_one_only_before_nothing_acknowledged()
     {
        // Given m0..m3 acknowledged and a recovered log that lost m2 (a
        // sealed segment's unsynced tail) but kept m3,
        let log = log_of(&[0, 1, 3]);
        // when the topic's messages are `buffered` and the power was cut,
        let mut o = acknowledged(1, 4);
        check_log(&mut o, 1, (1, 0), &log, 100, true);
        // then the gap is allowed, counted, and allowed from then on;
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.counts.cut_gaps, 1);
        assert_eq!(jumps_of(&o, (1, 0)), vec![(2, 3)]);
        // without a cut the same log is a violation,
        let mut o = acknowledged(1, 4);
        check_log(&mut o, 1, (1, 0), &log, 100, false);
        assert!(!o.violations.is_empty());
        // and under `persisted` it is one even after a cut (m2 is lost,
        // and m3 after it was acknowledged).
        let mut o = acknowledged(0, 4);
        check_log(&mut o, 1, (0, 0), &log, 100, true);
        assert!(
            o.violations.iter().any(|v| v.contains("not gap-free")),
            "{:?}",
            o.violations
        );
        assert!(
            o.violations.iter().any(|v| v.contains("lost: m2")),
            "{:?}",
            o.violations
        );
        assert_eq!(o.counts.cut_gaps, 0);
        // Under `persisted` the cut may skip only sends in doubt with nothing
        // acknowledged after them: m2 and m3 in doubt,
        let mut o = acknowledged(0, 4);
        for m in ["m2", "m3"] {
            if let Some(m) = o.messages.get_mut(m) {
                m.acked = false;
                m.end = NEVER;
            }
        }
        check_log(&mut o, 1, (0, 0), &log, 100, true);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(o.counts.cut_gaps_persisted, 1);
        // but not an acknowledged m3 after an m2 in doubt.
        let mut o = acknowledged(0, 4);
        if let Some(m) = o.messages.get_mut("m2") {
            m.acked = false;
        }
        check_log(&mut o, 1, (0, 0), &log, 100, true);
        o.assert_violation("not gap-free");
    }

    /// Issue 27: a re-created partition is a new history. Given m0..m3
    /// acknowledged in `events` partition 0 at ticks (1, 2) .. (7, 8) and a
    /// re-creation of it (the fence it leaves) sent at 3 and answered at 6
    /// (m1 overlapped it, m2 and m3 came after),
    #[test]
    fn a_recreated_partition_never_serves_its_deleted_history_and_keeps_the_new_one() {
        let recreated = |o: &mut Oracle| {
            o.fences.insert((0, 0), (3, 6));
        };
        // what was acknowledged before its delete was sent is never served,
        let mut o = acknowledged(0, 4);
        recreated(&mut o);
        check_log(&mut o, 1, (0, 0), &log_of(&[0, 1, 2]), 100, true);
        o.assert_violation("holds m0 (cycle 0), acknowledged before a purge that took effect");
        // and what was acknowledged after it must survive a power cut (m1,
        // which overlapped it, may be on either side).
        let mut o = acknowledged(0, 4);
        recreated(&mut o);
        let new_history = vec![(0, "m2".to_string())];
        check_log(&mut o, 1, (0, 0), &new_history, 100, true);
        assert_eq!(o.violations.len(), 1, "{:?}", o.violations);
        assert!(o.violations[0].contains("lost: m3"), "{:?}", o.violations);
        let mut o = acknowledged(0, 4);
        recreated(&mut o);
        let both = vec![
            (0, "m1".to_string()),
            (1, "m2".to_string()),
            (2, "m3".to_string()),
        ];
        check_log(&mut o, 1, (0, 0), &both, 100, true);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
    }

    #[test]
    fn a_404_is_a_refusal_only_for_what_a_recreation_took_away_while_the_request_ran() {
        let mut o = Oracle::new(1);
        let last = Scope::Recreate(topics::Recreation {
            topic: 1,
            from: 1,
            whole: false,
        });
        o.purges.push(PurgeRec {
            end: 20,
            ..PurgeRec::sent(last, 10)
        });
        // Its partitions, while it ran:
        assert!(o.recreating(1, Some(1), 5, 15));
        assert!(o.recreating(1, Some(1), 19, 25));
        // not before or after it, not another partition or topic, and not
        // the topic or a group (only a whole topic's re-creation takes those).
        assert!(!o.recreating(1, Some(1), 21, 25));
        assert!(!o.recreating(1, Some(1), 1, 9));
        assert!(!o.recreating(1, Some(0), 5, 15));
        assert!(!o.recreating(0, Some(1), 5, 15));
        assert!(!o.recreating(1, None, 5, 15));
        // An unfinished one stays open.
        o.purges[0].end = NEVER;
        assert!(o.recreating(1, Some(1), 1000, 1001));
    }

    fn op(start: Tick, end: Tick, acked: bool, effect: Val) -> OffOp {
        OffOp {
            start,
            end,
            acked,
            effect,
            what: "t",
        }
    }

    /// What a verification may read after `ops` and the purge `purge`,
    /// from a history a verification after a power cut read as `before`,
    /// among `candidates`.
    fn allowed(
        before: Option<u64>,
        ops: &[OffOp],
        purge: Option<(Tick, Tick)>,
        lapse: Lapse,
        candidates: &[Option<u64>],
    ) -> Vec<Option<u64>> {
        let mut h = OffsetHistory::default();
        h.recovered_from_disk(before);
        let h = fold_offset_ops(h, ops, purge);
        candidates
            .iter()
            .copied()
            .filter(|v| h.may_show(*v, lapse))
            .collect()
    }

    const ALL: [Option<u64>; 5] = [None, Some(2), Some(5), Some(7), Some(9)];

    #[test]
    fn a_store_answered_before_a_purge_was_sent_is_gone() {
        let ops = [op(1, 2, true, Val::At(5))];
        let kept = Lapse::PageCacheKept;
        assert_eq!(allowed(None, &ops, Some((3, 4)), kept, &ALL), vec![None]);
    }

    #[test]
    fn a_store_sent_after_a_purge_was_answered_survives_it() {
        let ops = [op(5, 6, true, Val::At(2))];
        let kept = Lapse::PageCacheKept;
        assert_eq!(
            allowed(Some(9), &ops, Some((3, 4)), kept, &ALL),
            vec![Some(2)]
        );
    }

    #[test]
    fn overlapping_or_in_doubt_operations_allow_both_outcomes() {
        let kept = Lapse::PageCacheKept;
        let ops = [op(1, 5, true, Val::At(2))];
        assert_eq!(
            allowed(None, &ops, Some((3, 4)), kept, &ALL),
            vec![None, Some(2)]
        );
        let ops = [op(1, 2, true, Val::At(2)), op(3, NEVER, false, Val::At(7))];
        assert_eq!(
            allowed(None, &ops, None, kept, &ALL),
            vec![Some(2), Some(7)]
        );
        // An auto-commit poll in doubt may have stored any offset.
        let ops = [op(1, 2, true, Val::At(2)), op(3, NEVER, false, Val::Any)];
        assert_eq!(allowed(None, &ops, None, kept, &ALL), ALL[1..].to_vec());
    }

    /// Finding (issue 15, item 6): the soak let a `buffered` offset show
    /// any state its operations passed through after every kill, also
    /// without a power cut; a kill keeps the page cache (ADR 0002,
    /// `Process`), so only the last state (and calls in doubt) may show.
    /// The shared model was right. Nor does a cut take it below what the
    /// last verification read after a cut (the soak was right there).
    #[test]
    fn only_a_power_cut_rolls_a_buffered_offset_back() {
        let ops = [op(1, 2, true, Val::At(5)), op(3, 4, true, Val::At(7))];
        let kept = Lapse::PageCacheKept;
        assert_eq!(allowed(Some(2), &ops, None, kept, &ALL), vec![Some(7)]);
        let cut = Lapse::PowerLoss(Durability::Buffered.policy());
        assert_eq!(
            allowed(Some(2), &ops, None, cut, &ALL),
            vec![Some(2), Some(5), Some(7)]
        );
    }
}
