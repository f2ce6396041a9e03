//! Authentication shared by both transports: the root user, password
//! verification (root's, and the stored users' of `crate::users`) with the
//! failed-login throttle, HTTP session tokens, and what a logged-in user may
//! do (`Auth::permissions`). The HTTP routes and middleware that use it are
//! in `http::auth`; the TCP transport (`tcp`) authenticates each connection
//! with `Auth::verify_login` (or a personal access token, `iggy::users`).
//!
//! Invariants:
//! - A plaintext password is never stored, logged or kept after start-up: the
//!   root password lives only as an argon2id PHC hash (in memory, and for a
//!   generated password also in `<data>/root.credentials`, written through
//!   `DurableStorage` with an atomic replace); other users' likewise, in
//!   `<data>/users`.
//! - A session (an HTTP token, a TCP login) is bound to the user's id and
//!   serial: a deleted user's session never acts as a later user of its id.
//! - A token is 256 random bits from the OS, valid until its expiry or its
//!   logout, whichever comes first; expired tokens are pruned on every issue.
//!   Tokens live in memory only, so a restart logs everyone out.
//! - Every HTTP route except `/ping`, `/users/login`, `/users/refresh-token`
//!   and `/personal-access-tokens/login` answers 401 without a valid token,
//!   before its handler runs; every TCP command but ping and the logins
//!   answers `unauthenticated` (40) on a connection that has not logged in.
//! - Logins are verified one at a time. A failed login holds that turn for a
//!   delay that doubles with each consecutive failure (capped at 32x the
//!   base), so guessing is slowed down however many connections are used; a
//!   success resets it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sluice_storage::{DurableStorage, ErrorKind};

use crate::iggy::error::{ApiError, ApiResult};
use crate::iggy::permissions::Permissions;
use crate::users::{UserStatus, Users};

/// Iggy's root user id and default credentials (`--with-default-root-credentials`).
pub(crate) use crate::iggy::permissions::ROOT_USER_ID;
pub const DEFAULT_ROOT_USERNAME: &str = "iggy";
pub const DEFAULT_ROOT_PASSWORD: &str = "iggy";
/// Iggy's limits on credentials (iggy_common `users::defaults`).
pub(crate) const MIN_USERNAME_LEN: usize = 3;
pub(crate) const MAX_USERNAME_LEN: usize = 50;
pub(crate) const MIN_PASSWORD_LEN: usize = 3;
pub(crate) const MAX_PASSWORD_LEN: usize = 100;
/// Where a generated root password's hash is kept, inside the data directory.
pub use crate::layout::CREDENTIALS_FILE;
const GENERATED_PASSWORD_LEN: usize = 24;
const MAX_BACKOFF_DOUBLINGS: u32 = 5;

/// Why the root user could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Config(String),
    #[error("root credentials file {}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("password hashing failed: {0}")]
    Hash(String),
}

/// Where the root user's credentials come from.
#[derive(Clone, PartialEq, Eq)]
pub enum RootSource {
    /// From the environment (`SLUICE_ROOT_*` or `IGGY_ROOT_*`).
    Explicit { username: String, password: String },
    /// `iggy` / `iggy`, as `--with-default-root-credentials` asks.
    DefaultIggy,
    /// The hash stored in the data directory, or, on first start, a random
    /// password that is printed once and stored only as a hash.
    StoredOrGenerated,
}

impl std::fmt::Debug for RootSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootSource::Explicit { username, .. } => f
                .debug_struct("Explicit")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            RootSource::DefaultIggy => write!(f, "DefaultIggy"),
            RootSource::StoredOrGenerated => write!(f, "StoredOrGenerated"),
        }
    }
}

impl RootSource {
    /// Picks the source as the server does: `SLUICE_ROOT_USERNAME` /
    /// `SLUICE_ROOT_PASSWORD`, else `IGGY_ROOT_USERNAME` / `IGGY_ROOT_PASSWORD`,
    /// else the default credentials if asked for, else stored or generated.
    /// A username without a password (or the reverse) is an error.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        with_default_root_credentials: bool,
    ) -> Result<RootSource, AuthError> {
        for prefix in ["SLUICE", "IGGY"] {
            let user_var = format!("{prefix}_ROOT_USERNAME");
            let pass_var = format!("{prefix}_ROOT_PASSWORD");
            match (env(&user_var), env(&pass_var)) {
                (Some(username), Some(password)) => {
                    check_credentials_shape(&username, &password).map_err(|reason| {
                        AuthError::Config(format!("{user_var}/{pass_var}: {reason}"))
                    })?;
                    return Ok(RootSource::Explicit { username, password });
                }
                (None, None) => {}
                _ => {
                    return Err(AuthError::Config(format!(
                        "set both {user_var} and {pass_var}, or neither"
                    )));
                }
            }
        }
        Ok(if with_default_root_credentials {
            RootSource::DefaultIggy
        } else {
            RootSource::StoredOrGenerated
        })
    }
}

fn check_credentials_shape(username: &str, password: &str) -> Result<(), String> {
    if !(MIN_USERNAME_LEN..=MAX_USERNAME_LEN).contains(&username.len()) {
        return Err(format!(
            "the username must be {MIN_USERNAME_LEN} to {MAX_USERNAME_LEN} bytes"
        ));
    }
    if !(MIN_PASSWORD_LEN..=MAX_PASSWORD_LEN).contains(&password.len()) {
        return Err(format!(
            "the password must be {MIN_PASSWORD_LEN} to {MAX_PASSWORD_LEN} bytes"
        ));
    }
    Ok(())
}

/// The root user as the server holds it: a name and a password hash.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootUser {
    pub(crate) username: String,
    /// argon2id PHC string.
    pub password_hash: String,
}

/// The hash is left out: a `?` anywhere (a state dump, a panic message)
/// must not hand out material for an offline guess.
impl std::fmt::Debug for RootUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootUser")
            .field("username", &self.username)
            .field("password_hash", &REDACTED)
            .finish()
    }
}

const REDACTED: &str = "<redacted>";

/// What setting up the root user produced.
pub struct RootSetup {
    pub user: RootUser,
    /// Set only on the first start with a generated password: the caller
    /// shows it once, and it is never stored or logged.
    pub generated_password: Option<String>,
}

impl std::fmt::Debug for RootSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootSetup")
            .field("user", &self.user)
            .field(
                "generated_password",
                &self.generated_password.as_ref().map(|_| REDACTED),
            )
            .finish()
    }
}

pub(crate) fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// Checks a password against a PHC hash; any malformed hash verifies nothing.
pub fn verify_password(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

fn generate_password() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut out = String::with_capacity(GENERATED_PASSWORD_LEN);
    while out.len() < GENERATED_PASSWORD_LEN {
        let b = (OsRng.next_u32() & 0xff) as usize;
        // Rejection sampling keeps every character equally likely.
        if b < 256 - 256 % ALPHABET.len() {
            out.push(char::from(ALPHABET[b % ALPHABET.len()]));
        }
    }
    out
}

/// Sets up the root user. The data directory must exist (the engine has
/// opened it); the credentials file is read and written through `storage`.
pub fn setup_root(
    storage: &dyn DurableStorage,
    data_dir: &Path,
    source: RootSource,
) -> Result<RootSetup, AuthError> {
    match source {
        RootSource::Explicit { username, password } => Ok(RootSetup {
            user: RootUser {
                password_hash: hash_password(&password)?,
                username,
            },
            generated_password: None,
        }),
        RootSource::DefaultIggy => Ok(RootSetup {
            user: RootUser {
                username: DEFAULT_ROOT_USERNAME.to_string(),
                password_hash: hash_password(DEFAULT_ROOT_PASSWORD)?,
            },
            generated_password: None,
        }),
        RootSource::StoredOrGenerated => {
            let path = data_dir.join(CREDENTIALS_FILE);
            let file_error = |reason: String| AuthError::File {
                path: path.clone(),
                reason,
            };
            match storage.read_file(&path) {
                Ok(bytes) => {
                    let user: RootUser = serde_json::from_slice(&bytes)
                        .map_err(|e| file_error(format!("not a credentials record: {e}")))?;
                    PasswordHash::new(&user.password_hash)
                        .map_err(|e| file_error(format!("bad password hash: {e}")))?;
                    Ok(RootSetup {
                        user,
                        generated_password: None,
                    })
                }
                Err(e) if e.kind == ErrorKind::NotFound => {
                    let password = generate_password();
                    let user = RootUser {
                        username: DEFAULT_ROOT_USERNAME.to_string(),
                        password_hash: hash_password(&password)?,
                    };
                    store_credentials(storage, data_dir, &user).map_err(file_error)?;
                    Ok(RootSetup {
                        user,
                        generated_password: Some(password),
                    })
                }
                Err(e) => Err(file_error(e.to_string())),
            }
        }
    }
}

/// Stores the root user's credentials durably (`persist::replace_file`).
fn store_credentials(
    storage: &dyn DurableStorage,
    data_dir: &Path,
    user: &RootUser,
) -> Result<(), String> {
    let bytes = serde_json::to_vec(user).map_err(|e| e.to_string())?;
    crate::persist::replace_file(
        storage,
        data_dir,
        CREDENTIALS_FILE,
        crate::layout::CREDENTIALS_TMP,
        &bytes,
    )
    .map_err(|e| e.to_string())
}

/// A live access token.
#[derive(Debug, Clone, Copy)]
struct Session {
    user_id: u32,
    serial: u64,
    expires_at: Instant,
}

/// Who made an authenticated request (a request extension set by the middleware).
#[derive(Clone)]
pub(crate) struct Identity {
    pub(crate) user_id: u32,
    /// Which user of that id (`users::User::serial`; root's is 0).
    pub(crate) serial: u64,
    pub(crate) token: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("user_id", &self.user_id)
            .field("serial", &self.serial)
            .field("token", &REDACTED)
            .finish()
    }
}

/// Tokens and the login throttle. Its `Debug` shows how many sessions are
/// live, never a token (`AppState` and `RunningServer` print it).
pub(crate) struct Auth {
    root: RootUser,
    /// Every other user (`crate::users`), and their permissions.
    pub(crate) users: Arc<Users>,
    token_expiry: Duration,
    failed_login_delay: Duration,
    sessions: Mutex<HashMap<String, Session>>,
    /// Consecutive failed logins; the lock is the one-login-at-a-time turn.
    login_turn: tokio::sync::Mutex<u32>,
}

/// Iggy's `IdentityInfo`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct IdentityInfo {
    pub(crate) user_id: u32,
    pub(crate) access_token: TokenInfo,
}

#[derive(Clone, Serialize)]
pub(crate) struct TokenInfo {
    pub(crate) token: String,
    /// Unix seconds.
    pub(crate) expiry: u64,
}

impl std::fmt::Debug for TokenInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenInfo")
            .field("token", &REDACTED)
            .field("expiry", &self.expiry)
            .finish()
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("root", &self.root)
            .field("token_expiry", &self.token_expiry)
            .field("failed_login_delay", &self.failed_login_delay)
            .field("live_sessions", &self.sessions().len())
            .finish_non_exhaustive()
    }
}

impl Auth {
    pub(crate) fn new(
        root: RootUser,
        users: Arc<Users>,
        token_expiry: Duration,
        failed_login_delay: Duration,
    ) -> Self {
        Auth {
            root,
            users,
            token_expiry,
            failed_login_delay,
            sessions: Mutex::new(HashMap::new()),
            login_turn: tokio::sync::Mutex::new(0),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // A panic while holding this lock cannot leave the map half-updated
        // (every change is one insert or remove), so a poisoned lock is safe to use.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn issue(&self, (user_id, serial): (u32, u64)) -> IdentityInfo {
        let mut bytes = [0u8; 32];
        OsRng.fill_bytes(&mut bytes);
        let token = URL_SAFE_NO_PAD.encode(bytes);
        let now = Instant::now();
        let expiry_unix_secs = SystemTime::now()
            .checked_add(self.token_expiry)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let mut sessions = self.sessions();
        sessions.retain(|_, s| s.expires_at > now);
        sessions.insert(
            token.clone(),
            Session {
                user_id,
                serial,
                expires_at: now + self.token_expiry,
            },
        );
        IdentityInfo {
            user_id,
            access_token: TokenInfo {
                token,
                expiry: expiry_unix_secs,
            },
        }
    }

    pub(crate) fn validate(&self, token: &str) -> Option<Identity> {
        let mut sessions = self.sessions();
        let session = *sessions.get(token)?;
        if session.expires_at <= Instant::now() {
            sessions.remove(token);
            return None;
        }
        Some(Identity {
            user_id: session.user_id,
            serial: session.serial,
            token: token.to_string(),
        })
    }

    pub(crate) fn revoke(&self, token: &str) {
        self.sessions().remove(token);
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(MAX_BACKOFF_DOUBLINGS);
        self.failed_login_delay.saturating_mul(1 << doublings)
    }

    /// Verifies credentials (one login at a time) and issues a token.
    pub(crate) async fn login(
        &self,
        username: String,
        password: String,
    ) -> ApiResult<IdentityInfo> {
        let user_id = self.verify_login(username, password).await?;
        Ok(self.issue(user_id))
    }

    /// Verifies credentials (one login at a time, a failure slowed by the
    /// throttle) and answers the user id; no token is issued. The TCP
    /// transport's login: the connection itself is the session.
    pub(crate) async fn verify_login(
        &self,
        username: String,
        password: String,
    ) -> ApiResult<(u32, u64)> {
        let mut failures = self.login_turn.lock().await;
        // Root, or an active user of that name; anyone else is checked
        // against root's hash, so an unknown name takes as long as a known
        // one and the answer never tells whether the user exists.
        let (who, hash) = if username == self.root.username {
            (Some((ROOT_USER_ID, 0)), self.root.password_hash.clone())
        } else {
            match self.users.credentials(&username) {
                Some((id, serial, hash)) => (Some((id, serial)), hash),
                None => (None, self.root.password_hash.clone()),
            }
        };
        let password_ok = tokio::task::spawn_blocking(move || verify_password(&password, &hash))
            .await
            .map_err(|e| ApiError::internal(format!("login verification failed: {e}")))?;
        if let (Some((user_id, serial)), true) = (who, password_ok) {
            *failures = 0;
            tracing::info!(user_id, "login succeeded");
            return Ok((user_id, serial));
        }
        *failures = failures.saturating_add(1);
        let delay = self.backoff(*failures);
        tracing::warn!(
            consecutive_failures = *failures,
            delay_ms = delay.as_millis() as u64,
            "login failed"
        );
        tokio::time::sleep(delay).await;
        Err(ApiError::invalid_credentials())
    }

    /// What `user_id` may do: everything for root; a user's permissions
    /// while it exists and is active; nothing otherwise (a deleted or
    /// deactivated user's open session can do nothing gated).
    pub(crate) fn permissions(&self, user_id: u32, serial: u64) -> Option<Permissions> {
        if user_id == ROOT_USER_ID {
            return Some(Permissions::root());
        }
        self.users
            .incarnation(user_id, serial)
            .filter(|u| u.status == UserStatus::Active)
            .and_then(|u| u.permissions)
    }

    /// Root's username.
    pub(crate) fn root_name(&self) -> &str {
        &self.root.username
    }

    /// Ends every HTTP session of user `id` (it was deleted).
    pub(crate) fn revoke_user(&self, id: u32) {
        self.sessions().retain(|_, s| s.user_id != id);
    }

    /// Live HTTP sessions (for `/stats`).
    pub(crate) fn live_sessions(&self) -> usize {
        self.sessions().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::SimStorage;
    use std::collections::BTreeMap;

    fn no_users() -> Arc<Users> {
        let storage: Arc<dyn DurableStorage> = Arc::new(SimStorage::with_seed(1));
        Arc::new(Users::load(storage, Path::new("/"), "root").unwrap())
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn given_sluice_and_iggy_variables_when_choosing_then_sluice_wins() {
        let env = env_of(&[
            ("SLUICE_ROOT_USERNAME", "admin"),
            ("SLUICE_ROOT_PASSWORD", "secret1"),
            ("IGGY_ROOT_USERNAME", "other"),
            ("IGGY_ROOT_PASSWORD", "other1"),
        ]);
        let source = RootSource::from_env(&env, true).unwrap();
        assert_eq!(
            source,
            RootSource::Explicit {
                username: "admin".into(),
                password: "secret1".into()
            }
        );
        assert!(!format!("{source:?}").contains("secret1"));
    }

    #[test]
    fn given_only_a_username_when_choosing_then_it_is_an_error() {
        let env = env_of(&[("IGGY_ROOT_USERNAME", "admin")]);
        assert!(RootSource::from_env(&env, false).is_err());
        assert_eq!(
            RootSource::from_env(&env_of(&[]), true).ok(),
            Some(RootSource::DefaultIggy)
        );
    }

    #[test]
    fn given_a_fresh_data_dir_when_generating_then_only_the_hash_is_stored_and_reused() {
        let storage = SimStorage::default();
        let dir = Path::new("/data");
        storage.create_dir_all(dir).unwrap();
        let first = setup_root(&storage, dir, RootSource::StoredOrGenerated).unwrap();
        let password = first.generated_password.clone().unwrap();
        let stored = storage.read_file(&dir.join(CREDENTIALS_FILE)).unwrap();
        let text = String::from_utf8(stored).unwrap();
        assert!(
            !text.contains(&password),
            "the plaintext must never be stored"
        );
        assert!(verify_password(&password, &first.user.password_hash));

        let second = setup_root(&storage, dir, RootSource::StoredOrGenerated).unwrap();
        assert_eq!(second.generated_password, None);
        assert_eq!(second.user, first.user);
    }

    #[test]
    fn given_live_tokens_when_debug_printed_then_no_token_or_hash_shows() {
        let hash = hash_password("s3cret-pw").unwrap();
        let auth = Auth::new(
            RootUser {
                username: "root".into(),
                password_hash: hash.clone(),
            },
            no_users(),
            Duration::from_secs(60),
            Duration::from_millis(10),
        );
        let issued = auth.issue((ROOT_USER_ID, 0));
        let token = issued.access_token.token.clone();
        let identity = auth.validate(&token).unwrap();
        for printed in [
            format!("{auth:?}"),
            format!("{issued:?}"),
            format!("{identity:?}"),
            format!("{:?}", auth.root),
        ] {
            assert!(!printed.contains(&token), "{printed}");
            assert!(!printed.contains(&hash), "{printed}");
        }
        assert!(format!("{auth:?}").contains("live_sessions: 1"));
    }

    #[test]
    fn given_repeated_failures_when_backing_off_then_the_delay_doubles_to_a_cap() {
        let auth = Auth::new(
            RootUser {
                username: "iggy".into(),
                password_hash: String::new(),
            },
            no_users(),
            Duration::from_secs(60),
            Duration::from_millis(10),
        );
        assert_eq!(auth.backoff(1), Duration::from_millis(10));
        assert_eq!(auth.backoff(2), Duration::from_millis(20));
        assert_eq!(auth.backoff(50), Duration::from_millis(320));
    }
}
