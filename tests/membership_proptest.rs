//! Consumer-group assignment under any sequence of joins, leaves,
//! disconnects, commits, partition-count changes and passing time
//! (`sluice_server::membership`, issue 28): every partition has at most one
//! member, none is unassigned while a member exists, a full rebalance gives
//! exactly Iggy's round-robin in member-id order, and a join with nothing in
//! flight keeps a balanced group balanced.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use sluice_server::membership::{GroupKey, Memberships, REVOCATION_TIMEOUT_US};

const G: GroupKey = GroupKey {
    stream: 0,
    topic: 0,
    group: 0,
};

#[derive(Debug, Clone)]
enum Step {
    /// Client `c` joins; `in_flight` partitions (mod the count) were served
    /// and not committed.
    Join {
        client: u32,
        in_flight: Vec<u32>,
    },
    Leave {
        client: u32,
    },
    /// The connection of the `i`-th member (in client order) closes.
    Disconnect {
        nth: usize,
    },
    /// Every pending revocation's holder commits.
    CommitAll,
    /// Time passes by this many microseconds.
    Wait {
        micros: u64,
    },
    /// The topic gets this many partitions.
    Resize {
        partitions: u32,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u32..6, proptest::collection::vec(0u32..8, 0..3))
            .prop_map(|(client, in_flight)| Step::Join { client, in_flight }),
        2 => (0u32..6).prop_map(|client| Step::Leave { client }),
        1 => (0usize..6).prop_map(|nth| Step::Disconnect { nth }),
        1 => Just(Step::CommitAll),
        1 => (0u64..(2 * REVOCATION_TIMEOUT_US)).prop_map(|micros| Step::Wait { micros }),
        1 => (0u32..8).prop_map(|partitions| Step::Resize { partitions }),
    ]
}

/// Who holds what: partition → member id, from the members' lists.
fn holders(m: &Memberships) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for (id, partitions) in m.members(G) {
        for p in partitions {
            assert!(
                out.insert(p, id).is_none(),
                "partition {p} held by two members: {:?}",
                m.members(G)
            );
        }
    }
    out
}

/// Iggy's full rebalance, written from its rule: partition `i` to the member
/// at position `i % members` in id order.
fn round_robin(ids: &[u32], partitions: u32) -> BTreeMap<u32, u32> {
    (0..partitions)
        .map(|p| (p, ids[p as usize % ids.len()]))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_sequence_keeps_every_partition_with_exactly_one_member(
        initial in 1u32..8,
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let mut m = Memberships::default();
        let mut partitions = initial;
        let mut clients: BTreeSet<u32> = BTreeSet::new();
        let mut now = 0u64;
        for step in steps {
            let before = m.members(G);
            let mut full_rebalance = false;
            match &step {
                Step::Join { client, in_flight } => {
                    let in_flight: BTreeSet<u32> =
                        in_flight.iter().map(|p| p % partitions.max(1)).collect();
                    // Whether a revocation is pending: some member holds a
                    // partition it may not poll.
                    let pollable: usize = clients
                        .iter()
                        .map(|c| m.assignment(G, *c).map_or(0, |a| a.1.len()))
                        .sum();
                    let pending = pollable < before.iter().map(|(_, p)| p.len()).sum::<usize>();
                    let joined = m.join(G, *client, partitions, &in_flight, now);
                    prop_assert_eq!(joined, !clients.contains(client));
                    if !joined {
                        prop_assert_eq!(m.members(G), before.clone(), "joining twice changed something");
                    }
                    // With nothing in flight and nothing pending, a join
                    // keeps a balanced group balanced.
                    let balanced = |members: &[(u32, Vec<u32>)]| {
                        let sizes: Vec<usize> = members.iter().map(|(_, p)| p.len()).collect();
                        sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0) <= 1
                    };
                    if joined && in_flight.is_empty() && !pending && balanced(&before) {
                        prop_assert!(balanced(&m.members(G)), "{:?} -> {:?}", before, m.members(G));
                    }
                    clients.insert(*client);
                }
                Step::Leave { client } => {
                    let left = m.leave(G, *client, partitions);
                    prop_assert_eq!(left, clients.remove(client));
                    full_rebalance = left;
                }
                Step::Disconnect { nth } => {
                    if let Some(client) = clients.iter().nth(*nth).copied() {
                        let left = m.leave_all(client, |_| partitions);
                        prop_assert_eq!(left, vec![G]);
                        clients.remove(&client);
                        full_rebalance = true;
                    }
                }
                Step::CommitAll => {
                    m.complete_revocations(G, partitions, |_| true, now);
                }
                Step::Wait { micros } => {
                    now += micros;
                    m.complete_revocations(G, partitions, |_| false, now);
                }
                Step::Resize { partitions: n } => {
                    partitions = *n;
                    m.resize(G.stream, G.topic, partitions);
                    full_rebalance = !clients.is_empty();
                }
            }
            // Every partition has at most one member (`holders` asserts),
            // every held partition exists, and none is unassigned while a
            // member exists.
            let held = holders(&m);
            prop_assert!(held.keys().all(|p| *p < partitions), "{:?} of {}", held, partitions);
            if clients.is_empty() {
                prop_assert!(held.is_empty());
            } else {
                prop_assert_eq!(held.len() as u32, partitions, "unassigned: {:?}", m.members(G));
            }
            // The members are exactly the clients that joined and are still here.
            let members: BTreeSet<u32> = clients
                .iter()
                .filter(|c| m.assignment(G, **c).is_some())
                .copied()
                .collect();
            prop_assert_eq!(&members, &clients);
            // A full rebalance is Iggy's round-robin in member-id order.
            if full_rebalance && !clients.is_empty() {
                let ids: Vec<u32> = m.members(G).iter().map(|(id, _)| *id).collect();
                prop_assert_eq!(held, round_robin(&ids, partitions));
            }
            // A member may poll only what it holds.
            for c in &clients {
                if let Some((_, pollable)) = m.assignment(G, *c) {
                    for p in pollable {
                        prop_assert!(m.holds(G, *c, p) && m.may_poll(G, *c, p));
                    }
                }
            }
        }
    }
}
