//! The Iggy purge bug, once end to end over the TCP protocol with the
//! official SDK's `TcpClient`: offsets stored over TCP over a durable old
//! history, a purge over TCP whose sync of the consumers directory fails,
//! fresh messages over TCP, a power cut, a restart; then `Next` over TCP
//! returns the complete fresh history (the resurrected old offset moves
//! nobody). The engine-level matrix is `tests/purge_regression.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use iggy::prelude::*;
use sluice_server::server::RunningServer;
use sluice_testkit::engine::{Crash, DATA_DIR, Fault, FaultMode, OpKind, OpMatcher, SimStorage};

async fn start_on(sim: &SimStorage) -> RunningServer {
    sluice_testkit::http::start_server_on(Arc::new(sim.clone()), Path::new(DATA_DIR), |c| {
        // Only the purge's own attempt runs before the power cut: no
        // reconciler pass retries the failed directory sync in between.
        c.reconciler.period = Duration::from_secs(3600);
    })
    .await
}

fn messages(payloads: &[&str]) -> Vec<IggyMessage> {
    payloads
        .iter()
        .map(|p| {
            IggyMessage::builder()
                .payload(p.to_string().into())
                .build()
                .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_offsets_and_a_failed_purge_sync_over_tcp_when_power_is_cut_then_next_over_tcp_returns_the_fresh_history()
 {
    // Given a persisted topic with an old history and consumer offsets, all durable.
    let sim = sluice_testkit::engine::new_sim();
    let server = start_on(&sim).await;
    let client = sluice_testkit::tcp::sdk_login(&server).await;
    client.create_stream("orders").await.unwrap();
    let s = Identifier::named("orders").unwrap();
    let t = Identifier::named("events").unwrap();
    client
        .create_topic(
            &s,
            "events",
            &TopicCreateOptions {
                durability: Durability::Persisted,
                consumer_offset_durability: Durability::Persisted,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    let mut old = messages(&[
        "old-0", "old-1", "old-2", "old-3", "old-4", "old-5", "old-6",
    ]);
    client
        .send_messages(&s, &t, &Partitioning::partition_id(0), &mut old)
        .await
        .unwrap();
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    client
        .store_consumer_offset(&consumer, &s, &t, Some(0), 5)
        .await
        .unwrap();
    sluice_testkit::engine::make_everything_durable(&sim);

    // When the purge over TCP deletes the offset file but the consumers
    // directory's sync fails, and a fresh history is acknowledged over TCP.
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/consumers"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );
    client.purge_topic(&s, &t).await.unwrap();
    let mut fresh = messages(&["new-0", "new-1"]);
    client
        .send_messages(&s, &t, &Partitioning::partition_id(0), &mut fresh)
        .await
        .unwrap();
    drop(client);

    // And the power is cut (no graceful stop), and sluice restarts.
    sim.crash(Crash::PowerLoss);
    drop(server);
    let server = start_on(&sim).await;

    // Then Next over TCP returns the complete fresh history.
    let client = sluice_testkit::tcp::sdk_login(&server).await;
    let polled = client
        .poll_messages(
            &s,
            &t,
            Some(0),
            &consumer,
            &PollingStrategy::next(),
            100,
            true,
        )
        .await
        .unwrap();
    let got: Vec<(u64, String)> = polled
        .messages
        .iter()
        .map(|m| {
            (
                m.header.offset,
                String::from_utf8(m.payload.to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(0, "new-0".to_string()), (1, "new-1".to_string())]);
    server.shutdown().await.unwrap();
}
