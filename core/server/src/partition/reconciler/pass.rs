//! One reconciler pass over the purge obligations that are due: a cleanup
//! attempt on each of their partitions, whose syncs run without the engine
//! lock. (The engine attempts the due delete and retention obligations in
//! the same pass, under its lock: engine/deletion.rs, engine/retention.rs.)
//!
//! An attempt is a chain of steps (`Partition::advance_cleanup`), each taken
//! under the engine lock, separated by waits (`CleanupWait`: the plan's file
//! sync, the unlinks, the directories' syncs) that a `CleanupRun` performs
//! without it, on up to `concurrency` threads. Between two steps the engine
//! serves every request, those to the partition being cleaned included.
//!
//! Invariants:
//! - A pass touches only the due partitions (O(due), not O(partitions)).
//! - A partition has at most one attempt in flight: its `cleanup_job` holds
//!   the job's token from the first wait to the step after the last, and a
//!   partition with one is not started again.
//! - A step is taken only on the partition and generation its attempt
//!   started on. A partition deleted meanwhile (its key forgotten by the
//!   deletion) or purged again (its obligation superseded, and pending
//!   again for the new generation) drops the job: what it had done is
//!   recorded in the obligation or noted in the trackers, and the next
//!   attempt redoes what is not confirmed.
//! - An engine call takes at most `steps_per_hold` steps (a first step
//!   included); the other attempts keep their next step `Ready` for the next
//!   call, so a request waits behind at most that many partitions' steps.
//!   A `Ready` first step holds its partition like any other (its token is
//!   set when the pass starts), and is checked like any other step.
//! - Outcomes are recorded in key order within each step of the pass,
//!   whatever order the waits finished in (the backoff jitter draws from a
//!   seeded RNG); with `concurrency` 1 every wait runs on the calling
//!   thread, so a pass's I/O comes in a fixed order.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_storage::DurableStorage;

use super::{ObligationKey, Reconciler};
use crate::metadata::PartitionKey;
use crate::partition::purge::{CleanupPhase, CleanupStep, CleanupWait};
use crate::partition::{Partition, Retired};

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

/// A reconciler pass whose purge cleanups may still be under way. The
/// engine starts it (`Engine::begin_reconcile_at`) and takes each next step
/// (`Engine::resume_reconcile`); `perform_waits` runs the I/O in between,
/// without the engine.
#[derive(Debug)]
pub struct CleanupRun {
    pub(crate) now_ms: u64,
    concurrency: usize,
    /// Steps taken per engine call at most (at least 1).
    steps_per_hold: usize,
    storage: Arc<dyn DurableStorage>,
    /// In key order.
    jobs: Vec<PurgeJob>,
    pub(crate) report: PassReport,
}

#[derive(Debug)]
struct PurgeJob {
    key: PartitionKey,
    /// The generation whose obligation the attempt works on.
    generation: u64,
    /// The partition's `cleanup_job` while the attempt is in flight.
    token: u64,
    state: JobState,
    /// The histories the purge replaced, closed by the first wait.
    retired: Vec<Retired>,
}

enum JobState {
    /// Waiting for I/O that runs without the engine lock.
    Waiting(CleanupWait),
    /// The I/O ran: the next step, under the engine lock.
    Ready(CleanupStep),
    /// Taken (transiently, while a step is taken).
    Empty,
}

impl std::fmt::Debug for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JobState::Waiting(_) => "Waiting",
            JobState::Ready(_) => "Ready",
            JobState::Empty => "Empty",
        })
    }
}

impl CleanupRun {
    pub(crate) fn new(
        now_ms: u64,
        concurrency: usize,
        steps_per_hold: usize,
        storage: Arc<dyn DurableStorage>,
    ) -> Self {
        CleanupRun {
            now_ms,
            concurrency,
            steps_per_hold: steps_per_hold.max(1),
            storage,
            jobs: Vec::new(),
            report: PassReport::default(),
        }
    }

    /// Whether every attempt of the pass has ended.
    pub fn is_finished(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The attempts waiting for I/O.
    pub fn waiting(&self) -> usize {
        self.jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Waiting(_)))
            .count()
    }

    /// The attempts whose next step is due (their I/O ran, or they have not
    /// begun): the next engine call takes up to `steps_per_hold` of them.
    pub fn ready(&self) -> usize {
        self.jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Ready(_)))
            .count()
    }

    /// What each attempt waiting for I/O waits for, in key order.
    pub fn waiting_for(&self) -> Vec<CleanupPhase> {
        self.jobs
            .iter()
            .filter_map(|j| match &j.state {
                JobState::Waiting(wait) => wait.phase(),
                _ => None,
            })
            .collect()
    }

    /// The partitions whose attempts are under way, in key order, each with
    /// what it waits for (`None`: its next step is due).
    pub fn partitions(&self) -> Vec<(PartitionKey, Option<CleanupPhase>)> {
        self.jobs
            .iter()
            .map(|j| {
                let phase = match &j.state {
                    JobState::Waiting(wait) => wait.phase(),
                    _ => None,
                };
                (j.key, phase)
            })
            .collect()
    }

    pub fn report(&self) -> &PassReport {
        &self.report
    }

    pub fn into_report(self) -> PassReport {
        debug_assert!(self.is_finished(), "a pass reports once its attempts ended");
        self.report
    }

    /// Performs every waiting attempt's I/O, `concurrency` at a time,
    /// without the engine: partitions share no file, and each directory's
    /// syncs are serialised by its `DirSync`. With `concurrency` 1 they run
    /// one after another on this thread, in key order.
    pub fn perform_waits(&mut self) {
        let storage = self.storage.clone();
        let waiting: Vec<&mut PurgeJob> = self
            .jobs
            .iter_mut()
            .filter(|j| matches!(j.state, JobState::Waiting(_)))
            .collect();
        crate::fanout::fan_out(waiting, self.concurrency, |job| {
            job.perform(storage.as_ref())
        });
    }
}

impl PurgeJob {
    fn perform(&mut self, storage: &dyn DurableStorage) {
        // Closing the replaced histories' files takes time (a close can start
        // writeback), so it is done here, without the engine lock.
        drop(std::mem::take(&mut self.retired));
        self.state = match std::mem::replace(&mut self.state, JobState::Empty) {
            JobState::Waiting(wait) => JobState::Ready(wait.perform(storage)),
            other => other,
        };
    }
}

/// Starts the cleanup attempt of every partition in `due` (purge obligations
/// due at `run.now_ms`, in key order) that has none in flight: its first
/// step, under the engine lock. Attempts that end there are recorded now;
/// the others wait in `run`.
pub(crate) fn start_purge_cleanups(
    reconciler: &mut Reconciler,
    partitions: &mut BTreeMap<PartitionKey, Partition>,
    due: Vec<PartitionKey>,
    next_token: &mut u64,
    run: &mut CleanupRun,
) {
    let mut taken = 0;
    for key in due {
        let Some(p) = partitions.get_mut(&key) else {
            panic!("invariant: pending purge of partition {key}, which is not live");
        };
        if p.cleanup_job.is_some() {
            // An attempt of an earlier pass is still under way.
            continue;
        }
        if p.degraded_reason().is_some() {
            record(reconciler, run, key, Err("partition degraded".to_string()));
            continue;
        }
        let token = *next_token;
        *next_token += 1;
        let generation = p.generation();
        let retired = p.take_retired();
        if taken == run.steps_per_hold {
            // Begun by a later engine call: the partition is held already.
            p.cleanup_job = Some(token);
            run.jobs.push(PurgeJob {
                key,
                generation,
                token,
                state: JobState::Ready(CleanupStep::Begin),
                retired,
            });
            continue;
        }
        taken += 1;
        let advanced = p.advance_cleanup(CleanupStep::Begin);
        settle(
            reconciler, run, key, generation, token, p, advanced, retired,
        );
    }
    run.jobs.sort_by_key(|j| j.key);
}

/// Takes the next step of every attempt whose I/O ran, under the engine
/// lock, in key order.
pub(crate) fn resume_purge_cleanups(
    reconciler: &mut Reconciler,
    partitions: &mut BTreeMap<PartitionKey, Partition>,
    run: &mut CleanupRun,
) {
    let jobs = std::mem::take(&mut run.jobs);
    let mut taken = 0;
    for mut job in jobs {
        if taken == run.steps_per_hold {
            run.jobs.push(job);
            continue;
        }
        let step = match std::mem::replace(&mut job.state, JobState::Empty) {
            JobState::Ready(step) => step,
            state => {
                job.state = state;
                run.jobs.push(job);
                continue;
            }
        };
        taken += 1;
        let Some(p) = partitions.get_mut(&job.key) else {
            // Deleted meanwhile: its deletion forgot the obligation.
            continue;
        };
        if p.cleanup_job != Some(job.token) {
            // Another partition under the same key (deleted and created
            // again): this attempt's partition is gone.
            continue;
        }
        p.cleanup_job = None;
        if p.generation() != job.generation {
            // Purged again: the new generation's obligation superseded this
            // one, keeping its recorded names, and is pending on its own.
            continue;
        }
        if p.degraded_reason().is_some() {
            let msg = "partition degraded".to_string();
            record(reconciler, run, job.key, Err(msg));
            continue;
        }
        let advanced = p.advance_cleanup(step);
        // Empty unless this was a first step left for this call.
        let retired = std::mem::take(&mut job.retired);
        settle(
            reconciler,
            run,
            job.key,
            job.generation,
            job.token,
            p,
            advanced,
            retired,
        );
    }
    run.jobs.sort_by_key(|j| j.key);
}

/// Files an attempt's step: a wait goes into `run` (the partition marked
/// with the job's token, `retired` closed by the wait); an end is recorded.
#[allow(clippy::too_many_arguments)]
fn settle(
    reconciler: &mut Reconciler,
    run: &mut CleanupRun,
    key: PartitionKey,
    generation: u64,
    token: u64,
    p: &mut Partition,
    advanced: crate::error::Result<CleanupWait>,
    retired: Vec<Retired>,
) {
    match advanced {
        Ok(CleanupWait::Done) => {
            reconciler.record_sites(&p.cleanup_worked_on(), None);
            record(reconciler, run, key, Ok(()));
        }
        Ok(wait) => {
            p.cleanup_job = Some(token);
            run.jobs.push(PurgeJob {
                key,
                generation,
                token,
                state: JobState::Waiting(wait),
                retired,
            });
        }
        Err(e) => {
            let site = p.failure_site(&e);
            reconciler.record_sites(&p.cleanup_worked_on(), Some(site));
            record(reconciler, run, key, Err(e.to_string()));
        }
    }
}

fn record(
    reconciler: &mut Reconciler,
    run: &mut CleanupRun,
    key: PartitionKey,
    outcome: std::result::Result<(), String>,
) {
    let now_ms = run.now_ms;
    run.report
        .record(reconciler, ObligationKey::Purge(key), outcome, now_ms);
}
