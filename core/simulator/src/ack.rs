//! The one model of what was acknowledged on one partition, and the rules of
//! what may survive a crash: shared by the simulator's oracle (`oracle.rs`),
//! the purge proptest (`tests/purge_proptest.rs`) and the soak's oracle
//! (`sluice soak`, `core/cli/src/soak/oracle.rs`). Each of them observes the
//! engine its own way (directly, through fault injection, over HTTP across
//! real process kills); what it learns is recorded and judged here.
//!
//! Invariants, and why they hold:
//! - A call that returned `Ok` is acknowledged; one that failed is *in
//!   doubt*: its old and its new outcome both stay possible (`OffsetHistory`
//!   records both), never a third one. The engine may have made the effect
//!   durable before the error, or not.
//! - A process crash keeps everything acknowledged (the page cache survives
//!   it). A power loss keeps everything acknowledged under `persisted` and
//!   may roll `buffered` state back to any earlier state of the same
//!   generation (`may_roll_back`), never to another generation: the purge
//!   commit is always synced (ADR 0003).
//! - The acknowledged generation only grows. A purge that failed may have
//!   committed: it is in doubt until the engine shows the generation, and it
//!   must not land once a write was acknowledged after it (`Generation`).
//! - A recovery after a power loss shows what the disk holds: no state
//!   before it comes back (`OffsetHistory::recovered_from_disk`). Observers
//!   with concurrent clients also record calls that raced the purge
//!   beginning a generation (`raced`: before it, wiped, or after it) and
//!   failed calls whose value they cannot name (`failed_unknown`).
//! - After a loss the log continues past the highest stored offset, so no
//!   offset a stored offset names is reused (ADR 0010, `continue_ceiling`),
//!   and `Next` from a stored offset returns exactly the history after it
//!   (`next_after`).
//! - A file below a partition is dead when it belongs to an older generation
//!   (`dead_files`): the names come from `sluice_server::layout`, which owns
//!   every on-disk name, so the scanners cannot drift from the engine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sluice_server::layout::{PURGED_SUFFIX, PartitionPaths, parse_segment_name};
use sluice_server::metadata::{Durability, PartitionKey};
use sluice_server::partition::offsets::{OFFSET_LAYOUT, OffsetRecord};
use sluice_server::slots::SlotRead;
use sluice_storage::sim::NodeView;

/// Whether a crash may roll state kept under `policy` back to an earlier
/// acknowledged state: only a power loss, and only under `buffered`
/// (`persisted` syncs before it acknowledges; a process crash keeps the page
/// cache).
pub fn may_roll_back(policy: Durability, power_loss: bool) -> bool {
    power_loss && policy == Durability::Buffered
}

/// ADR 0010: the highest offset a recovered log may continue at, one past the
/// highest offset value stored (or tried) in this generation; `None` when no
/// offset was stored. A jump in the history up to it after a crash is the
/// rule, not a skip.
pub fn continue_ceiling(stored: impl IntoIterator<Item = u64>) -> Option<u64> {
    stored.into_iter().max().map(|h| h.saturating_add(1))
}

/// What `Next` must return for a consumer whose stored offset is `stored`
/// over the served `history`: every message after it (all of them without
/// one), in order, none skipped.
pub fn next_after<T>(history: &[(u64, T)], stored: Option<u64>) -> impl Iterator<Item = &(u64, T)> {
    history
        .iter()
        .filter(move |(offset, _)| stored.is_none_or(|s| *offset > s))
}

/// What may have happened to an offset since the engine last showed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// Nothing, or a process crash: the page cache, and with it the newest
    /// record written, is kept.
    PageCacheKept,
    /// A power loss: what no acknowledged sync covered may be gone.
    PowerLoss(Durability),
}

impl Lapse {
    /// A power loss under `policy` if `power_loss`, else the page cache kept.
    pub fn of(policy: Durability, power_loss: bool) -> Lapse {
        if power_loss {
            Lapse::PowerLoss(policy)
        } else {
            Lapse::PageCacheKept
        }
    }
}

/// One consumer's (or group's) stored offset in the current generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetHistory {
    /// Acknowledged states in order (`None` = deleted), and states observed
    /// since (an observation of a call in doubt settles it).
    acked: Vec<Option<u64>>,
    /// Values tried by failed calls since the last acknowledged one, and the
    /// values of calls that raced the purge beginning the generation.
    in_doubt: BTreeSet<Option<u64>>,
    /// Outcomes of every failed call of the generation (the value tried and
    /// the one before it, which a crash may bring back even once the new one
    /// was seen).
    ever_in_doubt: BTreeSet<Option<u64>>,
    /// A failed call that may have stored a value nobody can name (an
    /// `auto_commit` poll whose answer was lost) since the last acknowledged
    /// one, and in the generation.
    unknown_in_doubt: bool,
    ever_unknown: bool,
    /// Values of calls acknowledged while the purge beginning the
    /// generation was in flight (`raced`): states the generation may have
    /// passed through.
    raced: BTreeSet<Option<u64>>,
    /// The history starts at a state a recovery after a power loss read
    /// from the disk (`recovered_from_disk`), not at the generation's empty
    /// start: "nothing" is then no state a roll-back can reach by itself.
    starts_on_disk: bool,
}

impl OffsetHistory {
    /// The last acknowledged (or settled) state; `None` before any.
    pub fn last(&self) -> Option<u64> {
        self.acked.last().copied().flatten()
    }

    /// Every state acknowledged or settled in this generation, in order.
    pub fn acked(&self) -> &[Option<u64>] {
        &self.acked
    }

    /// Values tried by failed calls since the last acknowledged one.
    pub fn in_doubt(&self) -> &BTreeSet<Option<u64>> {
        &self.in_doubt
    }

    /// Outcomes of every failed call of the generation.
    pub(crate) fn ever_in_doubt(&self) -> &BTreeSet<Option<u64>> {
        &self.ever_in_doubt
    }

    /// Every offset value this id held or may have held in the generation
    /// (since `recovered_from_disk`, if called): what an ADR 0010
    /// continuation may have jumped past. A failed call of an unknown value
    /// (`failed_unknown`) adds none: its caller cannot name it either.
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.acked
            .iter()
            .chain(self.ever_in_doubt.iter())
            .chain(self.raced.iter())
            .copied()
            .flatten()
    }

    /// A call that set `value` (`None`: a delete) returned `Ok`.
    pub fn acknowledged(&mut self, value: Option<u64>) {
        self.acked.push(value);
        self.in_doubt.clear();
        self.unknown_in_doubt = false;
    }

    /// A call that tried to set `attempted` failed: it may have landed, and
    /// the state before it stays possible until a call is acknowledged, even
    /// once the new one was seen (`sim run` seed 63: a store's write lands
    /// and is seen, the next store's rewrite of it tears, and the other slot
    /// still holds the acknowledged state before both). A crash may bring it
    /// back too.
    pub fn failed(&mut self, attempted: Option<u64>) {
        self.in_doubt.insert(attempted);
        self.in_doubt.insert(self.last());
        self.ever_in_doubt.insert(attempted);
        self.ever_in_doubt.insert(self.last());
    }

    /// A call that may have stored a value the caller cannot name failed (an
    /// `auto_commit` poll whose answer, and with it the offset it committed,
    /// was lost): any stored offset may have landed, never "nothing" where
    /// there was an offset.
    pub fn failed_unknown(&mut self) {
        self.unknown_in_doubt = true;
        self.ever_unknown = true;
        self.ever_in_doubt.insert(self.last());
    }

    /// A call that set `value` was acknowledged while the purge beginning
    /// this generation was in flight (concurrent clients: the soak): it took
    /// effect before the purge, which wiped it, or after it. So until a call
    /// is acknowledged after the purge, the state is "nothing" or the last
    /// such call's value (an earlier one's is overwritten either way); each
    /// was a state a `buffered` roll-back may reach. Only calls racing that
    /// purge come before every call known to follow it, hence no
    /// acknowledged state yet.
    pub fn raced(&mut self, value: Option<u64>) {
        debug_assert!(
            self.acked.is_empty(),
            "a call raced the purge after one known to follow it"
        );
        self.in_doubt.clear();
        self.unknown_in_doubt = false;
        self.in_doubt.insert(value);
        self.raced.insert(value);
    }

    /// A recovery after a power loss showed `observed`. ADR 0002's
    /// `PowerLoss` replaces the page cache by the durable view, so this is
    /// what the disk holds: no earlier state and no earlier failed call's
    /// outcome can come back (a later roll-back reaches at most this one),
    /// not even the generation's empty start. The history starts over from
    /// it. (`settle` is for an observation after a process crash or none,
    /// after which a power loss may still bring earlier states back.)
    pub fn recovered_from_disk(&mut self, observed: Option<u64>) {
        *self = OffsetHistory {
            acked: vec![observed],
            starts_on_disk: true,
            ..OffsetHistory::default()
        };
    }

    /// The engine was seen to hold `observed`: it is the latest state (earlier
    /// ones and the outcomes of failed calls stay possible after a crash).
    pub fn settle(&mut self, observed: Option<u64>) {
        if self.acked.last() != Some(&observed) {
            self.acked.push(observed);
        }
    }

    /// Whether the engine may show `value` after `lapse`, never a value
    /// nobody wrote:
    /// - the last state, or the outcome of a call that failed (or raced the
    ///   generation's purge) since the last acknowledged one (an
    ///   acknowledged call writes over whatever a failed one left, so with
    ///   the page cache kept nothing older comes back); any offset after a
    ///   `failed_unknown`;
    /// - after a power loss also any failed call's outcome in the generation,
    ///   or the state before it: a failed file sync may leave either on disk,
    ///   and seeing the new one in the page cache made nothing durable;
    /// - after a power loss under `buffered` also nothing (unless the
    ///   history starts on the disk), or any earlier acknowledged or raced
    ///   state (`may_roll_back`).
    pub fn may_show(&self, value: Option<u64>, lapse: Lapse) -> bool {
        let live = value == self.last()
            || self.in_doubt.contains(&value)
            || (self.unknown_in_doubt && value.is_some());
        live || match lapse {
            Lapse::PageCacheKept => false,
            Lapse::PowerLoss(policy) => {
                self.ever_in_doubt.contains(&value)
                    || (self.ever_unknown && value.is_some())
                    || (may_roll_back(policy, true)
                        && ((value.is_none() && !self.starts_on_disk)
                            || self.acked.contains(&value)
                            || self.raced.contains(&value)))
            }
        }
    }

    /// Whether `value` is among this id's own states of the generation (so a
    /// numerically equal value of a purged generation cannot be told apart).
    pub fn ever_held(&self, value: Option<u64>) -> bool {
        self.acked.contains(&value)
            || self.ever_in_doubt.contains(&value)
            || self.raced.contains(&value)
    }
}

/// A partition's purge generation as acknowledged, and a purge in doubt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generation {
    /// Purges acknowledged (a lower bound of what the engine must serve).
    acknowledged: u64,
    /// A purge call failed: its commit may have reached the disk.
    in_doubt: bool,
    /// A write was acknowledged after the purge in doubt: the engine told a
    /// client the old generation is current, so that purge must not land.
    acked_since_doubt: bool,
}

/// How the generation an engine serves compares with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The acknowledged generation (a purge in doubt did not land).
    Acknowledged,
    /// The purge in doubt landed: a new generation starts. `lost_acked`: a
    /// write acknowledged after that purge was lost with it (a violation).
    InDoubtLanded { lost_acked: bool },
    /// Below the acknowledged generation: a purge was undone.
    WentBack,
    /// Above it, and no purge in doubt explains it.
    NeverRequested,
}

impl Generation {
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged
    }

    pub fn in_doubt(&self) -> bool {
        self.in_doubt
    }

    /// A purge returned `Ok`. It targeted the generation after the one in
    /// memory, which a failed purge never moves, so one in doubt before it is
    /// settled by it (both committed the same generation, or only this one).
    pub fn purge_acknowledged(&mut self) {
        *self = Generation {
            acknowledged: self.acknowledged + 1,
            in_doubt: false,
            acked_since_doubt: false,
        };
    }

    /// A purge returned an error: it may land at the next recovery.
    pub fn purge_failed(&mut self) {
        self.in_doubt = true;
        self.acked_since_doubt = false;
    }

    /// A send, store or delete of this partition was acknowledged.
    pub fn write_acknowledged(&mut self) {
        self.acked_since_doubt |= self.in_doubt;
    }

    /// The engine serves again in the same process: a failed purge's commit
    /// was undone (the previous metadata saved again), so it did not happen.
    pub fn undone(&mut self) {
        self.in_doubt = false;
    }

    /// After `observe` reported a generation no purge explains (a
    /// violation), an observer that runs on (the soak) judges what follows
    /// from the generation the engine serves, so that one lost or invented
    /// purge is reported once, not at every later recovery.
    pub fn judge_on_from(&mut self, seen: u64) {
        *self = Generation {
            acknowledged: seen,
            ..Generation::default()
        };
    }

    /// Judges the generation `seen` an engine serves after a recovery, and
    /// learns from it: a landed purge in doubt starts the generation (the
    /// caller starts its per-generation state over), any other answer ends
    /// the doubt.
    pub fn observe(&mut self, seen: u64) -> Served {
        if seen < self.acknowledged {
            return Served::WentBack;
        }
        if seen > self.acknowledged {
            if self.in_doubt && seen == self.acknowledged + 1 {
                let lost_acked = self.acked_since_doubt;
                *self = Generation {
                    acknowledged: seen,
                    in_doubt: false,
                    acked_since_doubt: false,
                };
                return Served::InDoubtLanded { lost_acked };
            }
            return Served::NeverRequested;
        }
        self.in_doubt = false;
        Served::Acknowledged
    }
}

/// The files below `key`'s partition in `view` that belong to a generation
/// below `generation`: segments by the generation in their name, offset files
/// by the generation of their newest valid record, and any `<name>.purged`
/// (cleanup's name for a dead file it is about to unlink). The obligation and
/// anything else below the partition are never dead.
pub fn dead_files(
    view: &BTreeMap<String, NodeView>,
    data_dir: &Path,
    key: PartitionKey,
    generation: u64,
) -> Vec<String> {
    let paths = PartitionPaths::new(data_dir, key);
    let dir = |p: &Path| format!("{}/", p.to_string_lossy());
    let (segments, consumers, groups) = (
        dir(&paths.segments),
        dir(&paths.consumers),
        dir(&paths.groups),
    );
    let root = dir(&paths.root);
    view.range(root.clone()..)
        .take_while(|(path, _)| path.starts_with(&root))
        .filter(|(path, node)| {
            let NodeView::File(bytes) = node else {
                return false;
            };
            if path.ends_with(PURGED_SUFFIX)
                && [&segments, &consumers, &groups]
                    .iter()
                    .any(|d| path.starts_with(d.as_str()))
            {
                // Renamed aside by cleanup for its unlink: dead whatever it holds.
                return true;
            }
            if let Some(name) = path.strip_prefix(&segments) {
                return parse_segment_name(name).is_some_and(|(g, _, _)| g < generation);
            }
            if path.starts_with(&consumers) || path.starts_with(&groups) {
                return matches!(
                    OFFSET_LAYOUT.decode::<OffsetRecord>(bytes),
                    SlotRead::Valid { value, .. } if value.generation < generation
                );
            }
            false
        })
        .map(|(path, _)| path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_loss_rolls_back_only_buffered_state() {
        assert!(may_roll_back(Durability::Buffered, true));
        assert!(!may_roll_back(Durability::Buffered, false));
        assert!(!may_roll_back(Durability::Persisted, true));
        assert!(!may_roll_back(Durability::Persisted, false));
    }

    #[test]
    fn an_acknowledged_offset_survives_and_a_failed_one_is_either_outcome() {
        // Given 3 acknowledged, then a store of 5 that failed,
        let mut h = OffsetHistory::default();
        h.acknowledged(Some(3));
        h.failed(Some(5));
        // then 3 and 5 may be shown, nothing else, nor nothing;
        let kept = Lapse::PageCacheKept;
        assert!(h.may_show(Some(3), kept) && h.may_show(Some(5), kept));
        assert!(!h.may_show(Some(4), kept) && !h.may_show(None, kept));
        // once 5 is seen, 3 stays possible until a call is acknowledged (a
        // later failed write may tear the slot holding 5; `sim run` seed 63),
        h.settle(Some(5));
        assert!(h.may_show(Some(3), kept));
        assert!(h.may_show(Some(3), Lapse::PowerLoss(Durability::Persisted)));
        // and an acknowledged call ends it.
        h.acknowledged(Some(7));
        assert!(!h.may_show(Some(3), kept) && !h.may_show(Some(5), kept));
    }

    /// Settled finding (issue 15, item 6; docs/simulation.md): the simulator
    /// kept a failed call's outcomes possible for the whole generation, the
    /// proptest only until the next acknowledged call. With the proptest's
    /// window the explorer's `offsets` workload showed a failed store's value
    /// coming back after an acknowledged delete and a process crash: an
    /// engine bug (the delete answered from memory, which had lost sight of
    /// the failed write), fixed in `partition/offsets.rs` and pinned by
    /// `engine_durability::an_acknowledged_delete_removes_a_value_a_failed_store_may_have_left`.
    /// One rule now serves every user.
    #[test]
    fn an_acknowledged_call_ends_the_doubt_unless_the_power_fails() {
        // Given a failed store of 5, then an acknowledged store of 6,
        let mut h = OffsetHistory::default();
        h.acknowledged(Some(3));
        h.failed(Some(5));
        h.acknowledged(Some(6));
        // when the page cache is kept, then only 6 may be shown;
        let kept = Lapse::PageCacheKept;
        assert!(h.may_show(Some(6), kept));
        assert!(!h.may_show(Some(5), kept) && !h.may_show(Some(3), kept));
        assert!(!h.may_show(None, kept));
        // after a power loss under `persisted` also the failed call's outcomes,
        let persisted = Lapse::PowerLoss(Durability::Persisted);
        for v in [Some(3), Some(5), Some(6)] {
            assert!(h.may_show(v, persisted), "{v:?}");
        }
        assert!(!h.may_show(None, persisted) && !h.may_show(Some(4), persisted));
        // and under `buffered` nothing too, never a value nobody wrote.
        let buffered = Lapse::PowerLoss(Durability::Buffered);
        for v in [Some(3), Some(5), Some(6), None] {
            assert!(h.may_show(v, buffered), "{v:?}");
        }
        assert!(!h.may_show(Some(4), buffered));
    }

    /// Finding (issue 15, item 6, the soak on this model): the soak never
    /// let a power cut bring back a state older than the one its last
    /// verification read after a cut; this model did (any acknowledged state
    /// of the generation, or nothing, under `buffered`). After a power loss
    /// the page cache is the durable view (ADR 0002), so what a recovery
    /// shows is on the disk, and nothing older can return: the soak was
    /// right, the model lacked the distinction (`recovered_from_disk`).
    #[test]
    fn nothing_older_than_what_a_recovery_after_a_power_loss_showed_comes_back() {
        // Given 3 then 5 acknowledged, and a failed store of 7,
        let mut h = OffsetHistory::default();
        h.acknowledged(Some(3));
        h.acknowledged(Some(5));
        h.failed(Some(7));
        let buffered = Lapse::PowerLoss(Durability::Buffered);
        // an observation after a process crash keeps them all possible,
        let mut seen_live = h.clone();
        seen_live.settle(Some(5));
        for v in [None, Some(3), Some(5), Some(7)] {
            assert!(seen_live.may_show(v, buffered), "{v:?}");
        }
        // one after a power loss keeps only itself and what follows it.
        h.recovered_from_disk(Some(5));
        assert!(h.may_show(Some(5), buffered));
        for v in [None, Some(3), Some(7)] {
            assert!(!h.may_show(v, buffered), "{v:?}");
        }
        h.acknowledged(Some(9));
        assert!(h.may_show(Some(5), buffered) && h.may_show(Some(9), buffered));
        assert!(!h.may_show(Some(5), Lapse::PowerLoss(Durability::Persisted)));
        assert_eq!(h.values().collect::<Vec<_>>(), vec![5, 9]);
    }

    #[test]
    fn a_call_racing_the_generations_purge_left_nothing_or_its_value() {
        // Given two stores acknowledged while the purge was in flight,
        let mut h = OffsetHistory::default();
        h.raced(Some(4));
        h.raced(Some(6));
        // then the last one's value or nothing, never the overwritten one;
        let kept = Lapse::PageCacheKept;
        assert!(h.may_show(None, kept) && h.may_show(Some(6), kept));
        assert!(!h.may_show(Some(4), kept));
        assert!(!h.may_show(Some(4), Lapse::PowerLoss(Durability::Persisted)));
        // a buffered roll-back may reach either state it passed through;
        assert!(h.may_show(Some(4), Lapse::PowerLoss(Durability::Buffered)));
        assert!(h.ever_held(Some(4)));
        // a call acknowledged after the purge ends the race.
        h.acknowledged(Some(8));
        assert!(!h.may_show(None, kept) && !h.may_show(Some(6), kept));
        assert!(h.may_show(Some(8), kept));
    }

    #[test]
    fn a_failed_call_of_an_unknown_value_allows_any_offset_never_a_delete() {
        // Given 3 acknowledged, then an auto-commit poll whose answer was lost,
        let mut h = OffsetHistory::default();
        h.acknowledged(Some(3));
        h.failed_unknown();
        // then any offset may be shown, but not nothing;
        let kept = Lapse::PageCacheKept;
        assert!(h.may_show(Some(3), kept) && h.may_show(Some(11), kept));
        assert!(!h.may_show(None, kept));
        // an acknowledged call ends the doubt unless the power fails.
        h.acknowledged(Some(4));
        assert!(!h.may_show(Some(11), kept));
        assert!(h.may_show(Some(11), Lapse::PowerLoss(Durability::Persisted)));
        assert!(!h.may_show(None, Lapse::PowerLoss(Durability::Persisted)));
        assert_eq!(h.values().collect::<Vec<_>>(), vec![3, 4, 3]);
    }

    #[test]
    fn a_failed_purge_may_land_unless_a_write_was_acknowledged_after_it() {
        // Given generation 1 acknowledged and a purge that failed,
        let mut g = Generation::default();
        g.purge_acknowledged();
        g.purge_failed();
        // when the engine shows 2, then the purge landed and lost nothing;
        let mut landed = g;
        assert_eq!(
            landed.observe(2),
            Served::InDoubtLanded { lost_acked: false }
        );
        assert_eq!(landed.acknowledged(), 2);
        // with a write acknowledged after it, it lost that write;
        let mut late = g;
        late.write_acknowledged();
        assert_eq!(late.observe(2), Served::InDoubtLanded { lost_acked: true });
        // never more than one ahead, never back.
        assert_eq!(g.clone().observe(3), Served::NeverRequested);
        assert_eq!(g.clone().observe(0), Served::WentBack);
        assert_eq!(g.clone().observe(1), Served::Acknowledged);
    }

    /// Finding (issue 15, item 6): after a failed purge, an acknowledged one
    /// kept the doubt in the simulator (the engine "may be one higher
    /// still") and ended it in the proptest. The engine's memory keeps the
    /// old generation after a failed purge, so the next purge commits the
    /// same generation the failed one tried: nothing is left in doubt.
    #[test]
    fn an_acknowledged_purge_settles_a_failed_one_before_it() {
        let mut g = Generation::default();
        g.purge_failed();
        g.purge_acknowledged();
        assert!(!g.in_doubt());
        assert_eq!(g.clone().observe(2), Served::NeverRequested);
        assert_eq!(g.observe(1), Served::Acknowledged);
    }

    #[test]
    fn judging_on_from_a_generation_nobody_requested_reports_it_once() {
        // Given a generation that moved by two with no purge in doubt,
        let mut g = Generation::default();
        g.purge_acknowledged();
        assert_eq!(g.observe(3), Served::NeverRequested);
        // when the observer judges on from it, then the same generation is
        // the acknowledged one and nothing is left in doubt.
        g.judge_on_from(3);
        assert_eq!((g.acknowledged(), g.in_doubt()), (3, false));
        assert_eq!(g.observe(3), Served::Acknowledged);
        assert_eq!(g.observe(2), Served::WentBack);
    }

    #[test]
    fn next_returns_exactly_the_history_after_the_stored_offset() {
        let history = [(0, 'a'), (1, 'b'), (5, 'c')];
        let after = |s| next_after(&history, s).map(|(o, _)| *o).collect::<Vec<_>>();
        assert_eq!(after(None), vec![0, 1, 5]);
        assert_eq!(after(Some(1)), vec![5]);
        assert_eq!(after(Some(5)), Vec::<u64>::new());
        assert_eq!(continue_ceiling([3, 9, 4]), Some(10));
        assert_eq!(continue_ceiling([]), None);
    }

    #[test]
    fn dead_files_are_the_older_generations_below_the_partition_only() {
        // Given a partition's segments of generations 0 and 1, the
        // obligation, and a segment of generation 0 of another partition,
        let data = Path::new("/data");
        let key = PartitionKey {
            stream: 0,
            topic: 0,
            partition: 1,
        };
        let other = PartitionKey {
            partition: 2,
            ..key
        };
        let seg = |k: PartitionKey, g: u64| {
            let p = PartitionPaths::new(data, k).segments;
            format!(
                "{}/{}",
                p.to_string_lossy(),
                sluice_server::layout::segment_name(g, 0, "log")
            )
        };
        let file = || NodeView::File(Vec::new());
        let mut view = BTreeMap::new();
        view.insert(seg(key, 0), file());
        view.insert(seg(key, 1), file());
        view.insert(seg(other, 0), file());
        let obligation = PartitionPaths::new(data, key).obligation;
        view.insert(obligation.to_string_lossy().into_owned(), file());
        // when scanned for generation 1, then only its own old segment is dead.
        assert_eq!(dead_files(&view, data, key, 1), vec![seg(key, 0)]);
        assert!(dead_files(&view, data, key, 0).is_empty());
    }
}
