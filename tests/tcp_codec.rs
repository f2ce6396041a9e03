//! The TCP codec against the official SDK's own wire types
//! (`iggy_binary_protocol` 0.11.0): every request the SDK encodes decodes in
//! sluice to the same values, every response sluice encodes decodes in the
//! SDK to the same values (polled batches pass the SDK's checksum
//! verification), and arbitrary bytes never panic the decoder or the frame
//! parser.
//!
//! Knobs: `SLUICE_PROPTEST_CASES` (default 64 per property; CI stays fast),
//! for example `SLUICE_PROPTEST_CASES=5000 cargo test --release -p sluice-integration -- tcp_codec::`.

use std::collections::BTreeMap;

use bytes::BytesMut;
use iggy_binary_protocol::batch::{BatchIntegrity, decode_batch_slice_with};
use iggy_binary_protocol::requests::consumer_groups::{
    CreateConsumerGroupRequest, DeleteConsumerGroupRequest, GetConsumerGroupRequest,
    GetConsumerGroupsRequest,
};
use iggy_binary_protocol::requests::consumer_offsets::{
    DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, StoreConsumerOffsetRequest,
};
use iggy_binary_protocol::requests::messages::{
    PollMessagesRequest, RawMessage, SendMessagesEncoder,
};
use iggy_binary_protocol::requests::partitions::{
    CreatePartitionsRequest, DeletePartitionsRequest,
};
use iggy_binary_protocol::requests::streams::{
    CreateStreamRequest, DeleteStreamRequest, GetStreamRequest, PurgeStreamRequest,
    UpdateStreamRequest,
};
use iggy_binary_protocol::requests::topics::{
    CreateTopicRequest, DeleteTopicRequest, GetTopicRequest, GetTopicsRequest, PurgeTopicRequest,
    UpdateTopicRequest,
};
use iggy_binary_protocol::requests::users::LoginRegisterRequest;
use iggy_binary_protocol::responses::consumer_groups::{
    ConsumerGroupDetailsResponse, GetConsumerGroupsResponse,
};
use iggy_binary_protocol::responses::consumer_offsets::ConsumerOffsetResponse;
use iggy_binary_protocol::responses::messages::{PollMessagesResponse, SendMessagesResponse};
use iggy_binary_protocol::responses::streams::{GetStreamResponse, GetStreamsResponse};
use iggy_binary_protocol::responses::system::{ClusterMetadataResponse, StatsResponse};
use iggy_binary_protocol::responses::topics::GetTopicResponse;
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    AckLevel, ClientVersionInfo, WireConsumer, WireDecode, WireEncode, WireIdentifier, WireName,
    WireOptions, WirePartitioning, WirePollingStrategy, encode_user_headers,
};
use proptest::prelude::*;
use sluice_server::engine::Partitioning;
use sluice_server::identifier::Identifier;
use sluice_server::metadata::{Durability, TopicOptions};
use sluice_server::partition::log::{HeaderKey, HeaderValue, Message};
use sluice_server::partition::{Polled, PollingStrategy};
use sluice_server::tcp::codec::{self, ConsumerId, Request, code};
use sluice_server::tcp::encode;
use sluice_server::tcp::frame::{HEADER_SIZE, RequestHeader};
use sluice_testkit::props;

fn config() -> ProptestConfig {
    props::config(props::cases(64))
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9._-]{1,40}"
}

/// An identifier in both encodings: the SDK's and sluice's.
/// A header key of a kind Iggy has, of a size that kind takes.
fn header_key() -> impl Strategy<Value = HeaderKey> {
    prop_oneof![
        "[a-z]{1,20}".prop_map(|k| HeaderKey::string(&k)),
        proptest::collection::vec(any::<u8>(), 1..20)
            .prop_map(|value| HeaderKey { kind: 1, value }),
        any::<u32>().prop_map(|n| HeaderKey {
            kind: 11,
            value: n.to_le_bytes().to_vec()
        }),
        any::<i64>().prop_map(|n| HeaderKey {
            kind: 7,
            value: n.to_le_bytes().to_vec()
        }),
        any::<bool>().prop_map(|b| HeaderKey {
            kind: 3,
            value: vec![u8::from(b)]
        }),
    ]
}

fn identifier() -> impl Strategy<Value = (WireIdentifier, Identifier)> {
    prop_oneof![
        any::<u32>().prop_map(|n| (WireIdentifier::numeric(n), Identifier::Numeric(n))),
        name().prop_map(|s| (
            WireIdentifier::named(s.clone()).unwrap(),
            Identifier::Name(s)
        )),
    ]
}

fn consumer() -> impl Strategy<Value = (WireConsumer, ConsumerId)> {
    prop_oneof![
        any::<u32>().prop_map(|n| (
            WireConsumer {
                kind: 1,
                id: WireIdentifier::numeric(n)
            },
            ConsumerId::Consumer(n)
        )),
        identifier().prop_map(|(w, i)| (WireConsumer { kind: 2, id: w }, ConsumerId::Group(i))),
    ]
}

fn strategy() -> impl Strategy<Value = (WirePollingStrategy, PollingStrategy)> {
    (1u8..=5, any::<u64>()).prop_map(|(kind, value)| {
        let ours = match kind {
            1 => PollingStrategy::Offset(value),
            2 => PollingStrategy::Timestamp(value),
            3 => PollingStrategy::First,
            4 => PollingStrategy::Last,
            _ => PollingStrategy::Next,
        };
        let value = if kind >= 3 { 0 } else { value };
        (WirePollingStrategy { kind, value }, ours)
    })
}

fn decode(code: u32, bytes: &[u8]) -> Request {
    codec::decode(code, bytes).unwrap_or_else(|e| panic!("code {code}: {e}"))
}

/// A string option block as the SDK builds one (TLV, string kind).
fn string_options(pairs: &[(&str, &str)]) -> WireOptions {
    let entries: Vec<(u8, &[u8], u8, &[u8])> = pairs
        .iter()
        .map(|(k, v)| (2u8, k.as_bytes(), 2u8, v.as_bytes()))
        .collect();
    let mut buf = BytesMut::new();
    encode_user_headers(&entries, &mut buf);
    WireOptions::from_slice(&buf).unwrap()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn given_stream_and_topic_requests_from_the_sdk_when_decoded_then_every_field_matches(
        (ws, s) in identifier(), (wt, t) in identifier(), n in name(), count in any::<u32>(),
    ) {
        let wn = || WireName::new(n.clone()).unwrap();
        prop_assert_eq!(decode(code::CREATE_STREAM, &CreateStreamRequest { name: wn(), options: WireOptions::empty() }.to_bytes()),
            Request::CreateStream { name: n.clone(), options: BTreeMap::new() });
        prop_assert_eq!(decode(code::GET_STREAM, &GetStreamRequest { stream_id: ws.clone() }.to_bytes()), Request::GetStream(s.clone()));
        prop_assert_eq!(decode(code::DELETE_STREAM, &DeleteStreamRequest { stream_id: ws.clone() }.to_bytes()), Request::DeleteStream(s.clone()));
        prop_assert_eq!(decode(code::PURGE_STREAM, &PurgeStreamRequest { stream_id: ws.clone() }.to_bytes()), Request::PurgeStream(s.clone()));
        prop_assert_eq!(decode(code::UPDATE_STREAM, &UpdateStreamRequest { stream_id: ws.clone(), name: wn(), options: WireOptions::empty() }.to_bytes()),
            Request::UpdateStream { stream: s.clone(), name: n.clone(), options: BTreeMap::new() });
        let options = string_options(&[("durability", "persisted"), ("consumer_offset_durability", "replicated")]);
        let decoded = decode(code::CREATE_TOPIC, &CreateTopicRequest { stream_id: ws.clone(), partitions_count: count, name: wn(), options }.to_bytes());
        let Request::CreateTopic { stream, partitions_count, name: got, options } = decoded else { panic!("not a create topic") };
        prop_assert_eq!((stream, partitions_count, got), (s.clone(), count, n.clone()));
        prop_assert_eq!(options.options.get("durability").map(String::as_str), Some("persisted"));
        prop_assert_eq!(decode(code::UPDATE_TOPIC, &UpdateTopicRequest { stream_id: ws.clone(), topic_id: wt.clone(), name: wn(), options: WireOptions::empty() }.to_bytes()),
            Request::UpdateTopic { stream: s.clone(), topic: t.clone(), name: n.clone(), options: Default::default() });
        prop_assert_eq!(decode(code::GET_TOPIC, &GetTopicRequest { stream_id: ws.clone(), topic_id: wt.clone() }.to_bytes()), Request::GetTopic(s.clone(), t.clone()));
        prop_assert_eq!(decode(code::GET_TOPICS, &GetTopicsRequest { stream_id: ws.clone() }.to_bytes()), Request::GetTopics(s.clone()));
        prop_assert_eq!(decode(code::DELETE_TOPIC, &DeleteTopicRequest { stream_id: ws.clone(), topic_id: wt.clone() }.to_bytes()), Request::DeleteTopic(s.clone(), t.clone()));
        prop_assert_eq!(decode(code::PURGE_TOPIC, &PurgeTopicRequest { stream_id: ws.clone(), topic_id: wt.clone() }.to_bytes()), Request::PurgeTopic(s.clone(), t.clone()));
        prop_assert_eq!(decode(code::CREATE_PARTITIONS, &CreatePartitionsRequest { stream_id: ws.clone(), topic_id: wt.clone(), partitions_count: count }.to_bytes()),
            Request::CreatePartitions { stream: s.clone(), topic: t.clone(), count });
        prop_assert_eq!(decode(code::DELETE_PARTITIONS, &DeletePartitionsRequest { stream_id: ws.clone(), topic_id: wt.clone(), partitions_count: count }.to_bytes()),
            Request::DeletePartitions { stream: s.clone(), topic: t.clone(), count });
    }

    #[test]
    fn given_group_offset_and_poll_requests_from_the_sdk_when_decoded_then_every_field_matches(
        (ws, s) in identifier(), (wt, t) in identifier(), (wg, g) in identifier(),
        (wc, c) in consumer(), partition in proptest::option::of(any::<u32>()),
        (wst, st) in strategy(), count in any::<u32>(), auto_commit in any::<bool>(),
        offset in any::<u64>(), n in name(),
    ) {
        prop_assert_eq!(decode(code::CREATE_CONSUMER_GROUP, &CreateConsumerGroupRequest { stream_id: ws.clone(), topic_id: wt.clone(), name: WireName::new(n.clone()).unwrap() }.to_bytes()),
            Request::CreateConsumerGroup { stream: s.clone(), topic: t.clone(), name: n.clone() });
        prop_assert_eq!(decode(code::GET_CONSUMER_GROUP, &GetConsumerGroupRequest { stream_id: ws.clone(), topic_id: wt.clone(), group_id: wg.clone() }.to_bytes()),
            Request::GetConsumerGroup(s.clone(), t.clone(), g.clone()));
        prop_assert_eq!(decode(code::DELETE_CONSUMER_GROUP, &DeleteConsumerGroupRequest { stream_id: ws.clone(), topic_id: wt.clone(), group_id: wg.clone() }.to_bytes()),
            Request::DeleteConsumerGroup(s.clone(), t.clone(), g.clone()));
        prop_assert_eq!(decode(code::GET_CONSUMER_GROUPS, &GetConsumerGroupsRequest { stream_id: ws.clone(), topic_id: wt.clone() }.to_bytes()),
            Request::GetConsumerGroups(s.clone(), t.clone()));
        prop_assert_eq!(decode(code::POLL_MESSAGES, &PollMessagesRequest { consumer: wc.clone(), stream_id: ws.clone(), topic_id: wt.clone(), partition_id: partition, strategy: wst, count, auto_commit }.to_bytes()),
            Request::PollMessages { consumer: c.clone(), stream: s.clone(), topic: t.clone(), partition, strategy: st, count, auto_commit });
        prop_assert_eq!(decode(code::GET_CONSUMER_OFFSET, &GetConsumerOffsetRequest { consumer: wc.clone(), stream_id: ws.clone(), topic_id: wt.clone(), partition_id: partition }.to_bytes()),
            Request::GetConsumerOffset { consumer: c.clone(), stream: s.clone(), topic: t.clone(), partition });
        prop_assert_eq!(decode(code::STORE_CONSUMER_OFFSET, &StoreConsumerOffsetRequest { consumer: wc.clone(), stream_id: ws.clone(), topic_id: wt.clone(), partition_id: partition, offset, ack: AckLevel::Quorum }.to_bytes()),
            Request::StoreConsumerOffset { consumer: c.clone(), stream: s.clone(), topic: t.clone(), partition, offset });
        prop_assert_eq!(decode(code::DELETE_CONSUMER_OFFSET, &DeleteConsumerOffsetRequest { consumer: wc, stream_id: ws, topic_id: wt, partition_id: partition, ack: AckLevel::NoAck }.to_bytes()),
            Request::DeleteConsumerOffset { consumer: c, stream: s, topic: t, partition });
    }

    #[test]
    fn given_a_send_batch_from_the_sdk_when_decoded_then_ids_origins_payloads_and_headers_match(
        (ws, s) in identifier(), (wt, t) in identifier(),
        messages in proptest::collection::vec((any::<u128>(), proptest::collection::vec(any::<u8>(), 1..300), proptest::option::of(header_key()), proptest::collection::vec(any::<u8>(), 1..40), 0u64..1_000_000), 1..20),
        base_origin in 1_600_000_000_000_000u64..1_800_000_000_000_000,
        partition in any::<u32>(),
    ) {
        // Keys of every kind (SDK 0.11 allows them), origins as the SDK sends them.
        let headers: Vec<Option<Vec<u8>>> = messages.iter().map(|(_, _, k, v, _)| k.as_ref().map(|k| {
            let mut buf = BytesMut::new();
            encode_user_headers(&[(k.kind, k.value.as_slice(), 1, v.as_slice())], &mut buf);
            buf.to_vec()
        })).collect();
        let raw: Vec<RawMessage<'_>> = messages.iter().zip(&headers).map(|((id, payload, _, _, origin), h)| RawMessage {
            id: *id, origin_timestamp: base_origin + origin, headers: h.as_deref(), payload,
        }).collect();
        let wp = WirePartitioning::PartitionId(partition);
        let mut buf = BytesMut::new();
        SendMessagesEncoder::encode(&mut buf, &ws, &wt, &wp, &raw).unwrap();
        let Request::SendMessages { stream, topic, partitioning, messages: got } = decode(code::SEND_MESSAGES, &buf) else { panic!("not a send") };
        prop_assert_eq!((stream, topic, partitioning), (s, t, Partitioning::PartitionId(partition)));
        prop_assert_eq!(got.len(), messages.len());
        for (g, (id, payload, k, v, origin)) in got.iter().zip(&messages) {
            prop_assert_eq!(g.id, *id);
            prop_assert_eq!(g.payload(), payload);
            prop_assert_eq!(g.origin_timestamp, Some(base_origin + origin));
            let expected = k.as_ref().map(|k| BTreeMap::from([(k.clone(), HeaderValue { kind: 1, value: v.clone() })]));
            prop_assert_eq!(&g.headers, &expected);
        }
        // A flipped payload byte fails the message checksum; nothing is decoded.
        let mut corrupt = buf.to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0x40;
        prop_assert!(codec::decode(code::SEND_MESSAGES, &corrupt).is_err());
    }

    #[test]
    fn given_a_login_from_the_sdk_when_decoded_then_the_credentials_match(user in "[a-z]{3,50}", password in "[ -~]{3,100}") {
        let request = LoginRegisterRequest {
            version_info: ClientVersionInfo { protocol_version: 1, sdk_name: WireName::new("rust-sdk").unwrap(), sdk_version: WireName::new("0.11.0").unwrap() },
            username: WireName::new(user.clone()).unwrap(),
            password: password.clone().into(),
            client_context: Some("ctx".into()),
        };
        prop_assert_eq!(decode(code::LOGIN_REGISTER, &request.to_bytes()), Request::LoginRegister { username: user, password });
    }

    #[test]
    fn given_arbitrary_bytes_when_decoded_then_nothing_panics(
        code in prop_oneof![Just(code::SEND_MESSAGES), Just(code::POLL_MESSAGES), Just(code::CREATE_TOPIC), Just(code::LOGIN_REGISTER), Just(code::STORE_CONSUMER_OFFSET), any::<u32>()],
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let _ = codec::decode(code, &bytes);
        let mut header = [0u8; HEADER_SIZE];
        for (h, b) in header.iter_mut().zip(bytes.iter().cycle()) {
            *h = *b;
        }
        if let Ok(h) = RequestHeader::parse(&header, 1 << 20) {
            let _ = codec::command_code(&h);
        }
    }

    #[test]
    fn given_polled_messages_when_encoded_then_the_sdk_decodes_them_and_verifies_every_checksum(
        batches in proptest::collection::vec((1u64..1_000_000, proptest::collection::vec((any::<u128>(), proptest::collection::vec(any::<u8>(), 1..200), proptest::option::of(header_key()), proptest::option::of(prop_oneof![0u64..10_000, Just(u64::from(u32::MAX)), Just(u64::from(u32::MAX) + 1), any::<u64>()])), 1..8)), 0..5),
        partition in any::<u32>(),
    ) {
        let mut messages = Vec::new();
        let mut offset = 17u64;
        let mut ts = 0u64;
        for (gap, batch) in &batches {
            ts += gap;
            for (id, payload, key, origin) in batch {
                // Origins far apart (more than a u32 of microseconds) split Iggy batches.
                let headers = key.clone().map(|k| BTreeMap::from([(k, HeaderValue { kind: 2, value: b"v".to_vec() })]));
                messages.push(Message { offset, timestamp: ts, origin_timestamp: *origin, id: *id, checksum: 0, headers, payload: payload.clone().into() });
                offset += 1;
            }
        }
        let polled = Polled { partition_id: partition, current_offset: offset, messages: messages.clone() };
        let out = encode::polled(polled, 0).to_vec();
        let response = PollMessagesResponse::decode(&out).unwrap();
        prop_assert_eq!((response.header.partition_id, response.header.current_offset, response.header.messages_count as usize), (partition, offset, messages.len()));
        let views: Vec<_> = response.messages.map(|m| m.unwrap()).collect();
        prop_assert_eq!(views.len(), messages.len());
        for (v, m) in views.iter().zip(&messages) {
            prop_assert_eq!((v.id, v.offset, v.timestamp, v.payload), (m.id, m.offset, m.timestamp, &m.payload[..]));
            prop_assert_eq!(v.origin_timestamp, m.origin());
            prop_assert_eq!(v.user_headers.is_empty(), m.headers.is_none());
        }
        // Every batch passes the SDK's full checksum verification.
        let mut at = 16;
        while at < out.len() {
            let batch = decode_batch_slice_with(&out[at..], BatchIntegrity::Verify).unwrap();
            at += batch.header.total_size();
        }
    }
}

#[test]
fn given_engine_metadata_when_encoded_then_the_sdk_decodes_streams_topics_groups_and_offsets() {
    // Given an engine with a stream, a persisted topic of 3 partitions, messages and a group.
    let sim = sluice_testkit::engine::new_sim();
    let mut e = sluice_testkit::engine::sim_engine(&sim);
    let s = e.create_stream(None, "orders").unwrap();
    let options = TopicOptions {
        durability: Durability::Persisted,
        ..TopicOptions::default()
    };
    let sid = Identifier::Name("orders".into());
    let t = e
        .create_topic(&sid, None, "events", 3, options, 0, 0, 1)
        .unwrap();
    let tid = Identifier::Name("events".into());
    let first = t.partitions.keys().next().copied().unwrap();
    e.send(
        &sid,
        &tid,
        &Partitioning::PartitionId(first),
        vec![sluice_server::partition::log::NewMessage::new(
            b"x".to_vec(),
        )],
    )
    .unwrap();
    let g = e.create_group(&sid, &tid, None, "billing").unwrap();
    let stream = e.stream(&sid).unwrap().clone();
    let topic = e.topic(&sid, &tid).unwrap().clone();

    // When each response is encoded, then the SDK decodes the same values.
    let mut out = Vec::new();
    encode::stream_details(&mut out, &e, &stream);
    let decoded = GetStreamResponse::decode_from(&out).unwrap();
    assert_eq!(decoded.stream.id, s.id);
    assert_eq!(decoded.stream.name.as_str(), "orders");
    assert_eq!(
        (decoded.stream.topics_count, decoded.stream.messages_count),
        (1, 1)
    );
    assert_eq!(decoded.topics.len(), 1);
    assert_eq!(decoded.topics[0].name.as_str(), "events");

    let mut out = Vec::new();
    encode::stream(&mut out, &e, &stream);
    encode::stream(&mut out, &e, &stream);
    assert_eq!(
        GetStreamsResponse::decode_from(&out).unwrap().streams.len(),
        2
    );

    let mut out = Vec::new();
    encode::topic_details(&mut out, &e, s.id, &topic);
    let decoded = GetTopicResponse::decode_from(&out).unwrap();
    assert_eq!(decoded.topic.partitions_count, 3);
    assert_eq!(decoded.topic.compression_algorithm, 1);
    let ids: Vec<u32> = decoded.partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, topic.partitions.keys().copied().collect::<Vec<_>>());
    assert_eq!(decoded.partitions[0].messages_count, 1);
    let explicit: Vec<String> = decoded
        .topic
        .options
        .iter()
        .map(|o| String::from_utf8(o.value.to_vec()).unwrap())
        .collect();
    assert_eq!(explicit, ["persisted"]);

    let mut out = Vec::new();
    encode::group_details(&mut out, &topic, &g, &[(0, vec![0, 2]), (1, vec![1])]);
    let decoded = ConsumerGroupDetailsResponse::decode_from(&out).unwrap();
    assert_eq!(
        (
            decoded.group.id,
            decoded.group.name.as_str(),
            decoded.group.partitions_count,
            decoded.group.members_count
        ),
        (g.id, "billing", 3, 2)
    );
    let members: Vec<(u32, Vec<u32>)> = decoded
        .members
        .iter()
        .map(|m| (m.id, m.partitions.clone()))
        .collect();
    assert_eq!(members, [(0, vec![0, 2]), (1, vec![1])]);
    let mut out = Vec::new();
    encode::group(&mut out, &topic, &g, 0);
    encode::group(&mut out, &topic, &g, 2);
    assert_eq!(
        GetConsumerGroupsResponse::decode_from(&out)
            .unwrap()
            .groups
            .len(),
        2
    );

    let mut out = Vec::new();
    encode::consumer_offset(&mut out, 2, 9, 4);
    let decoded = ConsumerOffsetResponse::decode_from(&out).unwrap();
    assert_eq!(
        (
            decoded.partition_id,
            decoded.current_offset,
            decoded.stored_offset
        ),
        (2, 9, 4)
    );

    let mut out = Vec::new();
    encode::send_confirmation(&mut out, 1, 2, 3, 40);
    let decoded = SendMessagesResponse::decode_from(&out).unwrap();
    assert_eq!(decoded.confirmations.len(), 1);
    assert_eq!(
        (
            decoded.confirmations[0].partition_id,
            decoded.confirmations[0].base_offset
        ),
        (3, 40)
    );
}

#[test]
fn given_system_answers_when_encoded_then_the_sdk_decodes_login_cluster_and_stats() {
    let mut out = Vec::new();
    encode::login(&mut out, 0, 77);
    let decoded = LoginRegisterResponse::decode_from(&out).unwrap();
    assert_eq!((decoded.user_id, decoded.session), (0, 77));
    assert_eq!(
        decoded.server_protocol_version,
        iggy_binary_protocol::IGGY_PROTOCOL_VERSION & !0x3ff
    );

    let listeners = sluice_server::iggy::stats::Listeners {
        http: Some("127.0.0.1:3000".parse().unwrap()),
        tcp: Some("127.0.0.1:8090".parse().unwrap()),
    };
    let mut out = Vec::new();
    encode::cluster_metadata(&mut out, &listeners.cluster());
    let decoded = ClusterMetadataResponse::decode_from(&out).unwrap();
    assert_eq!(decoded.nodes.len(), 1);
    assert_eq!(
        (
            decoded.nodes[0].tcp_port,
            decoded.nodes[0].http_port,
            decoded.nodes[0].role,
            decoded.nodes[0].status
        ),
        (8090, 3000, 0, 0)
    );

    let stats = sluice_server::iggy::stats::Stats {
        process_id: 42,
        streams_count: 3,
        messages_count: 1234,
        hostname: "host".into(),
        iggy_server_version: "0.11.0".into(),
        iggy_server_semver: Some(11 << 10),
        threads_count: 5,
        ..Default::default()
    };
    let mut out = Vec::new();
    encode::stats(&mut out, &stats);
    let decoded = StatsResponse::decode_from(&out).unwrap();
    assert_eq!(
        (
            decoded.process_id,
            decoded.streams_count,
            decoded.messages_count,
            decoded.threads_count
        ),
        (42, 3, 1234, 5)
    );
    assert_eq!(decoded.hostname, "host");
}
