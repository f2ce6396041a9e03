//! The directories a new partition needs, made durable before its commit.
//!
//! Invariants:
//! - A partition directory that already exists under a new partition's id is
//!   a leftover (a deleted partition's, or an earlier failed attempt's): it is
//!   removed and the removal synced *before* fresh directories are created,
//!   so a leftover file can never be adopted by the new partition.
//! - Every name on the way up to the data directory is durable before the
//!   caller commits the metadata that names the partition. A name this call
//!   created is noted as created. A name that already existed is known
//!   durable if a committed partition lies below it (its creation was synced
//!   before that commit). Otherwise an earlier attempt, perhaps by an earlier
//!   process, created it, and a failed sync may have dropped it (Linux
//!   semantics): it is noted and re-dirtied (renamed away and back; nothing
//!   below it is live) before its parent is synced. So a retry after a failed
//!   sync redoes every name that sync covered, and a plain retried sync never
//!   stands in for a lost one (`DirTracker`; the chain above `partitions/` is
//!   `dirchain::make_durable`'s).

use super::{Engine, TopicKey};
use crate::dirchain::{self, NameState};
use crate::dirsync::{DirTracker, NameChange};
use crate::error::Result;
use crate::layout::{
    CONSUMERS_DIR, GROUPS_DIR, PartitionPaths, SEGMENTS_DIR, partition_dir_name, partitions_dir,
    stream_dir, streams_dir, topic_dir, topics_dir,
};
use crate::metadata::TopicOptions;
use crate::partition::Partition;

impl Engine {
    /// Creates the directories of the new partitions `ids` of `topic` and
    /// makes every name they need durable, before the metadata naming them is
    /// committed (see the module docs).
    pub(super) fn create_partition_dirs(
        &self,
        topic: TopicKey,
        options: TopicOptions,
        ids: &[u32],
    ) -> Result<Vec<Partition>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let storage = self.storage.as_ref();
        let data = &self.config.data_dir;
        let pdir = partitions_dir(data, topic);
        let topic_live = !self.topic_partition_keys(topic).is_empty();
        let stream_live = self.partitions.keys().any(|k| k.stream == topic.stream);
        let any_live = !self.partitions.is_empty();
        // Bottom up, the directories from `partitions/` to `streams/`, each
        // with whether a committed partition lies below it.
        let s = topic.stream;
        let chain = [
            (pdir.clone(), topic_live),
            (topic_dir(data, s, topic.topic), topic_live),
            (topics_dir(data, s), stream_live),
            (stream_dir(data, s), stream_live),
            (streams_dir(data), any_live),
        ];
        let mut states = Vec::with_capacity(chain.len());
        for (dir, live) in &chain {
            states.push(if *live {
                NameState::Durable
            } else if storage.exists(dir)? {
                NameState::InDoubt
            } else {
                NameState::Dirty
            });
        }

        let mut partitions_dir = DirTracker::new(&pdir);
        for &p in ids {
            let root = pdir.join(partition_dir_name(p));
            if storage.exists(&root)? {
                tracing::warn!(dir = %root.display(), "removing a leftover partition directory before creating the partition");
                crate::dirsync::remove_dir_or_file(storage, &root)?;
                partitions_dir.note(&partition_dir_name(p), NameChange::Removed);
            }
        }
        if partitions_dir.has_unconfirmed() {
            partitions_dir.sync(storage)?;
        }

        let mut out = Vec::with_capacity(ids.len());
        for &p in ids {
            let key = topic.partition(p);
            let paths = PartitionPaths::new(data, key);
            let mut root = DirTracker::new(&paths.root);
            for (dir, name) in [
                (&paths.segments, SEGMENTS_DIR),
                (&paths.consumers, CONSUMERS_DIR),
                (&paths.groups, GROUPS_DIR),
            ] {
                storage.create_dir_all(dir)?;
                root.note(name, NameChange::Created);
            }
            root.sync(storage)?;
            partitions_dir.note(&partition_dir_name(p), NameChange::Created);
            out.push(Partition::create(self.storage.clone(), data, key, options));
        }
        partitions_dir.sync(storage)?;

        dirchain::make_durable(storage, &pdir, Some(data.as_path()), &states)?;
        Ok(out)
    }
}
