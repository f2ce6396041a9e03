//! Tiering end to end (issue 31's test): the unmodified Iggy SDK (`iggy = "=0.11.0"`, TCP and
//! HTTP) drives a sluice started in-process from a configuration file whose `[tiering]` names
//! `s3s-fs` served in-process (a real S3 wire protocol: SigV4, path style, `If-None-Match`).
//! Sealed segments go to the bucket and leave the data directory, everything is polled back
//! from offset 0 and by a `Next` consumer with auto-commit, a purge empties the purged
//! generation's prefix in the bucket, and only the new history is served afterwards. A store
//! that ignores conditional creates is refused at start-up.
//!
//! Invariant: no fixed sleep is an assertion: every wait polls the server (`/metrics`) or the
//! bucket (an S3 listing) until a condition holds, with a deadline that fails the test.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iggy::prelude::*;
use sluice_server::config::{FlagOverrides, ServerConfig};
use sluice_server::server::{RunningServer, ServerError};
use sluice_storage::DiskStorage;
use sluice_testkit::http::{Api, start_server_with, try_start_server_on};
use sluice_testkit::remote::S3Server;

const STREAM: &str = "tiered";
const TOPIC: &str = "events";
/// This server's prefix in the bucket.
const INSTANCE: &str = "e2e";
/// The smallest segment Iggy's `segment_size` option allows here: about two batches of 10.
const SEGMENT_BYTES: u64 = 4096;
/// Keep at most about one segment of each partition locally.
const LOCAL_RETENTION_BYTES: u64 = 4096;
const BATCH: usize = 10;
const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    Tcp,
}

/// Writes the configuration file: `[tiering]` on `s3`, the topic opted in.
fn write_config(dir: &Path, s3: &S3Server) -> PathBuf {
    let text = format!(
        "[tiering]\n{}instance = \"{INSTANCE}\"\nperiod_ms = 20\ncache_mib = 4\n\n[[tiering.topics]]\nstream = \"{STREAM}\"\ntopic = \"{TOPIC}\"\nlocal_retention_bytes = {LOCAL_RETENTION_BYTES}\n",
        s3.tiering_store_toml()
    );
    let path = dir.join("sluice.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The `[tiering]` settings `sluice server --config <file>` would run with.
fn tiering_from(file: &Path) -> Option<sluice_server::config::TieringSettings> {
    let loaded = ServerConfig::load(
        &DiskStorage::new(),
        Some(file),
        &|_| None,
        &FlagOverrides::default(),
    )
    .unwrap();
    assert!(loaded.tiering.is_some(), "the file's [tiering] was read");
    loaded.tiering
}

/// Segment logs in the data directory (`<generation>-<base>.log`, any partition).
fn local_segment_logs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(sluice_server::layout::parse_segment_name)
                .is_some_and(|(_, _, ext)| ext == "log")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One sample of `/metrics` (`name value` lines, no labels).
async fn metric(api: &Api, name: &str) -> u64 {
    let r = api.get("/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or_else(
            || panic!("{name} not in /metrics:\n{}", r.text),
            |v| v as u64,
        )
}

/// Polls `check` until it answers `Some`, failing after [`DEADLINE`] with `what`.
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn payload(round: &str, i: usize) -> String {
    // About 100 bytes: a batch of 10 is about half a segment.
    format!("{round}-{i:05}-{}", "x".repeat(88))
}

async fn send(client: &dyn Client, round: &str, range: std::ops::Range<usize>) -> Vec<String> {
    let s = Identifier::named(STREAM).unwrap();
    let t = Identifier::named(TOPIC).unwrap();
    let all: Vec<String> = range.map(|i| payload(round, i)).collect();
    for chunk in all.chunks(BATCH) {
        let mut messages: Vec<IggyMessage> = chunk
            .iter()
            .map(|p| {
                IggyMessage::builder()
                    .payload(p.clone().into())
                    .build()
                    .unwrap()
            })
            .collect();
        client
            .send_messages(&s, &t, &Partitioning::partition_id(0), &mut messages)
            .await
            .unwrap();
    }
    all
}

/// Every message of partition 0 from offset 0 on, polled by offset, `count` at a time.
async fn poll_all(client: &dyn Client, count: u32) -> Vec<(u64, String)> {
    poll_until_empty(client, "by-offset", count, false).await
}

/// A named consumer polling `Next` with auto-commit until nothing is left.
async fn consume_next(client: &dyn Client, name: &str) -> Vec<String> {
    let polled = poll_until_empty(client, name, 7, true).await;
    polled.into_iter().map(|(_, payload)| payload).collect()
}

/// Polls partition 0 as consumer `name`, `count` at a time, until a poll
/// comes back empty: `Next` with auto-commit (`next`), or by offset from 0.
async fn poll_until_empty(
    client: &dyn Client,
    name: &str,
    count: u32,
    next: bool,
) -> Vec<(u64, String)> {
    let s = Identifier::named(STREAM).unwrap();
    let t = Identifier::named(TOPIC).unwrap();
    let consumer = Consumer::new(Identifier::named(name).unwrap());
    let mut out: Vec<(u64, String)> = Vec::new();
    loop {
        let strategy = match out.last() {
            _ if next => PollingStrategy::next(),
            Some((offset, _)) => PollingStrategy::offset(offset + 1),
            None => PollingStrategy::offset(0),
        };
        let polled = client
            .poll_messages(&s, &t, Some(0), &consumer, &strategy, count, next)
            .await
            .unwrap();
        if polled.messages.is_empty() {
            return out;
        }
        for m in &polled.messages {
            out.push((
                m.header.offset,
                String::from_utf8(m.payload.to_vec()).unwrap(),
            ));
        }
    }
}

/// Keys of generation `g` in the bucket (any partition of this instance).
fn generation_keys(s3: &S3Server, g: u64) -> Vec<String> {
    let marker = format!("/g={g}/");
    s3.keys(INSTANCE)
        .into_iter()
        .filter(|k| k.contains(&marker))
        .collect()
}

/// Waits until every sealed segment has a recorded upload and the local disk holds no more
/// than local retention allows; returns the local segment logs then.
async fn wait_tiered(api: &Api, data: &Path, uploads_at_least: u64) -> Vec<PathBuf> {
    wait_for("segments uploaded and released", || async {
        let uploads = metric(api, "sluice_tier_uploads_total").await;
        let pending = metric(api, "sluice_tier_pending_uploads").await;
        let local = local_segment_logs(data);
        // The active segment, and at most one sealed one under a 4 KiB local retention.
        (uploads >= uploads_at_least && pending == 0 && local.len() <= 2).then_some(local)
    })
    .await
}

async fn scenario(transport: Transport) {
    // Given: s3s-fs with an empty bucket, and sluice started from a configuration file whose
    // [tiering] names it (store = "s3", plain http, a 20 ms period) and opts the topic in.
    let s3 = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tiering = tiering_from(&write_config(dir.path(), &s3));
    let server: RunningServer = start_server_with(&data, |c| c.tiering = tiering).await;
    let api = Api::login(&server).await;
    let client: Box<dyn Client> = match transport {
        Transport::Http => {
            Box::new(HttpClient::new(&format!("http://{}", server.local_addr)).unwrap())
        }
        Transport::Tcp => Box::new(sluice_testkit::tcp::sdk_client(&server).await),
    };
    let client = client.as_ref();
    client.login_user("iggy", "iggy").await.unwrap();

    // And: the tiered topic, created through the SDK with 4 KiB segments.
    client.create_stream(STREAM).await.unwrap();
    let s = Identifier::named(STREAM).unwrap();
    let t = Identifier::named(TOPIC).unwrap();
    client
        .create_topic(
            &s,
            TOPIC,
            &TopicCreateOptions {
                partitions_count: Some(1),
                segment_size: Some(IggyByteSize::from(SEGMENT_BYTES)),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();

    // When: 300 messages of about 100 bytes are sent (far more than local retention keeps).
    let sent = send(client, "first", 0..300).await;

    // Then: the sealed segments are uploaded (each a log and an index in the bucket) and
    // released: the data directory keeps fewer segment logs than the history has.
    let local = wait_tiered(&api, &data, 5).await;
    let remote_logs: Vec<String> = generation_keys(&s3, 0)
        .into_iter()
        .filter(|k| k.ends_with(".log"))
        .collect();
    assert!(remote_logs.len() >= 5, "{remote_logs:?}");
    assert!(
        local.len() < remote_logs.len(),
        "local {local:?}, remote {remote_logs:?}"
    );
    assert_eq!(metric(&api, "sluice_tier_failed_uploads_total").await, 0);

    // And: everything is polled back from offset 0, in order, the same payloads.
    let polled = poll_all(client, 37).await;
    let offsets: Vec<u64> = polled.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..300).collect::<Vec<u64>>());
    let payloads: Vec<String> = polled.into_iter().map(|(_, p)| p).collect();
    assert_eq!(payloads, sent);
    assert!(metric(&api, "sluice_tier_cache_misses_total").await > 0);
    // And: a `Next` consumer with auto-commit reads all of it, then nothing more.
    assert_eq!(consume_next(client, "reader").await, sent);
    assert!(consume_next(client, "reader").await.is_empty());

    // When: the topic is purged through the SDK.
    assert!(!generation_keys(&s3, 0).is_empty());
    client.purge_topic(&s, &t).await.unwrap();

    // Then: the bucket holds no object of the purged generation once its round applied.
    wait_for("the purged generation's objects deleted", || async {
        generation_keys(&s3, 0).is_empty().then_some(())
    })
    .await;
    assert!(poll_all(client, 100).await.is_empty());

    // When: new messages are sent and tiered in turn.
    let fresh = send(client, "second", 0..100).await;
    wait_for("the new generation uploaded", || async {
        (!generation_keys(&s3, 1).is_empty()).then_some(())
    })
    .await;
    wait_tiered(&api, &data, 6).await;

    // Then: only the new messages are served, from offset 0, part of them from the bucket.
    let polled = poll_all(client, 33).await;
    let offsets: Vec<u64> = polled.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..100).collect::<Vec<u64>>());
    assert_eq!(
        polled.into_iter().map(|(_, p)| p).collect::<Vec<_>>(),
        fresh
    );
    assert!(generation_keys(&s3, 0).is_empty());
    // And: no tiering obligation is left pending, none failed.
    let status = api.wait_until_no_obligation().await;
    assert_eq!(status.last().unwrap()["summary"]["pending"], 0);
    assert_eq!(metric(&api, "sluice_tier_remote_errors_total").await, 0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tiered_topic_on_s3_when_the_sdk_over_tcp_sends_polls_and_purges_then_the_bucket_serves_and_forgets_it()
 {
    scenario(Transport::Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tiered_topic_on_s3_when_the_sdk_over_http_sends_polls_and_purges_then_the_bucket_serves_and_forgets_it()
 {
    scenario(Transport::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_s3_store_that_ignores_conditional_creates_when_sluice_starts_then_it_refuses_naming_why()
 {
    // Given: s3s-fs behind a double that drops `If-None-Match` (a create-only put overwrites,
    // as garage does), named by the configuration file's [tiering].
    let s3 = S3Server::start_ignoring_conditional_creates();
    let dir = tempfile::tempdir().unwrap();
    let tiering = tiering_from(&write_config(dir.path(), &s3));

    // When: the server starts.
    let err = try_start_server_on(
        Arc::new(DiskStorage::new()),
        &dir.path().join("data"),
        |c| c.tiering = tiering,
    )
    .await
    .unwrap_err();

    // Then: it refuses, saying the store ignores conditional writes, and its probe object is
    // gone from the bucket.
    let ServerError::Tier(message) = &err else {
        panic!("expected a tier error, got {err:?}");
    };
    assert!(message.contains("ignores conditional writes"), "{message}");
    assert!(message.contains("_probe/create-"), "{message}");
    assert!(s3.keys(INSTANCE).is_empty(), "{:?}", s3.keys(INSTANCE));

    // And: the same file against the honest server starts.
    let honest = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let tiering = tiering_from(&write_config(dir.path(), &honest));
    let server = start_server_with(&dir.path().join("data"), |c| c.tiering = tiering).await;
    server.shutdown().await.unwrap();
}
