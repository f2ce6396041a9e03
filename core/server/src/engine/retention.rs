//! Retention: `message_expiry` and `max_topic_size` enforced through each
//! partition's durable low-water mark and a retention cleanup obligation
//! (docs/adr/0016-retention-low-water-mark.md).
//!
//! Invariants:
//! - A segment leaves a log only through a committed low-water mark (written
//!   and synced before the log stops serving below it); its files are then
//!   the obligation's, which the reconciler drives to `Applied` like a purge.
//! - Only sealed segments are expired: the active (last) segment never is,
//!   and by age a segment goes only once its newest message is at least
//!   `message_expiry` old by the engine's clock (`self.clock`, never the
//!   reconciler's schedule time, which `reconcile_until_idle` sets to the end
//!   of time).
//! - A partition with a pending purge obligation, or a degraded one, is
//!   skipped (left due) until that is resolved.
//! - The check costs O(partitions with something to expire), not a scan of
//!   every segment: `due` indexes, per partition of a topic with an expiry,
//!   when its oldest sealed segment expires (kept on every append, commit of
//!   a mark, purge, topic update and deletion, O(log n) each), and a pass
//!   takes only the entries due by now; sizes are checked only for capped
//!   topics appended to or changed since the last pass (`size_check`), each
//!   in O(its partitions), since a log's size is O(1).
//! - The reconciler tracks exactly the partitions whose retention obligation
//!   is not `Applied`, nothing below a partition's mark is loaded, and a
//!   partition whose low-water record lists removals in flight owes its
//!   retention (`check_retention`).

use std::collections::{BTreeMap, BTreeSet};

use super::{Engine, TopicKey};
use crate::error::Result;
use crate::metadata::PartitionKey;
use crate::partition::log::SealedSegment;
use crate::partition::reconciler::{ObligationKey, PassReport};

/// What the engine keeps to find due retention work cheaply.
#[derive(Debug, Default)]
pub(crate) struct RetentionIndex {
    /// When each partition's oldest sealed segment expires (µs): partitions
    /// of a topic with an expiry that have a sealed segment.
    due: BTreeMap<PartitionKey, u64>,
    /// The same entries ordered by time, for the pass to take the due ones.
    by_time: BTreeSet<(u64, PartitionKey)>,
    /// Capped topics that may be over their cap.
    size_check: BTreeSet<TopicKey>,
}

impl RetentionIndex {
    fn remove(&mut self, key: PartitionKey) {
        if let Some(at) = self.due.remove(&key) {
            self.by_time.remove(&(at, key));
        }
    }

    fn due_at(&self, key: PartitionKey) -> Option<u64> {
        self.due.get(&key).copied()
    }

    fn insert(&mut self, key: PartitionKey, at: u64) {
        self.remove(key);
        self.due.insert(key, at);
        self.by_time.insert((at, key));
    }
}

impl Engine {
    /// The expiry a topic created with Iggy's "server default" (0 on the
    /// wire) gets, in microseconds; 0 = never.
    pub fn default_message_expiry(&self) -> u64 {
        self.config.default_message_expiry_us
    }

    /// Recomputes when `key`'s oldest sealed segment expires (O(log n)).
    pub(super) fn refresh_retention(&mut self, key: PartitionKey) {
        self.retention_index.remove(key);
        let Some(topic) = self.meta.topic(key.stream, key.topic) else {
            return;
        };
        let expiry = topic.message_expiry;
        if expiry == 0 {
            return;
        }
        // The oldest sealed segment that holds something above the mark: a
        // segment a cut emptied while serving stays in the log with its end
        // at the mark, and no mark can expire it, so indexing it would make
        // it due again at once, for ever (`enforce_retention` spun on one:
        // `sim run` sweep of session 12).
        if let Some(oldest) = self.partitions.get(&key).and_then(|p| {
            let mark = p.log().low_water();
            p.log().sealed().find(|s| s.next_offset > mark)
        }) {
            self.retention_index
                .insert(key, oldest.newest_timestamp.saturating_add(expiry));
        }
    }

    /// After an append (or a change of the topic's settings): the partition
    /// may have sealed a segment, and its topic may be over its cap.
    pub(super) fn note_retention_change(&mut self, key: PartitionKey) {
        self.refresh_retention(key);
        let topic = key.topic_key();
        if self
            .meta
            .topic(topic.stream, topic.topic)
            .is_some_and(|t| t.max_topic_size > 0)
        {
            self.retention_index.size_check.insert(topic);
        }
    }

    /// A partition's history was replaced (a purge) or it is gone (a
    /// deletion): its retention obligation and due time go with it.
    pub(super) fn forget_retention(&mut self, key: PartitionKey) {
        self.retention_index.remove(key);
        self.reconciler.forget(ObligationKey::Retention(key));
    }

    /// Whether retention may work on `key` now.
    fn retention_eligible(&self, key: PartitionKey) -> bool {
        self.reconciler.status(ObligationKey::Purge(key)).is_none()
            && self
                .partitions
                .get(&key)
                .is_some_and(|p| p.degraded_reason().is_none())
    }

    /// Commits `mark` as `key`'s new low-water mark and makes its cleanup due.
    /// `expired`: the topic's retention let the messages below it go (not a
    /// release of local copies the remote tier holds), so a tiered
    /// partition's remote low mark is raised to it first: reads of both
    /// tiers stop below it before anything is removed.
    pub(super) fn commit_mark(
        &mut self,
        key: PartitionKey,
        mark: u64,
        expired: bool,
    ) -> Result<()> {
        let now_ms = self.now_ms();
        #[cfg(feature = "naive-purge")]
        if self.naive_deletion() {
            // Apache Iggy's order, kept only in test builds (teeth).
            self.partition_at(key)?.naive_expire(mark);
            return Ok(());
        }
        let p = self.partition_at(key)?;
        if expired {
            p.raise_remote_low(mark)?;
        }
        p.commit_low_water(mark)?;
        self.reconciler
            .mark_pending(ObligationKey::Retention(key), now_ms);
        tracing::info!(partition = %key, low_water_mark = mark, "retention committed a low-water mark");
        Ok(())
    }

    /// Commits new low-water marks wherever retention is due (the start of
    /// every reconciler pass). Failures leave the partition due; nothing is
    /// removed here, only marks committed.
    pub(super) fn enforce_retention(&mut self) {
        let now = self.clock.now_micros();
        let mut deferred = Vec::new();
        while let Some(&(at, key)) = self.retention_index.by_time.first()
            && at <= now
        {
            self.retention_index.remove(key);
            match self.expire_by_age(key, now) {
                Ok(true) => {
                    self.refresh_retention(key);
                    // Each round must make progress: a partition due again
                    // at once is left for the next pass, never spun on
                    // under the engine lock.
                    if let Some(again) = self.retention_index.due_at(key)
                        && again <= now
                    {
                        tracing::warn!(partition = %key, due = again, now, "retention by age made no progress; retrying next pass");
                        self.retention_index.remove(key);
                        deferred.push((key, again));
                    }
                }
                Ok(false) => deferred.push((key, at)),
                Err(e) => {
                    tracing::warn!(partition = %key, error = %e, "could not commit a low-water mark; retrying next pass");
                    deferred.push((key, at));
                }
            }
        }
        for (key, at) in deferred {
            self.retention_index.insert(key, at);
        }
        let topics = std::mem::take(&mut self.retention_index.size_check);
        for topic in topics {
            if self.meta.topic(topic.stream, topic.topic).is_some() && !self.expire_by_size(topic) {
                self.retention_index.size_check.insert(topic);
            }
        }
    }

    /// Expires `key`'s sealed segments whose newest message is at least the
    /// topic's expiry old at `now`. `Ok(false)`: skipped, try again later.
    fn expire_by_age(&mut self, key: PartitionKey, now: u64) -> Result<bool> {
        if !self.retention_eligible(key) {
            return Ok(false);
        }
        let expiry = self.topic_meta(key.topic_key()).message_expiry;
        let Some(p) = self.partitions.get(&key) else {
            return Ok(true);
        };
        // Oldest first, and only a run from the oldest: the mark is the end
        // of the last expired one, so every segment below it expired too.
        let mark = p
            .log()
            .sealed()
            .take_while(|s| s.newest_timestamp.saturating_add(expiry) <= now)
            .last()
            .map(|s| s.next_offset);
        match mark {
            Some(mark) if mark > p.log().low_water() => {
                self.commit_mark(key, mark, true).map(|()| true)
            }
            _ => Ok(true),
        }
    }

    /// Removes the oldest sealed segments of `topic`, across its partitions,
    /// while it is over its cap. Returns `false` if it may still be over for
    /// a reason the next pass may not have (a skipped partition, a failed
    /// commit).
    fn expire_by_size(&mut self, topic: TopicKey) -> bool {
        let cap = self.topic_meta(topic).max_topic_size;
        if cap == 0 {
            return true;
        }
        let keys = self.topic_partition_keys(topic);
        // Both tiers count: a tiered topic's cap is on its whole history.
        let mut size: u64 = keys
            .iter()
            .filter_map(|k| self.partitions.get(k))
            .map(|p| p.stored_bytes())
            .sum();
        if size <= cap {
            return true;
        }
        let mut skipped = false;
        let mut candidates: Vec<(PartitionKey, Vec<SealedSegment>, usize)> = Vec::new();
        for key in keys {
            if !self.retention_eligible(key) {
                skipped = true;
                continue;
            }
            if let Some(p) = self.partitions.get(&key) {
                candidates.push((key, p.retained_sealed(), 0));
            }
        }
        while size > cap {
            // The oldest sealed segment left among the partitions (by its
            // newest message; ties in key order).
            let oldest = candidates
                .iter()
                .enumerate()
                .filter_map(|(i, (key, segs, next))| {
                    segs.get(*next).map(|s| (s.newest_timestamp, *key, i))
                })
                .min();
            let Some((_, _, i)) = oldest else {
                break;
            };
            let (_, segs, next) = &mut candidates[i];
            size = size.saturating_sub(segs[*next].size);
            *next += 1;
        }
        let mut ok = !skipped || size <= cap;
        for (key, segs, next) in candidates {
            if next == 0 {
                continue;
            }
            let mark = segs[next - 1].next_offset;
            // The segments taken may all be empty ones ending at the mark (a
            // cut of lost batches leaves one sealed, `Segment::recheck_unsure`):
            // nothing to raise, and the mark only grows.
            let raises = self
                .partitions
                .get(&key)
                .is_some_and(|p| mark > p.log().low_water());
            if raises && let Err(e) = self.commit_mark(key, mark, true) {
                tracing::warn!(partition = %key, error = %e, "could not commit a low-water mark; retrying next pass");
                ok = false;
            } else if !raises
                && let Some(p) = self.partitions.get_mut(&key)
                && let Err(e) = p.raise_remote_low(mark)
            {
                // Only remote segments expired: the remote mark moves
                // (its round removes them), the local one stays.
                tracing::warn!(partition = %key, error = %e, "could not record the remote low mark; retrying next pass");
                ok = false;
            }
            self.refresh_retention(key);
        }
        ok
    }

    /// Attempts the due retention obligations of this pass, in key order.
    pub(super) fn run_due_retentions(
        &mut self,
        due: Vec<PartitionKey>,
        now_ms: u64,
        report: &mut PassReport,
    ) {
        for key in due {
            let outcome = match self.partitions.get_mut(&key) {
                Some(p) => p.run_retention().map_err(|e| e.to_string()),
                None => panic!("invariant: retention pending for {key}, which is not live"),
            };
            report.record(
                &mut self.reconciler,
                ObligationKey::Retention(key),
                outcome,
                now_ms,
            );
        }
    }

    /// The retention invariants, for `check_invariants`.
    pub(super) fn check_retention(&self) -> std::result::Result<(), String> {
        let mut not_applied = BTreeSet::new();
        let mut with_obligation = BTreeSet::new();
        for (key, p) in &self.partitions {
            p.log()
                .check()
                .map_err(|e| format!("partition {key}: {e}"))?;
            if p.retention_recorded_removals() && p.retention().is_none_or(|r| r.is_applied()) {
                return Err(format!(
                    "partition {key}'s low-water record lists removals in flight but its retention owes nothing"
                ));
            }
            if p.retention_records_dead_removals() && p.obligation().is_none_or(|o| o.is_applied())
            {
                return Err(format!(
                    "partition {key}'s low-water record lists removals of a purged generation but its purge owes nothing"
                ));
            }
            if let Some(r) = p.retention() {
                with_obligation.insert(*key);
                if !r.is_applied() {
                    not_applied.insert(*key);
                }
                if r.low_water_mark() != p.log().low_water() {
                    return Err(format!(
                        "partition {key}'s retention is about mark {} but the log's is {}",
                        r.low_water_mark(),
                        p.log().low_water()
                    ));
                }
            }
        }
        let tracked: BTreeSet<PartitionKey> = self.reconciler.pending_retentions().collect();
        if let Some(k) = not_applied.difference(&tracked).next() {
            return Err(format!(
                "partition {k}'s retention is not applied but the reconciler does not track it"
            ));
        }
        if let Some(k) = tracked.difference(&not_applied).next() {
            return Err(format!(
                "the reconciler tracks the retention of {k}, which owes nothing"
            ));
        }
        if let Some(k) = self
            .retention_index
            .due
            .keys()
            .find(|k| !self.partitions.contains_key(k))
        {
            return Err(format!("retention is due for {k}, which is not live"));
        }
        Ok(())
    }
}
