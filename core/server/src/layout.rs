//! Where every file lives. The one place that turns ids into paths.
//!
//! ```text
//! <data>/metadata                                   streams, topics, partitions, generations
//! <data>/streams/<s>/topics/<t>/partitions/<p>/
//!     segments/<generation:020>-<base_offset:020>.log   message batches
//!     segments/<generation:020>-<base_offset:020>.idx   sparse index
//!     consumers/<consumer_id>                         consumer offset (two slots)
//!     groups/<group_id>                               consumer-group offset (two slots)
//!     purge.obligation                                purge cleanup obligation (two slots)
//! ```
//! Generation and base offset are zero-padded so a directory listing (sorted
//! bytewise) is already in (generation, offset) order.
//!
//! `DirKind` names the three partition directories that hold records of a
//! generation (and that purge cleanup lists, removes from and syncs); its
//! variant order is part of the obligation record's encoding (ADR 0004 §8.8),
//! so variants are only ever appended.

use std::path::{Path, PathBuf};

use crate::metadata::PartitionKey;

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
    pub const ALL: [DirKind; 3] = [DirKind::Segments, DirKind::Consumers, DirKind::Groups];

    /// The directory's name inside the partition directory.
    pub fn as_str(self) -> &'static str {
        match self {
            DirKind::Segments => "segments",
            DirKind::Consumers => "consumers",
            DirKind::Groups => "groups",
        }
    }
}

/// The purge obligation file's name in the partition directory.
pub const OBLIGATION_FILE: &str = "purge.obligation";

/// The directory under the data directory that holds every stream.
pub const STREAMS_DIR: &str = "streams";

#[derive(Debug, Clone)]
pub struct PartitionPaths {
    pub root: PathBuf,
    pub segments: PathBuf,
    pub consumers: PathBuf,
    pub groups: PathBuf,
    pub obligation: PathBuf,
}

pub fn topic_dir(data: &Path, stream: u32, topic: u32) -> PathBuf {
    stream_dir(data, stream)
        .join("topics")
        .join(topic.to_string())
}

pub fn stream_dir(data: &Path, stream: u32) -> PathBuf {
    data.join(STREAMS_DIR).join(stream.to_string())
}

impl PartitionPaths {
    pub fn new(data: &Path, key: PartitionKey) -> Self {
        let root = topic_dir(data, key.stream, key.topic)
            .join("partitions")
            .join(key.partition.to_string());
        PartitionPaths {
            segments: root.join(DirKind::Segments.as_str()),
            consumers: root.join(DirKind::Consumers.as_str()),
            groups: root.join(DirKind::Groups.as_str()),
            obligation: root.join(OBLIGATION_FILE),
            root,
        }
    }

    /// The path of one of the partition's record directories.
    pub fn dir(&self, kind: DirKind) -> &Path {
        match kind {
            DirKind::Segments => &self.segments,
            DirKind::Consumers => &self.consumers,
            DirKind::Groups => &self.groups,
        }
    }
}

/// A segment's file names.
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
