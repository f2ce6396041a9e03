//! Durable metadata: one framed file replaced atomically.
//!
//! A write is `persist::replace_file`: create `metadata.tmp` fresh, write the
//! record, sync it, rename it over `metadata`, sync the data directory. The
//! rename is the commit point (docs/adr/0004-on-disk-layout-and-formats.md).
//!
//! Invariants:
//! - After any crash, `metadata` holds either the previous or the new record,
//!   never a mix: the new bytes are durable before the name points at them,
//!   and the name flips in one rename.
//! - `save` returns only after the directory sync: a returned `Ok` is a durable
//!   commit. A failed `save` may or may not have committed; the caller must
//!   treat the in-memory change as not acknowledged and retry or report.
//! - A file is written as version 3 while no topic has a compression
//!   algorithm other than `none`, and as version 4 (version 3's record
//!   followed by a map of the topics that have one) otherwise: what the
//!   file held before compression was kept is byte for byte unchanged, and
//!   a version 3, 4 or 2 file reads.
//! - A missing file means a new, empty data directory. A present but invalid
//!   file is fatal at start-up, named by path: silently starting empty would
//!   "undo" every stream and every purge.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_storage::{DurableStorage, ErrorKind};

use std::collections::BTreeMap;

use super::model::{Compression, Metadata, MetadataV2};
use crate::error::{EngineError, Result};
use crate::frame::{self, Magic};

/// Version 4: version 3 followed by the topics' compression algorithms
/// (written only when a topic has one). Version 3: the pending deletions
/// (docs/adr/0015-every-deletion-is-an-obligation.md). Version 2 (ids
/// counted from 0, as Iggy 0.11 does: ADR 0013) is still read, as a
/// metadata file with no pending deletion.
pub const METADATA_VERSION: u16 = 4;
const METADATA_V3: u16 = 3;
const METADATA_V2: u16 = 2;

/// Version 4's addition: `(stream, topic)` → a compression other than none.
type CompressionMap = BTreeMap<(u32, u32), Compression>;

fn compression_map(meta: &Metadata) -> CompressionMap {
    meta.streams
        .values()
        .flat_map(|s| {
            s.topics
                .values()
                .map(move |t| ((s.id, t.id), t.options.compression))
        })
        .filter(|(_, c)| *c != Compression::None)
        .collect()
}

/// Puts version 4's map back into the topics it names (a name of a topic
/// not in the record is ignored: it cannot be, since both are one write).
fn apply_compression(meta: &mut Metadata, map: CompressionMap) {
    for ((s, t), c) in map {
        if let Some(topic) = meta
            .streams
            .get_mut(&s)
            .and_then(|st| st.topics.get_mut(&t))
        {
            topic.options.compression = c;
        }
    }
}
/// Metadata version 1 was written by pre-release sluice, whose ids started
/// at one. Its bytes decode, but its ids do not mean what an Iggy client
/// expects (a topic's first partition was 1, not 0), and renumbering would
/// move every directory. It is refused with a message that says so, and left
/// untouched.
pub const LEGACY_ONE_BASED_VERSION: u16 = 1;
const MAX_METADATA: usize = 64 << 20;

#[derive(Debug)]
pub struct MetadataStore {
    storage: Arc<dyn DurableStorage>,
    dir: PathBuf,
}

impl MetadataStore {
    pub fn new(storage: Arc<dyn DurableStorage>, data_dir: &Path) -> Self {
        MetadataStore {
            storage,
            dir: data_dir.to_path_buf(),
        }
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(crate::layout::METADATA_FILE)
    }

    /// Loads the committed metadata, or `None` for a fresh data directory.
    pub fn load(&self) -> Result<Option<Metadata>> {
        let path = self.path();
        let bytes = match self.storage.read_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let decoded = match frame::decode_header(Magic::METADATA, &bytes, MAX_METADATA) {
            Ok(h) if h.version == METADATA_V2 => {
                frame::decode::<MetadataV2>(Magic::METADATA, METADATA_V2, &bytes, MAX_METADATA)
                    .map(|(v2, used)| (Metadata::from(v2), used))
            }
            Ok(h) if h.version == METADATA_V3 => {
                frame::decode::<Metadata>(Magic::METADATA, METADATA_V3, &bytes, MAX_METADATA)
            }
            _ => frame::decode::<(Metadata, CompressionMap)>(
                Magic::METADATA,
                METADATA_VERSION,
                &bytes,
                MAX_METADATA,
            )
            .map(|((mut meta, map), used)| {
                apply_compression(&mut meta, map);
                (meta, used)
            }),
        };
        let (meta, used) = decoded.map_err(|e| match e {
            frame::FrameError::UnsupportedVersion {
                found: LEGACY_ONE_BASED_VERSION,
                ..
            } => EngineError::Incompatible {
                path: path.clone(),
                reason: "written by a pre-release sluice that numbered streams, topics, \
                                 partitions and groups from 1; this version numbers them from 0 \
                                 as Iggy 0.11 does and cannot open it. Start with an empty data \
                                 directory (the old one is left as it was)"
                    .into(),
            },
            e => EngineError::CorruptFile {
                path: path.clone(),
                offset: 0,
                reason: e.to_string(),
            },
        })?;
        if used != bytes.len() {
            return Err(EngineError::CorruptFile {
                path,
                offset: used as u64,
                reason: format!("{} bytes after the record", bytes.len() - used),
            });
        }
        Ok(Some(meta))
    }

    /// Durably replaces the metadata (see the module docs for the protocol).
    pub(crate) fn save(&self, meta: &Metadata) -> Result<()> {
        let map = compression_map(meta);
        let bytes = if map.is_empty() {
            frame::encode(Magic::METADATA, METADATA_V3, meta)
        } else {
            frame::encode(Magic::METADATA, METADATA_VERSION, &(meta, &map))
        }
        .map_err(|e| EngineError::Internal(format!("metadata does not encode: {e}")))?;
        crate::persist::replace_file(
            self.storage.as_ref(),
            &self.dir,
            crate::layout::METADATA_FILE,
            crate::layout::METADATA_TMP,
            &bytes,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::ResourceKey;
    use sluice_storage::SimStorage;
    use std::collections::BTreeMap;

    fn store_on(sim: &SimStorage) -> MetadataStore {
        let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
        MetadataStore::new(storage, Path::new("/"))
    }

    #[test]
    fn given_a_version_2_file_when_loaded_then_it_has_no_pending_deletion() {
        // Given a file as version 2 wrote it (the same fields, no deletions).
        let sim = SimStorage::with_seed(1);
        let v2 = MetadataV2 {
            version: 7,
            streams: BTreeMap::new(),
            next_stream_id: 3,
        };
        let bytes = frame::encode(Magic::METADATA, METADATA_V2, &v2).unwrap();
        let file = sim
            .open(
                &Path::new("/").join(crate::layout::METADATA_FILE),
                sluice_storage::OpenMode::CreateNew,
            )
            .unwrap();
        file.write_at(0, &bytes).unwrap();
        // When it is loaded, then it reads with nothing pending,
        let meta = store_on(&sim).load().unwrap().unwrap();
        assert_eq!((meta.version, meta.next_stream_id), (7, 3));
        assert!(meta.pending_deletions.is_empty());
        // and a save writes version 3, which reads back the same.
        let mut meta = meta;
        meta.pending_deletions
            .insert(ResourceKey::Stream { stream: 1 });
        store_on(&sim).save(&meta).unwrap();
        let header = frame::decode_header(
            Magic::METADATA,
            &sim.read_file(&Path::new("/").join(crate::layout::METADATA_FILE))
                .unwrap(),
            MAX_METADATA,
        )
        .unwrap();
        assert_eq!(header.version, METADATA_V3);
        assert_eq!(store_on(&sim).load().unwrap(), Some(meta));
    }

    #[test]
    fn given_a_topic_with_gzip_when_saved_then_version_4_keeps_it_and_without_it_version_3_is_written()
     {
        use crate::metadata::{StreamMeta, TopicMeta, TopicOptions};
        let sim = SimStorage::with_seed(2);
        let topic = |id: u32, compression| TopicMeta {
            id,
            name: format!("t{id}"),
            created_at: 1,
            options: TopicOptions {
                compression,
                ..TopicOptions::default()
            },
            message_expiry: 0,
            max_topic_size: 0,
            replication_factor: 1,
            partitions: BTreeMap::new(),
            groups: BTreeMap::new(),
            next_partition_id: 0,
            next_group_id: 0,
        };
        let mut meta = Metadata {
            version: 1,
            streams: BTreeMap::from([(
                0,
                StreamMeta {
                    id: 0,
                    name: "s".into(),
                    created_at: 1,
                    topics: BTreeMap::from([
                        (0, topic(0, Compression::None)),
                        (1, topic(1, Compression::Gzip)),
                    ]),
                    next_topic_id: 2,
                },
            )]),
            next_stream_id: 1,
            pending_deletions: Default::default(),
        };
        let path = Path::new("/").join(crate::layout::METADATA_FILE);
        let version = || {
            frame::decode_header(
                Magic::METADATA,
                &sim.read_file(&path).unwrap(),
                MAX_METADATA,
            )
            .unwrap()
            .version
        };
        // A gzip topic: version 4, read back whole.
        store_on(&sim).save(&meta).unwrap();
        assert_eq!(version(), METADATA_VERSION);
        assert_eq!(store_on(&sim).load().unwrap().as_ref(), Some(&meta));
        // None: version 3, the bytes version 3 wrote.
        if let Some(t) = meta.streams.get_mut(&0).and_then(|s| s.topics.get_mut(&1)) {
            t.options.compression = Compression::None;
        }
        store_on(&sim).save(&meta).unwrap();
        assert_eq!(version(), METADATA_V3);
        assert_eq!(
            sim.read_file(&path).unwrap(),
            frame::encode(Magic::METADATA, METADATA_V3, &meta).unwrap()
        );
        assert_eq!(store_on(&sim).load().unwrap(), Some(meta));
    }
}
