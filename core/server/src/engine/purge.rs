//! Purge: the commit point, and the reconciler passes that clean up after it.
//!
//! Invariants:
//! - A purge is acknowledged only once one metadata write has bumped the
//!   committed generation of every partition it covers (a stream or topic
//!   purge is one commit for all of them). From then on every read and write
//!   sees only the new, empty history; cleanup of the old files is an
//!   obligation the reconciler drives to `Applied`.
//! - Each purged partition is pending in the reconciler from the commit on,
//!   and stays pending until its obligation is `Applied`.
//! - Nothing is removed while the metadata that makes it dead is not known
//!   durable (a power loss could bring back the older generations).
//! - A pass is a `CleanupRun`: every decision of a purge cleanup is a step
//!   taken under the engine's `&mut self` (`begin_reconcile_at`,
//!   `resume_reconcile`); only its waits for the disk run without it
//!   (`CleanupRun::perform_waits`, ADR 0019), so requests are served while
//!   cleanup syncs. `reconcile_at` runs the steps and waits in turn.

use super::{Engine, PurgeMode, TopicKey};
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::metadata::PartitionKey;
use crate::partition::purge::FailureSite;
use crate::partition::reconciler::{
    CleanupRun, ObligationKey, PassReport, resume_purge_cleanups, start_purge_cleanups,
};

impl Engine {
    /// Purges every partition of a stream (one commit point for all of them).
    pub(crate) fn purge_stream(&mut self, stream: &Identifier) -> Result<()> {
        let s = self.resolve_stream(stream)?;
        let keys: Vec<PartitionKey> = self
            .partitions
            .keys()
            .filter(|k| k.stream == s)
            .copied()
            .collect();
        self.purge(keys)
    }

    /// Purges every partition of a topic (one commit point for all of them).
    pub fn purge_topic(&mut self, stream: &Identifier, topic: &Identifier) -> Result<()> {
        let key: TopicKey = self.resolve_topic(stream, topic)?;
        let keys = self.topic_partition_keys(key);
        self.purge(keys)
    }

    pub fn purge_partition(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
    ) -> Result<()> {
        let key = self.resolve_partition(stream, topic, partition)?;
        self.purge(vec![key])
    }

    /// The commit point: one metadata write bumps the committed generation of
    /// every partition in `keys`. Once it returns `Ok`, the purge is
    /// acknowledged; the reconciler is woken to clean up, and cleanup's
    /// failures are retried by it, never returned.
    fn purge(&mut self, keys: Vec<PartitionKey>) -> Result<()> {
        for key in &keys {
            let p = self.partition_at(*key)?;
            if let Some(reason) = p.degraded_reason() {
                return Err(EngineError::Degraded {
                    key: *key,
                    reason: reason.to_string(),
                });
            }
            // A tiered partition's record holds a bounded number of dead
            // generations still to clean remotely: past it, purges wait for
            // the store (ADR 0027).
            if p.tier().is_some_and(|t| !t.state.can_purge()) {
                return Err(EngineError::Unavailable(format!(
                    "partition {key} has {} purged generations still to remove from the remote tier; retry once the store is reachable",
                    crate::partition::tiering::MAX_DEAD_GENERATIONS
                )));
            }
        }
        #[cfg(feature = "naive-purge")]
        if self.config.purge_mode == PurgeMode::NaiveIggyOrder {
            // Iggy's order: delete and sync (warnings only) first, then record
            // the generation; no obligation, nothing left for the reconciler.
            for key in &keys {
                self.partition_at(*key)?.naive_cleanup();
            }
            let generations = self.commit_new_generations(&keys)?;
            for (key, generation) in generations {
                self.partition_at(key)?.reset_to_generation(generation);
                self.forget_retention(key);
                self.forget_polled(key.topic_key(), key.partition);
            }
            self.assert_invariants("naive purge");
            return Ok(());
        }
        debug_assert_eq!(self.config.purge_mode, PurgeMode::Obligation);
        let generations = self.commit_new_generations(&keys)?;
        let now = self.now_ms();
        for &(key, generation) in &generations {
            let p = self.partition_at(key)?;
            p.reset_to_generation(generation);
            p.begin_obligation(generation);
            // The remote copies of the old history become a recorded round
            // (reads of them stopped with the commit: the generation is in
            // every key the partition reads).
            p.purge_tiering(generation);
            self.forget_polled(key.topic_key(), key.partition);
            self.reconciler.mark_pending(ObligationKey::Purge(key), now);
            // The purge removes every file of the old history, those below
            // its low-water mark included; the new one starts at mark 0.
            self.forget_retention(key);
            tracing::debug!(partition = %key, generation, "purge committed");
        }
        // One line per call: a topic purge of 100,000 partitions is one
        // operator action, not 100,000 events (each partition's generation is
        // in the status endpoint, and at `debug`).
        if let (Some((first, _)), Some((last, _))) = (generations.first(), generations.last()) {
            tracing::info!(partitions = generations.len(), first = %first, last = %last, "purge committed");
        }
        self.assert_invariants("purge commit");
        // Answered at the commit point: cleanup is the reconciler's, and a
        // caller never waits for it (nor does any other request wait behind
        // it for the engine).
        self.obligation_committed();
        Ok(())
    }

    /// One metadata write bumping the committed generation of every partition
    /// in `keys`; returns each new generation. Until the caller resets the
    /// partitions to them, memory serves the previous generations (the
    /// caller does so before it returns).
    fn commit_new_generations(
        &mut self,
        keys: &[PartitionKey],
    ) -> Result<Vec<(PartitionKey, u64)>> {
        self.commit(|m| {
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let Some(p) = m.partition_mut(*key) else {
                    panic!("invariant: partition {key} was resolved but is not in the metadata");
                };
                p.committed_generation += 1;
                out.push((*key, p.committed_generation));
            }
            Ok(out)
        })
    }

    /// One reconciler pass over the obligations that are due, run to its
    /// end on the calling thread (the waits of its purge cleanups too).
    pub fn reconcile(&mut self) -> PassReport {
        let now = self.now_ms();
        self.reconcile_at(now)
    }

    /// One reconciler pass as of `now_ms` (simulations pass their own time),
    /// run to its end: the steps of `begin_reconcile_at` and
    /// `resume_reconcile`, with the waits in between on this thread.
    pub fn reconcile_at(&mut self, now_ms: u64) -> PassReport {
        let mut run = self.begin_reconcile_at(now_ms);
        while !run.is_finished() {
            run.perform_waits();
            self.resume_reconcile(&mut run);
        }
        run.into_report()
    }

    /// Starts a reconciler pass as of now (see `begin_reconcile_at`).
    pub fn begin_reconcile(&mut self) -> CleanupRun {
        let now = self.now_ms();
        self.begin_reconcile_at(now)
    }

    /// Starts a reconciler pass as of `now_ms`: retention's new marks, the
    /// due deletions and retentions (under this call), and the first step of
    /// every due purge cleanup. What the purge cleanups then wait for (the
    /// plan's sync, the unlinks, the directories' syncs) needs no engine:
    /// the server runs `CleanupRun::perform_waits` without its lock, so
    /// requests are served while cleanup waits for the disk, and then
    /// `resume_reconcile`.
    pub fn begin_reconcile_at(&mut self, now_ms: u64) -> CleanupRun {
        // Consumer-group handovers past their deadline complete even while
        // nobody touches the group (memory only; nothing to do for most).
        self.complete_due_revocations();
        // Cleanup removes what the committed generations make dead; while the
        // metadata holding them is not durable, a power loss could bring back
        // the older generations, so nothing may be removed yet.
        self.reconciler.begin_pass();
        let config = self.reconciler.config();
        let mut run = CleanupRun::new(
            now_ms,
            config.concurrency,
            config.steps_per_hold,
            self.storage.clone(),
        );
        let due = self.reconciler.due(now_ms);
        if let Err(e) = self.ensure_metadata_durable() {
            let msg = e.to_string();
            for key in due {
                self.reconciler.record_sites(&[], Some(FailureSite::Other));
                run.report
                    .record(&mut self.reconciler, key, Err(msg.clone()), now_ms);
            }
            self.end_pass(&mut run);
            return run;
        }
        // New low-water marks first, so their cleanup can run in this pass.
        self.enforce_retention();
        let due = self.reconciler.due(now_ms);
        let purges = due.iter().filter_map(|k| k.purge()).collect();
        start_purge_cleanups(
            &mut self.reconciler,
            &mut self.partitions,
            purges,
            &mut self.next_cleanup_token,
            &mut run,
        );
        let deletions = due.iter().filter_map(|k| k.deletion()).collect();
        self.run_due_deletions(deletions, now_ms, &mut run.report);
        let retentions = due.iter().filter_map(|k| k.retention()).collect();
        self.run_due_retentions(retentions, now_ms, &mut run.report);
        if run.is_finished() {
            self.end_pass(&mut run);
        } else {
            self.assert_invariants("reconciler pass start");
        }
        run
    }

    /// Takes the next step of every purge cleanup of `run` whose wait was
    /// performed (`CleanupRun::perform_waits`).
    pub fn resume_reconcile(&mut self, run: &mut CleanupRun) {
        resume_purge_cleanups(&mut self.reconciler, &mut self.partitions, run);
        if run.is_finished() {
            self.end_pass(run);
        } else {
            self.assert_invariants("reconciler step");
        }
    }

    fn end_pass(&mut self, run: &mut CleanupRun) {
        run.report.still_pending = self.reconciler.pending().len();
        self.assert_invariants("reconciler pass");
    }

    /// Runs passes (ignoring backoff) until nothing is pending or `max_passes` ran.
    /// Returns the number of passes that had work.
    pub fn reconcile_until_idle(&mut self, max_passes: u32) -> u32 {
        let mut passes = 0;
        while passes < max_passes && !self.reconciler.pending().is_empty() {
            self.reconcile_at(u64::MAX);
            passes += 1;
        }
        passes
    }
}
