//! Iggy's users routes over HTTP: JSON in, JSON out, over the Iggy layer's
//! users operations (`iggy::users`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::extract::{ApiJson, ApiPath, identifier};
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult};
use crate::iggy::permissions::Permissions;
use crate::iggy::users::{self, CreateUser, UserInfo};
use crate::users::UsersError;

pub(crate) async fn list(State(state): State<AppState>) -> Json<Vec<UserInfo>> {
    Json(users::list(&state))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<UserInfo>> {
    users::get(&state, &identifier("user_id", &id)?)
        .map(Json)
        .ok_or_else(|| ApiError::from(UsersError::NotFound(id)))
}

pub(crate) async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateUser>,
) -> ApiResult<Json<UserInfo>> {
    users::create(&state, body).await.map(Json)
}

#[derive(Deserialize)]
pub(crate) struct UpdateUser {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

pub(crate) async fn update(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateUser>,
) -> ApiResult<StatusCode> {
    let status = users::status(body.status.as_deref())?;
    users::update(&state, &identifier("user_id", &id)?, body.username, status).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    users::delete(&state, &identifier("user_id", &id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(crate) struct UpdatePermissions {
    #[serde(default)]
    permissions: Option<Permissions>,
}

pub(crate) async fn update_permissions(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdatePermissions>,
) -> ApiResult<StatusCode> {
    users::update_permissions(&state, &identifier("user_id", &id)?, body.permissions).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub(crate) struct ChangePassword {
    current_password: String,
    new_password: String,
}

pub(crate) async fn change_password(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ChangePassword>,
) -> ApiResult<StatusCode> {
    let id = identifier("user_id", &id)?;
    users::change_password(&state, &id, body.current_password, body.new_password).await?;
    Ok(StatusCode::NO_CONTENT)
}
