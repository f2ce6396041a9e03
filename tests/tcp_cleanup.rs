//! Retention and deletion over the TCP protocol with the official SDK's
//! `TcpClient` (most Iggy applications speak TCP): a topic created over TCP
//! with a 1 s `message_expiry` loses its sealed segments and `Next` from
//! below the low-water mark continues at it (ADR 0016); a topic deleted over
//! TCP whose directory sync fails stays listed in `/status/obligations` until
//! its removal is durable (ADR 0015). The engine-level matrices are
//! `tests/retention_regression.rs` and `tests/deletion_regression.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use iggy::prelude::*;
use sluice_server::server::RunningServer;
use sluice_testkit::engine::{DATA_DIR, Fault, FaultMode, OpKind, OpMatcher, SimStorage};
use sluice_testkit::http::Api;

async fn start_on(sim: &SimStorage) -> RunningServer {
    sluice_testkit::http::start_server_on(Arc::new(sim.clone()), Path::new(DATA_DIR), |_| {}).await
}

fn message(payload: String) -> IggyMessage {
    IggyMessage::builder()
        .payload(payload.into())
        .build()
        .unwrap()
}

async fn offsets_polled(
    client: &TcpClient,
    t: &Identifier,
    consumer: &Consumer,
    strategy: PollingStrategy,
) -> Vec<u64> {
    let s = Identifier::named("orders").unwrap();
    client
        .poll_messages(&s, t, Some(0), consumer, &strategy, 100, false)
        .await
        .unwrap()
        .messages
        .iter()
        .map(|m| m.header.offset)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_one_second_expiry_set_over_tcp_when_time_passes_then_sealed_segments_go_and_next_continues()
 {
    // Given a topic created over TCP with a 1 s expiry and 4 KiB segments,
    // three messages of about 4 KB (one segment each: the last is active),
    // and consumer 1's offset stored at 0.
    let sim = sluice_testkit::engine::new_sim();
    let server = start_on(&sim).await;
    let client = sluice_testkit::tcp::sdk_login(&server).await;
    client.create_stream("orders").await.unwrap();
    let s = Identifier::named("orders").unwrap();
    let t = Identifier::named("aged").unwrap();
    client
        .create_topic(
            &s,
            "aged",
            &TopicCreateOptions {
                message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(
                    Duration::from_secs(1),
                ))),
                segment_size: Some(IggyByteSize::from(4096)),
                durability: Durability::Persisted,
                consumer_offset_durability: Durability::Persisted,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    let bulk = "x".repeat(4000);
    for i in 0..3 {
        let mut batch = vec![message(format!("{i}-{bulk}"))];
        client
            .send_messages(&s, &t, &Partitioning::partition_id(0), &mut batch)
            .await
            .unwrap();
    }
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    client
        .store_consumer_offset(&consumer, &s, &t, Some(0), 0)
        .await
        .unwrap();

    // When time passes and the reconciler's periodic passes run,
    let observer = Consumer::new(Identifier::numeric(9).unwrap());
    let mut first = Vec::new();
    for _ in 0..500 {
        first = offsets_polled(&client, &t, &observer, PollingStrategy::first()).await;
        if first.first() == Some(&2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // then over TCP `First` starts at the mark (the sealed segments are
    // gone, the active one stays), an offset poll below it returns from it,
    // and `Next` from the stored offset 0 continues at it.
    assert_eq!(first, [2], "retention did not move the first offset to 2");
    assert_eq!(
        offsets_polled(&client, &t, &observer, PollingStrategy::offset(0)).await,
        [2]
    );
    assert_eq!(
        offsets_polled(&client, &t, &consumer, PollingStrategy::next()).await,
        [2]
    );
    let topic = client.get_topic(&s, &t).await.unwrap().unwrap();
    assert_eq!(topic.messages_count, 1);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_failing_sync_when_a_topic_is_deleted_over_tcp_then_its_obligation_is_listed_until_done()
 {
    // Given a topic with a message, and the next sync of the stream's
    // `topics/` directory failing.
    let sim = sluice_testkit::engine::new_sim();
    let server = start_on(&sim).await;
    let client = sluice_testkit::tcp::sdk_login(&server).await;
    client.create_stream("orders").await.unwrap();
    let s = Identifier::named("orders").unwrap();
    let t = Identifier::named("events").unwrap();
    client
        .create_topic(&s, "events", &TopicCreateOptions::default())
        .await
        .unwrap();
    let mut batch = vec![message("m".to_string())];
    client
        .send_messages(&s, &t, &Partitioning::partition_id(0), &mut batch)
        .await
        .unwrap();
    // Five failures in a row keep the obligation pending for about 3 s of
    // backoff (100 ms doubling), so the first status query below sees it
    // even when a loaded machine makes the login before it slow.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/streams/0/topics"),
        Fault::io(FaultMode::Before),
        0,
        5,
    );

    // When the topic is deleted over TCP (acknowledged at the metadata
    // commit), its cleanup's first syncs fail,
    client.delete_topic(&s, &t).await.unwrap();
    assert!(client.get_topic(&s, &t).await.unwrap().is_none());

    // then the delete obligation is listed until the reconciler's retry
    // makes the removal durable, and nothing of the topic is left on disk.
    let api = Api::login(&server).await;
    let seen = api.wait_until_no_obligation().await;
    assert_eq!(
        seen[0]["obligations"][0]["resource"], "topic",
        "{:?}",
        seen[0]
    );
    assert!(
        !sim.durable_view()
            .keys()
            .any(|p| p.starts_with("/data/streams/0/topics/0")),
        "the deleted topic's files are still durable"
    );
    // And a topic created again over TCP takes id 0 and starts empty.
    let again = client
        .create_topic(&s, "events", &TopicCreateOptions::default())
        .await
        .unwrap();
    assert_eq!(again.id, 0);
    assert_eq!(again.messages_count, 0);
    server.shutdown().await.unwrap();
}
