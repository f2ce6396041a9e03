//! The real `sluice` binary: started on an ephemeral loopback port over a
//! temporary data directory, killed with SIGKILL and restarted, then stopped
//! with SIGTERM. (Lives in this package so `CARGO_BIN_EXE_sluice` exists.)
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

struct Running {
    child: Child,
    base: String,
}

/// Starts `sluice server` and waits for its "listening" line.
fn spawn(data_dir: &Path) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "server",
            "--http-addr",
            "127.0.0.1:0",
            "--tcp-addr",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data_dir)
        .arg("--with-default-root-credentials")
        .env_remove("SLUICE_ROOT_USERNAME")
        .env_remove("SLUICE_ROOT_PASSWORD")
        .env_remove("IGGY_ROOT_USERNAME")
        .env_remove("IGGY_ROOT_PASSWORD")
        .env_remove("SLUICE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sluice starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("sluice printed its address before exiting")
            .expect("stdout line");
        if let Some(addr) = line.strip_prefix("sluice listening on ") {
            break addr.trim().to_string();
        }
    };
    Running { child, base }
}

async fn call(req: reqwest::RequestBuilder, token: &str) -> (u16, Value) {
    let r = req.bearer_auth(token).send().await.expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn login(client: &reqwest::Client, base: &str) -> String {
    let r: Value = client
        .post(format!("{base}/users/login"))
        .json(&json!({"username": "iggy", "password": "iggy"}))
        .send()
        .await
        .expect("login")
        .json()
        .await
        .expect("identity");
    r["access_token"]["token"]
        .as_str()
        .expect("token")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acknowledged_writes_when_the_binary_is_sigkilled_and_restarted_then_they_survive_and_sigterm_exits_0()
 {
    // Given a server that acknowledged messages and an offset.
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut server = spawn(dir.path());
    let base = server.base.clone();
    let token = login(&client, &base).await;
    let (status, _) = call(
        client
            .post(format!("{base}/streams"))
            .json(&json!({"name": "orders"})),
        &token,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        client
            .post(format!("{base}/streams/orders/topics"))
            .json(&json!({"name": "events", "partitions_count": 1,
                          "options": {"durability": "persisted", "consumer_offset_durability": "persisted"}})),
        &token,
    )
    .await;
    assert_eq!(status, 200);
    let messages: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|p| json!({"payload": STANDARD.encode(p)}))
        .collect();
    let (status, _) = call(
        client
            .post(format!("{base}/streams/orders/topics/events/messages"))
            .json(
                &json!({"partitioning": {"kind": "balanced", "value": ""}, "messages": messages}),
            ),
        &token,
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(
        client
            .put(format!(
                "{base}/streams/orders/topics/events/consumer-offsets"
            ))
            .json(&json!({"consumer_id": 1, "partition_id": 0, "offset": 0})),
        &token,
    )
    .await;
    assert_eq!(status, 204);

    // When it is killed with SIGKILL and started again.
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    let mut server = spawn(dir.path());
    let base = server.base.clone();
    let token = login(&client, &base).await;

    // Then the acknowledged messages and offset are back.
    let (status, polled) = call(
        client.get(format!(
            "{base}/streams/orders/topics/events/messages?consumer_id=1&partition_id=0&kind=next&count=10"
        )),
        &token,
    )
    .await;
    assert_eq!(status, 200);
    let offsets: Vec<u64> = polled["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["header"]["offset"].as_u64().expect("offset"))
        .collect();
    assert_eq!(offsets, [1, 2]);

    // And SIGTERM stops it gracefully with exit status 0.
    let pid = server.child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let mut exited = None;
    for _ in 0..100 {
        if let Some(status) = server.child.try_wait().expect("try_wait") {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = exited.unwrap_or_else(|| {
        let _ = server.child.kill();
        panic!("sluice did not exit within 5 s of SIGTERM");
    });
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn given_an_empty_data_directory_when_running_self_check_then_it_passes_and_leaves_no_stream() {
    // Given: an empty data directory.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    // When: `sluice self-check` writes, restarts and reads back on the disk.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
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
    let again = Command::new(env!("CARGO_BIN_EXE_sluice"))
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
