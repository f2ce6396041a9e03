//! The simulator's oracle: what the world observed of the engine, judged by
//! the one model of what was acknowledged (`crate::ack`, shared with the
//! purge proptest and the soak).
//!
//! Invariants of the model:
//! - Only calls that returned `Ok` are acknowledged. A call that failed may or
//!   may not have taken effect: it is recorded as *maybe*, and either outcome
//!   is accepted, never a third one (`ack::OffsetHistory`, `ack::Generation`).
//! - What must survive depends on the topic's policy and the crash
//!   (`ack::may_roll_back`): under `persisted` everything acknowledged
//!   survives any crash; under `buffered` it survives a process crash, and a
//!   power loss may roll it back to any earlier state of the same generation,
//!   never to another generation and never to a value nobody wrote.
//! - A successful flush (a graceful stop's `sync_all`) makes durable what the
//!   engine holds: every acknowledged message, except one a power loss or a
//!   failed writeback that no observation has settled yet may have taken
//!   already (`PartitionModel::at_risk`). No later crash may take a flushed
//!   message, whatever the policy.
//! - Payloads and offset values are unique per generation (the workloads make
//!   them so), so a value identifies the generation it belongs to.
//! - The catalog is modelled at the grain the data lives at: each partition
//!   and each group is live or deleted (`Presence`). An acknowledged
//!   deletion retires what was acknowledged in it for good (never served
//!   again, not even by a re-created resource under the same id, which
//!   starts empty); a failed create or delete is in doubt until the engine
//!   shows the catalog, and a failed deletion must not land once a write to
//!   the resource was acknowledged after it (the purge's rule, `Generation`).
//! - Retention (issue 17) is judged by the low-water mark: a mark a live step
//!   raised is committed (the engine raises it only once durable), so no
//!   offset below it is ever served again in that generation, nor does the
//!   mark the engine shows go back below it (j); what lies below the mark
//!   the engine shows may be gone, everything acknowledged at or above it
//!   must be served (b), the history `Next` serves is dense from the mark
//!   (a), and, while no send failed since the newest acknowledged message,
//!   the mark never lies past it (the active segment, which holds it, is
//!   never removed; a failed send's roll may seal it).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sluice_server::metadata::{Durability, Metadata, PartitionKey, ResourceKey};

use crate::ack::{self, Generation, Lapse, OffsetHistory, Served};
use crate::world::GroupKey;

/// Whether a partition or a group exists, as acknowledged, and a create or
/// delete of it in doubt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Presence {
    /// Created (and not deleted since), by the last acknowledged call.
    live: bool,
    /// A create or delete returned an error: its commit may have landed.
    in_doubt: bool,
    /// A write was acknowledged to it while a deletion of it was in doubt:
    /// that deletion must not land any more.
    acked_since_doubt: bool,
}

/// What the engine's catalog showed of a resource, judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// What was acknowledged (a change in doubt did not land).
    Acknowledged,
    /// A change in doubt landed; `lost_acked`: a deletion that failed landed
    /// after a write to the resource was acknowledged (a violation).
    Landed { lost_acked: bool },
    /// Live by every acknowledgement, and gone: nothing deleted it.
    Lost,
    /// Deleted by an acknowledged call, and back.
    Resurrected,
}

impl Presence {
    const LIVE: Presence = Presence {
        live: true,
        in_doubt: false,
        acked_since_doubt: false,
    };

    fn changed(&mut self, live: bool, ok: bool) {
        if ok {
            *self = Presence {
                live,
                in_doubt: false,
                acked_since_doubt: false,
            };
        } else if self.live != live {
            self.in_doubt = true;
            self.acked_since_doubt = false;
        }
    }

    fn write_acknowledged(&mut self) {
        self.acked_since_doubt |= self.in_doubt;
    }

    /// Judges that the engine's catalog shows the resource (`exists`) or not,
    /// and learns from it: every answer ends the doubt.
    fn observe(&mut self, exists: bool) -> Seen {
        let seen = if exists == self.live {
            Seen::Acknowledged
        } else if self.in_doubt {
            Seen::Landed {
                lost_acked: !exists && self.acked_since_doubt,
            }
        } else if self.live {
            Seen::Lost
        } else {
            Seen::Resurrected
        };
        *self = Presence {
            live: exists,
            in_doubt: false,
            acked_since_doubt: false,
        };
        seen
    }
}

/// How long a failed writeback of the file pool keeps buffered offsets
/// lossy (`PartitionModel::writeback_offsets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WritebackWindow {
    Closed,
    /// No crash since the failure: memory may still hide the loss.
    UntilCrash,
    /// Crashed since: the next observation shows what recovery read.
    UntilSettle,
}

/// One partition's acknowledged state.
#[derive(Debug, Clone)]
pub(crate) struct PartitionModel {
    /// The acknowledged purge generation and a purge in doubt.
    pub(crate) generation: Generation,
    /// Payloads acknowledged in the current generation, with their offsets.
    messages: Vec<(u64, String)>,
    /// Payloads of sends that failed in the current generation.
    maybe_messages: BTreeSet<String>,
    /// Offsets at which the served history legitimately jumps: holes a
    /// buffered power loss left, observed and accepted as the new baseline.
    accepted_holes: BTreeSet<u64>,
    /// Payloads of every older generation: must never be served.
    purged: BTreeSet<String>,
    offsets: BTreeMap<(bool, u32), OffsetHistory>,
    /// Offset values of older generations (never visible again).
    purged_offsets: BTreeSet<u64>,
    messages_policy: Durability,
    offsets_policy: Durability,
    /// A power loss happened since the first acknowledgement of this
    /// generation: buffered writes may have rolled back.
    lossy_messages: bool,
    /// Payloads acknowledged before the last successful flush (a graceful
    /// stop's `sync_all`): durable whatever the policy, so no power loss
    /// or failed writeback may take them, not even from a `buffered` topic.
    flushed: BTreeSet<String>,
    /// Payloads acknowledged before a power loss or a failed writeback that
    /// no observation has settled yet: the engine may have lost them
    /// already (a `buffered` topic's right), so a later flush, which makes
    /// durable what the engine holds, does not promise them. An observation
    /// the world could not make (the engine refused service after recovery)
    /// settles nothing, and a flush may come first (`sim run` seeds 1595,
    /// 1676, 1990, 3178, 3433, 3611 of session 12).
    at_risk: BTreeSet<String>,
    lossy_offsets: bool,
    /// A sync the engine's file pool made failed (ADR 0018), and may have
    /// lost buffered messages written before it. The engine finds them gone
    /// at the partition's next poll or append (or at recovery): in the
    /// observation under way when the world noticed the failure, partitions
    /// read before it still showed them. So the messages stay lossy for two
    /// settles, the second after an observation begun after the failure.
    writeback_settles: u8,
    /// The same failure for buffered offsets: the offset store serves what
    /// it holds in memory, and only a recovery reads the file again, so
    /// they stay lossy until a settle after the next crash.
    writeback_offsets: WritebackWindow,
    /// A crash (of any kind) happened in this generation: recovery may then
    /// continue the log past a stored offset so none is reused (ADR 0010),
    /// so the history may jump.
    power_lost: bool,
    /// Whether the partition exists (a deleted one's model holds only what
    /// must never come back).
    presence: Presence,
    /// Offset values of deleted incarnations of this partition (or of a
    /// deleted group in it), by (is_group, id): never visible again.
    deleted_offsets: BTreeSet<((bool, u32), u64)>,
    /// The highest low-water mark of this generation a live step raised
    /// (committed): nothing below it is served again.
    committed_low_water: u64,
    /// The highest offset acknowledged in this generation.
    highest_acked: Option<u64>,
    /// A send failed after the last acknowledged one: its roll may have
    /// sealed the segment holding the newest message (or reserved offsets
    /// past it), so the mark may lie anywhere past it.
    send_failed_since_ack: bool,
}

/// A violation of one of the oracle's properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which property: a..f as in docs/simulation.md.
    pub property: char,
    pub partition: String,
    pub detail: String,
}

/// What the engine serves for one partition, as observed after recovery.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    pub(crate) generation: u64,
    /// The low-water mark the engine holds (0: nothing expired).
    pub(crate) low_water: u64,
    /// Offsets and payloads returned by `Next` from a consumer with no offset.
    pub(crate) history: Vec<(u64, String)>,
    /// Stored offsets, by (is_group, id).
    pub(crate) offsets: BTreeMap<(bool, u32), Option<u64>>,
    /// The offsets `Next` (no auto-commit) returns for each of those with a
    /// stored offset, by (is_group, id).
    pub(crate) next: BTreeMap<(bool, u32), Vec<u64>>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Oracle {
    pub(crate) partitions: BTreeMap<PartitionKey, PartitionModel>,
    groups: BTreeMap<GroupKey, Presence>,
    /// Payloads of every deleted partition, of any generation: never served
    /// again, by any partition.
    deleted: BTreeSet<String>,
}

impl PartitionModel {
    pub(crate) fn new(messages_policy: Durability, offsets_policy: Durability) -> Self {
        PartitionModel {
            generation: Generation::default(),
            messages: Vec::new(),
            maybe_messages: BTreeSet::new(),
            accepted_holes: BTreeSet::new(),
            purged: BTreeSet::new(),
            offsets: BTreeMap::new(),
            purged_offsets: BTreeSet::new(),
            messages_policy,
            offsets_policy,
            lossy_messages: false,
            flushed: BTreeSet::new(),
            at_risk: BTreeSet::new(),
            lossy_offsets: false,
            writeback_settles: 0,
            writeback_offsets: WritebackWindow::Closed,
            power_lost: false,
            presence: Presence::LIVE,
            deleted_offsets: BTreeSet::new(),
            committed_low_water: 0,
            highest_acked: None,
            send_failed_since_ack: false,
        }
    }

    /// The partition is gone: what it held goes to `deleted` for good, and
    /// the model starts over empty (as a re-created partition does), keeping
    /// the offset values it must never show again. (Offsets of its purged
    /// generations are not kept: a re-created partition showing one shows a
    /// value its own history does not hold, which (b) reports.)
    fn retire(&mut self, deleted: &mut BTreeSet<String>) {
        let mut gone = std::mem::take(&mut self.deleted_offsets);
        for (id, h) in &self.offsets {
            gone.extend(h.values().map(|v| (*id, v)));
        }
        deleted.extend(self.messages.iter().map(|(_, m)| m.clone()));
        deleted.extend(self.maybe_messages.iter().cloned());
        deleted.extend(self.purged.iter().cloned());
        *self = PartitionModel {
            deleted_offsets: gone,
            presence: Presence {
                live: false,
                ..Presence::LIVE
            },
            ..PartitionModel::new(self.messages_policy, self.offsets_policy)
        };
    }

    /// A group of this partition's topic is gone: its offsets with it.
    fn retire_group(&mut self, group: u32) {
        if let Some(h) = self.offsets.remove(&(true, group)) {
            self.deleted_offsets
                .extend(h.values().map(|v| ((true, group), v)));
        }
    }

    /// A new generation (its purge acknowledged or seen landed): everything of
    /// the old one is purged and must never be served again.
    /// Judges the generation the engine serves: (c) an acknowledged purge
    /// is never undone, one that failed may land (then a new generation
    /// starts), and (b) it may not land over a write acknowledged after it.
    /// `true`: nothing else can be judged against this model.
    fn judge_generation(&mut self, who: &str, seen: u64) -> (Vec<Violation>, bool) {
        let v = |property, detail: String| Violation {
            property,
            partition: who.to_string(),
            detail,
        };
        let acknowledged = self.generation.acknowledged();
        match self.generation.observe(seen) {
            Served::Acknowledged => (Vec::new(), false),
            Served::InDoubtLanded { lost_acked } => {
                self.start_generation();
                let lost = lost_acked.then(|| {
                    v('b', format!(
                        "a purge that failed landed at recovery (generation {seen}), losing writes acknowledged after it"
                    ))
                });
                (lost.into_iter().collect(), false)
            }
            Served::WentBack => (
                vec![v(
                    'c',
                    format!("generation {seen} went back below the acknowledged {acknowledged}"),
                )],
                true,
            ),
            Served::NeverRequested => (
                vec![v(
                    'c',
                    format!("generation {seen} was never requested (acknowledged {acknowledged})"),
                )],
                true,
            ),
        }
    }

    fn start_generation(&mut self) {
        self.purged.extend(self.messages.drain(..).map(|(_, m)| m));
        self.purged.extend(std::mem::take(&mut self.maybe_messages));
        self.accepted_holes.clear();
        for h in std::mem::take(&mut self.offsets).into_values() {
            self.purged_offsets.extend(h.values());
        }
        self.lossy_messages = false;
        self.flushed.clear();
        self.at_risk.clear();
        self.lossy_offsets = false;
        self.writeback_settles = 0;
        self.writeback_offsets = WritebackWindow::Closed;
        self.power_lost = false;
        // A purge starts the new history at mark 0.
        self.committed_low_water = 0;
        self.highest_acked = None;
        self.send_failed_since_ack = false;
    }
}

impl Oracle {
    pub(crate) fn add_partition(
        &mut self,
        key: PartitionKey,
        messages: Durability,
        offsets: Durability,
    ) {
        self.partitions
            .insert(key, PartitionModel::new(messages, offsets));
    }

    /// A send: `base` is the offset of the first message when acknowledged.
    pub(crate) fn sent(&mut self, key: PartitionKey, payloads: &[String], base: Option<u64>) {
        if let Some(p) = self.partitions.get_mut(&key).filter(|p| p.presence.live) {
            if let Some(base) = base {
                // After a power loss the engine may continue past a stored
                // offset beyond the recovered end (ADR 0010): a gap before an
                // acknowledged send is then the rule, not a skip.
                let end = p.messages.last().map_or(0, |(o, _)| o + 1);
                if p.power_lost && base > end {
                    p.accepted_holes.insert(base);
                }
                p.messages.extend(
                    payloads
                        .iter()
                        .enumerate()
                        .map(|(i, m)| (base + i as u64, m.clone())),
                );
                let last = base + payloads.len().saturating_sub(1) as u64;
                p.highest_acked = p.highest_acked.max(Some(last));
                p.send_failed_since_ack = false;
                p.generation.write_acknowledged();
                p.presence.write_acknowledged();
            } else {
                p.maybe_messages.extend(payloads.iter().cloned());
                p.send_failed_since_ack = true;
            }
        }
    }

    pub(crate) fn offset(
        &mut self,
        key: PartitionKey,
        group: bool,
        id: u32,
        value: Option<u64>,
        ok: bool,
    ) {
        let group_key = (key.stream, key.topic, id);
        if group && !self.group_live(group_key) {
            // A deleted group's offsets are never stored (the world reports
            // a store that was acknowledged): nothing to model.
            return;
        }
        if let Some(p) = self.partitions.get_mut(&key).filter(|p| p.presence.live) {
            let h = p.offsets.entry((group, id)).or_default();
            if ok {
                h.acknowledged(value);
                p.generation.write_acknowledged();
                p.presence.write_acknowledged();
                if group && let Some(g) = self.groups.get_mut(&group_key) {
                    g.write_acknowledged();
                }
            } else {
                h.failed(value);
            }
        }
    }

    pub(crate) fn purged(&mut self, keys: &[PartitionKey], ok: bool) {
        for key in keys {
            if let Some(p) = self.partitions.get_mut(key).filter(|p| p.presence.live) {
                if ok {
                    p.generation.purge_acknowledged();
                    p.start_generation();
                } else {
                    p.generation.purge_failed();
                }
            }
        }
    }

    /// A partition was created (`ok`) or its creation failed (in doubt). A
    /// re-created partition starts empty; what its deleted incarnations held
    /// stays retired.
    pub(crate) fn partition_created(
        &mut self,
        key: PartitionKey,
        messages: Durability,
        offsets: Durability,
        ok: bool,
    ) {
        let p = self.partitions.entry(key).or_insert_with(|| {
            let mut p = PartitionModel::new(messages, offsets);
            p.presence.live = false;
            p
        });
        if ok && !p.presence.live {
            let deleted_offsets = std::mem::take(&mut p.deleted_offsets);
            *p = PartitionModel {
                deleted_offsets,
                ..PartitionModel::new(messages, offsets)
            };
        }
        p.presence.changed(true, ok);
    }

    /// A group was created (`ok`) or its creation failed (in doubt).
    pub(crate) fn group_created(&mut self, group: GroupKey, ok: bool) {
        let g = self.groups.entry(group).or_insert(Presence {
            live: false,
            ..Presence::LIVE
        });
        g.changed(true, ok);
    }

    /// `r` was deleted (`ok`: everything under it is retired) or its deletion
    /// failed (in doubt: it may land, until a write is acknowledged to it).
    pub(crate) fn removed(&mut self, r: ResourceKey, ok: bool) {
        let groups: Vec<GroupKey> = self
            .groups
            .iter()
            .filter(|&(&(stream, topic, group), g)| {
                g.live
                    && r.covers(ResourceKey::Group {
                        stream,
                        topic,
                        group,
                    })
            })
            .map(|(k, _)| *k)
            .collect();
        for g in groups {
            self.group_changed(g, false, ok);
        }
        let Oracle {
            partitions,
            deleted,
            ..
        } = self;
        for (k, p) in partitions.iter_mut() {
            if !p.presence.live || !r.covers(ResourceKey::Partition(*k)) {
                continue;
            }
            if ok {
                p.retire(deleted);
            } else {
                p.presence.changed(false, false);
            }
        }
    }

    fn group_changed(&mut self, g: GroupKey, live: bool, ok: bool) {
        let presence = self.groups.entry(g).or_insert(Presence::LIVE);
        presence.changed(live, ok);
        if !presence.live {
            self.retire_group(g);
        }
    }

    /// A group is gone: its offsets in every partition of its topic with it.
    fn retire_group(&mut self, (stream, topic, group): GroupKey) {
        for (k, p) in self.partitions.iter_mut() {
            if k.stream == stream && k.topic == topic {
                p.retire_group(group);
            }
        }
    }

    /// Judges the engine's catalog (its metadata, once it serves) against
    /// what was acknowledged: an acknowledged resource is there, a deleted
    /// one is not, a create or delete in doubt landed or not (and learns
    /// which). A deleted resource's data is retired when its deletion is
    /// seen to have landed.
    pub(crate) fn observe_catalog(&mut self, meta: &Metadata) -> Vec<Violation> {
        let mut out = Vec::new();
        let Oracle {
            partitions,
            groups,
            deleted,
        } = self;
        for (k, p) in partitions.iter_mut() {
            let exists = meta.partition(*k).is_some();
            let was_live = p.presence.live;
            let what = format!("partition {k}");
            out.extend(judge(p.presence.observe(exists), &k.to_string(), &what));
            if was_live && !exists {
                p.retire(deleted);
            } else if !was_live && exists {
                let deleted_offsets = std::mem::take(&mut p.deleted_offsets);
                *p = PartitionModel {
                    deleted_offsets,
                    ..PartitionModel::new(p.messages_policy, p.offsets_policy)
                };
            }
        }
        let mut gone = Vec::new();
        for (&(stream, topic, group), g) in groups.iter_mut() {
            let exists = meta
                .streams
                .get(&stream)
                .and_then(|s| s.topics.get(&topic))
                .is_some_and(|t| t.groups.contains_key(&group));
            let was_live = g.live;
            let what = format!("group {group} of topic {stream}/{topic}");
            out.extend(judge(
                g.observe(exists),
                &format!("{stream}/{topic}"),
                &what,
            ));
            if was_live && !exists {
                gone.push((stream, topic, group));
            }
        }
        for g in gone {
            self.retire_group(g);
        }
        out
    }

    /// Partitions the model holds live (or in doubt whether a deletion
    /// landed): what the engine must serve.
    pub(crate) fn live_keys(&self) -> Vec<PartitionKey> {
        self.partitions
            .iter()
            .filter(|(_, p)| p.presence.live)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Partitions deleted by an acknowledged call (not in doubt): what must
    /// resolve to nothing.
    pub(crate) fn gone_keys(&self) -> Vec<PartitionKey> {
        self.partitions
            .iter()
            .filter(|(_, p)| !p.presence.live && !p.presence.in_doubt)
            .map(|(k, _)| *k)
            .collect()
    }

    pub(crate) fn partition_live(&self, key: PartitionKey) -> bool {
        self.partitions.get(&key).is_some_and(|p| p.presence.live)
    }

    pub(crate) fn partition_gone(&self, key: PartitionKey) -> bool {
        self.partitions
            .get(&key)
            .is_some_and(|p| !p.presence.live && !p.presence.in_doubt)
    }

    pub(crate) fn group_live(&self, group: GroupKey) -> bool {
        self.groups.get(&group).is_some_and(|g| g.live)
    }

    pub(crate) fn group_gone(&self, group: GroupKey) -> bool {
        self.groups
            .get(&group)
            .is_some_and(|g| !g.live && !g.in_doubt)
    }

    /// A live step raised `key`'s low-water mark to `mark`: committed.
    pub(crate) fn low_water_committed(&mut self, key: PartitionKey, mark: u64) {
        if let Some(p) = self.partitions.get_mut(&key).filter(|p| p.presence.live) {
            p.committed_low_water = p.committed_low_water.max(mark);
        }
    }

    /// A sync the engine's file pool made before closing a file failed
    /// (ADR 0018), which file's is not known here: as a background
    /// writeback error would, it may have lost any unsynced write, so
    /// buffered state may roll back as after a power loss (`persisted` state
    /// is synced before it is acknowledged, and stays judged as before),
    /// until the engine has had to show it (`writeback_settles`,
    /// `writeback_offsets`).
    pub(crate) fn writeback_failed(&mut self) {
        for p in self.partitions.values_mut() {
            p.at_risk.extend(p.messages.iter().map(|(_, m)| m.clone()));
            p.writeback_settles = 2;
            p.writeback_offsets = WritebackWindow::UntilCrash;
            p.power_lost = true;
        }
    }

    /// The engine flushed (`sync_all` succeeded): every message acknowledged
    /// so far that the engine still holds is durable, whatever its topic's
    /// policy. One a loss not yet observed may have taken (`at_risk`) is not
    /// promised: a flush cannot bring back what a power loss took before it.
    pub(crate) fn flushed(&mut self) {
        for p in self.partitions.values_mut() {
            let promised: Vec<String> = p
                .messages
                .iter()
                .filter(|(_, m)| !p.at_risk.contains(m))
                .map(|(_, m)| m.clone())
                .collect();
            p.flushed.extend(promised);
        }
    }

    /// A recovery chose `generation` for `key`: judged at once, before any
    /// write to it, since the recovery decides a purge in doubt and a write
    /// acknowledged after it belongs to the generation it chose. (The
    /// observation after the step may not run: the engine refuses service
    /// while storage keeps failing, and the next step's send is then
    /// acknowledged before anyone looked: `sim run` seed 824 at `harsh(3)`.)
    pub(crate) fn recovered(&mut self, key: PartitionKey, generation: u64) -> Vec<Violation> {
        match self.partitions.get_mut(&key).filter(|p| p.presence.live) {
            Some(p) => p.judge_generation(&key.to_string(), generation).0,
            None => Vec::new(),
        }
    }

    /// A crash happened.
    pub(crate) fn crashed(&mut self, power_loss: bool) {
        for p in self.partitions.values_mut() {
            p.power_lost = true;
            if p.writeback_offsets == WritebackWindow::UntilCrash {
                p.writeback_offsets = WritebackWindow::UntilSettle;
            }
        }
        if power_loss {
            for p in self.partitions.values_mut() {
                p.at_risk.extend(p.messages.iter().map(|(_, m)| m.clone()));
                p.lossy_messages = true;
                p.lossy_offsets = true;
                p.power_lost = true;
            }
        }
    }

    /// After recovery: learns the generation of in-doubt purges from what the
    /// engine shows, and checks every property of one partition.
    pub(crate) fn check(&mut self, key: PartitionKey, seen: &Observed) -> Vec<Violation> {
        let mut out = Vec::new();
        let deleted = &self.deleted;
        let Some(p) = self.partitions.get_mut(&key) else {
            return out;
        };
        let who = key.to_string();
        let v = |property, detail: String| Violation {
            property,
            partition: who.clone(),
            detail,
        };
        // (c) an acknowledged purge is never undone; an unacknowledged one may land.
        let (mut judged, stop) = p.judge_generation(&who, seen.generation);
        out.append(&mut judged);
        if stop {
            return out;
        }
        // (e) purged messages are never served; (h) nor a deleted resource's.
        for (offset, payload) in &seen.history {
            if p.purged.contains(payload) {
                out.push(v(
                    'e',
                    format!("purged message {payload:?} served at offset {offset}"),
                ));
            }
            if deleted.contains(payload) {
                out.push(v(
                    'h',
                    format!("message {payload:?} of a deleted resource served at offset {offset}"),
                ));
            }
        }
        // (j) an expired range is never served again, and the mark never goes
        // back below a committed one nor passes the newest message.
        let floor = p.committed_low_water;
        if seen.low_water < floor {
            out.push(v(
                'j',
                format!(
                    "low-water mark {} is below the committed {floor}",
                    seen.low_water
                ),
            ));
        }
        if let Some((offset, payload)) = seen.history.iter().find(|(o, _)| *o < floor) {
            out.push(v(
                'j',
                format!(
                    "expired message {payload:?} served at offset {offset}, below the committed low-water mark {floor}"
                ),
            ));
        }
        let newest = p.highest_acked.max(seen.history.last().map(|(o, _)| *o));
        // The active segment is never removed, and while no send failed
        // since the newest acknowledged one, that one is in it.
        if seen.low_water > 0
            && !p.send_failed_since_ack
            && newest.is_none_or(|n| seen.low_water > n)
        {
            out.push(v(
                'j',
                format!(
                    "low-water mark {} lies past the newest message ({newest:?}): the active segment was expired",
                    seen.low_water
                ),
            ));
        }
        // (b) every served message was sent in this generation, at the offset
        // it was acknowledged at; (a) Next serves a dense history from the
        // low-water mark (0 if nothing expired).
        let lossy = ack::may_roll_back(
            p.messages_policy,
            p.lossy_messages || p.writeback_settles > 0,
        );
        let acked: BTreeMap<&String, u64> = p.messages.iter().map(|(o, m)| (m, *o)).collect();
        for (offset, payload) in &seen.history {
            match acked.get(payload) {
                Some(o) if o != offset => {
                    out.push(v(
                        'b',
                        format!(
                            "message {payload:?} acknowledged at offset {o} is served at {offset}"
                        ),
                    ));
                }
                Some(_) => {}
                None if p.maybe_messages.contains(payload)
                    || p.purged.contains(payload)
                    || deleted.contains(payload) => {}
                None => out.push(v(
                    'b',
                    format!(
                        "message {payload:?} at offset {offset} was never sent in this generation"
                    ),
                )),
            }
        }
        // ADR 0010: after a loss the log may continue past the highest stored
        // offset, so a jump to at most one past it (a failed send's message
        // may be the first after it) is the rule, not a skip.
        let continue_at = ack::continue_ceiling(p.offsets.values().flat_map(OffsetHistory::values));
        if !lossy {
            let served: BTreeSet<&String> = seen.history.iter().map(|(_, m)| m).collect();
            let mut in_doubt_unserved = p
                .maybe_messages
                .iter()
                .filter(|m| !served.contains(m) && !acked.contains_key(m))
                .count() as u64;
            let mut expected = seen.low_water;
            for (i, (offset, _)) in seen.history.iter().enumerate() {
                let continued =
                    p.power_lost && *offset > expected && continue_at.is_some_and(|c| *offset <= c);
                // A failed sync cut the batches of sends answered with an
                // error, and `recheck_unsure` never gives their offsets out
                // again (ADR 0004): a hole is theirs if no acknowledged
                // message held its offsets ((b) checks that) and there were
                // enough such messages, not served, to fill it. Offsets
                // skipped beyond that were given out to nobody: a skip.
                let hole = offset.saturating_sub(expected);
                let cut_in_doubt = hole > 0 && hole <= in_doubt_unserved;
                if cut_in_doubt {
                    in_doubt_unserved -= hole;
                }
                if *offset != expected
                    && !p.accepted_holes.contains(offset)
                    && !continued
                    && !cut_in_doubt
                {
                    out.push(v(
                        'a',
                        format!(
                            "Next skipped: position {i} holds offset {offset}, expected {expected}"
                        ),
                    ));
                    break;
                }
                expected = offset + 1;
            }
            // Below the mark the engine shows, messages expired.
            let missing: Vec<&(u64, String)> = p
                .messages
                .iter()
                .filter(|(o, m)| *o >= seen.low_water && !served.contains(m))
                .collect();
            if !missing.is_empty() {
                out.push(v('b', format!("acknowledged messages lost: {missing:?}")));
            }
        } else {
            // A buffered topic's power loss may take what was acknowledged,
            // never what a flush made durable.
            let served: BTreeSet<&String> = seen.history.iter().map(|(_, m)| m).collect();
            let missing: Vec<&(u64, String)> = p
                .messages
                .iter()
                .filter(|(o, m)| {
                    *o >= seen.low_water && p.flushed.contains(m) && !served.contains(m)
                })
                .collect();
            if !missing.is_empty() {
                out.push(v('b', format!("flushed messages lost: {missing:?}")));
            }
        }
        // (g) Next never skips an acknowledged message: for a consumer with a
        // stored offset o it returns exactly the served messages after o.
        for ((group, id), got) in &seen.next {
            let Some(Some(o)) = seen.offsets.get(&(*group, *id)) else {
                continue;
            };
            let want: Vec<u64> = ack::next_after(&seen.history, Some(*o))
                .map(|(x, _)| *x)
                .collect();
            if *got != want {
                let kind = if *group { "group" } else { "consumer" };
                out.push(v(
                    'g',
                    format!(
                        "Next for {kind} {id} (stored offset {o}) returns offsets {got:?}, but the history after it is {want:?}"
                    ),
                ));
            }
        }
        // (a)/(b)/(h) offsets.
        for ((group, id), value) in &seen.offsets {
            let kind = if *group { "group" } else { "consumer" };
            let own = p.offsets.get(&(*group, *id));
            if let Some(x) = value
                && p.deleted_offsets.contains(&((*group, *id), *x))
                && !own.is_some_and(|h| h.ever_held(*value))
            {
                out.push(v(
                    'h',
                    format!("{kind} {id} shows offset {x} of a deleted resource"),
                ));
                continue;
            }
            if let Some(x) = value
                && p.purged_offsets.contains(x)
                && !p
                    .offsets
                    .get(&(*group, *id))
                    .is_some_and(|h| h.ever_held(*value))
            {
                out.push(v(
                    'a',
                    format!("{kind} {id} shows offset {x} of a purged generation"),
                ));
                continue;
            }
            let h = p.offsets.get(&(*group, *id)).cloned().unwrap_or_default();
            let lapse = Lapse::of(
                p.offsets_policy,
                p.lossy_offsets || p.writeback_offsets != WritebackWindow::Closed,
            );
            if !h.may_show(*value, lapse) {
                out.push(v(
                    'b',
                    format!(
                        "{kind} {id} shows {value:?}, acknowledged history {:?}, maybe {:?}",
                        h.acked(),
                        h.ever_in_doubt()
                    ),
                ));
            }
        }
        out
    }

    /// Forgets that buffered writes could have been lost, once their state is
    /// re-established by observation (the next crash starts a new window).
    pub(crate) fn settle(&mut self, key: PartitionKey, seen: &Observed) {
        if let Some(p) = self.partitions.get_mut(&key) {
            // Acknowledged messages a buffered power loss took are gone for
            // good; the rest stay acknowledged. Messages of failed sends stay
            // "maybe" even when served: they were never acknowledged, so a
            // later crash may take them.
            let served: BTreeSet<&String> = seen.history.iter().map(|(_, m)| m).collect();
            // Below the mark the engine shows, a message is expired, not lost:
            // it stays known, since that mark may come from the page cache of
            // a commit whose sync failed, which a power loss takes back
            // (ADR 0016 crash table row 2), and then it is served again.
            p.messages
                .retain(|(o, m)| served.contains(m) || *o < seen.low_water);
            let mut expected = seen.low_water;
            for (offset, _) in &seen.history {
                if *offset != expected {
                    p.accepted_holes.insert(*offset);
                }
                expected = offset + 1;
            }
            // ADR 0010: offsets a stored offset names are never reused, so
            // when a loss took the messages up to the highest stored offset,
            // the next message sent gets the offset after it.
            let highest = seen.offsets.values().flatten().max().copied();
            if let Some(next) = highest.and_then(|h| h.checked_add(1))
                && next > expected
            {
                p.accepted_holes.insert(next);
            }
            for ((group, id), value) in &seen.offsets {
                // The observed value is the latest state; earlier ones and the
                // outcomes of failed calls stay possible after a crash.
                p.offsets.entry((*group, *id)).or_default().settle(*value);
            }
            p.lossy_messages = false;
            p.lossy_offsets = false;
            p.writeback_settles = p.writeback_settles.saturating_sub(1);
            // What the loss took is known now (and forgotten just above),
            // unless a failed writeback may still show in the next one.
            if p.writeback_settles == 0 {
                p.at_risk.clear();
            }
            if p.writeback_offsets == WritebackWindow::UntilSettle {
                p.writeback_offsets = WritebackWindow::Closed;
            }
        }
    }
}

/// A catalog observation's violations: (b) for an acknowledged resource
/// lost, or a failed deletion that landed after writes to it were
/// acknowledged; (h) for a deleted resource back in the catalog.
fn judge(seen: Seen, partition: &str, what: &str) -> Vec<Violation> {
    let v = |property, detail: String| Violation {
        property,
        partition: partition.to_string(),
        detail,
    };
    match seen {
        Seen::Acknowledged | Seen::Landed { lost_acked: false } => Vec::new(),
        Seen::Landed { lost_acked: true } => vec![v(
            'b',
            format!("a deletion of {what} that failed landed, losing writes acknowledged after it"),
        )],
        Seen::Lost => vec![v(
            'b',
            format!("{what} is gone, but every call that could delete it failed or none was made"),
        )],
        Seen::Resurrected => vec![v(
            'h',
            format!("{what} was deleted (acknowledged) and is back in the catalog"),
        )],
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const KEY: PartitionKey = PartitionKey {
        stream: 0,
        topic: 0,
        partition: 0,
    };

    fn buffered() -> Oracle {
        let mut oracle = Oracle::default();
        oracle.add_partition(KEY, Durability::Buffered, Durability::Buffered);
        oracle
    }

    /// The engine serving `history` and consumer 1's stored offset.
    fn seen(history: &[(u64, &str)], consumer: Option<u64>) -> Observed {
        Observed {
            history: history.iter().map(|(o, m)| (*o, m.to_string())).collect(),
            offsets: BTreeMap::from([((false, 1), consumer)]),
            ..Observed::default()
        }
    }

    fn persisted() -> Oracle {
        let mut oracle = Oracle::default();
        oracle.add_partition(KEY, Durability::Persisted, Durability::Persisted);
        oracle
    }

    #[test]
    fn given_failed_sends_cut_from_a_persisted_log_when_the_next_send_lands_past_their_offsets_then_the_hole_is_theirs()
     {
        // Given two sends answered with an error, whose batches a failed
        // sync cut (`sim run` seed 32: offsets 0..8 never given out again).
        let mut oracle = persisted();
        oracle.sent(KEY, &["f0".into(), "f1".into()], None);
        oracle.sent(KEY, &["f2".into()], None);
        // When the next acknowledged send lands at offset 3, then Next
        // serving it first is no skip: nothing acknowledged is missing.
        oracle.sent(KEY, &["a".into()], Some(3));
        assert_eq!(oracle.check(KEY, &seen(&[(3, "a")], None)), vec![]);
    }

    #[test]
    fn given_fewer_failed_sends_than_the_hole_when_next_serves_past_it_then_that_is_a_skip() {
        // Given one failed send, one offset may be a hole of its own.
        let mut oracle = persisted();
        oracle.sent(KEY, &["f0".into()], None);
        oracle.sent(KEY, &["a".into()], Some(2));
        // When Next serves offset 2 first, then two offsets were skipped
        // that no send could have taken: a violation.
        let found = oracle.check(KEY, &seen(&[(2, "a")], None));
        assert!(
            found.iter().any(|v| v.property == 'a'),
            "expected (a), got {found:?}"
        );
        // And a served failed send fills no hole.
        let mut oracle = persisted();
        oracle.sent(KEY, &["f0".into()], None);
        oracle.sent(KEY, &["a".into()], Some(2));
        let found = oracle.check(KEY, &seen(&[(0, "f0"), (2, "a")], None));
        assert!(
            found.iter().any(|v| v.property == 'a'),
            "expected (a), got {found:?}"
        );
    }

    #[test]
    fn given_a_power_loss_no_observation_settled_when_a_flush_succeeds_then_it_promises_only_what_was_sent_after_the_loss()
     {
        // Given a buffered message and a power loss whose recovery the world
        // could not observe (the engine refused service: `sim run` seed 1990,
        // step 604), and a message acknowledged after it,
        let mut oracle = buffered();
        oracle.sent(KEY, &["a".into()], Some(0));
        oracle.crashed(true);
        oracle.sent(KEY, &["b".into()], Some(0));
        // when a flush succeeds and the next observation shows only "b",
        oracle.flushed();
        let shown = seen(&[(0, "b")], None);
        // then "a" was the power loss's to take, not the flush's to keep.
        assert_eq!(oracle.check(KEY, &shown), vec![]);
        oracle.settle(KEY, &shown);
        // And "b" was promised: losing it to the next power loss is (b).
        oracle.crashed(true);
        let lost = oracle.check(KEY, &seen(&[], None));
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!(lost[0].property, 'b');
        assert!(lost[0].detail.contains("flushed messages lost"), "{lost:?}");
    }

    #[test]
    fn given_a_pool_writeback_failure_noticed_after_a_partition_was_observed_when_the_next_observation_misses_its_buffered_message_then_that_is_no_violation()
     {
        // Given a buffered message the observation under way has read when
        // a later poll's eviction sync fails (`sim run --max-open-files 2`
        // seed 2, step 403): the engine cuts the lost batch at its next poll.
        let mut oracle = buffered();
        oracle.sent(KEY, &["a".into()], Some(0));
        let before = seen(&[(0, "a")], None);
        oracle.writeback_failed();
        assert_eq!(oracle.check(KEY, &before), vec![]);
        oracle.settle(KEY, &before);
        // When the next observation finds it gone, then it is accepted.
        let after = seen(&[], None);
        assert_eq!(oracle.check(KEY, &after), vec![]);
        oracle.settle(KEY, &after);
        // And the window closes: a loss after that is a violation.
        oracle.sent(KEY, &["b".into()], Some(1));
        assert_ne!(oracle.check(KEY, &seen(&[], None)), vec![]);
    }

    #[test]
    fn given_a_pool_writeback_failure_when_a_buffered_offset_rolls_back_at_the_next_process_crash_then_that_is_no_violation_and_the_window_closes_after_it()
     {
        // Given a buffered offset the store keeps serving from memory after
        // the eviction sync that would have written it failed (`sim run
        // --max-open-files 2` seed 2, step 1552).
        let mut oracle = buffered();
        oracle.sent(KEY, &["a".into(), "b".into()], Some(0));
        oracle.offset(KEY, false, 1, Some(0), true);
        oracle.offset(KEY, false, 1, Some(1), true);
        oracle.writeback_failed();
        let history = [(0, "a"), (1, "b")];
        for _ in 0..3 {
            let shown = seen(&history, Some(1));
            assert_eq!(oracle.check(KEY, &shown), vec![]);
            oracle.settle(KEY, &shown);
        }
        // When a process crash's recovery reads the file's older record,
        // then that is accepted.
        oracle.crashed(false);
        let recovered = seen(&history, Some(0));
        assert_eq!(oracle.check(KEY, &recovered), vec![]);
        oracle.settle(KEY, &recovered);
        // And the window is closed: a roll-back at the next process crash
        // is a violation again.
        oracle.offset(KEY, false, 1, Some(1), true);
        oracle.crashed(false);
        assert_ne!(oracle.check(KEY, &recovered), vec![]);
    }
}
