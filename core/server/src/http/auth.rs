//! The HTTP side of authentication (`crate::auth` holds what both transports
//! share): `POST /users/login`, `POST /users/refresh-token`,
//! `DELETE /users/logout`, and the middleware that requires
//! `Authorization: Bearer <token>` everywhere else.
//!
//! Invariants:
//! - Every route except `/ping`, `/users/login` and `/users/refresh-token`
//!   answers 401 without a valid token, before its handler runs.
//! - Credential checks and the failed-login throttle are `crate::auth`'s, the
//!   same code the TCP login runs.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, MatchedPath, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

pub use crate::auth::*;

use super::extract::ApiJson;
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult, Class};
use crate::iggy::permissions::ROOT_USER_ID;

#[derive(Deserialize)]
pub(crate) struct LoginBody {
    username: String,
    password: String,
    // Iggy clients also send `version` and `context`; they are accepted and unused.
}

#[derive(Deserialize)]
pub(crate) struct RefreshBody {
    token: String,
}

/// `POST /users/login`.
pub(crate) async fn login(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<LoginBody>,
) -> ApiResult<Json<IdentityInfo>> {
    if !(MIN_USERNAME_LEN..=MAX_USERNAME_LEN).contains(&body.username.len()) {
        return Err(ApiError::new(
            Class::BadRequest,
            43,
            "invalid_username",
            "Invalid username",
            Some("username"),
        ));
    }
    if !(MIN_PASSWORD_LEN..=MAX_PASSWORD_LEN).contains(&body.password.len()) {
        return Err(ApiError::new(
            Class::BadRequest,
            44,
            "invalid_password",
            "Invalid password",
            Some("password"),
        ));
    }
    Ok(Json(state.auth.login(body.username, body.password).await?))
}

/// `POST /users/refresh-token`: a new token for a still-valid one (the old
/// one stays valid until its own expiry or logout, as Iggy's server does).
pub(crate) async fn refresh_token(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<RefreshBody>,
) -> ApiResult<Json<IdentityInfo>> {
    let identity = state
        .auth
        .validate(&body.token)
        .ok_or_else(ApiError::unauthenticated)?;
    Ok(Json(
        state.auth.issue((identity.user_id(), identity.serial()))?,
    ))
}

/// `DELETE /users/logout`: the caller's token is refused from now on, after
/// a restart too (answered once the logout is durable).
pub(crate) async fn logout(
    State(state): State<AppState>,
    Extension(identity): Extension<Identity>,
) -> ApiResult<StatusCode> {
    let auth = state.auth.clone();
    tokio::task::spawn_blocking(move || auth.log_out(&identity))
        .await
        .map_err(|e| ApiError::internal(format!("logging out: {e}")))??;
    Ok(StatusCode::NO_CONTENT)
}

/// Middleware: a valid `Authorization: Bearer <token>` or 401.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(identity) = token.and_then(|t| state.auth.validate(t)) else {
        return ApiError::unauthenticated().into_response();
    };
    // The permission check (`iggy::access`): root passes without one.
    if identity.user_id() != ROOT_USER_ID {
        let (mut parts, body) = req.into_parts();
        let template = parts
            .extensions
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        let params: HashMap<String, String> =
            match Path::<HashMap<String, String>>::from_request_parts(&mut parts, &state).await {
                Ok(Path(p)) => p,
                Err(_) => HashMap::new(),
            };
        let need = match super::access::need(&parts.method, &template, &params) {
            Ok(need) => need,
            Err(e) => return e.into_response(),
        };
        if let Err(e) = state
            .authorize((identity.user_id(), identity.serial()), need)
            .await
        {
            return e.into_response();
        }
        req = Request::from_parts(parts, body);
    }
    req.extensions_mut().insert(identity);
    next.run(req).await
}
