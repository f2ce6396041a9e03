//! Iggy's permission model (issue 29): what a user may do, and the rules
//! Iggy's server checks, written from its documented behaviour
//! (docs/research/iggy-0.11-users-permissions-tokens.md §3).
//!
//! Invariants:
//! - `Permissions` holds exactly Iggy's flags: ten global ones, six per
//!   stream, four per topic, the maps keyed by numeric ids. `None` (no
//!   permissions at all) and "every flag false" both deny every rule.
//! - `Permissions::allows` is the one place a rule is decided, for both
//!   transports; each `Rule` passes on exactly the flags Iggy's rule of
//!   the same name passes on (the table test below spells every one out):
//!   manage implies read at every level, a stream's grants cover its
//!   topics, global `manage_streams` covers every stream, topic and
//!   message, polling is implied by any read or manage flag, sending only
//!   by a manage flag or an explicit `send_messages`.
//! - Root (id 0) passes every rule whatever it holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The ten server-wide flags, in Iggy's wire order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

/// A stream's flags, and its topics' (by topic id).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPermissions {
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    pub topics: Option<BTreeMap<u32, TopicPermissions>>,
}

/// A topic's flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPermissions {
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

/// A user's permissions: global flags and per-stream grants (by stream id).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: Option<BTreeMap<u32, StreamPermissions>>,
}

/// What a command needs, named after Iggy's rules (`s` stream id, `t`
/// topic id, both resolved before the check: a missing target is "not
/// found" before it is "not allowed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Being logged in is enough.
    Authenticated,
    /// Stats, clients, snapshots (and sluice's status routes and metrics).
    ReadServers,
    /// Reading users.
    ReadUsers,
    /// Creating, changing and deleting users and their permissions.
    ManageUsers,
    /// Listing streams (a global flag only).
    GetStreams,
    GetStream(u32),
    /// Creating a stream (global `manage_streams` only).
    CreateStream,
    /// Updating, deleting, purging a stream.
    ManageStream(u32),
    GetTopics(u32),
    GetTopic(u32, u32),
    CreateTopic(u32),
    /// Updating, deleting, purging a topic, and its partitions.
    ManageTopic(u32, u32),
    /// Polling, and consumer offsets.
    Poll(u32, u32),
    Send(u32, u32),
}

/// Iggy's root user id.
pub const ROOT_USER_ID: u32 = 0;

impl Permissions {
    /// Every flag: what root holds.
    pub fn root() -> Self {
        Permissions {
            global: GlobalPermissions {
                manage_servers: true,
                read_servers: true,
                manage_users: true,
                read_users: true,
                manage_streams: true,
                read_streams: true,
                manage_topics: true,
                read_topics: true,
                poll_messages: true,
                send_messages: true,
            },
            streams: None,
        }
    }

    fn stream(&self, s: u32) -> Option<&StreamPermissions> {
        self.streams.as_ref().and_then(|m| m.get(&s))
    }

    fn topic(&self, s: u32, t: u32) -> Option<&TopicPermissions> {
        self.stream(s)
            .and_then(|sp| sp.topics.as_ref())
            .and_then(|m| m.get(&t))
    }

    /// Whether these permissions pass `rule`.
    pub fn allows(&self, rule: Rule) -> bool {
        let g = &self.global;
        let stream = |s: u32, f: fn(&StreamPermissions) -> bool| self.stream(s).is_some_and(f);
        let topic =
            |s: u32, t: u32, f: fn(&TopicPermissions) -> bool| self.topic(s, t).is_some_and(f);
        match rule {
            Rule::Authenticated => true,
            Rule::ReadServers => g.manage_servers || g.read_servers,
            Rule::ReadUsers => g.manage_users || g.read_users,
            Rule::ManageUsers => g.manage_users,
            Rule::GetStreams => g.manage_streams || g.read_streams,
            Rule::GetStream(s) => {
                g.manage_streams
                    || g.read_streams
                    || stream(s, |p| p.manage_stream || p.read_stream)
            }
            Rule::CreateStream => g.manage_streams,
            Rule::ManageStream(s) => g.manage_streams || stream(s, |p| p.manage_stream),
            Rule::GetTopics(s) => self.reads_topics_of(s),
            Rule::GetTopic(s, t) => {
                self.reads_topics_of(s) || topic(s, t, |p| p.manage_topic || p.read_topic)
            }
            Rule::CreateTopic(s) => {
                g.manage_streams
                    || g.manage_topics
                    || stream(s, |p| p.manage_stream || p.manage_topics)
            }
            Rule::ManageTopic(s, t) => {
                g.manage_streams
                    || g.manage_topics
                    || stream(s, |p| p.manage_stream || p.manage_topics)
                    || topic(s, t, |p| p.manage_topic)
            }
            Rule::Poll(s, t) => {
                g.poll_messages
                    || g.read_topics
                    || g.manage_topics
                    || g.read_streams
                    || g.manage_streams
                    || stream(s, |p| {
                        p.poll_messages
                            || p.manage_stream
                            || p.read_stream
                            || p.manage_topics
                            || p.read_topics
                    })
                    || topic(s, t, |p| p.manage_topic || p.read_topic || p.poll_messages)
            }
            Rule::Send(s, t) => {
                g.send_messages
                    || g.manage_streams
                    || g.manage_topics
                    || stream(s, |p| p.send_messages || p.manage_stream || p.manage_topics)
                    || topic(s, t, |p| p.manage_topic || p.send_messages)
            }
        }
    }

    /// Iggy's `get_topics`: any read or manage flag over streams or topics,
    /// globally or on stream `s`.
    fn reads_topics_of(&self, s: u32) -> bool {
        let g = &self.global;
        g.read_streams
            || g.manage_streams
            || g.manage_topics
            || g.read_topics
            || self.stream(s).is_some_and(|p| {
                p.manage_stream || p.read_stream || p.manage_topics || p.read_topics
            })
    }
}

/// Whether the user `user_id` holding `permissions` may do what `rule`
/// needs: root always, anyone else by the rule (`None`: nothing but
/// `Authenticated`).
pub fn allowed(user_id: u32, permissions: Option<&Permissions>, rule: Rule) -> bool {
    user_id == ROOT_USER_ID
        || rule == Rule::Authenticated
        || permissions.is_some_and(|p| p.allows(rule))
}

#[cfg(test)]
mod tests {
    //! Every rule against every single flag, as Iggy's rules read
    //! (docs/research/iggy-0.11-users-permissions-tokens.md §3.2): a user
    //! holding exactly one flag passes exactly the rules listed for it.
    use super::*;

    const S: u32 = 3;
    const T: u32 = 5;
    const OTHER: u32 = 9;

    /// Every rule, on stream `S` and topic `T`.
    fn rules() -> Vec<(&'static str, Rule)> {
        vec![
            ("read_servers", Rule::ReadServers),
            ("read_users", Rule::ReadUsers),
            ("manage_users", Rule::ManageUsers),
            ("get_streams", Rule::GetStreams),
            ("get_stream", Rule::GetStream(S)),
            ("create_stream", Rule::CreateStream),
            ("manage_stream", Rule::ManageStream(S)),
            ("get_topics", Rule::GetTopics(S)),
            ("get_topic", Rule::GetTopic(S, T)),
            ("create_topic", Rule::CreateTopic(S)),
            ("manage_topic", Rule::ManageTopic(S, T)),
            ("poll", Rule::Poll(S, T)),
            ("send", Rule::Send(S, T)),
        ]
    }

    fn global(set: fn(&mut GlobalPermissions)) -> Permissions {
        let mut p = Permissions::default();
        set(&mut p.global);
        p
    }

    fn on_stream(id: u32, set: fn(&mut StreamPermissions)) -> Permissions {
        let mut sp = StreamPermissions::default();
        set(&mut sp);
        Permissions {
            streams: Some(BTreeMap::from([(id, sp)])),
            ..Permissions::default()
        }
    }

    fn on_topic(s: u32, t: u32, set: fn(&mut TopicPermissions)) -> Permissions {
        let mut tp = TopicPermissions::default();
        set(&mut tp);
        on_stream_with_topic(s, t, tp)
    }

    fn on_stream_with_topic(s: u32, t: u32, tp: TopicPermissions) -> Permissions {
        Permissions {
            streams: Some(BTreeMap::from([(
                s,
                StreamPermissions {
                    topics: Some(BTreeMap::from([(t, tp)])),
                    ..StreamPermissions::default()
                },
            )])),
            ..Permissions::default()
        }
    }

    /// A flag's name, how to set it, and the rules it passes.
    type Row<P> = (&'static str, fn(&mut P), Vec<&'static str>);

    fn passes(p: &Permissions) -> Vec<&'static str> {
        rules()
            .into_iter()
            .filter(|(_, r)| p.allows(*r))
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn given_one_global_flag_then_exactly_iggys_rules_pass() {
        let table: Vec<(&str, Permissions, Vec<&str>)> = vec![
            (
                "manage_servers",
                global(|g| g.manage_servers = true),
                vec!["read_servers"],
            ),
            (
                "read_servers",
                global(|g| g.read_servers = true),
                vec!["read_servers"],
            ),
            (
                "manage_users",
                global(|g| g.manage_users = true),
                vec!["read_users", "manage_users"],
            ),
            (
                "read_users",
                global(|g| g.read_users = true),
                vec!["read_users"],
            ),
            (
                "manage_streams",
                global(|g| g.manage_streams = true),
                vec![
                    "get_streams",
                    "get_stream",
                    "create_stream",
                    "manage_stream",
                    "get_topics",
                    "get_topic",
                    "create_topic",
                    "manage_topic",
                    "poll",
                    "send",
                ],
            ),
            (
                "read_streams",
                global(|g| g.read_streams = true),
                vec![
                    "get_streams",
                    "get_stream",
                    "get_topics",
                    "get_topic",
                    "poll",
                ],
            ),
            (
                "manage_topics",
                global(|g| g.manage_topics = true),
                vec![
                    "get_topics",
                    "get_topic",
                    "create_topic",
                    "manage_topic",
                    "poll",
                    "send",
                ],
            ),
            (
                "read_topics",
                global(|g| g.read_topics = true),
                vec!["get_topics", "get_topic", "poll"],
            ),
            (
                "poll_messages",
                global(|g| g.poll_messages = true),
                vec!["poll"],
            ),
            (
                "send_messages",
                global(|g| g.send_messages = true),
                vec!["send"],
            ),
        ];
        for (flag, p, expected) in table {
            assert_eq!(passes(&p), expected, "global {flag}");
        }
        assert!(passes(&Permissions::default()).is_empty());
    }

    #[test]
    fn given_one_stream_flag_then_exactly_iggys_rules_pass_on_that_stream_only() {
        let table: Vec<Row<StreamPermissions>> = vec![
            (
                "manage_stream",
                |s| s.manage_stream = true,
                vec![
                    "get_stream",
                    "manage_stream",
                    "get_topics",
                    "get_topic",
                    "create_topic",
                    "manage_topic",
                    "poll",
                    "send",
                ],
            ),
            (
                "read_stream",
                |s| s.read_stream = true,
                vec!["get_stream", "get_topics", "get_topic", "poll"],
            ),
            (
                "manage_topics",
                |s| s.manage_topics = true,
                vec![
                    "get_topics",
                    "get_topic",
                    "create_topic",
                    "manage_topic",
                    "poll",
                    "send",
                ],
            ),
            (
                "read_topics",
                |s| s.read_topics = true,
                vec!["get_topics", "get_topic", "poll"],
            ),
            ("poll_messages", |s| s.poll_messages = true, vec!["poll"]),
            ("send_messages", |s| s.send_messages = true, vec!["send"]),
        ];
        for (flag, set, expected) in table {
            assert_eq!(passes(&on_stream(S, set)), expected, "stream {flag}");
            assert!(
                passes(&on_stream(OTHER, set)).is_empty(),
                "stream {flag} elsewhere"
            );
        }
    }

    #[test]
    fn given_one_topic_flag_then_exactly_iggys_rules_pass_on_that_topic_only() {
        let table: Vec<Row<TopicPermissions>> = vec![
            (
                "manage_topic",
                |t| t.manage_topic = true,
                vec!["get_topic", "manage_topic", "poll", "send"],
            ),
            (
                "read_topic",
                |t| t.read_topic = true,
                vec!["get_topic", "poll"],
            ),
            ("poll_messages", |t| t.poll_messages = true, vec!["poll"]),
            ("send_messages", |t| t.send_messages = true, vec!["send"]),
        ];
        for (flag, set, expected) in table {
            assert_eq!(passes(&on_topic(S, T, set)), expected, "topic {flag}");
            assert!(
                passes(&on_topic(S, OTHER, set)).is_empty(),
                "topic {flag} elsewhere"
            );
            assert!(
                passes(&on_topic(OTHER, T, set)).is_empty(),
                "topic {flag} in another stream"
            );
        }
    }

    #[test]
    fn given_root_or_no_permissions_then_root_passes_everything_and_none_only_authentication() {
        for (_, rule) in rules() {
            assert!(allowed(ROOT_USER_ID, None, rule));
            assert!(!allowed(1, None, rule));
            assert!(allowed(1, Some(&Permissions::root()), rule));
        }
        assert!(allowed(1, None, Rule::Authenticated));
    }
}
