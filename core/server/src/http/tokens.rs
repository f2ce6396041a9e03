//! Iggy's personal access token routes over HTTP, over the Iggy layer's
//! token operations (`iggy::users`): each acts on the caller's own tokens.

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, ApiPath};
use crate::auth::{Identity, IdentityInfo};
use crate::iggy::AppState;
use crate::iggy::error::ApiResult;
use crate::iggy::users;

#[derive(Serialize)]
pub(crate) struct TokenInfo {
    name: String,
    /// Microseconds since the Unix epoch; `null`: never expires.
    expiry_at: Option<u64>,
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Identity>,
) -> Json<Vec<TokenInfo>> {
    Json(
        users::tokens(&state, caller.user_id())
            .into_iter()
            .map(|(name, expiry_at)| TokenInfo { name, expiry_at })
            .collect(),
    )
}

#[derive(Deserialize)]
pub(crate) struct CreateToken {
    name: String,
    #[serde(default)]
    expiry: u64,
}

#[derive(Serialize)]
pub(crate) struct RawToken {
    token: String,
}

pub(crate) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Identity>,
    ApiJson(body): ApiJson<CreateToken>,
) -> ApiResult<Json<RawToken>> {
    let token = users::create_token(&state, caller.user_id(), body.name, body.expiry).await?;
    Ok(Json(RawToken { token }))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Identity>,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    users::delete_token(&state, caller.user_id(), name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(crate) struct TokenLogin {
    token: String,
}

/// `POST /personal-access-tokens/login`: a session for the token's holder.
pub(crate) async fn login(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<TokenLogin>,
) -> ApiResult<Json<IdentityInfo>> {
    let who = users::token_login(&state, &body.token)?;
    Ok(Json(state.auth.issue(who)?))
}
