//! `sluice status` against the real `sluice server` binary: started on an
//! ephemeral loopback port over a temporary data directory, a topic purged
//! over HTTP, then the table, the JSON, and the failures (wrong password,
//! nothing listening, usage errors) with their exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sluice_testkit::http::{ROOT_PASSWORD, ROOT_USER};
use sluice_testkit::process::{Launch, Server, command};

fn sluice() -> Command {
    command(env!("CARGO_BIN_EXE_sluice"))
}

/// Starts the shipped `sluice server` with `iggy`/`iggy`.
fn spawn(data_dir: &Path) -> Server {
    Launch::server(env!("CARGO_BIN_EXE_sluice"), data_dir)
        .default_root()
        .start()
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

/// Creates orders/events, sends a message, purges the topic and waits until
/// its cleanup obligation is applied.
async fn purge_a_topic(server: &Server) {
    let api = server
        .api()
        .logged_in(ROOT_USER, ROOT_PASSWORD)
        .await
        .expect("root login");
    let r = api.post("/streams", json!({"name": "orders"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = api
        .post(
            "/streams/orders/topics",
            json!({"name": "events", "partitions_count": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = api
        .post(
            "/streams/orders/topics/events/messages",
            json!({"partitioning": {"kind": "balanced", "value": ""},
                   "messages": [{"payload": STANDARD.encode("hello")}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = api.delete("/streams/orders/topics/events/purge").await;
    assert_eq!(r.status, 204, "{}", r.text);
    api.wait_until_applied("stream_id=orders").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_purged_topic_when_running_sluice_status_then_the_table_and_the_json_show_it_applied()
 {
    // Given a server whose only partition was purged and cleaned up.
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let base = server.base().to_string();
    purge_a_topic(&server).await;

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

    // And --obligations shows every pending cleanup obligation: none once
    // the purge applied, and a deleted topic's until its cleanup is done.
    let out = status(&[
        "--url",
        &base,
        "--with-default-root-credentials",
        "--obligations",
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "pending: 0 (delete 0, purge 0, remote_deletion 0, remote_upload 0, retention 0)"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("(nothing pending)\n"), "{stdout}");
    let out = status(&[
        "--url",
        &base,
        "--with-default-root-credentials",
        "--obligations",
        "--kind",
        "delete",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let body: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(body["summary"]["by_kind"], json!({"delete": 0}), "{body}");

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
