//! The consumer a poll or an offset request names, as both transports
//! decode it: an individual consumer (a numeric id; a name is mapped to one
//! as Iggy maps it) or a consumer group (an id or a name), and its
//! resolution to the engine's `Consumer`.
//!
//! Invariants:
//! - A group is resolved inside the engine call that uses it
//!   (`ConsumerId::resolve`), so the group it names cannot be deleted
//!   between resolution and use.
//! - An individual consumer needs no lookup: its offsets exist per id,
//!   whether or not anything was stored for it yet.

use crate::engine::Engine;
use crate::identifier::Identifier;
use crate::partition::Consumer;

/// A consumer as Iggy names it: kind 1 (consumer: a numeric id, or a name
/// mapped to one as Iggy maps it, `Identifier::consumer_id`) or 2 (group, id
/// or name, resolved inside the engine call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerId {
    Consumer(u32),
    Group(Identifier),
}

impl ConsumerId {
    /// The engine's consumer; a group name or id must name a group of topic
    /// `t` of stream `s`.
    pub(crate) fn resolve(
        &self,
        e: &Engine,
        s: &Identifier,
        t: &Identifier,
    ) -> crate::error::Result<Consumer> {
        match self {
            ConsumerId::Consumer(id) => Ok(Consumer::consumer(*id)),
            ConsumerId::Group(g) => Ok(Consumer::group(e.group(s, t, g)?.id)),
        }
    }
}
