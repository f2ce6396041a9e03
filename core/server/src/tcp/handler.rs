//! Runs one decoded TCP request against the engine and builds its reply
//! frame.
//!
//! Invariants:
//! - Each request calls the engine operations its HTTP route calls (same
//!   validation helpers of the Iggy layer: `parse_topic_options`,
//!   `check_compression`, the credential checks of `crate::auth`), and its
//!   errors are the Iggy layer's (`ApiError`), answered by their code, so
//!   both transports answer a failure with the same Iggy code.
//! - A reply is exactly one frame: a 256-byte header (status 0 and the body,
//!   or a nonzero Iggy error code and no body).
//! - A get of something that does not exist answers an empty body, as
//!   Iggy's server does (the SDK turns it into `None`).

use std::collections::BTreeMap;

use super::codec::{self, ConsumerId, Request, WireTopicOptions};
use super::encode;
use super::frame::{self, HEADER_SIZE, RequestHeader, op};
use super::reply::ReplyFrame;
use crate::engine::{DataWrite, FIRST_ID, MemberPoll, SendRequest};
use crate::error::EngineError;
use crate::identifier::Identifier;
use crate::iggy::AppState;
use crate::iggy::error::{ApiError, Class};
use crate::iggy::stats::collect_stats;
use crate::iggy::topic_options::{parse_compression, parse_topic_options, reject_options};
use crate::iggy::units::{expiry_from_iggy, from_iggy_limit};
use crate::iggy::users;
use crate::metadata::{Compression, TopicOptions};

/// Iggy's error codes used here.
const UNAUTHENTICATED: u32 = 40;
const FEATURE_UNAVAILABLE: u32 = 5;
const INVALID_USERNAME: u32 = 43;
const INVALID_PASSWORD: u32 = 44;

/// What a connection knows about itself and its login.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    /// The connection's id in `ServerInfo::tcp_clients` (Iggy's client id).
    pub(crate) client_id: u32,
    /// `(session id, (user id, user serial))` once logged in.
    pub(crate) bound: Option<(u64, (u32, u64))>,
}

impl Session {
    pub(crate) fn new(client_id: u32) -> Self {
        Session {
            client_id,
            bound: None,
        }
    }

    /// Binds (or, with `None`, ends) the login, and tells the client registry.
    fn bind(&mut self, state: &AppState, bound: Option<(u64, (u32, u64))>) {
        self.bound = bound;
        state
            .info
            .tcp_clients
            .set_user(self.client_id, bound.map(|(_, (user, _))| user));
    }
}

/// A reply body, or an Iggy error code.
type Outcome = Result<Vec<u8>, u32>;

/// What a request answers: a body encoded here, or a poll's frame (whose
/// payloads stay in the polled messages), or an Iggy error code.
enum Body {
    Bytes(Vec<u8>),
    Polled(ReplyFrame),
}

fn api_code(e: ApiError) -> u32 {
    e.code()
}

fn engine_code(e: EngineError) -> u32 {
    api_code(ApiError::from(e))
}

fn is_not_found(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::StreamNotFound(_)
            | EngineError::TopicNotFound { .. }
            | EngineError::PartitionNotFound { .. }
            | EngineError::GroupNotFound(_)
    )
}

/// Builds the reply frame for `header` from an outcome.
fn reply(header: &RequestHeader, outcome: Result<Body, u32>) -> ReplyFrame {
    let (status, body) = match outcome {
        Ok(body) => (0, body),
        Err(code) => (code, Body::Bytes(Vec::new())),
    };
    let mut frame = match body {
        // The poll encoder left room for the header in front.
        Body::Polled(frame) => frame,
        Body::Bytes(body) => {
            // Result-framed operations answer success with Iggy's empty result section.
            let framed = status == 0 && codec::is_result_framed(header.operation);
            let prefix = if framed { 4 } else { 0 };
            let mut out = Vec::with_capacity(HEADER_SIZE + prefix + body.len());
            out.resize(HEADER_SIZE + prefix, 0);
            out.extend_from_slice(&body);
            ReplyFrame::bytes(out)
        }
    };
    let body_len = frame.len().saturating_sub(HEADER_SIZE);
    if frame::encode_reply_header(frame.own_mut(), header, status, body_len).is_err() {
        // A body over 4 GiB cannot be framed; answer the error instead.
        let mut small = vec![0u8; HEADER_SIZE];
        let _ = frame::encode_reply_header(&mut small, header, 1, 0);
        return ReplyFrame::bytes(small);
    }
    frame
}

/// Handles one complete frame.
pub(crate) async fn handle(
    state: &AppState,
    session: &mut Session,
    header: &RequestHeader,
    body: &bytes::Bytes,
) -> ReplyFrame {
    let outcome =
        match codec::command_code(header).and_then(|code| codec::decode_shared(code, body)) {
            Err(e) => {
                tracing::debug!(error = %e, "refused a TCP request");
                Err(e.iggy_code())
            }
            Ok(request) => {
                let replicated =
                    header.operation != op::NON_REPLICATED && header.operation != op::REGISTER;
                let authorised = match session.bound {
                    None => request.is_public(),
                    // Replicated operations carry the session the login handed out.
                    Some((id, _)) => !replicated || header.session == id,
                };
                if authorised || request.is_public() {
                    match permitted(state, session, &request).await {
                        Ok(()) => run(state, session, request).await,
                        Err(code) => Err(code),
                    }
                } else {
                    Err(UNAUTHENTICATED)
                }
            }
        };
    reply(header, outcome)
}

/// The permission check (`iggy::access`) of a logged-in user's request. A
/// target that does not exist is left to the command, which answers it as
/// Iggy does (an empty get, or not found), before any permission is looked at.
async fn permitted(state: &AppState, session: &Session, request: &Request) -> Result<(), u32> {
    let Some((_, user)) = session.bound else {
        return Ok(());
    };
    match state.authorize(user, request.need()).await {
        Err(e) if e.class == Class::NotFound => Ok(()),
        other => other.map_err(api_code),
    }
}

async fn engine<T, F>(state: &AppState, f: F) -> Result<T, u32>
where
    T: Send + 'static,
    F: FnOnce(&mut crate::engine::Engine) -> Result<T, ApiError> + Send + 'static,
{
    state.engine(f).await.map_err(api_code)
}

/// A data-path engine call on `(stream, topic)` that writes `writes`: on the
/// connection's worker when it waits on no sync and the lock is free
/// (`AppState::engine_quick`), on the blocking pool otherwise.
async fn engine_quick<T, F>(
    state: &AppState,
    at: (Identifier, Identifier),
    writes: DataWrite,
    f: F,
) -> Result<T, u32>
where
    T: Send + 'static,
    F: FnOnce(&mut crate::engine::Engine, (Identifier, Identifier)) -> Result<T, ApiError>
        + Send
        + 'static,
{
    state
        .engine_quick(at, move |e, (s, t)| e.waits_on_no_sync(s, t, writes), f)
        .await
        .map_err(api_code)
}

/// A get: not found is an empty answer.
async fn get<F>(state: &AppState, f: F) -> Outcome
where
    F: FnOnce(&crate::engine::Engine, &mut Vec<u8>) -> crate::error::Result<()> + Send + 'static,
{
    engine(state, move |e| {
        let mut out = Vec::new();
        match f(e, &mut out) {
            Ok(()) => Ok(Ok(out)),
            Err(err) if is_not_found(&err) => Ok(Ok(Vec::new())),
            Err(err) => Ok(Err(engine_code(err))),
        }
    })
    .await?
}

fn no_options(options: &BTreeMap<String, String>) -> Result<(), u32> {
    reject_options(options).map_err(api_code)
}

fn topic_compression(options: &WireTopicOptions) -> Result<Option<Compression>, u32> {
    parse_compression(options.compression.as_deref()).map_err(api_code)
}

/// Iggy's `ClientDetailsResponse` of an open connection, with the groups
/// it is a member of (`None`: not open).
async fn client_details(state: &AppState, id: u32) -> Result<Option<Vec<u8>>, u32> {
    let Some(entry) = state.info.tcp_clients.get(id) else {
        return Ok(None);
    };
    let groups = engine(state, move |e| Ok(e.client_groups(id))).await?;
    let mut out = Vec::new();
    encode::client_details(&mut out, id, &entry, &groups);
    Ok(Some(out))
}

/// A group poll's answer when the client may not poll: an empty poll of
/// `partition` (Iggy's `u32::MAX` "sync again", or `u32::MAX - 1` "nothing
/// assigned").
fn empty_poll(partition: u32) -> Body {
    let polled = crate::partition::Polled {
        partition_id: partition,
        current_offset: 0,
        messages: Vec::new(),
    };
    Body::Polled(encode::polled(polled, HEADER_SIZE))
}

/// Iggy's partition id of an empty group poll that must sync again.
const RESYNC_PARTITION: u32 = u32::MAX;
/// Iggy's partition id of an empty group poll of a member assigned nothing.
const NO_ASSIGNED_PARTITION: u32 = u32::MAX - 1;

async fn run(state: &AppState, session: &mut Session, request: Request) -> Result<Body, u32> {
    let bytes: Outcome = match request {
        Request::Ping => Ok(Vec::new()),
        Request::GetUser(id) => {
            let mut out = Vec::new();
            if let Some(u) = users::get(state, &id) {
                encode::user_details(&mut out, &u);
            }
            Ok(out)
        }
        Request::GetUsers => {
            let mut out = Vec::new();
            for u in users::list(state) {
                encode::user(&mut out, &u);
            }
            Ok(out)
        }
        Request::CreateUser {
            username,
            password,
            status,
            permissions,
        } => {
            let body = users::CreateUser {
                username,
                password,
                status: Some(status.as_str().to_string()),
                permissions,
            };
            let u = users::create(state, body).await.map_err(api_code)?;
            let mut out = Vec::new();
            encode::user_details(&mut out, &u);
            Ok(out)
        }
        Request::DeleteUser(id) => users::delete(state, &id)
            .await
            .map(|()| Vec::new())
            .map_err(api_code),
        Request::UpdateUser {
            user,
            username,
            status,
        } => users::update(state, &user, username, status)
            .await
            .map(|()| Vec::new())
            .map_err(api_code),
        Request::UpdatePermissions { user, permissions } => {
            users::update_permissions(state, &user, permissions)
                .await
                .map(|()| Vec::new())
                .map_err(api_code)
        }
        Request::ChangePassword { user, current, new } => {
            users::change_password(state, &user, current, new)
                .await
                .map(|()| Vec::new())
                .map_err(api_code)
        }
        Request::Unsupported(code) => {
            tracing::debug!(code, "TCP command not served by sluice");
            Err(FEATURE_UNAVAILABLE)
        }
        Request::GetMe => client_details(state, session.client_id)
            .await?
            .ok_or(UNAUTHENTICATED),
        Request::GetClient(id) => Ok(client_details(state, id).await?.unwrap_or_default()),
        Request::GetClients => {
            let clients = state.info.tcp_clients.list();
            let ids: Vec<u32> = clients.iter().map(|(id, _)| *id).collect();
            let counts = engine(state, move |e| {
                Ok(ids
                    .iter()
                    .map(|id| e.client_groups(*id).len())
                    .collect::<Vec<_>>())
            })
            .await?;
            let mut out = Vec::new();
            for ((id, entry), groups) in clients.iter().zip(counts) {
                encode::client(&mut out, *id, entry, groups);
            }
            Ok(out)
        }
        Request::LoginRegister { username, password } => {
            if !(crate::auth::MIN_USERNAME_LEN..=crate::auth::MAX_USERNAME_LEN)
                .contains(&username.len())
            {
                return Err(INVALID_USERNAME);
            }
            if !(crate::auth::MIN_PASSWORD_LEN..=crate::auth::MAX_PASSWORD_LEN)
                .contains(&password.len())
            {
                return Err(INVALID_PASSWORD);
            }
            // A new login replaces the connection's session, failed or not,
            // and ends its group memberships (the SDK forgets them too).
            session.bind(state, None);
            leave_all_groups(state, session.client_id).await;
            let user_id = state
                .auth
                .verify_login(username, password)
                .await
                .map_err(api_code)?;
            let id = super::next_session();
            session.bind(state, Some((id, user_id)));
            let mut out = Vec::new();
            encode::login(&mut out, user_id.0, id);
            Ok(out)
        }
        Request::LoginWithToken { token } => {
            session.bind(state, None);
            leave_all_groups(state, session.client_id).await;
            // An inactive holder: Iggy evicts the connection, which the SDK
            // reports as `unauthenticated`; sluice answers that code.
            let who = users::token_login(state, &token).map_err(|e| match e.code() {
                users::USER_INACTIVE => UNAUTHENTICATED,
                code => code,
            })?;
            let id = super::next_session();
            session.bind(state, Some((id, who)));
            let mut out = Vec::new();
            encode::login(&mut out, who.0, id);
            Ok(out)
        }
        Request::GetTokens => {
            let user = session.bound.map(|(_, (u, _))| u).ok_or(UNAUTHENTICATED)?;
            let mut out = Vec::new();
            encode::tokens(&mut out, &users::tokens(state, user));
            Ok(out)
        }
        Request::CreateToken { name, expiry } => {
            let user = session.bound.map(|(_, (u, _))| u).ok_or(UNAUTHENTICATED)?;
            let token = users::create_token(state, user, name, expiry)
                .await
                .map_err(api_code)?;
            let mut out = Vec::new();
            encode::raw_token(&mut out, &token);
            Ok(out)
        }
        Request::DeleteToken { name } => {
            let user = session.bound.map(|(_, (u, _))| u).ok_or(UNAUTHENTICATED)?;
            users::delete_token(state, user, name)
                .await
                .map(|()| Vec::new())
                .map_err(api_code)
        }
        Request::Logout => {
            session.bind(state, None);
            leave_all_groups(state, session.client_id).await;
            Ok(Vec::new())
        }
        Request::GetClusterMetadata => {
            let cluster = state.info.listeners().cluster();
            let mut out = Vec::new();
            encode::cluster_metadata(&mut out, &cluster);
            Ok(out)
        }
        Request::GetStats => {
            let s = collect_stats(state).await.map_err(api_code)?;
            let mut out = Vec::new();
            encode::stats(&mut out, &s);
            Ok(out)
        }
        Request::GetStreams => {
            engine(state, |e| {
                let mut out = Vec::new();
                for s in e.streams() {
                    encode::stream(&mut out, e, s);
                }
                Ok(out)
            })
            .await
        }
        Request::GetStream(s) => {
            get(state, move |e, out| {
                encode::stream_details(out, e, e.stream(&s)?);
                Ok(())
            })
            .await
        }
        Request::CreateStream { name, options } => {
            no_options(&options)?;
            engine(state, move |e| {
                let s = e.create_stream(None, &name)?;
                tracing::info!(stream_id = s.id, "stream created");
                let mut out = Vec::new();
                encode::stream_details(&mut out, e, &s);
                Ok(out)
            })
            .await
        }
        Request::UpdateStream {
            stream,
            name,
            options,
        } => {
            no_options(&options)?;
            engine(state, move |e| Ok(e.update_stream(&stream, &name)?))
                .await
                .map(|()| Vec::new())
        }
        Request::DeleteStream(s) => engine(state, move |e| Ok(e.delete_stream(&s)?))
            .await
            .map(|()| Vec::new()),
        Request::PurgeStream(s) => {
            engine(state, move |e| {
                e.purge_stream(&s)?;
                tracing::info!(stream = %s, "stream purged");
                Ok(Vec::new())
            })
            .await
        }
        Request::GetTopics(s) => {
            engine(state, move |e| {
                let stream = e.stream(&s)?;
                let mut out = Vec::new();
                out.extend_from_slice(
                    &u32::try_from(stream.topics.len())
                        .unwrap_or(u32::MAX)
                        .to_le_bytes(),
                );
                for t in stream.topics.values() {
                    encode::topic(&mut out, e, stream.id, t);
                }
                Ok(out)
            })
            .await
        }
        Request::GetTopic(s, t) => {
            get(state, move |e, out| {
                let sid = e.resolve_stream(&s)?;
                encode::topic_details(out, e, sid, e.topic(&s, &t)?);
                Ok(())
            })
            .await
        }
        Request::CreateTopic {
            stream,
            partitions_count,
            name,
            options,
        } => {
            let policy = TopicOptions {
                compression: topic_compression(&options)?.unwrap_or_default(),
                ..parse_topic_options(&options.options).map_err(api_code)?
            };
            let expiry = options.message_expiry.unwrap_or(0);
            let max_size = from_iggy_limit(options.max_topic_size.unwrap_or(0));
            engine(state, move |e| {
                let expiry = expiry_from_iggy(expiry, e.default_message_expiry());
                let t = e.create_topic(
                    &stream,
                    None,
                    &name,
                    partitions_count,
                    policy,
                    expiry,
                    max_size,
                    1,
                )?;
                let sid = e.resolve_stream(&stream)?;
                tracing::info!(
                    stream_id = sid,
                    topic_id = t.id,
                    partitions = partitions_count,
                    durability = policy.durability.as_str(),
                    "topic created"
                );
                let mut out = Vec::new();
                encode::topic_details(&mut out, e, sid, &t);
                Ok(out)
            })
            .await
        }
        Request::UpdateTopic {
            stream,
            topic,
            name,
            options,
        } => {
            let compression = topic_compression(&options)?;
            no_options(&options.options)?;
            engine(state, move |e| {
                let current = e.topic(&stream, &topic)?;
                let expiry = options.message_expiry.map_or(current.message_expiry, |v| {
                    expiry_from_iggy(v, e.default_message_expiry())
                });
                let max_size = options
                    .max_topic_size
                    .map_or(current.max_topic_size, from_iggy_limit);
                Ok(e.update_topic_with(&stream, &topic, &name, expiry, max_size, compression)?)
            })
            .await
            .map(|()| Vec::new())
        }
        Request::DeleteTopic(s, t) => engine(state, move |e| Ok(e.delete_topic(&s, &t)?))
            .await
            .map(|()| Vec::new()),
        Request::PurgeTopic(s, t) => {
            engine(state, move |e| {
                e.purge_topic(&s, &t)?;
                tracing::info!(stream = %s, topic = %t, "topic purged");
                Ok(Vec::new())
            })
            .await
        }
        Request::CreatePartitions {
            stream,
            topic,
            count,
        } => engine(state, move |e| {
            Ok(e.create_partitions(&stream, &topic, count)?)
        })
        .await
        .map(|_| Vec::new()),
        Request::DeletePartitions {
            stream,
            topic,
            count,
        } => engine(state, move |e| {
            Ok(e.delete_partitions(&stream, &topic, count)?)
        })
        .await
        .map(|_| Vec::new()),
        Request::SendMessages {
            stream,
            topic,
            partitioning,
            messages,
        } => {
            let sent = state
                .send(SendRequest {
                    stream,
                    topic,
                    partitioning,
                    messages,
                })
                .await
                .map_err(api_code)?;
            let mut out = Vec::with_capacity(24);
            encode::send_confirmation(
                &mut out,
                sent.topic.stream,
                sent.topic.topic,
                sent.partition_id,
                sent.base_offset,
            );
            Ok(out)
        }
        Request::PollMessages {
            consumer,
            stream,
            topic,
            partition,
            strategy,
            count,
            auto_commit,
        } => {
            // A count of 0 is an empty poll carrying the partition's current
            // offset, as Iggy answers it; above the server's limit, that many.
            let count = state.limits.poll_count(count);
            let writes = DataWrite::polling(auto_commit);
            if let ConsumerId::Group(group) = consumer {
                // A group poll is a member's: of a partition it may poll,
                // or of its next one when the poll names none.
                let client = session.client_id;
                let polled =
                    engine_quick(state, (stream, topic), writes, move |e, (stream, topic)| {
                        Ok(e.poll_as_member(
                            client,
                            &stream,
                            &topic,
                            &group,
                            partition,
                            strategy,
                            u64::from(count),
                            auto_commit,
                        )?)
                    })
                    .await?;
                return Ok(match polled {
                    MemberPoll::Served(polled) => Body::Polled(encode::polled(polled, HEADER_SIZE)),
                    MemberPoll::NotOwned => empty_poll(RESYNC_PARTITION),
                    MemberPoll::NothingAssigned => empty_poll(NO_ASSIGNED_PARTITION),
                });
            }
            let partition = partition.unwrap_or(FIRST_ID);
            let polled = engine_quick(state, (stream, topic), writes, move |e, (stream, topic)| {
                let c = consumer.resolve(e, &stream, &topic)?;
                Ok(e.poll(
                    &stream,
                    &topic,
                    partition,
                    c,
                    strategy,
                    u64::from(count),
                    auto_commit,
                )?)
            })
            .await?;
            // Encoded outside the engine lock; the payloads are not copied
            // (the frame writes them from the polled messages).
            return Ok(Body::Polled(encode::polled(polled, HEADER_SIZE)));
        }
        Request::GetConsumerOffset {
            consumer,
            stream,
            topic,
            partition,
        } => {
            let partition = partition.unwrap_or(FIRST_ID);
            engine(state, move |e| {
                let c = match consumer.resolve(e, &stream, &topic) {
                    Ok(c) => c,
                    Err(err) if is_not_found(&err) => return Ok(Ok(Vec::new())),
                    Err(err) => return Ok(Err(engine_code(err))),
                };
                match e.get_offset(&stream, &topic, partition, c) {
                    Ok(Some((current, stored))) => {
                        let mut out = Vec::new();
                        encode::consumer_offset(&mut out, partition, current, stored);
                        Ok(Ok(out))
                    }
                    Ok(None) => Ok(Ok(Vec::new())),
                    Err(err) if is_not_found(&err) => Ok(Ok(Vec::new())),
                    Err(err) => Ok(Err(engine_code(err))),
                }
            })
            .await?
        }
        Request::StoreConsumerOffset {
            consumer,
            stream,
            topic,
            partition,
            offset,
        } => {
            let partition = partition.unwrap_or(FIRST_ID);
            let client = session.client_id;
            engine_quick(
                state,
                (stream, topic),
                DataWrite::Offsets,
                move |e, (stream, topic)| {
                    let c = member_or_consumer(e, client, &consumer, &stream, &topic, partition)?;
                    e.store_offset(&stream, &topic, partition, c, offset)?;
                    if let ConsumerId::Group(g) = &consumer {
                        e.after_member_commit(&stream, &topic, g);
                    }
                    Ok(())
                },
            )
            .await
            .map(|()| Vec::new())
        }
        Request::DeleteConsumerOffset {
            consumer,
            stream,
            topic,
            partition,
        } => {
            let partition = partition.unwrap_or(FIRST_ID);
            let client = session.client_id;
            let (deleted, id) = engine(state, move |e| {
                let c = member_or_consumer(e, client, &consumer, &stream, &topic, partition)?;
                Ok((e.delete_offset(&stream, &topic, partition, c)?, c.id))
            })
            .await?;
            if deleted {
                Ok(Vec::new())
            } else {
                Err(api_code(ApiError::offset_not_found(id)))
            }
        }
        Request::GetConsumerGroups(s, t) => {
            engine(state, move |e| {
                let topic = e.topic(&s, &t)?;
                let sid = e.resolve_stream(&s)?;
                let mut out = Vec::new();
                for g in topic.groups.values() {
                    let members = e.group_members(sid, topic.id, g.id).len();
                    encode::group(&mut out, topic, g, members);
                }
                Ok(out)
            })
            .await
        }
        Request::GetConsumerGroup(s, t, g) => {
            get(state, move |e, out| {
                let topic = e.topic(&s, &t)?;
                let sid = e.resolve_stream(&s)?;
                let group = e.group(&s, &t, &g)?;
                let members = e.group_members(sid, topic.id, group.id);
                encode::group_details(out, topic, group, &members);
                Ok(())
            })
            .await
        }
        Request::CreateConsumerGroup {
            stream,
            topic,
            name,
        } => {
            engine(state, move |e| {
                let group = e.create_group(&stream, &topic, None, &name)?;
                tracing::info!(group_id = group.id, "consumer group created");
                let t = e.topic(&stream, &topic)?;
                let mut out = Vec::new();
                encode::group_details(&mut out, t, &group, &[]);
                Ok(out)
            })
            .await
        }
        Request::DeleteConsumerGroup(s, t, g) => {
            engine(state, move |e| Ok(e.delete_group(&s, &t, &g)?))
                .await
                .map(|()| Vec::new())
        }
        Request::JoinConsumerGroup(s, t, g) => {
            let client = session.client_id;
            engine(state, move |e| Ok(e.join_group(client, &s, &t, &g)?))
                .await
                .map(|()| Vec::new())
        }
        Request::LeaveConsumerGroup(s, t, g) => {
            let client = session.client_id;
            engine(state, move |e| Ok(e.leave_group(client, &s, &t, &g)?))
                .await
                .map(|()| Vec::new())
        }
        Request::SyncConsumerGroup(s, t, g) => {
            let client = session.client_id;
            // Not a member (or no such group): an empty answer, as Iggy's.
            engine(state, move |e| Ok(e.sync_group(client, &s, &t, &g)?))
                .await
                .map(|assignment| {
                    let mut out = Vec::new();
                    if let Some((generation, partitions)) = assignment {
                        encode::assignment(&mut out, generation, &partitions);
                    }
                    out
                })
        }
    };
    bytes.map(Body::Bytes)
}

/// Ends every group membership of the connection (it closed, logged out or
/// logged in again): its groups rebalance.
pub(crate) async fn leave_all_groups(state: &AppState, client: u32) {
    let _ = state
        .engine(move |e| {
            e.leave_all_groups(client);
            Ok(())
        })
        .await;
}

/// The consumer an offset call addresses: an individual consumer as it is;
/// a group only as a member that holds `partition` (Iggy's 5009 otherwise).
fn member_or_consumer(
    e: &mut crate::engine::Engine,
    client: u32,
    consumer: &ConsumerId,
    stream: &crate::identifier::Identifier,
    topic: &crate::identifier::Identifier,
    partition: u32,
) -> Result<crate::partition::Consumer, ApiError> {
    match consumer {
        ConsumerId::Group(g) => Ok(e.member_consumer(client, stream, topic, g, partition)?),
        ConsumerId::Consumer(_) => Ok(consumer.resolve(e, stream, topic)?),
    }
}
