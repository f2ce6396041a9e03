//! The batch record's decoder: reads version 1 (`v1::BatchRecord`) or 2
//! (`BatchRecord`) straight from its checked payload, as a `BatchView` that
//! borrows the payloads.
//!
//! Why by hand: decoding through serde (bincode's visitor per field and per
//! element) was about a quarter of a poll's time, for a layout that is
//! fixed. This reader does one bounds check per field and no allocation but
//! the message list (and a message's headers, which are owned).
//!
//! Invariants:
//! - It accepts exactly the payloads bincode 2's `standard()` configuration
//!   decodes as the version's record (little endian, variable-length
//!   integers, every byte consumed), and yields the same fields.
//!   The tests below hold it to that against bincode itself, on written,
//!   damaged and arbitrary bytes (and `tests/fuzz_decoders.rs` reaches it
//!   through segment recovery); the records' serde derives stay the
//!   definition of the formats, and `frame_batch` writes them.
//! - No input makes it panic or allocate beyond what the bytes can hold: a
//!   length is checked against the bytes left before anything is taken, and
//!   the message list's capacity is bounded by the bytes left (a message
//!   takes at least seven).
//!
//! The integer encoding (bincode's varint): a first byte below 251 is the
//! value; 251, 252, 253 and 254 announce a little-endian `u16`, `u32`,
//! `u64` and `u128`. A prefix wider than the field's type is an error.
//! `u8` is one raw byte; an `Option` is a tag byte 0 or 1; a byte slice
//! and a string are a length, then the bytes (a string's must be UTF-8); a
//! sequence and a map are a length, then their elements.
use super::message::{
    BatchVersion, BatchView, HeaderKey, HeaderValue, Headers, MessageView, STRING_KEY_KIND,
};
use crate::frame::FrameError;

const U16_PREFIX: u8 = 251;
const U32_PREFIX: u8 = 252;
const U64_PREFIX: u8 = 253;
const U128_PREFIX: u8 = 254;

/// The fewest bytes a message takes: five one-byte integers, a `None` tag
/// and an empty payload's length.
const MIN_MESSAGE_BYTES: usize = 7;

/// Decodes the whole of `payload` as a batch record of `version`.
pub(crate) fn batch(payload: &[u8], version: BatchVersion) -> Result<BatchView<'_>, FrameError> {
    let mut r = Reader {
        bytes: payload,
        version,
    };
    let generation = r.u64()?;
    let base_offset = r.u64()?;
    let count = r.len()?;
    let mut messages = Vec::with_capacity(count.min(r.bytes.len() / MIN_MESSAGE_BYTES));
    for _ in 0..count {
        messages.push(r.message()?);
    }
    if !r.bytes.is_empty() {
        return Err(FrameError::Decode(format!(
            "{} trailing bytes after the record",
            r.bytes.len()
        )));
    }
    Ok(BatchView {
        generation,
        base_offset,
        messages,
    })
}

/// What is left of the payload; every read takes from its front.
struct Reader<'a> {
    bytes: &'a [u8],
    version: BatchVersion,
}

fn end(need: usize) -> FrameError {
    FrameError::Decode(format!("unexpected end: {need} more bytes needed"))
}

fn too_wide(prefix: u8, field: &str) -> FrameError {
    FrameError::Decode(format!("integer prefix {prefix} is too wide for a {field}"))
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.bytes.len() {
            return Err(end(n - self.bytes.len()));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.array::<1>()?[0])
    }

    /// The prefix and, for a wide value, its bytes, up to `widest` prefix.
    fn varint(&mut self, widest: u8, field: &str) -> Result<u128, FrameError> {
        let prefix = self.u8()?;
        if prefix < U16_PREFIX {
            return Ok(u128::from(prefix));
        }
        if prefix > widest {
            return Err(too_wide(prefix, field));
        }
        Ok(match prefix {
            U16_PREFIX => u128::from(u16::from_le_bytes(self.array()?)),
            U32_PREFIX => u128::from(u32::from_le_bytes(self.array()?)),
            U64_PREFIX => u128::from(u64::from_le_bytes(self.array()?)),
            _ => u128::from_le_bytes(self.array()?),
        })
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        let v = self.varint(U32_PREFIX, "u32")?;
        u32::try_from(v).map_err(|_| FrameError::Decode(format!("{v} does not fit a u32")))
    }

    fn u64(&mut self) -> Result<u64, FrameError> {
        let v = self.varint(U64_PREFIX, "u64")?;
        u64::try_from(v).map_err(|_| FrameError::Decode(format!("{v} does not fit a u64")))
    }

    fn u128(&mut self) -> Result<u128, FrameError> {
        self.varint(U128_PREFIX, "u128")
    }

    /// A length (of bytes, a string, a sequence or a map).
    fn len(&mut self) -> Result<usize, FrameError> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| FrameError::Decode(format!("length {v} is too large")))
    }

    fn slice(&mut self) -> Result<&'a [u8], FrameError> {
        let n = self.len()?;
        self.take(n)
    }

    /// A version 1 key: a string.
    fn string_key(&mut self) -> Result<HeaderKey, FrameError> {
        let bytes = self.slice()?;
        std::str::from_utf8(bytes)
            .map_err(|e| FrameError::Decode(format!("header name is not UTF-8: {e}")))?;
        Ok(HeaderKey {
            kind: STRING_KEY_KIND,
            value: bytes.to_vec(),
        })
    }

    fn key(&mut self) -> Result<HeaderKey, FrameError> {
        match self.version {
            BatchVersion::V1 => self.string_key(),
            BatchVersion::V2 => Ok(HeaderKey {
                kind: self.u8()?,
                value: self.slice()?.to_vec(),
            }),
        }
    }

    fn option_u64(&mut self) -> Result<Option<u64>, FrameError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u64()?)),
            tag => Err(FrameError::Decode(format!(
                "option tag {tag} is neither 0 nor 1"
            ))),
        }
    }

    fn headers(&mut self) -> Result<Option<Headers>, FrameError> {
        match self.u8()? {
            0 => Ok(None),
            1 => {
                let n = self.len()?;
                let mut headers = Headers::new();
                for _ in 0..n {
                    let key = self.key()?;
                    let kind = self.u8()?;
                    let value = self.slice()?.to_vec();
                    // As a map decodes: a repeated key keeps its last value.
                    headers.insert(key, HeaderValue { kind, value });
                }
                Ok(Some(headers))
            }
            tag => Err(FrameError::Decode(format!(
                "option tag {tag} is neither 0 nor 1"
            ))),
        }
    }

    fn message(&mut self) -> Result<MessageView<'a>, FrameError> {
        Ok(MessageView {
            offset: self.u64()?,
            timestamp: self.u64()?,
            origin_timestamp: match self.version {
                BatchVersion::V1 => None,
                BatchVersion::V2 => self.option_u64()?,
            },
            id: self.u128()?,
            checksum: self.u32()?,
            headers: self.headers()?,
            payload: self.slice()?,
        })
    }
}

#[cfg(test)]
mod tests {
    //! The decoder against bincode's own decoding of each version's record
    //! (the format's definition): on written batches, and on arbitrary and
    //! mutated bytes, both accept the same payloads and yield the same
    //! fields.
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::super::message::{BatchRecord, Message, v1};
    use super::*;
    use crate::frame::{self, HEADER_LEN, Magic};

    /// The decoded view as the record it reads.
    fn owned(view: BatchView<'_>) -> BatchRecord {
        BatchRecord {
            generation: view.generation,
            base_offset: view.base_offset,
            messages: view
                .messages
                .into_iter()
                .map(|m| Message {
                    offset: m.offset,
                    timestamp: m.timestamp,
                    origin_timestamp: m.origin_timestamp,
                    id: m.id,
                    checksum: m.checksum,
                    headers: m.headers,
                    payload: Bytes::copy_from_slice(m.payload),
                })
                .collect(),
        }
    }

    /// A version 1 record as the version 2 record it reads as.
    fn from_v1(record: v1::BatchRecord) -> BatchRecord {
        BatchRecord {
            generation: record.generation,
            base_offset: record.base_offset,
            messages: record
                .messages
                .into_iter()
                .map(|m| Message {
                    offset: m.offset,
                    timestamp: m.timestamp,
                    origin_timestamp: None,
                    id: m.id,
                    checksum: m.checksum,
                    headers: m.headers.map(|h| {
                        h.into_iter()
                            .map(|(k, v)| (HeaderKey::string(&k), v))
                            .collect()
                    }),
                    payload: m.payload,
                })
                .collect(),
        }
    }

    /// What bincode decodes `payload` to, as `version`'s record.
    fn reference(payload: &[u8], version: BatchVersion) -> Result<BatchRecord, FrameError> {
        match version {
            BatchVersion::V1 => frame::decode_bare::<v1::BatchRecord>(payload).map(from_v1),
            BatchVersion::V2 => frame::decode_bare::<BatchRecord>(payload),
        }
    }

    fn v1_of(record: &v1::BatchRecord) -> Vec<u8> {
        let framed = frame::encode(Magic::BATCH, 1, record).unwrap();
        framed[HEADER_LEN..].to_vec()
    }

    fn v2_of(record: &BatchRecord) -> Vec<u8> {
        let framed = frame::encode(Magic::BATCH, 2, record).unwrap();
        framed[HEADER_LEN..].to_vec()
    }

    /// Both decoders on `payload`: the same record, or both an error.
    fn agree(payload: &[u8], version: BatchVersion) -> Result<(), TestCaseError> {
        let ours = batch(payload, version).map(owned);
        let reference = reference(payload, version);
        match (&ours, &reference) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(
                false,
                "decoders disagree on {version:?} {payload:02x?}: ours {ours:?}, bincode {reference:?}"
            ),
        }
        Ok(())
    }

    /// Integers around every prefix boundary, so each width is written.
    fn wide_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..251,
            251u64..=u64::from(u16::MAX) + 2,
            Just(u64::from(u32::MAX)),
            Just(u64::from(u32::MAX) + 1),
            any::<u64>(),
        ]
    }

    fn header_value() -> impl Strategy<Value = HeaderValue> {
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..6))
            .prop_map(|(kind, value)| HeaderValue { kind, value })
    }

    fn v1_message() -> impl Strategy<Value = v1::Message> {
        (
            wide_u64(),
            wide_u64(),
            prop_oneof![(0u128..300), any::<u128>()],
            any::<u32>(),
            proptest::option::of(proptest::collection::btree_map(
                ".{0,6}",
                header_value(),
                0..3,
            )),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |(offset, timestamp, id, checksum, headers, payload)| v1::Message {
                    offset,
                    timestamp,
                    id,
                    checksum,
                    headers,
                    payload: Bytes::from(payload),
                },
            )
    }

    fn message() -> impl Strategy<Value = Message> {
        let key = (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..6))
            .prop_map(|(kind, value)| HeaderKey { kind, value });
        (
            v1_message(),
            proptest::option::of(wide_u64()),
            proptest::option::of(proptest::collection::btree_map(key, header_value(), 0..3)),
        )
            .prop_map(|(m, origin_timestamp, headers)| Message {
                offset: m.offset,
                timestamp: m.timestamp,
                origin_timestamp,
                id: m.id,
                checksum: m.checksum,
                headers,
                payload: m.payload,
            })
    }

    fn v1_record() -> impl Strategy<Value = v1::BatchRecord> {
        (
            wide_u64(),
            wide_u64(),
            proptest::collection::vec(v1_message(), 0..6),
        )
            .prop_map(|(generation, base_offset, messages)| v1::BatchRecord {
                generation,
                base_offset,
                messages,
            })
    }

    fn record() -> impl Strategy<Value = BatchRecord> {
        (
            wide_u64(),
            wide_u64(),
            proptest::collection::vec(message(), 0..6),
        )
            .prop_map(|(generation, base_offset, messages)| BatchRecord {
                generation,
                base_offset,
                messages,
            })
    }

    fn damage(payload: &mut Vec<u8>, edits: Vec<(prop::sample::Index, u8, u8)>) {
        for (at, byte, how) in edits {
            if payload.is_empty() {
                payload.push(byte);
                continue;
            }
            let i = at.index(payload.len());
            match how {
                0 => payload[i] = byte,
                1 => payload.truncate(i),
                _ => payload.insert(i, byte),
            }
        }
    }

    fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, u8)>> {
        proptest::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop_oneof![any::<u8>(), 250u8..=255],
                0u8..3,
            ),
            1..4,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn a_written_v2_batch_decodes_to_the_record_written(record in record()) {
            let payload = v2_of(&record);
            let decoded = batch(&payload, BatchVersion::V2).map(owned);
            prop_assert_eq!(decoded.as_ref().ok(), Some(&record));
        }

        #[test]
        fn a_written_v1_batch_decodes_with_string_keys_and_no_origin(record in v1_record()) {
            let payload = v1_of(&record);
            let decoded = batch(&payload, BatchVersion::V1).map(owned);
            prop_assert_eq!(decoded.ok(), Some(from_v1(record)));
        }

        #[test]
        fn on_a_damaged_batch_both_decoders_agree(
            record in record(),
            old in v1_record(),
            edits in edits(),
        ) {
            let mut payload = v2_of(&record);
            damage(&mut payload, edits.clone());
            agree(&payload, BatchVersion::V2)?;
            let mut payload = v1_of(&old);
            damage(&mut payload, edits);
            agree(&payload, BatchVersion::V1)?;
        }

        #[test]
        fn on_arbitrary_bytes_both_decoders_agree(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            agree(&bytes, BatchVersion::V1)?;
            agree(&bytes, BatchVersion::V2)?;
        }
    }

    #[test]
    fn a_prefix_wider_than_its_field_is_refused_as_bincode_refuses_it() {
        let v1 = BatchVersion::V1;
        // generation 0, base 0, one message whose checksum (a u32) claims a
        // u64 prefix.
        let mut payload = vec![0, 0, 1, 0, 0, 0, U64_PREFIX];
        payload.extend_from_slice(&[0; 8]);
        payload.extend_from_slice(&[0, 0]);
        assert!(batch(&payload, v1).is_err());
        assert!(reference(&payload, v1).is_err());
        // A u64 (the generation) with a u128 prefix, its value small.
        let mut payload = vec![U128_PREFIX];
        payload.extend_from_slice(&5u128.to_le_bytes());
        payload.extend_from_slice(&[0, 0]);
        assert!(batch(&payload, v1).is_err());
        assert!(reference(&payload, v1).is_err());
        // The reserved prefix 255, in a u128 (the id).
        let payload = vec![0, 0, 1, 0, 0, 255, 0, 0, 0];
        assert!(batch(&payload, v1).is_err());
        assert!(reference(&payload, v1).is_err());
        // The same with a u32 prefix decodes, in both.
        let mut payload = vec![0, 0, 1, 0, 0, 0, U32_PREFIX];
        payload.extend_from_slice(&7u32.to_le_bytes());
        payload.extend_from_slice(&[0, 0]);
        let ours = batch(&payload, v1).map(owned).unwrap();
        assert_eq!(ours.messages[0].checksum, 7);
        assert_eq!(reference(&payload, v1).unwrap(), ours);
        // Version 2: an origin timestamp's option tag other than 0 or 1.
        let payload = vec![0, 0, 1, 0, 0, 2, 0, 0, 0, 0];
        assert!(batch(&payload, BatchVersion::V2).is_err());
        assert!(reference(&payload, BatchVersion::V2).is_err());
    }
}
