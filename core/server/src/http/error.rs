//! API errors: every failure a request can meet, rendered as Iggy's JSON error
//! body `{"id": u32, "code": "snake_case", "reason": "text", "field": "name" | null}`
//! with Iggy's status codes (404 for missing resources, 401 for missing or bad
//! tokens, 400 for everything the caller got wrong, 413 for oversized bodies),
//! plus 503 (`unavailable`, `partition_degraded`) and 507 (`storage_full`:
//! the data directory's device is out of space) for sluice-only conditions.
//!
//! Invariants:
//! - A 4xx means the request was refused before or by validation; nothing
//!   changed. A 5xx is a server-side failure (storage, a degraded partition,
//!   an internal error); it is logged with its full cause.
//! - Ids and codes are Iggy's (`IggyError::as_code` / `as_string` in
//!   iggy_common 0.11) wherever Iggy has a matching error, so clients that
//!   branch on `code` keep working. sluice-only conditions use codes that
//!   Iggy does not (`partition_degraded`, `storage_full`, `storage_error`).
//! - The reason never carries a secret (no passwords, no tokens).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use sluice_storage::ErrorKind;

use crate::error::EngineError;

/// Iggy's error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ErrorBody {
    pub(crate) id: u32,
    pub(crate) code: String,
    pub(crate) reason: String,
    pub(crate) field: Option<String>,
}

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) body: ErrorBody,
    /// Close the connection after answering (the body was not read).
    pub(crate) close: bool,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        id: u32,
        code: &str,
        reason: impl Into<String>,
        field: Option<&str>,
    ) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                id,
                code: code.to_string(),
                reason: reason.into(),
                field: field.map(str::to_string),
            },
            close: false,
        }
    }

    /// A malformed request: Iggy's `invalid_format` (4) naming the field.
    pub(crate) fn bad_request(field: &str, reason: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            4,
            "invalid_format",
            reason,
            Some(field),
        )
    }

    /// A request body that is not the JSON the route expects.
    pub(crate) fn invalid_json(reason: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, 4, "invalid_format", reason, None)
    }

    /// An unknown or unsupported option key / value (Iggy 4041 / 4042).
    pub(crate) fn unsupported_option(key: &str) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            4041,
            "unsupported_option_key",
            format!("Unsupported option key: {key}"),
            Some(key),
        )
    }

    pub(crate) fn invalid_option_value(key: &str, value: &str, allowed: &str) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            4042,
            "invalid_option_value",
            format!("Invalid option value for key: {key}: {value:?} (expected {allowed})"),
            Some(key),
        )
    }

    pub(crate) fn unauthenticated() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            40,
            "unauthenticated",
            "Unauthenticated",
            None,
        )
    }

    pub(crate) fn invalid_credentials() -> Self {
        // Iggy answers a failed login with 400 (only token errors are 401).
        ApiError::new(
            StatusCode::BAD_REQUEST,
            42,
            "invalid_credentials",
            "Invalid credentials",
            None,
        )
    }

    pub(crate) fn route_not_found() -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            404,
            "not_found",
            "Resource not found",
            None,
        )
    }

    pub(crate) fn method_not_allowed() -> Self {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            3,
            "invalid_command",
            "Method not allowed on this resource",
            None,
        )
    }

    pub(crate) fn client_not_found(client_id: u32) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            100,
            "client_not_found",
            format!("Client with ID: {client_id} was not found."),
            Some("client_id"),
        )
    }

    pub(crate) fn offset_not_found(consumer_id: u32) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            3021,
            "consumer_offset_not_found",
            format!("Consumer offset for consumer with ID: {consumer_id} was not found."),
            Some("consumer_id"),
        )
    }

    pub(crate) fn internal(reason: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, 1, "error", reason, None)
    }
}

/// Maps an engine error to Iggy's id, code, status and field.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let reason = e.to_string();
        match &e {
            EngineError::StreamNotFound(_) => ApiError::new(
                StatusCode::NOT_FOUND,
                1009,
                "stream_id_not_found",
                reason,
                Some("stream_id"),
            ),
            EngineError::TopicNotFound { .. } => ApiError::new(
                StatusCode::NOT_FOUND,
                2010,
                "topic_id_not_found",
                reason,
                Some("topic_id"),
            ),
            EngineError::PartitionNotFound { .. } => ApiError::new(
                StatusCode::NOT_FOUND,
                3007,
                "partition_not_found",
                reason,
                Some("partition_id"),
            ),
            EngineError::GroupNotFound(_) => ApiError::new(
                StatusCode::NOT_FOUND,
                5000,
                "consumer_group_id_not_found",
                reason,
                Some("consumer_group_id"),
            ),
            EngineError::GroupMemberNotFound { .. } => ApiError::new(
                StatusCode::NOT_FOUND,
                5006,
                "consumer_group_member_not_found",
                reason,
                Some("consumer_group_id"),
            ),
            EngineError::PartitionNotOwned { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                5009,
                "consumer_group_partition_not_owned",
                reason,
                Some("partition_id"),
            ),
            EngineError::NameTaken { kind, .. } => {
                let (id, code) = match *kind {
                    "stream" => (1012, "stream_name_already_exists"),
                    "topic" => (2013, "topic_name_already_exists"),
                    "consumer group" => (5004, "consumer_group_name_already_exists"),
                    _ => (3, "invalid_command"),
                };
                ApiError::new(StatusCode::BAD_REQUEST, id, code, reason, Some("name"))
            }
            EngineError::IdTaken { kind, .. } => {
                let (id, code, field) = match *kind {
                    "stream" => (1014, "invalid_stream_id", "stream_id"),
                    "topic" => (2016, "invalid_topic_id", "topic_id"),
                    "consumer group" => (5002, "invalid_consumer_group_id", "consumer_group_id"),
                    _ => (3, "invalid_command", "id"),
                };
                ApiError::new(StatusCode::BAD_REQUEST, id, code, reason, Some(field))
            }
            EngineError::Invalid { what, .. } => {
                let (id, code, field) = match *what {
                    "stream name" => (1013, "invalid_stream_name", "name"),
                    "topic name" => (2014, "invalid_topic_name", "name"),
                    "consumer group name" => (5005, "invalid_consumer_group_name", "name"),
                    "partitions_count" => (2019, "invalid_partitions_count", "partitions_count"),
                    "messages" => (4009, "invalid_messages_count", "messages"),
                    "partitioning" => (4028, "invalid_key_value_length", "partitioning"),
                    other => (3, "invalid_command", other),
                };
                ApiError::new(StatusCode::BAD_REQUEST, id, code, reason, Some(field))
            }
            EngineError::OffsetOutOfRange { offset, .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                4100,
                "invalid_offset",
                format!("Invalid offset: {offset}: {reason}"),
                Some("offset"),
            ),
            EngineError::Degraded { .. } => {
                tracing::error!(error = %e, "request refused by a degraded partition");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    1,
                    "partition_degraded",
                    reason,
                    Some("partition_id"),
                )
            }
            EngineError::Unavailable(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                1,
                "unavailable",
                reason,
                None,
            ),
            // The disk is full (ENOSPC, or EDQUOT/EFBIG as `DiskStorage`
            // reports them): nothing was acknowledged, and the same request
            // succeeds once space returns. 507 tells clients and proxies it is
            // the server's storage, not the request, and not a crash.
            EngineError::Storage(s) if s.kind == ErrorKind::NoSpace => {
                tracing::error!(error = %e, "request failed: no space left on the data directory's device");
                ApiError::new(
                    StatusCode::INSUFFICIENT_STORAGE,
                    1,
                    "storage_full",
                    reason,
                    None,
                )
            }
            EngineError::CorruptFile { .. }
            | EngineError::Incompatible { .. }
            | EngineError::Storage(_)
            | EngineError::Internal(_) => {
                tracing::error!(error = %e, "request failed in the engine");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    1,
                    "storage_error",
                    reason,
                    None,
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if self.close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identifier::Identifier;

    #[test]
    fn given_a_missing_stream_when_mapped_then_it_is_iggys_404_body() {
        let e = ApiError::from(EngineError::StreamNotFound(Identifier::Numeric(7)));
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert_eq!(e.body.id, 1009);
        assert_eq!(e.body.code, "stream_id_not_found");
        assert_eq!(e.body.field.as_deref(), Some("stream_id"));
    }

    #[test]
    fn given_a_full_disk_when_mapped_then_it_is_507_storage_full_and_other_storage_errors_500() {
        use sluice_storage::{OpKind, StorageError};
        let full = StorageError::new(
            OpKind::Write,
            std::path::Path::new("/data/metadata.tmp"),
            ErrorKind::NoSpace,
        );
        let e = ApiError::from(EngineError::Storage(full));
        assert_eq!(e.status, StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(e.body.code, "storage_full");
        assert!(
            e.body.reason.contains("/data/metadata.tmp"),
            "{}",
            e.body.reason
        );
        let io = StorageError::new(
            OpKind::SyncFile,
            std::path::Path::new("/data/metadata.tmp"),
            ErrorKind::Io,
        );
        let e = ApiError::from(EngineError::Storage(io));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.body.code, "storage_error");
    }

    #[test]
    fn given_an_out_of_range_offset_when_mapped_then_it_is_invalid_offset_400() {
        let e = ApiError::from(EngineError::OffsetOutOfRange {
            offset: 5,
            current: Some(1),
        });
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.body.code, "invalid_offset");
    }
}
