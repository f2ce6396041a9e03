//! Authentication shared by both transports: setting up the root user,
//! password verification (root's and the stored users', both held by
//! `crate::users`) with the failed-login throttle, HTTP login tokens (signed
//! by `crate::sessions`), and what a logged-in user may do
//! (`Auth::permissions`). The HTTP routes and middleware that use it are in
//! `http::auth`; the TCP transport (`tcp`) authenticates each connection
//! with `Auth::verify_login` (or a personal access token, `iggy::users`).
//!
//! Invariants:
//! - A plaintext password is never stored, logged or kept after start-up: the
//!   root password lives only as an argon2id PHC hash (in memory, and, for a
//!   generated password or one changed through the API, in
//!   `<data>/root.credentials`, written through `DurableStorage` with an
//!   atomic replace); other users' likewise, in `<data>/users`.
//! - Root's credentials are the configured ones (or the stored generated
//!   ones) until root is renamed or given a new password through the API;
//!   from then on the stored ones, whatever the configuration says
//!   (`setup_root`), as Iggy's server, where configuration only creates root.
//! - A session (an HTTP token, a TCP login) is bound to the user's id and
//!   serial: a deleted user's session never acts as a later user of its id,
//!   and an HTTP token of a deleted user is refused (401) on its next use.
//! - An HTTP token is valid until its expiry or its logout, whichever comes
//!   first, across restarts (`crate::sessions` keeps the key and the
//!   logouts durably; ADR 0025).
//! - Every HTTP route except `/ping`, `/users/login`, `/users/refresh-token`
//!   and `/personal-access-tokens/login` answers 401 without a valid token,
//!   before its handler runs; every TCP command but ping and the logins
//!   answers `unauthenticated` (40) on a connection that has not logged in.
//! - A failed login is answered only after it held the one penalty turn for
//!   a delay that doubles with each consecutive failure (capped at 32x the
//!   base), and every login waits for the turn to be free before its
//!   password is checked: failures are answered one per delay however many
//!   connections guess, while logins that succeed are checked side by side
//!   (at most one per core at a time, so the argon2 memory is bounded); a
//!   success resets the count.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sluice_storage::{DurableStorage, ErrorKind, OpKind, StorageError};

use crate::iggy::error::{ApiError, ApiResult};
use crate::iggy::permissions::Permissions;
pub(crate) use crate::password::hash_password;
pub use crate::password::verify_password;
use crate::sessions::{Session, Sessions, unix_now};
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
    /// Root was renamed or given a new password through the API (Iggy's
    /// update-user and change-password): from then on the stored record is
    /// root's, whatever the configuration says, as on Iggy's server, where
    /// the configured credentials only create root.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) changed_through_api: bool,
}

impl RootUser {
    pub(crate) fn new(username: &str, password_hash: String) -> Self {
        RootUser {
            username: username.to_string(),
            password_hash,
            changed_through_api: false,
        }
    }
}

/// The hash is left out: a `?` anywhere (a state dump, a panic message)
/// must not hand out material for an offline guess.
impl std::fmt::Debug for RootUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootUser")
            .field("username", &self.username)
            .field("password_hash", &REDACTED)
            .field("changed_through_api", &self.changed_through_api)
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
    let path = data_dir.join(CREDENTIALS_FILE);
    let file_error = |reason: String| AuthError::File {
        path: path.clone(),
        reason,
    };
    let stored = match storage.read_file(&path) {
        Ok(bytes) => {
            let user: RootUser = serde_json::from_slice(&bytes)
                .map_err(|e| file_error(format!("not a credentials record: {e}")))?;
            argon2::password_hash::PasswordHash::new(&user.password_hash)
                .map_err(|e| file_error(format!("bad password hash: {e}")))?;
            Some(user)
        }
        Err(e) if e.kind == ErrorKind::NotFound => None,
        Err(e) => return Err(file_error(e.to_string())),
    };
    let kept = |user: RootUser| RootSetup {
        user,
        generated_password: None,
    };
    match (source, stored) {
        // Changed through the API: the stored record wins, as on Iggy's
        // server, where the configured credentials only create root.
        (RootSource::Explicit { .. } | RootSource::DefaultIggy, Some(user))
            if user.changed_through_api =>
        {
            tracing::info!(
                path = %path.display(),
                "root's credentials were changed through the API; the stored ones are used"
            );
            Ok(kept(user))
        }
        (RootSource::Explicit { username, password }, _) => {
            Ok(kept(RootUser::new(&username, hash_password(&password)?)))
        }
        (RootSource::DefaultIggy, _) => Ok(kept(RootUser::new(
            DEFAULT_ROOT_USERNAME,
            hash_password(DEFAULT_ROOT_PASSWORD)?,
        ))),
        (RootSource::StoredOrGenerated, Some(user)) => Ok(kept(user)),
        (RootSource::StoredOrGenerated, None) => {
            let password = generate_password();
            let user = RootUser::new(DEFAULT_ROOT_USERNAME, hash_password(&password)?);
            store_credentials(storage, data_dir, &user).map_err(|e| file_error(e.to_string()))?;
            Ok(RootSetup {
                user,
                generated_password: Some(password),
            })
        }
    }
}

/// Stores the root user's credentials durably (`persist::replace_file`).
/// The storage error is returned whole, so a full disk stays a full disk
/// (`UsersError::NoSpace`, answered `storage_full` like every other write).
pub(crate) fn store_credentials(
    storage: &dyn DurableStorage,
    data_dir: &Path,
    user: &RootUser,
) -> Result<(), StorageError> {
    let bytes = serde_json::to_vec(user).map_err(|e| {
        StorageError::new(
            OpKind::Write,
            &data_dir.join(CREDENTIALS_FILE),
            ErrorKind::Io,
        )
        .with_detail(format!("the credentials record does not encode: {e}"))
    })?;
    crate::persist::replace_file(
        storage,
        data_dir,
        CREDENTIALS_FILE,
        crate::layout::CREDENTIALS_TMP,
        &bytes,
    )
}

/// Who made an authenticated request (a request extension set by the
/// middleware): the checked token's session. Its `Debug` shows no token.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) session: Session,
}

impl Identity {
    pub(crate) fn user_id(&self) -> u32 {
        self.session.user_id
    }

    /// Which user of that id (`users::User::serial`; root's is 0).
    pub(crate) fn serial(&self) -> u64 {
        self.session.serial
    }
}

/// Tokens and the login throttle. Its `Debug` shows how many sessions are
/// live, never a token nor the key (`AppState` and `RunningServer` print it).
pub(crate) struct Auth {
    /// Every user, root included (`crate::users`), and their permissions.
    pub(crate) users: Arc<Users>,
    sessions: Sessions,
    token_expiry: Duration,
    failed_login_delay: Duration,
    /// Consecutive failed logins.
    failures: AtomicU32,
    /// Held by a failed login for its delay; every login waits for it first.
    penalty: tokio::sync::Mutex<()>,
    /// Bounds the passwords checked at once (argon2 takes ~19 MiB each).
    checking: tokio::sync::Semaphore,
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
            .field("user_store", &self.users)
            .field("token_expiry", &self.token_expiry)
            .field("failed_login_delay", &self.failed_login_delay)
            .field("http_logins", &self.sessions)
            .finish_non_exhaustive()
    }
}

impl Auth {
    pub(crate) fn new(
        users: Arc<Users>,
        sessions: Sessions,
        token_expiry: Duration,
        failed_login_delay: Duration,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Auth {
            users,
            sessions,
            token_expiry,
            failed_login_delay,
            failures: AtomicU32::new(0),
            penalty: tokio::sync::Mutex::new(()),
            checking: tokio::sync::Semaphore::new(cores),
        }
    }

    /// Signs an HTTP login token for a verified user's incarnation.
    pub(crate) fn issue(&self, who: (u32, u64)) -> ApiResult<IdentityInfo> {
        let (token, expiry) = self
            .sessions
            .issue(who, self.token_expiry, unix_now())
            .map_err(ApiError::internal)?;
        Ok(IdentityInfo {
            user_id: who.0,
            access_token: TokenInfo { token, expiry },
        })
    }

    /// The identity an HTTP token carries: signed here, not expired, not
    /// logged out, and naming a user incarnation that still exists.
    pub(crate) fn validate(&self, token: &str) -> Option<Identity> {
        let session = self.sessions.check(token, unix_now())?;
        self.users
            .is_incarnation(session.user_id, session.serial)
            .then_some(Identity { session })
    }

    /// Logs the token of `identity` out, durably (blocking: call it off the
    /// runtime's threads).
    pub(crate) fn log_out(&self, identity: &Identity) -> ApiResult<()> {
        self.sessions
            .log_out(&identity.session, unix_now())
            .map_err(|e| ApiError::internal(e.to_string()))
    }

    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(MAX_BACKOFF_DOUBLINGS);
        self.failed_login_delay.saturating_mul(1 << doublings)
    }

    /// Verifies credentials and issues a token.
    pub(crate) async fn login(
        &self,
        username: String,
        password: String,
    ) -> ApiResult<IdentityInfo> {
        let user_id = self.verify_login(username, password).await?;
        self.issue(user_id)
    }

    /// Verifies credentials (a failure slowed by the throttle) and answers
    /// the user's id and serial; no token is issued. The TCP transport's
    /// login: the connection itself is the session.
    pub(crate) async fn verify_login(
        &self,
        username: String,
        password: String,
    ) -> ApiResult<(u32, u64)> {
        // Wait out a failed login's delay in progress.
        drop(self.penalty.lock().await);
        // Root, or an active user of that name; anyone else is checked
        // against root's hash, so an unknown name takes as long as a known
        // one and the answer never tells whether the user exists.
        let (who, hash) = match self.users.credentials(&username) {
            Some((id, serial, hash)) => (Some((id, serial)), hash),
            None => (None, self.users.root_hash()),
        };
        let password_ok = {
            let _slot = self
                .checking
                .acquire()
                .await
                .map_err(|e| ApiError::internal(format!("login verification failed: {e}")))?;
            tokio::task::spawn_blocking(move || verify_password(&password, &hash))
                .await
                .map_err(|e| ApiError::internal(format!("login verification failed: {e}")))?
        };
        if let (Some((user_id, serial)), true) = (who, password_ok) {
            self.failures.store(0, Ordering::Relaxed);
            tracing::info!(user_id, "login succeeded");
            return Ok((user_id, serial));
        }
        let _turn = self.penalty.lock().await;
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let delay = self.backoff(failures);
        tracing::warn!(
            consecutive_failures = failures,
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
    pub(crate) fn root_name(&self) -> String {
        self.users.root_name()
    }

    /// HTTP tokens this process signed that are still live (for `/stats`).
    pub(crate) fn live_sessions(&self) -> usize {
        self.sessions.live(unix_now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::SimStorage;
    use std::collections::BTreeMap;

    fn users_with_root(name: &str, password_hash: &str) -> Arc<Users> {
        let storage: Arc<dyn DurableStorage> = Arc::new(SimStorage::with_seed(1));
        let root = RootUser::new(name, password_hash.to_string());
        Arc::new(Users::load(storage, Path::new("/"), root).unwrap())
    }

    fn sessions() -> Sessions {
        let storage: Arc<dyn DurableStorage> = Arc::new(SimStorage::with_seed(2));
        Sessions::open(storage, Path::new("/"), unix_now()).unwrap()
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
    fn given_root_changed_through_the_api_when_starting_then_the_stored_credentials_win() {
        let storage = SimStorage::default();
        let dir = Path::new("/data");
        storage.create_dir_all(dir).unwrap();
        // Given a root from the configuration, stored only as it was
        // created (not changed through the API): the configuration wins.
        let configured = RootSource::Explicit {
            username: "admin".into(),
            password: "first-pw".into(),
        };
        let created = RootUser::new("admin", hash_password("first-pw").unwrap());
        store_credentials(&storage, dir, &created).unwrap();
        let again = setup_root(&storage, dir, RootSource::DefaultIggy).unwrap();
        assert_eq!(again.user.username, DEFAULT_ROOT_USERNAME);
        // When root is renamed and given a new password through the API,
        let changed = RootUser {
            changed_through_api: true,
            ..RootUser::new("boss", hash_password("second-pw").unwrap())
        };
        store_credentials(&storage, dir, &changed).unwrap();
        // then every source starts with the changed credentials.
        for source in [
            configured,
            RootSource::DefaultIggy,
            RootSource::StoredOrGenerated,
        ] {
            let setup = setup_root(&storage, dir, source).unwrap();
            assert_eq!(setup.user, changed);
            assert_eq!(setup.generated_password, None);
        }
    }

    #[test]
    fn given_live_tokens_when_debug_printed_then_no_token_or_hash_shows() {
        let hash = hash_password("s3cret-pw").unwrap();
        let auth = Auth::new(
            users_with_root("root", &hash),
            sessions(),
            Duration::from_secs(60),
            Duration::from_millis(10),
        );
        let issued = auth.issue((ROOT_USER_ID, 0)).unwrap();
        let token = issued.access_token.token.clone();
        let identity = auth.validate(&token).unwrap();
        for printed in [
            format!("{auth:?}"),
            format!("{issued:?}"),
            format!("{identity:?}"),
            format!("{:?}", auth.users),
        ] {
            assert!(!printed.contains(&token), "{printed}");
            assert!(!printed.contains(&hash), "{printed}");
        }
        assert!(format!("{auth:?}").contains("issued: 1"), "{auth:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn given_guesses_from_many_connections_then_failures_are_answered_one_delay_at_a_time() {
        // Given a base delay of 50 ms, and four wrong passwords sent at once
        // (as from four connections),
        let hash = hash_password("right-pw").unwrap();
        let auth = Arc::new(Auth::new(
            users_with_root("root", &hash),
            sessions(),
            Duration::from_secs(60),
            Duration::from_millis(50),
        ));
        let started = std::time::Instant::now();
        let guesses: Vec<_> = (0..4)
            .map(|_| {
                let auth = auth.clone();
                tokio::spawn(async move { auth.verify_login("root".into(), "wrong".into()).await })
            })
            .collect();
        for guess in guesses {
            assert!(guess.await.unwrap().is_err());
        }
        // then they were answered one after another, each after its doubled
        // delay (50 + 100 + 200 + 400 ms): checking passwords side by side
        // did not let guesses share a delay.
        assert!(
            started.elapsed() >= Duration::from_millis(750),
            "four failures answered in {:?}",
            started.elapsed()
        );
        // And a success resets the count.
        assert_eq!(
            auth.verify_login("root".into(), "right-pw".into())
                .await
                .unwrap(),
            (ROOT_USER_ID, 0)
        );
        assert_eq!(auth.failures.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn given_repeated_failures_when_backing_off_then_the_delay_doubles_to_a_cap() {
        let auth = Auth::new(
            users_with_root("iggy", ""),
            sessions(),
            Duration::from_secs(60),
            Duration::from_millis(10),
        );
        assert_eq!(auth.backoff(1), Duration::from_millis(10));
        assert_eq!(auth.backoff(2), Duration::from_millis(20));
        assert_eq!(auth.backoff(50), Duration::from_millis(320));
    }
}
