//! Deletions: a deleted resource's files are a cleanup obligation, driven by
//! the reconciler like a purge (docs/adr/0015-every-deletion-is-an-obligation.md).
//!
//! Invariants:
//! - The commit point is the metadata write that no longer names the
//!   resource. From then on its files are garbage, never data: recovery
//!   adopts only what the metadata names, and nothing serves the rest.
//! - That metadata is the obligation's durable record: the same commit that
//!   drops the resource adds it to `Metadata::pending_deletions`, and only
//!   the commit after the cleanup's last directory sync takes it out. A
//!   restart therefore redoes every deletion not known done, re-dirtying the
//!   name before syncing (an earlier process's removal may have been dropped
//!   by a failed sync, and its page cache no longer shows the name).
//! - Recovery also lists the catalog directories and every partition's
//!   `groups/`, and makes (and commits) an obligation for each name no
//!   metadata holds (`find_orphans`): garbage from any earlier crash, or from
//!   a failed creation, is found again (level-triggered: wanted vs. actual).
//! - An obligation is done only after the directory that lost the entry was
//!   synced by a sync issued after the removal, through the one tracker the
//!   engine keeps for that directory (`DirTracker`, shared with every other
//!   deletion there). A failed sync leaves the obligation pending and the
//!   next attempt goes back through a fresh check and removal, with the name
//!   re-dirtied before the next sync (a plain retried sync proves nothing
//!   under Linux semantics).
//! - No deletion's cleanup removes a live resource's files: a resource is
//!   never created where a pending deletion would remove it (`settle`
//!   finishes such deletions first, or the creation is refused), a new
//!   deletion absorbs the pending ones it covers, and `check` asserts that
//!   no pending deletion covers a live resource.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::Engine;
use crate::dirsync::{DirTracker, NameChange, REDIRTY_SUFFIX};
use crate::error::{EngineError, Result};
use crate::layout::{partition_dir_name, partitions_dir, streams_dir, topics_dir};
use crate::metadata::{Metadata, PartitionKey, ResourceKey, TopicKey};
use crate::partition::reconciler::{ObligationKey, PassReport};

/// Where a deletion's cleanup stands. Reached only through the transition
/// functions; every attempt runs a whole round from `Requested`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletePhase {
    /// Committed: the files may be on disk (in the page cache, or durably).
    Requested,
    /// Removed from the page cache; the sync of the directory that lost the
    /// entry has not succeeded yet.
    FilesDeleted,
    /// The removal is durable: nothing of the resource can come back.
    Applied,
}

impl DeletePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            DeletePhase::Requested => "Requested",
            DeletePhase::FilesDeleted => "FilesDeleted",
            DeletePhase::Applied => "Applied",
        }
    }

    fn files_deleted(self) -> DeletePhase {
        assert_eq!(
            self,
            DeletePhase::Requested,
            "invariant: removal from {self:?}"
        );
        DeletePhase::FilesDeleted
    }

    fn applied(self) -> DeletePhase {
        assert_eq!(
            self,
            DeletePhase::FilesDeleted,
            "invariant: applied from {self:?}"
        );
        DeletePhase::Applied
    }

    /// A failed step: the next attempt starts the round again.
    fn retry(self) -> DeletePhase {
        assert_ne!(
            self,
            DeletePhase::Applied,
            "invariant: retry of a done deletion"
        );
        DeletePhase::Requested
    }
}

/// The engine's pending deletions and the trackers of the directories they
/// remove entries from.
#[derive(Debug, Default)]
pub(crate) struct Deletions {
    pending: BTreeMap<ResourceKey, DeletePhase>,
    /// Deletions an earlier process may have half done: their first attempt
    /// here re-dirties the name before it syncs.
    redo: BTreeSet<ResourceKey>,
    /// One per catalog directory (`streams/`, a stream's `topics/`, a topic's
    /// `partitions/`): every deletion there notes its removal in it, so a
    /// failed sync by one is redone by the next, whoever issues it.
    trackers: BTreeMap<PathBuf, DirTracker>,
}

impl Deletions {
    pub(crate) fn phase(&self, r: ResourceKey) -> Option<DeletePhase> {
        self.pending.get(&r).copied()
    }

    pub(crate) fn pending(&self) -> impl Iterator<Item = (ResourceKey, DeletePhase)> + '_ {
        self.pending.iter().map(|(r, p)| (*r, *p))
    }

    /// A sync of a catalog directory failed outside these trackers (a
    /// creation's): under Linux semantics it may have dropped a pending
    /// deletion's dirty removal there, which a later successful sync would
    /// then not persist. Every pending removal is redone before its next sync.
    pub(crate) fn assume_dropped(&mut self) {
        for tracker in self.trackers.values_mut() {
            tracker.force_redirty();
        }
    }

    /// Pending deletions that `r`'s creation (or deletion) must not overlap:
    /// `r` itself, its ancestors and its descendants.
    fn overlapping(&self, r: ResourceKey) -> Vec<ResourceKey> {
        self.pending
            .keys()
            .copied()
            .filter(|d| d.covers(r) || r.covers(*d))
            .collect()
    }
}

/// A directory a tree deletion removes: the parent that loses the entry, and
/// the entry's name. `None` for a group (its files live in partitions).
fn tree(data: &Path, r: ResourceKey) -> Option<(PathBuf, String)> {
    match r {
        ResourceKey::Stream { stream } => Some((streams_dir(data), stream.to_string())),
        ResourceKey::Topic { stream, topic } => Some((topics_dir(data, stream), topic.to_string())),
        ResourceKey::Partition(k) => Some((
            partitions_dir(data, k.topic_key()),
            partition_dir_name(k.partition),
        )),
        ResourceKey::Group { .. } => None,
    }
}

/// Records `rs` as pending deletions in `m`, each absorbing the recorded
/// deletions it covers.
pub(super) fn record_deletions(m: &mut Metadata, rs: &[ResourceKey]) {
    for r in rs {
        m.pending_deletions.retain(|d| !r.covers(*d));
        m.pending_deletions.insert(*r);
    }
}

/// Whether the metadata names `r` (a live resource must never be removed).
fn is_live(meta: &Metadata, r: ResourceKey) -> bool {
    match r {
        ResourceKey::Stream { stream } => meta.streams.contains_key(&stream),
        ResourceKey::Topic { stream, topic } => meta.topic(stream, topic).is_some(),
        ResourceKey::Partition(k) => meta.partition(k).is_some(),
        ResourceKey::Group {
            stream,
            topic,
            group,
        } => meta
            .topic(stream, topic)
            .is_some_and(|t| t.groups.contains_key(&group)),
    }
}

impl Engine {
    /// The commit point of a deletion: one metadata write applies `drop`
    /// (which takes `r` out of the metadata) and records `r` as a pending
    /// deletion, absorbing the pending deletions it covers. Then `r`'s
    /// cleanup is due now. Nothing is removed here.
    pub(super) fn commit_deletion(
        &mut self,
        r: ResourceKey,
        drop: impl FnOnce(&mut Metadata),
    ) -> Result<()> {
        let record = self.keeps_obligations();
        self.commit(|m| {
            drop(m);
            if record {
                record_deletions(m, &[r]);
            }
            Ok(())
        })?;
        self.begin_deletion(r);
        Ok(())
    }

    /// In memory: `r` is a pending deletion (its record is committed, or it
    /// was read back at recovery), due now. Pending deletions below it are
    /// absorbed: removing `r` removes their files too.
    pub(super) fn begin_deletion(&mut self, r: ResourceKey) {
        assert!(!is_live(&self.meta, r), "invariant: deletion of live {r}");
        self.forget_memberships(r);
        for covered in self.deletions.overlapping(r) {
            assert!(
                r.covers(covered),
                "invariant: {r} deleted below pending deletion {covered}"
            );
            self.deletions.pending.remove(&covered);
            self.deletions.redo.remove(&covered);
            self.reconciler.forget(ObligationKey::Delete(covered));
        }
        self.deletions.pending.insert(r, DeletePhase::Requested);
        let now = self.now_ms();
        self.reconciler.mark_pending(ObligationKey::Delete(r), now);
        tracing::info!(resource = %r, "deletion committed; cleanup pending");
    }

    /// Recovery: every deletion the metadata records is pending again, to be
    /// redone from a re-dirtied name.
    pub(super) fn resume_deletions(&mut self) {
        let recorded: Vec<ResourceKey> = self.meta.pending_deletions.iter().copied().collect();
        for r in recorded {
            self.begin_deletion(r);
            self.deletions.redo.insert(r);
        }
    }

    /// A creation failed after it may have made directories for `created`,
    /// which no metadata names: record them as deletions (best effort: if
    /// that commit fails too, the next recovery finds them as orphans).
    pub(super) fn record_failed_creation(&mut self, created: &[ResourceKey]) {
        if !self.keeps_obligations() {
            return;
        }
        let added = self.commit(|m| {
            record_deletions(m, created);
            Ok(())
        });
        if let Err(e) = added {
            // Owed all the same: memory records them, and the metadata is in
            // doubt until a save writes them (every request tries first).
            tracing::warn!(error = %e, "could not record a failed creation's directories for removal; the next save will");
            record_deletions(&mut self.meta, created);
            self.metadata_in_doubt.get_or_insert_with(|| {
                "a failed creation's directories are not yet recorded for removal".into()
            });
        }
        for r in created {
            self.begin_deletion(*r);
        }
    }

    /// Finishes every pending deletion that creating `r` would overlap, before
    /// anything of `r` is written: a cleanup must never remove a live
    /// resource's files. Refuses the creation (the attempt's error) if one
    /// cannot finish now.
    pub(super) fn settle_deletions_before_creating(&mut self, r: ResourceKey) -> Result<()> {
        for d in self.deletions.overlapping(r) {
            let now = self.now_ms();
            let mut report = PassReport::default();
            let outcome = self.attempt_deletion(d);
            let failed = outcome.as_ref().err().cloned();
            report.record(
                &mut self.reconciler,
                ObligationKey::Delete(d),
                outcome.map_err(|e| e.to_string()),
                now,
            );
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Attempts the due delete obligations of this pass, in key order.
    pub(super) fn run_due_deletions(
        &mut self,
        due: Vec<ResourceKey>,
        now_ms: u64,
        report: &mut PassReport,
    ) {
        for r in due {
            let outcome = self.attempt_deletion(r).map_err(|e| e.to_string());
            report.record(
                &mut self.reconciler,
                ObligationKey::Delete(r),
                outcome,
                now_ms,
            );
        }
    }

    /// One whole round of `r`'s cleanup: remove what is there, sync the
    /// directory that lost it. `Ok` only once the removal is durable; the
    /// deletion is then forgotten (its record, the metadata, says it all).
    fn attempt_deletion(&mut self, r: ResourceKey) -> Result<()> {
        let phase = self
            .deletions
            .phase(r)
            .unwrap_or_else(|| panic!("invariant: attempt on {r}, which is not pending"));
        assert!(!is_live(&self.meta, r), "invariant: cleanup of live {r}");
        let redo = self.deletions.redo.contains(&r)
            && crate::teeth::enabled(crate::teeth::Mechanism::RedoRecordedDeletions);
        // Nothing may be removed while the metadata that makes it garbage is
        // not known durable.
        self.ensure_metadata_durable()?;
        let result = match r {
            ResourceKey::Group {
                stream,
                topic,
                group,
            } => self.remove_group_files(TopicKey { stream, topic }, group, redo),
            _ => self.remove_deleted_tree(r, redo),
        };
        let result = match result {
            // Done only once the record is gone too: a crash before that
            // commit redoes the (now idempotent) round.
            Ok(()) if self.keeps_obligations() => self
                .commit(|m| {
                    m.pending_deletions.remove(&r);
                    Ok(())
                })
                .map_err(|e| (true, e)),
            other => other,
        };
        match result {
            Ok(()) => {
                let done = phase.files_deleted().applied();
                debug_assert_eq!(done, DeletePhase::Applied);
                self.deletions.pending.remove(&r);
                self.deletions.redo.remove(&r);
                tracing::info!(resource = %r, "deleted resource's files removed durably");
                Ok(())
            }
            Err((removed, e)) => {
                let next = if removed {
                    phase.files_deleted()
                } else {
                    phase
                };
                if self.naive_deletion() {
                    // Apache Iggy's order, kept only in test builds: a failed
                    // sync is a warning and the deletion counts as done.
                    tracing::warn!(resource = %r, error = %e, "naive deletion: failure ignored");
                    self.deletions.pending.remove(&r);
                    return Ok(());
                }
                self.deletions.pending.insert(r, next.retry());
                Err(e)
            }
        }
    }

    /// Removes a deleted stream's, topic's or partition's directory and syncs
    /// its parent. The error says whether the removal happened before it.
    fn remove_deleted_tree(
        &mut self,
        r: ResourceKey,
        redo: bool,
    ) -> std::result::Result<(), (bool, EngineError)> {
        let Some((parent, name)) = tree(&self.config.data_dir, r) else {
            unreachable!("a group is not a tree");
        };
        let storage = self.storage.clone();
        let exists = |p: &Path| storage.exists(p).map_err(|e| (false, e.into()));
        if !self.restore_renamed_away(&parent).map_err(|e| (false, e))? {
            // An ancestor is gone from the page cache, and not renamed away
            // by an interrupted re-dirty: its own deletion (which absorbed
            // this one, or which recovery will find) makes that durable.
            return Ok(());
        }
        let root = parent.join(&name);
        // Its remote objects first, while its tiering records still say
        // where they are (engine/tiering.rs).
        if !self.naive_deletion() {
            self.remove_remote_of_tree(&root, r)
                .map_err(|e| (false, e))?;
        }
        // A file under the name (a re-dirty's own leftover after a crash
        // between its create and its remove) goes too (`remove_dir_or_file`).
        let removed_now = exists(&root)?;
        if removed_now {
            crate::dirsync::remove_dir_or_file(storage.as_ref(), &root)
                .map_err(|e| (false, e.into()))?;
        }
        // Noted whether or not this attempt removed it: an earlier attempt's
        // removal whose sync failed must be redone before the next sync.
        let tracker = self
            .deletions
            .trackers
            .entry(parent.clone())
            .or_insert_with(|| DirTracker::new(&parent));
        tracker.note(&name, NameChange::Removed);
        // A removal made just now is dirty already; one an earlier process
        // made (and perhaps lost to a failed sync) is performed again.
        if redo && !removed_now {
            tracker.force_redirty();
        }
        tracker
            .sync(storage.as_ref())
            .map_err(|e| (true, e.into()))?;
        // Trackers of directories inside the removed tree are gone with it.
        self.deletions
            .trackers
            .retain(|dir, _| !dir.starts_with(&root));
        Ok(())
    }

    /// Whether `dir` exists, after moving it back if a re-dirty that
    /// renamed it (or an ancestor) away was interrupted in this process
    /// (`dirchain`: its second rename failed; `sim run` seed 80). The rename
    /// back is synced in the parent before the caller relies on it: the disk
    /// may hold either name, and a deletion below must not count as done
    /// while its files are durable under the old one.
    fn restore_renamed_away(&mut self, dir: &Path) -> Result<bool> {
        if self.storage.exists(dir)? {
            return Ok(true);
        }
        let (Some(up), Some(name)) = (dir.parent(), dir.file_name()) else {
            return Ok(false);
        };
        if !dir.starts_with(&self.config.data_dir)
            || dir == self.config.data_dir
            || !self.restore_renamed_away(up)?
        {
            return Ok(false);
        }
        // Moving an ancestor back may have brought `dir` back with it.
        if self.storage.exists(dir)? {
            return Ok(true);
        }
        let leftover = up.join(format!("{}{REDIRTY_SUFFIX}", name.to_string_lossy()));
        if !self.storage.exists(&leftover)? {
            return Ok(false);
        }
        let names = self.storage.list_dir(up)?;
        self.repair_catalog_leftovers(up, &names)?;
        let storage = self.storage.clone();
        if let Some(tracker) = self.deletions.trackers.get_mut(up) {
            tracker.sync(storage.as_ref())?;
        }
        Ok(self.storage.exists(dir)?)
    }

    /// Removes a deleted group's offset file from every partition of its
    /// topic, each removal synced in its own `groups/` directory.
    fn remove_group_files(
        &mut self,
        topic: TopicKey,
        group: u32,
        redo: bool,
    ) -> std::result::Result<(), (bool, EngineError)> {
        for key in self.topic_partition_keys(topic) {
            let p = self.partition_at(key).map_err(|e| (false, e))?;
            p.remove_group_offsets(group, redo).map_err(|e| (true, e))?;
        }
        Ok(())
    }

    #[cfg(feature = "naive-purge")]
    pub(super) fn naive_deletion(&self) -> bool {
        self.config.purge_mode == super::PurgeMode::NaiveIggyOrder
    }

    #[cfg(not(feature = "naive-purge"))]
    pub(super) fn naive_deletion(&self) -> bool {
        false
    }

    /// Recovery: every stream, topic or partition directory the metadata does
    /// not name, and every group offset file of a group it does not name
    /// (`orphan_groups`, from the partitions' recovery), becomes a pending
    /// deletion. Names sluice does not write are left alone (and logged).
    pub(super) fn find_orphans(&mut self, orphan_groups: Vec<ResourceKey>) -> Result<()> {
        let data = self.config.data_dir.clone();
        let mut found = Vec::new();
        for s in self.list_ids(&streams_dir(&data))? {
            let Some(stream) = self.meta.streams.get(&s) else {
                found.push(ResourceKey::Stream { stream: s });
                continue;
            };
            let live_topics: Vec<u32> = stream.topics.keys().copied().collect();
            for t in self.list_ids(&topics_dir(&data, s))? {
                if !live_topics.contains(&t) {
                    found.push(ResourceKey::Topic {
                        stream: s,
                        topic: t,
                    });
                    continue;
                }
                let topic = TopicKey {
                    stream: s,
                    topic: t,
                };
                for p in self.list_ids(&partitions_dir(&data, topic))? {
                    let key: PartitionKey = topic.partition(p);
                    if self.meta.partition(key).is_none() {
                        found.push(ResourceKey::Partition(key));
                    }
                }
            }
        }
        found.extend(orphan_groups);
        found.retain(|r| !self.meta.pending_deletions.iter().any(|d| d.covers(*r)));
        if found.is_empty() {
            return Ok(());
        }
        for r in &found {
            tracing::warn!(resource = %r, "files of a deleted resource found at recovery; removing them");
        }
        // Recorded like any deletion, by the save that makes the loaded
        // metadata durable (`Engine::open`), before any attempt removes a
        // thing: an attempt first makes the metadata durable.
        record_deletions(&mut self.meta, &found);
        if self.metadata_in_doubt.is_none() {
            self.metadata_in_doubt = Some("recovery recorded orphaned files for removal".into());
        }
        for r in found {
            self.begin_deletion(r);
        }
        Ok(())
    }

    /// The numeric names in `dir` (none if it does not exist), after
    /// repairing re-dirty leftovers there, and of `dir` itself (a catalog
    /// directory renamed away by an interrupted re-dirty is moved back).
    fn list_ids(&mut self, dir: &Path) -> Result<Vec<u32>> {
        if !self.restore_renamed_away(dir)? {
            return Ok(Vec::new());
        }
        let mut names = self.storage.list_dir(dir)?;
        if names.iter().any(|n| n.ends_with(REDIRTY_SUFFIX)) {
            self.repair_catalog_leftovers(dir, &names)?;
            names = self.storage.list_dir(dir)?;
        }
        let mut ids = Vec::new();
        for name in names {
            match name.parse::<u32>() {
                Ok(id) => ids.push(id),
                Err(_) => {
                    tracing::warn!(dir = %dir.display(), name, "ignoring a name sluice does not write")
                }
            }
        }
        Ok(ids)
    }

    /// A crash between the two renames that re-dirty a catalog directory's
    /// name (`dirchain`: a directory an earlier attempt created, renamed
    /// away and back) leaves `<id>.redirty`. It is moved back under its name,
    /// or removed if the name exists again; either way the change is noted
    /// in the directory's tracker and redone before its next sync. The name
    /// then counts like any other: live, or an orphan to delete.
    fn repair_catalog_leftovers(&mut self, dir: &Path, names: &[String]) -> Result<()> {
        let storage = self.storage.clone();
        let tracker = self
            .deletions
            .trackers
            .entry(dir.to_path_buf())
            .or_insert_with(|| DirTracker::new(dir));
        for leftover in names.iter().filter(|n| n.ends_with(REDIRTY_SUFFIX)) {
            let base = &leftover[..leftover.len() - REDIRTY_SUFFIX.len()];
            let from = dir.join(leftover);
            if names.iter().any(|n| n == base) {
                crate::dirsync::remove_dir_or_file(storage.as_ref(), &from)?;
            } else {
                storage.rename(&from, &dir.join(base))?;
                tracker.note(base, NameChange::Created);
            }
            tracker.note(leftover, NameChange::Removed);
            tracing::info!(dir = %dir.display(), name = base, "repaired an interrupted re-dirty of a catalog directory");
        }
        tracker.force_redirty();
        Ok(())
    }

    /// The deletion invariants, for `check_invariants`: the reconciler tracks
    /// exactly the pending deletions, and none of them covers a live resource.
    pub(super) fn check_deletions(&self) -> std::result::Result<(), String> {
        let tracked: Vec<ResourceKey> = self
            .reconciler
            .pending()
            .keys()
            .filter_map(|k| k.deletion())
            .collect();
        let pending: Vec<ResourceKey> = self.deletions.pending.keys().copied().collect();
        if tracked != pending {
            return Err(format!(
                "the reconciler tracks deletions {tracked:?} but {pending:?} are pending"
            ));
        }
        let recorded: Vec<ResourceKey> = self.meta.pending_deletions.iter().copied().collect();
        if self.keeps_obligations() && recorded != pending {
            return Err(format!(
                "the metadata records deletions {recorded:?} but {pending:?} are pending"
            ));
        }
        for (r, phase) in &self.deletions.pending {
            if *phase == DeletePhase::Applied {
                return Err(format!("deletion of {r} is applied but still pending"));
            }
            if is_live(&self.meta, *r) {
                return Err(format!("a pending deletion covers live {r}"));
            }
            let live_below = self
                .partitions
                .keys()
                .any(|k| r.covers(ResourceKey::Partition(*k)));
            if live_below {
                return Err(format!("a pending deletion of {r} covers a live partition"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_reaches_applied_only_through_its_round() {
        let done = DeletePhase::Requested.files_deleted().applied();
        assert_eq!(done, DeletePhase::Applied);
        // A failed sync sends it back to the start of the round.
        assert_eq!(
            DeletePhase::Requested.files_deleted().retry(),
            DeletePhase::Requested
        );
    }

    #[test]
    #[should_panic(expected = "applied from Requested")]
    fn applied_without_a_removal_is_a_bug() {
        let _ = DeletePhase::Requested.applied();
    }

    #[test]
    #[should_panic(expected = "retry of a done deletion")]
    fn a_done_deletion_is_never_retried() {
        let _ = DeletePhase::Applied.retry();
    }

    #[test]
    fn a_stream_covers_its_topics_partitions_and_groups_and_nothing_else() {
        let s0 = ResourceKey::Stream { stream: 0 };
        let t = ResourceKey::Topic {
            stream: 0,
            topic: 1,
        };
        let p = ResourceKey::Partition(PartitionKey {
            stream: 0,
            topic: 1,
            partition: 2,
        });
        let g = ResourceKey::Group {
            stream: 0,
            topic: 1,
            group: 3,
        };
        for below in [s0, t, p, g] {
            assert!(s0.covers(below), "{below}");
        }
        assert!(t.covers(p) && t.covers(g) && !t.covers(s0));
        assert!(!p.covers(g) && !g.covers(p) && p.covers(p));
        assert!(!ResourceKey::Stream { stream: 1 }.covers(t));
        assert!(
            !ResourceKey::Topic {
                stream: 0,
                topic: 2
            }
            .covers(p)
        );
    }
}
