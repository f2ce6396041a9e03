//! The bounded workloads the explorer covers exhaustively.
//!
//! Each workload is a setup (run cleanly, never faulted) and a window of steps
//! whose every storage operation is a crash point. Payloads and offset values
//! are unique per generation (and per incarnation of a deleted and re-created
//! resource) so the oracle can tell them apart.
//!
//! The deletion workloads (`delete-*`, issue 17) start their window with the
//! deletion, then do what a client does next: write to a resource that
//! survives it, create the deleted one again under the same id (which makes
//! the engine finish a pending deletion first) and write to it.
//!
//! The retention workloads (`retention-*`, issue 17) run on one-batch
//! segments: their window lets retention fall due (the simulated clock
//! advances past the expiry, or the topic is over its cap), runs a
//! reconciler pass (which commits the low-water mark and removes the files
//! below it), writes, and lets it fall due again, so a second mark is
//! committed while the first round may still be pending. A consumer and a
//! group stored offsets below the marks in the setup: `Next` must continue
//! at the mark.
//!
//! The tiered workloads (`tiered-*`, issue 31, ADR 0029) run on a world
//! whose topic is tiered to a `SimRemote` (one-batch segments, local copies
//! released as soon as their upload is recorded): their setup uploads and
//! releases part of the history, and their window purges it (`tiered-purge`)
//! or lets it expire (`tiered-retention`) with a tiering pass split around
//! the change (planned before it, its remote calls and finish after it), then
//! sends and tiers again. Every storage operation and every remote call of
//! the window is a crash point, on both doors at once.

use sluice_server::metadata::{Durability, PartitionKey, ResourceKey};

use crate::world::{Shape, Step, key};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    Purge,
    TopicPurge,
    Offsets,
    Append,
    /// One consumer storing five offsets in a row: with two faults per case,
    /// a failed store followed by a torn one (issue 12 defect 1).
    OffsetSlots,
    /// Delete topic 0 (a tree: its partition, segments, offsets), write to
    /// topic 1, create topic 0 again and write to it.
    DeleteTopic,
    /// Delete stream 0 (its topic with it), write to stream 1, create stream
    /// 0 and its topic again and write to it.
    DeleteStream,
    /// Delete the last partition of a topic of two, write to the other,
    /// create it again and write to it.
    DeletePartitions,
    /// Delete group 0 (its offset file in both partitions), store a
    /// consumer's offset, create the group again and store its offset.
    DeleteGroup,
    /// A 10 s `message_expiry`: the clock passes it, a pass expires the
    /// sealed segments; a send; the clock passes it again, a pass expires
    /// the next one.
    RetentionByAge,
    /// A 1-byte `max_topic_size`: every pass removes every sealed segment
    /// (the active one never goes); two passes with a send between.
    RetentionBySize,
    /// A tiered history in the store and released locally; a pass planned,
    /// the partition purged, the pass's calls and finish; sends; passes
    /// (the dead generation's objects must go, through a listing).
    TieredPurge,
    /// A tiered topic with a 10 s `message_expiry`, its history in the
    /// store; the clock passes it, a pass expires remote segments (a round
    /// of the live generation); sends and passes around a reconciler pass.
    TieredRetention,
}

/// The retention workloads' `message_expiry` (µs): longer than the clock
/// steps a restart takes (1 s each), so recovery expires nothing by itself.
pub const RETENTION_EXPIRY_MICROS: u64 = 10_000_000;

impl Workload {
    pub const ALL: [Workload; 13] = [
        Workload::Purge,
        Workload::TopicPurge,
        Workload::Offsets,
        Workload::Append,
        Workload::OffsetSlots,
        Workload::DeleteTopic,
        Workload::DeleteStream,
        Workload::DeletePartitions,
        Workload::DeleteGroup,
        Workload::RetentionByAge,
        Workload::RetentionBySize,
        Workload::TieredPurge,
        Workload::TieredRetention,
    ];

    /// The workloads on a tiered topic (a world with a remote door).
    pub const TIERED: [Workload; 2] = [Workload::TieredPurge, Workload::TieredRetention];

    /// Whether the world tiers its topic to a `SimRemote`.
    pub fn tiered(self) -> bool {
        Workload::TIERED.contains(&self)
    }

    /// The workloads whose window enforces retention.
    pub const RETENTIONS: [Workload; 2] = [Workload::RetentionByAge, Workload::RetentionBySize];

    /// The workloads whose window starts with a deletion.
    pub const DELETIONS: [Workload; 4] = [
        Workload::DeleteTopic,
        Workload::DeleteStream,
        Workload::DeletePartitions,
        Workload::DeleteGroup,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Purge => "purge",
            Workload::TopicPurge => "topic-purge",
            Workload::Offsets => "offsets",
            Workload::Append => "append",
            Workload::OffsetSlots => "offset-slots",
            Workload::DeleteTopic => "delete-topic",
            Workload::DeleteStream => "delete-stream",
            Workload::DeletePartitions => "delete-partitions",
            Workload::DeleteGroup => "delete-group",
            Workload::RetentionByAge => "retention-by-age",
            Workload::RetentionBySize => "retention-by-size",
            Workload::TieredPurge => "tiered-purge",
            Workload::TieredRetention => "tiered-retention",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    pub(crate) fn shape(self, policy: Durability) -> Shape {
        let partitions = match self {
            Workload::TopicPurge => 3,
            Workload::DeletePartitions | Workload::DeleteGroup => 2,
            _ => 1,
        };
        // Small segments so appends roll and recovery sees several segments;
        // for retention, one batch per segment, so each send seals the last.
        let segment_size = match self {
            Workload::Append => 256,
            Workload::RetentionByAge
            | Workload::RetentionBySize
            | Workload::TieredPurge
            | Workload::TieredRetention => 1,
            _ => 64 << 20,
        };
        Shape {
            partitions,
            messages: policy,
            offsets: policy,
            segment_size,
            max_open_files: None,
        }
    }

    fn send(partition: u32, tag: &str, n: usize) -> Step {
        Self::send_to(key(partition), tag, n)
    }

    fn send_to(partition: PartitionKey, tag: &str, n: usize) -> Step {
        Step::Send {
            partition,
            payloads: (0..n).map(|i| format!("{tag}-{i}")).collect(),
        }
    }

    fn store(partition: PartitionKey, group: bool, id: u32, offset: u64) -> Step {
        Step::Store {
            partition,
            group,
            id,
            offset,
        }
    }

    /// Steps run cleanly before the explored window.
    pub(crate) fn setup(self) -> Vec<Step> {
        match self {
            Workload::Purge => vec![
                Self::send(0, "old-a", 4),
                Self::send(0, "old-b", 4),
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 1,
                    offset: 5,
                },
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 2,
                    offset: 6,
                },
                Step::Store {
                    partition: key(0),
                    group: true,
                    id: 0,
                    offset: 7,
                },
            ],
            Workload::TopicPurge => (0..3)
                .flat_map(|p| {
                    vec![
                        Self::send(p, &format!("old-p{p}"), 6),
                        Step::Store {
                            partition: key(p),
                            group: false,
                            id: 1,
                            offset: 4,
                        },
                        Step::Store {
                            partition: key(p),
                            group: true,
                            id: 0,
                            offset: 5,
                        },
                    ]
                })
                .collect(),
            Workload::Offsets => vec![
                Self::send(0, "m", 8),
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 3,
                    offset: 7,
                },
            ],
            Workload::Append => vec![Self::send(0, "seed", 4)],
            Workload::OffsetSlots => vec![Self::send(0, "m", 8)],
            Workload::DeleteTopic => vec![
                Step::Create(TOPIC_1),
                Self::send(0, "old", 4),
                Self::send_to(T1P0, "t1-old", 2),
                Self::store(key(0), false, 1, 2),
                Self::store(key(0), true, 0, 3),
            ],
            Workload::DeleteStream => vec![
                Step::Create(STREAM_1),
                Step::Create(S1_TOPIC_0),
                Self::send(0, "old", 4),
                Self::send_to(S1T0P0, "s1-old", 2),
                Self::store(key(0), false, 1, 2),
                Self::store(key(0), true, 0, 3),
            ],
            Workload::DeletePartitions => vec![
                Self::send(0, "p0-old", 2),
                Self::send(1, "old", 4),
                Self::store(key(1), false, 1, 2),
                Self::store(key(1), true, 0, 3),
            ],
            Workload::RetentionByAge | Workload::RetentionBySize => {
                let (message_expiry, max_topic_size) = if self == Workload::RetentionByAge {
                    (RETENTION_EXPIRY_MICROS, 0)
                } else {
                    (0, 1)
                };
                vec![
                    Step::SetRetention {
                        stream: 0,
                        topic: 0,
                        message_expiry,
                        max_topic_size,
                    },
                    Self::send(0, "old-a", 2),
                    Self::send(0, "old-b", 2),
                    Self::send(0, "old-c", 2),
                    Self::store(key(0), false, 1, 0),
                    Self::store(key(0), true, 0, 3),
                ]
            }
            // Offsets 0-4 in four segments; two passes (one upload each)
            // upload two sealed ones and release the first.
            Workload::TieredPurge => vec![
                Self::send(0, "old-a", 2),
                Self::send(0, "old-b", 1),
                Self::send(0, "old-c", 1),
                Self::send(0, "old-d", 1),
                Step::TierPass,
                Step::TierPass,
                Self::store(key(0), false, 1, 2),
            ],
            Workload::TieredRetention => vec![
                Step::SetRetention {
                    stream: 0,
                    topic: 0,
                    message_expiry: RETENTION_EXPIRY_MICROS,
                    max_topic_size: 0,
                },
                Self::send(0, "old-a", 2),
                Self::send(0, "old-b", 1),
                Self::send(0, "old-c", 1),
                Step::TierPass,
                Step::TierPass,
                Self::store(key(0), false, 1, 1),
            ],
            Workload::DeleteGroup => vec![
                Self::send(0, "p0-old", 4),
                Self::send(1, "p1-old", 4),
                Self::store(key(0), true, 0, 2),
                Self::store(key(1), true, 0, 3),
                Self::store(key(0), false, 1, 1),
            ],
        }
    }

    /// The explored steps: every storage operation they issue is a crash point.
    pub(crate) fn window(self) -> Vec<Step> {
        match self {
            // The purge's cleanup is left in flight (ADR 0019), and its half
            // steps come between the calls: consumer 1 stores into its old
            // offset file after the cleanup's scan and before its unlinks,
            // the group after its directory syncs began and before they run,
            // a send between those syncs and the step that takes them in.
            Workload::Purge => vec![
                Step::PurgePartition { partition: key(0) },
                Self::send(0, "new-a", 2),
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 1,
                    offset: 0,
                },
                Step::CleanupTurn,
                Step::CleanupTurn,
                Step::Store {
                    partition: key(0),
                    group: true,
                    id: 0,
                    offset: 1,
                },
                Step::CleanupTurn,
                Self::send(0, "new-b", 1),
                Step::CleanupTurn,
            ],
            Workload::TopicPurge => vec![
                Step::PurgeTopic,
                Self::send(1, "new-p1", 2),
                Step::CleanupTurn,
                Step::CleanupTurn,
                Step::Store {
                    partition: key(2),
                    group: false,
                    id: 1,
                    offset: 0,
                },
                Step::CleanupTurn,
                Step::CleanupTurn,
            ],
            // Each window starts with a purge, so every workload also proves
            // the naive (Iggy-order) purge wrong; then what it is named for.
            Workload::Offsets => vec![
                Step::PurgePartition { partition: key(0) },
                Self::send(0, "n", 8),
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 1,
                    offset: 2,
                },
                Step::Store {
                    partition: key(0),
                    group: true,
                    id: 0,
                    offset: 3,
                },
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 1,
                    offset: 4,
                },
                Step::Delete {
                    partition: key(0),
                    group: true,
                    id: 0,
                },
                Step::Store {
                    partition: key(0),
                    group: false,
                    id: 2,
                    offset: 6,
                },
            ],
            Workload::Append => vec![
                Step::PurgePartition { partition: key(0) },
                Self::send(0, "a", 3),
                Self::send(0, "b", 5),
                Self::send(0, "c", 2),
            ],
            // No purge: only the two-slot records of one id under faults.
            Workload::OffsetSlots => (1..=5)
                .map(|offset| Step::Store {
                    partition: key(0),
                    group: false,
                    id: 1,
                    offset,
                })
                .collect(),
            Workload::DeleteTopic => vec![
                Step::Remove(TOPIC_0),
                Self::send_to(T1P0, "t1-new", 1),
                Step::Create(TOPIC_0),
                Self::send(0, "new", 2),
                Self::store(key(0), false, 1, 1),
            ],
            Workload::DeleteStream => vec![
                Step::Remove(STREAM_0),
                Self::send_to(S1T0P0, "s1-new", 1),
                Step::Create(STREAM_0),
                Step::Create(TOPIC_0),
                Self::send(0, "new", 2),
                Self::store(key(0), false, 1, 1),
            ],
            Workload::DeletePartitions => vec![
                Step::Remove(ResourceKey::Partition(key(1))),
                Self::send(0, "p0-new", 1),
                Step::Create(ResourceKey::Partition(key(1))),
                Self::send(1, "new", 2),
                Self::store(key(1), false, 1, 1),
            ],
            // Offsets 0-5 in three segments before; the first pass expires
            // all three sealed ones (mark 6: `new-a`'s segment is active),
            // the second `new-a`'s and `new-b`'s (mark 9: `new-c` is active).
            // Consumer 1 (at 0) and consumer 2 (at 7) are then below a mark.
            Workload::RetentionByAge | Workload::RetentionBySize => vec![
                Step::Advance {
                    micros: 2 * RETENTION_EXPIRY_MICROS,
                },
                Self::send(0, "new-a", 2),
                Step::Reconcile,
                Self::send(0, "new-b", 1),
                Self::store(key(0), false, 2, 7),
                Step::Advance {
                    micros: 2 * RETENTION_EXPIRY_MICROS,
                },
                Self::send(0, "new-c", 1),
                Step::Reconcile,
            ],
            // A pass uploads the last sealed segment (an attempt whose put
            // fails is deleted by the next pass's round of the live
            // generation, and a late put of it lands after that delete: an
            // orphan of the generation the purge kills, for its listing to
            // find). The pass planned before the purge runs after it; the
            // new generation is sent, uploaded, released.
            Workload::TieredPurge => vec![
                Step::TierPass,
                Step::TierPass,
                Step::TierPlan,
                Step::PurgePartition { partition: key(0) },
                Step::TierRun,
                Step::TierFinish,
                Self::send(0, "new-a", 1),
                Self::send(0, "new-b", 1),
                Step::TierPass,
                Self::send(0, "new-c", 1),
                Step::TierPass,
                Step::TierPass,
            ],
            // The expiry raises the remote low mark over the released
            // segments (a round deletes their objects), the reconciler's
            // retention expires what is still local; a send lands between
            // a pass's plan and its calls.
            Workload::TieredRetention => vec![
                Step::Advance {
                    micros: 2 * RETENTION_EXPIRY_MICROS,
                },
                Step::TierPass,
                Self::send(0, "new-a", 1),
                Step::Reconcile,
                Step::TierPlan,
                Self::send(0, "new-b", 1),
                Step::TierRun,
                Step::TierFinish,
                Step::TierPass,
            ],
            Workload::DeleteGroup => vec![
                Step::Remove(GROUP_0),
                Self::store(key(0), false, 1, 3),
                Step::Create(GROUP_0),
                Self::store(key(0), true, 0, 0),
                Self::send(1, "p1-new", 1),
            ],
        }
    }
}

const STREAM_0: ResourceKey = ResourceKey::Stream { stream: 0 };
const STREAM_1: ResourceKey = ResourceKey::Stream { stream: 1 };
const TOPIC_0: ResourceKey = ResourceKey::Topic {
    stream: 0,
    topic: 0,
};
const TOPIC_1: ResourceKey = ResourceKey::Topic {
    stream: 0,
    topic: 1,
};
const S1_TOPIC_0: ResourceKey = ResourceKey::Topic {
    stream: 1,
    topic: 0,
};
const GROUP_0: ResourceKey = ResourceKey::Group {
    stream: 0,
    topic: 0,
    group: 0,
};
/// Partition 0 of topic 1 (stream 0): survives the deletion of topic 0.
const T1P0: PartitionKey = PartitionKey {
    stream: 0,
    topic: 1,
    partition: 0,
};
/// Partition 0 of stream 1's topic: survives the deletion of stream 0.
const S1T0P0: PartitionKey = PartitionKey {
    stream: 1,
    topic: 0,
    partition: 0,
};
