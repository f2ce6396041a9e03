//! The metadata model: streams → topics → partitions (and consumer groups).
//!
//! Invariants:
//! - Ids are unique within their parent; names are unique within their parent
//!   (streams globally, topics per stream, groups per topic). Both are checked
//!   by the engine before a change is persisted.
//! - Ids are assigned as Iggy 0.11 assigns them: the lowest id no live
//!   resource holds, from 0 (a topic's partitions are always `0..count`).
//!   Each id space also keeps a high-water mark (`Metadata::next_stream_id`,
//!   `StreamMeta::next_topic_id`, `TopicMeta::next_partition_id`,
//!   `TopicMeta::next_group_id`) above every id ever assigned in it, live or
//!   deleted; it only grows and is committed with the resource that raised
//!   it. It does not pick ids: it tells the engine that an id being reused
//!   may name a deleted resource's leftover files or offsets, which the
//!   engine clears durably before committing the new resource. The marks are
//!   `u64` so they can stand one past `u32::MAX`.
//! - `PartitionMeta::committed_generation` only grows. It is the purge commit
//!   point: once a metadata write carrying generation G is durable, every
//!   record of an older generation in that partition is dead.
//! - Maps are `BTreeMap`s: listings and encodings have one order.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Durability {
    /// Acknowledged once in the page cache: survives a process crash.
    #[default]
    Buffered,
    /// Acknowledged after the file sync (and the directory sync for a new or
    /// removed name): survives power loss.
    Persisted,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Buffered => "buffered",
            Durability::Persisted => "persisted",
        }
    }

    pub fn is_persisted(self) -> bool {
        self == Durability::Persisted
    }
}

/// Iggy's `compression_algorithm` of a topic. Kept and reported, never
/// applied: Iggy's server stores it without compressing anything either
/// (ADR 0006), and messages are stored as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Compression {
    #[default]
    None,
    Gzip,
}

impl Compression {
    /// Iggy's name of the algorithm.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
        }
    }

    /// Iggy's wire code (`CompressionAlgorithm::as_code`).
    pub fn code(self) -> u8 {
        match self {
            Compression::None => 1,
            Compression::Gzip => 2,
        }
    }

    /// The algorithm Iggy names `text` (a name in any case, or its code).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" | "1" => Some(Compression::None),
            "gzip" | "2" => Some(Compression::Gzip),
            _ => None,
        }
    }
}

/// Per-topic options: all but `compression` fixed at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicOptions {
    /// For message appends.
    pub durability: Durability,
    /// For consumer and group offset stores and deletes.
    pub consumer_offset_durability: Durability,
    /// A segment is sealed and a new one started once it reaches this size.
    pub segment_size: u64,
    /// Carried in the metadata file outside the topic's record (metadata
    /// version 4 appends the topics that have one; `MetadataStore`), so a
    /// file without any is byte for byte a version 3 file.
    #[serde(skip)]
    pub compression: Compression,
}

pub(crate) const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;

impl Default for TopicOptions {
    fn default() -> Self {
        TopicOptions {
            durability: Durability::Buffered,
            consumer_offset_durability: Durability::Buffered,
            segment_size: DEFAULT_SEGMENT_SIZE,
            compression: Compression::None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMeta {
    pub id: u32,
    pub created_at: u64,
    /// The purge generation whose history this partition serves.
    pub committed_generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMeta {
    pub id: u32,
    pub name: String,
    pub(crate) created_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub options: TopicOptions,
    /// Iggy's message expiry (microseconds, 0 = never) and size cap (bytes, 0 =
    /// unlimited); kept and reported for compatibility.
    pub message_expiry: u64,
    pub max_topic_size: u64,
    pub replication_factor: u8,
    pub partitions: BTreeMap<u32, PartitionMeta>,
    pub groups: BTreeMap<u32, GroupMeta>,
    /// Above every partition id ever assigned in this topic (ids are never reused).
    pub next_partition_id: u64,
    /// Above every consumer group id ever assigned in this topic.
    pub next_group_id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamMeta {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub topics: BTreeMap<u32, TopicMeta>,
    /// Above every topic id ever assigned in this stream (ids are never reused).
    pub next_topic_id: u64,
}

/// Everything the metadata file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Metadata {
    /// Bumped on every durable write; a newer file always has a larger value.
    pub version: u64,
    pub streams: BTreeMap<u32, StreamMeta>,
    /// Above every stream id ever assigned (ids are never reused).
    pub next_stream_id: u64,
    /// Deleted resources whose files may still be on disk: the durable
    /// record of every delete obligation not yet done (engine/deletion.rs).
    /// A deletion's commit adds its entry; the commit after its cleanup's
    /// last directory sync removes it.
    pub pending_deletions: BTreeSet<ResourceKey>,
}

/// The metadata as version 2 files hold it (before `pending_deletions`):
/// read, never written (`MetadataStore::load`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MetadataV2 {
    pub(crate) version: u64,
    pub(crate) streams: BTreeMap<u32, StreamMeta>,
    pub(crate) next_stream_id: u64,
}

impl From<MetadataV2> for Metadata {
    fn from(v2: MetadataV2) -> Metadata {
        Metadata {
            version: v2.version,
            streams: v2.streams,
            next_stream_id: v2.next_stream_id,
            pending_deletions: BTreeSet::new(),
        }
    }
}

/// A partition's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionKey {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.stream, self.topic, self.partition)
    }
}

impl PartitionKey {
    pub(crate) fn topic_key(self) -> TopicKey {
        TopicKey {
            stream: self.stream,
            topic: self.topic,
        }
    }
}

/// A deleted resource whose files a delete obligation removes
/// (engine/deletion.rs). Ordered so a stream sorts before its topics, a
/// topic before its partitions and groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceKey {
    /// `streams/<s>/` and everything below it.
    Stream { stream: u32 },
    /// `streams/<s>/topics/<t>/` and everything below it.
    Topic { stream: u32, topic: u32 },
    /// One partition's directory.
    Partition(PartitionKey),
    /// A consumer group's offset file (`groups/<g>`) in every partition of
    /// its topic.
    Group { stream: u32, topic: u32, group: u32 },
}

impl ResourceKey {
    /// The kind, as operators see it (`/status/obligations`, metrics).
    pub fn kind(self) -> &'static str {
        match self {
            ResourceKey::Stream { .. } => "stream",
            ResourceKey::Topic { .. } => "topic",
            ResourceKey::Partition(_) => "partition",
            ResourceKey::Group { .. } => "group",
        }
    }

    /// Whether deleting `self` removes everything `other` names (a stream
    /// covers its topics, partitions and groups; a topic its partitions and
    /// groups). A resource covers itself.
    pub fn covers(self, other: ResourceKey) -> bool {
        let (s, t) = match other {
            ResourceKey::Stream { stream } => (stream, None),
            ResourceKey::Topic { stream, topic } | ResourceKey::Group { stream, topic, .. } => {
                (stream, Some(topic))
            }
            ResourceKey::Partition(k) => (k.stream, Some(k.topic)),
        };
        match self {
            ResourceKey::Stream { stream } => stream == s,
            ResourceKey::Topic { stream, topic } => stream == s && Some(topic) == t,
            _ => self == other,
        }
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResourceKey::Stream { stream } => write!(f, "stream {stream}"),
            ResourceKey::Topic { stream, topic } => write!(f, "topic {stream}/{topic}"),
            ResourceKey::Partition(k) => write!(f, "partition {k}"),
            ResourceKey::Group {
                stream,
                topic,
                group,
            } => write!(f, "group {group} of topic {stream}/{topic}"),
        }
    }
}

/// A topic's coordinates: what an `Identifier` pair resolves to, once, at the
/// API edge (engine/keys.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TopicKey {
    pub(crate) stream: u32,
    pub(crate) topic: u32,
}

impl TopicKey {
    pub(crate) fn partition(self, partition: u32) -> PartitionKey {
        PartitionKey {
            stream: self.stream,
            topic: self.topic,
            partition,
        }
    }

    /// Every partition key this topic can have, as a map range.
    pub(crate) fn partition_range(self) -> std::ops::RangeInclusive<PartitionKey> {
        self.partition(0)..=self.partition(u32::MAX)
    }
}

impl std::fmt::Display for TopicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.stream, self.topic)
    }
}

impl Metadata {
    pub fn partition_keys(&self) -> Vec<PartitionKey> {
        let mut out = Vec::new();
        for s in self.streams.values() {
            for t in s.topics.values() {
                for p in t.partitions.values() {
                    out.push(PartitionKey {
                        stream: s.id,
                        topic: t.id,
                        partition: p.id,
                    });
                }
            }
        }
        out
    }

    pub fn partition(&self, key: PartitionKey) -> Option<&PartitionMeta> {
        self.streams
            .get(&key.stream)?
            .topics
            .get(&key.topic)?
            .partitions
            .get(&key.partition)
    }

    pub(crate) fn partition_mut(&mut self, key: PartitionKey) -> Option<&mut PartitionMeta> {
        self.streams
            .get_mut(&key.stream)?
            .topics
            .get_mut(&key.topic)?
            .partitions
            .get_mut(&key.partition)
    }

    pub(crate) fn topic(&self, stream: u32, topic: u32) -> Option<&TopicMeta> {
        self.streams.get(&stream)?.topics.get(&topic)
    }

    /// The id bookkeeping every commit must keep: each map entry is filed
    /// under its own id, and each high-water mark lies above every live id
    /// (it records that an id was used, engine/catalog.rs `assign_id`).
    pub(crate) fn check_ids(&self) -> Result<(), String> {
        let above = |next: u64, id: u32| next > u64::from(id);
        for (&sid, s) in &self.streams {
            if s.id != sid || !above(self.next_stream_id, sid) {
                return Err(format!(
                    "stream {sid} (id {}, next {})",
                    s.id, self.next_stream_id
                ));
            }
            for (&tid, t) in &s.topics {
                if t.id != tid || !above(s.next_topic_id, tid) {
                    return Err(format!(
                        "topic {sid}/{tid} (id {}, next {})",
                        t.id, s.next_topic_id
                    ));
                }
                for (&pid, p) in &t.partitions {
                    if p.id != pid || !above(t.next_partition_id, pid) {
                        return Err(format!(
                            "partition {sid}/{tid}/{pid} (id {}, next {})",
                            p.id, t.next_partition_id
                        ));
                    }
                }
                for (&gid, g) in &t.groups {
                    if g.id != gid || !above(t.next_group_id, gid) {
                        return Err(format!(
                            "group {gid} of topic {sid}/{tid} (id {}, next {})",
                            g.id, t.next_group_id
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
