//! Streams, topics and partitions: `/streams[/{stream_id}[/purge]]`,
//! `/streams/{s}/topics[/{topic_id}[/purge]]`, `/streams/{s}/topics/{t}/partitions`.
//!
//! Invariants:
//! - Every body and query value is validated before the engine is called;
//!   an invalid request reaches no engine method and changes nothing.
//! - Topic options and compression are checked by the Iggy layer
//!   (`crate::iggy::topic_options`, as over TCP); any other key or value is
//!   a 400 naming it.
//! - Status codes are Iggy's: create answers 200 with the details, update,
//!   delete and purge answer 204, partitions answer 201 / 204.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::extract::{ApiJson, ApiPath, ApiQuery, identifier};
use super::model::{self, Stream, StreamDetails, Topic, TopicDetails};
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult};
use crate::iggy::topic_options::{parse_compression, parse_topic_options, reject_options};
use crate::iggy::units::{expiry_from_iggy, from_iggy_limit};
use crate::metadata::TopicOptions;

// ---- streams -----------------------------------------------------------

pub(crate) async fn list_streams(State(state): State<AppState>) -> ApiResult<Json<Vec<Stream>>> {
    let streams = state
        .engine(|e| Ok(e.streams().map(|s| model::stream(e, s)).collect()))
        .await?;
    Ok(Json(streams))
}

pub(crate) async fn get_stream(
    State(state): State<AppState>,
    ApiPath(stream_id): ApiPath<String>,
) -> ApiResult<Json<StreamDetails>> {
    let id = identifier("stream_id", &stream_id)?;
    let details = state
        .engine(move |e| Ok(model::stream_details(e, e.stream(&id)?)))
        .await?;
    Ok(Json(details))
}

#[derive(Deserialize)]
pub(crate) struct CreateStream {
    name: String,
    /// Older Iggy clients may choose the id.
    #[serde(default)]
    stream_id: Option<u32>,
}

pub(crate) async fn create_stream(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateStream>,
) -> ApiResult<Json<StreamDetails>> {
    let details = state
        .engine(move |e| {
            let s = e.create_stream(body.stream_id, &body.name)?;
            tracing::info!(stream_id = s.id, "stream created");
            Ok(model::stream_details(e, &s))
        })
        .await?;
    Ok(Json(details))
}

#[derive(Deserialize)]
pub(crate) struct UpdateStream {
    name: String,
    #[serde(default)]
    options: BTreeMap<String, String>,
}

pub(crate) async fn update_stream(
    State(state): State<AppState>,
    ApiPath(stream_id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateStream>,
) -> ApiResult<StatusCode> {
    let id = identifier("stream_id", &stream_id)?;
    reject_options(&body.options)?;
    state
        .engine(move |e| Ok(e.update_stream(&id, &body.name)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete_stream(
    State(state): State<AppState>,
    ApiPath(stream_id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let id = identifier("stream_id", &stream_id)?;
    state.engine(move |e| Ok(e.delete_stream(&id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn purge_stream(
    State(state): State<AppState>,
    ApiPath(stream_id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let id = identifier("stream_id", &stream_id)?;
    state
        .engine(move |e| {
            e.purge_stream(&id)?;
            tracing::info!(stream = %id, "stream purged");
            Ok(())
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- topics ------------------------------------------------------------

pub(crate) async fn list_topics(
    State(state): State<AppState>,
    ApiPath(stream_id): ApiPath<String>,
) -> ApiResult<Json<Vec<Topic>>> {
    let id = identifier("stream_id", &stream_id)?;
    let topics = state
        .engine(move |e| {
            let s = e.stream(&id)?;
            Ok(s.topics
                .values()
                .map(|t| model::topic(e, s.id, t))
                .collect())
        })
        .await?;
    Ok(Json(topics))
}

pub(crate) async fn get_topic(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
) -> ApiResult<Json<TopicDetails>> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let details = state
        .engine(move |e| {
            let sid = e.resolve_stream(&s)?;
            Ok(model::topic_details(e, sid, e.topic(&s, &t)?))
        })
        .await?;
    Ok(Json(details))
}

#[derive(Deserialize)]
pub(crate) struct CreateTopic {
    name: String,
    #[serde(default = "one")]
    partitions_count: u32,
    #[serde(default)]
    compression_algorithm: Option<String>,
    #[serde(default)]
    message_expiry: u64,
    #[serde(default)]
    max_topic_size: u64,
    #[serde(default)]
    options: BTreeMap<String, String>,
    /// Older Iggy clients may choose the id and send a replication factor.
    #[serde(default)]
    topic_id: Option<u32>,
    #[serde(default)]
    replication_factor: Option<u8>,
}

fn one() -> u32 {
    1
}

pub(crate) async fn create_topic(
    State(state): State<AppState>,
    ApiPath(stream_id): ApiPath<String>,
    ApiJson(body): ApiJson<CreateTopic>,
) -> ApiResult<Json<TopicDetails>> {
    let s = identifier("stream_id", &stream_id)?;
    let options = TopicOptions {
        compression: parse_compression(body.compression_algorithm.as_deref())?.unwrap_or_default(),
        ..parse_topic_options(&body.options)?
    };
    let details = state
        .engine(move |e| {
            let t = e.create_topic(
                &s,
                body.topic_id,
                &body.name,
                body.partitions_count,
                options,
                expiry_from_iggy(body.message_expiry, e.default_message_expiry()),
                from_iggy_limit(body.max_topic_size),
                body.replication_factor.unwrap_or(1),
            )?;
            let sid = e.resolve_stream(&s)?;
            tracing::info!(
                stream_id = sid,
                topic_id = t.id,
                partitions = body.partitions_count,
                durability = options.durability.as_str(),
                consumer_offset_durability = options.consumer_offset_durability.as_str(),
                "topic created"
            );
            Ok(model::topic_details(e, sid, &t))
        })
        .await?;
    Ok(Json(details))
}

#[derive(Deserialize)]
pub(crate) struct UpdateTopic {
    name: String,
    #[serde(default)]
    compression_algorithm: Option<String>,
    #[serde(default)]
    message_expiry: Option<u64>,
    #[serde(default)]
    max_topic_size: Option<u64>,
    #[serde(default)]
    options: BTreeMap<String, String>,
}

pub(crate) async fn update_topic(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<UpdateTopic>,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let compression = parse_compression(body.compression_algorithm.as_deref())?;
    // Durability and segment size are fixed at creation.
    reject_options(&body.options)?;
    state
        .engine(move |e| {
            let current = e.topic(&s, &t)?;
            let expiry = body.message_expiry.map_or(current.message_expiry, |v| {
                expiry_from_iggy(v, e.default_message_expiry())
            });
            let max_size = body
                .max_topic_size
                .map_or(current.max_topic_size, from_iggy_limit);
            Ok(e.update_topic_with(&s, &t, &body.name, expiry, max_size, compression)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete_topic(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    state.engine(move |e| Ok(e.delete_topic(&s, &t)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn purge_topic(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    state
        .engine(move |e| {
            e.purge_topic(&s, &t)?;
            tracing::info!(stream = %s, topic = %t, "topic purged");
            Ok(())
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- partitions --------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct CreatePartitions {
    partitions_count: u32,
}

pub(crate) async fn create_partitions(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<CreatePartitions>,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    state
        .engine(move |e| Ok(e.create_partitions(&s, &t, body.partitions_count)?))
        .await?;
    Ok(StatusCode::CREATED)
}

pub(crate) async fn delete_partitions(
    State(state): State<AppState>,
    ApiPath((stream_id, topic_id)): ApiPath<(String, String)>,
    query: ApiQuery,
) -> ApiResult<StatusCode> {
    let s = identifier("stream_id", &stream_id)?;
    let t = identifier("topic_id", &topic_id)?;
    let count = query
        .u32("partitions_count")?
        .ok_or_else(|| ApiError::bad_request("partitions_count", "partitions_count is required"))?;
    state
        .engine(move |e| Ok(e.delete_partitions(&s, &t, count)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
