//! Identifiers (ids or names, as Iggy clients send them) resolved into typed
//! keys, once, at the API edge; everything below the edge takes keys.
//!
//! Invariant: nothing here writes. A lookup is a pure function of the
//! in-memory metadata; whatever an operation must make durable before it
//! serves (`Engine::ensure_metadata_durable`) is called by that operation,
//! by name.

use super::Engine;
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::metadata::{GroupMeta, PartitionKey, StreamMeta, TopicMeta};
use crate::partition::Partition;

pub(crate) use crate::metadata::TopicKey;

impl Engine {
    pub(crate) fn resolve_stream(&self, id: &Identifier) -> Result<u32> {
        self.meta
            .streams
            .values()
            .find(|s| id.matches(s.id, &s.name))
            .map(|s| s.id)
            .ok_or_else(|| EngineError::StreamNotFound(id.clone()))
    }

    pub(crate) fn resolve_topic(
        &self,
        stream: &Identifier,
        topic: &Identifier,
    ) -> Result<TopicKey> {
        let s = self.resolve_stream(stream)?;
        self.meta.streams[&s]
            .topics
            .values()
            .find(|t| topic.matches(t.id, &t.name))
            .map(|t| TopicKey {
                stream: s,
                topic: t.id,
            })
            .ok_or_else(|| EngineError::TopicNotFound {
                stream: stream.clone(),
                topic: topic.clone(),
            })
    }

    /// A live partition's key.
    pub(crate) fn resolve_partition(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
    ) -> Result<PartitionKey> {
        let key = self.resolve_topic(stream, topic)?.partition(partition);
        if self.partitions.contains_key(&key) {
            Ok(key)
        } else {
            Err(EngineError::PartitionNotFound {
                stream: key.stream,
                topic: key.topic,
                partition,
            })
        }
    }

    /// A live consumer group's id in `topic`.
    pub(crate) fn resolve_group(&self, topic: TopicKey, group: &Identifier) -> Result<u32> {
        self.topic_meta(topic)
            .groups
            .values()
            .find(|g| group.matches(g.id, &g.name))
            .map(|g| g.id)
            .ok_or_else(|| EngineError::GroupNotFound(group.clone()))
    }

    pub fn stream(&self, id: &Identifier) -> Result<&StreamMeta> {
        let s = self.resolve_stream(id)?;
        Ok(&self.meta.streams[&s])
    }

    pub fn streams(&self) -> impl Iterator<Item = &StreamMeta> {
        self.meta.streams.values()
    }

    pub fn topic(&self, stream: &Identifier, topic: &Identifier) -> Result<&TopicMeta> {
        let key = self.resolve_topic(stream, topic)?;
        Ok(self.topic_meta(key))
    }

    pub fn group(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<&GroupMeta> {
        let key = self.resolve_topic(stream, topic)?;
        let gid = self.resolve_group(key, group)?;
        Ok(&self.topic_meta(key).groups[&gid])
    }

    /// The metadata of a topic a key was resolved for. Keys do not outlive
    /// the call that resolved them, and nothing in between deletes a topic:
    /// a missing one is a bug, and stops the process here.
    pub(super) fn topic_meta(&self, key: TopicKey) -> &TopicMeta {
        match self.meta.topic(key.stream, key.topic) {
            Some(t) => t,
            None => panic!("invariant: topic {key} was resolved but is not in the metadata"),
        }
    }

    pub(super) fn partition_at(&mut self, key: PartitionKey) -> Result<&mut Partition> {
        self.partitions
            .get_mut(&key)
            .ok_or(EngineError::PartitionNotFound {
                stream: key.stream,
                topic: key.topic,
                partition: key.partition,
            })
    }

    /// The keys of a topic's live partitions, in order.
    pub(super) fn topic_partition_keys(&self, topic: TopicKey) -> Vec<PartitionKey> {
        self.partitions
            .range(topic.partition_range())
            .map(|(k, _)| *k)
            .collect()
    }

    /// Messages and bytes stored in a topic's partitions.
    pub fn topic_stats(&self, stream: u32, topic: u32) -> (u64, u64) {
        self.partitions
            .range(TopicKey { stream, topic }.partition_range())
            .fold((0, 0), |(m, b), (_, p)| {
                (m + p.stored_messages(), b + p.stored_bytes())
            })
    }
}
