//! The soaked topics and what a purge covers (issue 14, item 2).
//!
//! One stream holds one topic per durability combination the oracle judges
//! differently, so that a stream purge differs from a topic purge and a
//! `buffered` history sits next to a `persisted` one:
//!
//! - `events`: messages and offsets `persisted`: everything acknowledged
//!   must survive a power cut;
//! - `buffered`: messages `buffered`, offsets `persisted`: the messages may
//!   be lost, the offsets may not, so a stored offset can outlive the
//!   messages it named (ADR 0010's continuation);
//! - `lazy`: both `buffered`: nothing acknowledged has to survive, but no
//!   purged message or offset may come back.
//!
//! Invariant: a topic's index in `TOPICS` is its Iggy id (the first topic of
//! a stream is 0, ADR 0013); the soak checks each id when it creates it.

/// What an acknowledgement promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Synced before the answer: survives a power cut.
    Persisted,
    /// In the page cache when answered: a power cut may take it.
    Buffered,
}

impl Durability {
    /// The engine's policy of the same name, for the shared model of what
    /// may survive (`sluice_sim::ack`).
    pub fn policy(self) -> sluice_server::metadata::Durability {
        match self {
            Durability::Persisted => sluice_server::metadata::Durability::Persisted,
            Durability::Buffered => sluice_server::metadata::Durability::Buffered,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Persisted => "persisted",
            Durability::Buffered => "buffered",
        }
    }
}

pub struct TopicSpec {
    pub name: &'static str,
    pub messages: Durability,
    pub offsets: Durability,
}

pub const TOPICS: [TopicSpec; 3] = [
    TopicSpec {
        name: "events",
        messages: Durability::Persisted,
        offsets: Durability::Persisted,
    },
    TopicSpec {
        name: "buffered",
        messages: Durability::Buffered,
        offsets: Durability::Persisted,
    },
    TopicSpec {
        name: "lazy",
        messages: Durability::Buffered,
        offsets: Durability::Buffered,
    },
];

/// The topic whose buffered messages sit under persisted offsets: where the
/// ADR 0010 cycle stores an offset that a power cut leaves past the log.
pub const ADR_0010_TOPIC: u32 = 1;

pub fn spec(topic: u32) -> &'static TopicSpec {
    &TOPICS[topic as usize % TOPICS.len()]
}

pub fn count() -> u32 {
    TOPICS.len() as u32
}

/// What one request that starts a new history covers: a purge of one topic
/// or of every topic of the stream (one commit point for all of them, so it
/// lands everywhere or nowhere), or a re-creation (issue 27).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Topic(u32),
    Stream,
    Recreate(Recreation),
}

/// A topic, or its last partitions, deleted and created again under the same
/// ids (Iggy reuses them: a topic by its explicit id, partitions because new
/// ones continue after the highest live one). The new incarnation starts
/// empty at purge generation 0: what the old one acknowledged is gone, as
/// after a purge, and it lives at the same paths on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recreation {
    pub topic: u32,
    /// The first partition id re-created: every partition from it on.
    pub from: u32,
    /// The topic itself (with its consumer groups), not only partitions.
    pub whole: bool,
}

impl Scope {
    pub fn covers(self, topic: u32, partition: u32) -> bool {
        match self {
            Scope::Topic(t) => t == topic,
            Scope::Stream => true,
            Scope::Recreate(r) => r.topic == topic && partition >= r.from,
        }
    }

    /// The re-creation this is, if it is one rather than a purge.
    pub fn recreation(self) -> Option<Recreation> {
        match self {
            Scope::Recreate(r) => Some(r),
            Scope::Topic(_) | Scope::Stream => None,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Topic(t) => write!(f, "topic {}", spec(*t).name),
            Scope::Stream => write!(f, "stream"),
            Scope::Recreate(r) if r.whole => {
                write!(f, "re-creation of topic {}", spec(r.topic).name)
            }
            Scope::Recreate(r) => write!(
                f,
                "re-creation of {}'s partitions from {}",
                spec(r.topic).name,
                r.from
            ),
        }
    }
}

/// Which purges in doubt landed, given how many landed per topic (the
/// committed generations say so exactly). `doubtful` lists their scopes in
/// the order they were sent; the answer marks each landed or not, or `None`
/// when no choice explains `landed`.
///
/// Only the count per scope matters to the generations: `y` stream purges
/// and `landed[t] - y` purges of each topic `t`. Among the choices that fit,
/// the fewest stream purges land, and within a scope the earliest ones (at
/// most one purge is in flight at a time, so an earlier one reached the
/// server first); such a tie is rare (a kill and a failed request in doubt
/// of different scopes in one cycle) and the choice is then a guess.
/// Re-creations are decided from the catalog (`recreate::settle`), not from
/// generations: one in `doubtful` is marked not landed.
pub fn landed_purges(doubtful: &[Scope], landed: &[u64]) -> Option<Vec<bool>> {
    let streams = doubtful.iter().filter(|s| **s == Scope::Stream).count() as u64;
    let per_topic = |t: u32| doubtful.iter().filter(|s| **s == Scope::Topic(t)).count() as u64;
    let y = (0..=streams).find(|y| {
        landed.iter().enumerate().all(|(t, n)| {
            let t = t as u32;
            n.checked_sub(*y).is_some_and(|x| x <= per_topic(t))
        })
    })?;
    let mut left_stream = y;
    let mut left_topic: Vec<u64> = landed.iter().map(|n| n - y).collect();
    Some(
        doubtful
            .iter()
            .map(|s| {
                let left = match s {
                    Scope::Stream => &mut left_stream,
                    Scope::Topic(t) => match left_topic.get_mut(*t as usize) {
                        Some(l) => l,
                        None => return false,
                    },
                    Scope::Recreate(_) => return false,
                };
                if *left > 0 {
                    *left -= 1;
                    true
                } else {
                    false
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_purge_in_doubt_lands_in_every_topic_or_in_none() {
        // Given a stream purge in doubt,
        let doubtful = [Scope::Stream];
        // then it landed when every topic moved on by one, not when none did,
        assert_eq!(landed_purges(&doubtful, &[1, 1, 1]), Some(vec![true]));
        assert_eq!(landed_purges(&doubtful, &[0, 0, 0]), Some(vec![false]));
        // and a generation that moved in one topic only is unexplained.
        assert_eq!(landed_purges(&doubtful, &[1, 0, 0]), None);
    }

    #[test]
    fn topic_purges_in_doubt_explain_only_their_own_topic() {
        let doubtful = [Scope::Topic(0), Scope::Topic(2), Scope::Topic(0)];
        // The earliest purge of a topic lands first.
        assert_eq!(
            landed_purges(&doubtful, &[1, 0, 1]),
            Some(vec![true, true, false])
        );
        assert_eq!(
            landed_purges(&doubtful, &[0, 0, 1]),
            Some(vec![false, true, false])
        );
        // A topic with no purge in doubt cannot have moved, nor one move
        // more often than its purges in doubt.
        assert_eq!(landed_purges(&doubtful, &[0, 1, 0]), None);
        assert_eq!(landed_purges(&doubtful, &[3, 0, 0]), None);
    }

    #[test]
    fn a_mix_prefers_the_topic_purges_and_needs_the_stream_one_where_they_cannot_explain_it() {
        let doubtful = [Scope::Stream, Scope::Topic(1)];
        // Topic 1 moved alone: its own purge, not the stream's.
        assert_eq!(
            landed_purges(&doubtful, &[0, 1, 0]),
            Some(vec![false, true])
        );
        // Every topic moved, topic 1 twice: both.
        assert_eq!(landed_purges(&doubtful, &[1, 2, 1]), Some(vec![true, true]));
    }
}
