//! The permission check of every request, for both transports (issue 29):
//! each transport names what a request needs (`Need`, Iggy's permission
//! table: docs/research/iggy-0.11-users-permissions-tokens.md §3.3), and
//! `AppState::authorize` decides it once, here.
//!
//! Invariants:
//! - The order is Iggy's: authentication (the transports, before this),
//!   then the targets resolved (a stream or topic that does not exist is
//!   "not found", whoever asks), then the rule (`Permissions::allows`). A
//!   refusal is `unauthorized` (41; HTTP 403) and runs nothing.
//! - Root passes without a lookup, so its requests cost nothing more.
//! - A user's permissions are read at every request: a change, a
//!   deactivation or a deletion applies to open sessions at once.

use super::error::{ApiError, ApiResult};
use super::permissions::{ROOT_USER_ID, Rule, allowed};
use super::state::AppState;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::identifier::Identifier;
use crate::users::UsersError;

/// What a request needs, naming its targets as the request does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Being logged in.
    Authenticated,
    ReadServers,
    ReadUsers,
    ManageUsers,
    /// Reading a user, named by id or name: allowed for the user itself.
    ReadUser(Identifier),
    /// Changing a user's password, named by id or name: allowed for the
    /// user itself.
    ChangePassword(Identifier),
    GetStreams,
    CreateStream,
    GetStream(Identifier),
    ManageStream(Identifier),
    GetTopics(Identifier),
    CreateTopic(Identifier),
    GetTopic(Identifier, Identifier),
    ManageTopic(Identifier, Identifier),
    Poll(Identifier, Identifier),
    Send(Identifier, Identifier),
}

type Resolved<T> = Result<T, EngineError>;

impl Need {
    /// The rule for `user`, with the targets resolved to ids by `stream`
    /// and `topic` (`None`: the user may do it whatever it holds).
    fn rule(
        &self,
        stream: impl Fn(&Identifier) -> Resolved<u32>,
        topic: impl Fn(&Identifier, &Identifier) -> Resolved<(u32, u32)>,
    ) -> Resolved<Option<Rule>> {
        Ok(Some(match self {
            Need::Authenticated => return Ok(None),
            // The user itself was let through before (`AppState::authorize`).
            Need::ReadServers => Rule::ReadServers,
            Need::ReadUsers | Need::ReadUser(_) => Rule::ReadUsers,
            Need::ManageUsers | Need::ChangePassword(_) => Rule::ManageUsers,
            Need::GetStreams => Rule::GetStreams,
            Need::CreateStream => Rule::CreateStream,
            Need::GetStream(s) => Rule::GetStream(stream(s)?),
            Need::ManageStream(s) => Rule::ManageStream(stream(s)?),
            Need::GetTopics(s) => Rule::GetTopics(stream(s)?),
            Need::CreateTopic(s) => Rule::CreateTopic(stream(s)?),
            Need::GetTopic(s, t) => {
                let (s, t) = topic(s, t)?;
                Rule::GetTopic(s, t)
            }
            Need::ManageTopic(s, t) => {
                let (s, t) = topic(s, t)?;
                Rule::ManageTopic(s, t)
            }
            Need::Poll(s, t) => {
                let (s, t) = topic(s, t)?;
                Rule::Poll(s, t)
            }
            Need::Send(s, t) => {
                let (s, t) = topic(s, t)?;
                Rule::Send(s, t)
            }
        }))
    }

    /// Whether deciding it reads the engine (a target to resolve).
    fn has_target(&self) -> bool {
        matches!(
            self,
            Need::GetStream(_)
                | Need::ManageStream(_)
                | Need::GetTopics(_)
                | Need::CreateTopic(_)
                | Need::GetTopic(..)
                | Need::ManageTopic(..)
                | Need::Poll(..)
                | Need::Send(..)
        )
    }
}

/// Resolves a stream and a topic against the engine.
fn on_engine(e: &Engine, need: &Need) -> Resolved<Option<Rule>> {
    need.rule(
        |s| e.resolve_stream(s),
        |s, t| e.resolve_topic(s, t).map(|k| (k.stream, k.topic)),
    )
}

/// For a need without a target: a resolution asked for anyway is refused
/// (fails closed), never taken as "allowed".
fn without_engine(need: &Need) -> Resolved<Option<Rule>> {
    let refuse = || EngineError::Internal("a permission target was not resolved".into());
    need.rule(|_| Err(refuse()), |_, _| Err(refuse()))
}

impl AppState {
    /// The id of an existing user named by id or name (root's is 0); Iggy's
    /// not found (20) otherwise.
    fn user_target(&self, target: &Identifier) -> ApiResult<u32> {
        let id = super::users::resolve(self, target)?;
        if id == ROOT_USER_ID || self.auth.users.get(id).is_some() {
            Ok(id)
        } else {
            Err(UsersError::NotFound(id.to_string()).into())
        }
    }

    /// Whether `user` may do what `need` says (see the module invariants).
    /// `user` is `(id, serial)`: which user, and which incarnation of it.
    pub(crate) async fn authorize(&self, (user, serial): (u32, u64), need: Need) -> ApiResult<()> {
        if user == ROOT_USER_ID || need == Need::Authenticated {
            return Ok(());
        }
        // A user target is resolved first, by id or by name, as Iggy does:
        // one that does not exist is "not found" whoever asks, and the user
        // itself (this incarnation of it: not a deleted user's session)
        // needs no permission.
        if let Need::ReadUser(target) | Need::ChangePassword(target) = &need
            && self.user_target(target)? == user
            && self.auth.users.incarnation(user, serial).is_some()
        {
            return Ok(());
        }
        let rule = if need.has_target() {
            self.engine(move |e| Ok(on_engine(e, &need)?)).await?
        } else {
            without_engine(&need)?
        };
        let Some(rule) = rule else {
            return Ok(());
        };
        let permissions = self.auth.permissions(user, serial);
        if allowed(user, permissions.as_ref(), rule) {
            Ok(())
        } else {
            tracing::info!(user_id = user, ?rule, "request refused: not permitted");
            Err(ApiError::unauthorized())
        }
    }
}
