//! Response bodies of the Iggy 0.11 binary protocol, encoded from the
//! engine's metadata and results (`iggy_binary_protocol::responses`).
//!
//! Invariants:
//! - Rendering reads the engine and never changes it.
//! - Layouts are Iggy's byte for byte; `tests/tcp_codec.rs` decodes every
//!   encoder's output with the official SDK's decoders.
//! - A polled payload is never copied here: the poll answer is a
//!   `ReplyFrame` whose headers are encoded into the transport's buffer and
//!   whose payloads are written from the engine's `Message`s (vectored), in
//!   Iggy batches of messages sharing one append timestamp whose origin
//!   timestamps lie within a `u32` of microseconds of the batch's earliest
//!   (Iggy carries one of each per batch and a delta per message).

use std::hash::Hasher as _;

use twox_hash::XxHash3_64;

use super::codec::{BATCH_HEADER_SIZE, MESSAGE_HEADER_SIZE};
use super::reply::ReplyFrame;
use super::wire::Put;
use crate::engine::Engine;
use crate::iggy::header_kinds::{self, STRING_KIND, UINT64_KIND};
use crate::iggy::stats::Stats;
use crate::iggy::units::to_iggy_limit;
use crate::metadata::{Durability, GroupMeta, PartitionKey, StreamMeta, TopicMeta};
use crate::partition::Polled;
use crate::partition::log::Message;

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn tlv(out: &mut Vec<u8>, kind: u8, key: &[u8], value_kind: u8, value: &[u8]) {
    out.put_u8(kind);
    out.put_u32(count_u32(key.len()));
    out.extend_from_slice(key);
    out.put_u8(value_kind);
    out.put_u32(count_u32(value.len()));
    out.extend_from_slice(value);
}

/// A `u32`-length-prefixed options block.
fn options_block(out: &mut Vec<u8>, entries: &[(&str, u8, Vec<u8>)]) {
    let mut block = Vec::new();
    for (key, kind, value) in entries {
        tlv(&mut block, STRING_KIND, key.as_bytes(), *kind, value);
    }
    out.put_u32(count_u32(block.len()));
    out.extend_from_slice(&block);
}

/// Iggy's names for a policy: `buffered` is `replicated` on one node.
fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Buffered => "replicated",
        Durability::Persisted => "persisted",
    }
}

pub fn stream(out: &mut Vec<u8>, engine: &Engine, s: &StreamMeta) {
    let (messages, bytes) = s.topics.values().fold((0u64, 0u64), |(m, b), t| {
        let (tm, tb) = engine.topic_stats(s.id, t.id);
        (m.saturating_add(tm), b.saturating_add(tb))
    });
    out.put_u32(s.id);
    out.put_u64(s.created_at);
    out.put_u32(count_u32(s.topics.len()));
    out.put_u64(bytes);
    out.put_u64(messages);
    out.put_name(&s.name);
    options_block(out, &[]);
}

/// A topic header (`TopicHeader`).
pub(crate) fn topic(out: &mut Vec<u8>, engine: &Engine, stream: u32, t: &TopicMeta) {
    let (messages, bytes) = engine.topic_stats(stream, t.id);
    out.put_u32(t.id);
    out.put_u64(t.created_at);
    out.put_u32(count_u32(t.partitions.len()));
    // Over TCP, 0 is "never expire" (`IggyExpiry` decodes it so).
    out.put_u64(t.message_expiry);
    out.put_u8(t.options.compression.code());
    out.put_u64(to_iggy_limit(t.max_topic_size));
    out.put_u64(bytes);
    out.put_u64(messages);
    out.put_name(&t.name);
    let mut explicit = Vec::new();
    let mut derived = Vec::new();
    for (key, d) in [
        ("durability", t.options.durability),
        (
            "consumer_offset_durability",
            t.options.consumer_offset_durability,
        ),
    ] {
        let entry = (key, STRING_KIND, durability_name(d).as_bytes().to_vec());
        if d == Durability::Persisted {
            explicit.push(entry);
        } else {
            derived.push(entry);
        }
    }
    derived.push((
        "segment_size",
        UINT64_KIND,
        t.options.segment_size.to_le_bytes().to_vec(),
    ));
    options_block(out, &explicit);
    options_block(out, &derived);
}

pub fn stream_details(out: &mut Vec<u8>, engine: &Engine, s: &StreamMeta) {
    stream(out, engine, s);
    for t in s.topics.values() {
        topic(out, engine, s.id, t);
    }
}

pub fn topic_details(out: &mut Vec<u8>, engine: &Engine, stream: u32, t: &TopicMeta) {
    topic(out, engine, stream, t);
    for pm in t.partitions.values() {
        let key = PartitionKey {
            stream,
            topic: t.id,
            partition: pm.id,
        };
        let (segments, current, size, messages) = engine.partition(key).map_or((0, 0, 0, 0), |p| {
            let f = p.figures();
            (
                count_u32(f.segments),
                f.current_offset,
                f.size_bytes,
                f.messages,
            )
        });
        out.put_u32(pm.id);
        out.put_u64(pm.created_at);
        out.put_u32(segments);
        out.put_u64(current);
        out.put_u64(size);
        out.put_u64(messages);
    }
}

/// A group's header (Iggy's `ConsumerGroupResponse`, what 601 lists):
/// `members` is how many members it has.
pub fn group(out: &mut Vec<u8>, t: &TopicMeta, g: &GroupMeta, members: usize) {
    out.put_u32(g.id);
    out.put_u32(count_u32(t.partitions.len()));
    out.put_u32(count_u32(members));
    out.put_name(&g.name);
}

/// A group's details (600, and 602's answer): its header, then each member
/// in id order with every partition it holds.
pub fn group_details(out: &mut Vec<u8>, t: &TopicMeta, g: &GroupMeta, members: &[(u32, Vec<u32>)]) {
    group(out, t, g, members.len());
    for (id, partitions) in members {
        out.put_u32(*id);
        out.put_u32(count_u32(partitions.len()));
        for p in partitions {
            out.put_u32(*p);
        }
    }
}

/// A member's assignment (606): the group's generation and the partitions
/// it may poll.
pub fn assignment(out: &mut Vec<u8>, generation: u64, partitions: &[u32]) {
    out.put_u64(generation);
    out.put_u32(count_u32(partitions.len()));
    for p in partitions {
        out.put_u32(*p);
    }
}

pub fn send_confirmation(out: &mut Vec<u8>, stream: u32, topic: u32, partition: u32, base: u64) {
    out.put_u32(1);
    out.put_u32(stream);
    out.put_u32(topic);
    out.put_u32(partition);
    out.put_u64(base);
}

pub fn consumer_offset(out: &mut Vec<u8>, partition: u32, current: u64, stored: u64) {
    out.put_u32(partition);
    out.put_u64(current);
    out.put_u64(stored);
}

/// Iggy's wire size of a message's user headers (TLV, key then value).
fn headers_len(m: &Message) -> usize {
    header_kinds::wire_len(m.headers.as_ref())
}

/// How many of `messages` (at least one) fit one Iggy batch: they share the
/// first one's append timestamp, and every origin timestamp is at most
/// `u32::MAX` microseconds above the run's earliest, at or after it.
fn batch_run(messages: &[Message]) -> usize {
    let Some(first) = messages.first() else {
        return 0;
    };
    let (mut low, mut high) = (first.origin(), first.origin());
    let mut run = 0;
    for m in messages {
        let origin = m.origin();
        let (l, h) = (low.min(origin), high.max(origin));
        if m.timestamp != first.timestamp || h - l > u64::from(u32::MAX) {
            break;
        }
        (low, high, run) = (l, h, run + 1);
    }
    run.max(1)
}

/// The poll answer as a frame: `reserve` zeroed bytes (for the frame
/// header, which the caller writes), the poll header, then one Iggy batch
/// per `batch_run` (Iggy carries one append timestamp per batch, and origin
/// timestamps as deltas from the batch's). Payloads are not copied: the
/// frame writes them from `polled.messages` (`ReplyFrame`); only headers
/// are encoded here.
pub fn polled(polled: Polled, reserve: usize) -> ReplyFrame {
    let headers: usize = polled.messages.iter().map(headers_len).sum();
    let mut own = Vec::with_capacity(
        reserve + 16 + BATCH_HEADER_SIZE + polled.messages.len() * MESSAGE_HEADER_SIZE + headers,
    );
    own.resize(reserve, 0);
    own.put_u32(polled.partition_id);
    own.put_u64(polled.current_offset);
    own.put_u32(count_u32(polled.messages.len()));
    let mut cuts = Vec::with_capacity(polled.messages.len());
    let mut rest = polled.messages.as_slice();
    while !rest.is_empty() {
        let run = batch_run(rest);
        let (batch, tail) = rest.split_at(run.min(rest.len()));
        encode_batch(&mut own, &mut cuts, u64::from(polled.partition_id), batch);
        rest = tail;
    }
    ReplyFrame::with_payloads(own, cuts, polled.messages)
}

/// One batch: its header and each message's header and user headers go
/// into `own`, each payload's position into `cuts`.
fn encode_batch(own: &mut Vec<u8>, cuts: &mut Vec<usize>, partition: u64, batch: &[Message]) {
    let Some(first) = batch.first() else {
        return;
    };
    let origin = batch.iter().map(Message::origin).min().unwrap_or(0);
    let header_at = own.len();
    own.resize(header_at + BATCH_HEADER_SIZE, 0);
    let mut batch_length = BATCH_HEADER_SIZE;
    let mut checksums = Vec::with_capacity(batch.len());
    for m in batch {
        let frame_at = own.len();
        own.put_u64(0);
        own.put_u128(m.id);
        own.put_u32(u32::try_from(m.offset.saturating_sub(first.offset)).unwrap_or(u32::MAX));
        own.put_u32(u32::try_from(m.origin().saturating_sub(origin)).unwrap_or(u32::MAX));
        own.put_u32(count_u32(headers_len(m)));
        own.put_u32(count_u32(m.payload.len()));
        own.put_u64(0);
        let cut = own.len();
        cuts.push(cut);
        for (k, v) in m.headers.iter().flatten() {
            tlv(own, k.kind, &k.value, v.kind, &v.value);
        }
        // Iggy's message checksum: everything after the checksum field, the
        // payload (written later, from the message) in between.
        let mut hash = XxHash3_64::new();
        hash.write(own.get(frame_at + 8..cut).unwrap_or(&[]));
        hash.write(&m.payload);
        hash.write(own.get(cut..).unwrap_or(&[]));
        let checksum = hash.finish();
        if let Some(slot) = own.get_mut(frame_at..frame_at + 8) {
            slot.copy_from_slice(&checksum.to_le_bytes());
        }
        checksums.push(checksum);
        batch_length += own.len() - frame_at + m.payload.len();
    }
    let fields = [
        partition,
        first.offset,
        first.timestamp,
        origin,
        batch_length as u64,
    ];
    let count = count_u32(batch.len());
    let mut hash = XxHash3_64::new();
    for f in fields {
        hash.write(&f.to_le_bytes());
    }
    hash.write(&count.to_le_bytes());
    for c in &checksums {
        hash.write(&c.to_le_bytes());
    }
    let mut header = Vec::with_capacity(56);
    for f in fields {
        header.put_u64(f);
    }
    header.put_u64(hash.finish());
    header.put_u32(count);
    if let Some(slot) = own.get_mut(header_at..header_at + header.len()) {
        slot.copy_from_slice(&header);
    }
}

/// Iggy's wire value of "no user" in a client entry.
const NO_USER: u32 = u32::MAX;
const TRANSPORT_TCP: u8 = 1;

/// A client's header (what 22 lists): `groups` is how many consumer groups
/// it is a member of.
pub(crate) fn client(
    out: &mut Vec<u8>,
    id: u32,
    entry: &crate::iggy::clients::ClientEntry,
    groups: usize,
) {
    out.put_u32(id);
    out.put_u32(entry.user_id.unwrap_or(NO_USER));
    out.put_u8(TRANSPORT_TCP);
    out.put_u32(count_u32(entry.address.len()));
    out.extend_from_slice(entry.address.as_bytes());
    out.put_u32(count_u32(groups));
}

/// A client's details (20, 21): its header, then each group it is a member
/// of as `[stream][topic][group]`.
pub(crate) fn client_details(
    out: &mut Vec<u8>,
    id: u32,
    entry: &crate::iggy::clients::ClientEntry,
    groups: &[crate::membership::GroupKey],
) {
    client(out, id, entry, groups.len());
    for g in groups {
        out.put_u32(g.stream);
        out.put_u32(g.topic);
        out.put_u32(g.group);
    }
}

/// The login answer (`LoginRegisterResponse`).
pub fn login(out: &mut Vec<u8>, user_id: u32, session: u64) {
    out.put_u32(user_id);
    out.put_u64(session);
    out.put_u32(protocol_version());
    out.put_name(crate::iggy::stats::IGGY_SERVER_VERSION);
}

/// Iggy's packed protocol version of 0.11.0 (10 bits per component).
pub(crate) fn protocol_version() -> u32 {
    11 << 10
}

/// A single-node cluster, as a single Iggy node describes itself.
pub fn cluster_metadata(out: &mut Vec<u8>, c: &crate::iggy::stats::ClusterMetadata) {
    out.put_long_str(&c.name);
    out.put_u32(count_u32(c.nodes.len()));
    for n in &c.nodes {
        out.put_long_str(&n.name);
        out.put_long_str(&n.ip);
        out.put_u16(n.endpoints.tcp);
        out.put_u16(n.endpoints.quic);
        out.put_u16(n.endpoints.http);
        out.put_u16(n.endpoints.websocket);
        out.put_u8(0); // leader
        out.put_u8(0); // healthy
    }
}

pub fn stats(out: &mut Vec<u8>, s: &Stats) {
    out.put_u32(s.process_id);
    out.put_f32(s.cpu_usage);
    out.put_f32(s.total_cpu_usage);
    out.put_u64(s.memory_usage);
    out.put_u64(s.total_memory);
    out.put_u64(s.available_memory);
    out.put_u64(s.run_time);
    out.put_u64(s.start_time);
    out.put_u64(s.read_bytes);
    out.put_u64(s.written_bytes);
    out.put_u64(s.messages_size_bytes);
    out.put_u32(s.streams_count);
    out.put_u32(s.topics_count);
    out.put_u32(s.partitions_count);
    out.put_u32(s.segments_count);
    out.put_u64(s.messages_count);
    out.put_u32(s.clients_count);
    out.put_u32(s.consumer_groups_count);
    out.put_long_str(&s.hostname);
    out.put_long_str(&s.os_name);
    out.put_long_str(&s.os_version);
    out.put_long_str(&s.kernel_version);
    out.put_long_str(&s.iggy_server_version);
    out.put_u32(s.iggy_server_semver.unwrap_or(0));
    out.put_u32(0); // no cache metrics
    out.put_u32(s.threads_count);
    out.put_u64(s.free_disk_space);
    out.put_u64(s.total_disk_space);
}

/// Iggy's `UserResponse`: id, creation time, status, name, an empty options
/// block.
pub(crate) fn user(out: &mut Vec<u8>, u: &crate::iggy::users::UserInfo) {
    out.put_u32(u.id);
    out.put_u64(u.created_at);
    out.put_u8(u.status_code());
    out.put_name(&u.username);
    out.put_u32(0);
}

/// Iggy's `GetUserResponse`: the user, then its permissions framed as
/// `1, u32 length, block`, or four zero bytes for none.
pub(crate) fn user_details(out: &mut Vec<u8>, u: &crate::iggy::users::UserInfo) {
    user(out, u);
    match u.permissions.as_ref().and_then(Option::as_ref) {
        None => out.extend_from_slice(&[0, 0, 0, 0]),
        Some(p) => {
            let mut block = Vec::new();
            permissions(&mut block, p);
            out.put_u8(1);
            out.put_u32(count_u32(block.len()));
            out.extend_from_slice(&block);
        }
    }
}

/// Iggy's `Permissions` block: ten global flags, then each stream (and
/// each of its topics) announced by a 1 and the list ended by a 0.
fn permissions(out: &mut Vec<u8>, p: &crate::iggy::permissions::Permissions) {
    let g = &p.global;
    for f in [
        g.manage_servers,
        g.read_servers,
        g.manage_users,
        g.read_users,
        g.manage_streams,
        g.read_streams,
        g.manage_topics,
        g.read_topics,
        g.poll_messages,
        g.send_messages,
    ] {
        out.put_u8(u8::from(f));
    }
    let streams: Vec<_> = p.streams.iter().flatten().collect();
    out.put_u8(u8::from(!streams.is_empty()));
    for (i, (id, s)) in streams.iter().enumerate() {
        out.put_u32(**id);
        for f in [
            s.manage_stream,
            s.read_stream,
            s.manage_topics,
            s.read_topics,
            s.poll_messages,
            s.send_messages,
        ] {
            out.put_u8(u8::from(f));
        }
        let topics: Vec<_> = s.topics.iter().flatten().collect();
        out.put_u8(u8::from(!topics.is_empty()));
        for (j, (tid, t)) in topics.iter().enumerate() {
            out.put_u32(**tid);
            for f in [
                t.manage_topic,
                t.read_topic,
                t.poll_messages,
                t.send_messages,
            ] {
                out.put_u8(u8::from(f));
            }
            out.put_u8(u8::from(j + 1 < topics.len()));
        }
        out.put_u8(u8::from(i + 1 < streams.len()));
    }
}

/// Iggy's personal access token list: per token its name and expiry
/// (microseconds; 0 for never).
pub(crate) fn tokens(out: &mut Vec<u8>, tokens: &[(String, Option<u64>)]) {
    for (name, expiry_at) in tokens {
        out.put_name(name);
        out.put_u64(expiry_at.unwrap_or(0));
    }
}

/// Iggy's raw token answer: its length (one byte) and the token.
pub(crate) fn raw_token(out: &mut Vec<u8>, token: &str) {
    out.put_name(token);
}
