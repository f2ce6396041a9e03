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
//! - `BatchView` holds exactly what `BatchRecord` (version 2) or
//!   `v1::BatchRecord` (version 1) encodes, read by `decode.rs` straight
//!   from the bytes bincode wrote: a second way to read those formats, not
//!   a new one.
//! - A batch is written as version 1 whenever version 1 can hold it (no
//!   message carries a producer's origin timestamp, every header key is a
//!   UTF-8 string), and as version 2 otherwise (`BatchVersion::for_batch`).
//!   So a batch without what version 2 adds is byte for byte what earlier
//!   builds wrote, and both versions are read. A version 1 key reads as a key
//!   of kind `STRING_KEY_KIND`, and a version 1 message has no origin
//!   timestamp (it is served as its append time).
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::crc::{SHIFT_PAYS_AT, Shift};
use crate::frame::{FrameBuilder, FrameError, Framed, Magic, Plain};

/// A user header value: Iggy's header kind code and raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderValue {
    pub kind: u8,
    #[serde(with = "raw_bytes")]
    pub value: Vec<u8>,
}

/// A user header key: like a value, any of Iggy's kinds (a string is the
/// usual one, and the only one batch version 1 can hold).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HeaderKey {
    pub kind: u8,
    #[serde(with = "raw_bytes")]
    pub value: Vec<u8>,
}

/// The kind code of a string key (Iggy's `string`), the kind every key
/// of a version 1 batch has.
pub const STRING_KEY_KIND: u8 = 2;

impl HeaderKey {
    /// A key of kind string.
    pub fn string(name: &str) -> Self {
        HeaderKey {
            kind: STRING_KEY_KIND,
            value: name.as_bytes().to_vec(),
        }
    }

    /// The key as text, when it is a string key of UTF-8 bytes.
    pub fn as_str(&self) -> Option<&str> {
        (self.kind == STRING_KEY_KIND)
            .then(|| std::str::from_utf8(&self.value).ok())
            .flatten()
    }
}

impl From<&str> for HeaderKey {
    fn from(name: &str) -> Self {
        HeaderKey::string(name)
    }
}

pub type Headers = BTreeMap<HeaderKey, HeaderValue>;

/// A message as stored and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub offset: u64,
    /// Microseconds since the Unix epoch, assigned on append.
    pub timestamp: u64,
    /// The producer's timestamp of the message (microseconds since the Unix
    /// epoch), when it sent one; `None` means the append time.
    pub origin_timestamp: Option<u64>,
    pub id: u128,
    pub checksum: u32,
    pub headers: Option<Headers>,
    #[serde(with = "payload_bytes")]
    pub payload: Bytes,
}

impl Message {
    /// The producer's timestamp, or the append time when it sent none.
    pub fn origin(&self) -> u64 {
        self.origin_timestamp.unwrap_or(self.timestamp)
    }
}

/// A message as sent: `id == 0` asks the server to assign one.
///
/// Its payload's CRC32C is computed when it is made (on the connection's
/// worker, before the engine lock is taken) and is the stored message's
/// `checksum`; the batch frame's CRC is built from it without reading the
/// payload again (`crc::Shift`). The payload and its checksum are private,
/// so one never goes without the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub id: u128,
    /// The producer's timestamp (microseconds), when the transport carries one.
    pub origin_timestamp: Option<u64>,
    pub headers: Option<Headers>,
    /// A view of the request it came in (TCP), or its own buffer: the log
    /// writes it from there, so a payload is not copied on its way in.
    payload: Bytes,
    /// `crc32c(payload)`.
    checksum: u32,
}

impl NewMessage {
    pub fn new(payload: impl Into<Bytes>) -> Self {
        let payload = payload.into();
        NewMessage {
            id: 0,
            origin_timestamp: None,
            headers: None,
            checksum: crate::crc::crc32c(&payload),
            payload,
        }
    }

    pub fn with_id(self, id: u128) -> Self {
        NewMessage { id, ..self }
    }

    pub fn with_origin_timestamp(self, origin_timestamp: Option<u64>) -> Self {
        NewMessage {
            origin_timestamp,
            ..self
        }
    }

    pub fn with_headers(self, headers: Option<Headers>) -> Self {
        NewMessage { headers, ..self }
    }

    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The message as it is appended at `timestamp` with `id`, its offset
    /// assigned by the log.
    pub(crate) fn stored(self, timestamp: u64, id: u128) -> Message {
        debug_assert_eq!(
            self.checksum,
            crate::crc::crc32c(&self.payload),
            "a new message's checksum is its payload's"
        );
        Message {
            offset: 0,
            timestamp,
            origin_timestamp: self.origin_timestamp,
            id,
            checksum: self.checksum,
            headers: self.headers,
            payload: self.payload,
        }
    }
}

/// One appended batch: the unit of a write, a checksum and a torn-tail cut.
/// Its serde encoding defines batch version 2 (`v1` keeps version 1's).
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
    pub(crate) origin_timestamp: Option<u64>,
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
            origin_timestamp: self.origin_timestamp,
            id: self.id,
            checksum: self.checksum,
            headers: self.headers.clone(),
            payload,
        }
    }
}

/// The two versions of the batch payload (ADR 0004 §8.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchVersion {
    /// No origin timestamps, string header keys (`v1::BatchRecord`).
    V1,
    /// An optional origin timestamp per message, keys of any kind
    /// (`BatchRecord`).
    V2,
}

impl BatchVersion {
    pub(crate) const fn code(self) -> u16 {
        match self {
            BatchVersion::V1 => 1,
            BatchVersion::V2 => 2,
        }
    }

    /// The version a frame's header names, if this build reads it.
    pub(crate) fn from_code(code: u16) -> Option<Self> {
        match code {
            1 => Some(BatchVersion::V1),
            2 => Some(BatchVersion::V2),
            _ => None,
        }
    }

    /// The oldest version that holds every field of `messages`.
    pub(crate) fn for_batch(messages: &[Message]) -> Self {
        let fits_v1 = |m: &Message| {
            m.origin_timestamp.is_none()
                && m.headers
                    .iter()
                    .flatten()
                    .all(|(k, _)| k.as_str().is_some())
        };
        if messages.iter().all(fits_v1) {
            BatchVersion::V1
        } else {
            BatchVersion::V2
        }
    }
}

/// The newest batch version: what a reader of this build expects at most.
pub(crate) const BATCH_VERSION: BatchVersion = BatchVersion::V2;

/// Frames a batch as `frame::encode` frames the record of the same fields
/// in the version `BatchVersion::for_batch` picks (`v1::BatchRecord` or
/// `BatchRecord`), byte for byte, but with large payloads left in place
/// (written from the messages' own buffers, see `FrameBuilder`). The
/// record's fields are encoded in the order the record declares them.
pub(crate) fn frame_batch(
    generation: u64,
    base_offset: u64,
    messages: &[Message],
) -> Result<Framed<'_>, FrameError> {
    let version = BatchVersion::for_batch(messages);
    let small: usize = messages
        .iter()
        .map(|m| m.payload.len())
        .filter(|&n| n < 512)
        .sum();
    let mut b = FrameBuilder::new(32 + messages.len() * 48 + small);
    let shift = batch_shift(messages);
    b.encode(&(generation, base_offset, messages.len() as u64))?;
    for m in messages {
        let (payload, crc, shift) = (&m.payload[..], m.checksum, shift.as_deref());
        match version {
            // No headers (the usual message): the same fields without a
            // codec call (`Plain`, its tests compare it with the codec);
            // version 2 adds the origin timestamp after the append time.
            _ if m.headers.is_none() => {
                let mut fields = Plain::default();
                fields.uint(m.offset).uint(m.timestamp);
                if version == BatchVersion::V2 {
                    fields.option(m.origin_timestamp);
                }
                fields.uint128(m.id).uint(u64::from(m.checksum)).none();
                b.plain_then_bytes(&mut fields, payload, crc, shift)?;
            }
            BatchVersion::V1 => {
                // Every key is a string (`for_batch`): bincode encodes a
                // `str` as its bytes' length and the bytes.
                let headers = m.headers.as_ref().map(|h| {
                    h.iter()
                        .map(|(k, v)| (k.as_str().unwrap_or_default(), v))
                        .collect::<BTreeMap<&str, &HeaderValue>>()
                });
                let fields = (m.offset, m.timestamp, m.id, m.checksum, &headers);
                b.encoded_then_bytes(&fields, payload, crc, shift)?;
            }
            BatchVersion::V2 => {
                let fields = (
                    m.offset,
                    m.timestamp,
                    m.origin_timestamp,
                    m.id,
                    m.checksum,
                    &m.headers,
                );
                b.encoded_then_bytes(&fields, payload, crc, shift)?;
            }
        }
    }
    b.finish(Magic::BATCH, version.code())
}

/// The CRC shift for the batch's first payload length, when it pays: the
/// one this thread built last if the length is the same (a producer's
/// messages often are), else a new one if the payloads of that length add
/// up to `SHIFT_PAYS_AT`. Payloads of other lengths are checksummed again.
fn batch_shift(messages: &[Message]) -> Option<Rc<Shift>> {
    thread_local! {
        static LAST: RefCell<Option<Rc<Shift>>> = const { RefCell::new(None) };
    }
    let len = messages.first()?.payload.len();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some(shift) = last.as_ref().filter(|s| s.len() == len) {
            return Some(shift.clone());
        }
        let same = messages.iter().filter(|m| m.payload.len() == len).count();
        if same.saturating_mul(len) < SHIFT_PAYS_AT {
            return None;
        }
        let shift = Rc::new(Shift::new(len));
        *last = Some(shift.clone());
        Some(shift)
    })
}

/// Batch version 1, as earlier builds wrote it: still read, and still
/// written for a batch it can hold. These types define its encoding.
pub mod v1 {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use serde::{Deserialize, Serialize};

    use super::HeaderValue;

    /// A version 1 message: no origin timestamp, string header keys.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Message {
        pub offset: u64,
        pub timestamp: u64,
        pub id: u128,
        pub checksum: u32,
        pub headers: Option<BTreeMap<String, HeaderValue>>,
        #[serde(with = "super::payload_bytes")]
        pub payload: Bytes,
    }

    /// A version 1 batch.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct BatchRecord {
        pub generation: u64,
        pub base_offset: u64,
        pub messages: Vec<Message>,
    }
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
            origin_timestamp: None,
            id: u128::from(offset) << 70 | 5,
            checksum: crate::crc::crc32c(&payload),
            headers,
            payload: Bytes::from(payload),
        }
    }

    fn string_headers() -> Option<Headers> {
        Some(Headers::from([(
            HeaderKey::string("key"),
            HeaderValue {
                kind: 3,
                value: vec![1, 2, 3],
            },
        )]))
    }

    /// Payloads on both sides of the borrow threshold, empty ones, headers
    /// on every other message, and offsets whose varints take 1, 3 and 9
    /// bytes.
    fn batches(headers: Option<Headers>) -> Vec<(u64, Vec<Message>)> {
        [0u64, 300, u64::MAX / 2]
            .into_iter()
            .map(|base| {
                let messages = [0usize, 1, 511, 512, 513, 4096, 70_000]
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| {
                        let h = if i % 2 == 0 { headers.clone() } else { None };
                        message(base + i as u64, vec![i as u8; n], h)
                    })
                    .collect();
                (base, messages)
            })
            .collect()
    }

    fn as_v1(m: &Message) -> v1::Message {
        v1::Message {
            offset: m.offset,
            timestamp: m.timestamp,
            id: m.id,
            checksum: m.checksum,
            headers: m.headers.as_ref().map(|h| {
                h.iter()
                    .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
                    .collect()
            }),
            payload: m.payload.clone(),
        }
    }

    #[test]
    fn given_payloads_of_one_length_when_framed_with_their_crcs_then_the_bytes_are_those_of_the_record()
     {
        // given batches whose first length adds up to a shift (and, after
        // the first, one this thread has cached), with other lengths mixed in
        for (first_len, count) in [
            (1000usize, 100usize),
            (1000, 100),
            (70, 1000),
            (4096, 20),
            (600, 3),
        ] {
            let messages: Vec<Message> = (0..count)
                .map(|i| {
                    let len = if i % 7 == 3 {
                        first_len + 1 + i
                    } else {
                        first_len
                    };
                    let payload = (0..len).map(|b| (b * 31 + i) as u8).collect();
                    message(i as u64, payload, None)
                })
                .collect();
            let same = messages
                .iter()
                .filter(|m| m.payload.len() == first_len)
                .count();
            assert_eq!(
                batch_shift(&messages).is_some(),
                same * first_len >= SHIFT_PAYS_AT,
                "{same} x {first_len} B"
            );
            // when framed from the messages' CRCs
            let framed = frame_batch(9, 0, &messages).unwrap();
            // then the bytes are those of the record encoded whole
            let whole = frame::encode(
                Magic::BATCH,
                1,
                &v1::BatchRecord {
                    generation: 9,
                    base_offset: 0,
                    messages: messages.iter().map(as_v1).collect(),
                },
            )
            .unwrap();
            assert_eq!(framed.to_vec(), whole, "{count} x {first_len} B");
        }
    }

    #[test]
    fn given_a_batch_version_1_holds_when_framed_from_pieces_then_the_bytes_are_those_of_the_v1_record()
     {
        for (base, messages) in batches(string_headers()) {
            assert_eq!(BatchVersion::for_batch(&messages), BatchVersion::V1);
            let framed = frame_batch(9, base, &messages).unwrap();
            let whole = frame::encode(
                Magic::BATCH,
                1,
                &v1::BatchRecord {
                    generation: 9,
                    base_offset: base,
                    messages: messages.iter().map(as_v1).collect(),
                },
            )
            .unwrap();
            assert_eq!(framed.len(), whole.len());
            assert_eq!(framed.to_vec(), whole, "base {base}");
            // Large payloads are written from their own buffers.
            assert!(framed.slices().len() > 3);
        }
    }

    #[test]
    fn given_an_origin_timestamp_or_a_key_of_another_kind_when_framed_then_the_bytes_are_those_of_the_v2_record()
     {
        let int_key = Some(Headers::from([(
            HeaderKey {
                kind: 11,
                value: 7u32.to_le_bytes().to_vec(),
            },
            HeaderValue {
                kind: 2,
                value: b"seven".to_vec(),
            },
        )]));
        let with_origin = batches(string_headers()).into_iter().map(|(base, mut ms)| {
            ms[3].origin_timestamp = Some(1_600_000_000_000_000);
            (base, ms)
        });
        for (base, messages) in with_origin.chain(batches(int_key)) {
            assert_eq!(BatchVersion::for_batch(&messages), BatchVersion::V2);
            let framed = frame_batch(9, base, &messages).unwrap();
            let whole = frame::encode(
                Magic::BATCH,
                2,
                &BatchRecord {
                    generation: 9,
                    base_offset: base,
                    messages: messages.clone(),
                },
            )
            .unwrap();
            assert_eq!(framed.to_vec(), whole, "base {base}");
        }
    }

    #[test]
    fn given_a_string_key_that_is_not_utf8_then_only_version_2_holds_it() {
        let mut m = message(0, vec![1], None);
        m.headers = Some(Headers::from([(
            HeaderKey {
                kind: STRING_KEY_KIND,
                value: vec![0xff, 0xfe],
            },
            HeaderValue {
                kind: 1,
                value: vec![1],
            },
        )]));
        assert_eq!(BatchVersion::for_batch(&[m]), BatchVersion::V2);
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
        let new = v1::Message {
            offset: 7,
            timestamp: 1_700_000_000_000_000,
            id: u128::MAX - 3,
            checksum: 42,
            headers: Some(BTreeMap::from([(
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
        let new_bytes = frame::encode(Magic::BATCH, 1, &new).unwrap();
        let old_bytes = frame::encode(Magic::BATCH, 1, &old).unwrap();
        assert_eq!(new_bytes, old_bytes);
        let (decoded, used) =
            frame::decode::<v1::Message>(Magic::BATCH, 1, &old_bytes, MAX_BATCH_BYTES).unwrap();
        assert_eq!(used, old_bytes.len());
        assert_eq!(decoded, new);
    }
}
