//! The answer to `GET …/messages`, written as JSON straight into one buffer.
//!
//! The shape is Iggy's (`PolledMessages`): `{"partition_id", "current_offset",
//! "count", "messages": [{"header": {"checksum", "id", "offset", "timestamp",
//! "origin_timestamp", "user_headers_length", "payload_length", "reserved"},
//! "payload": base64, "user_headers": [{"key": {"kind", "value"}, "value":
//! {"kind", "value"}}]}]}`, compact, fields in that order.
//!
//! Why not serde: serializing through `serde_json` encoded each payload into
//! a `String` of its own and then scanned it byte by byte for characters to
//! escape, which base64 never has: 41% of a 1 KB-message poll's samples
//! (docs/performance.md, issue 30). Here base64 goes straight into the
//! answer and numbers through `itoa`.
//!
//! Invariants:
//! - The bytes are exactly those `serde_json::to_vec` gives for the same
//!   answer as serde structs declare it; the tests keep those structs as the
//!   reference and compare, for messages with and without headers of every
//!   kind.
//! - Only text that needs no escaping is written unescaped: base64 (its
//!   alphabet is `A–Z a–z 0–9 + / =`), decimal numbers, and the fixed field
//!   names. A header kind's name goes through `serde_json`, so a name that
//!   needed escaping would still be valid JSON.

use super::messages::kind_name;
use crate::iggy::header_kinds;
use crate::partition::log::Message;

/// Iggy's answer to a poll, as JSON.
pub(crate) fn polled(partition_id: u32, current_offset: u64, messages: &[Message]) -> Vec<u8> {
    let estimate: usize = messages
        .iter()
        .map(|m| 256 + base64_len(m.payload.len()) + headers_estimate(m))
        .sum();
    let mut out = String::with_capacity(96 + estimate);
    out.push_str("{\"partition_id\":");
    number(&mut out, partition_id);
    out.push_str(",\"current_offset\":");
    number(&mut out, current_offset);
    out.push_str(",\"count\":");
    number(&mut out, u32::try_from(messages.len()).unwrap_or(u32::MAX));
    out.push_str(",\"messages\":[");
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        message(&mut out, m);
    }
    out.push_str("]}");
    out.into_bytes()
}

fn message(out: &mut String, m: &Message) {
    // Iggy's wire size of the headers: per entry kind + length + bytes, twice.
    let headers_len = header_kinds::wire_len(m.headers.as_ref());
    out.push_str("{\"header\":{\"checksum\":");
    number(out, u64::from(m.checksum));
    out.push_str(",\"id\":");
    number(out, m.id);
    out.push_str(",\"offset\":");
    number(out, m.offset);
    out.push_str(",\"timestamp\":");
    number(out, m.timestamp);
    out.push_str(",\"origin_timestamp\":");
    number(out, m.origin());
    out.push_str(",\"user_headers_length\":");
    number(out, u32::try_from(headers_len).unwrap_or(u32::MAX));
    out.push_str(",\"payload_length\":");
    number(out, u32::try_from(m.payload.len()).unwrap_or(u32::MAX));
    out.push_str(",\"reserved\":0},\"payload\":\"");
    super::base64::encode_into(&m.payload, out);
    out.push_str("\",\"user_headers\":[");
    for (i, (k, v)) in m.headers.iter().flatten().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"key\":");
        field(out, k.kind, &k.value);
        out.push_str(",\"value\":");
        field(out, v.kind, &v.value);
        out.push('}');
    }
    out.push_str("]}");
}

/// `{"kind": name, "value": base64}`.
fn field(out: &mut String, kind: u8, value: &[u8]) {
    out.push_str("{\"kind\":");
    // A fixed identifier; through serde_json all the same (module invariants).
    match serde_json::to_string(kind_name(kind)) {
        Ok(name) => out.push_str(&name),
        Err(_) => out.push_str("\"raw\""),
    }
    out.push_str(",\"value\":\"");
    super::base64::encode_into(value, out);
    out.push_str("\"}");
}

fn number(out: &mut String, n: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(n));
}

fn base64_len(n: usize) -> usize {
    n.div_ceil(3).saturating_mul(4)
}

fn headers_estimate(m: &Message) -> usize {
    m.headers
        .iter()
        .flatten()
        .map(|(k, v)| 64 + base64_len(k.value.len()) + base64_len(v.value.len()))
        .sum()
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use bytes::Bytes;
    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;
    use crate::partition::log::{HeaderKey, HeaderValue, Headers};

    // The answer as serde structs: the reference the writer must match.
    #[derive(Serialize)]
    struct PolledMessages {
        partition_id: u32,
        current_offset: u64,
        count: u32,
        messages: Vec<PolledMessage>,
    }

    #[derive(Serialize)]
    struct PolledMessage {
        header: MessageHeader,
        payload: String,
        user_headers: Vec<HeaderEntryOut>,
    }

    #[derive(Serialize)]
    struct MessageHeader {
        checksum: u64,
        id: u128,
        offset: u64,
        timestamp: u64,
        origin_timestamp: u64,
        user_headers_length: u32,
        payload_length: u32,
        reserved: u64,
    }

    #[derive(Serialize)]
    struct HeaderEntryOut {
        key: HeaderFieldOut,
        value: HeaderFieldOut,
    }

    #[derive(Serialize)]
    struct HeaderFieldOut {
        kind: &'static str,
        value: String,
    }

    fn reference(partition_id: u32, current_offset: u64, messages: &[Message]) -> Vec<u8> {
        let render = |m: &Message| PolledMessage {
            header: MessageHeader {
                checksum: u64::from(m.checksum),
                id: m.id,
                offset: m.offset,
                timestamp: m.timestamp,
                origin_timestamp: m.origin(),
                user_headers_length: header_kinds::wire_len(m.headers.as_ref()) as u32,
                payload_length: m.payload.len() as u32,
                reserved: 0,
            },
            payload: STANDARD.encode(&m.payload),
            user_headers: m
                .headers
                .iter()
                .flatten()
                .map(|(k, v)| HeaderEntryOut {
                    key: HeaderFieldOut {
                        kind: kind_name(k.kind),
                        value: STANDARD.encode(&k.value),
                    },
                    value: HeaderFieldOut {
                        kind: kind_name(v.kind),
                        value: STANDARD.encode(&v.value),
                    },
                })
                .collect(),
        };
        serde_json::to_vec(&PolledMessages {
            partition_id,
            current_offset,
            count: messages.len() as u32,
            messages: messages.iter().map(render).collect(),
        })
        .unwrap()
    }

    fn message() -> impl Strategy<Value = Message> {
        let header = (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..12));
        (
            (
                any::<u64>(),
                any::<u64>(),
                proptest::option::of(any::<u64>()),
            ),
            (any::<u128>(), any::<u32>()),
            proptest::collection::vec(any::<u8>(), 0..2000),
            proptest::option::of(proptest::collection::vec((header.clone(), header), 0..4)),
        )
            .prop_map(
                |((offset, timestamp, origin), (id, checksum), payload, headers)| {
                    let headers = headers.map(|entries| {
                        entries
                            .into_iter()
                            .map(|((kk, kv), (vk, vv))| {
                                (
                                    HeaderKey {
                                        kind: kk,
                                        value: kv,
                                    },
                                    HeaderValue {
                                        kind: vk,
                                        value: vv,
                                    },
                                )
                            })
                            .collect::<Headers>()
                    });
                    Message {
                        offset,
                        timestamp,
                        origin_timestamp: origin,
                        id,
                        checksum,
                        headers,
                        payload: Bytes::from(payload),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn the_written_answer_is_byte_for_byte_serde_jsons(
            partition_id in any::<u32>(),
            current_offset in any::<u64>(),
            messages in proptest::collection::vec(message(), 0..6),
        ) {
            let written = polled(partition_id, current_offset, &messages);
            prop_assert_eq!(
                String::from_utf8(written).unwrap(),
                String::from_utf8(reference(partition_id, current_offset, &messages)).unwrap()
            );
        }
    }

    #[test]
    fn given_no_messages_when_written_then_the_answer_is_iggys_empty_poll() {
        assert_eq!(
            String::from_utf8(polled(3, 41, &[])).unwrap(),
            r#"{"partition_id":3,"current_offset":41,"count":0,"messages":[]}"#
        );
    }
}
