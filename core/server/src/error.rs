//! Engine errors: typed, and each names what it is about.

use std::path::PathBuf;

use sluice_storage::StorageError;

use crate::identifier::Identifier;
use crate::metadata::PartitionKey;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("stream {0} not found")]
    StreamNotFound(Identifier),
    #[error("topic {topic} not found in stream {stream}")]
    TopicNotFound {
        stream: Identifier,
        topic: Identifier,
    },
    #[error("partition {partition} not found in topic {topic} of stream {stream}")]
    PartitionNotFound {
        stream: u32,
        topic: u32,
        partition: u32,
    },
    #[error("consumer group {0} not found")]
    GroupNotFound(Identifier),
    #[error("client {client} is not a member of consumer group {group}")]
    GroupMemberNotFound { group: u32, client: u32 },
    #[error("partition {partition} is not assigned to this member of consumer group {group}")]
    PartitionNotOwned { group: u32, partition: u32 },
    #[error("{kind} name '{name}' is already taken")]
    NameTaken { kind: &'static str, name: String },
    #[error("{kind} id {id} is already taken")]
    IdTaken { kind: &'static str, id: u32 },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("offset {offset} is beyond the partition's current offset{}", match current { Some(c) => format!(" {c}"), None => " (the partition is empty)".to_string() })]
    OffsetOutOfRange { offset: u64, current: Option<u64> },
    #[error("partition {key} is degraded and refuses reads and writes: {reason}")]
    Degraded { key: PartitionKey, reason: String },
    #[error("corrupt file {}: at offset {offset}: {reason}", path.display())]
    CorruptFile {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A data directory this version does not open (written by an
    /// incompatible earlier format); nothing in it was changed.
    #[error("incompatible data directory file {}: {reason}", path.display())]
    Incompatible { path: PathBuf, reason: String },
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The engine cannot currently guarantee what it would acknowledge.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
