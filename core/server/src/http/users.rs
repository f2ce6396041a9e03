//! Iggy's users routes (issue 29): list, get, create, update, delete, set
//! permissions, change password. The permission each needs is checked
//! before the handler (`http::access`); the users themselves are
//! `crate::users`, kept durably.
//!
//! Invariants:
//! - A password is hashed off the async runtime and never logged; the
//!   answers carry no hash.
//! - Deleting a user ends its HTTP sessions at once; an open TCP session of
//!   it can do nothing gated any more (`Auth::permissions` follows the
//!   user's serial, so not even as a later user given the same id).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::extract::{ApiJson, ApiPath};
use crate::auth::{hash_password, verify_password};
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, ApiResult, Class};
use crate::iggy::permissions::{Permissions, ROOT_USER_ID};
use crate::users::{NewUser, User, UserStatus, UsersError};

impl From<UsersError> for ApiError {
    fn from(e: UsersError) -> Self {
        let reason = e.to_string();
        match e {
            UsersError::NotFound(_) => {
                ApiError::new(Class::NotFound, 20, "resource_not_found", reason, None)
            }
            UsersError::NameTaken(_) => ApiError::new(
                Class::BadRequest,
                46,
                "user_already_exists",
                reason,
                Some("username"),
            ),
            UsersError::InvalidUsername => ApiError::new(
                Class::BadRequest,
                43,
                "invalid_username",
                reason,
                Some("username"),
            ),
            UsersError::InvalidPassword => ApiError::new(
                Class::BadRequest,
                44,
                "invalid_password",
                reason,
                Some("password"),
            ),
            UsersError::Root => {
                ApiError::new(Class::BadRequest, 48, "cannot_delete_user", reason, None)
            }
            UsersError::WrongPassword => ApiError::invalid_credentials(),
            UsersError::Storage { .. } => ApiError::internal(reason),
        }
    }
}

/// Iggy's `UserInfo` (and, with permissions, `UserInfoDetails`).
#[derive(Serialize)]
pub(crate) struct UserInfo {
    id: u32,
    created_at: u64,
    status: &'static str,
    username: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    permissions: Option<Option<Permissions>>,
    options: Value,
}

fn info(u: &User, with_permissions: bool) -> UserInfo {
    UserInfo {
        id: u.id,
        created_at: u.created_at,
        status: u.status.as_str(),
        username: u.username.clone(),
        permissions: with_permissions.then(|| u.permissions.clone()),
        options: Value::Object(Default::default()),
    }
}

/// Root, as the users routes show it.
fn root_info(state: &AppState, with_permissions: bool) -> UserInfo {
    UserInfo {
        id: ROOT_USER_ID,
        created_at: 0,
        status: UserStatus::Active.as_str(),
        username: state.auth.root_name().to_string(),
        permissions: with_permissions.then(|| Some(Permissions::root())),
        options: Value::Object(Default::default()),
    }
}

/// A user path id: its number, or a name.
fn resolve(state: &AppState, raw: &str) -> ApiResult<u32> {
    if let Ok(id) = raw.parse::<u32>() {
        return Ok(id);
    }
    if raw == state.auth.root_name() {
        return Ok(ROOT_USER_ID);
    }
    state
        .auth
        .users
        .by_name(raw)
        .map(|u| u.id)
        .ok_or_else(|| UsersError::NotFound(raw.to_string()).into())
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

async fn hash(password: String) -> ApiResult<String> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| ApiError::internal(format!("password hashing failed: {e}")))?
        .map_err(|e| ApiError::internal(e.to_string()))
}

fn status(raw: Option<&str>) -> ApiResult<Option<UserStatus>> {
    raw.map(|s| {
        UserStatus::parse(s).ok_or_else(|| {
            ApiError::new(
                Class::BadRequest,
                45,
                "invalid_user_status",
                format!("status must be active or inactive, got {s:?}"),
                Some("status"),
            )
        })
    })
    .transpose()
}

pub(crate) async fn list(State(state): State<AppState>) -> Json<Vec<UserInfo>> {
    let mut out = vec![root_info(&state, false)];
    out.extend(state.auth.users.list().iter().map(|u| info(u, false)));
    Json(out)
}

pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<UserInfo>> {
    let id = resolve(&state, &id)?;
    if id == ROOT_USER_ID {
        return Ok(Json(root_info(&state, true)));
    }
    let user = state
        .auth
        .users
        .get(id)
        .ok_or_else(|| ApiError::from(UsersError::NotFound(id.to_string())))?;
    Ok(Json(info(&user, true)))
}

#[derive(Deserialize)]
pub(crate) struct CreateUser {
    username: String,
    password: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    permissions: Option<Permissions>,
}

pub(crate) async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateUser>,
) -> ApiResult<Json<UserInfo>> {
    let new = NewUser {
        username: body.username,
        status: status(body.status.as_deref())?.unwrap_or_default(),
        permissions: body.permissions,
        password: body.password,
    };
    // Bounds first, so nothing is hashed for a request that fails them.
    if !(crate::auth::MIN_PASSWORD_LEN..=crate::auth::MAX_PASSWORD_LEN)
        .contains(&new.password.len())
    {
        return Err(UsersError::InvalidPassword.into());
    }
    let password_hash = hash(new.password.clone()).await?;
    let users = state.auth.users.clone();
    let user = tokio::task::spawn_blocking(move || users.create(&new, password_hash, now_micros()))
        .await
        .map_err(|e| ApiError::internal(format!("creating the user failed: {e}")))??;
    tracing::info!(user_id = user.id, "user created");
    Ok(Json(info(&user, true)))
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
    let id = resolve(&state, &id)?;
    let status = status(body.status.as_deref())?;
    let users = state.auth.users.clone();
    tokio::task::spawn_blocking(move || users.update(id, body.username.as_deref(), status))
        .await
        .map_err(|e| ApiError::internal(format!("updating the user failed: {e}")))??;
    tracing::info!(user_id = id, "user updated");
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let id = resolve(&state, &id)?;
    let users = state.auth.users.clone();
    tokio::task::spawn_blocking(move || users.delete(id))
        .await
        .map_err(|e| ApiError::internal(format!("deleting the user failed: {e}")))??;
    state.auth.revoke_user(id);
    tracing::info!(user_id = id, "user deleted");
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
    let id = resolve(&state, &id)?;
    if id == ROOT_USER_ID {
        return Err(ApiError::new(
            Class::BadRequest,
            49,
            "cannot_change_permissions",
            "the root user's permissions cannot be changed",
            None,
        ));
    }
    let users = state.auth.users.clone();
    tokio::task::spawn_blocking(move || users.set_permissions(id, body.permissions))
        .await
        .map_err(|e| ApiError::internal(format!("updating permissions failed: {e}")))??;
    tracing::info!(user_id = id, "user permissions updated");
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
    let id = resolve(&state, &id)?;
    if id == ROOT_USER_ID {
        // Root's password comes from the server's configuration.
        return Err(ApiError::new(
            Class::BadRequest,
            44,
            "invalid_password",
            "the root user's password is set by the server's configuration",
            None,
        ));
    }
    let user = state
        .auth
        .users
        .get(id)
        .ok_or_else(|| ApiError::from(UsersError::NotFound(id.to_string())))?;
    let (current, old_hash) = (body.current_password, user.password_hash.clone());
    let matches = tokio::task::spawn_blocking(move || verify_password(&current, &old_hash))
        .await
        .map_err(|e| ApiError::internal(format!("password check failed: {e}")))?;
    if !matches {
        return Err(UsersError::WrongPassword.into());
    }
    let new_password = body.new_password;
    if !(crate::auth::MIN_PASSWORD_LEN..=crate::auth::MAX_PASSWORD_LEN)
        .contains(&new_password.len())
    {
        return Err(UsersError::InvalidPassword.into());
    }
    let new_hash = hash(new_password.clone()).await?;
    let users = state.auth.users.clone();
    tokio::task::spawn_blocking(move || users.set_password_hash(id, &new_password, new_hash))
        .await
        .map_err(|e| ApiError::internal(format!("changing the password failed: {e}")))??;
    tracing::info!(user_id = id, "user password changed");
    Ok(StatusCode::NO_CONTENT)
}
