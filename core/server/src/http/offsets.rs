//! Consumer offsets and consumer groups:
//! `GET|PUT /streams/{s}/topics/{t}/consumer-offsets`,
//! `DELETE .../consumer-offsets/{consumer_id}?partition_id=`,
//! `GET|POST .../consumer-groups`, `GET|DELETE .../consumer-groups/{group_id}`.
//!
//! Iggy's HTTP API always means an individual consumer here. The sluice
//! extension `consumer_kind=consumer_group` (query parameter on all three
//! offset routes, or a `consumer_kind` field in the PUT body) addresses the
//! offset of a consumer group instead; `consumer_id` is then the group's id
//! or name (docs/adr/0006-http-api-compatibility.md).
//!
//! Invariants:
//! - A missing offset is Iggy's 404 `consumer_offset_not_found`, on GET and
//!   on DELETE; an offset beyond the partition is a 400 `invalid_offset`.
//! - A group offset can only be read or written for a group that exists.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, ApiPath, ApiQuery, identifier};
use super::messages::parse_consumer;
use super::model::{self, ConsumerGroup, ConsumerGroupDetails};
use crate::engine::{DataWrite, Engine, FIRST_ID};
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult};

#[derive(Serialize)]
pub(crate) struct ConsumerOffsetInfo {
    partition_id: u32,
    current_offset: u64,
    stored_offset: u64,
}

fn consumer_id_of(field: &str, v: &serde_json::Value) -> ApiResult<String> {
    match v {
        serde_json::Value::Number(n) => Ok(n.to_string()),
        serde_json::Value::String(s) => Ok(s.clone()),
        _ => Err(ApiError::bad_request(
            field,
            "consumer_id must be a number or a string",
        )),
    }
}

pub(crate) async fn get_offset(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    query: ApiQuery,
) -> ApiResult<Json<ConsumerOffsetInfo>> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let consumer = parse_consumer(query.get("consumer_id"), query.get("consumer_kind"))?;
    let partition = query.u32("partition_id")?.unwrap_or(FIRST_ID);
    let (found, id) = state
        .engine(move |e| {
            let c = consumer.resolve(e, &s, &t)?;
            Ok((e.get_offset(&s, &t, partition, c)?, c.id))
        })
        .await?;
    match found {
        Some((current, stored)) => Ok(Json(ConsumerOffsetInfo {
            partition_id: partition,
            current_offset: current,
            stored_offset: stored,
        })),
        None => Err(ApiError::offset_not_found(id)),
    }
}

#[derive(Deserialize)]
pub(crate) struct StoreOffset {
    #[serde(default)]
    consumer_id: Option<serde_json::Value>,
    #[serde(default)]
    partition_id: Option<u32>,
    offset: u64,
    #[serde(default)]
    consumer_kind: Option<String>,
}

pub(crate) async fn store_offset(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    query: ApiQuery,
    ApiJson(body): ApiJson<StoreOffset>,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let raw_id = body
        .consumer_id
        .as_ref()
        .map(|v| consumer_id_of("consumer_id", v))
        .transpose()?;
    let kind = body.consumer_kind.as_deref().or(query.get("consumer_kind"));
    let consumer = parse_consumer(raw_id.as_deref(), kind)?;
    let partition = body.partition_id.unwrap_or(FIRST_ID);
    let offset = body.offset;
    let quick = |e: &_, (s, t): &_| Engine::waits_on_no_sync(e, s, t, DataWrite::Offsets);
    state
        .engine_quick((s, t), quick, move |e, (s, t)| {
            let c = consumer.resolve(e, &s, &t)?;
            Ok(e.store_offset(&s, &t, partition, c, offset)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete_offset(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id, consumer_id)): ApiPath<(String, String, String)>,
    query: ApiQuery,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let consumer = parse_consumer(Some(&consumer_id), query.get("consumer_kind"))?;
    let partition = query.u32("partition_id")?.unwrap_or(FIRST_ID);
    let (deleted, id) = state
        .engine(move |e| {
            let c = consumer.resolve(e, &s, &t)?;
            Ok((e.delete_offset(&s, &t, partition, c)?, c.id))
        })
        .await?;
    if deleted {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::offset_not_found(id))
    }
}

// ---- consumer groups ---------------------------------------------------

pub(crate) async fn list_groups(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
) -> ApiResult<Json<Vec<ConsumerGroup>>> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let groups = state
        .engine(move |e| {
            let topic = e.topic(&s, &t)?;
            let sid = e.resolve_stream(&s)?;
            Ok(topic
                .groups
                .values()
                .map(|g| model::group(topic, g, e.group_members(sid, topic.id, g.id).len()))
                .collect())
        })
        .await?;
    Ok(Json(groups))
}

pub(crate) async fn get_group(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id, group_id)): ApiPath<(String, String, String)>,
) -> ApiResult<Json<ConsumerGroupDetails>> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let g = identifier("group_id", &group_id)?;
    let details = state
        .engine(move |e| {
            let topic = e.topic(&s, &t)?;
            let group = e.group(&s, &t, &g)?;
            let sid = e.resolve_stream(&s)?;
            Ok(ConsumerGroupDetails::of(e, sid, topic, group))
        })
        .await?;
    Ok(Json(details))
}

#[derive(Deserialize)]
pub(crate) struct CreateGroup {
    name: String,
    /// Older Iggy clients may choose the id.
    #[serde(default)]
    group_id: Option<u32>,
}

pub(crate) async fn create_group(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<CreateGroup>,
) -> ApiResult<Json<ConsumerGroupDetails>> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let details = state
        .engine(move |e| {
            let group = e.create_group(&s, &t, body.group_id, &body.name)?;
            let topic = e.topic(&s, &t)?;
            tracing::info!(group_id = group.id, "consumer group created");
            Ok(ConsumerGroupDetails {
                group: model::group(topic, &group, 0),
                members: Vec::new(),
            })
        })
        .await?;
    Ok(Json(details))
}

pub(crate) async fn delete_group(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id, group_id)): ApiPath<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let g = identifier("group_id", &group_id)?;
    state
        .engine(move |e| Ok(e.delete_group(&s, &t, &g)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
