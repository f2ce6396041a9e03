//! One reconciler pass over the purge obligations that are due: a cleanup
//! attempt on each of their partitions. (The engine attempts the due delete
//! obligations in the same pass, after these: engine/deletion.rs.)
//!
//! Invariants:
//! - A pass touches only the due partitions (O(due), not O(partitions)):
//!   they are taken out of the engine's map for the attempt and every one is
//!   put back, whatever happened.
//! - Partitions share no file, directory or name tracker, so their attempts
//!   are independent and may run on several threads; the bookkeeping that
//!   follows is in key order whatever order they finished in (the backoff
//!   jitter draws from a seeded RNG), and with `concurrency` 1 the attempts
//!   run one after another on the calling thread, in a fixed I/O order.
//! - Every due key is pending and names a live partition (the engine forgets
//!   a deleted partition's key when it deletes it).

use std::collections::BTreeMap;

use super::{FailureSite, ObligationKey, Reconciler};
use crate::error::Result;
use crate::metadata::PartitionKey;
use crate::partition::Partition;
use crate::partition::purge::DirKind;

/// What one reconciler pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub attempted: Vec<ObligationKey>,
    pub(crate) applied: Vec<ObligationKey>,
    pub(crate) failed: Vec<(ObligationKey, String)>,
    pub still_pending: usize,
}

impl PassReport {
    /// Records one attempt's outcome here and in `reconciler`.
    pub(crate) fn record(
        &mut self,
        reconciler: &mut Reconciler,
        key: ObligationKey,
        outcome: std::result::Result<(), String>,
        now_ms: u64,
    ) {
        self.attempted.push(key);
        match outcome {
            Ok(()) => {
                reconciler.record_success(key);
                self.applied.push(key);
            }
            Err(msg) => {
                reconciler.record_failure(key, &msg, now_ms);
                self.failed.push((key, msg));
            }
        }
    }
}

/// Attempts the cleanup of every partition in `due` (purge obligations due at
/// `now_ms`, in key order) over `partitions`, recording every outcome in
/// `reconciler` and `report`.
pub(crate) fn run_purge_cleanups(
    reconciler: &mut Reconciler,
    partitions: &mut BTreeMap<PartitionKey, Partition>,
    due: Vec<PartitionKey>,
    now_ms: u64,
    report: &mut PassReport,
) {
    let mut taken: Vec<(PartitionKey, Partition)> = due
        .iter()
        .filter_map(|k| partitions.remove(k).map(|p| (*k, p)))
        .collect();
    assert_eq!(
        taken.len(),
        due.len(),
        "invariant: every pending partition is live"
    );
    let work = taken.iter_mut().map(|(k, p)| (*k, p)).collect();
    let outcomes = run_cleanups(work, reconciler.config().concurrency);
    partitions.extend(taken);
    let mut outcomes = outcomes.into_iter().peekable();
    for key in due {
        let outcome = match outcomes.next_if(|o| o.key == key) {
            // Its cleanup thread panicked (a bug): retry later.
            None => Err("cleanup attempt panicked".to_string()),
            Some(CleanupDone { outcome: None, .. }) => Err("partition degraded".to_string()),
            Some(CleanupDone {
                outcome: Some(outcome),
                worked_on,
                failed_at,
                ..
            }) => {
                reconciler.record_sites(&worked_on, failed_at);
                outcome.map_err(|e| e.to_string())
            }
        };
        report.record(reconciler, ObligationKey::Purge(key), outcome, now_ms);
    }
}

/// What one partition's cleanup attempt did, for the reconciler's books.
struct CleanupDone {
    key: PartitionKey,
    /// `None`: the partition is degraded and was not attempted.
    outcome: Option<Result<()>>,
    worked_on: Vec<DirKind>,
    failed_at: Option<FailureSite>,
}

fn cleanup_one(key: PartitionKey, p: &mut Partition) -> CleanupDone {
    if p.degraded_reason().is_some() {
        return CleanupDone {
            key,
            outcome: None,
            worked_on: Vec::new(),
            failed_at: None,
        };
    }
    let outcome = p.run_cleanup();
    let failed_at = outcome.as_ref().err().map(|e| p.failure_site(e));
    CleanupDone {
        key,
        outcome: Some(outcome),
        worked_on: p.cleanup_worked_on(),
        failed_at,
    }
}

/// Runs one cleanup attempt on each partition, `concurrency` at a time, and
/// returns the outcomes in key order. Partitions share no file, directory or
/// name tracker, so their attempts are independent; with `concurrency` 1 they
/// run one after another on this thread (a fixed I/O order).
fn run_cleanups(work: Vec<(PartitionKey, &mut Partition)>, concurrency: usize) -> Vec<CleanupDone> {
    let threads = concurrency.clamp(1, work.len().max(1));
    let mut done: Vec<CleanupDone> = if threads == 1 {
        work.into_iter().map(|(k, p)| cleanup_one(k, p)).collect()
    } else {
        // Deal the partitions out round-robin so each thread gets a share.
        let mut shares: Vec<Vec<(PartitionKey, &mut Partition)>> =
            (0..threads).map(|_| Vec::new()).collect();
        for (i, item) in work.into_iter().enumerate() {
            shares[i % threads].push(item);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = shares
                .into_iter()
                .map(|share| {
                    scope.spawn(move || {
                        share
                            .into_iter()
                            .map(|(k, p)| cleanup_one(k, p))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| match h.join() {
                    Ok(v) => v,
                    // A panicking cleanup is a bug; keep the process up and
                    // let the partitions of that share be retried.
                    Err(_) => {
                        tracing::error!("a purge cleanup thread panicked");
                        Vec::new()
                    }
                })
                .collect()
        })
    };
    done.sort_by_key(|d| d.key);
    done
}
