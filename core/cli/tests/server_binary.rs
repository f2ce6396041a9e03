//! The real `sluice` binary: started on an ephemeral loopback port over a
//! temporary data directory, killed with SIGKILL and restarted, then stopped
//! with SIGTERM. (Lives in this package so `CARGO_BIN_EXE_sluice` exists.)
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sluice_testkit::http::{Api, ROOT_PASSWORD, ROOT_USER};
use sluice_testkit::process::{Launch, Server, command};

/// Starts the shipped `sluice server` with `iggy`/`iggy`.
fn spawn(data_dir: &Path) -> Server {
    Launch::server(env!("CARGO_BIN_EXE_sluice"), data_dir)
        .default_root()
        .start()
}

async fn login(server: &Server) -> Api {
    server
        .api()
        .logged_in(ROOT_USER, ROOT_PASSWORD)
        .await
        .expect("root login")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acknowledged_writes_when_the_binary_is_sigkilled_and_restarted_then_they_survive_and_sigterm_exits_0()
 {
    // Given a server that acknowledged messages and an offset.
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let api = login(&server).await;
    let r = api.post("/streams", json!({"name": "orders"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = api
        .post(
            "/streams/orders/topics",
            json!({"name": "events", "partitions_count": 1,
                   "options": {"durability": "persisted", "consumer_offset_durability": "persisted"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let messages: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|p| json!({"payload": STANDARD.encode(p)}))
        .collect();
    let r = api
        .post(
            "/streams/orders/topics/events/messages",
            json!({"partitioning": {"kind": "balanced", "value": ""}, "messages": messages}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = api
        .put(
            "/streams/orders/topics/events/consumer-offsets",
            json!({"consumer_id": 1, "partition_id": 0, "offset": 0}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);

    // When it is killed with SIGKILL and started again.
    server.kill();
    let server = spawn(dir.path());
    let api = login(&server).await;

    // Then the acknowledged messages and offset are back.
    let r = api
        .get("/streams/orders/topics/events/messages?consumer_id=1&partition_id=0&kind=next&count=10")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let offsets: Vec<u64> = r.json()["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["header"]["offset"].as_u64().expect("offset"))
        .collect();
    assert_eq!(offsets, [1, 2]);

    // And SIGTERM stops it gracefully with exit status 0.
    let status = server.terminate(Duration::from_secs(5));
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn given_an_empty_data_directory_when_running_self_check_then_it_passes_and_leaves_no_stream() {
    // Given: an empty data directory.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    // When: `sluice self-check` writes, restarts and reads back on the disk.
    let out = command(env!("CARGO_BIN_EXE_sluice"))
        .args(["self-check", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();

    // Then: it passes, and a second run in the same directory does too (the
    // first one's stream was deleted, so its id is free again).
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("self-check passed"), "{stdout}");
    let again = command(env!("CARGO_BIN_EXE_sluice"))
        .args(["self-check", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// ADR 0021: the server turns transparent huge pages off for itself, so a
/// freed and reused span of memory faults back in 4 KiB at a time, not 2 MiB.
/// (`THP_enabled` is 0 when the process turned them off, or when the kernel
/// is built without them; a sysfs setting of `never` does not make it 0.)
#[test]
fn given_the_shipped_server_when_it_runs_then_transparent_huge_pages_are_off_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    server.kill();
    // Kernels before 5.0 do not report it; there is nothing to check then.
    if let Some(thp) = thp {
        assert_eq!(thp, "0", "THP_enabled of the server");
    }
}
