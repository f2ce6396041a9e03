//! End-to-end tests of the HTTP API with raw requests: the real server on an
//! ephemeral loopback port over a temporary data directory on disk.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use sluice_storage::{DurableStorage, Fault, FaultMode, OpKind, OpMatcher, SimConfig, SimStorage};
use sluice_testkit::http::{Api, start_server, start_server_on, start_server_with};
use std::path::Path;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_mid_history_when_the_topic_is_purged_then_poll_next_returns_the_fresh_history()
 {
    // Given a consumer that committed offset 2 of five messages.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    let sent = api
        .send_to(
            "orders",
            "events",
            &["old0", "old1", "old2", "old3", "old4"],
        )
        .await;
    assert_eq!(sent.status, 201, "{}", sent.text);
    assert_eq!(sent.headers["iggy-durability"], "replicated");
    assert_eq!(sent.headers["sluice-durability"], "buffered");
    let first = api
        .poll(
            "orders",
            "events",
            "consumer_id=1&kind=next&count=3&auto_commit=true",
        )
        .await;
    assert_eq!(first.iter().map(|m| m.0).collect::<Vec<_>>(), [0, 1, 2]);

    // When the topic is purged and two new messages arrive.
    let purge = api.delete("/streams/orders/topics/events/purge").await;
    assert_eq!(purge.status, 204, "{}", purge.text);
    assert_eq!(
        api.send_to("orders", "events", &["new0", "new1"])
            .await
            .status,
        201
    );

    // Then `next` starts the new history at 0: nothing new is skipped.
    let after = api
        .poll(
            "orders",
            "events",
            "consumer_id=1&kind=next&count=10&auto_commit=true",
        )
        .await;
    assert_eq!(
        after,
        vec![(0, "new0".to_string()), (1, "new1".to_string())]
    );

    // And the status endpoint shows the cleanup applied.
    let status = api
        .wait_until_applied("stream_id=orders&topic_id=events")
        .await;
    let row = &status["partitions"][0];
    assert_eq!(row["committed_generation"], 1);
    assert_eq!(row["obligation"]["generation"], 1);
    assert_eq!(row["obligation"]["stuck"], false);
    assert_eq!(status["summary"]["states"]["applied"], 1);
    assert!(status["summary"]["reconciler"]["passes"].as_u64().unwrap() >= 1);

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_no_valid_token_when_calling_the_api_then_every_route_but_ping_answers_401() {
    // Given a running server and a client without a token.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let anonymous = Api::new(&server);

    // When it calls /ping it gets pong; everything else is 401 with Iggy's body.
    let ping = anonymous.get("/ping").await;
    assert_eq!((ping.status, ping.text.as_str()), (200, "pong"));
    for path in ["/streams", "/status/purge", "/metrics", "/streams/0/topics"] {
        let r = anonymous.get(path).await;
        assert_eq!(r.status, 401, "{path}: {}", r.text);
        assert_eq!(r.error_code(), "unauthenticated");
    }
    let r = anonymous.post("/streams", json!({"name": "x"})).await;
    assert_eq!(r.status, 401);

    // Then a forged token is refused, a real one works, and logout revokes it.
    let mut forged = Api::new(&server);
    forged.token = Some("not-a-token".into());
    assert_eq!(forged.get("/streams").await.status, 401);
    let api = Api::login(&server).await;
    assert_eq!(api.get("/streams").await.status, 200);
    assert_eq!(api.delete("/users/logout").await.status, 204);
    assert_eq!(api.get("/streams").await.status, 401);

    // And a wrong password is refused (Iggy: 400 invalid_credentials).
    let bad = anonymous
        .post(
            "/users/login",
            json!({"username": "iggy", "password": "wrong"}),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.error_code(), "invalid_credentials");

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_file_pool_when_messages_flow_then_metrics_report_its_bound_and_counters() {
    // Given a server whose data files go through a pool of 2 descriptors,
    let dir = tempfile::tempdir().unwrap();
    let server = start_server_with(dir.path(), |c| c.files.max_open = Some(2)).await;
    let api = Api::login(&server).await;
    // when messages are sent and polled (a partition's segment and index
    // alone fill the bound),
    api.create_stream_and_topic("s", "t", 3).await;
    for _ in 0..3 {
        assert_eq!(api.send_to("s", "t", &["a", "b"]).await.status, 201);
    }
    assert_eq!(api.poll("s", "t", "count=10").await.len(), 6);

    // then /metrics reports the bound, what is open and every counter.
    let metrics = api.get("/metrics").await.text;
    assert!(metrics.contains("sluice_open_files_limit 2"), "{metrics}");
    for name in [
        "sluice_open_files ",
        "sluice_open_files_pinned ",
        "sluice_file_evictions_total ",
        "sluice_file_eviction_syncs_total ",
        "sluice_file_eviction_sync_failures_total ",
        "sluice_file_reopens_total ",
        "sluice_file_refusals_total 0",
    ] {
        assert!(metrics.contains(name), "{name} missing: {metrics}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_short_token_expiry_when_the_token_expires_then_it_is_refused() {
    // Given tokens that live one second.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server_with(dir.path(), |c| {
        c.auth.token_expiry = std::time::Duration::from_secs(1);
    })
    .await;
    let api = Api::login(&server).await;
    assert_eq!(api.get("/streams").await.status, 200);

    // When it has expired, then it is refused.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(api.get("/streams").await.status, 401);

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_malformed_requests_when_sent_then_each_gets_a_4xx_iggy_error_and_nothing_changes() {
    // Given a topic holding one message, and a small body limit.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server_with(dir.path(), |c| c.http.max_body_bytes = 64 * 1024).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    assert_eq!(api.send_to("orders", "events", &["keep"]).await.status, 201);
    let before = api.get("/streams/orders").await.text;
    let messages = "/streams/orders/topics/events/messages";

    // When malformed requests arrive, then each is a 4xx with Iggy's error body.
    let cases: Vec<(&str, sluice_testkit::http::Reply, u16)> = vec![
        (
            "bad JSON",
            api.post_raw("/streams", "application/json", b"{\"name\":".to_vec())
                .await,
            400,
        ),
        (
            "wrong type",
            api.post("/streams", json!({"name": 42})).await,
            400,
        ),
        (
            "unknown stream",
            api.get("/streams/nope/topics/events").await,
            404,
        ),
        (
            "negative count",
            api.get(&format!("{messages}?partition_id=0&kind=first&count=-1"))
                .await,
            400,
        ),
        (
            "huge count",
            api.get(&format!(
                "{messages}?partition_id=0&kind=first&count=99999999999"
            ))
            .await,
            400,
        ),
        (
            "unknown polling kind",
            api.get(&format!("{messages}?partition_id=0&kind=sideways"))
                .await,
            400,
        ),
        (
            "unknown partition",
            api.get(&format!("{messages}?partition_id=9&kind=first"))
                .await,
            404,
        ),
        (
            "invalid base64",
            api.post(
                messages,
                json!({"partitioning": {"kind": "balanced", "value": ""},
                       "messages": [{"payload": STANDARD.encode("fine")}, {"payload": "%%%"}]}),
            )
            .await,
            400,
        ),
        (
            "empty batch",
            api.post(
                messages,
                json!({"partitioning": {"kind": "balanced", "value": ""}, "messages": []}),
            )
            .await,
            400,
        ),
        (
            "oversized body",
            api.post(
                messages,
                json!({"partitioning": {"kind": "balanced", "value": ""},
                       "messages": [{"payload": STANDARD.encode(vec![b'x'; 128 * 1024])}]}),
            )
            .await,
            413,
        ),
        (
            "unknown topic option",
            api.post(
                "/streams/orders/topics",
                json!({"name": "t2", "partitions_count": 1, "options": {"fsync": "always"}}),
            )
            .await,
            400,
        ),
        (
            "unknown durability value",
            api.post(
                "/streams/orders/topics",
                json!({"name": "t3", "partitions_count": 1, "options": {"durability": "maybe"}}),
            )
            .await,
            400,
        ),
        (
            "too many partitions",
            api.post(
                "/streams/orders/topics",
                json!({"name": "t4", "partitions_count": 100000}),
            )
            .await,
            400,
        ),
        (
            "offset beyond the partition",
            api.put(
                "/streams/orders/topics/events/consumer-offsets",
                json!({"consumer_id": 1, "partition_id": 0, "offset": 5}),
            )
            .await,
            400,
        ),
        (
            "unknown status filter",
            api.get("/status/purge?state=sleeping").await,
            400,
        ),
        ("unknown route", api.get("/nowhere").await, 404),
        ("wrong method", api.put("/ping", json!({})).await, 405),
    ];
    for (what, reply, status) in &cases {
        assert_eq!(reply.status, *status, "{what}: {}", reply.text);
        let code = reply.error_code();
        assert!(!code.is_empty(), "{what}");
    }
    let named = &cases[10].1.json();
    assert!(
        named["reason"].as_str().unwrap().contains("fsync"),
        "{named}"
    );
    assert_eq!(cases[13].1.error_code(), "invalid_offset");

    // Then nothing changed: same stream, one message, no new topics.
    assert_eq!(api.get("/streams/orders").await.text, before);
    let all = api
        .poll("orders", "events", "consumer_id=1&kind=first&count=100")
        .await;
    assert_eq!(all, vec![(0, "keep".to_string())]);
    // And the server still serves.
    assert_eq!(api.get("/ping").await.status, 200);

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_consumer_group_offsets_when_using_the_extension_then_both_offset_kinds_are_reachable()
 {
    // Given a topic with four messages and a consumer group.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    api.send_to("orders", "events", &["a", "b", "c", "d"]).await;
    let g = api
        .post(
            "/streams/orders/topics/events/consumer-groups",
            json!({"name": "billing"}),
        )
        .await;
    assert_eq!(g.status, 200, "{}", g.text);
    let gid = g.json()["id"].as_u64().unwrap();

    // When the group stores offset 1 and consumer 1 stores offset 2.
    let offsets = "/streams/orders/topics/events/consumer-offsets";
    let r = api
        .put(
            &format!("{offsets}?consumer_kind=consumer_group"),
            json!({"consumer_id": "billing", "partition_id": 0, "offset": 1}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let r = api
        .put(
            offsets,
            json!({"consumer_id": 1, "partition_id": 0, "offset": 2}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);

    // Then each kind reads back its own offset and polls `next` from it.
    let group = api
        .get(&format!(
            "{offsets}?consumer_kind=consumer_group&consumer_id={gid}&partition_id=0"
        ))
        .await;
    assert_eq!(group.json()["stored_offset"], 1);
    let consumer = api
        .get(&format!("{offsets}?consumer_id=1&partition_id=0"))
        .await;
    assert_eq!(consumer.json()["stored_offset"], 2);
    assert_eq!(consumer.json()["current_offset"], 3);
    let next = api
        .poll(
            "orders",
            "events",
            "consumer_kind=consumer_group&consumer_id=billing&kind=next&count=1",
        )
        .await;
    assert_eq!(next, vec![(2, "c".to_string())]);

    // And deleting the consumer's offset leaves the group's alone.
    assert_eq!(
        api.delete(&format!("{offsets}/1?partition_id=0"))
            .await
            .status,
        204
    );
    let gone = api
        .get(&format!("{offsets}?consumer_id=1&partition_id=0"))
        .await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.error_code(), "consumer_offset_not_found");
    let missing_group = api
        .get(&format!(
            "{offsets}?consumer_kind=consumer_group&consumer_id=nobody&partition_id=0"
        ))
        .await;
    assert_eq!(missing_group.status, 404);

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_graceful_restart_when_reopened_then_acknowledged_data_purges_and_options_survive()
{
    // Given a persisted topic with data, a purged stream, and a stored offset.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    api.create_stream_and_topic("audit", "log", 1).await;
    api.send_to("orders", "events", &["x", "y"]).await;
    api.send_to("audit", "log", &["gone"]).await;
    assert_eq!(api.delete("/streams/audit/purge").await.status, 204);
    api.put(
        "/streams/orders/topics/events/consumer-offsets",
        json!({"consumer_id": 3, "partition_id": 0, "offset": 0}),
    )
    .await;
    server.shutdown().await.unwrap();

    // When the server starts again on the same data directory.
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;

    // Then everything acknowledged is back and the purge held.
    assert_eq!(
        api.poll("orders", "events", "consumer_id=3&kind=next&count=10")
            .await,
        vec![(1, "y".to_string())]
    );
    assert!(
        api.poll("audit", "log", "consumer_id=1&kind=first&count=10")
            .await
            .is_empty()
    );
    let topic = api.get("/streams/orders/topics/events").await.json();
    assert_eq!(
        topic["options"]["consumer_offset_durability"]["value"],
        "persisted"
    );
    assert_eq!(topic["options"]["durability"]["value"], "buffered");
    assert_eq!(topic["messages_count"], 2);
    // (Iggy 0.10 clients, like the Iggy CLI 0.13, need replication_factor.)
    assert_eq!(topic["replication_factor"], 1);

    // And the metrics report requests and obligations.
    let metrics = api.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.text.contains("sluice_http_requests_total"),
        "{}",
        metrics.text
    );
    assert!(
        metrics
            .text
            .contains("sluice_purge_obligations{state=\"applied\"}")
    );
    assert!(
        metrics
            .text
            .contains("sluice_reconciler_pass_duration_seconds")
    );

    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_failing_directory_sync_when_a_topic_is_purged_then_status_and_metrics_name_the_directory()
 {
    // Given a server on the simulator whose next sync of a `consumers/`
    // directory will fail.
    let sim = SimStorage::new(SimConfig::default());
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let server = start_server_on(storage, Path::new("/data"), |_| {}).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    assert_eq!(
        api.send_to("orders", "events", &["a", "b"]).await.status,
        201
    );
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/consumers"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );

    // When the topic is purged (the first cleanup attempt fails there; the
    // reconciler's retry succeeds).
    assert_eq!(
        api.delete("/streams/orders/topics/events/purge")
            .await
            .status,
        204
    );
    let status = api.wait_until_applied("stream_id=0").await;

    // Then the status endpoint counts the failure against `consumers` and the
    // attempts per directory kind...
    let r = &status["summary"]["reconciler"];
    assert_eq!(r["failures_by_site"]["consumers"], 1, "{r}");
    assert_eq!(r["failures_by_site"]["segments"], 0, "{r}");
    assert_eq!(r["failures_by_site"]["obligation"], 0, "{r}");
    assert_eq!(r["attempts"], 2, "{r}");
    // (the failed attempt reached `segments` and `consumers`, the retry all three)
    assert_eq!(r["attempts_by_dir"]["segments"], 2, "{r}");
    assert_eq!(r["attempts_by_dir"]["consumers"], 2, "{r}");
    assert_eq!(r["attempts_by_dir"]["groups"], 1, "{r}");
    // ...and so does /metrics.
    let metrics = api.get("/metrics").await.text;
    for line in [
        "sluice_purge_cleanup_site_failures_total{site=\"consumers\"} 1",
        "sluice_purge_cleanup_dir_attempts_total{dir=\"groups\"} 1",
        "sluice_purge_cleanup_dir_attempts_total{dir=\"consumers\"} 2",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in:\n{metrics}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_failing_directory_sync_when_a_topic_is_deleted_then_its_obligation_is_listed_until_done()
 {
    // Given a server on the simulator whose next sync of the stream's
    // `topics/` directory will fail.
    let sim = SimStorage::new(SimConfig::default());
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let server = start_server_on(storage, Path::new("/data"), |_| {}).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 2).await;
    assert_eq!(api.send_to("orders", "events", &["a"]).await.status, 201);
    sim.fail_when(
        OpMatcher::kind(OpKind::SyncDir).path_ends_with("/streams/0/topics"),
        Fault::io(FaultMode::Before),
        0,
        1,
    );

    // When the topic is deleted (acknowledged: the metadata commit is the
    // commit point), its cleanup's first sync fails.
    assert_eq!(
        api.delete("/streams/orders/topics/events").await.status,
        204
    );

    // Then /status/obligations lists a delete of topic 0/0 with the error
    // until the reconciler's retry makes the removal durable...
    let seen = api.wait_until_no_obligation().await;
    // (The first look may come before the failed attempt: the obligation is
    // listed from its commit on, its error once the attempt failed.)
    let first = seen
        .iter()
        .find(|s| s["obligations"][0]["last_error"].is_string())
        .unwrap_or_else(|| panic!("the failed attempt was never listed: {seen:?}"));
    assert_eq!(first["summary"]["by_kind"]["delete"], 1, "{first}");
    let row = &first["obligations"][0];
    assert_eq!(
        (
            row["kind"].as_str(),
            row["resource"].as_str(),
            row["stream_id"].as_u64(),
            row["topic_id"].as_u64(),
            row["state"].as_str(),
        ),
        (
            Some("delete"),
            Some("topic"),
            Some(0),
            Some(0),
            Some("requested")
        ),
        "{row}"
    );
    assert!(
        row["last_error"].as_str().unwrap().contains("injected"),
        "{row}"
    );
    assert_eq!(seen.last().unwrap()["obligations"], json!([]));
    // ...the files are gone durably, and /status/purge answers as before.
    assert!(
        !sim.durable_view()
            .keys()
            .any(|p| p.starts_with("/data/streams/0/topics/0")),
        "the deleted topic's files are still durable"
    );
    assert_eq!(api.get("/status/purge").await.status, 200);
    let bad = api.get("/status/obligations?kind=sleeping").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(
        bad.json()["reason"]
            .as_str()
            .unwrap()
            .contains("kind must be one of"),
        "{}",
        bad.text
    );
    server.shutdown().await.unwrap();
}

/// Every file under `dir` whose path ends with `suffix` (a test-only walk).
fn files_ending_with(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_partitions_count_near_u32_max_when_creating_partitions_then_a_400_iggy_error() {
    // Given a topic with one partition.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;

    // When partitions are added with counts whose sum with 1 overflows u32.
    for count in [u32::MAX, u32::MAX - 1] {
        let reply = api
            .post(
                "/streams/orders/topics/events/partitions",
                json!({"partitions_count": count}),
            )
            .await;
        // Then each is a 400 with Iggy's error body, and nothing changed.
        assert_eq!(reply.status, 400, "{count}: {}", reply.text);
        assert_eq!(reply.error_code(), "invalid_partitions_count");
    }
    let topic = api.get("/streams/orders/topics/events").await.json();
    assert_eq!(topic["partitions_count"], 1, "{topic}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_offset_file_holding_u64_max_when_polling_next_then_a_400_iggy_error() {
    use sluice_server::partition::offsets::{OFFSET_LAYOUT, OffsetRecord};
    // Given a stored offset whose file is then made to hold u64::MAX.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 1).await;
    assert_eq!(api.send_to("orders", "events", &["keep"]).await.status, 201);
    let partition = api
        .poll("orders", "events", "consumer_id=3&kind=first&count=1")
        .await;
    assert_eq!(partition.len(), 1);
    let r = api
        .put(
            "/streams/orders/topics/events/consumer-offsets",
            json!({"consumer_id": 3, "partition_id": 0, "offset": 0}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    server.shutdown().await.unwrap();
    let files = files_ending_with(dir.path(), "/consumers/3");
    assert_eq!(files.len(), 1, "{files:?}");
    let mut bytes = vec![0u8; OFFSET_LAYOUT.slot_offset(1) as usize];
    let record = OffsetRecord {
        generation: 0,
        offset: Some(u64::MAX),
    };
    bytes.extend(OFFSET_LAYOUT.encode(1, &record).unwrap());
    std::fs::write(&files[0], bytes).unwrap();

    // When the server starts again and consumer 3 polls `next`.
    let server = start_server(dir.path()).await;
    let api = Api::login(&server).await;
    let reply = api
        .get("/streams/orders/topics/events/messages?partition_id=0&consumer_id=3&kind=next&count=10")
        .await;

    // Then a 400 with Iggy's error body, and the server still serves.
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.error_code(), "invalid_offset");
    assert_eq!(
        api.poll("orders", "events", "consumer_id=1&kind=first&count=10")
            .await,
        vec![(0, "keep".to_string())]
    );
    server.shutdown().await.unwrap();
}

/// Creates topic `t` in stream `orders` with 4 KiB segments and the given
/// retention (Iggy's wire values: microseconds, bytes).
async fn create_retained_topic(api: &Api, t: &str, message_expiry: u64, max_topic_size: u64) {
    let r = api
        .post(
            "/streams/orders/topics",
            json!({
                "name": t,
                "partitions_count": 1,
                "compression_algorithm": "none",
                "message_expiry": message_expiry,
                "max_topic_size": max_topic_size,
                "options": {"durability": "persisted", "consumer_offset_durability": "persisted",
                            "segment_size": "4096"}
            }),
        )
        .await;
    assert_eq!(r.status, 200, "create topic: {}", r.text);
}

/// Waits (bounded, 10 s) until `First` on `t` starts at `offset`.
async fn wait_until_first_is(api: &Api, t: &str, offset: u64) {
    for _ in 0..500 {
        let first = api
            .poll("orders", t, "consumer_id=9&kind=first&count=1")
            .await;
        if first.first().map(|(o, _)| *o) == Some(offset) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("retention did not move {t}'s first offset to {offset} within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_retention_by_expiry_and_by_size_when_time_passes_then_old_segments_go_and_next_continues()
 {
    // Given a server on the simulator, topics `aged` (1 s expiry) and `capped`
    // (a 1-byte cap), each with 4 KiB segments, three messages of about
    // 4 KB (one segment each: the last is active), and consumer 1 at 0.
    let sim = SimStorage::new(SimConfig::default());
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let server = start_server_on(storage, Path::new("/data"), |_| {}).await;
    let api = Api::login(&server).await;
    assert_eq!(
        api.post("/streams", json!({"name": "orders"})).await.status,
        200
    );
    create_retained_topic(&api, "aged", 1_000_000, u64::MAX).await;
    create_retained_topic(&api, "capped", u64::MAX, 1).await;
    let bulk = "x".repeat(4000);
    for t in ["aged", "capped"] {
        for i in 0..3 {
            let payload = format!("{i}-{bulk}");
            assert_eq!(api.send_to("orders", t, &[&payload]).await.status, 201);
        }
        let r = api
            .put(
                &format!("/streams/orders/topics/{t}/consumer-offsets"),
                json!({"consumer": {"kind": "consumer", "id": 1}, "partition_id": 0, "offset": 0}),
            )
            .await;
        assert_eq!(r.status, 204, "store offset: {}", r.text);
    }

    // When the reconciler's periodic passes run (and, for `aged`, a second
    // passes), then the two sealed segments go and the active one stays.
    for t in ["aged", "capped"] {
        wait_until_first_is(&api, t, 2).await;
        let next = api
            .poll("orders", t, "consumer_id=1&kind=next&count=10")
            .await;
        assert_eq!(
            next.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
            [2],
            "{t}: Next from stored offset 0 continues at the mark"
        );
        let old = api
            .poll("orders", t, "consumer_id=9&kind=offset&value=0&count=10")
            .await;
        assert_eq!(old.len(), 1, "{t}: an offset poll below the mark");
        assert_eq!(old[0].0, 2);
        let topic = api.get(&format!("/streams/orders/topics/{t}")).await.json();
        assert_eq!(topic["messages_count"], 1, "{t}: {topic}");
    }
    // The removals become durable once the obligations are done, and
    // messages sent afterwards are served after the mark.
    api.wait_until_no_obligation().await;
    for topic in [0, 1] {
        let segments = format!("/data/streams/0/topics/{topic}/partitions/0/segments/");
        for view in [sim.cached_view(), sim.durable_view()] {
            let logs: Vec<&String> = view
                .keys()
                .filter(|p| p.starts_with(&segments) && p.ends_with(".log"))
                .collect();
            assert_eq!(logs.len(), 1, "topic {topic}: {logs:?}");
        }
    }
    assert_eq!(api.send_to("orders", "aged", &["later"]).await.status, 201);
    let next = api
        .poll("orders", "aged", "consumer_id=1&kind=next&count=10")
        .await;
    // "later" does not fit the 4 KiB segment of message 2, so it seals that
    // segment; message 2 is older than the 1 s expiry by now, and a periodic
    // pass between the send and the poll may already have expired it.
    let next: Vec<u64> = next.iter().map(|(o, _)| *o).collect();
    assert!(
        next == [2, 3] || next == [3],
        "Next after the mark: {next:?}"
    );
    let metrics = api.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_hour_long_reconciler_period_when_a_topic_is_purged_then_its_cleanup_starts_at_once()
 {
    // Given a server whose reconciler would wait an hour between passes,
    // with a topic holding messages,
    let sim = SimStorage::new(SimConfig::default());
    let storage: Arc<dyn DurableStorage> = Arc::new(sim.clone());
    let server = start_server_on(storage, Path::new("/data"), |c| {
        c.reconciler.period = std::time::Duration::from_secs(3600);
    })
    .await;
    let api = Api::login(&server).await;
    api.create_stream_and_topic("orders", "events", 2).await;
    assert_eq!(
        api.send_to("orders", "events", &["a", "b"]).await.status,
        201
    );
    let old_segments = || {
        sim.durable_view()
            .keys()
            .filter(|p| p.contains("/segments/00000000000000000000-"))
            .count()
    };
    // (the first period's pass runs at start-up; let it go by)
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;

    // When the topic is purged (answered at its commit point),
    assert_eq!(
        api.delete("/streams/orders/topics/events/purge")
            .await
            .status,
        204
    );

    // then the commit wakes the reconciler: the obligations drain long
    // before any period would have run a pass, and the old segments are
    // durably gone.
    let seen = api.wait_until_no_obligation().await;
    assert_eq!(seen.last().unwrap()["obligations"], json!([]));
    assert_eq!(old_segments(), 0);
    server.shutdown().await.unwrap();
}
