//! Messages: `POST|GET /streams/{s}/topics/{t}/messages`.
//!
//! Send body (Iggy's): `{"partitioning": {"kind": "balanced" | "partition_id"
//! | "messages_key", "value": base64}, "messages": [{"id": number | string,
//! "payload": base64, "user_headers": [{"key": {"kind", "value"}, "value":
//! {"kind", "value"}}]}]}`. Answer: 201, `{"confirmations": [...]}`, header
//! `iggy-durability: replicated | persisted` (what the SDK parses; `replicated`
//! is Iggy's name for the policy that is `buffered` on one node) and
//! `sluice-durability: buffered | persisted` (sluice's own name).
//!
//! Poll query (Iggy's): `consumer_id`, `partition_id`, `kind`
//! (`offset|timestamp|first|last|next`), `value`, `count`, `auto_commit`, and
//! the sluice extension `consumer_kind=consumer|consumer_group`.
//!
//! Invariants:
//! - The whole batch is decoded and validated (base64, ids, headers,
//!   partitioning) before the engine sees any of it: a bad message anywhere
//!   refuses the batch and appends nothing.
//! - The send answer is given only after the engine acknowledged the append
//!   under the topic's policy, and names that policy.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, ApiPath, ApiQuery, identifier};
use crate::engine::{DataWrite, Engine as Sluice, FIRST_ID, Partitioning, SendRequest};
use crate::iggy::AppState;
use crate::iggy::consumer::ConsumerId;
use crate::iggy::error::{ApiError, ApiResult, Class};
use crate::iggy::header_kinds;
use crate::metadata::Durability;
use crate::partition::PollingStrategy;
use crate::partition::log::{HeaderKey, HeaderValue as EngineHeader, Headers, NewMessage};

pub(crate) const DURABILITY_HEADER: &str = "iggy-durability";
pub(crate) const SLUICE_DURABILITY_HEADER: &str = "sluice-durability";
/// Iggy's bound on a messages key.
const MAX_KEY_LEN: usize = 255;
const DEFAULT_POLL_COUNT: u32 = 10;

pub(super) fn kind_name(code: u8) -> &'static str {
    header_kinds::by_code(code).map_or("raw", |k| k.name)
}

#[derive(Deserialize)]
pub(crate) struct SendBody {
    partitioning: PartitioningBody,
    messages: Vec<MessageBody>,
}

#[derive(Deserialize)]
struct PartitioningBody {
    kind: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct MessageBody {
    #[serde(default)]
    id: Option<serde_json::Value>,
    payload: Base64Payload,
    #[serde(default)]
    user_headers: Option<serde_json::Value>,
}

/// A message's payload, base64-decoded as the JSON is read: the text is
/// borrowed from the body (no `String` per message), and a decoding error is
/// kept for `parse_batch` to report naming the message, as before.
struct Base64Payload(Result<Vec<u8>, base64::DecodeError>);

impl<'de> Deserialize<'de> for Base64Payload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Base64Payload;
            // As a `String` field says it, so a payload of the wrong type is
            // refused in the same words.
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Base64Payload, E> {
                Ok(Base64Payload(super::base64::decode(text)))
            }
        }
        d.deserialize_str(Visitor)
    }
}

#[derive(Deserialize)]
struct HeaderEntryBody {
    key: HeaderFieldBody,
    value: HeaderFieldBody,
}

#[derive(Deserialize)]
struct HeaderFieldBody {
    kind: String,
    value: String,
}

fn decode_base64(field: &str, value: &str) -> ApiResult<Vec<u8>> {
    super::base64::decode(value)
        .map_err(|e| ApiError::bad_request(field, format!("{field} is not valid base64: {e}")))
}

fn parse_partitioning(p: &PartitioningBody) -> ApiResult<Partitioning> {
    let value = decode_base64("partitioning.value", &p.value)?;
    match p.kind.as_str() {
        "balanced" => Ok(Partitioning::Balanced),
        "partition_id" => {
            let bytes: [u8; 4] = value.as_slice().try_into().map_err(|_| {
                ApiError::bad_request(
                    "partitioning.value",
                    "partition_id partitioning needs a 4-byte little-endian id",
                )
            })?;
            Ok(Partitioning::PartitionId(u32::from_le_bytes(bytes)))
        }
        "messages_key" => {
            if value.is_empty() || value.len() > MAX_KEY_LEN {
                return Err(ApiError::new(
                    Class::BadRequest,
                    4028,
                    "invalid_key_value_length",
                    format!("a messages key must be 1 to {MAX_KEY_LEN} bytes"),
                    Some("partitioning.value"),
                ));
            }
            Ok(Partitioning::MessagesKey(value))
        }
        other => Err(ApiError::bad_request(
            "partitioning.kind",
            format!("unknown partitioning kind {other:?} (balanced, partition_id, messages_key)"),
        )),
    }
}

fn parse_id(index: usize, id: Option<&serde_json::Value>) -> ApiResult<u128> {
    let field = format!("messages[{index}].id");
    match id {
        None | Some(serde_json::Value::Null) => Ok(0),
        Some(serde_json::Value::Number(n)) => n.as_u64().map(u128::from).ok_or_else(|| {
            ApiError::bad_request(&field, "a message id must be an unsigned integer")
        }),
        Some(serde_json::Value::String(s)) => {
            if let Ok(id) = s.parse::<u128>() {
                return Ok(id);
            }
            let hex: String = s.chars().filter(|c| *c != '-').collect();
            if hex.len() == 32
                && let Ok(id) = u128::from_str_radix(&hex, 16)
            {
                return Ok(id);
            }
            Err(ApiError::bad_request(
                &field,
                format!("message id {s:?} is neither a decimal number nor a UUID"),
            ))
        }
        Some(_) => Err(ApiError::bad_request(
            &field,
            "a message id must be a number or a string",
        )),
    }
}

/// A header key or value: a known kind and a value of a size it takes
/// (`header_kinds::check`); `code` and `name` are the error to answer with.
fn parse_header_field(
    field: &str,
    h: &HeaderFieldBody,
    (code, name): (u32, &'static str),
) -> ApiResult<(u8, Vec<u8>)> {
    let Some(kind) = header_kinds::by_name(&h.kind) else {
        return Err(ApiError::new(
            Class::BadRequest,
            4040,
            "invalid_header_kind",
            format!("unknown header kind {:?}", h.kind),
            Some(field),
        ));
    };
    let value = decode_base64(field, &h.value)?;
    header_kinds::check(kind.code, value.len())
        .map_err(|reason| ApiError::new(Class::BadRequest, code, name, reason, Some(field)))?;
    Ok((kind.code, value))
}

fn parse_headers(index: usize, raw: Option<&serde_json::Value>) -> ApiResult<Option<Headers>> {
    let field = format!("messages[{index}].user_headers");
    let entries = match raw {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(_)) => {
            return Err(ApiError::bad_request(
                &field,
                "raw (base64) user headers are not supported; send them as key/value entries",
            ));
        }
        Some(v) => serde_json::from_value::<Vec<HeaderEntryBody>>(v.clone()).map_err(|e| {
            ApiError::bad_request(&field, format!("user headers are malformed: {e}"))
        })?,
    };
    if entries.is_empty() {
        return Ok(None);
    }
    let mut headers = BTreeMap::new();
    for entry in &entries {
        let (kind, value) = parse_header_field(&field, &entry.key, (4018, "invalid_header_key"))?;
        let key = HeaderKey { kind, value };
        let (kind, value) =
            parse_header_field(&field, &entry.value, (4019, "invalid_header_value"))?;
        headers.insert(key, EngineHeader { kind, value });
    }
    Ok(Some(headers))
}

/// Decodes and validates a whole batch (nothing reaches the engine on error).
fn parse_batch(body: SendBody) -> ApiResult<(Partitioning, Vec<NewMessage>)> {
    let partitioning = parse_partitioning(&body.partitioning)?;
    if body.messages.is_empty() {
        return Err(ApiError::new(
            Class::BadRequest,
            4009,
            "invalid_messages_count",
            "a send must carry at least one message",
            Some("messages"),
        ));
    }
    let mut out = Vec::with_capacity(body.messages.len());
    for (i, m) in body.messages.into_iter().enumerate() {
        let payload = match m.payload.0 {
            Ok(payload) => payload,
            Err(e) => {
                let field = format!("messages[{i}].payload");
                return Err(ApiError::bad_request(
                    &field,
                    format!("{field} is not valid base64: {e}"),
                ));
            }
        };
        if payload.is_empty() {
            return Err(ApiError::new(
                Class::BadRequest,
                4024,
                "empty_message_payload",
                "Empty message payload",
                Some(&format!("messages[{i}].payload")),
            ));
        }
        // Iggy's HTTP send carries no origin timestamp: the append time.
        out.push(
            NewMessage::new(payload)
                .with_id(parse_id(i, m.id.as_ref())?)
                .with_headers(parse_headers(i, m.user_headers.as_ref())?),
        );
    }
    Ok((partitioning, out))
}

#[derive(Serialize)]
struct Confirmations {
    confirmations: Vec<Confirmation>,
}

#[derive(Serialize)]
struct Confirmation {
    stream_id: u32,
    topic_id: u32,
    partition_id: u32,
    base_offset: u64,
}

pub(crate) async fn send(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<SendBody>,
) -> ApiResult<Response> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let (partitioning, messages) = parse_batch(body)?;
    let sent = state
        .send(SendRequest {
            stream: s,
            topic: t,
            partitioning,
            messages,
        })
        .await?;
    let (sid, tid) = (sent.topic.stream, sent.topic.topic);
    let (iggy, sluice) = match sent.durability {
        Durability::Buffered => ("replicated", "buffered"),
        Durability::Persisted => ("persisted", "persisted"),
    };
    let body = Confirmations {
        confirmations: vec![Confirmation {
            stream_id: sid,
            topic_id: tid,
            partition_id: sent.partition_id,
            base_offset: sent.base_offset,
        }],
    };
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static(DURABILITY_HEADER),
        HeaderValue::from_static(iggy),
    );
    headers.insert(
        HeaderName::from_static(SLUICE_DURABILITY_HEADER),
        HeaderValue::from_static(sluice),
    );
    Ok(response)
}

/// The consumer a poll or an offset route names: `consumer_id` (a number or
/// a name: a consumer's name maps to its number as Iggy maps it, a group's
/// is looked up) and the `consumer_kind` extension.
pub(crate) fn parse_consumer(raw_id: Option<&str>, kind: Option<&str>) -> ApiResult<ConsumerId> {
    let raw = raw_id.unwrap_or("1");
    match kind.unwrap_or("consumer") {
        "consumer" => Ok(ConsumerId::Consumer(
            identifier("consumer_id", raw.trim())?.consumer_id(),
        )),
        "consumer_group" => Ok(ConsumerId::Group(identifier("consumer_id", raw)?)),
        other => Err(ApiError::bad_request(
            "consumer_kind",
            format!("consumer_kind must be consumer or consumer_group, got {other:?}"),
        )),
    }
}

fn polling_strategy(query: &ApiQuery) -> ApiResult<PollingStrategy> {
    let value = query.u64("value")?.unwrap_or(0);
    Ok(match query.get("kind").unwrap_or("offset") {
        "offset" | "o" => PollingStrategy::Offset(value),
        "timestamp" | "t" => PollingStrategy::Timestamp(value),
        "first" | "f" => PollingStrategy::First,
        "last" | "l" => PollingStrategy::Last,
        "next" | "n" => PollingStrategy::Next,
        other => {
            return Err(ApiError::bad_request(
                "kind",
                format!("unknown polling kind {other:?} (offset, timestamp, first, last, next)"),
            ));
        }
    })
}

pub(crate) async fn poll(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    query: ApiQuery,
) -> ApiResult<Response> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let consumer = parse_consumer(query.get("consumer_id"), query.get("consumer_kind"))?;
    // Iggy defaults to its first partition; sluice's ids start at FIRST_ID.
    let partition = query.u32("partition_id")?.unwrap_or(FIRST_ID);
    let strategy = polling_strategy(&query)?;
    // A count of 0 is an empty poll carrying the partition's current offset,
    // as Iggy answers it; above the server's limit, that many.
    let count = state
        .limits
        .poll_count(query.u32("count")?.unwrap_or(DEFAULT_POLL_COUNT));
    let auto_commit = query.bool("auto_commit")?.unwrap_or(false);
    let writes = DataWrite::polling(auto_commit);
    let quick = move |e: &_, (s, t): &_| Sluice::waits_on_no_sync(e, s, t, writes);
    let polled = state
        .engine_quick((s, t), quick, move |e, (s, t)| {
            let consumer = consumer.resolve(e, &s, &t)?;
            Ok(e.poll(
                &s,
                &t,
                partition,
                consumer,
                strategy,
                u64::from(count),
                auto_commit,
            )?)
        })
        .await?;
    let body =
        super::polled_json::polled(polled.partition_id, polled.current_offset, &polled.messages);
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    fn body(json: serde_json::Value) -> SendBody {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn given_a_valid_batch_when_parsed_then_ids_headers_and_partitioning_decode() {
        let b = body(serde_json::json!({
            "partitioning": {"kind": "partition_id", "value": STANDARD.encode(2u32.to_le_bytes())},
            "messages": [
                {"id": 7, "payload": STANDARD.encode("a"), "user_headers": [
                    {"key": {"kind": "string", "value": STANDARD.encode("trace")},
                     "value": {"kind": "uint32", "value": STANDARD.encode(5u32.to_le_bytes())}}
                ]},
                {"id": "0123456789abcdef0123456789abcdef", "payload": STANDARD.encode("b")}
            ]
        }));
        let (p, msgs) = parse_batch(b).unwrap();
        assert_eq!(p, Partitioning::PartitionId(2));
        assert_eq!(msgs[0].id, 7);
        assert_eq!(msgs[1].id, 0x0123456789abcdef0123456789abcdef);
        let h = msgs[0].headers.as_ref().unwrap();
        assert_eq!(
            h[&crate::partition::log::HeaderKey::string("trace")].kind,
            11
        );
    }

    #[test]
    fn given_invalid_base64_anywhere_when_parsed_then_the_batch_is_refused_naming_it() {
        let b = body(serde_json::json!({
            "partitioning": {"kind": "balanced", "value": ""},
            "messages": [
                {"payload": STANDARD.encode("ok")},
                {"payload": "***not base64***"}
            ]
        }));
        let e = parse_batch(b).unwrap_err();
        assert_eq!(e.class, Class::BadRequest);
        assert_eq!(e.body.field.as_deref(), Some("messages[1].payload"));
    }

    #[test]
    fn given_a_wrong_partition_id_length_when_parsed_then_it_is_refused() {
        let b = body(serde_json::json!({
            "partitioning": {"kind": "partition_id", "value": STANDARD.encode([1u8, 2])},
            "messages": [{"payload": STANDARD.encode("x")}]
        }));
        assert!(parse_batch(b).is_err());
    }
}
