//! Where every file lives. The one place that turns ids into paths.
//!
//! ```text
//! <data>/metadata                                   streams, topics, partitions, generations
//! <data>/metadata.tmp                               a metadata save in progress
//! <data>/root.credentials                           the root user's password hash
//! <data>/root.credentials.tmp                       a credentials save in progress
//! <data>/users                                      users, permissions, access tokens (hashed)
//! <data>/sessions                                   HTTP login signing key, logged-out tokens
//! <data>/data_dir.unconfirmed                       the data directory's own name not yet durable
//! <data>/streams/<s>/topics/<t>/partitions/<p>/
//!     segments/<generation:020>-<base_offset:020>.log   message batches
//!     segments/<generation:020>-<base_offset:020>.idx   sparse index
//!     consumers/<consumer_id>                         consumer offset (two slots)
//!     consumers/<consumer_id>.tmp                     a replacing store in progress
//!     groups/<group_id>                               consumer-group offset (two slots)
//!     purge.obligation                                purge cleanup obligation (two slots)
//!     retention.lwm                                   retention low-water mark (two slots)
//!     tiering.rec                                     tiered storage state (two slots)
//! ```
//! Any created name may be left as `<name>.redirty` by a crash inside a
//! re-dirty (`dirsync.rs`), and a dead file as `<name>.purged` by a crash
//! inside purge cleanup. Generation and base offset are zero-padded so a
//! directory listing (sorted bytewise) is already in (generation, offset)
//! order.
//!
//! Invariant: no other module spells a directory or file name; each asks
//! this one (a rename of a directory is then one edit, and a test that
//! builds a path agrees with the engine by construction). `tests/tidy.rs`
//! fails on a string literal elsewhere in `core/server/src` that spells one
//! of the names below, and on a name constant declared outside this file.
//!
//! `DirKind` names the three partition directories that hold records of a
//! generation (and that purge cleanup lists, removes from and syncs); its
//! variant order is part of the obligation record's encoding (ADR 0004 §8.8),
//! so variants are only ever appended.

use std::path::{Path, PathBuf};

use crate::metadata::{PartitionKey, TopicKey};

/// A partition directory that holds generation-tagged records.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum DirKind {
    Segments,
    Consumers,
    Groups,
}

impl DirKind {
    pub(crate) const ALL: [DirKind; 3] = [DirKind::Segments, DirKind::Consumers, DirKind::Groups];

    /// The directory's name inside the partition directory.
    pub fn as_str(self) -> &'static str {
        match self {
            DirKind::Segments => SEGMENTS_DIR,
            DirKind::Consumers => CONSUMERS_DIR,
            DirKind::Groups => GROUPS_DIR,
        }
    }
}

/// The directory under the data directory that holds every stream.
pub const STREAMS_DIR: &str = "streams";
/// A stream's directory of topics.
pub const TOPICS_DIR: &str = "topics";
/// A topic's directory of partitions.
pub const PARTITIONS_DIR: &str = "partitions";
/// A partition's directories, as named inside the partition directory.
pub(crate) const SEGMENTS_DIR: &str = "segments";
pub(crate) const CONSUMERS_DIR: &str = "consumers";
pub const GROUPS_DIR: &str = "groups";
/// The temporary name a re-dirty gives `<name>` between its two renames
/// (`dirsync.rs`): a crash between them leaves it.
pub const REDIRTY_SUFFIX: &str = ".redirty";
/// The temporary file a replacing offset store writes first
/// (`partition/offsets.rs`).
pub(crate) const REPLACE_SUFFIX: &str = ".tmp";
/// Inside the data directory while its own name (and those of ancestors the
/// engine created) is not yet confirmed durable (`datadir.rs`). Holds the
/// number of levels.
pub(crate) const UNCONFIRMED_MARKER: &str = "data_dir.unconfirmed";
/// The name purge cleanup gives a dead file, under the engine lock, before
/// unlinking it without the lock (ADR 0020): `<name>.purged` is dead
/// whatever it holds, and recovery and cleanup remove it.
pub const PURGED_SUFFIX: &str = ".purged";
/// The root user's credentials (a password hash, never the password), and
/// the temporary name a save writes first.
pub const CREDENTIALS_FILE: &str = "root.credentials";
pub(crate) const CREDENTIALS_TMP: &str = "root.credentials.tmp";
/// A partition's purge cleanup obligation (two slots).
pub const OBLIGATION_FILE: &str = "purge.obligation";
/// A partition's retention low-water mark: its first retained offset (two
/// slots, ADR 0016).
pub const LOW_WATER_FILE: &str = "retention.lwm";
/// A partition's tiering state: its segments in the object store, the
/// upload in flight and the remote deletions it owes (two slots, ADR 0027).
pub const TIERING_FILE: &str = "tiering.rec";
/// The users file (every user but root, with its permissions and tokens)
/// and the temporary name a save writes first.
pub const USERS_FILE: &str = "users";
pub(crate) const USERS_TMP: &str = "users.tmp";
/// The HTTP login tokens' signing key and the logged-out tokens
/// (`sessions.rs`), and the temporary name a save writes first.
pub const SESSIONS_FILE: &str = "sessions";
pub(crate) const SESSIONS_TMP: &str = "sessions.tmp";
/// The metadata file and the temporary name a save writes first.
pub(crate) const METADATA_FILE: &str = "metadata";
pub(crate) const METADATA_TMP: &str = "metadata.tmp";
/// A segment's two files: the message batches and the sparse index.
pub(crate) const LOG_EXT: &str = "log";
pub(crate) const INDEX_EXT: &str = "idx";
pub(crate) const SEGMENT_EXTS: [&str; 2] = [LOG_EXT, INDEX_EXT];

#[derive(Debug, Clone)]
pub struct PartitionPaths {
    pub root: PathBuf,
    pub segments: PathBuf,
    pub consumers: PathBuf,
    pub groups: PathBuf,
    pub obligation: PathBuf,
    pub low_water: PathBuf,
}

pub(crate) fn streams_dir(data: &Path) -> PathBuf {
    data.join(STREAMS_DIR)
}

pub(crate) fn stream_dir(data: &Path, stream: u32) -> PathBuf {
    streams_dir(data).join(stream.to_string())
}

pub(crate) fn topics_dir(data: &Path, stream: u32) -> PathBuf {
    stream_dir(data, stream).join(TOPICS_DIR)
}

pub(crate) fn topic_dir(data: &Path, stream: u32, topic: u32) -> PathBuf {
    topics_dir(data, stream).join(topic.to_string())
}

pub(crate) fn partitions_dir(data: &Path, topic: TopicKey) -> PathBuf {
    topic_dir(data, topic.stream, topic.topic).join(PARTITIONS_DIR)
}

/// The name of a partition's directory inside `partitions_dir`.
pub(crate) fn partition_dir_name(partition: u32) -> String {
    partition.to_string()
}

impl PartitionPaths {
    pub fn new(data: &Path, key: PartitionKey) -> Self {
        let root = partitions_dir(data, key.topic_key()).join(partition_dir_name(key.partition));
        PartitionPaths {
            segments: root.join(SEGMENTS_DIR),
            consumers: root.join(CONSUMERS_DIR),
            groups: root.join(GROUPS_DIR),
            obligation: root.join(OBLIGATION_FILE),
            low_water: root.join(LOW_WATER_FILE),
            root,
        }
    }

    /// The path of one of the partition's record directories.
    pub(crate) fn dir(&self, kind: DirKind) -> &Path {
        match kind {
            DirKind::Segments => &self.segments,
            DirKind::Consumers => &self.consumers,
            DirKind::Groups => &self.groups,
        }
    }
}

/// A segment's file names (`ext` is `LOG_EXT` or `INDEX_EXT`).
pub fn segment_name(generation: u64, base_offset: u64, ext: &str) -> String {
    format!("{generation:020}-{base_offset:020}.{ext}")
}

/// Parses `<generation>-<base_offset>.<ext>`.
pub fn parse_segment_name(name: &str) -> Option<(u64, u64, &str)> {
    let (stem, ext) = name.rsplit_once('.')?;
    let (g, b) = stem.split_once('-')?;
    if g.len() != 20 || b.len() != 20 {
        return None;
    }
    Some((g.parse().ok()?, b.parse().ok()?, ext))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_sort_by_generation_then_offset() {
        let a = segment_name(2, 100, "log");
        assert_eq!(parse_segment_name(&a), Some((2, 100, "log")));
        assert!(segment_name(1, 999, "log") < segment_name(2, 0, "log"));
        assert!(segment_name(2, 9, "log") < segment_name(2, 10, "log"));
        assert_eq!(parse_segment_name("garbage.log"), None);
        assert_eq!(parse_segment_name("1-2.log"), None);
    }
}
