//! The bounded workloads the explorer covers exhaustively.
//!
//! Each workload is a setup (run cleanly, never faulted) and a window of steps
//! whose every storage operation is a crash point. Payloads and offset values
//! are unique per generation so the oracle can tell generations apart.

use sluice_server::metadata::Durability;

use crate::world::{Shape, Step};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    Purge,
    TopicPurge,
    Offsets,
    Append,
    /// One consumer storing five offsets in a row: with two faults per case,
    /// a failed store followed by a torn one (issue 12 defect 1).
    OffsetSlots,
}

impl Workload {
    pub const ALL: [Workload; 5] = [
        Workload::Purge,
        Workload::TopicPurge,
        Workload::Offsets,
        Workload::Append,
        Workload::OffsetSlots,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Purge => "purge",
            Workload::TopicPurge => "topic-purge",
            Workload::Offsets => "offsets",
            Workload::Append => "append",
            Workload::OffsetSlots => "offset-slots",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    pub(crate) fn shape(self, policy: Durability) -> Shape {
        let partitions = if self == Workload::TopicPurge { 3 } else { 1 };
        // Small segments so appends roll and recovery sees several segments.
        let segment_size = if self == Workload::Append {
            256
        } else {
            64 << 20
        };
        Shape {
            partitions,
            messages: policy,
            offsets: policy,
            segment_size,
        }
    }

    fn send(partition: u32, tag: &str, n: usize) -> Step {
        Step::Send {
            partition,
            payloads: (0..n).map(|i| format!("{tag}-{i}")).collect(),
        }
    }

    /// Steps run cleanly before the explored window.
    pub(crate) fn setup(self) -> Vec<Step> {
        match self {
            Workload::Purge => vec![
                Self::send(0, "old-a", 4),
                Self::send(0, "old-b", 4),
                Step::Store {
                    partition: 0,
                    group: false,
                    id: 1,
                    offset: 5,
                },
                Step::Store {
                    partition: 0,
                    group: false,
                    id: 2,
                    offset: 6,
                },
                Step::Store {
                    partition: 0,
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
                            partition: p,
                            group: false,
                            id: 1,
                            offset: 4,
                        },
                        Step::Store {
                            partition: p,
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
                    partition: 0,
                    group: false,
                    id: 3,
                    offset: 7,
                },
            ],
            Workload::Append => vec![Self::send(0, "seed", 4)],
            Workload::OffsetSlots => vec![Self::send(0, "m", 8)],
        }
    }

    /// The explored steps: every storage operation they issue is a crash point.
    pub(crate) fn window(self) -> Vec<Step> {
        match self {
            Workload::Purge => vec![
                Step::PurgePartition { partition: 0 },
                Self::send(0, "new-a", 2),
                Step::Store {
                    partition: 0,
                    group: false,
                    id: 1,
                    offset: 0,
                },
                Step::Store {
                    partition: 0,
                    group: true,
                    id: 0,
                    offset: 1,
                },
                Self::send(0, "new-b", 1),
            ],
            Workload::TopicPurge => vec![
                Step::PurgeTopic,
                Self::send(1, "new-p1", 2),
                Step::Store {
                    partition: 2,
                    group: false,
                    id: 1,
                    offset: 0,
                },
            ],
            // Each window starts with a purge, so every workload also proves
            // the naive (Iggy-order) purge wrong; then what it is named for.
            Workload::Offsets => vec![
                Step::PurgePartition { partition: 0 },
                Self::send(0, "n", 8),
                Step::Store {
                    partition: 0,
                    group: false,
                    id: 1,
                    offset: 2,
                },
                Step::Store {
                    partition: 0,
                    group: true,
                    id: 0,
                    offset: 3,
                },
                Step::Store {
                    partition: 0,
                    group: false,
                    id: 1,
                    offset: 4,
                },
                Step::Delete {
                    partition: 0,
                    group: true,
                    id: 0,
                },
                Step::Store {
                    partition: 0,
                    group: false,
                    id: 2,
                    offset: 6,
                },
            ],
            Workload::Append => vec![
                Step::PurgePartition { partition: 0 },
                Self::send(0, "a", 3),
                Self::send(0, "b", 5),
                Self::send(0, "c", 2),
            ],
            // No purge: only the two-slot records of one id under faults.
            Workload::OffsetSlots => (1..=5)
                .map(|offset| Step::Store {
                    partition: 0,
                    group: false,
                    id: 1,
                    offset,
                })
                .collect(),
        }
    }
}
