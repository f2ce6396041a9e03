//! Iggy's users operations (issue 29), for both transports: list, get,
//! create, update, delete, set permissions, change password. The
//! permission each needs is checked before (`iggy::access`); the users
//! themselves are `crate::users`, kept durably. HTTP answers the JSON
//! shapes here; TCP encodes the same `UserInfo` in Iggy's binary layout.
//!
//! Invariants:
//! - A password is hashed off the async runtime and never logged; the
//!   answers carry no hash.
//! - Deleting a user ends its HTTP sessions at once; an open TCP session of
//!   it can do nothing gated any more (`Auth::permissions` follows the
//!   user's serial, so not even as a later user given the same id).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::error::{ApiError, ApiResult, Class};
use super::permissions::{Permissions, ROOT_USER_ID};
use crate::auth::{hash_password, verify_password};
use crate::identifier::Identifier;
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
            UsersError::InvalidTokenName => ApiError::new(
                Class::BadRequest,
                50,
                "invalid_personal_access_token_name",
                reason,
                Some("name"),
            ),
            UsersError::TokenNameTaken(_) => ApiError::new(
                Class::BadRequest,
                51,
                "personal_access_token_already_exists",
                reason,
                Some("name"),
            ),
            UsersError::TooManyTokens => ApiError::new(
                Class::BadRequest,
                52,
                "personal_access_tokens_limit_reached",
                reason,
                None,
            ),
            UsersError::TooLarge => {
                ApiError::new(Class::BadRequest, 55, "users_limit_reached", reason, None)
            }
            // As the engine's: nothing was acknowledged, and the same
            // request succeeds once space returns.
            UsersError::NoSpace { .. } => {
                tracing::error!(error = %e, "users change failed: no space left on the data directory's device");
                ApiError::new(Class::StorageFull, 1, "storage_full", reason, None)
            }
            UsersError::Storage { .. } => ApiError::internal(reason),
        }
    }
}

/// Iggy's `UserInfo` (and, with permissions, `UserInfoDetails`).
#[derive(Serialize)]
pub(crate) struct UserInfo {
    pub(crate) id: u32,
    pub(crate) created_at: u64,
    pub(crate) status: &'static str,
    pub(crate) username: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permissions: Option<Option<Permissions>>,
    options: Value,
}

impl UserInfo {
    /// Iggy's status code of the user.
    pub(crate) fn status_code(&self) -> u8 {
        UserStatus::parse(self.status).map_or(1, UserStatus::code)
    }
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
        username: state.auth.root_name(),
        permissions: with_permissions.then(|| Some(Permissions::root())),
        options: Value::Object(Default::default()),
    }
}

/// A user named by a path or wire identifier: its number, or a name.
pub(crate) fn resolve(state: &AppState, id: &Identifier) -> ApiResult<u32> {
    match id {
        Identifier::Numeric(n) => Ok(*n),
        Identifier::Name(name) if *name == state.auth.root_name() => Ok(ROOT_USER_ID),
        Identifier::Name(name) => state
            .auth
            .users
            .by_name(name)
            .map(|u| u.id)
            .ok_or_else(|| UsersError::NotFound(name.clone()).into()),
    }
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

/// Runs a users change off the async runtime (it syncs the users file).
async fn blocking<T: Send + 'static>(
    state: &AppState,
    what: &'static str,
    f: impl FnOnce(&crate::users::Users) -> Result<T, UsersError> + Send + 'static,
) -> ApiResult<T> {
    let users = state.auth.users.clone();
    Ok(tokio::task::spawn_blocking(move || f(&users))
        .await
        .map_err(|e| ApiError::internal(format!("{what} failed: {e}")))??)
}

/// A status named by Iggy's word or code.
pub(crate) fn status(raw: Option<&str>) -> ApiResult<Option<UserStatus>> {
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

fn check_password(password: &str) -> ApiResult<()> {
    if (crate::auth::MIN_PASSWORD_LEN..=crate::auth::MAX_PASSWORD_LEN).contains(&password.len()) {
        Ok(())
    } else {
        Err(UsersError::InvalidPassword.into())
    }
}

/// Every user, root first.
pub(crate) fn list(state: &AppState) -> Vec<UserInfo> {
    let mut out = vec![root_info(state, false)];
    out.extend(state.auth.users.list().iter().map(|u| info(u, false)));
    out
}

/// One user with its permissions; `None` if there is no such user.
pub(crate) fn get(state: &AppState, id: &Identifier) -> Option<UserInfo> {
    let id = resolve(state, id).ok()?;
    if id == ROOT_USER_ID {
        return Some(root_info(state, true));
    }
    state.auth.users.get(id).map(|u| info(&u, true))
}

/// A user to create, as either transport carries it.
#[derive(Deserialize)]
pub(crate) struct CreateUser {
    pub(crate) username: String,
    pub(crate) password: String,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) permissions: Option<Permissions>,
}

pub(crate) async fn create(state: &AppState, body: CreateUser) -> ApiResult<UserInfo> {
    let new = NewUser {
        username: body.username,
        status: status(body.status.as_deref())?.unwrap_or_default(),
        permissions: body.permissions,
        password: body.password,
    };
    // Bounds first, so nothing is hashed for a request that fails them.
    check_password(&new.password)?;
    let password_hash = hash(new.password.clone()).await?;
    let user = blocking(state, "creating the user", move |u| {
        u.create(&new, password_hash, now_micros())
    })
    .await?;
    tracing::info!(user_id = user.id, "user created");
    Ok(info(&user, true))
}

pub(crate) async fn update(
    state: &AppState,
    id: &Identifier,
    username: Option<String>,
    status: Option<UserStatus>,
) -> ApiResult<()> {
    let id = resolve(state, id)?;
    if id == ROOT_USER_ID {
        // Root may be renamed, as on Iggy's server, but never locked out
        // (Iggy's server would let root deactivate itself).
        if status == Some(UserStatus::Inactive) {
            return Err(ApiError::new(
                Class::BadRequest,
                45,
                "invalid_user_status",
                "the root user cannot be deactivated",
                Some("status"),
            ));
        }
        if username.is_some() {
            blocking(state, "renaming root", move |u| {
                u.change_root(username.as_deref(), None)
            })
            .await?;
            tracing::info!(user_id = id, "root renamed");
        }
        return Ok(());
    }
    blocking(state, "updating the user", move |u| {
        u.update(id, username.as_deref(), status)
    })
    .await?;
    tracing::info!(user_id = id, "user updated");
    Ok(())
}

pub(crate) async fn delete(state: &AppState, id: &Identifier) -> ApiResult<()> {
    let id = resolve(state, id)?;
    // Its HTTP tokens and TCP sessions name this incarnation, which is gone:
    // both are refused from their next request (`Auth::validate`,
    // `Auth::permissions`).
    blocking(state, "deleting the user", move |u| u.delete(id)).await?;
    tracing::info!(user_id = id, "user deleted");
    Ok(())
}

pub(crate) async fn update_permissions(
    state: &AppState,
    id: &Identifier,
    permissions: Option<Permissions>,
) -> ApiResult<()> {
    let id = resolve(state, id)?;
    if id == ROOT_USER_ID {
        return Err(ApiError::new(
            Class::BadRequest,
            49,
            "cannot_change_permissions",
            "the root user's permissions cannot be changed",
            None,
        ));
    }
    blocking(state, "updating permissions", move |u| {
        u.set_permissions(id, permissions)
    })
    .await?;
    tracing::info!(user_id = id, "user permissions updated");
    Ok(())
}

pub(crate) async fn change_password(
    state: &AppState,
    id: &Identifier,
    current: String,
    new_password: String,
) -> ApiResult<()> {
    let id = resolve(state, id)?;
    let old_hash = if id == ROOT_USER_ID {
        state.auth.users.root_hash()
    } else {
        state
            .auth
            .users
            .get(id)
            .ok_or_else(|| ApiError::from(UsersError::NotFound(id.to_string())))?
            .password_hash
    };
    let matches = tokio::task::spawn_blocking(move || verify_password(&current, &old_hash))
        .await
        .map_err(|e| ApiError::internal(format!("password check failed: {e}")))?;
    if !matches {
        return Err(UsersError::WrongPassword.into());
    }
    check_password(&new_password)?;
    let new_hash = hash(new_password.clone()).await?;
    blocking(state, "changing the password", move |u| {
        if id == ROOT_USER_ID {
            // Stored in root's own file; from then on it wins over the
            // configured password (`auth::setup_root`), as on Iggy's server.
            u.change_root(None, Some(new_hash))
        } else {
            u.set_password_hash(id, &new_password, new_hash)
        }
    })
    .await?;
    tracing::info!(user_id = id, "user password changed");
    Ok(())
}

/// A personal access token's hash as kept: BLAKE3, in hex.
fn token_hash(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// Creates a personal access token for `user` and answers it (shown once,
/// never kept). `expiry` is Iggy's: microseconds from now, 0 (the server's
/// default) or `u64::MAX` for never.
pub(crate) async fn create_token(
    state: &AppState,
    user: u32,
    name: String,
    expiry: u64,
) -> ApiResult<String> {
    use base64::Engine as _;
    use rand_core::RngCore as _;
    let mut bytes = [0u8; 50];
    rand_core::OsRng.fill_bytes(&mut bytes);
    let token = base64::engine::general_purpose::STANDARD.encode(bytes);
    let now = now_micros();
    let expiry_at = match expiry {
        0 | u64::MAX => None,
        micros => Some(now.saturating_add(micros)),
    };
    let stored = crate::users::AccessToken {
        name,
        hash: token_hash(&token),
        expiry_at,
    };
    blocking(state, "creating the token", move |u| {
        u.add_token(user, stored)
    })
    .await?;
    tracing::info!(user_id = user, "personal access token created");
    Ok(token)
}

/// The caller's tokens: name and expiry (microseconds, `None`: never).
pub(crate) fn tokens(state: &AppState, user: u32) -> Vec<(String, Option<u64>)> {
    state.auth.users.tokens(user)
}

pub(crate) async fn delete_token(state: &AppState, user: u32, name: String) -> ApiResult<()> {
    blocking(state, "deleting the token", move |u| {
        u.delete_token(user, &name)
    })
    .await?;
    tracing::info!(user_id = user, "personal access token deleted");
    Ok(())
}

/// Removes every expired personal access token (Iggy's token cleaner),
/// off the async runtime (it saves the users file); answers how many.
pub(crate) async fn remove_expired_tokens(state: &AppState) -> ApiResult<usize> {
    let now = now_micros();
    blocking(state, "removing expired tokens", move |u| {
        u.remove_expired_tokens(now)
    })
    .await
}

/// Who a personal access token logs in as: `(id, serial)`. Iggy's
/// `invalid_personal_access_token` (53) for an unknown or expired one, and
/// `user_inactive` (47) when its holder is inactive, as Iggy's server
/// answers them (over TCP Iggy evicts the connection for the latter, which
/// the SDK reports as `unauthenticated`: the TCP handler answers 40).
pub(crate) fn token_login(state: &AppState, token: &str) -> ApiResult<(u32, u64)> {
    match state
        .auth
        .users
        .token_holder(&token_hash(token), now_micros())
    {
        Some((who, UserStatus::Active)) => Ok(who),
        Some((_, UserStatus::Inactive)) => Err(ApiError::new(
            Class::BadRequest,
            USER_INACTIVE,
            "user_inactive",
            "User is inactive",
            None,
        )),
        None => Err(ApiError::new(
            Class::Unauthenticated,
            53,
            "invalid_personal_access_token",
            "Invalid personal access token",
            None,
        )),
    }
}

/// Iggy's `user_inactive`.
pub(crate) const USER_INACTIVE: u32 = 47;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_users_save_refused_for_a_full_disk_when_answered_then_it_is_storage_full() {
        let full = UsersError::NoSpace {
            path: std::path::Path::new("/data").join(crate::layout::USERS_FILE),
            reason: "no space left on device".into(),
        };
        let e = ApiError::from(full);
        assert_eq!(e.class, Class::StorageFull);
        assert_eq!(e.body.code, "storage_full");
        let io = UsersError::Storage {
            path: std::path::Path::new("/data").join(crate::layout::USERS_FILE),
            reason: "input/output error".into(),
        };
        assert_eq!(ApiError::from(io).class, Class::Internal);
    }
}
