//! Consumer-group membership as Apache Iggy 0.11 keeps it: which client
//! connection is a member of which group, and which of the topic's
//! partitions each member may poll.
//!
//! Membership is volatile, as in Iggy: it lives in memory, ends with the
//! connection (or a logout), and is never written. What a group has consumed
//! is its stored offsets, which are durable and crash-safe like every other
//! offset; a restart starts with no members, and the clients join again.
//!
//! The rules (docs/research/iggy-0.11-groups-names-keys.md §1.3–1.7, written
//! here from Iggy's behaviour, not its code):
//! - A member is one client connection. Its id is the lowest id free in the
//!   group, from 0; members are ordered by id.
//! - A **full rebalance** (a leave, a disconnect, a change of the topic's
//!   partition count, a revocation whose target left) drops every
//!   assignment and deals partition `i` (in id order) to the member at
//!   position `i % members`.
//! - A **cooperative join** keeps what the members hold: partitions nobody
//!   holds go round-robin to the members holding none; then each member
//!   over its fair share (`partitions / members`, one more for the first
//!   `partitions % members` that hold more than that) gives up its excess
//!   from the end of its list, dealt round-robin to the members holding
//!   none. A partition some member was served from and has not committed
//!   (`in_flight`) is not moved at once: it becomes a **pending revocation**
//!   on its holder, who may still commit it but no longer poll it, and moves
//!   once the holder committed what it was served, or after the revocation
//!   timeout. This is what keeps a handover from delivering a message twice
//!   to a group whose members commit after processing.
//! - Every change of any assignment raises the group's generation, which
//!   `sync` reports; the SDK re-reads its partitions when it moves.
//!
//! Invariants (asserted by `check` after every change):
//! - Each partition of a group's topic is held by at most one member, and
//!   every held partition is below the topic's partition count.
//! - While a group has a member, every partition is held by one
//!   (no partition is left unassigned while a member exists).
//! - A pending revocation names a partition its member holds, and a target
//!   member that exists, is not the holder, and holds nothing else pending
//!   for the same partition; a member polls what it holds minus what is
//!   pending revocation.
//! - A client is a member of a group at most once.

use std::collections::{BTreeMap, BTreeSet};

/// A consumer group, by the numeric ids of its stream, topic and itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub stream: u32,
    pub topic: u32,
    pub group: u32,
}

/// A partition moving from its holder to `to` once the holder committed
/// what it was served (or `deadline_us` passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Revocation {
    partition: u32,
    /// The receiving member's id.
    to: u32,
    deadline_us: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    client: u32,
    /// What it holds, in the order it was given (the order `sync` reports).
    partitions: Vec<u32>,
    revoking: Vec<Revocation>,
    /// The next pick of a poll that names no partition (server-side
    /// round-robin over what it may poll).
    cursor: usize,
}

impl Member {
    fn new(client: u32) -> Self {
        Member {
            client,
            partitions: Vec::new(),
            revoking: Vec::new(),
            cursor: 0,
        }
    }

    fn is_revoking(&self, partition: u32) -> bool {
        self.revoking.iter().any(|r| r.partition == partition)
    }

    /// What it may poll: what it holds minus what is pending revocation.
    fn pollable(&self) -> impl Iterator<Item = u32> + '_ {
        self.partitions
            .iter()
            .copied()
            .filter(|p| !self.is_revoking(*p))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Group {
    generation: u64,
    members: BTreeMap<u32, Member>,
}

impl Group {
    fn member_of(&self, client: u32) -> Option<u32> {
        self.members
            .iter()
            .find(|(_, m)| m.client == client)
            .map(|(id, _)| *id)
    }

    fn holder_of(&self, partition: u32) -> Option<u32> {
        self.members
            .iter()
            .find(|(_, m)| m.partitions.contains(&partition))
            .map(|(id, _)| *id)
    }

    /// Drops every assignment and deals the partitions round-robin over the
    /// members in id order.
    fn rebalance(&mut self, partitions: u32) {
        self.generation += 1;
        for m in self.members.values_mut() {
            m.partitions.clear();
            m.revoking.clear();
            m.cursor = 0;
        }
        let ids: Vec<u32> = self.members.keys().copied().collect();
        if ids.is_empty() {
            return;
        }
        for p in 0..partitions {
            let id = ids[p as usize % ids.len()];
            if let Some(m) = self.members.get_mut(&id) {
                m.partitions.push(p);
            }
        }
    }

    /// Iggy's cooperative rebalance, run when a member joins.
    fn rebalance_cooperative(
        &mut self,
        partitions: u32,
        in_flight: &BTreeSet<u32>,
        deadline_us: u64,
    ) {
        self.generation += 1;
        if self.members.is_empty() || partitions == 0 {
            return;
        }
        // Partitions nobody holds go round-robin to the members holding none.
        let unassigned: Vec<u32> = (0..partitions)
            .filter(|p| self.holder_of(*p).is_none())
            .collect();
        let idle: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| m.partitions.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if !idle.is_empty() {
            for (i, p) in unassigned.into_iter().enumerate() {
                if let Some(m) = self.members.get_mut(&idle[i % idle.len()]) {
                    m.partitions.push(p);
                }
            }
        }
        // The members that receive the excess: still holding none, and not
        // already about to receive a partition.
        let targeted: BTreeSet<u32> = self
            .members
            .values()
            .flat_map(|m| m.revoking.iter().map(|r| r.to))
            .collect();
        let recipients: Vec<u32> = self
            .members
            .iter()
            .filter(|(id, m)| m.partitions.is_empty() && !targeted.contains(id))
            .map(|(id, _)| *id)
            .collect();
        if recipients.is_empty() {
            return;
        }
        let count = self.members.len() as u32;
        let (fair, mut extra) = (partitions / count, partitions % count);
        let mut excess: Vec<(u32, u32)> = Vec::new();
        for (id, m) in self.members.iter_mut() {
            let limit = if extra > 0 { fair + 1 } else { fair };
            let mut keeping: Vec<u32> = m.pollable().collect();
            while keeping.len() as u32 > limit {
                if let Some(p) = keeping.pop() {
                    excess.push((*id, p));
                }
            }
            if keeping.len() as u32 > fair {
                extra -= 1;
            }
        }
        for (i, (from, p)) in excess.into_iter().enumerate() {
            let to = recipients[i % recipients.len()];
            if in_flight.contains(&p) {
                if let Some(m) = self.members.get_mut(&from) {
                    m.revoking.push(Revocation {
                        partition: p,
                        to,
                        deadline_us,
                    });
                }
            } else {
                if let Some(m) = self.members.get_mut(&from) {
                    m.partitions.retain(|x| *x != p);
                    m.cursor = 0;
                }
                if let Some(m) = self.members.get_mut(&to) {
                    m.partitions.push(p);
                }
            }
        }
    }

    /// Asserts the module's invariants for a topic of `partitions`.
    fn check(&self, key: GroupKey, partitions: u32) {
        let mut held = BTreeSet::new();
        let mut clients = BTreeSet::new();
        for (id, m) in &self.members {
            assert!(
                clients.insert(m.client),
                "invariant: client {} is a member of {key:?} twice",
                m.client
            );
            for p in &m.partitions {
                assert!(
                    *p < partitions && held.insert(*p),
                    "invariant: partition {p} of {key:?} (of {partitions}) held twice or out of range: member {id} {m:?}"
                );
            }
            let mut revoked = BTreeSet::new();
            for r in &m.revoking {
                assert!(
                    m.partitions.contains(&r.partition)
                        && r.to != *id
                        && self.members.contains_key(&r.to)
                        && revoked.insert(r.partition),
                    "invariant: a pending revocation of {key:?} names a partition its member {id} does not hold, or no other member: {r:?}"
                );
            }
        }
        if !self.members.is_empty() {
            assert_eq!(
                held.len() as u32,
                partitions,
                "invariant: a partition of {key:?} is unassigned while it has members"
            );
        }
    }
}

/// Every group's members. Groups with no member are not kept, except for
/// their generation, which only grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memberships {
    groups: BTreeMap<GroupKey, Group>,
    /// The highest offset served to each group from each partition (Iggy's
    /// "last polled"): what a member must commit before a partition it
    /// holds may move to another without a message delivered twice.
    polled: BTreeMap<(GroupKey, u32), u64>,
}

/// How long a pending revocation waits for its holder to commit (Iggy's
/// `consumer_group.rebalancing_timeout`, 30 s by default).
pub const REVOCATION_TIMEOUT_US: u64 = 30_000_000;

impl Memberships {
    /// Makes `client` a member of `key`, on a topic of `partitions`. A client
    /// already a member changes nothing (`false`), as in Iggy. `in_flight`:
    /// the partitions served to the group and not committed.
    pub fn join(
        &mut self,
        key: GroupKey,
        client: u32,
        partitions: u32,
        in_flight: &BTreeSet<u32>,
        now_us: u64,
    ) -> bool {
        let group = self.groups.entry(key).or_default();
        if group.member_of(client).is_some() {
            return false;
        }
        let id = (0..=u32::MAX)
            .find(|i| !group.members.contains_key(i))
            .unwrap_or(u32::MAX);
        group.members.insert(id, Member::new(client));
        group.rebalance_cooperative(
            partitions,
            in_flight,
            now_us.saturating_add(REVOCATION_TIMEOUT_US),
        );
        group.check(key, partitions);
        true
    }

    /// Ends `client`'s membership of `key` and rebalances what is left;
    /// `false` if it was not a member.
    pub fn leave(&mut self, key: GroupKey, client: u32, partitions: u32) -> bool {
        let Some(group) = self.groups.get_mut(&key) else {
            return false;
        };
        let Some(id) = group.member_of(client) else {
            return false;
        };
        group.members.remove(&id);
        group.rebalance(partitions);
        group.check(key, partitions);
        true
    }

    /// Ends every membership of `client` (its connection closed, or it
    /// logged out); `partitions_of` gives each group's topic partition count.
    /// Returns the groups it left.
    pub fn leave_all(
        &mut self,
        client: u32,
        partitions_of: impl Fn(GroupKey) -> u32,
    ) -> Vec<GroupKey> {
        let keys = self.groups_of(client);
        for key in &keys {
            self.leave(*key, client, partitions_of(*key));
        }
        keys
    }

    /// The groups `client` is a member of.
    pub fn groups_of(&self, client: u32) -> Vec<GroupKey> {
        self.groups
            .iter()
            .filter(|(_, g)| g.member_of(client).is_some())
            .map(|(k, _)| *k)
            .collect()
    }

    /// `client`'s assignment in `key`: the generation and the partitions it
    /// may poll, in the order it holds them. `None`: not a member.
    pub fn assignment(&self, key: GroupKey, client: u32) -> Option<(u64, Vec<u32>)> {
        let group = self.groups.get(&key)?;
        let id = group.member_of(client)?;
        Some((group.generation, group.members[&id].pollable().collect()))
    }

    /// Whether `client` may poll `partition` of `key` now.
    pub fn may_poll(&self, key: GroupKey, client: u32, partition: u32) -> bool {
        self.member(key, client)
            .is_some_and(|m| m.pollable().any(|p| p == partition))
    }

    /// Whether `client` holds `partition` of `key` (pending revocation
    /// included: a member may still commit what it was served).
    pub fn holds(&self, key: GroupKey, client: u32, partition: u32) -> bool {
        self.member(key, client)
            .is_some_and(|m| m.partitions.contains(&partition))
    }

    /// The next partition `client` polls when its poll names none: its
    /// pollable partitions in turn. `None`: not a member, or nothing to poll.
    pub fn next_partition(&mut self, key: GroupKey, client: u32) -> Option<u32> {
        let group = self.groups.get_mut(&key)?;
        let id = group.member_of(client)?;
        let m = group.members.get_mut(&id)?;
        let pollable: Vec<u32> = m.pollable().collect();
        if pollable.is_empty() {
            return None;
        }
        let p = pollable[m.cursor % pollable.len()];
        m.cursor = (m.cursor + 1) % pollable.len();
        Some(p)
    }

    /// Notes that the group was served up to `offset` from `partition`.
    pub fn note_polled(&mut self, key: GroupKey, partition: u32, offset: u64) {
        let last = self.polled.entry((key, partition)).or_insert(offset);
        *last = (*last).max(offset);
    }

    /// The groups with a revocation pending.
    pub fn groups_revoking(&self) -> Vec<GroupKey> {
        self.groups
            .iter()
            .filter(|(_, g)| g.members.values().any(|m| !m.revoking.is_empty()))
            .map(|(k, _)| *k)
            .collect()
    }

    /// The partitions of `key` pending revocation.
    pub fn revoking(&self, key: GroupKey) -> Vec<u32> {
        self.groups.get(&key).map_or_else(Vec::new, |g| {
            g.members
                .values()
                .flat_map(|m| m.revoking.iter().map(|r| r.partition))
                .collect()
        })
    }

    /// The highest offset served to the group from `partition`, if any.
    pub fn last_polled(&self, key: GroupKey, partition: u32) -> Option<u64> {
        self.polled.get(&(key, partition)).copied()
    }

    /// Completes the pending revocations of `key` whose holder committed
    /// what it was served (`committed(partition)`) or whose deadline passed.
    /// Returns whether any completed.
    pub fn complete_revocations(
        &mut self,
        key: GroupKey,
        partitions: u32,
        committed: impl Fn(u32) -> bool,
        now_us: u64,
    ) -> bool {
        let Some(group) = self.groups.get_mut(&key) else {
            return false;
        };
        let due: Vec<(u32, Revocation)> = group
            .members
            .iter()
            .flat_map(|(id, m)| m.revoking.iter().map(move |r| (*id, *r)))
            .filter(|(_, r)| now_us >= r.deadline_us || committed(r.partition))
            .collect();
        if due.is_empty() {
            return false;
        }
        for (from, r) in due {
            if !group.members.contains_key(&r.to) {
                // Its target left since (a full rebalance would have cleared
                // the revocation; kept as the rule's own fallback).
                group.rebalance(partitions);
                break;
            }
            if let Some(m) = group.members.get_mut(&from) {
                m.revoking.retain(|x| x.partition != r.partition);
                m.partitions.retain(|x| *x != r.partition);
                m.cursor = 0;
            }
            if let Some(m) = group.members.get_mut(&r.to) {
                m.partitions.push(r.partition);
            }
            group.generation += 1;
        }
        group.check(key, partitions);
        true
    }

    /// The topic's partition count changed: every group of it rebalances.
    pub fn resize(&mut self, stream: u32, topic: u32, partitions: u32) {
        for (key, group) in self
            .groups
            .iter_mut()
            .filter(|(k, _)| k.stream == stream && k.topic == topic)
        {
            group.rebalance(partitions);
            group.check(*key, partitions);
        }
        self.polled
            .retain(|(k, p), _| !(k.stream == stream && k.topic == topic && *p >= partitions));
    }

    /// A purge replaced the topic's history: what was served from it means
    /// nothing in the new one.
    pub fn forget_polled(&mut self, stream: u32, topic: u32, partition: Option<u32>) {
        self.polled.retain(|(k, p), _| {
            !(k.stream == stream && k.topic == topic && partition.is_none_or(|x| x == *p))
        });
    }

    /// Drops every group `gone` says no longer exists (a deleted group,
    /// topic or stream), with its members and what it was served.
    pub fn forget(&mut self, gone: impl Fn(GroupKey) -> bool) {
        self.groups.retain(|k, _| !gone(*k));
        self.polled.retain(|(k, _), _| !gone(*k));
    }

    /// `key`'s members: each member's id and every partition it holds
    /// (pending revocations included), in id order.
    pub fn members(&self, key: GroupKey) -> Vec<(u32, Vec<u32>)> {
        self.groups.get(&key).map_or_else(Vec::new, |g| {
            g.members
                .iter()
                .map(|(id, m)| (*id, m.partitions.clone()))
                .collect()
        })
    }

    /// Asserts every group's invariants (`partitions_of`: its topic's count).
    pub fn check(&self, partitions_of: impl Fn(GroupKey) -> u32) {
        for (key, group) in &self.groups {
            group.check(*key, partitions_of(*key));
        }
    }

    fn member(&self, key: GroupKey, client: u32) -> Option<&Member> {
        let group = self.groups.get(&key)?;
        group.members.get(&group.member_of(client)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: GroupKey = GroupKey {
        stream: 0,
        topic: 0,
        group: 0,
    };

    fn held(m: &Memberships) -> Vec<Vec<u32>> {
        m.members(G).into_iter().map(|(_, p)| p).collect()
    }

    /// The worked example of docs/research/iggy-0.11-groups-names-keys.md
    /// §1.3: four partitions, members A..E joining in turn, then B leaving.
    #[test]
    fn cooperative_joins_then_a_leave_follow_iggys_worked_example() {
        let mut m = Memberships::default();
        let none = BTreeSet::new();
        m.join(G, 10, 4, &none, 0);
        assert_eq!(held(&m), [vec![0, 1, 2, 3]]);
        m.join(G, 11, 4, &none, 0);
        assert_eq!(held(&m), [vec![0, 1], vec![3, 2]]);
        m.join(G, 12, 4, &none, 0);
        assert_eq!(held(&m), [vec![0, 1], vec![3], vec![2]]);
        m.join(G, 13, 4, &none, 0);
        assert_eq!(held(&m), [vec![0], vec![3], vec![2], vec![1]]);
        m.join(G, 14, 4, &none, 0);
        assert_eq!(held(&m), [vec![0], vec![3], vec![2], vec![1], vec![]]);
        assert!(m.leave(G, 11, 4));
        assert_eq!(held(&m), [vec![0], vec![1], vec![2], vec![3]]);
        let ids: Vec<u32> = m.members(G).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, [0, 2, 3, 4]);
    }

    #[test]
    fn joining_twice_changes_nothing_and_leaving_twice_reports_it() {
        let mut m = Memberships::default();
        let none = BTreeSet::new();
        assert!(m.join(G, 1, 2, &none, 0));
        let before = m.assignment(G, 1);
        assert!(!m.join(G, 1, 2, &none, 0));
        assert_eq!(m.assignment(G, 1), before);
        assert!(m.leave(G, 1, 2));
        assert!(!m.leave(G, 1, 2));
        assert_eq!(m.assignment(G, 1), None);
    }

    #[test]
    fn an_in_flight_partition_moves_only_once_its_holder_committed() {
        // Given: A holds both partitions and was served from partition 1.
        let mut m = Memberships::default();
        m.join(G, 1, 2, &BTreeSet::new(), 0);
        // When B joins with partition 1 in flight,
        m.join(G, 2, 2, &BTreeSet::from([1]), 0);
        // then A may no longer poll 1, but still holds it for its commit,
        assert_eq!(m.assignment(G, 1).map(|a| a.1), Some(vec![0]));
        assert!(m.holds(G, 1, 1) && !m.may_poll(G, 1, 1));
        assert_eq!(m.assignment(G, 2).map(|a| a.1), Some(vec![]));
        // and it moves once A committed it (not before).
        assert!(!m.complete_revocations(G, 2, |_| false, 1));
        let generation = m.assignment(G, 2).map(|a| a.0);
        assert!(m.complete_revocations(G, 2, |p| p == 1, 2));
        assert_eq!(m.assignment(G, 2).map(|a| a.1), Some(vec![1]));
        assert!(m.assignment(G, 2).map(|a| a.0) > generation);
        assert!(!m.holds(G, 1, 1));
    }

    #[test]
    fn a_revocation_times_out() {
        let mut m = Memberships::default();
        m.join(G, 1, 2, &BTreeSet::new(), 0);
        m.join(G, 2, 2, &BTreeSet::from([1]), 5);
        assert!(!m.complete_revocations(G, 2, |_| false, 5 + REVOCATION_TIMEOUT_US - 1));
        assert!(m.complete_revocations(G, 2, |_| false, 5 + REVOCATION_TIMEOUT_US));
        assert_eq!(m.assignment(G, 2).map(|a| a.1), Some(vec![1]));
    }

    #[test]
    fn a_poll_naming_no_partition_takes_the_members_partitions_in_turn() {
        let mut m = Memberships::default();
        m.join(G, 1, 3, &BTreeSet::new(), 0);
        let picks: Vec<Option<u32>> = (0..4).map(|_| m.next_partition(G, 1)).collect();
        assert_eq!(picks, [Some(0), Some(1), Some(2), Some(0)]);
        assert_eq!(m.next_partition(G, 2), None);
    }

    #[test]
    fn leaving_every_group_and_forgetting_deleted_ones() {
        let mut m = Memberships::default();
        let other = GroupKey { group: 1, ..G };
        m.join(G, 1, 2, &BTreeSet::new(), 0);
        m.join(other, 1, 2, &BTreeSet::new(), 0);
        m.join(other, 2, 2, &BTreeSet::new(), 0);
        assert_eq!(m.groups_of(1), [G, other]);
        assert_eq!(m.leave_all(1, |_| 2), [G, other]);
        assert!(m.groups_of(1).is_empty());
        assert_eq!(m.assignment(other, 2).map(|a| a.1), Some(vec![0, 1]));
        m.forget(|k| k == other);
        assert_eq!(m.assignment(other, 2), None);
    }
}
