//! Messages and the batch record they are stored in.
//!
//! Byte fields (payloads, header values) go through serde's byte-slice path
//! (`raw_bytes`, `payload_bytes`): bincode then copies them whole instead of
//! encoding and decoding one `u8` element at a time. Its encoding of a byte
//! slice (a varint length, then the bytes) is the same as of a `Vec<u8>`
//! sequence (the same length, then one byte per element), so the format on
//! disk does not change (`tests/fuzz_decoders.rs` and the recovery tests
//! read batches written either way).
//!
//! Invariants:
//! - A served `Message`'s payload is a `Bytes` view into the one buffer its
//!   batch was read into (`BatchView` borrows the payloads out of the
//!   checked frame, `Log::read` turns each borrow into a view of that
//!   buffer): a poll costs one allocation and one read per batch, not one
//!   per message, and every byte it serves passed the batch's CRC32C.
//! - `BatchView` holds exactly what `BatchRecord` encodes (same fields,
//!   same order), read by `decode.rs` straight from the bytes bincode wrote:
//!   a second way to read version 1, not a new format.
use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::frame::{FrameBuilder, FrameError, Framed, Magic};

/// A user header value: Iggy's header kind code and raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderValue {
    pub kind: u8,
    #[serde(with = "raw_bytes")]
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
    #[serde(with = "payload_bytes")]
    pub payload: Bytes,
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

/// A stored message as it sits in its batch's bytes: the payload borrowed,
/// not copied (see the module invariants).
#[derive(Debug)]
pub(crate) struct MessageView<'a> {
    pub(crate) offset: u64,
    pub(crate) timestamp: u64,
    pub(crate) id: u128,
    pub(crate) checksum: u32,
    pub(crate) headers: Option<Headers>,
    pub(crate) payload: &'a [u8],
}

/// A `BatchRecord` decoded in place from its checked payload (`decode.rs`).
#[derive(Debug)]
pub(crate) struct BatchView<'a> {
    pub(crate) generation: u64,
    pub(crate) base_offset: u64,
    pub(crate) messages: Vec<MessageView<'a>>,
}

impl MessageView<'_> {
    /// The served message: its payload a view of `buffer`, which holds the
    /// bytes this view borrows from (`Bytes::slice_ref` finds the range; a
    /// payload outside `buffer` would be a bug, so it is copied instead of
    /// panicking).
    pub(crate) fn to_message(&self, buffer: &Bytes) -> Message {
        let inside = {
            let start = buffer.as_ptr() as usize;
            let p = self.payload.as_ptr() as usize;
            p >= start && p + self.payload.len() <= start + buffer.len()
        };
        let payload = if self.payload.is_empty() {
            Bytes::new()
        } else if inside {
            buffer.slice_ref(self.payload)
        } else {
            Bytes::copy_from_slice(self.payload)
        };
        Message {
            offset: self.offset,
            timestamp: self.timestamp,
            id: self.id,
            checksum: self.checksum,
            headers: self.headers.clone(),
            payload,
        }
    }
}

pub(crate) const BATCH_VERSION: u16 = 1;

/// Frames a batch as `frame::encode` frames the `BatchRecord` of the same
/// fields, byte for byte, but with large payloads left in place (written
/// from the messages' own buffers, see `FrameBuilder`). The record's fields
/// are encoded in the order `BatchRecord` and `Message` declare them.
pub(crate) fn frame_batch(
    generation: u64,
    base_offset: u64,
    messages: &[Message],
) -> Result<Framed<'_>, FrameError> {
    let small: usize = messages
        .iter()
        .map(|m| m.payload.len())
        .filter(|&n| n < 512)
        .sum();
    let mut b = FrameBuilder::new(32 + messages.len() * 48 + small);
    b.encode(&(generation, base_offset, messages.len() as u64))?;
    for m in messages {
        b.encode(&(m.offset, m.timestamp, m.id, m.checksum, &m.headers))?;
        b.bytes(&m.payload)?;
    }
    b.finish(Magic::BATCH, BATCH_VERSION)
}
/// Bound on one batch's payload; larger sends are refused before writing.
pub const MAX_BATCH_BYTES: usize = 32 << 20;

/// A sparse index entry: the batch starting at `offset` sits at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub offset: u64,
    pub position: u64,
    pub timestamp: u64,
}

pub(crate) const INDEX_VERSION: u16 = 1;
pub(crate) const MAX_INDEX_ENTRY: usize = 64;

/// `Bytes` through serde's byte path, as `raw_bytes` for `Vec<u8>`: the
/// decoded buffer becomes the `Bytes` without a copy.
mod payload_bytes {
    use bytes::Bytes;
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        super::raw_bytes::deserialize(d).map(Bytes::from)
    }
}

/// `Vec<u8>` through serde's byte path (see the module comment).
mod raw_bytes {
    use std::fmt;

    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        // Formats without a byte type hand over a sequence of numbers.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // The hint comes from the input: never trust it for more than a page.
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    fn message(offset: u64, payload: Vec<u8>, headers: Option<Headers>) -> Message {
        Message {
            offset,
            timestamp: 1_700_000_000_000_000 + offset,
            id: u128::from(offset) << 70 | 5,
            checksum: crc32c::crc32c(&payload),
            headers,
            payload: Bytes::from(payload),
        }
    }

    #[test]
    fn given_a_batch_when_framed_from_pieces_then_the_bytes_are_those_of_the_whole_record() {
        // Payloads on both sides of the borrow threshold, empty ones,
        // headers, and offsets whose varints take 1, 3 and 9 bytes.
        let headers = Some(Headers::from([(
            "key".to_string(),
            HeaderValue {
                kind: 3,
                value: vec![1, 2, 3],
            },
        )]));
        for base in [0u64, 300, u64::MAX / 2] {
            let messages: Vec<Message> = [0usize, 1, 511, 512, 513, 4096, 70_000]
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let h = if i % 2 == 0 { headers.clone() } else { None };
                    message(base + i as u64, vec![i as u8; n], h)
                })
                .collect();
            let framed = frame_batch(9, base, &messages).unwrap();
            let whole = frame::encode(
                Magic::BATCH,
                BATCH_VERSION,
                &BatchRecord {
                    generation: 9,
                    base_offset: base,
                    messages: messages.clone(),
                },
            )
            .unwrap();
            assert_eq!(framed.len(), whole.len());
            assert_eq!(framed.to_vec(), whole, "base {base}");
            // Large payloads are written from their own buffers.
            assert!(framed.slices().len() > 3);
        }
    }

    /// The shapes as they were before `raw_bytes`: plain `Vec<u8>` fields.
    #[derive(Serialize)]
    struct OldHeaderValue {
        kind: u8,
        value: Vec<u8>,
    }

    #[derive(Serialize)]
    struct OldMessage {
        offset: u64,
        timestamp: u64,
        id: u128,
        checksum: u32,
        headers: Option<BTreeMap<String, OldHeaderValue>>,
        payload: Vec<u8>,
    }

    #[test]
    fn given_a_message_when_encoded_through_the_byte_path_then_the_bytes_are_those_of_the_old_encoding()
     {
        let payload: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let new = Message {
            offset: 7,
            timestamp: 1_700_000_000_000_000,
            id: u128::MAX - 3,
            checksum: 42,
            headers: Some(Headers::from([(
                "k".to_string(),
                HeaderValue {
                    kind: 2,
                    value: vec![0, 200, 255],
                },
            )])),
            payload: Bytes::from(payload.clone()),
        };
        let old = OldMessage {
            offset: 7,
            timestamp: 1_700_000_000_000_000,
            id: u128::MAX - 3,
            checksum: 42,
            headers: Some(BTreeMap::from([(
                "k".to_string(),
                OldHeaderValue {
                    kind: 2,
                    value: vec![0, 200, 255],
                },
            )])),
            payload,
        };
        let new_bytes = frame::encode(Magic::BATCH, BATCH_VERSION, &new).unwrap();
        let old_bytes = frame::encode(Magic::BATCH, BATCH_VERSION, &old).unwrap();
        assert_eq!(new_bytes, old_bytes);
        let (decoded, used) =
            frame::decode::<Message>(Magic::BATCH, BATCH_VERSION, &old_bytes, MAX_BATCH_BYTES)
                .unwrap();
        assert_eq!(used, old_bytes.len());
        assert_eq!(decoded, new);
    }
}
