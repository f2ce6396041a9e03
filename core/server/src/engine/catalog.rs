//! The catalog: streams, topics, partitions and consumer groups.
//!
//! Invariants:
//! - Ids are assigned as Iggy 0.11 assigns them (`assign_id`): the lowest id
//!   no live resource holds, a pure function of the live set, so a restart
//!   assigns what the running server would have.
//! - A new partition's directories are durable before the metadata naming it
//!   is committed (`dirs.rs`); a reused id's leftovers are removed durably
//!   before the commit, so nothing of a deleted resource is ever adopted.
//! - A deletion commits the metadata first; only then are the resource's
//!   files removed, by a delete obligation the reconciler drives until the
//!   removal is durable (engine/deletion.rs). They are garbage from the
//!   commit on, never data.
//! - Nothing is created where a pending deletion would remove it: such
//!   deletions are finished first (`settle_deletions_before_creating`), and a
//!   creation that fails after making directories leaves a deletion for them.
//! - After every change, `partitions` matches the metadata one to one and the
//!   reconciler tracks no deleted partition (asserted in debug builds).

use std::collections::BTreeMap;

use super::{Engine, FIRST_ID, MAX_NAME_LEN, MAX_PARTITIONS, TopicKey};
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::metadata::{
    Compression, GroupMeta, Metadata, PartitionKey, PartitionMeta, ResourceKey, StreamMeta,
    TopicMeta, TopicOptions,
};
use crate::partition::Partition;
use crate::partition::reconciler::ObligationKey;

fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > MAX_NAME_LEN {
        return Err(EngineError::Invalid {
            what,
            reason: format!("name must be 1 to {MAX_NAME_LEN} bytes and not blank"),
        });
    }
    if name.parse::<u32>().is_ok() {
        return Err(EngineError::Invalid {
            what,
            reason: format!("name '{name}' is numeric and would be read as an id"),
        });
    }
    Ok(())
}

/// Names are unique within their id space (Iggy refuses a duplicate):
/// `name` must not be held by any `(id, name)` in `taken` other than
/// `renaming` itself.
fn check_name_free<'a>(
    kind: &'static str,
    name: &str,
    mut taken: impl Iterator<Item = (u32, &'a str)>,
    renaming: Option<u32>,
) -> Result<()> {
    if taken.any(|(id, n)| n == name && Some(id) != renaming) {
        return Err(EngineError::NameTaken {
            kind,
            name: name.into(),
        });
    }
    Ok(())
}

/// A new resource's id in the id space `live`: its name must be free there,
/// then `assign_id` picks the id.
fn claim_id<T>(
    kind: &'static str,
    name: &str,
    live: &BTreeMap<u32, T>,
    name_of: impl Fn(&T) -> &str,
    next: &mut u64,
    requested: Option<u32>,
) -> Result<u32> {
    check_name_free(
        kind,
        name,
        live.iter().map(|(id, t)| (*id, name_of(t))),
        None,
    )?;
    assign_id(kind, next, requested, |i| live.contains_key(&i))
}

/// Picks the id for a new resource in one id space, the way Iggy 0.11 does:
/// the lowest id no live resource holds (a pure function of the live set, so a
/// restart assigns what the running server would have). An explicit
/// `requested` id must not be live.
///
/// The space's high-water mark `next` is raised past the id either way. It no
/// longer picks ids; it records which ids were ever used, so a caller can tell
/// that an id being reused may still have a deleted resource's leftovers on
/// disk and must clear them durably before committing (`create_group`,
/// `create_partition_dirs`).
fn assign_id(
    kind: &'static str,
    next: &mut u64,
    requested: Option<u32>,
    is_live: impl Fn(u32) -> bool,
) -> Result<u32> {
    let id = match requested {
        Some(id) if is_live(id) => return Err(EngineError::IdTaken { kind, id }),
        Some(id) => id,
        None => (FIRST_ID..=u32::MAX)
            .find(|&i| !is_live(i))
            .ok_or_else(|| EngineError::Invalid {
                what: "id",
                reason: format!("every {kind} id is in use"),
            })?,
    };
    *next = (*next).max(u64::from(id) + 1);
    Ok(id)
}

impl Engine {
    pub fn create_stream(&mut self, id: Option<u32>, name: &str) -> Result<StreamMeta> {
        check_name("stream name", name)?;
        let mut next_stream_id = self.meta.next_stream_id;
        let id = claim_id(
            "stream",
            name,
            &self.meta.streams,
            |s| &s.name,
            &mut next_stream_id,
            id,
        )?;
        self.settle_deletions_before_creating(ResourceKey::Stream { stream: id })?;
        let now = self.clock.now_micros();
        self.commit(|m| {
            m.next_stream_id = m.next_stream_id.max(next_stream_id);
            let s = StreamMeta {
                id,
                name: name.to_string(),
                created_at: now,
                topics: BTreeMap::new(),
                next_topic_id: u64::from(FIRST_ID),
            };
            m.streams.insert(id, s.clone());
            Ok(s)
        })
    }

    pub fn update_stream(&mut self, id: &Identifier, name: &str) -> Result<()> {
        check_name("stream name", name)?;
        let s = self.resolve_stream(id)?;
        self.commit(|m| {
            check_name_free(
                "stream",
                name,
                m.streams.values().map(|x| (x.id, &*x.name)),
                Some(s),
            )?;
            if let Some(st) = m.streams.get_mut(&s) {
                st.name = name.to_string();
            }
            Ok(())
        })
    }

    pub fn delete_stream(&mut self, id: &Identifier) -> Result<()> {
        let s = self.resolve_stream(id)?;
        self.commit_deletion(ResourceKey::Stream { stream: s }, |m| {
            m.streams.remove(&s);
        })?;
        self.drop_partitions(|k| k.stream == s);
        self.balance.retain(|k, _| k.stream != s);
        self.assert_invariants("delete_stream");
        self.obligation_committed();
        Ok(())
    }

    /// Installs the partitions a creation just committed.
    fn install_partitions(&mut self, created: Vec<Partition>, after: &str) {
        for p in created {
            self.partitions.insert(p.key, p);
        }
        self.assert_invariants(after);
    }

    /// Forgets the partitions a deletion committed away, in memory and in the
    /// reconciler (their obligations died with them: nothing of theirs is
    /// data any more).
    fn drop_partitions(&mut self, deleted: impl Fn(&PartitionKey) -> bool) -> Vec<PartitionKey> {
        let keys: Vec<PartitionKey> = self
            .partitions
            .keys()
            .copied()
            .filter(|k| deleted(k))
            .collect();
        for key in &keys {
            self.partitions.remove(key);
            self.reconciler.forget(ObligationKey::Purge(*key));
            self.forget_retention(*key);
        }
        keys
    }

    /// A creation failed after it may have made directories for `created`,
    /// which no metadata names: they become deletions like any other.
    fn clean_up_failed_creation(
        &mut self,
        created: &[ResourceKey],
        error: EngineError,
    ) -> EngineError {
        // Its failed sync (if that is what failed) may have dropped a pending
        // deletion's removal in the same directory.
        self.deletions.assume_dropped();
        self.record_failed_creation(created);
        self.assert_invariants("failed creation");
        error
    }

    // ---- topics --------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub fn create_topic(
        &mut self,
        stream: &Identifier,
        id: Option<u32>,
        name: &str,
        partitions: u32,
        options: TopicOptions,
        message_expiry: u64,
        max_topic_size: u64,
        replication_factor: u8,
    ) -> Result<TopicMeta> {
        check_name("topic name", name)?;
        if partitions > MAX_PARTITIONS {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: format!("{partitions} exceeds the limit of {MAX_PARTITIONS}"),
            });
        }
        let s = self.resolve_stream(stream)?;
        let st = &self.meta.streams[&s];
        let mut next_topic_id = st.next_topic_id;
        let id = claim_id(
            "topic",
            name,
            &st.topics,
            |t| &t.name,
            &mut next_topic_id,
            id,
        )?;
        let now = self.clock.now_micros();
        let topic = TopicMeta {
            id,
            name: name.to_string(),
            created_at: now,
            options,
            message_expiry,
            max_topic_size,
            replication_factor: replication_factor.max(1),
            partitions: BTreeMap::new(),
            groups: BTreeMap::new(),
            next_partition_id: u64::from(FIRST_ID) + u64::from(partitions),
            next_group_id: u64::from(FIRST_ID),
        };
        let ids: Vec<u32> = (FIRST_ID..FIRST_ID + partitions).collect();
        let key = TopicKey {
            stream: s,
            topic: id,
        };
        let resource = ResourceKey::Topic {
            stream: s,
            topic: id,
        };
        self.settle_deletions_before_creating(resource)?;
        let created = self
            .create_partition_dirs(key, options, &ids)
            .and_then(|created| {
                self.commit(|m| {
                    let mut topic = topic.clone();
                    topic.partitions.extend(new_partitions(&ids, now));
                    let st = stream_of(m, s);
                    st.next_topic_id = st.next_topic_id.max(next_topic_id);
                    st.topics.insert(id, topic.clone());
                    Ok(topic)
                })
                .map(|committed| (created, committed))
            });
        let (created, committed) =
            created.map_err(|e| self.clean_up_failed_creation(&[resource], e))?;
        self.install_partitions(created, "create_topic");
        Ok(committed)
    }

    /// Renames a topic and sets its retention, keeping its compression.
    pub fn update_topic(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
        message_expiry: u64,
        max_topic_size: u64,
    ) -> Result<()> {
        self.update_topic_with(stream, topic, name, message_expiry, max_topic_size, None)
    }

    /// As `update_topic`, and sets the compression algorithm when one is
    /// given, in the same commit.
    pub fn update_topic_with(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
        message_expiry: u64,
        max_topic_size: u64,
        compression: Option<Compression>,
    ) -> Result<()> {
        check_name("topic name", name)?;
        let TopicKey {
            stream: s,
            topic: t,
        } = self.resolve_topic(stream, topic)?;
        self.commit(|m| {
            let st = stream_of(m, s);
            check_name_free(
                "topic",
                name,
                st.topics.values().map(|x| (x.id, &*x.name)),
                Some(t),
            )?;
            if let Some(tp) = st.topics.get_mut(&t) {
                tp.name = name.to_string();
                tp.message_expiry = message_expiry;
                tp.max_topic_size = max_topic_size;
                if let Some(c) = compression {
                    tp.options.compression = c;
                }
            }
            Ok(())
        })?;
        // A new expiry moves every partition's due time; a new cap may be
        // exceeded already.
        for key in self.topic_partition_keys(TopicKey {
            stream: s,
            topic: t,
        }) {
            self.note_retention_change(key);
        }
        Ok(())
    }

    pub fn delete_topic(&mut self, stream: &Identifier, topic: &Identifier) -> Result<()> {
        let key = self.resolve_topic(stream, topic)?;
        let resource = ResourceKey::Topic {
            stream: key.stream,
            topic: key.topic,
        };
        self.commit_deletion(resource, |m| {
            stream_of(m, key.stream).topics.remove(&key.topic);
        })?;
        self.drop_partitions(|k| k.topic_key() == key);
        self.balance.remove(&key);
        self.assert_invariants("delete_topic");
        self.obligation_committed();
        Ok(())
    }

    pub fn create_partitions(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<Vec<u32>> {
        let key = self.resolve_topic(stream, topic)?;
        let tm = self.topic_meta(key).clone();
        let have = u32::try_from(tm.partitions.len()).unwrap_or(u32::MAX);
        if count == 0 || have.checked_add(count).is_none_or(|n| n > MAX_PARTITIONS) {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: format!(
                    "must be 1 or more, and at most {MAX_PARTITIONS} in all (the topic has {have})"
                ),
            });
        }
        // As in Iggy 0.11, new partitions continue after the highest live one
        // (deleting takes the last ones, so a topic's ids are 0..count). Such
        // an id may be a deleted partition's: `create_partition_dirs` removes
        // its leftover directory durably before the commit.
        let first = tm
            .partitions
            .keys()
            .next_back()
            .map_or(u64::from(FIRST_ID), |&p| u64::from(p) + 1);
        let last = first + u64::from(count) - 1;
        let (Ok(first), Ok(last)) = (u32::try_from(first), u32::try_from(last)) else {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: "the partition ids would pass the largest id".into(),
            });
        };
        let ids: Vec<u32> = (first..=last).collect();
        let end = u64::from(last) + 1;
        for &p in &ids {
            self.settle_deletions_before_creating(ResourceKey::Partition(key.partition(p)))?;
        }
        let now = self.clock.now_micros();
        let created = self
            .create_partition_dirs(key, tm.options, &ids)
            .and_then(|created| {
                self.commit(|m| {
                    let tp = topic_of(m, key);
                    tp.next_partition_id = tp.next_partition_id.max(end);
                    tp.partitions.extend(new_partitions(&ids, now));
                    Ok(())
                })
                .map(|()| created)
            });
        let created = created.map_err(|e| {
            let made: Vec<ResourceKey> = ids
                .iter()
                .map(|&p| ResourceKey::Partition(key.partition(p)))
                .collect();
            self.clean_up_failed_creation(&made, e)
        })?;
        self.install_partitions(created, "create_partitions");
        self.rebalance_memberships(key);
        Ok(ids)
    }

    /// Deletes the last `count` partitions of a topic.
    pub fn delete_partitions(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<Vec<u32>> {
        let key = self.resolve_topic(stream, topic)?;
        let ids: Vec<u32> = self
            .topic_meta(key)
            .partitions
            .keys()
            .rev()
            .take(count as usize)
            .copied()
            .collect();
        if count == 0 || ids.len() < count as usize {
            return Err(EngineError::Invalid {
                what: "partitions_count",
                reason: format!("cannot delete {count} of {} partitions", ids.len()),
            });
        }
        let deleted: Vec<PartitionKey> = ids.iter().map(|&p| key.partition(p)).collect();
        // One commit for the metadata and every record: the first drops the
        // partitions, each records one deletion.
        let record = self.keeps_obligations();
        self.commit(|m| {
            let tp = topic_of(m, key);
            for p in &ids {
                tp.partitions.remove(p);
            }
            if record {
                let rs: Vec<ResourceKey> =
                    deleted.iter().map(|k| ResourceKey::Partition(*k)).collect();
                super::deletion::record_deletions(m, &rs);
            }
            Ok(())
        })?;
        self.drop_partitions(|k| deleted.contains(k));
        for k in deleted {
            self.begin_deletion(ResourceKey::Partition(k));
        }
        self.rebalance_memberships(key);
        self.assert_invariants("delete_partitions");
        self.obligation_committed();
        Ok(ids)
    }

    // ---- consumer groups -----------------------------------------------

    pub fn create_group(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        id: Option<u32>,
        name: &str,
    ) -> Result<GroupMeta> {
        check_name("consumer group name", name)?;
        let key = self.resolve_topic(stream, topic)?;
        let tm = self.topic_meta(key);
        let mut next_group_id = tm.next_group_id;
        // Iggy 0.11 never gives a consumer group's id out again within its
        // topic: the server's choice is the topic's next id, above every id
        // ever used (ADR 0013). An explicit id may be any id no live group
        // holds.
        let id = match id {
            Some(id) => Some(id),
            None => Some(
                u32::try_from(next_group_id).map_err(|_| EngineError::Invalid {
                    what: "consumer group id",
                    reason: "every consumer group id of the topic was used".into(),
                })?,
            ),
        };
        let gid = claim_id(
            "consumer group",
            name,
            &tm.groups,
            |g| &g.name,
            &mut next_group_id,
            id,
        )?;
        // An explicit id may be a deleted group's: its offset files may
        // still be on disk, and the deletion's cleanup must not remove the
        // new group's. Finish it first.
        self.settle_deletions_before_creating(ResourceKey::Group {
            stream: key.stream,
            topic: key.topic,
            group: gid,
        })?;
        let now = self.clock.now_micros();
        self.commit(|m| {
            let tp = topic_of(m, key);
            tp.next_group_id = tp.next_group_id.max(next_group_id);
            let g = GroupMeta {
                id: gid,
                name: name.to_string(),
                created_at: now,
            };
            tp.groups.insert(gid, g.clone());
            Ok(g)
        })
    }

    /// Deletes a group and its offsets in every partition of the topic.
    pub fn delete_group(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<()> {
        let key = self.resolve_topic(stream, topic)?;
        let gid = self.resolve_group(key, group)?;
        let resource = ResourceKey::Group {
            stream: key.stream,
            topic: key.topic,
            group: gid,
        };
        self.commit_deletion(resource, |m| {
            topic_of(m, key).groups.remove(&gid);
        })?;
        self.assert_invariants("delete_group");
        self.obligation_committed();
        Ok(())
    }
}

/// The stream a commit is changing; the caller resolved it in this call.
fn stream_of(m: &mut Metadata, stream: u32) -> &mut StreamMeta {
    match m.streams.get_mut(&stream) {
        Some(s) => s,
        None => panic!("invariant: stream {stream} was resolved but is not in the metadata"),
    }
}

/// The topic a commit is changing; the caller resolved it in this call.
fn topic_of(m: &mut Metadata, key: TopicKey) -> &mut TopicMeta {
    match stream_of(m, key.stream).topics.get_mut(&key.topic) {
        Some(t) => t,
        None => panic!("invariant: topic {key} was resolved but is not in the metadata"),
    }
}

/// The metadata of new, never-purged partitions `ids`.
fn new_partitions(ids: &[u32], now: u64) -> impl Iterator<Item = (u32, PartitionMeta)> + '_ {
    ids.iter().map(move |&id| {
        (
            id,
            PartitionMeta {
                id,
                created_at: now,
                committed_generation: 0,
            },
        )
    })
}
