//! Messages and the batch record they are stored in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A user header value: Iggy's header kind code and raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderValue {
    pub kind: u8,
    pub value: Vec<u8>,
}

pub type Headers = BTreeMap<String, HeaderValue>;

/// A message as stored and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub offset: u64,
    /// Microseconds since the Unix epoch, assigned on append.
    pub timestamp: u64,
    pub id: u128,
    pub checksum: u32,
    pub headers: Option<Headers>,
    pub payload: Vec<u8>,
}

/// A message as sent: `id == 0` asks the server to assign one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub id: u128,
    pub headers: Option<Headers>,
    pub payload: Vec<u8>,
}

impl NewMessage {
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        NewMessage {
            id: 0,
            headers: None,
            payload: payload.into(),
        }
    }
}

/// One appended batch: the unit of a write, a checksum and a torn-tail cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRecord {
    /// The purge generation the batch was acknowledged under.
    pub generation: u64,
    pub base_offset: u64,
    pub messages: Vec<Message>,
}

pub const BATCH_VERSION: u16 = 1;
/// Bound on one batch's payload; larger sends are refused before writing.
pub const MAX_BATCH_BYTES: usize = 32 << 20;

/// A sparse index entry: the batch starting at `offset` sits at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub offset: u64,
    pub position: u64,
    pub timestamp: u64,
}

pub const INDEX_VERSION: u16 = 1;
pub const MAX_INDEX_ENTRY: usize = 64;
