//! The one error of the Iggy layer: every failure a request can meet, as
//! Iggy's error (`id`, the numeric code; `code`, its snake_case name;
//! `reason`; `field`), plus the class of failure a transport needs to answer
//! it. HTTP renders it as Iggy's JSON error body with the status of its
//! class (`http/error.rs`); TCP answers the numeric `id` in its reply header.
//!
//! Invariants:
//! - Every class but `Internal`, `Unavailable` and `StorageFull` means the
//!   request was refused before or by validation; nothing changed. Those
//!   three are server-side failures (storage, a degraded partition, an
//!   internal error), logged with their full cause.
//! - Ids and codes are Iggy's (`IggyError::as_code` / `as_string` in
//!   iggy_common 0.11) wherever Iggy has a matching error, so clients that
//!   branch on the code keep working, over either transport. sluice-only
//!   conditions use codes that Iggy does not (`partition_degraded`,
//!   `storage_full`, `storage_error`).
//! - The reason never carries a secret (no passwords, no tokens).

use serde::Serialize;

use sluice_storage::ErrorKind;

use crate::error::EngineError;

/// What kind of failure an error is: what a transport needs besides Iggy's
/// code. Iggy's HTTP API answers each with one status (noted per variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// The request is wrong: a bad value, a name taken, a failed login (400).
    BadRequest,
    /// No valid session or token (401).
    Unauthenticated,
    /// Authenticated, but the user's permissions do not allow it (403).
    Forbidden,
    /// The resource (or route) does not exist (404).
    NotFound,
    /// The route exists, the method does not (405).
    MethodNotAllowed,
    /// The request body is over the limit and was not read (413).
    PayloadTooLarge,
    /// The request body is not of the type the route reads (415).
    UnsupportedMediaType,
    /// The server failed: storage, an internal error, a poisoned engine (500).
    Internal,
    /// The server cannot serve it now: a degraded partition, the engine
    /// unavailable (503).
    Unavailable,
    /// The data directory's device is out of space (507).
    StorageFull,
}

/// Iggy's error: the body of an HTTP error answer, and (its `id`) the status
/// of a TCP reply.
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
    pub(crate) class: Class,
    pub(crate) body: ErrorBody,
}

impl ApiError {
    pub(crate) fn new(
        class: Class,
        id: u32,
        code: &str,
        reason: impl Into<String>,
        field: Option<&str>,
    ) -> Self {
        ApiError {
            class,
            body: ErrorBody {
                id,
                code: code.to_string(),
                reason: reason.into(),
                field: field.map(str::to_string),
            },
        }
    }

    /// Iggy's numeric error code (what a TCP reply carries).
    pub(crate) fn code(&self) -> u32 {
        self.body.id
    }

    /// A malformed request: Iggy's `invalid_format` (4) naming the field.
    pub(crate) fn bad_request(field: &str, reason: impl Into<String>) -> Self {
        ApiError::new(Class::BadRequest, 4, "invalid_format", reason, Some(field))
    }

    /// A request body that is not the JSON the route expects.
    pub(crate) fn invalid_json(reason: impl Into<String>) -> Self {
        ApiError::new(Class::BadRequest, 4, "invalid_format", reason, None)
    }

    /// An unknown or unsupported option key / value (Iggy 4041 / 4042).
    pub(crate) fn unsupported_option(key: &str) -> Self {
        ApiError::new(
            Class::BadRequest,
            4041,
            "unsupported_option_key",
            format!("Unsupported option key: {key}"),
            Some(key),
        )
    }

    pub(crate) fn invalid_option_value(key: &str, value: &str, allowed: &str) -> Self {
        ApiError::new(
            Class::BadRequest,
            4042,
            "invalid_option_value",
            format!("Invalid option value for key: {key}: {value:?} (expected {allowed})"),
            Some(key),
        )
    }

    pub(crate) fn unauthenticated() -> Self {
        ApiError::new(
            Class::Unauthenticated,
            40,
            "unauthenticated",
            "Unauthenticated",
            None,
        )
    }

    /// Iggy's `unauthorized` (41): the user may not do this.
    pub(crate) fn unauthorized() -> Self {
        ApiError::new(
            Class::Forbidden,
            41,
            "unauthorized",
            "Unauthorized: the user's permissions do not allow this",
            None,
        )
    }

    pub(crate) fn invalid_credentials() -> Self {
        // Iggy answers a failed login with 400 (only token errors are 401).
        ApiError::new(
            Class::BadRequest,
            42,
            "invalid_credentials",
            "Invalid credentials",
            None,
        )
    }

    pub(crate) fn route_not_found() -> Self {
        ApiError::new(
            Class::NotFound,
            404,
            "not_found",
            "Resource not found",
            None,
        )
    }

    pub(crate) fn method_not_allowed() -> Self {
        ApiError::new(
            Class::MethodNotAllowed,
            3,
            "invalid_command",
            "Method not allowed on this resource",
            None,
        )
    }

    pub(crate) fn client_not_found(client_id: u32) -> Self {
        ApiError::new(
            Class::NotFound,
            100,
            "client_not_found",
            format!("Client with ID: {client_id} was not found."),
            Some("client_id"),
        )
    }

    pub(crate) fn offset_not_found(consumer_id: u32) -> Self {
        ApiError::new(
            Class::NotFound,
            3021,
            "consumer_offset_not_found",
            format!("Consumer offset for consumer with ID: {consumer_id} was not found."),
            Some("consumer_id"),
        )
    }

    pub(crate) fn internal(reason: impl Into<String>) -> Self {
        ApiError::new(Class::Internal, 1, "error", reason, None)
    }

    /// The answer of every engine call once an earlier one panicked (the
    /// engine lock is poisoned: memory may not match the disk).
    pub(crate) fn engine_failed() -> Self {
        ApiError::internal(
            "the engine failed during an earlier request and refuses service until restart",
        )
    }
}

/// Maps an engine error to Iggy's id, code, class and field.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let reason = e.to_string();
        match &e {
            EngineError::StreamNotFound(_) => ApiError::new(
                Class::NotFound,
                1009,
                "stream_id_not_found",
                reason,
                Some("stream_id"),
            ),
            EngineError::TopicNotFound { .. } => ApiError::new(
                Class::NotFound,
                2010,
                "topic_id_not_found",
                reason,
                Some("topic_id"),
            ),
            EngineError::PartitionNotFound { .. } => ApiError::new(
                Class::NotFound,
                3007,
                "partition_not_found",
                reason,
                Some("partition_id"),
            ),
            EngineError::GroupNotFound(_) => ApiError::new(
                Class::NotFound,
                5000,
                "consumer_group_id_not_found",
                reason,
                Some("consumer_group_id"),
            ),
            EngineError::GroupMemberNotFound { .. } => ApiError::new(
                Class::NotFound,
                5006,
                "consumer_group_member_not_found",
                reason,
                Some("consumer_group_id"),
            ),
            EngineError::PartitionNotOwned { .. } => ApiError::new(
                Class::BadRequest,
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
                ApiError::new(Class::BadRequest, id, code, reason, Some("name"))
            }
            EngineError::IdTaken { kind, .. } => {
                let (id, code, field) = match *kind {
                    "stream" => (1014, "invalid_stream_id", "stream_id"),
                    "topic" => (2016, "invalid_topic_id", "topic_id"),
                    "consumer group" => (5002, "invalid_consumer_group_id", "consumer_group_id"),
                    _ => (3, "invalid_command", "id"),
                };
                ApiError::new(Class::BadRequest, id, code, reason, Some(field))
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
                ApiError::new(Class::BadRequest, id, code, reason, Some(field))
            }
            EngineError::OffsetOutOfRange { offset, .. } => ApiError::new(
                Class::BadRequest,
                4100,
                "invalid_offset",
                format!("Invalid offset: {offset}: {reason}"),
                Some("offset"),
            ),
            EngineError::Degraded { .. } => {
                tracing::error!(error = %e, "request refused by a degraded partition");
                ApiError::new(
                    Class::Unavailable,
                    1,
                    "partition_degraded",
                    reason,
                    Some("partition_id"),
                )
            }
            EngineError::Unavailable(_) => {
                ApiError::new(Class::Unavailable, 1, "unavailable", reason, None)
            }
            // The disk is full (ENOSPC, or EDQUOT/EFBIG as `DiskStorage`
            // reports them): nothing was acknowledged, and the same request
            // succeeds once space returns. Its own class (HTTP 507) tells
            // clients and proxies it is the server's storage, not the
            // request, and not a crash.
            EngineError::Storage(s) if s.kind == ErrorKind::NoSpace => {
                tracing::error!(error = %e, "request failed: no space left on the data directory's device");
                ApiError::new(Class::StorageFull, 1, "storage_full", reason, None)
            }
            EngineError::CorruptFile { .. }
            | EngineError::Incompatible { .. }
            | EngineError::Storage(_)
            | EngineError::Internal(_) => {
                tracing::error!(error = %e, "request failed in the engine");
                ApiError::new(Class::Internal, 1, "storage_error", reason, None)
            }
        }
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identifier::Identifier;

    #[test]
    fn given_a_missing_stream_when_mapped_then_it_is_iggys_not_found_error() {
        let e = ApiError::from(EngineError::StreamNotFound(Identifier::Numeric(7)));
        assert_eq!(e.class, Class::NotFound);
        assert_eq!(e.code(), 1009);
        assert_eq!(e.body.code, "stream_id_not_found");
        assert_eq!(e.body.field.as_deref(), Some("stream_id"));
    }

    #[test]
    fn given_a_full_disk_when_mapped_then_it_is_storage_full_and_other_storage_errors_internal() {
        use sluice_storage::{OpKind, StorageError};
        let path = std::path::Path::new("/data").join(crate::layout::METADATA_TMP);
        let full = StorageError::new(OpKind::Write, &path, ErrorKind::NoSpace);
        let e = ApiError::from(EngineError::Storage(full));
        assert_eq!(e.class, Class::StorageFull);
        assert_eq!(e.body.code, "storage_full");
        let shown = path.display().to_string();
        assert!(e.body.reason.contains(&shown), "{}", e.body.reason);
        let io = StorageError::new(OpKind::SyncFile, &path, ErrorKind::Io);
        let e = ApiError::from(EngineError::Storage(io));
        assert_eq!(e.class, Class::Internal);
        assert_eq!(e.body.code, "storage_error");
    }

    #[test]
    fn given_an_out_of_range_offset_when_mapped_then_it_is_invalid_offset_bad_request() {
        let e = ApiError::from(EngineError::OffsetOutOfRange {
            offset: 5,
            current: Some(1),
        });
        assert_eq!(e.class, Class::BadRequest);
        assert_eq!(e.body.code, "invalid_offset");
    }
}
