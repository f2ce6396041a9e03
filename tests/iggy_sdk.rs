//! Compatibility with the official Apache Iggy Rust SDK (`iggy = "=0.11.0"`):
//! an unmodified Iggy client drives sluice end to end, through its
//! `HttpClient` and its `TcpClient`, the same steps for both, with Iggy's ids
//! (the first stream, topic, partition and group are 0, the root user is 0).

use std::collections::BTreeMap;
use std::str::FromStr;

use iggy::prelude::*;
use sluice_testkit::http::start_server;

/// Iggy 0.11's first partition.
const P0: u32 = 0;

fn message(payload: &str) -> IggyMessage {
    IggyMessage::builder()
        .payload(payload.to_string().into())
        .build()
        .unwrap()
}

fn offsets(polled: &PolledMessages) -> Vec<u64> {
    polled.messages.iter().map(|m| m.header.offset).collect()
}

fn payloads(polled: &PolledMessages) -> Vec<String> {
    polled
        .messages
        .iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).unwrap())
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    Tcp,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_official_sdk_over_http_when_it_drives_sluice_then_every_call_works() {
    scenario(Transport::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_official_sdk_over_tcp_when_it_drives_sluice_then_every_call_works() {
    scenario(Transport::Tcp).await;
}

async fn scenario(transport: Transport) {
    // Given a running sluice and the SDK's client for the transport, logged in as root.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    let client: Box<dyn Client> = match transport {
        Transport::Http => {
            Box::new(HttpClient::new(&format!("http://{}", server.local_addr)).unwrap())
        }
        Transport::Tcp => Box::new(sluice_testkit::tcp::sdk_client(&server).await),
    };
    let client = client.as_ref();
    client.ping().await.unwrap();
    let identity = client.login_user("iggy", "iggy").await.unwrap();
    assert_eq!(identity.user_id, 0);
    // HTTP hands out a bearer token; over TCP the connection is the session.
    assert_eq!(
        identity.access_token.is_some(),
        transport == Transport::Http
    );
    http.login_user("iggy", "iggy").await.unwrap();
    if transport == Transport::Tcp {
        // The connection is one of the server's clients, as Iggy lists them
        // (`iggy me`, `iggy client list`); a second one is not logged in.
        let other = sluice_testkit::tcp::sdk_client(&server).await;
        let me = client.get_me().await.unwrap();
        assert_eq!((me.user_id, me.transport.as_str()), (Some(0), "TCP"));
        let clients = client.get_clients().await.unwrap();
        let users: Vec<Option<u32>> = clients.iter().map(|c| c.user_id).collect();
        assert_eq!(users, [Some(0), None], "{clients:?}");
        let listed = client.get_client(me.client_id).await.unwrap().unwrap();
        assert_eq!(listed.address, me.address);
        assert!(client.get_client(u32::MAX - 7).await.unwrap().is_none());
        // Iggy's HTTP API lists the same TCP clients.
        let over_http = http.get_clients().await.unwrap();
        assert_eq!(over_http.len(), 2, "{over_http:?}");
        let one = http.get_client(me.client_id).await.unwrap().unwrap();
        assert_eq!((one.address, one.user_id), (me.address.clone(), Some(0)));
        assert!(http.get_client(u32::MAX - 7).await.unwrap().is_none());
        drop(other);
    }

    // When it creates a stream and a topic (offsets persisted, messages default).
    let stream = client.create_stream("sdk-stream").await.unwrap();
    assert_eq!((stream.id, stream.name.as_str()), (0, "sdk-stream"));
    let s = Identifier::named("sdk-stream").unwrap();
    let t = Identifier::named("events").unwrap();
    let topic = client
        .create_topic(
            &s,
            "events",
            &TopicCreateOptions {
                partitions_count: Some(2),
                consumer_offset_durability: Durability::Persisted,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(topic.id, 0);
    assert_eq!(topic.partitions_count, 2);
    let ids: Vec<u32> = topic.partitions.iter().map(|p| p.id).collect();
    assert_eq!(ids, [0, 1]);

    // Then it sends, with user headers (keys of any kind, as SDK 0.11
    // allows), to partition 0.
    let header_key = HeaderKey::try_from("trace-id").unwrap();
    let header_value = HeaderValue::from_str("trace-42").unwrap();
    let int_key = HeaderKey::from(7u32);
    let sent_headers = BTreeMap::from([
        (header_key.clone(), header_value.clone()),
        (int_key, HeaderValue::from(true)),
    ]);
    let mut batch: Vec<IggyMessage> = vec![
        IggyMessage::builder()
            .payload("m0".to_string().into())
            .user_headers(sent_headers.clone())
            .build()
            .unwrap(),
        message("m1"),
        message("m2"),
    ];
    let sent = client
        .send_messages(&s, &t, &Partitioning::partition_id(P0), &mut batch)
        .await
        .unwrap();
    assert_eq!(sent.confirmations.len(), 1);
    assert_eq!(sent.confirmations[0].partition_id, P0);
    assert_eq!(sent.confirmations[0].base_offset, 0);
    // And learns the write's guarantee (an HTTP answer header).
    let (_, durability) = http
        .send_messages_with_durability(&s, &t, &Partitioning::partition_id(1), &mut [message("p1")])
        .await
        .unwrap();
    assert_eq!(durability, Some(Durability::Replicated));
    let mut more = vec![message("m3"), message("m4")];
    client
        .send_messages(&s, &t, &Partitioning::partition_id(P0), &mut more)
        .await
        .unwrap();

    // And polls with every strategy.
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let poll = |strategy: PollingStrategy, count: u32, auto_commit: bool| {
        let (s, t, consumer) = (&s, &t, &consumer);
        async move {
            client
                .poll_messages(s, t, Some(P0), consumer, &strategy, count, auto_commit)
                .await
                .unwrap()
        }
    };
    let by_offset = poll(PollingStrategy::offset(1), 2, false).await;
    assert_eq!(offsets(&by_offset), [1, 2]);
    assert_eq!(payloads(&by_offset), ["m1", "m2"]);
    let first = poll(PollingStrategy::first(), 1, false).await;
    assert_eq!(payloads(&first), ["m0"]);
    let headers = first.messages[0].user_headers_map().unwrap().unwrap();
    assert_eq!(headers, sent_headers);
    // The producer's timestamp comes back as sent over TCP, where the SDK
    // sends one; Iggy's HTTP send carries none, so it is the append time.
    let m0 = &first.messages[0].header;
    match transport {
        Transport::Tcp => assert_eq!(m0.origin_timestamp, batch[0].header.origin_timestamp),
        Transport::Http => assert_eq!(m0.origin_timestamp, m0.timestamp),
    }
    let last = poll(PollingStrategy::last(), 2, false).await;
    assert_eq!(offsets(&last), [3, 4]);
    // m3 and m4 came in a later batch, so m3's timestamp starts there.
    let ts = last.messages[0].header.timestamp;
    let by_time = poll(
        PollingStrategy::timestamp(IggyTimestamp::from(ts)),
        10,
        false,
    )
    .await;
    assert_eq!(offsets(&by_time), [3, 4]);
    let next = poll(PollingStrategy::next(), 2, true).await;
    assert_eq!(offsets(&next), [0, 1]);
    let next = poll(PollingStrategy::next(), 10, true).await;
    assert_eq!(offsets(&next), [2, 3, 4]);
    assert_eq!(next.current_offset, 4);

    // And stores, reads and deletes consumer offsets.
    let other = Consumer::new(Identifier::numeric(7).unwrap());
    client
        .store_consumer_offset(&other, &s, &t, Some(P0), 3)
        .await
        .unwrap();
    let stored = client
        .get_consumer_offset(&other, &s, &t, Some(P0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((stored.stored_offset, stored.current_offset), (3, 4));
    client
        .delete_consumer_offset(&other, &s, &t, Some(P0))
        .await
        .unwrap();
    assert!(
        client
            .get_consumer_offset(&other, &s, &t, Some(P0))
            .await
            .unwrap()
            .is_none()
    );

    // And sends by messages key and balanced (either partition may take them).
    let mut keyed = vec![message("k0")];
    client
        .send_messages(
            &s,
            &t,
            &Partitioning::messages_key_str("customer-7").unwrap(),
            &mut keyed,
        )
        .await
        .unwrap();
    let mut balanced = vec![message("b0")];
    client
        .send_messages(&s, &t, &Partitioning::balanced(), &mut balanced)
        .await
        .unwrap();

    // And manages consumer groups and partitions.
    let group = client
        .create_consumer_group(&s, &t, "billing")
        .await
        .unwrap();
    assert_eq!((group.id, group.name.as_str()), (0, "billing"));
    let g = Identifier::named("billing").unwrap();
    assert!(
        client
            .get_consumer_group(&s, &t, &g)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(client.get_consumer_groups(&s, &t).await.unwrap().len(), 1);
    if transport == Transport::Tcp {
        // The binary protocol names the consumer kind: a group's own offset,
        // which only a member may commit (Iggy 0.11).
        let billing = Consumer::group(Identifier::numeric(0).unwrap());
        client.join_consumer_group(&s, &t, &g).await.unwrap();
        client
            .store_consumer_offset(&billing, &s, &t, Some(P0), 2)
            .await
            .unwrap();
        let got = client
            .get_consumer_offset(&billing, &s, &t, Some(P0))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.stored_offset, 2);
    }
    client.delete_consumer_group(&s, &t, &g).await.unwrap();
    assert!(
        client
            .get_consumer_group(&s, &t, &g)
            .await
            .unwrap()
            .is_none()
    );
    client.create_partitions(&s, &t, 1).await.unwrap();
    let details = client.get_topic(&s, &t).await.unwrap().unwrap();
    assert_eq!(details.partitions_count, 3);
    client.delete_partitions(&s, &t, 1).await.unwrap();

    // And reads details back, durability options included.
    let details = client.get_topic(&s, &t).await.unwrap().unwrap();
    assert_eq!(details.partitions_count, 2);
    assert_eq!(details.messages_count, 8);
    let stream = client.get_stream(&s).await.unwrap().unwrap();
    assert_eq!((stream.topics_count, stream.messages_count), (1, 8));
    assert_eq!(client.get_streams().await.unwrap().len(), 1);
    assert_eq!(client.get_topics(&s).await.unwrap().len(), 1);

    // And purges the topic: the next poll starts the new history.
    client.purge_topic(&s, &t).await.unwrap();
    assert!(
        poll(PollingStrategy::first(), 10, false)
            .await
            .messages
            .is_empty()
    );
    let mut fresh = vec![message("fresh")];
    client
        .send_messages(&s, &t, &Partitioning::partition_id(P0), &mut fresh)
        .await
        .unwrap();
    let next = poll(PollingStrategy::next(), 10, true).await;
    assert_eq!(offsets(&next), [0]);
    assert_eq!(payloads(&next), ["fresh"]);

    // And purges the stream.
    client.purge_stream(&s).await.unwrap();
    let stream = client.get_stream(&s).await.unwrap().unwrap();
    assert_eq!(stream.messages_count, 0);

    // And renames, deletes, and logs out.
    client
        .update_stream(&s, "sdk-renamed", &Default::default())
        .await
        .unwrap();
    let renamed = Identifier::named("sdk-renamed").unwrap();

    // And reads the server's stats and cluster metadata, as iggy-bench does.
    let stats = client.get_stats().await.unwrap();
    assert_eq!(
        (
            stats.streams_count,
            stats.topics_count,
            stats.partitions_count
        ),
        (1, 1, 2)
    );
    assert_eq!(stats.process_id, std::process::id());
    // The process figures come from /proc (whose files report a size of 0).
    assert!(stats.memory_usage.as_bytes_u64() > 0, "{stats:?}");
    assert!(stats.total_memory.as_bytes_u64() > 0, "{stats:?}");
    assert!(stats.threads_count > 0, "{stats:?}");
    assert!(!stats.kernel_version.is_empty(), "{stats:?}");
    let cluster = client.get_cluster_metadata().await.unwrap();
    assert_eq!(cluster.nodes.len(), 1);
    client.delete_topic(&renamed, &t).await.unwrap();
    client.delete_stream(&renamed).await.unwrap();
    assert!(client.get_stream(&renamed).await.unwrap().is_none());
    client.logout_user().await.unwrap();
    assert!(client.get_streams().await.is_err());

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_poll_of_more_slices_than_one_writev_takes_when_polled_over_tcp_then_every_message_arrives_intact()
 {
    // Given 1,500 messages of distinct sizes and contents in partition 0, sent in
    // 3 batches (so the answer holds 3 Iggy batches), one with a user header.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let client = sluice_testkit::tcp::sdk_login(&server).await;
    client.create_stream("big").await.unwrap();
    let s = Identifier::named("big").unwrap();
    let t = Identifier::named("t").unwrap();
    client
        .create_topic(&s, "t", &TopicCreateOptions::default())
        .await
        .unwrap();
    let body = |i: usize| format!("{i:04}-{}", "x".repeat(i % 97));
    for chunk in 0..3 {
        let mut batch: Vec<IggyMessage> = (chunk * 500..(chunk + 1) * 500)
            .map(|i| message(&body(i)))
            .collect();
        if chunk == 1 {
            let headers = BTreeMap::from([(
                HeaderKey::try_from("k").unwrap(),
                HeaderValue::from_str("v").unwrap(),
            )]);
            batch[0] = IggyMessage::builder()
                .payload(body(500).into())
                .user_headers(headers)
                .build()
                .unwrap();
        }
        client
            .send_messages(&s, &t, &Partitioning::partition_id(P0), &mut batch)
            .await
            .unwrap();
    }

    // When they are polled in one call (about 3,000 slices: more than the
    // kernel's 1,024 per writev, so the write takes several calls).
    let polled = client
        .poll_messages(
            &s,
            &t,
            Some(P0),
            &Consumer::new(Identifier::numeric(1).unwrap()),
            &PollingStrategy::offset(0),
            1_500,
            false,
        )
        .await
        .unwrap();

    // Then every message arrives whole, in order, the user header with its message.
    let expected: Vec<String> = (0..1_500).map(body).collect();
    assert_eq!(payloads(&polled), expected);
    assert_eq!(offsets(&polled), (0..1_500).collect::<Vec<u64>>());
    let with_headers: Vec<u64> = polled
        .messages
        .iter()
        .filter(|m| m.user_headers.is_some())
        .map(|m| m.header.offset)
        .collect();
    assert_eq!(with_headers, [500]);
    // And the connection is still in step: the next call answers.
    client.ping().await.unwrap();
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_poll_asking_for_more_than_the_servers_limit_then_it_is_served_the_limit_on_both_transports()
 {
    // Given 10,050 messages in one partition (Iggy has no poll cap; sluice's
    // default `max_poll_count` is 10,000).
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    tcp.login_user("iggy", "iggy").await.unwrap();
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_user("iggy", "iggy").await.unwrap();
    tcp.create_stream("s").await.unwrap();
    let (s, t) = (
        Identifier::named("s").unwrap(),
        Identifier::named("t").unwrap(),
    );
    tcp.create_topic(&s, "t", &TopicCreateOptions::default())
        .await
        .unwrap();
    let mut batch: Vec<IggyMessage> = (0..10_050).map(|i| message(&format!("{i}"))).collect();
    tcp.send_messages(&s, &t, &Partitioning::partition_id(P0), &mut batch)
        .await
        .unwrap();

    // When a client asks for 20,000 at once, over either transport.
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let clients: [&dyn Client; 2] = [&tcp, &http];
    for client in clients {
        let first = client
            .poll_messages(
                &s,
                &t,
                Some(P0),
                &consumer,
                &PollingStrategy::offset(0),
                20_000,
                false,
            )
            .await
            .unwrap();
        // Then it is served the limit, not refused, and polls on for the rest.
        assert_eq!(first.messages.len(), 10_000);
        let rest = client
            .poll_messages(
                &s,
                &t,
                Some(P0),
                &consumer,
                &PollingStrategy::offset(10_000),
                20_000,
                false,
            )
            .await
            .unwrap();
        assert_eq!(offsets(&rest), (10_000..10_050).collect::<Vec<u64>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_topic_options_as_iggy_takes_them_over_tcp_then_human_readable_values_and_sdk_keys_are_accepted()
 {
    use iggy_binary_protocol::requests::topics::CreateTopicRequest;
    use iggy_binary_protocol::{WireEncode, WireIdentifier, WireName, WireOptions};
    use sluice_server::tcp::codec::code;
    use sluice_testkit::tcp::{RawConn, tcp_addr};

    let options = |pairs: &[(&str, &str)]| {
        let entries: Vec<(u8, &[u8], u8, &[u8])> = pairs
            .iter()
            .map(|(k, v)| (2u8, k.as_bytes(), 2u8, v.as_bytes()))
            .collect();
        let mut buf = bytes::BytesMut::new();
        iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
        WireOptions::from_slice(&buf).unwrap()
    };
    let create = |name: &str, options: WireOptions| {
        CreateTopicRequest {
            stream_id: WireIdentifier::numeric(0),
            partitions_count: 1,
            name: WireName::new(name.to_string()).unwrap(),
            options,
        }
        .to_bytes()
    };
    // Given a stream, and a raw TCP connection sending what Iggy's CLI sends.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let sdk = sluice_testkit::tcp::sdk_login(&server).await;
    sdk.create_stream("s").await.unwrap();
    let mut raw = RawConn::connect(tcp_addr(&server)).await;
    raw.login().await;

    // When a topic is created with text values and SDK 0.11's journal keys.
    let reply = raw
        .call(
            code::CREATE_TOPIC,
            &create(
                "t",
                options(&[
                    ("message_expiry", "7 days"),
                    ("max_topic_size", "1 GiB"),
                    ("segment_size", "128 MiB"),
                    ("messages_required_to_save", "1024"),
                    ("size_of_messages_required_to_save", "1 MiB"),
                    ("preallocate_segments", "false"),
                ]),
            ),
        )
        .await
        .unwrap();

    // Then it exists with those values, read back through the SDK.
    assert_eq!(reply.status, 0);
    let s = Identifier::numeric(0).unwrap();
    let topic = sdk
        .get_topic(&s, &Identifier::named("t").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        topic.message_expiry,
        IggyExpiry::ExpireDuration(IggyDuration::from(7 * 86_400 * 1_000_000))
    );
    assert_eq!(
        topic.max_topic_size,
        MaxTopicSize::Custom(IggyByteSize::from(1 << 30))
    );

    // And a value that is not one is Iggy's `invalid_option_value`, creating nothing.
    for (key, bad) in [("message_expiry", "soon"), ("max_topic_size", "big")] {
        let reply = raw
            .call(code::CREATE_TOPIC, &create("u", options(&[(key, bad)])))
            .await
            .unwrap();
        assert_eq!(reply.status, 4042, "{key}={bad}");
    }
    assert!(
        sdk.get_topic(&s, &Identifier::named("u").unwrap())
            .await
            .unwrap()
            .is_none()
    );

    // And Iggy's `enforce_fsync`, a bool as iggy-bench --enforce-fsync sends it,
    // is the topic's message durability, read back as `persisted` (and `false`
    // as Iggy's default, which TCP answers by its Iggy name, `replicated`).
    let fsync_options = |value: u8| {
        let entries = [(2u8, &b"enforce_fsync"[..], 3u8, &[value][..])];
        let mut buf = bytes::BytesMut::new();
        iggy_binary_protocol::encode_user_headers(&entries, &mut buf);
        WireOptions::from_slice(&buf).unwrap()
    };
    let durability = HeaderKey::from_str("durability").unwrap();
    for (name, value, expected) in [("fsynced", 1u8, "persisted"), ("lazy", 0, "replicated")] {
        let reply = raw
            .call(code::CREATE_TOPIC, &create(name, fsync_options(value)))
            .await
            .unwrap();
        assert_eq!(reply.status, 0, "{name}");
        let topic = sdk
            .get_topic(&s, &Identifier::named(name).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            topic.options[&durability].value.as_bytes(),
            expected.as_bytes(),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_gzip_topic_from_the_sdk_then_its_algorithm_is_kept_across_updates_and_a_restart_on_both_transports()
 {
    // Given a running sluice and the SDK over both transports.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let tcp = sluice_testkit::tcp::sdk_login(&server).await;
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_user("iggy", "iggy").await.unwrap();
    tcp.create_stream("s").await.unwrap();
    let s = Identifier::named("s").unwrap();
    let gzip = TopicCreateOptions {
        compression_algorithm: Some(CompressionAlgorithm::Gzip),
        ..TopicCreateOptions::default()
    };

    // When a gzip topic is created over each (as Iggy's CLI examples do),
    let clients: [(&dyn Client, &str); 2] = [(&tcp, "over-tcp"), (&http, "over-http")];
    for (client, name) in clients {
        client.create_topic(&s, name, &gzip).await.unwrap();
    }
    // and one is updated without naming an algorithm, the other to none.
    let keep = TopicUpdateOptions {
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(60_000_000))),
        ..TopicUpdateOptions::default()
    };
    let t = Identifier::named("over-tcp").unwrap();
    tcp.update_topic(&s, &t, "over-tcp", &keep).await.unwrap();
    let to_none = TopicUpdateOptions {
        compression_algorithm: Some(CompressionAlgorithm::None),
        ..TopicUpdateOptions::default()
    };
    let h = Identifier::named("over-http").unwrap();
    http.update_topic(&s, &h, "over-http", &to_none)
        .await
        .unwrap();

    // Then both transports report what was set, and so does a restarted server.
    let expected = [
        ("over-tcp", CompressionAlgorithm::Gzip),
        ("over-http", CompressionAlgorithm::None),
    ];
    async fn check(client: &dyn Client, expected: [(&str, CompressionAlgorithm); 2]) {
        let s = Identifier::named("s").unwrap();
        for (name, algorithm) in expected {
            let topic = client
                .get_topic(&s, &Identifier::named(name).unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(topic.compression_algorithm, algorithm, "{name}");
        }
    }
    check(&tcp, expected).await;
    check(&http, expected).await;
    drop(tcp);
    server.shutdown().await.unwrap();
    let server = start_server(dir.path()).await;
    check(&sluice_testkit::tcp::sdk_login(&server).await, expected).await;

    // And an algorithm Iggy does not have is refused, naming it.
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_user("iggy", "iggy").await.unwrap();
    let api = sluice_testkit::http::Api::login(&server).await;
    let reply = api
        .post(
            "/streams/s/topics",
            serde_json::json!({"name": "z", "partitions_count": 1, "compression_algorithm": "zstd"}),
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.json()["reason"].as_str().unwrap().contains("zstd"));
}
