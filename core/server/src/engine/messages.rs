//! Messages and stored offsets: sends, polls, offset stores and deletes.
//!
//! Invariants:
//! - Identifiers are resolved once, here at the edge; the partition does the
//!   work under the key (no second lookup, no lookup that writes).
//! - Nothing is served or changed while the metadata is in doubt
//!   (`ensure_metadata_durable` first): a restart could otherwise read
//!   metadata that does not name what was acknowledged.
//! - A group's offsets are stored and read only for a live group.
//! - A combined send (`send_many`, ADR 0030) answers each request as the
//!   same sends called one by one in its order would: requests are planned
//!   in order (ids, partition choice, the metadata made durable) before any
//!   append, a partition's batches are appended in request order, and only
//!   appends of different partitions run at the same time, each on its own
//!   `&mut Partition` (the borrow checker, not a convention, keeps two
//!   threads off one partition). Every request is answered exactly once
//!   (asserted by `send_many`'s collector and the send queue's), a planned
//!   one when its append ended.

use std::collections::BTreeMap;

use super::{Engine, TopicKey};
use crate::error::{EngineError, Result};
use crate::fanout;
use crate::identifier::Identifier;
use crate::metadata::{Durability, PartitionKey};
use crate::partition::log::{Message, NewMessage};
use crate::partition::offsets::OffsetKind;
use crate::partition::{Consumer, Partition, Polled, PollingStrategy};

/// How a send picks its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    Balanced,
    PartitionId(u32),
    MessagesKey(Vec<u8>),
}

/// The outcome of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The topic the send resolved (Iggy's send confirmation names it).
    pub(crate) topic: TopicKey,
    pub partition_id: u32,
    pub base_offset: u64,
    pub count: u64,
    pub(crate) durability: Durability,
}

/// The payload bytes of a combined `buffered` send from which its
/// partitions are appended on threads (a `persisted` one always is).
const THREADS_PAY_AT: usize = 256 << 10;

/// One send of a combined call ([`Engine::send_many`]).
#[derive(Debug)]
pub struct SendRequest {
    pub stream: Identifier,
    pub topic: Identifier,
    pub partitioning: Partitioning,
    pub messages: Vec<NewMessage>,
}

/// A send whose partition, ids and time are chosen: what is left is the
/// append (`sent` is its answer once the offsets are known).
struct Planned {
    key: PartitionKey,
    messages: Vec<Message>,
    sent: Sent,
}

/// A partition's sends of a combined call: (request index, its plan), in
/// request order.
type Batches = Vec<(usize, Planned)>;

/// What a data-path call may write, for [`Engine::waits_on_no_sync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataWrite {
    /// Nothing: a poll that commits no offset.
    Nothing,
    /// A batch of messages: a send.
    Messages,
    /// A consumer offset: an offset store, or a poll that commits.
    Offsets,
}

impl DataWrite {
    /// What a poll writes: an offset when it commits.
    pub fn polling(auto_commit: bool) -> Self {
        if auto_commit {
            DataWrite::Offsets
        } else {
            DataWrite::Nothing
        }
    }
}

impl Engine {
    /// Whether a data-path call on this topic that writes `writes` waits on
    /// no sync: the metadata is not in doubt (a send would save it first)
    /// and what it writes is `buffered` for the topic, so the call at most
    /// writes into the page cache and reads. An unknown topic
    /// answers true: its error is found in memory. The transports run such
    /// a call on the connection's own worker (`AppState::engine_quick`).
    pub fn waits_on_no_sync(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        writes: DataWrite,
    ) -> bool {
        if self.metadata_in_doubt.is_some() {
            return false;
        }
        let Ok(t) = self.topic(stream, topic) else {
            return true;
        };
        // A poll of a partition with remote segments may wait for the
        // object store.
        if !matches!(writes, DataWrite::Messages) && self.topic_reads_remote(stream, topic) {
            return false;
        }
        match writes {
            DataWrite::Nothing => true,
            DataWrite::Messages => !t.options.durability.is_persisted(),
            DataWrite::Offsets => !t.options.consumer_offset_durability.is_persisted(),
        }
    }

    fn pick_partition(
        &mut self,
        topic: TopicKey,
        partitioning: &Partitioning,
    ) -> Result<PartitionKey> {
        let ids: Vec<u32> = self.topic_meta(topic).partitions.keys().copied().collect();
        if ids.is_empty() {
            return Err(EngineError::Invalid {
                what: "partitioning",
                reason: "the topic has no partitions".into(),
            });
        }
        let id = match partitioning {
            Partitioning::PartitionId(p) => *p,
            Partitioning::Balanced => {
                let next = self.balance.entry(topic).or_insert(0);
                let id = ids[*next as usize % ids.len()];
                *next = next.wrapping_add(1);
                id
            }
            // Iggy 0.11's rule (the SDK applies it over TCP before sending,
            // the server over HTTP): XXH32 (seed 0) of the key's bytes,
            // modulo the partition count, as an index of the topic's
            // partitions (their ids are `0..count`, so the index is the id).
            Partitioning::MessagesKey(key) => {
                ids[twox_hash::XxHash32::oneshot(0, key) as usize % ids.len()]
            }
        };
        Ok(topic.partition(id))
    }

    /// One send: [`Engine::send_many`] of one request.
    pub fn send(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partitioning: &Partitioning,
        messages: Vec<NewMessage>,
    ) -> Result<Sent> {
        self.send_request(SendRequest {
            stream: stream.clone(),
            topic: topic.clone(),
            partitioning: partitioning.clone(),
            messages,
        })
    }

    /// One send, as a request: [`Engine::send_many`] of one.
    pub fn send_request(&mut self, request: SendRequest) -> Result<Sent> {
        match <[_; 1]>::try_from(self.send_many(vec![request])) {
            Ok([sent]) => sent,
            Err(answers) => unreachable!("one send answered {} times", answers.len()),
        }
    }

    /// Several sends as one engine call, answered in their order, each as
    /// if it had been called alone in that order (ADR 0030): first every
    /// request is planned in order (its topic and partition resolved, its
    /// ids drawn, the metadata made durable), then each partition's batches
    /// are appended in request order, different partitions on up to
    /// `append_threads()` threads at once (a `persisted` append's sync
    /// waits on the disk, which serves several at a time), then retention
    /// notes every partition written.
    ///
    /// Planning touches no partition and an append touches nothing but its
    /// own partition's files (threads are not used with a file pool:
    /// `append_threads`), so the answers and the bytes written are those of
    /// the sequential calls. Finding the partitions walks the live ones
    /// between the first and the last key written (a few microseconds per
    /// thousand partitions in between).
    pub fn send_many(&mut self, requests: Vec<SendRequest>) -> Vec<Result<Sent>> {
        let answers: std::sync::Mutex<Vec<Option<Result<Sent>>>> =
            std::sync::Mutex::new(requests.iter().map(|_| None).collect());
        self.send_many_answering(requests, &|i, answer| {
            let mut answers = answers.lock().unwrap_or_else(|p| p.into_inner());
            assert!(
                answers[i].replace(answer).is_none(),
                "send {i} answered twice"
            );
        });
        answers
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .enumerate()
            .map(|(i, answer)| match answer {
                Some(answer) => answer,
                None => panic!("send {i} was never answered"),
            })
            .collect()
    }

    /// As [`Engine::send_many`], each request's answer handed to
    /// `answer(index, answer)` as soon as it is known, from whichever thread
    /// knows it: a refused plan's at once, an append's when its partition's
    /// appends reached it (so a producer whose partition synced first hears
    /// so while the others still sync). Every request is answered exactly
    /// once before this returns.
    pub fn send_many_answering(
        &mut self,
        requests: Vec<SendRequest>,
        answer: &(dyn Fn(usize, Result<Sent>) + Sync),
    ) {
        let mut batches: BTreeMap<PartitionKey, Batches> = BTreeMap::new();
        for (i, request) in requests.into_iter().enumerate() {
            match self.plan_send(request) {
                Ok(plan) => batches.entry(plan.key).or_default().push((i, plan)),
                Err(e) => answer(i, Err(e)),
            }
        }
        let written: Vec<PartitionKey> = batches.keys().copied().collect();
        self.append_batches(batches, answer);
        for key in written {
            // Even a failed append may have rolled (sealed) a segment.
            self.note_retention_change(key);
        }
    }

    /// What a send does before its append, under the engine lock and in
    /// request order: resolve, pick the partition, give the messages their
    /// ids and time, make the metadata durable.
    fn plan_send(&mut self, request: SendRequest) -> Result<Planned> {
        let SendRequest {
            stream,
            topic,
            partitioning,
            messages,
        } = request;
        let topic = self.resolve_topic(&stream, &topic)?;
        let key = self.pick_partition(topic, &partitioning)?;
        let now = self.clock.now_micros();
        let messages: Vec<Message> = messages
            .into_iter()
            .map(|m| {
                let id = if m.id == 0 {
                    (u128::from(self.ids.next_u64()) << 64 | u128::from(self.ids.next_u64())).max(1)
                } else {
                    m.id
                };
                m.stored(now, id)
            })
            .collect();
        self.ensure_metadata_durable()?;
        let durability = self.partition_at(key)?.options().durability;
        Ok(Planned {
            key,
            messages,
            sent: Sent {
                topic,
                partition_id: key.partition,
                base_offset: 0,
                count: 0,
                durability,
            },
        })
    }

    /// Appends each partition's batches in order, partitions in parallel
    /// (`fanout`), answering each send as its append ends.
    fn append_batches(
        &mut self,
        batches: BTreeMap<PartitionKey, Batches>,
        answer: &(dyn Fn(usize, Result<Sent>) + Sync),
    ) {
        let (Some(first), Some(last)) = (
            batches.first_key_value().map(|(k, _)| *k),
            batches.last_key_value().map(|(k, _)| *k),
        ) else {
            return;
        };
        // A thread costs tens of microseconds to start: worth it for a sync,
        // or for copies of enough bytes, not for a few small buffered
        // batches.
        let worth_threads = batches
            .values()
            .flatten()
            .any(|(_, plan)| plan.sent.durability.is_persisted())
            || batches
                .values()
                .flatten()
                .map(|(_, plan)| plan.messages.iter().map(|m| m.payload.len()).sum::<usize>())
                .sum::<usize>()
                >= THREADS_PAY_AT;
        let threads = if worth_threads {
            self.append_threads()
        } else {
            1
        };
        let mut work: Vec<(&mut Partition, Batches)> = Vec::with_capacity(batches.len());
        let mut batches = batches.into_iter().peekable();
        for (key, partition) in self.partitions.range_mut(first..=last) {
            if let Some((_, mine)) = batches.next_if(|(k, _)| k == key) {
                work.push((partition, mine));
            }
        }
        assert!(
            batches.next().is_none(),
            "a planned send's partition is not live"
        );
        fanout::fan_out(work, threads, |(partition, mine)| {
            for (i, plan) in mine {
                let appended = partition.append(plan.messages);
                answer(
                    i,
                    appended.map(|(base_offset, count)| {
                        assert!(count > 0, "send {i} appended nothing");
                        Sent {
                            base_offset,
                            count,
                            ..plan.sent
                        }
                    }),
                );
            }
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
        strategy: PollingStrategy,
        count: u64,
        auto_commit: bool,
    ) -> Result<Polled> {
        let key = self.serving_partition(stream, topic, partition, consumer)?;
        // Field by field: the tier is read while a partition is written.
        let remote = self.tier.as_ref().map(|t| t.reads());
        match self.partitions.get_mut(&key) {
            Some(p) => p.poll(consumer, strategy, count, auto_commit, remote),
            None => Err(EngineError::PartitionNotFound {
                stream: key.stream,
                topic: key.topic,
                partition: key.partition,
            }),
        }
    }

    pub fn store_offset(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
        offset: u64,
    ) -> Result<()> {
        let key = self.serving_partition(stream, topic, partition, consumer)?;
        self.partition_at(key)?.store_offset(consumer, offset)
    }

    /// `(current_offset, stored_offset)`; `None` when the consumer has no stored offset.
    pub fn get_offset(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
    ) -> Result<Option<(u64, u64)>> {
        let key = self.serving_partition(stream, topic, partition, consumer)?;
        let p = self.partition_at(key)?;
        let current = p.log().last_offset().unwrap_or(0);
        Ok(p.stored_offset(consumer)?.map(|o| (current, o)))
    }

    pub fn delete_offset(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
    ) -> Result<bool> {
        let key = self.serving_partition(stream, topic, partition, consumer)?;
        self.partition_at(key)?.delete_offset(consumer)
    }

    /// Resolves a request's partition (and its group, for a group consumer),
    /// once the metadata is known durable.
    fn serving_partition(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        consumer: Consumer,
    ) -> Result<PartitionKey> {
        let topic = self.resolve_topic(stream, topic)?;
        if consumer.kind == OffsetKind::Group {
            self.resolve_group(topic, &Identifier::Numeric(consumer.id))?;
        }
        self.ensure_metadata_durable()?;
        let key = topic.partition(partition);
        // Checked here, not left to `partition_at`: the caller's mistake is
        // reported before anything else is looked at.
        self.partition_at(key)?;
        Ok(key)
    }

    /// Flushes every partition (buffered appends, stores and deletes) to
    /// durable storage; a graceful shutdown calls it after the last request.
    /// Every partition is attempted; the first error is returned.
    pub fn sync_all(&mut self) -> Result<()> {
        let mut first = None;
        for (key, p) in self.partitions.iter_mut() {
            if let Err(e) = p.sync_all() {
                tracing::error!(partition = %key, error = %e, "flush at shutdown failed");
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
