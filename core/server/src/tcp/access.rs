//! What each TCP command needs (`iggy::access::Need`), Iggy's permission
//! table for the binary protocol; the check itself is the Iggy layer's.
//!
//! Invariants:
//! - The match is exhaustive: a command added to `Request` does not compile
//!   until it says what it needs.

use super::codec::Request;
use crate::identifier::Identifier;
use crate::iggy::access::Need;

impl Request {
    pub(crate) fn need(&self) -> Need {
        match self {
            Request::Ping
            | Request::LoginRegister { .. }
            | Request::Logout
            | Request::GetMe
            | Request::GetClusterMetadata
            | Request::SyncConsumerGroup(..)
            | Request::Unsupported(_) => Need::Authenticated,
            Request::GetStats | Request::GetClient(_) | Request::GetClients => Need::ReadServers,
            // A user named by number may read itself and change its own password.
            Request::GetUser(Identifier::Numeric(id)) => Need::ReadUser(*id),
            Request::GetUser(_) | Request::GetUsers => Need::ReadUsers,
            Request::ChangePassword {
                user: Identifier::Numeric(id),
                ..
            } => Need::ChangePassword(*id),
            Request::CreateUser { .. }
            | Request::DeleteUser(_)
            | Request::UpdateUser { .. }
            | Request::UpdatePermissions { .. }
            | Request::ChangePassword { .. } => Need::ManageUsers,
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
