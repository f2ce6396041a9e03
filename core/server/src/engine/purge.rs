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

use super::{Engine, PurgeMode, TopicKey};
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::metadata::PartitionKey;
use crate::partition::purge::FailureSite;
use crate::partition::reconciler::{ObligationKey, PassReport, run_purge_cleanups};

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
            if let Some(reason) = self.partition_at(*key)?.degraded_reason() {
                return Err(EngineError::Degraded {
                    key: *key,
                    reason: reason.to_string(),
                });
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
            }
            self.assert_invariants("naive purge");
            return Ok(());
        }
        debug_assert_eq!(self.config.purge_mode, PurgeMode::Obligation);
        let generations = self.commit_new_generations(&keys)?;
        let now = self.now_ms();
        for (key, generation) in generations {
            let p = self.partition_at(key)?;
            p.reset_to_generation(generation);
            p.begin_obligation(generation);
            self.reconciler.mark_pending(ObligationKey::Purge(key), now);
            // The purge removes every file of the old history, those below
            // its low-water mark included; the new one starts at mark 0.
            self.forget_retention(key);
            tracing::info!(partition = %key, generation, "purge committed");
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

    /// One reconciler pass over the obligations that are due.
    pub fn reconcile(&mut self) -> PassReport {
        let now = self.now_ms();
        self.reconcile_at(now)
    }

    /// One reconciler pass as of `now_ms` (simulations pass their own time).
    pub fn reconcile_at(&mut self, now_ms: u64) -> PassReport {
        // Cleanup removes what the committed generations make dead; while the
        // metadata holding them is not durable, a power loss could bring back
        // the older generations, so nothing may be removed yet.
        self.reconciler.begin_pass();
        let mut report = PassReport::default();
        let due = self.reconciler.due(now_ms);
        if let Err(e) = self.ensure_metadata_durable() {
            let msg = e.to_string();
            for key in due {
                self.reconciler.record_sites(&[], Some(FailureSite::Other));
                report.record(&mut self.reconciler, key, Err(msg.clone()), now_ms);
            }
            report.still_pending = self.reconciler.pending().len();
            return report;
        }
        // New low-water marks first, so their cleanup can run in this pass.
        self.enforce_retention();
        let due = self.reconciler.due(now_ms);
        let purges = due.iter().filter_map(|k| k.purge()).collect();
        run_purge_cleanups(
            &mut self.reconciler,
            &mut self.partitions,
            purges,
            now_ms,
            &mut report,
        );
        let deletions = due.iter().filter_map(|k| k.deletion()).collect();
        self.run_due_deletions(deletions, now_ms, &mut report);
        let retentions = due.iter().filter_map(|k| k.retention()).collect();
        self.run_due_retentions(retentions, now_ms, &mut report);
        report.still_pending = self.reconciler.pending().len();
        self.assert_invariants("reconciler pass");
        report
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
