//! Consumer-group membership in the engine (Iggy's 604 join, 605 leave, 606
//! sync, and the ownership fence on group polls and offset writes): the
//! engine resolves names, partition counts and stored offsets, and
//! `crate::membership` keeps the rules.
//!
//! Invariants:
//! - A membership names a group that exists: a deletion of the group, its
//!   topic or its stream ends every membership of it (`begin_deletion`), and
//!   a change of the topic's partition count rebalances every group of it
//!   (`create_partitions`, `delete_partitions`), so no member holds a
//!   partition that does not exist.
//! - A member polls only a partition it may poll, and stores or deletes a
//!   group offset only for a partition it holds; anyone else's group poll
//!   gets Iggy's "not owned" answer and changes nothing.
//! - A partition pending revocation moves as soon as its holder committed
//!   what it was served: checked whenever the group is synced, polled or
//!   committed to, and at every reconciler pass (so on its deadline at the
//!   latest, plus at most one reconciler period, while nobody touches the
//!   group).

use std::collections::BTreeSet;

use super::Engine;
use crate::error::{EngineError, Result};
use crate::identifier::Identifier;
use crate::membership::GroupKey;
use crate::metadata::{ResourceKey, TopicKey};
use crate::partition::{Consumer, Polled, PollingStrategy};

/// What a member's group poll got.
#[derive(Debug)]
pub enum MemberPoll {
    /// Messages (perhaps none) of the partition polled.
    Served(Polled),
    /// The client may not poll that partition of the group (not a member,
    /// the partition is another member's or pending revocation, or the group
    /// does not exist): Iggy answers an empty poll whose partition is
    /// `u32::MAX`, and the SDK syncs its assignment again.
    NotOwned,
    /// A member asked for its next partition and may poll none (more members
    /// than partitions, or its partitions are pending revocation).
    NothingAssigned,
}

impl Engine {
    /// Makes `client` a member of the group; joining again changes nothing.
    pub fn join_group(
        &mut self,
        client: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<()> {
        let key = self.group_key(stream, topic, group)?;
        self.complete_revocations(key);
        let partitions = self.partition_count(key);
        let in_flight = if crate::teeth::enabled(crate::teeth::Mechanism::RevokeInFlightPartitions)
        {
            self.in_flight(key)
        } else {
            BTreeSet::new()
        };
        let now = self.clock.now_micros();
        if self.members.join(key, client, partitions, &in_flight, now) {
            log_change(client, key, "joined");
        }
        Ok(())
    }

    /// Ends `client`'s membership of the group (`GroupMemberNotFound` if it
    /// was not a member, as Iggy answers).
    pub fn leave_group(
        &mut self,
        client: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<()> {
        let key = self.group_key(stream, topic, group)?;
        let partitions = self.partition_count(key);
        if !self.members.leave(key, client, partitions) {
            return Err(EngineError::GroupMemberNotFound {
                group: key.group,
                client,
            });
        }
        log_change(client, key, "left");
        Ok(())
    }

    /// Ends every membership of `client` (its connection closed, or it
    /// logged in again or out).
    pub fn leave_all_groups(&mut self, client: u32) {
        let left = {
            let meta = &self.meta;
            self.members.leave_all(client, |k| {
                meta.topic(k.stream, k.topic)
                    .map_or(0, |t| t.partitions.len() as u32)
            })
        };
        for key in left {
            log_change(
                client,
                key,
                "left: its connection closed, or it logged out or in again",
            );
        }
    }

    /// `client`'s assignment (Iggy's 606): the group's generation and the
    /// partitions it may poll. `None`: the group does not exist or `client`
    /// is not a member of it (Iggy answers both with an empty body).
    pub fn sync_group(
        &mut self,
        client: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<Option<(u64, Vec<u32>)>> {
        let key = match self.group_key(stream, topic, group) {
            Ok(key) => key,
            Err(EngineError::GroupNotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        self.complete_revocations(key);
        Ok(self.members.assignment(key, client))
    }

    /// A group poll by `client`: of `partition` if it may poll it, else of
    /// its next partition when `partition` is `None`.
    #[allow(clippy::too_many_arguments)]
    pub fn poll_as_member(
        &mut self,
        client: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
        partition: Option<u32>,
        strategy: PollingStrategy,
        count: u64,
        auto_commit: bool,
    ) -> Result<MemberPoll> {
        let key = match self.group_key(stream, topic, group) {
            Ok(key) => key,
            Err(EngineError::GroupNotFound(_)) => return Ok(MemberPoll::NotOwned),
            Err(e) => return Err(e),
        };
        self.complete_revocations(key);
        let partition = match partition {
            Some(p) if self.members.may_poll(key, client, p) => p,
            Some(_) => return Ok(MemberPoll::NotOwned),
            None if self.members.assignment(key, client).is_none() => {
                return Ok(MemberPoll::NotOwned);
            }
            None => match self.members.next_partition(key, client) {
                Some(p) => p,
                None => return Ok(MemberPoll::NothingAssigned),
            },
        };
        let consumer = Consumer::group(key.group);
        let polled = self.poll(stream, topic, partition, consumer, strategy, count, false)?;
        if let Some(last) = polled.messages.last().map(|m| m.offset) {
            // A group's auto-commit never moves its offset back (Iggy's
            // rule): a poll from an earlier offset commits nothing.
            if auto_commit
                && self
                    .get_offset(stream, topic, partition, consumer)?
                    .is_none_or(|(_, stored)| stored < last)
            {
                self.store_offset(stream, topic, partition, consumer, last)?;
            }
            // Served only once nothing can fail any more: a poll answered
            // with an error served nothing, and must not hold a handover up.
            self.members.note_polled(key, partition, last);
        }
        Ok(MemberPoll::Served(polled))
    }

    /// The group consumer `client` stores or deletes an offset as, for
    /// `partition`: refused (`PartitionNotOwned`, Iggy's 5009) unless it
    /// holds the partition. Pending revocations its commit completes are
    /// completed by `after_member_commit`.
    pub fn member_consumer(
        &mut self,
        client: u32,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
        partition: u32,
    ) -> Result<Consumer> {
        let key = self.group_key(stream, topic, group)?;
        if !self.members.holds(key, client, partition) {
            return Err(EngineError::PartitionNotOwned {
                group: key.group,
                partition,
            });
        }
        Ok(Consumer::group(key.group))
    }

    /// After a member's commit: a pending revocation it completes moves now.
    pub fn after_member_commit(
        &mut self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) {
        if let Ok(key) = self.group_key(stream, topic, group) {
            self.complete_revocations(key);
        }
    }

    /// The group's members: each member's id and the partitions it holds.
    pub fn group_members(&self, stream: u32, topic: u32, group: u32) -> Vec<(u32, Vec<u32>)> {
        self.members.members(GroupKey {
            stream,
            topic,
            group,
        })
    }

    /// The groups `client` is a member of.
    pub fn client_groups(&self, client: u32) -> Vec<GroupKey> {
        self.members.groups_of(client)
    }

    /// A deletion committed: memberships of the groups it took end.
    pub(super) fn forget_memberships(&mut self, r: ResourceKey) {
        self.members.forget(|k| {
            r.covers(ResourceKey::Group {
                stream: k.stream,
                topic: k.topic,
                group: k.group,
            })
        });
    }

    /// The topic's partition count changed: its groups rebalance.
    pub(super) fn rebalance_memberships(&mut self, topic: TopicKey) {
        let count = self
            .meta
            .topic(topic.stream, topic.topic)
            .map_or(0, |t| t.partitions.len() as u32);
        self.members.resize(topic.stream, topic.topic, count);
    }

    /// A purge replaced these partitions' histories: what the groups were
    /// served from them is no longer in flight.
    pub(super) fn forget_polled(&mut self, topic: TopicKey, partition: u32) {
        self.members
            .forget_polled(topic.stream, topic.topic, Some(partition));
    }

    fn group_key(
        &self,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<GroupKey> {
        let t = self.resolve_topic(stream, topic)?;
        let group = self.resolve_group(t, group)?;
        Ok(GroupKey {
            stream: t.stream,
            topic: t.topic,
            group,
        })
    }

    fn partition_count(&self, key: GroupKey) -> u32 {
        self.meta
            .topic(key.stream, key.topic)
            .map_or(0, |t| t.partitions.len() as u32)
    }

    /// Whether the group committed at least what it was served from
    /// `partition` (nothing served counts as committed). A stored offset
    /// that cannot be read counts as not committed: the revocation then
    /// waits for its deadline, and nothing is delivered twice meanwhile.
    fn committed(&mut self, key: GroupKey, partition: u32) -> bool {
        let Some(last) = self.members.last_polled(key, partition) else {
            return true;
        };
        let pk = TopicKey {
            stream: key.stream,
            topic: key.topic,
        }
        .partition(partition);
        self.partitions
            .get(&pk)
            .and_then(|p| p.stored_offset(Consumer::group(key.group)).ok().flatten())
            .is_some_and(|stored| stored >= last)
    }

    /// The partitions served to the group and not committed.
    fn in_flight(&mut self, key: GroupKey) -> BTreeSet<u32> {
        (0..self.partition_count(key))
            .filter(|p| !self.committed(key, *p))
            .collect()
    }

    /// Every group's pending revocations that are due (committed, or past
    /// their deadline): the reconciler's pass calls this, so a handover
    /// completes on time even while neither member touches the group.
    pub(super) fn complete_due_revocations(&mut self) {
        for key in self.members.groups_revoking() {
            self.complete_revocations(key);
        }
    }

    fn complete_revocations(&mut self, key: GroupKey) {
        // Every group poll comes here: only a revocation makes it look at
        // the partitions' offsets.
        let revoking = self.members.revoking(key);
        if revoking.is_empty() {
            return;
        }
        let partitions = self.partition_count(key);
        let done: BTreeSet<u32> = revoking
            .into_iter()
            .filter(|p| self.committed(key, *p))
            .collect();
        let now = self.clock.now_micros();
        self.members
            .complete_revocations(key, partitions, |p| done.contains(&p), now);
    }
}

/// One log line per membership change, with its group's ids.
fn log_change(client: u32, key: GroupKey, change: &'static str) {
    tracing::info!(
        client,
        stream = key.stream,
        topic = key.topic,
        group = key.group,
        change,
        "consumer group membership changed"
    );
}
