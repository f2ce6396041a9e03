//! The remote calls of tiering, planned under the engine lock and run
//! without it.
//!
//! Invariants:
//! - A job is planned only from a durable record: an upload's intent (with
//!   its attempt number) is written and synced before its job exists, and a
//!   deletion round's keys are written and synced before its job exists. So
//!   whatever a job does, and wherever the process dies while it runs, the
//!   record names every object it may have created or must remove.
//! - A job holds everything it needs (bytes, keys) and no reference into the
//!   engine: it runs on any thread while requests are served. Its outcome is
//!   applied only to the partition value it was planned from (`serial`) and
//!   only while that value's record still expects it (the same intent, the
//!   same round); any other outcome is dropped, and what it did is covered by
//!   the record the newer state wrote (an abandoned attempt is doomed, a
//!   purged generation is dead) or, for a partition deleted meanwhile, by the
//!   orphan sweep.
//! - A put that did not answer `Ok` may still have applied (ADR 0026 §2):
//!   the attempt is abandoned and its keys doomed, never retried under the
//!   same key.

use std::collections::BTreeSet;

use bytes::Bytes;
use sluice_remote::{RemoteError, RemoteKey, RemoteStore};

use super::{Attempt, ObjectKind, PartitionPlace, TierKeys};
use crate::metadata::PartitionKey;

/// One upload attempt of one sealed segment (its `.log` and `.idx`).
#[derive(Debug, Clone)]
pub(crate) struct UploadJob {
    pub(crate) key: PartitionKey,
    pub(crate) serial: u64,
    pub(crate) attempt: Attempt,
    pub(crate) next_offset: u64,
    pub(crate) newest_timestamp: u64,
    pub(crate) log_key: RemoteKey,
    pub(crate) index_key: RemoteKey,
    pub(crate) log: Bytes,
    pub(crate) index: Bytes,
}

impl UploadJob {
    /// The index first: an object found with no record is an orphan either
    /// way, and a `.log` is never recorded without its `.idx`.
    pub(crate) fn run(&self, store: &dyn RemoteStore) -> Result<(), RemoteError> {
        store.put_new(&self.index_key, self.index.clone())?;
        store.put_new(&self.log_key, self.log.clone())
    }

    pub(crate) fn bytes(&self) -> u64 {
        (self.log.len() + self.index.len()) as u64
    }
}

/// One attempt at a partition's recorded deletion round.
#[derive(Debug, Clone)]
pub(crate) struct RoundJob {
    pub(crate) key: PartitionKey,
    pub(crate) serial: u64,
    pub(crate) place: PartitionPlace,
    /// The round as recorded when planned: the job's outcome counts only for
    /// the same round.
    pub(crate) doomed: BTreeSet<Attempt>,
    pub(crate) dead_generations: BTreeSet<u64>,
}

/// What a round's attempt found.
#[derive(Debug, Clone)]
pub(crate) enum RoundOutcome {
    /// Every doomed key answered `Ok` (missing counts as deleted), and each
    /// dead generation's prefix listed: what the listings found (attempts no
    /// record names, such as a put that landed late).
    Done { found: Vec<Attempt>, keys: usize },
    /// A delete or a listing failed: the round stays recorded, retried.
    Failed(RemoteError),
}

impl RoundJob {
    pub(crate) fn run(&self, store: &dyn RemoteStore, keys: &TierKeys) -> RoundOutcome {
        let mut deleted = 0;
        for attempt in &self.doomed {
            for kind in [ObjectKind::Log, ObjectKind::Index] {
                let key = keys.object(self.place, *attempt, kind);
                if let Err(e) = store.delete(&key) {
                    return RoundOutcome::Failed(e);
                }
                deleted += 1;
            }
        }
        let mut found = Vec::new();
        for generation in &self.dead_generations {
            let prefix = keys.generation_prefix(self.place, *generation);
            match store.list(&prefix) {
                Ok(listed) => {
                    for object in listed {
                        match keys.parse(&object.key) {
                            Some((place, attempt, _)) if place == self.place => {
                                if !found.contains(&attempt) {
                                    found.push(attempt);
                                }
                            }
                            // Under a dead generation's prefix of this
                            // partition, only sluice's own object names
                            // can be: anything else is reported, not
                            // deleted, and keeps the round from `Applied`.
                            _ => {
                                return RoundOutcome::Failed(
                                    RemoteError::new(
                                        sluice_remote::RemoteOp::List,
                                        &prefix,
                                        sluice_remote::RemoteErrorKind::Other,
                                    )
                                    .with_detail(format!(
                                        "object {} is not a segment sluice writes",
                                        object.key
                                    )),
                                );
                            }
                        }
                    }
                }
                Err(e) => return RoundOutcome::Failed(e),
            }
        }
        RoundOutcome::Done {
            found,
            keys: deleted,
        }
    }
}
