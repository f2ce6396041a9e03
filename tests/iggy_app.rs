//! An Iggy application as Iggy's documentation writes one (issue 28): it
//! connects with a connection string or the client builder, produces with
//! the SDK's high-level `IggyProducer` (keyed partitioning, user headers of
//! several kinds) and consumes with `IggyConsumer` as a named consumer with
//! auto-commit, over TCP and over HTTP, against sluice unchanged. A named
//! consumer's offset is one offset: a reconnect, or the other transport,
//! goes on where the last one committed.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use futures_util::StreamExt;
use iggy::prelude::*;
use sluice_server::server::RunningServer;
use sluice_testkit::http::start_server;
use sluice_testkit::tcp::tcp_addr;

const STREAM: &str = "shop";
const TOPIC: &str = "orders";
const CONSUMER: &str = "orders-worker";

#[derive(Debug, Clone, Copy)]
enum Transport {
    Tcp,
    Http,
}

/// A connected, logged-in application client: TCP through a connection
/// string, HTTP through the builder (as Iggy's examples do).
async fn app(server: &RunningServer, transport: Transport) -> IggyClient {
    let client = match transport {
        Transport::Tcp => {
            IggyClient::from_connection_string(&format!("iggy://iggy:iggy@{}", tcp_addr(server)))
                .unwrap()
        }
        Transport::Http => IggyClient::builder()
            .with_http()
            .with_api_url(format!("http://{}", server.local_addr))
            .build()
            .unwrap(),
    };
    client.connect().await.unwrap();
    if let Transport::Http = transport {
        client.login_user("iggy", "iggy").await.unwrap();
    }
    client
}

/// Messages `from..to`, each with a string and a numeric header.
fn orders(from: u32, to: u32) -> Vec<IggyMessage> {
    (from..to)
        .map(|i| {
            let headers = BTreeMap::from([
                (
                    HeaderKey::try_from("kind").unwrap(),
                    HeaderValue::from_str("order").unwrap(),
                ),
                (HeaderKey::from(1u32), HeaderValue::from(u64::from(i))),
            ]);
            IggyMessage::builder()
                .payload(format!("order-{i}").into())
                .user_headers(headers)
                .build()
                .unwrap()
        })
        .collect()
}

/// The high-level producer as the documentation builds one: creating the
/// stream and topic (four partitions) if missing, every message keyed by
/// one customer, number 42.
async fn producer(client: &IggyClient) -> IggyProducer {
    let producer = client
        .producer(STREAM, TOPIC)
        .unwrap()
        .direct(DirectConfig::builder().batch_length(10).build())
        .partitioning(Partitioning::messages_key_u32(42))
        .create_topic_if_not_exists(4, IggyExpiry::ServerDefault, MaxTopicSize::ServerDefault)
        .build();
    producer.init().await.unwrap();
    producer
}

/// A named consumer of `partition`, committing each message it consumes.
async fn named_consumer(client: &IggyClient, partition: u32) -> IggyConsumer {
    let mut consumer = client
        .consumer(CONSUMER, STREAM, TOPIC, partition)
        .unwrap()
        .auto_commit(AutoCommit::When(AutoCommitWhen::ConsumingEachMessage))
        .polling_strategy(PollingStrategy::next())
        .poll_interval(IggyDuration::from_str("5ms").unwrap())
        .batch_length(4)
        .build();
    consumer.init().await.unwrap();
    consumer
}

/// Consumes `n` messages: their payloads, and checks their headers.
async fn take(consumer: &mut IggyConsumer, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(20), consumer.next())
            .await
            .expect("no message within 20 s")
            .expect("the stream ended")
            .unwrap();
        let headers = next.message.user_headers_map().unwrap().unwrap();
        assert_eq!(headers.len(), 2, "{headers:?}");
        out.push(String::from_utf8(next.message.payload.to_vec()).unwrap());
    }
    out
}

fn names(from: u32, to: u32) -> Vec<String> {
    (from..to).map(|i| format!("order-{i}")).collect()
}

async fn application(produce_over: Transport, consume_over: [Transport; 2]) {
    // Given a fresh sluice.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;

    // When the application produces 30 orders of customer 42.
    let client = app(&server, produce_over).await;
    let producer = producer(&client).await;
    producer.send(orders(0, 30)).await.unwrap();

    // Then they sit in one partition, the one Iggy's keyed partitioning picks.
    let admin = app(&server, Transport::Tcp).await;
    let (s, t) = (
        Identifier::named(STREAM).unwrap(),
        Identifier::named(TOPIC).unwrap(),
    );
    let topic = admin.get_topic(&s, &t).await.unwrap().unwrap();
    let counts: Vec<u64> = topic.partitions.iter().map(|p| p.messages_count).collect();
    // u32 42 → XXH32 1161967057 % 4 = 1, as Iggy computes it
    // (docs/research/iggy-0.11-groups-names-keys.md §5).
    let expected = 1;
    assert_eq!(counts.iter().sum::<u64>(), 30);
    assert_eq!(counts[expected], 30, "{counts:?}");
    let partition = topic.partitions[expected].id;

    // And a named consumer takes 12 and goes away,
    let first = app(&server, consume_over[0]).await;
    let mut consumer = named_consumer(&first, partition).await;
    assert_eq!(take(&mut consumer, 12).await, names(0, 12));
    drop(consumer);
    drop(first);
    // and the same name, connecting again (over `consume_over[1]`), goes on
    // from the 13th: none twice, none skipped.
    let second = app(&server, consume_over[1]).await;
    let mut consumer = named_consumer(&second, partition).await;
    assert_eq!(take(&mut consumer, 18).await, names(12, 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_iggy_application_over_tcp_then_it_produces_and_consumes_by_name_unchanged() {
    application(Transport::Tcp, [Transport::Tcp, Transport::Tcp]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_iggy_application_over_http_then_it_produces_and_consumes_by_name_unchanged() {
    application(Transport::Http, [Transport::Http, Transport::Http]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_named_consumer_that_moves_from_tcp_to_http_then_it_goes_on_where_it_committed() {
    application(Transport::Tcp, [Transport::Tcp, Transport::Http]).await;
}
