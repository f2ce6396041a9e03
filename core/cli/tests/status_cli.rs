//! `sluice status` against the real `sluice server` binary: started on an
//! ephemeral loopback port over a temporary data directory, a topic purged
//! over HTTP, then the table, the JSON, and the failures (wrong password,
//! nothing listening, usage errors) with their exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

const ROOT_VARS: [&str; 4] = [
    "SLUICE_ROOT_USERNAME",
    "SLUICE_ROOT_PASSWORD",
    "IGGY_ROOT_USERNAME",
    "IGGY_ROOT_PASSWORD",
];

/// The server process; killed when dropped, so a failed assertion leaves no
/// server behind.
struct Running {
    child: Child,
    base: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sluice() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    for var in ROOT_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("SLUICE_URL")
        .env_remove("SLUICE_CONFIG")
        .env("RUST_LOG", "warn");
    cmd
}

/// Starts `sluice server` and waits for its "listening" line.
fn spawn(data_dir: &Path) -> Running {
    let mut child = sluice()
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

/// Runs `sluice status <args>` to completion.
fn status(args: &[&str]) -> Output {
    sluice()
        .arg("status")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("sluice status runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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

/// Creates orders/events, sends a message, purges the topic and waits until
/// its cleanup obligation is applied.
async fn purge_a_topic(base: &str) {
    let client = reqwest::Client::new();
    let token = login(&client, base).await;
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
            .json(&json!({"name": "events", "partitions_count": 1})),
        &token,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        client
            .post(format!("{base}/streams/orders/topics/events/messages"))
            .json(&json!({"partitioning": {"kind": "balanced", "value": ""},
                          "messages": [{"payload": STANDARD.encode("hello")}]})),
        &token,
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(
        client.delete(format!("{base}/streams/orders/topics/events/purge")),
        &token,
    )
    .await;
    assert_eq!(status, 204);
    for _ in 0..500 {
        let (status, body) = call(
            client.get(format!("{base}/status/purge?stream_id=orders")),
            &token,
        )
        .await;
        assert_eq!(status, 200);
        if body["partitions"][0]["obligation"]["state"] == "applied" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("purge cleanup did not reach applied within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_purged_topic_when_running_sluice_status_then_the_table_and_the_json_show_it_applied()
 {
    // Given a server whose only partition was purged and cleaned up.
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let base = server.base.clone();
    purge_a_topic(&base).await;

    // When `sluice status` runs with the default credentials.
    let out = status(&["--url", &base, "--with-default-root-credentials"]);

    // Then it exits 0 with the summary and one applied row.
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains(
            "partitions: 1 (requested 0, files_deleted 0, dirs_synced 0, applied 1, none 0)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("stuck: 0  degraded: 0"), "{stdout}");
    assert!(stdout.contains("reconciler: "), "{stdout}");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("STREAM"))
        .expect("table header");
    assert!(header.contains("COMMITTED_GEN") && header.contains("LAST_ERROR"));
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("STREAM"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    // stream, topic, partition, committed and obligation generation, state;
    // then (after attempts) next attempt, stuck, degraded, last error.
    assert_eq!(
        rows[0][..6],
        ["0", "0", "0", "1", "1", "applied"],
        "{stdout}"
    );
    assert_eq!(rows[0][7..], ["-", "no", "no", "-"], "{stdout}");

    // And with filters the same row is selected; a state filter can empty it.
    let out = status(&[
        "--url",
        &base,
        "--with-default-root-credentials",
        "--stream-id",
        "orders",
        "--topic-id",
        "events",
        "--state",
        "applied",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("applied 1"));
    let out = status(&[
        "--url",
        &base,
        "--with-default-root-credentials",
        "--state",
        "requested",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("(no partitions match)"));

    // And --json prints the endpoint's JSON, summary included.
    let out = status(&["--url", &base, "--with-default-root-credentials", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let body: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let summary = &body["summary"];
    assert_eq!(summary["partitions"], 1);
    assert_eq!(summary["states"]["applied"], 1);
    assert_eq!(summary["stuck"], 0);
    assert_eq!(summary["degraded"], 0);
    for field in [
        "passes",
        "attempts",
        "failures",
        "pending",
        "last_pass_duration_ms",
        "period_ms",
    ] {
        assert!(
            summary["reconciler"].get(field).is_some(),
            "reconciler.{field} missing: {body}"
        );
    }
    assert_eq!(body["partitions"][0]["obligation"]["state"], "applied");

    // And the credentials can come from the environment, as for the server.
    let out = sluice()
        .args(["status", "--url", &base])
        .env("IGGY_ROOT_USERNAME", "iggy")
        .env("IGGY_ROOT_PASSWORD", "iggy")
        .output()
        .expect("sluice status runs");
    assert!(out.status.success(), "{out:?}");

    // When the password is wrong, then it exits 1 with a clear message that
    // does not repeat the password.
    let secret = "not-the-root-password";
    let out = status(&["--url", &base, "--username", "iggy", "--password", secret]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr.contains("invalid credentials"), "{stderr}");
    assert!(!stderr.contains(secret), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn given_no_server_or_bad_usage_when_running_sluice_status_then_exit_1_or_2() {
    // Nothing listens on a port that was just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = status(&["--url", &url, "--with-default-root-credentials"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr.contains("cannot connect"), "{stderr}");

    // Usage errors exit 2: a topic without its stream, no credentials at all,
    // a URL that is not http.
    let out = status(&["--url", &url, "--topic-id", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = status(&["--url", &url]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("no credentials"));
    let out = status(&["--url", "ftp://example", "--with-default-root-credentials"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
