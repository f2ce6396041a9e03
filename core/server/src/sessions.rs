//! HTTP login sessions that survive a restart (issue 29, ADR 0025).
//!
//! A login (`POST /users/login`, a personal-access-token login, a refresh)
//! answers a JWT signed with HS256, as Iggy's server does. Its claims name
//! the user's id (`sub`) and incarnation (`ser`, `users::User::serial`), a
//! random `jti`, and its expiry (`exp`, Unix seconds). The signing key and
//! the tokens logged out before their expiry are kept in one small file,
//! `<data>/sessions` (a framed `SLSE` record), so a restart changes nothing
//! about which tokens are valid.
//!
//! Invariants:
//! - The key is 256 bits from the OS, generated when the file does not
//!   exist and saved durably before the first token is signed with it: a
//!   token answered to a client is signed with a key the next start reads.
//! - The file holds one record and is replaced whole through
//!   `persist::replace_file`: after any crash it holds the key and the
//!   logged-out tokens as before a save or after it, never a mix.
//! - A logout answers only after its save returned `Ok`: an acknowledged
//!   logout holds after any crash. A logout is applied in memory before its
//!   save, whatever the save answers: a revocation only ever refuses more,
//!   and the next successful save writes it down with the others.
//! - A token is accepted iff its signature checks with the key, its issuer
//!   and audience are sluice's, it has not expired (no leeway), and it was
//!   not logged out. That the user it names still exists, as that
//!   incarnation, is `auth`'s check, made on every request.
//! - A logged-out token is kept only until its own expiry (pruned on every
//!   save), so the file is bounded by the logouts within one token lifetime.
//! - A file that does not decode is reported with its path and replaced by
//!   a fresh key: every earlier token, logged out or not, stops being valid
//!   (everyone logs in again), which never lets a logged-out token back in.
//!   A file that cannot be read refuses the start.
//! - Neither the key nor a token is ever logged or shown by `Debug`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sluice_storage::{DurableStorage, ErrorKind, StorageError};

use crate::frame::{self, Magic};
use crate::layout::{SESSIONS_FILE, SESSIONS_TMP};

const SESSIONS_VERSION: u16 = 1;
const MAX_SESSIONS_FILE: usize = 64 << 20;
/// The `iss` and `aud` of every token sluice signs.
const ISSUER: &str = "sluice";

/// Why the sessions file could not be opened or saved.
#[derive(Debug, thiserror::Error)]
#[error("sessions file {}: {reason}", path.display())]
pub struct SessionsError {
    pub path: PathBuf,
    pub reason: String,
}

/// What the file holds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SessionsRecord {
    key: [u8; 32],
    /// Logged-out tokens: `jti` and the token's expiry (Unix seconds).
    logged_out: Vec<(String, u64)>,
}

/// A token's claims (Iggy's set, plus the user's incarnation).
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    jti: String,
    iss: String,
    aud: String,
    sub: String,
    iat: u64,
    nbf: u64,
    exp: u64,
    /// `users::User::serial` of the user `sub` names (root's is 0).
    ser: u64,
}

/// A checked token: whose it is and which one (for its logout).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Session {
    pub(crate) user_id: u32,
    pub(crate) serial: u64,
    jti: String,
    /// Unix seconds.
    pub(crate) expiry: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("user_id", &self.user_id)
            .field("serial", &self.serial)
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

struct State {
    logged_out: HashMap<String, u64>,
    /// Tokens this process signed that have not expired nor been logged out
    /// (`jti` → expiry): the live sessions `/stats` counts.
    issued: HashMap<String, u64>,
}

/// The signing key, the logged-out tokens, and their file.
pub(crate) struct Sessions {
    storage: Arc<dyn DurableStorage>,
    dir: PathBuf,
    key: [u8; 32],
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    state: Mutex<State>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Sessions")
            .field("key", &"<redacted>")
            .field("logged_out", &state.logged_out.len())
            .field("issued", &state.issued.len())
            .finish()
    }
}

/// Now, in Unix seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Sessions {
    /// Opens `<dir>/sessions`, creating it (with a fresh key, saved
    /// durably) when it does not exist or does not decode.
    pub(crate) fn open(
        storage: Arc<dyn DurableStorage>,
        dir: &Path,
        now: u64,
    ) -> Result<Self, SessionsError> {
        let path = dir.join(SESSIONS_FILE);
        let found = match storage.read_file(&path) {
            Ok(bytes) => {
                match frame::decode_file::<SessionsRecord>(
                    Magic::SESSIONS,
                    SESSIONS_VERSION,
                    &bytes,
                    MAX_SESSIONS_FILE,
                ) {
                    Ok(record) => Some(record),
                    Err(e) => {
                        tracing::warn!(
                            path = %path.display(),
                            reason = %e,
                            "the sessions file does not decode: replacing it with a fresh \
                             signing key (every HTTP login token issued before is refused)"
                        );
                        None
                    }
                }
            }
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => {
                return Err(SessionsError {
                    path,
                    reason: e.to_string(),
                });
            }
        };
        let (record, fresh) = match found {
            Some(record) => (record, false),
            None => {
                let mut key = [0u8; 32];
                OsRng.fill_bytes(&mut key);
                (
                    SessionsRecord {
                        key,
                        logged_out: Vec::new(),
                    },
                    true,
                )
            }
        };
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked here against the caller's clock, with no leeway.
        validation.validate_exp = false;
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[ISSUER]);
        let sessions = Sessions {
            storage,
            dir: dir.to_path_buf(),
            key: record.key,
            encoding: EncodingKey::from_secret(&record.key),
            decoding: DecodingKey::from_secret(&record.key),
            validation,
            state: Mutex::new(State {
                logged_out: record
                    .logged_out
                    .into_iter()
                    .filter(|(_, exp)| *exp > now)
                    .collect(),
                issued: HashMap::new(),
            }),
        };
        if fresh {
            let state = sessions.lock();
            sessions.save(&state)?;
            tracing::info!(path = %path.display(), "new HTTP login signing key saved");
        }
        Ok(sessions)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is one insert or one retain: a panic cannot leave
        // the maps half-changed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn save(&self, state: &State) -> Result<(), SessionsError> {
        let mut logged_out: Vec<(String, u64)> = state
            .logged_out
            .iter()
            .map(|(jti, exp)| (jti.clone(), *exp))
            .collect();
        logged_out.sort();
        let record = SessionsRecord {
            key: self.key,
            logged_out,
        };
        let err = |reason: String| SessionsError {
            path: self.dir.join(SESSIONS_FILE),
            reason,
        };
        let bytes = frame::encode(Magic::SESSIONS, SESSIONS_VERSION, &record)
            .map_err(|e| err(e.to_string()))?;
        crate::persist::replace_file(
            self.storage.as_ref(),
            &self.dir,
            SESSIONS_FILE,
            SESSIONS_TMP,
            &bytes,
        )
        .map_err(|e: StorageError| err(e.to_string()))
    }

    /// Signs a token for user `user_id` (incarnation `serial`) valid for
    /// `lifetime` from `now`; answers it and its expiry (Unix seconds).
    pub(crate) fn issue(
        &self,
        (user_id, serial): (u32, u64),
        lifetime: Duration,
        now: u64,
    ) -> Result<(String, u64), String> {
        let mut jti = [0u8; 16];
        OsRng.fill_bytes(&mut jti);
        let jti: String = jti.iter().map(|b| format!("{b:02x}")).collect();
        let exp = now.saturating_add(lifetime.as_secs());
        let claims = Claims {
            jti: jti.clone(),
            iss: ISSUER.into(),
            aud: ISSUER.into(),
            sub: user_id.to_string(),
            iat: now,
            nbf: now,
            exp,
            ser: serial,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| format!("signing a login token: {e}"))?;
        let mut state = self.lock();
        state.issued.retain(|_, e| *e > now);
        state.issued.insert(jti, exp);
        Ok((token, exp))
    }

    /// The session `token` carries, if it is valid at `now`.
    pub(crate) fn check(&self, token: &str, now: u64) -> Option<Session> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .ok()?
            .claims;
        if claims.exp <= now || self.lock().logged_out.contains_key(&claims.jti) {
            return None;
        }
        Some(Session {
            user_id: claims.sub.parse().ok()?,
            serial: claims.ser,
            jti: claims.jti,
            expiry: claims.exp,
        })
    }

    /// Logs `session` out, durably: once this answers `Ok` its token is
    /// refused, after any restart or crash too. Blocking.
    pub(crate) fn log_out(&self, session: &Session, now: u64) -> Result<(), SessionsError> {
        let mut state = self.lock();
        state.issued.remove(&session.jti);
        state.logged_out.retain(|_, exp| *exp > now);
        state.logged_out.insert(session.jti.clone(), session.expiry);
        self.save(&state)
    }

    /// Tokens this process signed that are still live.
    pub(crate) fn live(&self, now: u64) -> usize {
        let mut state = self.lock();
        state.issued.retain(|_, e| *e > now);
        state.issued.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::{Crash, SimStorage};

    const HOUR: Duration = Duration::from_secs(3600);

    fn open_on(sim: &SimStorage, now: u64) -> Sessions {
        let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
        Sessions::open(storage, Path::new("/"), now).unwrap()
    }

    #[test]
    fn given_a_token_when_the_server_restarts_after_a_power_loss_then_it_is_still_valid() {
        let sim = SimStorage::with_seed(3);
        let (token, exp) = open_on(&sim, 1000).issue((4, 9), HOUR, 1000).unwrap();
        assert_eq!(exp, 4600);
        sim.crash(Crash::PowerLoss);
        let again = open_on(&sim, 1001);
        let session = again.check(&token, 1001).unwrap();
        assert_eq!((session.user_id, session.serial), (4, 9));
        // Then it expires on time, with no leeway.
        assert!(again.check(&token, 4599).is_some());
        assert!(again.check(&token, 4600).is_none());
    }

    #[test]
    fn given_a_logout_when_the_server_restarts_then_the_token_stays_refused_until_pruned() {
        let sim = SimStorage::with_seed(4);
        let sessions = open_on(&sim, 1000);
        let (out, _) = sessions.issue((1, 1), HOUR, 1000).unwrap();
        let (kept, _) = sessions.issue((1, 1), HOUR, 1000).unwrap();
        let session = sessions.check(&out, 1000).unwrap();
        sessions.log_out(&session, 1000).unwrap();
        assert!(sessions.check(&out, 1000).is_none());
        sim.crash(Crash::PowerLoss);
        let again = open_on(&sim, 1001);
        assert!(again.check(&out, 1001).is_none());
        assert!(again.check(&kept, 1001).is_some());
        // Both expire at 4600; a later logout's save prunes the first one.
        assert!(again.check(&kept, 4600).is_none());
        let (t, _) = again.issue((1, 1), HOUR, 5000).unwrap();
        let s = again.check(&t, 5000).unwrap();
        again.log_out(&s, 5000).unwrap();
        assert_eq!(again.lock().logged_out.len(), 1);
    }

    #[test]
    fn given_forged_or_foreign_tokens_when_checked_then_they_are_refused() {
        let sim = SimStorage::with_seed(5);
        let sessions = open_on(&sim, 1000);
        let (token, _) = sessions.issue((2, 2), HOUR, 1000).unwrap();
        // Another key (another data directory) signs tokens this one refuses.
        let other = open_on(&SimStorage::with_seed(6), 1000);
        let (foreign, _) = other.issue((2, 2), HOUR, 1000).unwrap();
        assert!(sessions.check(&foreign, 1000).is_none());
        // A changed claim breaks the signature.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[1] = parts[1].chars().rev().collect();
        assert!(sessions.check(&parts.join("."), 1000).is_none());
        for junk in ["", "a.b.c", "Bearer x", &"x".repeat(10_000)] {
            assert!(sessions.check(junk, 1000).is_none());
        }
        assert!(!format!("{sessions:?}").contains(&token));
    }

    #[test]
    fn given_a_corrupt_file_when_opening_then_a_fresh_key_refuses_every_earlier_token() {
        let sim = SimStorage::with_seed(8);
        let sessions = open_on(&sim, 1000);
        let (token, _) = sessions.issue((1, 1), HOUR, 1000).unwrap();
        let path = Path::new("/").join(SESSIONS_FILE);
        let mut bytes = sim.read_file(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        crate::persist::replace_file(&sim, Path::new("/"), SESSIONS_FILE, SESSIONS_TMP, &bytes)
            .unwrap();
        let again = open_on(&sim, 1001);
        assert!(again.check(&token, 1001).is_none());
        // And the fresh key was saved: its tokens survive the next start.
        let (fresh, _) = again.issue((1, 1), HOUR, 1001).unwrap();
        assert!(open_on(&sim, 1002).check(&fresh, 1002).is_some());
    }

    #[test]
    fn a_crash_at_any_point_of_a_logout_leaves_the_token_refused_or_the_logout_unacknowledged() {
        // Given a live token, then its logout cut off after each storage
        // call in turn, and a crash of either kind.
        let mut k = 0u64;
        loop {
            let sim = SimStorage::with_seed(9);
            let sessions = open_on(&sim, 1000);
            let (token, _) = sessions.issue((3, 3), HOUR, 1000).unwrap();
            let session = sessions.check(&token, 1000).unwrap();
            sim.halt_after(Some(sim.op_count() + k));
            let result = sessions.log_out(&session, 1000);
            // Refused in memory from the start, whatever the save answered.
            assert!(sessions.check(&token, 1000).is_none());
            for crash in [Crash::Process, Crash::PowerLoss] {
                sim.crash(crash);
                // Then the file opens (the key is never lost: the old or
                // the new record), and an acknowledged logout holds.
                let again = open_on(&sim, 1000);
                let refused = again.check(&token, 1000).is_none();
                if result.is_ok() {
                    assert!(refused, "an acknowledged logout was lost (cut after {k})");
                }
                if !refused {
                    assert_eq!(again.check(&token, 1000), Some(session.clone()));
                }
            }
            if result.is_ok() {
                break;
            }
            k += 1;
        }
        assert!(k >= 5, "the save had only {k} storage calls to cut");
    }
}
