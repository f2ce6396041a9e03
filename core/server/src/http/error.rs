//! How the HTTP API answers an error of the Iggy layer
//! (`crate::iggy::error::ApiError`): Iggy's JSON error body
//! `{"id": u32, "code": "snake_case", "reason": "text", "field": "name" | null}`
//! with the status of its class: Iggy's (404 for missing resources, 401 for
//! missing or bad tokens, 400 for everything the caller got wrong, 413 for
//! oversized bodies), plus 503 (`unavailable`, `partition_degraded`) and 507
//! (`storage_full`: the data directory's device is out of space) for
//! sluice-only conditions.
//!
//! Invariants:
//! - A 4xx means the request was refused before or by validation; nothing
//!   changed. A 5xx is a server-side failure (storage, a degraded partition,
//!   an internal error); it is logged with its full cause where it is made.
//! - A body refused for its size was not read: the answer closes the
//!   connection (`Connection: close`), so the unread rest is never taken
//!   for the next request.
//! - The reason never carries a secret (no passwords, no tokens).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::iggy::error::{ApiError, Class};

/// The status Iggy's HTTP API answers a class of error with.
pub(crate) fn status(class: Class) -> StatusCode {
    match class {
        Class::BadRequest => StatusCode::BAD_REQUEST,
        Class::Unauthenticated => StatusCode::UNAUTHORIZED,
        Class::Forbidden => StatusCode::FORBIDDEN,
        Class::NotFound => StatusCode::NOT_FOUND,
        Class::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Class::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Class::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Class::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Class::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Class::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let close = self.class == Class::PayloadTooLarge;
        let mut response = (status(self.class), Json(self.body)).into_response();
        if close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EngineError;
    use crate::identifier::Identifier;

    #[test]
    fn given_a_missing_stream_when_answered_then_it_is_iggys_404_body() {
        let e = ApiError::from(EngineError::StreamNotFound(Identifier::Numeric(7)));
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(response.headers().get(header::CONNECTION).is_none());
    }

    #[test]
    fn given_each_class_when_answered_then_only_client_errors_are_4xx() {
        let server_side = [Class::Internal, Class::Unavailable, Class::StorageFull];
        for class in [
            Class::BadRequest,
            Class::Unauthenticated,
            Class::Forbidden,
            Class::NotFound,
            Class::MethodNotAllowed,
            Class::PayloadTooLarge,
            Class::UnsupportedMediaType,
            Class::Internal,
            Class::Unavailable,
            Class::StorageFull,
        ] {
            let code = status(class);
            assert_eq!(code.is_server_error(), server_side.contains(&class));
            assert_eq!(code.is_client_error(), !server_side.contains(&class));
        }
        assert_eq!(status(Class::StorageFull), StatusCode::INSUFFICIENT_STORAGE);
    }

    #[test]
    fn given_an_oversized_body_when_answered_then_the_connection_closes() {
        let e = ApiError::new(
            Class::PayloadTooLarge,
            4,
            "invalid_format",
            "too large",
            None,
        );
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            response.headers().get(header::CONNECTION),
            Some(&HeaderValue::from_static("close"))
        );
    }
}
