//! Request extractors whose rejections are Iggy JSON errors, and the parsers
//! for path and query values.
//!
//! Invariants:
//! - No extractor panics and none answers in axum's plain-text format: every
//!   rejection is an `ApiError` (4xx, Iggy's JSON body), so a malformed
//!   request never reaches a handler and never changes state.
//! - A body over the configured limit is refused with 413 and
//!   `Connection: close` (the rest of the body is never read).
//! - Query parsers name the parameter they reject.

use std::collections::BTreeMap;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::engine::MAX_NAME_LEN;
use crate::identifier::Identifier;
use crate::iggy::error::{ApiError, Class};

/// A JSON body; malformed JSON, wrong types and oversized bodies are Iggy errors.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let text = rejection.body_text();
    match rejection.status() {
        // Answered with `Connection: close` (http/error.rs): the body was not read.
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            Class::PayloadTooLarge,
            4,
            "invalid_format",
            format!("request body too large: {text}"),
            None,
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            Class::UnsupportedMediaType,
            4,
            "invalid_format",
            "expected a body with Content-Type: application/json",
            None,
        ),
        _ => ApiError::invalid_json(text),
    }
}

/// The query string as a map; unknown parameters are ignored, as Iggy does.
#[derive(Debug, Default)]
pub(crate) struct ApiQuery(pub(crate) BTreeMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for ApiQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<BTreeMap<String, String>>::from_request_parts(parts, state).await {
            Ok(Query(map)) => Ok(ApiQuery(map)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request("query", rejection.body_text())
}

/// Path segments; a segment that does not decode is a 400.
#[derive(Debug)]
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    ApiError::bad_request("path", rejection.body_text())
}

/// Parses a path or query identifier as Iggy does: digits are an id,
/// anything else a name (1 to 255 bytes).
pub(crate) fn identifier(field: &str, raw: &str) -> Result<Identifier, ApiError> {
    if raw.is_empty() || raw.len() > MAX_NAME_LEN {
        return Err(ApiError::bad_request(
            field,
            format!("{field} must be a numeric id or a name of 1 to {MAX_NAME_LEN} bytes"),
        ));
    }
    Ok(Identifier::parse(raw))
}

impl ApiQuery {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// An optional unsigned number; anything else (negative, fractional,
    /// too large, empty) is a 400 naming the parameter.
    pub(crate) fn u64(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => raw.trim().parse::<u64>().map(Some).map_err(|_| {
                ApiError::bad_request(
                    key,
                    format!("{key} must be an unsigned integer, got {raw:?}"),
                )
            }),
        }
    }

    pub(crate) fn u32(&self, key: &str) -> Result<Option<u32>, ApiError> {
        match self.u64(key)? {
            None => Ok(None),
            Some(n) => u32::try_from(n).map(Some).map_err(|_| {
                ApiError::bad_request(key, format!("{key} must fit in 32 bits, got {n}"))
            }),
        }
    }

    pub(crate) fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some("true") | Some("1") => Ok(Some(true)),
            Some("false") | Some("0") => Ok(Some(false)),
            Some(raw) => Err(ApiError::bad_request(
                key,
                format!("{key} must be true or false, got {raw:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> ApiQuery {
        ApiQuery(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn given_negative_or_huge_numbers_when_parsed_then_the_error_names_the_parameter() {
        let q = query(&[("count", "-1"), ("value", "99999999999999999999999")]);
        let e = q.u32("count").err().map(|e| e.body.field);
        assert_eq!(e, Some(Some("count".to_string())));
        assert!(q.u64("value").is_err());
        assert_eq!(q.u64("absent").ok(), Some(None));
    }

    #[test]
    fn given_identifiers_when_parsed_then_digits_are_ids_and_the_rest_names() {
        assert_eq!(
            identifier("stream_id", "7").ok(),
            Some(Identifier::Numeric(7))
        );
        assert_eq!(
            identifier("stream_id", "orders").ok(),
            Some(Identifier::Name("orders".into()))
        );
        assert!(identifier("stream_id", "").is_err());
    }
}
