//! Requests of the Iggy 0.11 binary protocol, decoded from a frame into a
//! typed `Request` (command codes and payload layouts as the official SDK
//! `iggy = "=0.11.0"` writes them, `iggy_binary_protocol` 0.11.0).
//!
//! Invariants:
//! - `decode` accepts any bytes: every length is bounds-checked by
//!   `wire::Reader`, no input panics, and an input that is not exactly one
//!   well-formed request is a typed error (`DecodeError`), never a guess.
//! - A decoded request is validated before any engine call: names, ids,
//!   message frames (sizes, per-message and batch checksums, user headers);
//!   a bad message anywhere refuses the whole batch.
//! - Codes the SDK knows but sluice does not serve decode to
//!   `Request::Unsupported` (answered `feature_unavailable`, 5); codes
//!   nobody defined are `DecodeError::UnknownCommand` (`invalid_command`, 3).

use std::collections::BTreeMap;
use std::hash::Hasher as _;

use bytes::Bytes;

use twox_hash::XxHash3_64;

use super::frame::{RequestHeader, op};
use super::wire::{Reader, WireError, WireResult};
use crate::engine::Partitioning;
use crate::identifier::Identifier;
pub use crate::iggy::consumer::ConsumerId;
use crate::iggy::header_kinds::{self, STRING_KIND};
use crate::iggy::permissions::{
    GlobalPermissions, Permissions, StreamPermissions, TopicPermissions,
};
use crate::iggy::units::{expiry_from_text, max_topic_size_from_text};
use crate::partition::PollingStrategy;
use crate::partition::log::{HeaderKey, HeaderValue, Headers, NewMessage};
use crate::users::UserStatus;

/// Iggy's command codes (`iggy_binary_protocol::codes`).
pub mod code {
    pub const PING: u32 = 1;
    pub const GET_STATS: u32 = 10;
    pub(crate) const GET_SNAPSHOT_FILE: u32 = 11;
    pub const GET_CLUSTER_METADATA: u32 = 12;
    pub(crate) const DESCRIBE_OPTIONS: u32 = 13;
    pub(crate) const ATTACH_CONSUMER_SESSION: u32 = 14;
    pub(crate) const GET_ME: u32 = 20;
    pub(crate) const GET_CLIENT: u32 = 21;
    pub(crate) const GET_CLIENTS: u32 = 22;
    pub const GET_USER: u32 = 31;
    pub const GET_USERS: u32 = 32;
    pub const CREATE_USER: u32 = 33;
    pub const DELETE_USER: u32 = 34;
    pub const UPDATE_USER: u32 = 35;
    pub const UPDATE_PERMISSIONS: u32 = 36;
    pub const CHANGE_PASSWORD: u32 = 37;
    pub(crate) const LOGIN_USER: u32 = 38;
    pub(crate) const LOGOUT_USER: u32 = 39;
    pub const LOGIN_REGISTER: u32 = 40;
    pub const GET_PERSONAL_ACCESS_TOKENS: u32 = 41;
    pub const CREATE_PERSONAL_ACCESS_TOKEN: u32 = 42;
    pub const DELETE_PERSONAL_ACCESS_TOKEN: u32 = 43;
    pub(crate) const LOGIN_WITH_PERSONAL_ACCESS_TOKEN: u32 = 44;
    pub(crate) const LOGIN_REGISTER_WITH_PAT: u32 = 45;
    pub const POLL_MESSAGES: u32 = 100;
    pub const SEND_MESSAGES: u32 = 101;
    pub(crate) const FLUSH_UNSAVED_BUFFER: u32 = 102;
    pub(crate) const GET_POLL_ROUTING: u32 = 103;
    pub(crate) const POLL_MESSAGES_ON_PRIMARY: u32 = 104;
    pub const GET_CONSUMER_OFFSET: u32 = 120;
    pub const STORE_CONSUMER_OFFSET: u32 = 121;
    pub const DELETE_CONSUMER_OFFSET: u32 = 122;
    pub(crate) const GET_CONSUMER_OFFSET_ROUTING: u32 = 123;
    pub const GET_STREAM: u32 = 200;
    pub const GET_STREAMS: u32 = 201;
    pub const CREATE_STREAM: u32 = 202;
    pub const DELETE_STREAM: u32 = 203;
    pub const UPDATE_STREAM: u32 = 204;
    pub const PURGE_STREAM: u32 = 205;
    pub const GET_TOPIC: u32 = 300;
    pub const GET_TOPICS: u32 = 301;
    pub const CREATE_TOPIC: u32 = 302;
    pub const DELETE_TOPIC: u32 = 303;
    pub const UPDATE_TOPIC: u32 = 304;
    pub const PURGE_TOPIC: u32 = 305;
    pub const CREATE_PARTITIONS: u32 = 402;
    pub const DELETE_PARTITIONS: u32 = 403;
    pub(crate) const DELETE_SEGMENTS: u32 = 503;
    pub const GET_CONSUMER_GROUP: u32 = 600;
    pub const GET_CONSUMER_GROUPS: u32 = 601;
    pub const CREATE_CONSUMER_GROUP: u32 = 602;
    pub const DELETE_CONSUMER_GROUP: u32 = 603;
    pub(crate) const JOIN_CONSUMER_GROUP: u32 = 604;
    pub(crate) const LEAVE_CONSUMER_GROUP: u32 = 605;
    pub(crate) const SYNC_CONSUMER_GROUP: u32 = 606;

    /// Codes the SDK defines that sluice does not serve.
    pub(crate) const UNSUPPORTED: &[u32] = &[
        GET_SNAPSHOT_FILE,
        DESCRIBE_OPTIONS,
        ATTACH_CONSUMER_SESSION,
        LOGIN_USER,
        LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
        FLUSH_UNSAVED_BUFFER,
        GET_POLL_ROUTING,
        POLL_MESSAGES_ON_PRIMARY,
        GET_CONSUMER_OFFSET_ROUTING,
        DELETE_SEGMENTS,
    ];
}

/// Iggy's `Operation` discriminant for each replicated command code, and
/// the reverse; non-replicated commands travel as operation 2 with the code
/// in the header (`frame`).
const REPLICATED: &[(u32, u8)] = &[
    (code::CREATE_USER, 141),
    (code::DELETE_USER, 143),
    (code::UPDATE_USER, 142),
    (code::UPDATE_PERMISSIONS, 145),
    (code::CHANGE_PASSWORD, 144),
    (code::CREATE_PERSONAL_ACCESS_TOKEN, 146),
    (code::DELETE_PERSONAL_ACCESS_TOKEN, 147),
    (code::SEND_MESSAGES, 160),
    (code::STORE_CONSUMER_OFFSET, 161),
    (code::DELETE_CONSUMER_OFFSET, 162),
    (code::CREATE_STREAM, 128),
    (code::UPDATE_STREAM, 129),
    (code::DELETE_STREAM, 130),
    (code::PURGE_STREAM, 131),
    (code::CREATE_TOPIC, 132),
    (code::UPDATE_TOPIC, 133),
    (code::DELETE_TOPIC, 134),
    (code::PURGE_TOPIC, 135),
    (code::CREATE_PARTITIONS, 136),
    (code::DELETE_PARTITIONS, 137),
    (code::DELETE_SEGMENTS, 138),
    (code::CREATE_CONSUMER_GROUP, 139),
    (code::DELETE_CONSUMER_GROUP, 140),
    (code::JOIN_CONSUMER_GROUP, 148),
    (code::LEAVE_CONSUMER_GROUP, 149),
];

/// The command code a request header carries.
pub fn command_code(header: &RequestHeader) -> Result<u32, DecodeError> {
    match header.operation {
        op::REGISTER => Ok(code::LOGIN_REGISTER),
        op::LOGOUT => Ok(code::LOGOUT_USER),
        op::NON_REPLICATED => Ok(header.reserved_code),
        other => REPLICATED
            .iter()
            .find(|(_, o)| *o == other)
            .map(|(c, _)| *c)
            .ok_or(DecodeError::UnknownOperation(other)),
    }
}

/// The operation byte the SDK puts in the header for `code`.
pub fn operation_for(code: u32) -> u8 {
    match code {
        code::LOGIN_REGISTER | code::LOGIN_REGISTER_WITH_PAT => op::REGISTER,
        code::LOGOUT_USER => op::LOGOUT,
        _ => REPLICATED
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(op::NON_REPLICATED, |(_, o)| *o),
    }
}

/// Whether a successful reply to this operation starts with Iggy's result
/// section (`count: u32 = 0`): metadata operations and the two offset
/// writes, and a non-empty register reply.
pub(crate) fn is_result_framed(operation: u8) -> bool {
    operation == op::REGISTER
        || (128..=149).contains(&operation)
        || operation == 161
        || operation == 162
}

/// Why a request does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown command code {0}")]
    UnknownCommand(u32),
    #[error("unknown operation {0}")]
    UnknownOperation(u8),
    #[error("malformed payload: {0}")]
    Payload(#[from] WireError),
}

/// Iggy's `invalid_command` (3).
pub(crate) const INVALID_COMMAND: u32 = 3;

impl DecodeError {
    pub(crate) fn iggy_code(&self) -> u32 {
        match self {
            DecodeError::UnknownCommand(_) | DecodeError::UnknownOperation(_) => INVALID_COMMAND,
            DecodeError::Payload(w) => w.iggy_code(),
        }
    }
}

/// A topic's options as sent: string values keyed as in the HTTP API, so
/// the same parser (`iggy::topic_options::parse_topic_options`) reads both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireTopicOptions {
    pub(crate) compression: Option<String>,
    pub(crate) message_expiry: Option<u64>,
    pub(crate) max_topic_size: Option<u64>,
    /// Every other key, its value rendered as text.
    pub options: BTreeMap<String, String>,
}

/// One decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Ping,
    GetStats,
    GetClusterMetadata,
    GetMe,
    GetClient(u32),
    GetClients,
    LoginRegister {
        username: String,
        password: String,
    },
    Logout,
    GetStream(Identifier),
    GetStreams,
    CreateStream {
        name: String,
        options: BTreeMap<String, String>,
    },
    UpdateStream {
        stream: Identifier,
        name: String,
        options: BTreeMap<String, String>,
    },
    DeleteStream(Identifier),
    PurgeStream(Identifier),
    GetTopic(Identifier, Identifier),
    GetTopics(Identifier),
    CreateTopic {
        stream: Identifier,
        partitions_count: u32,
        name: String,
        options: WireTopicOptions,
    },
    UpdateTopic {
        stream: Identifier,
        topic: Identifier,
        name: String,
        options: WireTopicOptions,
    },
    DeleteTopic(Identifier, Identifier),
    PurgeTopic(Identifier, Identifier),
    CreatePartitions {
        stream: Identifier,
        topic: Identifier,
        count: u32,
    },
    DeletePartitions {
        stream: Identifier,
        topic: Identifier,
        count: u32,
    },
    SendMessages {
        stream: Identifier,
        topic: Identifier,
        partitioning: Partitioning,
        messages: Vec<NewMessage>,
    },
    PollMessages {
        consumer: ConsumerId,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    },
    GetConsumerOffset {
        consumer: ConsumerId,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
    },
    StoreConsumerOffset {
        consumer: ConsumerId,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
        offset: u64,
    },
    DeleteConsumerOffset {
        consumer: ConsumerId,
        stream: Identifier,
        topic: Identifier,
        partition: Option<u32>,
    },
    GetConsumerGroup(Identifier, Identifier, Identifier),
    GetConsumerGroups(Identifier, Identifier),
    CreateConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        name: String,
    },
    DeleteConsumerGroup(Identifier, Identifier, Identifier),
    JoinConsumerGroup(Identifier, Identifier, Identifier),
    LeaveConsumerGroup(Identifier, Identifier, Identifier),
    SyncConsumerGroup(Identifier, Identifier, Identifier),
    /// A login with a personal access token (SDK 0.11's code 45, which
    /// travels as operation Register like a password login: told apart by
    /// its body's shape).
    LoginWithToken {
        token: String,
    },
    GetTokens,
    CreateToken {
        name: String,
        expiry: u64,
    },
    DeleteToken {
        name: String,
    },
    GetUser(Identifier),
    GetUsers,
    CreateUser {
        username: String,
        password: String,
        status: UserStatus,
        permissions: Option<Permissions>,
    },
    DeleteUser(Identifier),
    UpdateUser {
        user: Identifier,
        username: Option<String>,
        status: Option<UserStatus>,
    },
    UpdatePermissions {
        user: Identifier,
        permissions: Option<Permissions>,
    },
    ChangePassword {
        user: Identifier,
        current: String,
        new: String,
    },
    /// A code Iggy defines that sluice does not serve.
    Unsupported(u32),
}

impl Request {
    /// Requests served before a login.
    pub(crate) fn is_public(&self) -> bool {
        matches!(
            self,
            Request::Ping | Request::LoginRegister { .. } | Request::LoginWithToken { .. }
        )
    }
}

/// Iggy's batch layout (`iggy_binary_protocol::batch`).
pub(crate) const BATCH_HEADER_SIZE: usize = 256;
pub(crate) const MESSAGE_HEADER_SIZE: usize = 48;
/// Iggy's bound on a header key or value.
const MAX_HEADER_FIELD: usize = 255;

/// Decodes the payload of command `code`.
pub fn decode(code: u32, payload: &[u8]) -> Result<Request, DecodeError> {
    decode_shared(code, &Bytes::copy_from_slice(payload))
}

/// As `decode`, from the buffer the request was read into: a send's
/// payloads are views of it, not copies.
pub fn decode_shared(code: u32, payload: &Bytes) -> Result<Request, DecodeError> {
    let mut r = Reader::new(payload);
    let request = match code {
        code::PING => Request::Ping,
        code::GET_STATS => Request::GetStats,
        code::GET_CLUSTER_METADATA => Request::GetClusterMetadata,
        code::GET_ME => Request::GetMe,
        code::GET_CLIENTS => Request::GetClients,
        code::GET_CLIENT => Request::GetClient(r.u32()?),
        code::LOGOUT_USER => Request::Logout,
        code::GET_STREAMS => Request::GetStreams,
        code::LOGIN_REGISTER => login_register(&mut r)?,
        code::LOGIN_REGISTER_WITH_PAT => token_login(&mut r)?,
        code::GET_PERSONAL_ACCESS_TOKENS => Request::GetTokens,
        code::CREATE_PERSONAL_ACCESS_TOKEN => Request::CreateToken {
            name: r.short_str("token name", 0)?,
            expiry: r.u64()?,
        },
        code::DELETE_PERSONAL_ACCESS_TOKEN => Request::DeleteToken {
            name: r.short_str("token name", 0)?,
        },
        code::GET_USER => Request::GetUser(r.identifier()?),
        code::GET_USERS => Request::GetUsers,
        code::CREATE_USER => {
            let username = r.name("username")?;
            let password = r.short_str("password", 0)?;
            let status = user_status(r.u8()?)?;
            let permissions = framed_permissions(&mut r)?;
            // The user's options block (empty in SDK 0.11) is not kept.
            let _options = r.rest();
            Request::CreateUser {
                username,
                password,
                status,
                permissions,
            }
        }
        code::DELETE_USER => Request::DeleteUser(r.identifier()?),
        code::UPDATE_USER => {
            let user = r.identifier()?;
            let username = match r.u8()? {
                0 => None,
                _ => Some(r.name("username")?),
            };
            let status = match r.u8()? {
                0 => None,
                _ => Some(user_status(r.u8()?)?),
            };
            let _options = r.rest();
            Request::UpdateUser {
                user,
                username,
                status,
            }
        }
        code::UPDATE_PERMISSIONS => Request::UpdatePermissions {
            user: r.identifier()?,
            permissions: framed_permissions(&mut r)?,
        },
        code::CHANGE_PASSWORD => Request::ChangePassword {
            user: r.identifier()?,
            current: r.short_str("current password", 0)?,
            new: r.short_str("new password", 0)?,
        },
        code::GET_STREAM => Request::GetStream(r.identifier()?),
        code::DELETE_STREAM => Request::DeleteStream(r.identifier()?),
        code::PURGE_STREAM => Request::PurgeStream(r.identifier()?),
        code::CREATE_STREAM => Request::CreateStream {
            name: r.name("stream name")?,
            options: string_options(r.rest())?,
        },
        code::UPDATE_STREAM => Request::UpdateStream {
            stream: r.identifier()?,
            name: r.name("stream name")?,
            options: string_options(r.rest())?,
        },
        code::GET_TOPIC => Request::GetTopic(r.identifier()?, r.identifier()?),
        code::GET_TOPICS => Request::GetTopics(r.identifier()?),
        code::DELETE_TOPIC => Request::DeleteTopic(r.identifier()?, r.identifier()?),
        code::PURGE_TOPIC => Request::PurgeTopic(r.identifier()?, r.identifier()?),
        code::CREATE_TOPIC => Request::CreateTopic {
            stream: r.identifier()?,
            partitions_count: r.u32()?,
            name: r.name("topic name")?,
            options: topic_options(r.rest())?,
        },
        code::UPDATE_TOPIC => Request::UpdateTopic {
            stream: r.identifier()?,
            topic: r.identifier()?,
            name: r.name("topic name")?,
            options: topic_options(r.rest())?,
        },
        code::CREATE_PARTITIONS => Request::CreatePartitions {
            stream: r.identifier()?,
            topic: r.identifier()?,
            count: r.u32()?,
        },
        code::DELETE_PARTITIONS => Request::DeletePartitions {
            stream: r.identifier()?,
            topic: r.identifier()?,
            count: r.u32()?,
        },
        code::SEND_MESSAGES => send_messages(&mut r, payload)?,
        code::POLL_MESSAGES => Request::PollMessages {
            consumer: consumer(&mut r)?,
            stream: r.identifier()?,
            topic: r.identifier()?,
            partition: r.optional_partition()?,
            strategy: polling_strategy(&mut r)?,
            count: r.u32()?,
            auto_commit: r.u8()? != 0,
        },
        code::GET_CONSUMER_OFFSET => Request::GetConsumerOffset {
            consumer: consumer(&mut r)?,
            stream: r.identifier()?,
            topic: r.identifier()?,
            partition: r.optional_partition()?,
        },
        code::STORE_CONSUMER_OFFSET => {
            let request = Request::StoreConsumerOffset {
                consumer: consumer(&mut r)?,
                stream: r.identifier()?,
                topic: r.identifier()?,
                partition: r.optional_partition()?,
                offset: r.u64()?,
            };
            ack_level(&mut r)?;
            request
        }
        code::DELETE_CONSUMER_OFFSET => {
            let request = Request::DeleteConsumerOffset {
                consumer: consumer(&mut r)?,
                stream: r.identifier()?,
                topic: r.identifier()?,
                partition: r.optional_partition()?,
            };
            ack_level(&mut r)?;
            request
        }
        code::GET_CONSUMER_GROUP => {
            Request::GetConsumerGroup(r.identifier()?, r.identifier()?, r.identifier()?)
        }
        code::GET_CONSUMER_GROUPS => Request::GetConsumerGroups(r.identifier()?, r.identifier()?),
        code::CREATE_CONSUMER_GROUP => Request::CreateConsumerGroup {
            stream: r.identifier()?,
            topic: r.identifier()?,
            name: r.name("consumer group name")?,
        },
        code::DELETE_CONSUMER_GROUP => {
            Request::DeleteConsumerGroup(r.identifier()?, r.identifier()?, r.identifier()?)
        }
        code::JOIN_CONSUMER_GROUP => {
            Request::JoinConsumerGroup(r.identifier()?, r.identifier()?, r.identifier()?)
        }
        code::LEAVE_CONSUMER_GROUP => {
            Request::LeaveConsumerGroup(r.identifier()?, r.identifier()?, r.identifier()?)
        }
        code::SYNC_CONSUMER_GROUP => {
            Request::SyncConsumerGroup(r.identifier()?, r.identifier()?, r.identifier()?)
        }
        other if code::UNSUPPORTED.contains(&other) => return Ok(Request::Unsupported(other)),
        other => return Err(DecodeError::UnknownCommand(other)),
    };
    r.finish()?;
    Ok(request)
}

fn login_register(r: &mut Reader<'_>) -> WireResult<Request> {
    // The version prefix: protocol version, SDK name, SDK version.
    let _protocol = r.u32()?;
    let _sdk_name = r.name("sdk name")?;
    let _sdk_version = r.name("sdk version")?;
    // A password login and a token login travel alike (operation Register,
    // no code): the password shape first, then the token's, as Iggy's
    // server tells them apart. Each must take the whole body.
    let body = r.rest();
    let password = |b: &[u8]| -> WireResult<Request> {
        let mut p = Reader::new(b);
        let username = p.name("username")?;
        let password = p.short_str("password", 0)?;
        let context_len = usize::try_from(p.u32()?).unwrap_or(usize::MAX);
        let _context = p.bytes(context_len)?;
        p.finish()?;
        Ok(Request::LoginRegister { username, password })
    };
    password(body).or_else(|e| token_body(body).map_err(|_| e))
}

/// Code 45 when a client names it: the version prefix, then the token.
fn token_login(r: &mut Reader<'_>) -> WireResult<Request> {
    let _protocol = r.u32()?;
    let _sdk_name = r.name("sdk name")?;
    let _sdk_version = r.name("sdk version")?;
    token_body(r.rest())
}

/// A token login's body after the version prefix: the token, a context.
fn token_body(b: &[u8]) -> WireResult<Request> {
    let mut t = Reader::new(b);
    let token = t.short_str("token", 1)?;
    let context_len = usize::try_from(t.u32()?).unwrap_or(usize::MAX);
    let _context = t.bytes(context_len)?;
    t.finish()?;
    Ok(Request::LoginWithToken { token })
}

fn user_status(code: u8) -> WireResult<UserStatus> {
    UserStatus::parse(&code.to_string())
        .ok_or_else(|| WireError::invalid("user status", format!("unknown status {code}")))
}

fn flag(r: &mut Reader<'_>) -> WireResult<bool> {
    Ok(r.u8()? != 0)
}

/// `has_permissions u8`, then a `u32` length and the block (Iggy's
/// `Permissions` layout: 10 global flags, then the streams as a list each
/// entry of which is announced by a non-zero byte).
fn framed_permissions(r: &mut Reader<'_>) -> WireResult<Option<Permissions>> {
    if r.u8()? == 0 {
        return Ok(None);
    }
    let len = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
    let mut block = Reader::new(r.bytes(len)?);
    let p = permissions(&mut block)?;
    block.finish()?;
    Ok(Some(p))
}

fn permissions(r: &mut Reader<'_>) -> WireResult<Permissions> {
    let mut g = [false; 10];
    for f in &mut g {
        *f = flag(r)?;
    }
    let global = GlobalPermissions {
        manage_servers: g[0],
        read_servers: g[1],
        manage_users: g[2],
        read_users: g[3],
        manage_streams: g[4],
        read_streams: g[5],
        manage_topics: g[6],
        read_topics: g[7],
        poll_messages: g[8],
        send_messages: g[9],
    };
    let mut streams = BTreeMap::new();
    let mut more = flag(r)?;
    while more {
        let id = r.u32()?;
        let mut f = [false; 6];
        for x in &mut f {
            *x = flag(r)?;
        }
        let mut topics = BTreeMap::new();
        let mut more_topics = flag(r)?;
        while more_topics {
            let tid = r.u32()?;
            let topic = TopicPermissions {
                manage_topic: flag(r)?,
                read_topic: flag(r)?,
                poll_messages: flag(r)?,
                send_messages: flag(r)?,
            };
            topics.insert(tid, topic);
            more_topics = flag(r)?;
        }
        streams.insert(
            id,
            StreamPermissions {
                manage_stream: f[0],
                read_stream: f[1],
                manage_topics: f[2],
                read_topics: f[3],
                poll_messages: f[4],
                send_messages: f[5],
                topics: (!topics.is_empty()).then_some(topics),
            },
        );
        more = flag(r)?;
    }
    Ok(Permissions {
        global,
        streams: (!streams.is_empty()).then_some(streams),
    })
}

fn consumer(r: &mut Reader<'_>) -> WireResult<ConsumerId> {
    match r.u8()? {
        1 => Ok(ConsumerId::Consumer(r.identifier()?.consumer_id())),
        2 => Ok(ConsumerId::Group(r.identifier()?)),
        other => Err(WireError::invalid(
            "consumer",
            format!("unknown consumer kind {other}"),
        )),
    }
}

fn ack_level(r: &mut Reader<'_>) -> WireResult<()> {
    match r.u8()? {
        0 | 1 => Ok(()),
        other => Err(WireError::invalid(
            "ack level",
            format!("unknown ack level {other}"),
        )),
    }
}

fn polling_strategy(r: &mut Reader<'_>) -> WireResult<PollingStrategy> {
    let kind = r.u8()?;
    let value = r.u64()?;
    Ok(match kind {
        1 => PollingStrategy::Offset(value),
        2 => PollingStrategy::Timestamp(value),
        3 => PollingStrategy::First,
        4 => PollingStrategy::Last,
        5 => PollingStrategy::Next,
        other => {
            return Err(WireError::invalid(
                "polling strategy",
                format!("unknown kind {other}"),
            ));
        }
    })
}

fn partitioning(r: &mut Reader<'_>) -> WireResult<Partitioning> {
    let kind = r.u8()?;
    let len = usize::from(r.u8()?);
    let value = r.bytes(len)?;
    match (kind, len) {
        (1, 0) => Ok(Partitioning::Balanced),
        (2, 4) => {
            let mut id = [0u8; 4];
            id.copy_from_slice(value);
            Ok(Partitioning::PartitionId(u32::from_le_bytes(id)))
        }
        (3, 1..) => Ok(Partitioning::MessagesKey(value.to_vec())),
        _ => Err(WireError::invalid(
            "partitioning",
            format!("kind {kind} with a {len}-byte value"),
        )),
    }
}

/// One TLV entry of a user-header or options block.
struct Tlv<'a> {
    key_kind: u8,
    key: &'a [u8],
    value_kind: u8,
    value: &'a [u8],
}

fn tlv_field<'a>(r: &mut Reader<'a>) -> WireResult<(u8, &'a [u8])> {
    let kind = r.u8()?;
    let len = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
    if kind == 0 || len == 0 || len > MAX_HEADER_FIELD {
        return Err(WireError::invalid(
            "user headers",
            format!("a field of kind {kind} and length {len}"),
        ));
    }
    Ok((kind, r.bytes(len)?))
}

fn tlv_entries(block: &[u8]) -> WireResult<Vec<Tlv<'_>>> {
    let mut r = Reader::new(block);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let (key_kind, key) = tlv_field(&mut r)?;
        let (value_kind, value) = tlv_field(&mut r)?;
        out.push(Tlv {
            key_kind,
            key,
            value_kind,
            value,
        });
    }
    Ok(out)
}

fn string_key(t: &Tlv<'_>, what: &'static str) -> WireResult<String> {
    if t.key_kind != STRING_KIND {
        return Err(WireError::invalid(what, "keys must be of kind string"));
    }
    String::from_utf8(t.key.to_vec()).map_err(|_| WireError::invalid(what, "a key is not UTF-8"))
}

/// The value of an option as text (strings as sent, numbers in decimal).
fn option_text(t: &Tlv<'_>) -> WireResult<String> {
    let le = |n: usize| -> Option<u128> {
        let mut b = [0u8; 16];
        b.get_mut(..n)?.copy_from_slice(t.value.get(..n)?);
        (t.value.len() == n).then(|| u128::from_le_bytes(b))
    };
    let number = match t.value_kind {
        STRING_KIND => {
            return String::from_utf8(t.value.to_vec())
                .map_err(|_| WireError::invalid("options", "a value is not UTF-8"));
        }
        3 | 9 => le(1),
        10 => le(2),
        11 => le(4),
        12 => le(8),
        _ => None,
    };
    number
        .map(|n| n.to_string())
        .ok_or_else(|| WireError::invalid("options", format!("a value of kind {}", t.value_kind)))
}

fn string_options(block: &[u8]) -> WireResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for t in tlv_entries(block)? {
        let key = string_key(&t, "options")?;
        if out.insert(key, option_text(&t)?).is_some() {
            return Err(WireError::invalid("options", "a key appears twice"));
        }
    }
    Ok(out)
}

fn topic_options(block: &[u8]) -> WireResult<WireTopicOptions> {
    let mut out = WireTopicOptions::default();
    for (key, value) in string_options(block)? {
        // Iggy takes a number or a human-readable text (`7 days`, `1 GiB`).
        let value_of = |parse: fn(&str) -> Result<u64, String>, v: &str| {
            parse(v)
                .map_err(|reason| WireError::invalid("option value", format!("{key}: {reason}")))
        };
        match key.as_str() {
            // A name or Iggy's code (`Compression::parse` reads both).
            "compression_algorithm" => out.compression = Some(value),
            "message_expiry" => out.message_expiry = Some(value_of(expiry_from_text, &value)?),
            "max_topic_size" => {
                out.max_topic_size = Some(value_of(max_topic_size_from_text, &value)?)
            }
            _ => {
                out.options.insert(key, value);
            }
        }
    }
    Ok(out)
}

/// User headers of one message, as the engine stores them: keys and values
/// of any known kind, each of a size its kind takes (`header_kinds::check`).
fn user_headers(block: &[u8], index: usize) -> WireResult<Option<Headers>> {
    let entries = tlv_entries(block)?;
    if entries.is_empty() {
        return Ok(None);
    }
    let mut headers = Headers::new();
    for t in entries {
        let check = |what: &str, kind: u8, bytes: &[u8]| {
            header_kinds::check(kind, bytes.len()).map_err(|reason| {
                WireError::invalid("user headers", format!("message {index}: {what}: {reason}"))
            })
        };
        check("a key", t.key_kind, t.key)?;
        check("a value", t.value_kind, t.value)?;
        headers.insert(
            HeaderKey {
                kind: t.key_kind,
                value: t.key.to_vec(),
            },
            HeaderValue {
                kind: t.value_kind,
                value: t.value.to_vec(),
            },
        );
    }
    Ok(Some(headers))
}

/// `whole` is the buffer `r` reads: the payloads are views of it.
fn send_messages(r: &mut Reader<'_>, whole: &Bytes) -> WireResult<Request> {
    let metadata_len = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
    let start = r.position();
    let stream = r.identifier()?;
    let topic = r.identifier()?;
    let partitioning = partitioning(r)?;
    let count = r.u32()?;
    if r.position() - start != metadata_len {
        return Err(WireError::invalid(
            "send metadata",
            format!(
                "declared {metadata_len} bytes, read {}",
                r.position() - start
            ),
        ));
    }
    let header = r.bytes(BATCH_HEADER_SIZE)?;
    let mut h = Reader::new(header);
    let fields = [h.u64()?, h.u64()?, h.u64()?, h.u64()?, h.u64()?, h.u64()?];
    let origin_timestamp = fields[3];
    let batch_length = fields[4];
    let batch_checksum = fields[5];
    let header_count = h.u32()?;
    if h.rest().iter().any(|b| *b != 0) {
        return Err(WireError::invalid("batch", "reserved bytes must be zero"));
    }
    if header_count != count || count == 0 {
        return Err(WireError::invalid(
            "batch",
            format!("{count} messages announced, {header_count} in the batch header"),
        ));
    }
    let blob_len = usize::try_from(batch_length)
        .ok()
        .and_then(|l| l.checked_sub(BATCH_HEADER_SIZE))
        .ok_or_else(|| WireError::invalid("batch", "length shorter than its header"))?;
    let blob = r.bytes(blob_len)?;
    let mut frames = Reader::new(blob);
    // Iggy's batch checksum: the header fields, then each message's checksum.
    let mut batch_hash = XxHash3_64::new();
    for f in &fields[..5] {
        batch_hash.write(&f.to_le_bytes());
    }
    batch_hash.write(&header_count.to_le_bytes());
    let mut messages = Vec::with_capacity(
        usize::try_from(count)
            .unwrap_or(0)
            .min(blob_len / MESSAGE_HEADER_SIZE + 1),
    );
    for index in 0..count as usize {
        let frame_start = frames.position();
        let checksum = frames.u64()?;
        let id = frames.u128()?;
        let _offset_delta = frames.u32()?;
        // The producer's timestamp: the batch's, plus this message's delta.
        let timestamp_delta = frames.u32()?;
        let headers_len = usize::try_from(frames.u32()?).unwrap_or(usize::MAX);
        let payload_len = usize::try_from(frames.u32()?).unwrap_or(usize::MAX);
        if frames.u64()? != 0 {
            return Err(WireError::invalid("message", "reserved bytes must be zero"));
        }
        let payload = frames.bytes(payload_len)?;
        let headers = frames.bytes(headers_len)?;
        let frame = blob
            .get(frame_start + 8..frames.position())
            .ok_or(WireError::Truncated {
                at: frame_start,
                need: MESSAGE_HEADER_SIZE,
            })?;
        if XxHash3_64::oneshot(frame) != checksum {
            return Err(WireError::MessageChecksum { index });
        }
        batch_hash.write(&checksum.to_le_bytes());
        if payload.is_empty() {
            return Err(WireError::invalid(
                "message",
                format!("message {index} has an empty payload"),
            ));
        }
        messages.push(
            NewMessage::new(whole.slice_ref(payload))
                .with_id(id)
                .with_origin_timestamp(Some(
                    origin_timestamp.saturating_add(u64::from(timestamp_delta)),
                ))
                .with_headers(user_headers(headers, index)?),
        );
    }
    frames.finish()?;
    if batch_hash.finish() != batch_checksum {
        return Err(WireError::BatchChecksum);
    }
    Ok(Request::SendMessages {
        stream,
        topic,
        partitioning,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_every_code_when_mapped_to_an_operation_and_back_then_it_round_trips() {
        for code in [
            code::CREATE_STREAM,
            code::SEND_MESSAGES,
            code::STORE_CONSUMER_OFFSET,
            code::LOGOUT_USER,
            code::LOGIN_REGISTER,
            code::PING,
            code::POLL_MESSAGES,
        ] {
            let header = RequestHeader {
                size: 256,
                client: 1,
                request_checksum: 0,
                request: 1,
                operation: operation_for(code),
                session: 1,
                reserved_code: if operation_for(code) == op::NON_REPLICATED {
                    code
                } else {
                    0
                },
            };
            assert_eq!(command_code(&header), Ok(code));
        }
    }

    #[test]
    fn given_unknown_codes_when_decoding_then_they_are_invalid_command_and_unserved_ones_unsupported()
     {
        assert_eq!(decode(9999, &[]).map_err(|e| e.iggy_code()), Err(3));
        assert_eq!(
            decode(code::FLUSH_UNSAVED_BUFFER, &[1, 2, 3]),
            Ok(Request::Unsupported(code::FLUSH_UNSAVED_BUFFER))
        );
        // A served code with a malformed body is invalid_format.
        assert_eq!(
            decode(code::CREATE_USER, &[1, 2, 3]).map_err(|e| e.iggy_code()),
            Err(4)
        );
    }

    #[test]
    fn given_trailing_bytes_when_decoding_then_the_request_is_refused() {
        assert_eq!(
            decode(code::PING, &[0]),
            Err(DecodeError::Payload(WireError::Trailing(1)))
        );
    }
}
