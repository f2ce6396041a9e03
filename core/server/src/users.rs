//! The users, as Iggy has them (issue 29): a name, an argon2id password
//! hash, a status and permissions, kept durably in one file (`users`, a
//! framed `SLUS` record) replaced whole on every change. Root is held here
//! too, for logins and its name's uniqueness, but kept in its own file
//! (`root.credentials`, `auth::store_credentials`): it is renamed or given a
//! new password by `change_root`, saved before memory changes.
//!
//! Invariants:
//! - The file holds exactly one record and is replaced through
//!   `persist::replace_file` (a fresh temporary file, synced, renamed over
//!   the name, the directory synced): after any crash it holds the users
//!   as they were before a change or after it, never a mix, so nobody loses
//!   a permission they had or gains one they were never given
//!   (`a_crash_at_any_point_of_a_save_leaves_the_old_or_the_new_users`).
//! - A change is applied in memory only after its save returned `Ok`; a
//!   failed save leaves memory as it was and the change unacknowledged (the
//!   disk may hold either; the next successful save writes memory whole). A
//!   save refused for a full disk is `UsersError::NoSpace` (Iggy's layer
//!   answers it `storage_full`, as the engine's): the file system refused
//!   the temporary file's growth, so the users file was not touched.
//! - Only a test build can save otherwise: `SaveMode::InPlaceUnsynced`
//!   (the users file overwritten where it is, no sync) exists in unit tests
//!   and, switched on by `SLUICE_TEST_NAIVE_USERS_SAVE=1`, in a build with
//!   the `naive-users-save` feature (the test-only `sluice-faulty`, ADR
//!   0014), so the tests can show they catch a save without the discipline.
//! - Ids are Iggy's: root is 0 (held by `auth`, never in this file), a new
//!   user takes the lowest id no user holds, from 1. Names are unique, root's
//!   included, and within Iggy's bounds (3 to 50 bytes; passwords 3 to 100).
//! - No password and no hash is ever logged or shown by `Debug`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use sluice_storage::{DurableStorage, ErrorKind, StorageError};

use crate::auth::{
    MAX_PASSWORD_LEN, MAX_USERNAME_LEN, MIN_PASSWORD_LEN, MIN_USERNAME_LEN, ROOT_USER_ID, RootUser,
};
use crate::frame::{self, Magic};
use crate::iggy::permissions::Permissions;
use crate::layout::{USERS_FILE, USERS_TMP};

const USERS_VERSION: u16 = 1;
const MAX_USERS_FILE: usize = 16 << 20;

/// Iggy's user status (wire codes 1 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum UserStatus {
    #[default]
    Active,
    Inactive,
}

impl UserStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Active => "active",
            UserStatus::Inactive => "inactive",
        }
    }

    pub fn code(self) -> u8 {
        match self {
            UserStatus::Active => 1,
            UserStatus::Inactive => 2,
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" | "1" => Some(UserStatus::Active),
            "inactive" | "2" => Some(UserStatus::Inactive),
            _ => None,
        }
    }
}

/// One user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u32,
    /// Unique among every user ever created (ids are reused, as Iggy's):
    /// a session is bound to it, so a session of a deleted user never
    /// acts as a later user that took the same id.
    pub serial: u64,
    pub username: String,
    /// argon2id PHC string.
    pub(crate) password_hash: String,
    pub status: UserStatus,
    /// Microseconds since the Unix epoch.
    pub created_at: u64,
    /// `None`: no permission at all (not even reading).
    pub permissions: Option<Permissions>,
    /// Personal access tokens, by name.
    pub tokens: BTreeMap<String, AccessToken>,
}

/// A personal access token as kept: its name, the BLAKE3 hash (hex) of the
/// token (the token itself is shown once, at creation, and never kept),
/// and when it expires (microseconds; `None`: never).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessToken {
    pub name: String,
    pub(crate) hash: String,
    pub expiry_at: Option<u64>,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("name", &self.name)
            .field("expiry_at", &self.expiry_at)
            .finish_non_exhaustive()
    }
}

/// Iggy's bounds on personal access tokens.
pub const MIN_TOKEN_NAME_LEN: usize = 3;
pub const MAX_TOKEN_NAME_LEN: usize = 30;
pub const MAX_TOKENS_PER_USER: usize = 100;

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("username", &self.username)
            .field("status", &self.status)
            .field("permissions", &self.permissions)
            .finish_non_exhaustive()
    }
}

/// Everything the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct UsersRecord {
    users: BTreeMap<u32, User>,
    /// Above every `serial` ever given out (root's is 0).
    next_serial: u64,
    /// Root's personal access tokens (root itself is not in `users`).
    root_tokens: BTreeMap<String, AccessToken>,
}

/// Why a users operation was refused or failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsersError {
    #[error("user {0} does not exist")]
    NotFound(String),
    #[error("a user named {0:?} already exists")]
    NameTaken(String),
    #[error("username must be {MIN_USERNAME_LEN} to {MAX_USERNAME_LEN} bytes")]
    InvalidUsername,
    #[error("password must be {MIN_PASSWORD_LEN} to {MAX_PASSWORD_LEN} bytes")]
    InvalidPassword,
    #[error("the root user cannot be changed this way")]
    Root,
    #[error("the current password does not match")]
    WrongPassword,
    #[error("the users would no longer fit the users file's bound ({MAX_USERS_FILE} bytes)")]
    TooLarge,
    #[error("a token name must be {MIN_TOKEN_NAME_LEN} to {MAX_TOKEN_NAME_LEN} bytes")]
    InvalidTokenName,
    #[error("a token named {0:?} already exists")]
    TokenNameTaken(String),
    #[error("a user holds at most {MAX_TOKENS_PER_USER} tokens")]
    TooManyTokens,
    #[error("{}: {reason}", path.display())]
    Storage { path: PathBuf, reason: String },
    /// The file system refused the save's growth (ENOSPC, EDQUOT, EFBIG).
    #[error("users file {}: {reason}", path.display())]
    NoSpace { path: PathBuf, reason: String },
}

pub type UsersResult<T> = Result<T, UsersError>;

/// A storage failure of the users file at `path`, a full disk told apart.
fn storage_error(path: PathBuf, e: &StorageError) -> UsersError {
    let reason = e.to_string();
    if e.kind == ErrorKind::NoSpace {
        UsersError::NoSpace { path, reason }
    } else {
        UsersError::Storage { path, reason }
    }
}

/// Environment variable that, in a build with the `naive-users-save`
/// feature, saves the users in place, unsynced (see the invariants).
pub const NAIVE_USERS_SAVE_ENV: &str = "SLUICE_TEST_NAIVE_USERS_SAVE";

/// How a change reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SaveMode {
    /// `persist::replace_file`: the one mode of a shipped build.
    Replace,
    /// Test only: the users file truncated and written where it is, with no
    /// sync of it or of its directory.
    #[cfg(any(test, feature = "naive-users-save"))]
    InPlaceUnsynced,
}

impl SaveMode {
    fn of_this_build() -> Self {
        #[cfg(feature = "naive-users-save")]
        if std::env::var_os(NAIVE_USERS_SAVE_ENV).is_some_and(|v| v == "1") {
            tracing::warn!("test fault active: the users file saved in place, unsynced");
            return SaveMode::InPlaceUnsynced;
        }
        SaveMode::Replace
    }
}

fn check_username(name: &str) -> UsersResult<()> {
    if (MIN_USERNAME_LEN..=MAX_USERNAME_LEN).contains(&name.len()) {
        Ok(())
    } else {
        Err(UsersError::InvalidUsername)
    }
}

fn check_password(password: &str) -> UsersResult<()> {
    if (MIN_PASSWORD_LEN..=MAX_PASSWORD_LEN).contains(&password.len()) {
        Ok(())
    } else {
        Err(UsersError::InvalidPassword)
    }
}

/// A user to create.
#[derive(Clone)]
pub struct NewUser {
    pub username: String,
    pub password: String,
    pub status: UserStatus,
    pub permissions: Option<Permissions>,
}

/// The users, in memory and on disk.
pub struct Users {
    storage: Arc<dyn DurableStorage>,
    dir: PathBuf,
    /// Root: its name (which no other user may take) and password hash,
    /// kept in its own file (`auth::store_credentials`). Locked after
    /// `record` when both are held.
    root: Mutex<RootUser>,
    record: Mutex<UsersRecord>,
    save: SaveMode,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("count", &self.lock().users.len())
            .finish_non_exhaustive()
    }
}

impl Users {
    /// Loads `<data_dir>/users`; a missing file is no users. An invalid one
    /// is an error naming it (start-up fails: starting with no users would
    /// lock out everyone who had an account).
    pub fn load(
        storage: Arc<dyn DurableStorage>,
        data_dir: &Path,
        root: RootUser,
    ) -> UsersResult<Self> {
        let path = data_dir.join(USERS_FILE);
        let record = match storage.read_file(&path) {
            Ok(bytes) => frame::decode_file(Magic::USERS, USERS_VERSION, &bytes, MAX_USERS_FILE)
                .map_err(|e| UsersError::Storage {
                    path: path.clone(),
                    reason: e.to_string(),
                })?,
            Err(e) if e.kind == ErrorKind::NotFound => UsersRecord::default(),
            Err(e) => {
                return Err(UsersError::Storage {
                    path,
                    reason: e.to_string(),
                });
            }
        };
        Ok(Users {
            storage,
            dir: data_dir.to_path_buf(),
            root: Mutex::new(root),
            record: Mutex::new(record),
            save: SaveMode::of_this_build(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, UsersRecord> {
        // Every change replaces the record whole after its save: a panic
        // cannot leave it half-changed.
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Saves `next` durably, then makes it the users (see the invariants).
    fn commit(&self, current: &mut UsersRecord, next: UsersRecord) -> UsersResult<()> {
        let bytes =
            frame::encode(Magic::USERS, USERS_VERSION, &next).map_err(|e| UsersError::Storage {
                path: self.dir.join(USERS_FILE),
                reason: e.to_string(),
            })?;
        // Never write what `load` would refuse: the server must start again.
        if bytes.len() > MAX_USERS_FILE {
            return Err(UsersError::TooLarge);
        }
        let saved = match self.save {
            SaveMode::Replace => crate::persist::replace_file(
                self.storage.as_ref(),
                &self.dir,
                USERS_FILE,
                USERS_TMP,
                &bytes,
            ),
            #[cfg(any(test, feature = "naive-users-save"))]
            SaveMode::InPlaceUnsynced => self.write_in_place(&bytes),
        };
        saved.map_err(|e| storage_error(self.dir.join(USERS_FILE), &e))?;
        *current = next;
        Ok(())
    }

    /// Test only: what a save without the discipline does.
    #[cfg(any(test, feature = "naive-users-save"))]
    fn write_in_place(&self, bytes: &[u8]) -> Result<(), StorageError> {
        let file = self.storage.open(
            &self.dir.join(USERS_FILE),
            sluice_storage::OpenMode::CreateOrOpen,
        )?;
        file.truncate(0)?;
        file.write_at(0, bytes)
    }

    /// Every user, by id.
    pub fn list(&self) -> Vec<User> {
        self.lock().users.values().cloned().collect()
    }

    pub fn get(&self, id: u32) -> Option<User> {
        self.lock().users.get(&id).cloned()
    }

    pub fn by_name(&self, name: &str) -> Option<User> {
        self.lock()
            .users
            .values()
            .find(|u| u.username == name)
            .cloned()
    }

    fn name_free(&self, record: &UsersRecord, name: &str, except: Option<u32>) -> UsersResult<()> {
        let taken = name == self.root_name()
            || record
                .users
                .values()
                .any(|u| u.username == name && Some(u.id) != except);
        if taken {
            Err(UsersError::NameTaken(name.to_string()))
        } else {
            Ok(())
        }
    }

    /// Creates a user with the lowest free id from 1; `password_hash` is
    /// `new.password` hashed by the caller (off the async runtime).
    pub fn create(&self, new: &NewUser, password_hash: String, now: u64) -> UsersResult<User> {
        check_username(&new.username)?;
        check_password(&new.password)?;
        let mut record = self.lock();
        self.name_free(&record, &new.username, None)?;
        let id = (1..=u32::MAX)
            .find(|id| !record.users.contains_key(id))
            .ok_or_else(|| UsersError::NameTaken(new.username.clone()))?;
        let serial = record.next_serial.max(1);
        let user = User {
            id,
            serial,
            username: new.username.clone(),
            password_hash,
            status: new.status,
            created_at: now,
            permissions: new.permissions.clone(),
            tokens: BTreeMap::new(),
        };
        let mut next = record.clone();
        next.users.insert(id, user.clone());
        next.next_serial = serial + 1;
        self.commit(&mut record, next)?;
        Ok(user)
    }

    /// Changes a user with `change`, saved whole.
    fn change(
        &self,
        id: u32,
        change: impl FnOnce(&mut User) -> UsersResult<()>,
    ) -> UsersResult<()> {
        if id == ROOT_USER_ID {
            return Err(UsersError::Root);
        }
        let mut record = self.lock();
        let mut next = record.clone();
        let user = next
            .users
            .get_mut(&id)
            .ok_or_else(|| UsersError::NotFound(id.to_string()))?;
        change(user)?;
        let name = user.username.clone();
        self.name_free(&next, &name, Some(id))?;
        self.commit(&mut record, next)
    }

    /// Renames a user and/or sets its status.
    pub fn update(
        &self,
        id: u32,
        username: Option<&str>,
        status: Option<UserStatus>,
    ) -> UsersResult<()> {
        if let Some(name) = username {
            check_username(name)?;
        }
        self.change(id, |u| {
            if let Some(name) = username {
                u.username = name.to_string();
            }
            if let Some(status) = status {
                u.status = status;
            }
            Ok(())
        })
    }

    /// Replaces a user's permissions (`None` removes them all).
    pub fn set_permissions(&self, id: u32, permissions: Option<Permissions>) -> UsersResult<()> {
        self.change(id, |u| {
            u.permissions = permissions;
            Ok(())
        })
    }

    /// Replaces a user's password hash (the caller checked the current
    /// password against `get(id)`'s hash and hashed the new one).
    pub fn set_password_hash(&self, id: u32, new_password: &str, hash: String) -> UsersResult<()> {
        check_password(new_password)?;
        self.change(id, |u| {
            u.password_hash = hash;
            Ok(())
        })
    }

    /// Deletes a user.
    pub fn delete(&self, id: u32) -> UsersResult<User> {
        if id == ROOT_USER_ID {
            return Err(UsersError::Root);
        }
        let mut record = self.lock();
        let mut next = record.clone();
        let user = next
            .users
            .remove(&id)
            .ok_or_else(|| UsersError::NotFound(id.to_string()))?;
        self.commit(&mut record, next)?;
        Ok(user)
    }

    fn root(&self) -> MutexGuard<'_, RootUser> {
        // Replaced whole after its save: a panic cannot leave it half-changed.
        self.root.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Root's name.
    pub fn root_name(&self) -> String {
        self.root().username.clone()
    }

    /// Root's password hash: what a login of an unknown name is checked
    /// against, so that it takes as long as a known one.
    pub(crate) fn root_hash(&self) -> String {
        self.root().password_hash.clone()
    }

    /// Renames root and/or gives it a new password hash (the caller checked
    /// the current password and hashed the new one), saved to root's own
    /// file before memory changes. Under the users lock, so no user takes
    /// the new name meanwhile. From then on the file's credentials are
    /// root's, whatever the configuration says (`auth::setup_root`).
    pub(crate) fn change_root(
        &self,
        username: Option<&str>,
        password_hash: Option<String>,
    ) -> UsersResult<()> {
        if let Some(name) = username {
            check_username(name)?;
        }
        let record = self.lock();
        if let Some(name) = username {
            let taken = record.users.values().any(|u| u.username == name);
            if taken {
                return Err(UsersError::NameTaken(name.to_string()));
            }
        }
        let mut root = self.root();
        let mut next = root.clone();
        if let Some(name) = username {
            next.username = name.to_string();
        }
        if let Some(hash) = password_hash {
            next.password_hash = hash;
        }
        next.changed_through_api = true;
        crate::auth::store_credentials(self.storage.as_ref(), &self.dir, &next)
            .map_err(|e| storage_error(self.dir.join(crate::layout::CREDENTIALS_FILE), &e))?;
        *root = next;
        Ok(())
    }

    /// The hash to verify a login of `username` against, and who that is
    /// (id and serial), if such an active user, root included, exists.
    pub(crate) fn credentials(&self, username: &str) -> Option<(u32, u64, String)> {
        {
            let root = self.root();
            if root.username == username {
                return Some((ROOT_USER_ID, 0, root.password_hash.clone()));
            }
        }
        self.lock()
            .users
            .values()
            .find(|u| u.username == username && u.status == UserStatus::Active)
            .map(|u| (u.id, u.serial, u.password_hash.clone()))
    }

    /// The tokens of user `id` (root's for 0), mutably, in `record`.
    fn tokens_of(
        record: &mut UsersRecord,
        id: u32,
    ) -> UsersResult<&mut BTreeMap<String, AccessToken>> {
        if id == ROOT_USER_ID {
            return Ok(&mut record.root_tokens);
        }
        record
            .users
            .get_mut(&id)
            .map(|u| &mut u.tokens)
            .ok_or_else(|| UsersError::NotFound(id.to_string()))
    }

    /// Adds a token (its hash) to user `id`.
    pub fn add_token(&self, id: u32, token: AccessToken) -> UsersResult<()> {
        if !(MIN_TOKEN_NAME_LEN..=MAX_TOKEN_NAME_LEN).contains(&token.name.len()) {
            return Err(UsersError::InvalidTokenName);
        }
        let mut record = self.lock();
        let mut next = record.clone();
        let tokens = Self::tokens_of(&mut next, id)?;
        // Iggy checks the count before the name.
        if tokens.len() >= MAX_TOKENS_PER_USER {
            return Err(UsersError::TooManyTokens);
        }
        if tokens.contains_key(&token.name) {
            return Err(UsersError::TokenNameTaken(token.name));
        }
        tokens.insert(token.name.clone(), token);
        self.commit(&mut record, next)
    }

    /// The tokens of user `id`: name and expiry.
    pub fn tokens(&self, id: u32) -> Vec<(String, Option<u64>)> {
        let record = self.lock();
        let tokens = if id == ROOT_USER_ID {
            Some(&record.root_tokens)
        } else {
            record.users.get(&id).map(|u| &u.tokens)
        };
        tokens
            .into_iter()
            .flatten()
            .map(|(n, t)| (n.clone(), t.expiry_at))
            .collect()
    }

    /// Deletes user `id`'s token `name`.
    pub fn delete_token(&self, id: u32, name: &str) -> UsersResult<()> {
        let mut record = self.lock();
        let mut next = record.clone();
        if Self::tokens_of(&mut next, id)?.remove(name).is_none() {
            return Err(UsersError::NotFound(name.to_string()));
        }
        self.commit(&mut record, next)
    }

    /// Who holds the token whose hash is `hash`, if it has not expired at
    /// `now`: `(id, serial)`, and the holder's status (root's is active).
    pub(crate) fn token_holder(&self, hash: &str, now: u64) -> Option<((u32, u64), UserStatus)> {
        let live = |t: &AccessToken| t.hash == hash && t.expiry_at.is_none_or(|at| at > now);
        let record = self.lock();
        if record.root_tokens.values().any(live) {
            return Some(((ROOT_USER_ID, 0), UserStatus::Active));
        }
        record
            .users
            .values()
            .find(|u| u.tokens.values().any(live))
            .map(|u| ((u.id, u.serial), u.status))
    }

    /// Removes every token expired at `now`, root's and the users' (Iggy's
    /// token cleaner), in one save; answers how many. Writes nothing when
    /// none has expired.
    pub fn remove_expired_tokens(&self, now: u64) -> UsersResult<usize> {
        let expired = |t: &AccessToken| t.expiry_at.is_some_and(|at| at <= now);
        let mut record = self.lock();
        let count = record
            .root_tokens
            .values()
            .chain(record.users.values().flat_map(|u| u.tokens.values()))
            .filter(|t| expired(t))
            .count();
        if count == 0 {
            return Ok(0);
        }
        let mut next = record.clone();
        next.root_tokens.retain(|_, t| !expired(t));
        for user in next.users.values_mut() {
            user.tokens.retain(|_, t| !expired(t));
        }
        self.commit(&mut record, next)?;
        Ok(count)
    }

    /// The user `id` if it is still the one created with `serial`.
    pub fn incarnation(&self, id: u32, serial: u64) -> Option<User> {
        self.get(id).filter(|u| u.serial == serial)
    }

    /// Whether user `id` is still incarnation `serial` (root's is 0): what
    /// every HTTP request checks, without copying the user.
    pub(crate) fn is_incarnation(&self, id: u32, serial: u64) -> bool {
        if id == ROOT_USER_ID {
            return serial == 0;
        }
        self.lock()
            .users
            .get(&id)
            .is_some_and(|u| u.serial == serial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iggy::permissions::{GlobalPermissions, Rule};
    use sluice_storage::{Crash, SimStorage};

    fn users_on(sim: &SimStorage) -> Users {
        let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
        Users::load(storage, Path::new("/"), RootUser::new("iggy", "h0".into())).unwrap()
    }

    fn reader() -> Permissions {
        Permissions {
            global: GlobalPermissions {
                read_streams: true,
                ..GlobalPermissions::default()
            },
            streams: None,
        }
    }

    fn new_user(name: &str) -> NewUser {
        NewUser {
            username: name.into(),
            password: "secret".into(),
            status: UserStatus::Active,
            permissions: Some(reader()),
        }
    }

    #[test]
    fn given_users_when_created_changed_and_deleted_then_ids_names_and_permissions_are_iggys() {
        let sim = SimStorage::with_seed(1);
        let users = users_on(&sim);
        // Ids from 1, the lowest free one.
        let a = users.create(&new_user("alice"), "h1".into(), 10).unwrap();
        let b = users.create(&new_user("bob"), "h2".into(), 11).unwrap();
        assert_eq!((a.id, b.id), (1, 2));
        users.delete(1).unwrap();
        assert_eq!(
            users
                .create(&new_user("carol"), "h3".into(), 12)
                .unwrap()
                .id,
            1
        );
        // Names are unique, root's included, and bounded.
        assert_eq!(
            users.create(&new_user("bob"), "x".into(), 0),
            Err(UsersError::NameTaken("bob".into()))
        );
        assert_eq!(
            users.create(&new_user("iggy"), "x".into(), 0),
            Err(UsersError::NameTaken("iggy".into()))
        );
        assert_eq!(
            users.create(&new_user("ab"), "x".into(), 0),
            Err(UsersError::InvalidUsername)
        );
        assert_eq!(
            users.update(2, Some("carol"), None),
            Err(UsersError::NameTaken("carol".into()))
        );
        // Root is not in this file and is refused.
        assert_eq!(users.delete(ROOT_USER_ID), Err(UsersError::Root));
        assert_eq!(
            users.set_permissions(ROOT_USER_ID, None),
            Err(UsersError::Root)
        );
        // Everything survives a power loss (each change was synced).
        users.set_permissions(2, None).unwrap();
        users.update(2, None, Some(UserStatus::Inactive)).unwrap();
        sim.crash(Crash::PowerLoss);
        let again = users_on(&sim);
        assert_eq!(again.list(), users.list());
        assert_eq!(
            again.get(2).map(|u| (u.status, u.permissions)),
            Some((UserStatus::Inactive, None))
        );
        assert!(
            again
                .get(1)
                .unwrap()
                .permissions
                .unwrap()
                .allows(Rule::GetStreams)
        );
        // An inactive user has no credentials to log in with.
        assert!(again.credentials("bob").is_none());
        assert_eq!(again.credentials("carol").map(|c| c.0), Some(1));
        // Ids are reused, serials never: alice (id 1) was serial 1, carol
        // took id 1 with serial 3.
        assert_eq!(again.get(1).map(|u| u.serial), Some(3));
        assert!(again.incarnation(1, 1).is_none());
    }

    fn token(name: &str, expiry_at: Option<u64>) -> AccessToken {
        AccessToken {
            name: name.into(),
            hash: format!("hash-{name}"),
            expiry_at,
        }
    }

    #[test]
    fn given_expired_tokens_when_cleaning_then_only_they_are_removed_and_saved() {
        // Given root and a user with tokens that expire at 100, at 200, and never.
        let sim = SimStorage::with_seed(3);
        let users = users_on(&sim);
        users.create(&new_user("alice"), "h".into(), 1).unwrap();
        for id in [ROOT_USER_ID, 1] {
            users.add_token(id, token("soon", Some(100))).unwrap();
            users.add_token(id, token("later", Some(200))).unwrap();
            users.add_token(id, token("never", None)).unwrap();
        }
        // When nothing has expired yet, nothing is removed (or written).
        let ops = sim.op_count();
        assert_eq!(users.remove_expired_tokens(99).unwrap(), 0);
        assert_eq!(sim.op_count(), ops);
        // When the first expiry has passed, those tokens go, of both holders,
        assert_eq!(users.remove_expired_tokens(100).unwrap(), 2);
        for id in [ROOT_USER_ID, 1] {
            let names: Vec<String> = users.tokens(id).into_iter().map(|(n, _)| n).collect();
            assert_eq!(names, ["later", "never"]);
        }
        // and the removal is durable.
        sim.crash(Crash::PowerLoss);
        let names: Vec<String> = users_on(&sim)
            .tokens(1)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["later", "never"]);
    }

    /// A change of the users, for the crash-point tests.
    type Change = fn(&Users) -> UsersResult<()>;

    /// Every kind of change a request can make, by name.
    const CHANGES: [(&str, Change); 9] = [
        ("create", |u| {
            u.create(&new_user("carol"), "h3".into(), 3).map(|_| ())
        }),
        ("rename", |u| u.update(1, Some("alicia"), None)),
        ("deactivate", |u| {
            u.update(1, None, Some(UserStatus::Inactive))
        }),
        ("set permissions", |u| {
            u.set_permissions(1, Some(Permissions::root()))
        }),
        ("remove permissions", |u| u.set_permissions(1, None)),
        ("change password", |u| {
            u.set_password_hash(1, "new-pw", "h9".into())
        }),
        ("delete", |u| u.delete(1).map(|_| ())),
        ("create token", |u| {
            u.add_token(
                1,
                AccessToken {
                    name: "tk2".into(),
                    hash: "b2".into(),
                    expiry_at: None,
                },
            )
        }),
        ("delete token", |u| u.delete_token(1, "tk1")),
    ];

    /// Users on a fresh `SimStorage`, saved durably: alice (id 1, holding
    /// token `tk1`) and bob (id 2).
    fn saved_users() -> (SimStorage, Users) {
        let sim = SimStorage::with_seed(7);
        let users = users_on(&sim);
        users.create(&new_user("alice"), "h1".into(), 1).unwrap();
        users.create(&new_user("bob"), "h2".into(), 2).unwrap();
        let token = AccessToken {
            name: "tk1".into(),
            hash: "b1".into(),
            expiry_at: None,
        };
        users.add_token(1, token).unwrap();
        (sim, users)
    }

    /// Cuts `change`'s save, made in `mode`, after each of its storage calls
    /// in turn, then crashes the process and cuts the power; the users read
    /// back must be the old ones or the new ones (the new ones once the
    /// change was acknowledged) and a failed save must change nothing in
    /// memory. Returns how many calls the save had, or the first cut that
    /// broke that.
    fn cut_everywhere(mode: SaveMode, change: Change) -> Result<u64, String> {
        let new = {
            let (_, users) = saved_users();
            change(&users).unwrap();
            users.list()
        };
        let mut k = 0u64;
        loop {
            let (sim, mut users) = saved_users();
            users.save = mode;
            let old = users.list();
            sim.halt_after(Some(sim.op_count() + k));
            let result = change(&users);
            if result.is_err() && users.list() != old {
                return Err(format!("cut after call {k}: a failed save changed memory"));
            }
            for crash in [Crash::Process, Crash::PowerLoss] {
                sim.crash(crash);
                let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
                let seen = match Users::load(
                    storage,
                    Path::new("/"),
                    RootUser::new("iggy", "h0".into()),
                ) {
                    Ok(u) => u.list(),
                    Err(e) => return Err(format!("cut after call {k} ({crash:?}): {e}")),
                };
                if seen != old && seen != new {
                    return Err(format!("cut after call {k} ({crash:?}): a mix: {seen:?}"));
                }
                if result.is_ok() && seen != new {
                    return Err(format!(
                        "cut after call {k} ({crash:?}): an acknowledged change was lost"
                    ));
                }
            }
            if result.is_ok() {
                return Ok(k);
            }
            k += 1;
        }
    }

    #[test]
    fn a_crash_at_any_point_of_a_save_leaves_the_old_or_the_new_users() {
        // Given users saved durably, then each kind of change whose save is
        // cut off after each of its storage calls in turn, a process crash
        // and a power loss,
        for (what, change) in CHANGES {
            // then the users read back are the old ones or the new ones,
            // never a mix: nobody lost a permission, a token or a password
            // they had, nor gained one they were never given.
            let calls =
                cut_everywhere(SaveMode::Replace, change).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                calls >= 5,
                "{what}: the save had only {calls} storage calls to cut"
            );
        }
    }

    /// Teeth of the test above: a save without the discipline (the file
    /// overwritten in place, unsynced) is caught for every kind of change.
    #[test]
    fn given_users_saved_in_place_unsynced_then_the_crash_points_find_a_change_lost_or_torn() {
        for (what, change) in CHANGES {
            let found = cut_everywhere(SaveMode::InPlaceUnsynced, change);
            assert!(found.is_err(), "{what}: an in-place save went unnoticed");
        }
    }

    #[test]
    fn given_a_full_disk_when_root_changes_its_password_then_no_space_is_answered_and_nothing_changed()
     {
        // Given saved users and a disk with no byte left,
        let (sim, users) = saved_users();
        let before = users.credentials("iggy");
        sim.set_capacity(Some(0));
        // when root is renamed and given a new password,
        let refused = users.change_root(Some("admin"), Some("h9".into()));
        // then it is refused as a full disk (`storage_full`, not an
        // internal error), and root is unchanged,
        assert!(
            matches!(refused, Err(UsersError::NoSpace { .. })),
            "{refused:?}"
        );
        assert_eq!(users.credentials("iggy"), before);
        assert_eq!(users.credentials("admin"), None);
        // and the same change succeeds once space returns.
        sim.set_capacity(None);
        users.change_root(Some("admin"), Some("h9".into())).unwrap();
        assert_eq!(users.credentials("admin"), Some((0, 0, "h9".into())));
    }

    #[test]
    fn given_a_full_disk_when_a_user_changes_then_no_space_is_answered_and_nothing_changed() {
        // Given saved users and a disk with no byte left,
        let (sim, users) = saved_users();
        let old = users.list();
        sim.set_capacity(Some(0));
        // when a user is given permissions, or created,
        let refused = users.set_permissions(1, Some(Permissions::root()));
        let created = users.create(&new_user("carol"), "h3".into(), 3);
        // then both are refused as a full disk (Iggy's layer answers
        // `storage_full`, not an internal error),
        assert!(
            matches!(refused, Err(UsersError::NoSpace { .. })),
            "{refused:?}"
        );
        assert!(
            matches!(created, Err(UsersError::NoSpace { .. })),
            "{created:?}"
        );
        // nothing changed in memory or on disk,
        assert_eq!(users.list(), old);
        sim.crash(Crash::PowerLoss);
        assert_eq!(users_on(&sim).list(), old);
        // and the same change succeeds once space returns.
        sim.set_capacity(None);
        let users = users_on(&sim);
        users.set_permissions(1, Some(Permissions::root())).unwrap();
        assert_eq!(
            users.get(1).and_then(|u| u.permissions),
            Some(Permissions::root())
        );
    }
}
