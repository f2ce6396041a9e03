//! What the world checks after each step: the oracle's properties on what
//! the engine serves (`check`), and "done means removed" on the disk for
//! every kind of cleanup obligation (`check_applied_means_removed`): a
//! purge, a deletion or a retention counted as done leaves nothing it had to
//! remove, durable or cached. Split from `world/mod.rs`, which drives the
//! engine; these only read it (and the storage's views).

use std::collections::{BTreeMap, BTreeSet};

use sluice_server::Engine;
use sluice_server::metadata::{Metadata, PartitionKey, ResourceKey};
use sluice_storage::sim::NodeView;

use super::*;
use crate::oracle::{Observed, Violation};

impl World {
    /// (d): done means removed. For a purge: if the obligation file says a
    /// purge is Applied, no file it had to remove is durable. The file is
    /// read both as the disk holds it and as the page cache does: `Applied`
    /// is written without a sync (ADR 0003 §9), and the cached record is what
    /// the next process reads after a process crash, so a cached `Applied`
    /// over a durable dead file is the lie this property is about (nothing
    /// would ever remove the file). The dead files are judged on the durable
    /// view alone: what the page cache shows under the same name does not
    /// matter, since a power loss now would bring back exactly the durable
    /// bytes (a dead record under a name the cache shows as current is ADR
    /// 0008's finding B, not a fresh write). For a deletion: see
    /// [`World::check_done_means_removed`].
    pub(crate) fn check_applied_means_removed(&self) -> Vec<Violation> {
        let (view, cached) = (self.sim.durable_view(), self.sim.cached_view());
        let mut out = Vec::new();
        for k in self.live_keys() {
            let obligation = PartitionPaths::new(Path::new(DATA_DIR), k).obligation;
            let obligation = obligation.to_string_lossy();
            let applied = [&view, &cached]
                .iter()
                .filter_map(|v| match v.get(&*obligation) {
                    Some(NodeView::File(bytes)) => match decode_file(bytes) {
                        LoadedObligation::Valid { obligation: ob, .. }
                            if ob.state() == PurgeState::Applied =>
                        {
                            Some(ob.generation())
                        }
                        _ => None,
                    },
                    _ => None,
                })
                .max();
            let Some(generation) = applied else {
                continue;
            };
            let mut dead = ack::dead_files(&view, Path::new(DATA_DIR), k, generation);
            // An empty dead file is a re-dirty's own leftover: a removal is
            // redone as create-and-remove (`dirsync::redo`), and a power loss
            // between the two calls may make the created name durable, even
            // after the removal itself was (`sim run` seeds 2945 and 3363 of
            // session 12). It holds no record of any generation, and
            // recovery lists it as stale and reopens the purge (ADR 0020):
            // accepted once the engine holds this partition's purge pending,
            // and judged only then (while the engine is down, recovery has
            // not looked yet). An engine up and idle over it is the lie.
            let up_and_owed =
                |engine: &Engine| engine.reconciler().pending_purges().any(|p| p == k);
            if self.engine.as_ref().is_none_or(up_and_owed) {
                dead.retain(
                    |path| !matches!(view.get(path), Some(NodeView::File(b)) if b.is_empty()),
                );
            }
            if !dead.is_empty() {
                out.push(violation(
                    'd',
                    &k.to_string(),
                    format!(
                        "obligation Applied for generation {generation} while {dead:?} are durable"
                    ),
                ));
            }
        }
        out.extend(self.check_done_means_removed());
        out.extend(self.check_retention_done_means_removed());
        out
    }

    /// Every check of `check_applied_means_removed`, and (k) on the store.
    pub(crate) fn check_both_doors(&mut self) -> Vec<Violation> {
        let mut out = self.check_applied_means_removed();
        out.extend(self.check_remote());
        out
    }

    /// (d) for retention: whenever no retention obligation is pending for a
    /// live partition, no segment file of its served generation wholly below
    /// its low-water mark (the engine's, in memory) is on disk, neither in
    /// the durable view (a power loss now would bring it back, and nothing
    /// would remove it) nor in the page cache. A re-dirty's leftover
    /// (`<name>.redirty`) counts as its name. Not judged while the engine is
    /// down, nor for a degraded partition (it knows no mark).
    pub(super) fn check_retention_done_means_removed(&self) -> Vec<Violation> {
        let Some(engine) = &self.engine else {
            return Vec::new();
        };
        let (durable, cached) = (self.sim.durable_view(), self.sim.cached_view());
        let mut out = Vec::new();
        for k in engine.metadata().partition_keys() {
            let Some(p) = engine.partition(k) else {
                continue;
            };
            let mark = p.log().low_water();
            if mark == 0
                || p.degraded_reason().is_some()
                || engine
                    .reconciler()
                    .status(ObligationKey::Retention(k))
                    .is_some()
            {
                continue;
            }
            let dir = format!(
                "{}/",
                PartitionPaths::new(Path::new(DATA_DIR), k)
                    .segments
                    .to_string_lossy()
            );
            let mut found = BTreeSet::new();
            for (view, which) in [(&durable, "durable"), (&cached, "cached")] {
                let names = view
                    .range(dir.clone()..)
                    .take_while(|(path, _)| path.starts_with(&dir))
                    .map(|(path, _)| &path[dir.len()..]);
                for name in names {
                    let plain = name.strip_suffix(REDIRTY_SUFFIX).unwrap_or(name);
                    if parse_segment_name(plain)
                        .is_some_and(|(g, base, _)| g == p.generation() && base < mark)
                    {
                        found.insert(format!("{name} ({which})"));
                    }
                }
            }
            if !found.is_empty() {
                let shown: Vec<&String> = found.iter().take(3).collect();
                out.push(violation(
                    'd',
                    &k.to_string(),
                    format!(
                        "no retention pending while {} segment files below the low-water mark {mark} are on disk: {shown:?}",
                        found.len()
                    ),
                ));
            }
        }
        out
    }

    /// (d) for deletions: whenever no deletion is pending for a resource the
    /// metadata does not name, nothing is under its path, neither in the
    /// durable view (a power loss now would bring it back, and nothing would
    /// remove it: the deletion counts as done) nor in the page cache. The
    /// metadata is the engine's, in memory: the deletion's record (ADR 0015).
    /// Not judged while the engine is down (a crash is followed by recovery,
    /// which must find what is left: checked after it).
    pub(super) fn check_done_means_removed(&self) -> Vec<Violation> {
        let Some(engine) = &self.engine else {
            return Vec::new();
        };
        let meta = engine.metadata();
        let pending: Vec<ResourceKey> = engine.pending_deletions().map(|(r, _)| r).collect();
        let root = format!("{DATA_DIR}/{STREAMS_DIR}/");
        let mut found: BTreeMap<ResourceKey, BTreeSet<String>> = BTreeMap::new();
        for (view, which) in [
            (self.sim.durable_view(), "durable"),
            (self.sim.cached_view(), "cached"),
        ] {
            let paths = view
                .range(root.clone()..)
                .take_while(|(p, _)| p.starts_with(&root));
            for (path, node) in paths {
                let Some(r) = unnamed_resource(meta, &path[root.len()..]) else {
                    continue;
                };
                // An empty file under a deleted group's name in a partition
                // whose purge is pending is that purge's own re-dirty
                // leftover (a removal redone as create-and-remove whose
                // remove failed): its next attempt removes it (`sim run`
                // seed 490).
                if matches!(r, ResourceKey::Group { .. })
                    && matches!(node, NodeView::File(bytes) if bytes.is_empty())
                    && purge_pending_under(engine, &path[root.len()..])
                {
                    continue;
                }
                if !pending.iter().any(|d| d.covers(r)) {
                    found
                        .entry(r)
                        .or_default()
                        .insert(format!("{path} ({which})"));
                }
            }
        }
        found
            .into_iter()
            .map(|(r, paths)| {
                let shown: Vec<&String> = paths.iter().take(3).collect();
                violation(
                    'd',
                    &r.to_string(),
                    format!(
                        "no deletion pending for {r}, which the metadata does not name, while {} of its paths are on disk: {shown:?}",
                        paths.len()
                    ),
                )
            })
            .collect()
    }

    /// What the engine serves now, per partition the model holds live (the
    /// catalog observed first: `Oracle::observe_catalog`).
    pub(super) fn observe(&mut self) -> Result<BTreeMap<PartitionKey, Observed>, Violation> {
        if self.engine.is_none() {
            return Err(violation('f', "-", "engine is down".into()));
        }
        let consumers = self.consumers.clone();
        let mut out = BTreeMap::new();
        for k in self.oracle.live_keys() {
            let generation = self
                .engine
                .as_ref()
                .and_then(|e| e.partition(k))
                .map(|x| x.generation())
                .unwrap_or_default();
            let history = self.history_at(k).map_err(|e| {
                violation(
                    'f',
                    &k.to_string(),
                    format!("poll failed after recovery: {e}"),
                )
            })?;
            let mut offsets = BTreeMap::new();
            let mut next = BTreeMap::new();
            for &(group, id) in consumers.get(&k).map(Vec::as_slice).unwrap_or_default() {
                // A deleted group's offsets resolve to nothing (checked with
                // the catalog); a live one's are read like a consumer's.
                if group && !self.oracle.group_live((k.stream, k.topic, id)) {
                    continue;
                }
                let c = consumer(group, id);
                let stored = self.stored_offset_at(k, c).map_err(|e| {
                    violation('f', &k.to_string(), format!("offset lookup failed: {e}"))
                })?;
                offsets.insert((group, id), stored);
                if stored.is_some() && !next.contains_key(&(group, id)) {
                    let polled = self.poll_next_at(k, c, WHOLE_HISTORY).map_err(|e| {
                        violation('f', &k.to_string(), format!("Next poll failed: {e}"))
                    })?;
                    next.insert((group, id), polled.iter().map(|m| m.0).collect());
                }
            }
            // A tiered partition serves from its remote low mark: below the
            // local mark the store holds what was released.
            let low_water = self
                .engine
                .as_ref()
                .and_then(|e| {
                    World::tier_mark(e, k).or_else(|| e.partition(k).map(|x| x.log().low_water()))
                })
                .unwrap_or_default();
            out.insert(
                k,
                Observed {
                    generation,
                    low_water,
                    history,
                    offsets,
                    next,
                },
            );
        }
        Ok(out)
    }

    /// (h) a deleted resource is never served: every partition and group the
    /// model holds deleted resolves to nothing (an error, not an empty answer).
    pub(super) fn check_deleted_resolve_to_nothing(&mut self) -> Vec<Violation> {
        let mut out = Vec::new();
        for k in self.oracle.gone_keys() {
            if let Ok(history) = self.history_at(k) {
                out.push(violation(
                    'h',
                    &k.to_string(),
                    format!(
                        "deleted partition {k} is served ({} messages)",
                        history.len()
                    ),
                ));
            }
        }
        let consumers = self.consumers.clone();
        for (k, touched) in consumers {
            if !self.oracle.partition_live(k) {
                continue;
            }
            for &(group, id) in &touched {
                if group
                    && self.oracle.group_gone((k.stream, k.topic, id))
                    && let Ok(stored) = self.stored_offset_at(k, consumer(true, id))
                {
                    out.push(violation(
                        'h',
                        &k.to_string(),
                        format!("deleted group {id} is served (stored offset {stored:?})"),
                    ));
                }
            }
        }
        out
    }

    /// Observes and checks every partition against the oracle; then the
    /// observed state becomes the baseline for the next window.
    pub(crate) fn check(&mut self) -> Vec<Violation> {
        let mut out = self.invariant_violations();
        out.append(&mut self.seen_in_steps);
        // While storage keeps failing, the engine may refuse service (its
        // metadata is in doubt): that is the correct answer, not a violation.
        // The final check runs after faults stop, when it must serve again.
        if self.engine.is_some() && self.availability().is_err() {
            return out;
        }
        // The catalog first: which partitions and groups exist decides what
        // the rest is judged against (a deletion in doubt may have landed).
        if let Some(meta) = self.metadata().cloned() {
            out.extend(self.oracle.observe_catalog(&meta));
        }
        out.extend(self.check_deleted_resolve_to_nothing());
        let seen = match self.observe() {
            Ok(s) => s,
            Err(v) => {
                out.push(v);
                return out;
            }
        };
        for (k, o) in &seen {
            out.extend(self.oracle.check(*k, o));
            self.oracle.settle(*k, o);
        }
        out
    }
}

/// The outermost resource the metadata does not name that `rel` (a path
/// below `streams/`) lies in, if any. A re-dirty's leftover name
/// (`<id>.redirty`) counts as its id: it holds that resource's files.
fn unnamed_resource(meta: &Metadata, rel: &str) -> Option<ResourceKey> {
    let parts: Vec<&str> = rel.split('/').collect();
    let id = |i: usize| {
        parts.get(i).and_then(|x| {
            x.strip_suffix(REDIRTY_SUFFIX)
                .unwrap_or(x)
                .parse::<u32>()
                .ok()
        })
    };
    let stream = id(0)?;
    let Some(s) = meta.streams.get(&stream) else {
        return Some(ResourceKey::Stream { stream });
    };
    let topic = id(2).filter(|_| parts.get(1) == Some(&TOPICS_DIR))?;
    let Some(t) = s.topics.get(&topic) else {
        return Some(ResourceKey::Topic { stream, topic });
    };
    let partition = id(4).filter(|_| parts.get(3) == Some(&PARTITIONS_DIR))?;
    if !t.partitions.contains_key(&partition) {
        return Some(ResourceKey::Partition(PartitionKey {
            stream,
            topic,
            partition,
        }));
    }
    let group = id(6).filter(|_| parts.get(5) == Some(&GROUPS_DIR))?;
    (!t.groups.contains_key(&group)).then_some(ResourceKey::Group {
        stream,
        topic,
        group,
    })
}

/// Whether the partition a path (relative to `streams/`) lies in has a
/// pending purge obligation.
fn purge_pending_under(engine: &Engine, rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let id = |i: usize| parts.get(i).and_then(|x| x.parse::<u32>().ok());
    let (Some(stream), Some(topic), Some(partition)) = (id(0), id(2), id(4)) else {
        return false;
    };
    let key = PartitionKey {
        stream,
        topic,
        partition,
    };
    engine.reconciler().pending_purges().any(|k| k == key)
}
