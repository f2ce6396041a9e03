//! Iggy's JSON shapes (iggy_common 0.11: `Stream`, `StreamDetails`, `Topic`,
//! `TopicDetails`, `Partition`, `ConsumerGroup`, `ConsumerGroupDetails`) built
//! from the engine's metadata.
//!
//! Invariants:
//! - Field names, types and encodings are Iggy's: timestamps are microseconds,
//!   sizes are byte counts, `message_expiry` and `max_topic_size` use Iggy's
//!   sentinels (`0` = server default, `u64::MAX` = never / unlimited;
//!   `crate::iggy::units`).
//! - Topic `options` render as Iggy does (`{"key": {"value": "...",
//!   "explicit": bool}}`), with sluice's real policy names (`buffered`,
//!   `persisted`): the report says what the topic actually does.
//! - Rendering reads the engine and never changes it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::Engine;
use crate::iggy::units::to_iggy_limit;
use crate::metadata::{
    DEFAULT_SEGMENT_SIZE, Durability, GroupMeta, PartitionKey, StreamMeta, TopicMeta,
};

/// An option as Iggy renders it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OptionValue {
    pub(crate) value: String,
    pub(crate) explicit: bool,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Partition {
    pub(crate) id: u32,
    pub(crate) created_at: u64,
    pub(crate) segments_count: u32,
    pub(crate) current_offset: u64,
    pub(crate) size: u64,
    pub(crate) messages_count: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Topic {
    pub(crate) id: u32,
    pub(crate) created_at: u64,
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) message_expiry: u64,
    pub(crate) compression_algorithm: &'static str,
    pub(crate) max_topic_size: u64,
    /// Dropped from Iggy's JSON in 0.11 (which ignores it) but required by
    /// 0.10 clients, among them the Iggy CLI 0.13 (`iggy --transport http`).
    pub(crate) replication_factor: u8,
    pub(crate) messages_count: u64,
    pub(crate) partitions_count: u32,
    pub(crate) options: BTreeMap<String, OptionValue>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct TopicDetails {
    #[serde(flatten)]
    pub(crate) topic: Topic,
    pub(crate) partitions: Vec<Partition>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stream {
    pub(crate) id: u32,
    pub(crate) created_at: u64,
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) messages_count: u64,
    pub(crate) topics_count: u32,
    pub(crate) options: BTreeMap<String, OptionValue>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct StreamDetails {
    #[serde(flatten)]
    pub(crate) stream: Stream,
    pub(crate) topics: Vec<Topic>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConsumerGroup {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) partitions_count: u32,
    pub(crate) members_count: u32,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConsumerGroupDetails {
    #[serde(flatten)]
    pub(crate) group: ConsumerGroup,
    /// Its members (TCP connections: Iggy's HTTP API has no membership), in
    /// id order.
    pub(crate) members: Vec<ConsumerGroupMember>,
}

/// Iggy's `ConsumerGroupMember`: a member's id and every partition it holds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ConsumerGroupMember {
    pub(crate) id: u32,
    pub(crate) partitions_count: u32,
    pub(crate) partitions: Vec<u32>,
}

impl ConsumerGroupDetails {
    /// The group of topic `t` with its members.
    pub(crate) fn of(
        engine: &crate::engine::Engine,
        stream: u32,
        t: &TopicMeta,
        g: &GroupMeta,
    ) -> Self {
        let members: Vec<ConsumerGroupMember> = engine
            .group_members(stream, t.id, g.id)
            .into_iter()
            .map(|(id, partitions)| ConsumerGroupMember {
                id,
                partitions_count: count_u32(partitions.len()),
                partitions,
            })
            .collect();
        ConsumerGroupDetails {
            group: group(t, g, members.len()),
            members,
        }
    }
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(crate) fn topic_options(t: &TopicMeta) -> BTreeMap<String, OptionValue> {
    let durability = |d: Durability| OptionValue {
        value: d.as_str().to_string(),
        explicit: d != Durability::Buffered,
    };
    BTreeMap::from([
        ("durability".to_string(), durability(t.options.durability)),
        (
            "consumer_offset_durability".to_string(),
            durability(t.options.consumer_offset_durability),
        ),
        (
            "segment_size".to_string(),
            OptionValue {
                value: t.options.segment_size.to_string(),
                explicit: t.options.segment_size != DEFAULT_SEGMENT_SIZE,
            },
        ),
    ])
}

pub(crate) fn topic(engine: &Engine, stream: u32, t: &TopicMeta) -> Topic {
    let (messages, bytes) = engine.topic_stats(stream, t.id);
    Topic {
        id: t.id,
        created_at: t.created_at,
        name: t.name.clone(),
        size: bytes,
        message_expiry: to_iggy_limit(t.message_expiry),
        compression_algorithm: t.options.compression.as_str(),
        max_topic_size: to_iggy_limit(t.max_topic_size),
        replication_factor: t.replication_factor,
        messages_count: messages,
        partitions_count: count_u32(t.partitions.len()),
        options: topic_options(t),
    }
}

pub(crate) fn topic_details(engine: &Engine, stream: u32, t: &TopicMeta) -> TopicDetails {
    let partitions = t
        .partitions
        .values()
        .map(|pm| {
            let key = PartitionKey {
                stream,
                topic: t.id,
                partition: pm.id,
            };
            let (segments, current, size, messages) =
                engine.partition(key).map_or((0, 0, 0, 0), |p| {
                    let f = p.figures();
                    (
                        count_u32(f.segments),
                        f.current_offset,
                        f.size_bytes,
                        f.messages,
                    )
                });
            Partition {
                id: pm.id,
                created_at: pm.created_at,
                segments_count: segments,
                current_offset: current,
                size,
                messages_count: messages,
            }
        })
        .collect();
    TopicDetails {
        topic: topic(engine, stream, t),
        partitions,
    }
}

pub(crate) fn stream(engine: &Engine, s: &StreamMeta) -> Stream {
    let (messages, bytes) = s.topics.values().fold((0, 0), |(m, b), t| {
        let (tm, tb) = engine.topic_stats(s.id, t.id);
        (m + tm, b + tb)
    });
    Stream {
        id: s.id,
        created_at: s.created_at,
        name: s.name.clone(),
        size: bytes,
        messages_count: messages,
        topics_count: count_u32(s.topics.len()),
        options: BTreeMap::new(),
    }
}

pub(crate) fn stream_details(engine: &Engine, s: &StreamMeta) -> StreamDetails {
    StreamDetails {
        stream: stream(engine, s),
        topics: s.topics.values().map(|t| topic(engine, s.id, t)).collect(),
    }
}

pub(crate) fn group(t: &TopicMeta, g: &GroupMeta, members: usize) -> ConsumerGroup {
    ConsumerGroup {
        id: g.id,
        name: g.name.clone(),
        partitions_count: count_u32(t.partitions.len()),
        members_count: count_u32(members),
    }
}
