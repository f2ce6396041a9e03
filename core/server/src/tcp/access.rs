//! What each TCP command needs (`iggy::access::Need`), Iggy's permission
//! table for the binary protocol; the check itself is the Iggy layer's.
//!
//! Invariants:
//! - The match is exhaustive: a command added to `Request` does not compile
//!   until it says what it needs.

use super::codec::Request;
use crate::iggy::access::Need;

impl Request {
    pub(crate) fn need(&self) -> Need {
        match self {
            Request::Ping
            | Request::LoginRegister { .. }
            | Request::LoginWithToken { .. }
            // Personal access tokens: each caller's own.
            | Request::GetTokens
            | Request::CreateToken { .. }
            | Request::DeleteToken { .. }
            | Request::Logout
            | Request::GetMe
            | Request::GetClusterMetadata
            | Request::SyncConsumerGroup(..)
            | Request::Unsupported(_) => Need::Authenticated,
            Request::GetStats | Request::GetClient(_) | Request::GetClients => Need::ReadServers,
            // A user, named by id or name, may read itself and change its own password.
            Request::GetUser(id) => Need::ReadUser(id.clone()),
            Request::GetUsers => Need::ReadUsers,
            Request::ChangePassword { user, .. } => Need::ChangePassword(user.clone()),
            Request::CreateUser { .. }
            | Request::DeleteUser(_)
            | Request::UpdateUser { .. }
            | Request::UpdatePermissions { .. } => Need::ManageUsers,
            Request::GetStreams => Need::GetStreams,
            Request::GetStream(s) => Need::GetStream(s.clone()),
            Request::CreateStream { .. } => Need::CreateStream,
            Request::UpdateStream { stream, .. } => Need::ManageStream(stream.clone()),
            Request::DeleteStream(s) | Request::PurgeStream(s) => Need::ManageStream(s.clone()),
            Request::GetTopics(s) => Need::GetTopics(s.clone()),
            Request::CreateTopic { stream, .. } => Need::CreateTopic(stream.clone()),
            Request::GetTopic(s, t)
            | Request::GetConsumerGroup(s, t, _)
            | Request::GetConsumerGroups(s, t)
            | Request::DeleteConsumerGroup(s, t, _)
            | Request::JoinConsumerGroup(s, t, _)
            | Request::LeaveConsumerGroup(s, t, _) => Need::GetTopic(s.clone(), t.clone()),
            Request::CreateConsumerGroup { stream, topic, .. } => {
                Need::GetTopic(stream.clone(), topic.clone())
            }
            Request::UpdateTopic { stream, topic, .. }
            | Request::CreatePartitions { stream, topic, .. }
            | Request::DeletePartitions { stream, topic, .. } => {
                Need::ManageTopic(stream.clone(), topic.clone())
            }
            Request::DeleteTopic(s, t) | Request::PurgeTopic(s, t) => {
                Need::ManageTopic(s.clone(), t.clone())
            }
            Request::SendMessages { stream, topic, .. } => {
                Need::Send(stream.clone(), topic.clone())
            }
            Request::PollMessages { stream, topic, .. }
            | Request::GetConsumerOffset { stream, topic, .. }
            | Request::StoreConsumerOffset { stream, topic, .. }
            | Request::DeleteConsumerOffset { stream, topic, .. } => {
                Need::Poll(stream.clone(), topic.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Iggy's permission table for the binary protocol
    //! (docs/research/iggy-0.11-users-permissions-tokens.md §3.3), written
    //! out by command code and held against `Request::need`: each command
    //! decoded from a minimal payload needs what Iggy's table says.
    use super::*;
    use crate::identifier::Identifier;
    use crate::tcp::codec::{code, decode};

    const S: &str = "s";
    const T: &str = "t";

    fn name(n: &str) -> Identifier {
        Identifier::Name(n.to_string())
    }

    /// A payload naming stream `s`, topic `t` (and group `g`) as the
    /// command expects them.
    fn ident(out: &mut Vec<u8>, n: &str) {
        out.push(2);
        out.push(n.len() as u8);
        out.extend_from_slice(n.as_bytes());
    }

    fn st() -> Vec<u8> {
        let mut out = Vec::new();
        ident(&mut out, S);
        ident(&mut out, T);
        out
    }

    #[test]
    fn given_each_command_then_it_needs_what_iggys_table_says() {
        let s = || name(S);
        let (st_need, topic) = (st(), || (name(S), name(T)));
        let mut stream_only = Vec::new();
        ident(&mut stream_only, S);
        let mut stg = st();
        ident(&mut stg, "g");
        let mut user = Vec::new();
        user.extend_from_slice(&[1, 4]);
        user.extend_from_slice(&7u32.to_le_bytes());
        let table: Vec<(u32, Vec<u8>, Need)> = vec![
            (code::PING, vec![], Need::Authenticated),
            (code::GET_STATS, vec![], Need::ReadServers),
            (code::GET_CLUSTER_METADATA, vec![], Need::Authenticated),
            (code::GET_STREAMS, vec![], Need::GetStreams),
            (code::GET_STREAM, stream_only.clone(), Need::GetStream(s())),
            (
                code::DELETE_STREAM,
                stream_only.clone(),
                Need::ManageStream(s()),
            ),
            (
                code::PURGE_STREAM,
                stream_only.clone(),
                Need::ManageStream(s()),
            ),
            (code::GET_TOPICS, stream_only.clone(), Need::GetTopics(s())),
            (
                code::GET_TOPIC,
                st_need.clone(),
                Need::GetTopic(topic().0, topic().1),
            ),
            (
                code::DELETE_TOPIC,
                st_need.clone(),
                Need::ManageTopic(topic().0, topic().1),
            ),
            (
                code::PURGE_TOPIC,
                st_need.clone(),
                Need::ManageTopic(topic().0, topic().1),
            ),
            (
                code::GET_CONSUMER_GROUPS,
                st_need.clone(),
                Need::GetTopic(topic().0, topic().1),
            ),
            (
                code::GET_CONSUMER_GROUP,
                stg.clone(),
                Need::GetTopic(topic().0, topic().1),
            ),
            (
                code::DELETE_CONSUMER_GROUP,
                stg.clone(),
                Need::GetTopic(topic().0, topic().1),
            ),
            (code::GET_USERS, vec![], Need::ReadUsers),
            (
                code::GET_USER,
                user.clone(),
                Need::ReadUser(Identifier::Numeric(7)),
            ),
            (code::DELETE_USER, user.clone(), Need::ManageUsers),
        ];
        for (c, payload, expected) in table {
            let request = decode(c, &payload).unwrap_or_else(|e| panic!("code {c}: {e}"));
            assert_eq!(request.need(), expected, "code {c}");
        }
    }

    #[test]
    fn given_the_remaining_commands_then_each_needs_iggys_rule() {
        // Built directly: their payloads are long to write out by hand.
        let (s, t) = (name(S), name(T));
        let p = |n: u32| crate::engine::Partitioning::PartitionId(n);
        let cases: Vec<(Request, Need)> = vec![
            (
                Request::CreateStream {
                    name: "x".into(),
                    options: Default::default(),
                },
                Need::CreateStream,
            ),
            (
                Request::UpdateStream {
                    stream: s.clone(),
                    name: "x".into(),
                    options: Default::default(),
                },
                Need::ManageStream(s.clone()),
            ),
            (
                Request::CreateTopic {
                    stream: s.clone(),
                    partitions_count: 1,
                    name: "x".into(),
                    options: Default::default(),
                },
                Need::CreateTopic(s.clone()),
            ),
            (
                Request::CreatePartitions {
                    stream: s.clone(),
                    topic: t.clone(),
                    count: 1,
                },
                Need::ManageTopic(s.clone(), t.clone()),
            ),
            (
                Request::SendMessages {
                    stream: s.clone(),
                    topic: t.clone(),
                    partitioning: p(0),
                    messages: vec![],
                },
                Need::Send(s.clone(), t.clone()),
            ),
            (
                Request::StoreConsumerOffset {
                    consumer: crate::tcp::codec::ConsumerId::Consumer(1),
                    stream: s.clone(),
                    topic: t.clone(),
                    partition: None,
                    offset: 0,
                },
                Need::Poll(s.clone(), t.clone()),
            ),
            (
                Request::JoinConsumerGroup(s.clone(), t.clone(), name("g")),
                Need::GetTopic(s.clone(), t.clone()),
            ),
            (
                Request::SyncConsumerGroup(s.clone(), t.clone(), name("g")),
                Need::Authenticated,
            ),
            (
                Request::ChangePassword {
                    user: Identifier::Numeric(3),
                    current: "a".into(),
                    new: "b".into(),
                },
                Need::ChangePassword(Identifier::Numeric(3)),
            ),
            (
                Request::UpdatePermissions {
                    user: Identifier::Numeric(3),
                    permissions: None,
                },
                Need::ManageUsers,
            ),
        ];
        for (request, expected) in cases {
            assert_eq!(request.need(), expected, "{request:?}");
        }
    }
}
