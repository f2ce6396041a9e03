//! Throughput of the two transports, driven by the official Iggy SDK
//! (`iggy = "=0.11.0"`: `TcpClient` and `HttpClient`), next to the engine
//! in process (the loop of `sluice bench`'s messages scenario: `send` and
//! `poll` on the engine, no transport), all measured in this one run on the
//! same disk.
//!
//! A dev tool, not part of the shipped binary (an example of the integration test
//! package, `tests/Cargo.toml`; the SDK is a test-only dependency):
//!
//! ```sh
//! cargo run --release -p sluice-integration --example tcp_bench            # 100,000 x 1 KB per case
//! SLUICE_BENCH_MESSAGES=20000 cargo run --release -p sluice-integration --example tcp_bench
//! SLUICE_BENCH_TCP_ONLY=1 cargo run --release -p sluice-integration --example tcp_bench   # no HTTP rows
//! ```
//!
//! Per case: 1 producer sends every message (batches of 1,000 and of 10),
//! then 1 consumer polls them back by offset in batches of the same size;
//! msgs/s over the timed calls and p50/p99 of one call. The server runs in
//! this process (same code as `sluice server`), on a temporary directory of
//! the system temporary directory (or `SLUICE_BENCH_DIR`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use sluice_server::clock::SystemClock;
use sluice_server::config::ServerConfig;
use sluice_server::engine::FIRST_ID;
use sluice_server::http::auth::RootSource;
use sluice_server::metadata::{Durability as Policy, TopicOptions};
use sluice_server::partition::log::NewMessage;
use sluice_server::partition::{Consumer as EngineConsumer, PollingStrategy as EngineStrategy};
use sluice_server::server::{ServeOptions, start};
use sluice_server::{
    Engine, EngineConfig, Identifier as EngineId, Partitioning as EnginePartitioning,
};
use sluice_storage::{DiskStorage, DurableStorage};

const MESSAGE_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Figures {
    send_rate: f64,
    send_p50: f64,
    send_p99: f64,
    poll_rate: f64,
    poll_p50: f64,
    poll_p99: f64,
}

fn quantile(lat: &mut [f64], q: f64) -> f64 {
    if lat.is_empty() {
        return 0.0;
    }
    lat.sort_by(f64::total_cmp);
    let i = ((lat.len() as f64 - 1.0) * q).round() as usize;
    lat[i.min(lat.len() - 1)]
}

fn figures(messages: u64, send: &mut [f64], poll: &mut [f64]) -> Figures {
    let total = |l: &[f64]| l.iter().sum::<f64>() / 1e3;
    Figures {
        send_rate: messages as f64 / total(send),
        send_p50: quantile(send, 0.5),
        send_p99: quantile(send, 0.99),
        poll_rate: messages as f64 / total(poll),
        poll_p50: quantile(poll, 0.5),
        poll_p99: quantile(poll, 0.99),
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The engine in process, the loop `sluice bench` times.
fn in_process(dir: &std::path::Path, policy: Policy, batch: u64, messages: u64) -> Figures {
    let storage: Arc<dyn DurableStorage> = Arc::new(DiskStorage::new());
    let (mut engine, _) =
        Engine::open(storage, Arc::new(SystemClock), EngineConfig::new(dir, 7)).unwrap();
    engine.create_stream(None, "bench").unwrap();
    let s = EngineId::from("bench");
    let options = TopicOptions {
        durability: policy,
        ..TopicOptions::default()
    };
    engine
        .create_topic(&s, None, "t", 1, options, 0, 0, 1)
        .unwrap();
    let t = EngineId::from("t");
    let (mut send, mut poll) = (Vec::new(), Vec::new());
    for b in 0..messages / batch {
        let msgs = (0..batch)
            .map(|i| NewMessage::new(vec![(b + i) as u8; MESSAGE_BYTES]))
            .collect();
        let t0 = Instant::now();
        engine
            .send(&s, &t, &EnginePartitioning::PartitionId(FIRST_ID), msgs)
            .unwrap();
        send.push(ms(t0));
    }
    let mut offset = 0;
    while offset < messages {
        let t0 = Instant::now();
        let p = engine
            .poll(
                &s,
                &t,
                FIRST_ID,
                EngineConsumer::consumer(1),
                EngineStrategy::Offset(offset),
                batch,
                false,
            )
            .unwrap();
        poll.push(ms(t0));
        assert!(!p.messages.is_empty(), "no messages at offset {offset}");
        offset += p.messages.len() as u64;
        std::hint::black_box(&p);
    }
    figures(messages, &mut send, &mut poll)
}

/// One producer then one consumer through an SDK client.
async fn through_sdk(
    client: &dyn Client,
    topic: &str,
    policy: Durability,
    batch: u64,
    messages: u64,
) -> Figures {
    let s = Identifier::named("bench").unwrap();
    client
        .create_topic(
            &s,
            topic,
            &TopicCreateOptions {
                durability: policy,
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    let t = Identifier::named(topic).unwrap();
    let partitioning = Partitioning::partition_id(FIRST_ID);
    let payload = bytes::Bytes::from(vec![7u8; MESSAGE_BYTES]);
    let (mut send, mut poll) = (Vec::new(), Vec::new());
    for _ in 0..messages / batch {
        let mut msgs: Vec<IggyMessage> = (0..batch)
            .map(|_| {
                IggyMessage::builder()
                    .payload(payload.clone())
                    .build()
                    .unwrap()
            })
            .collect();
        let t0 = Instant::now();
        client
            .send_messages(&s, &t, &partitioning, &mut msgs)
            .await
            .unwrap();
        send.push(ms(t0));
    }
    let consumer = Consumer::new(Identifier::numeric(1).unwrap());
    let mut offset = 0;
    while offset < messages {
        let t0 = Instant::now();
        let p = client
            .poll_messages(
                &s,
                &t,
                Some(FIRST_ID),
                &consumer,
                &PollingStrategy::offset(offset),
                u32::try_from(batch).unwrap(),
                false,
            )
            .await
            .unwrap();
        poll.push(ms(t0));
        assert!(!p.messages.is_empty(), "no messages at offset {offset}");
        offset += p.messages.len() as u64;
    }
    figures(messages, &mut send, &mut poll)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let messages: u64 = std::env::var("SLUICE_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // `SLUICE_BENCH_TCP_ONLY=1` leaves out the HTTP rows (to profile the TCP path alone).
    let tcp_only = std::env::var_os("SLUICE_BENCH_TCP_ONLY").is_some();
    let base = std::env::var("SLUICE_BENCH_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();

    let mut config = ServerConfig {
        data_dir: dir.path().join("server"),
        ..ServerConfig::default()
    };
    config.http.address = ([127, 0, 0, 1], 0).into();
    config.tcp.address = ([127, 0, 0, 1], 0).into();
    config.http.max_body_bytes = 64 << 20;
    let server = start(
        Arc::new(DiskStorage::new()),
        ServeOptions {
            config,
            root: RootSource::DefaultIggy,
            seed: 7,
        },
    )
    .await
    .unwrap();
    let tcp = TcpClient::create(Arc::new(TcpClientConfig {
        server_address: server.tcp_addr.unwrap().to_string(),
        nodelay: true,
        ..TcpClientConfig::default()
    }))
    .unwrap();
    tcp.connect().await.unwrap();
    tcp.login_user("iggy", "iggy").await.unwrap();
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_user("iggy", "iggy").await.unwrap();
    tcp.create_stream("bench").await.unwrap();

    println!(
        "1 producer then 1 consumer, {MESSAGE_BYTES} B messages, {messages} per case (10-batches: {}), partition {FIRST_ID}",
        messages / 10
    );
    println!(
        "| path | durability | batch | send msgs/s | send p50 ms | send p99 ms | poll msgs/s | poll p50 ms | poll p99 ms | send / in-process | poll / in-process |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut case = 0;
    for batch in [1000u64, 10] {
        // Batches of 10 carry a tenth of the messages: the same number of calls bounds the run.
        let n = if batch == 10 {
            (messages / 10).max(10)
        } else {
            messages
        };
        for (name, policy, sdk) in [
            ("buffered", Policy::Buffered, Durability::Replicated),
            ("persisted", Policy::Persisted, Durability::Persisted),
        ] {
            case += 1;
            let inproc = tokio::task::spawn_blocking({
                let d = dir.path().join(format!("inproc-{case}"));
                move || in_process(&d, policy, batch, n)
            })
            .await
            .unwrap();
            let mut rows = vec![
                ("in-process engine", inproc),
                (
                    "SDK TcpClient",
                    through_sdk(&tcp, &format!("tcp-{case}"), sdk, batch, n).await,
                ),
            ];
            if !tcp_only {
                rows.push((
                    "SDK HttpClient",
                    through_sdk(&http, &format!("http-{case}"), sdk, batch, n).await,
                ));
            }
            for (path, f) in rows {
                println!(
                    "| {path} | {name} | {batch} | {:.0} | {:.3} | {:.3} | {:.0} | {:.3} | {:.3} | {:.2} | {:.2} |",
                    f.send_rate,
                    f.send_p50,
                    f.send_p99,
                    f.poll_rate,
                    f.poll_p50,
                    f.poll_p99,
                    f.send_rate / inproc.send_rate,
                    f.poll_rate / inproc.poll_rate
                );
            }
        }
    }
    drop(tcp);
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.shutdown().await.unwrap();
}
