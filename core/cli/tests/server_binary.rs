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

/// The segment files (`*.log`) under `dir`, with their length and the bytes
/// the file system has allocated to them.
fn segment_allocations(dir: &Path) -> Vec<(std::path::PathBuf, u64, u64)> {
    let disk = sluice_storage::DiskStorage::new();
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "log") {
                let (len, allocated) = disk.allocation(&path).unwrap();
                out.push((path, len, allocated));
            }
        }
    }
    out
}

/// Writes 12 MiB to one partition of a `buffered` topic over HTTP (1 MiB per
/// send), and returns that partition's segment: (length, allocated bytes),
/// read until `reserved` holds or `tries` reads 100 ms apart have passed (the
/// reservation runs on a thread of its own).
async fn grow_one_segment(
    api: &Api,
    dir: &Path,
    tries: u32,
    reserved: impl Fn(u64, u64) -> bool,
) -> (u64, u64) {
    let r = api.post("/streams", json!({"name": "s"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = api
        .post(
            "/streams/s/topics",
            json!({"name": "t", "partitions_count": 1}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let payload = STANDARD.encode(vec![7u8; 64 << 10]);
    for _ in 0..12 {
        let messages: Vec<Value> = (0..16).map(|_| json!({"payload": payload})).collect();
        let r = api
            .post(
                "/streams/s/topics/t/messages",
                json!({"partitioning": {"kind": "balanced", "value": ""}, "messages": messages}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let mut last = (0, 0);
    for _ in 0..tries {
        let segments = segment_allocations(dir);
        assert_eq!(segments.len(), 1, "{segments:?}");
        last = (segments[0].1, segments[0].2);
        if reserved(last.0, last.1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last.0 >= 12 << 20, "the segment holds {} bytes", last.0);
    last
}

/// `[files] reserve_blocks` reaches the shipped server: on (the default), a
/// segment grown past 8 MiB has blocks reserved past its end (ADR 0031);
/// off, it has none. Skipped where the file system reserves no blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_block_reservations_off_when_a_segment_grows_then_nothing_is_allocated_past_its_end()
{
    const RESERVED: u64 = 4 << 20;
    let probe_dir = tempfile::tempdir().unwrap();
    let disk = sluice_storage::DiskStorage::new();
    if !disk.reserves_blocks(probe_dir.path()).unwrap() {
        eprintln!("skipped: the file system reserves no blocks");
        return;
    }
    // Given the default: reservations on.
    let dir = tempfile::tempdir().unwrap();
    let server = Launch::server(env!("CARGO_BIN_EXE_sluice"), dir.path())
        .default_root()
        .env("SLUICE_FILES_RESERVE_BLOCKS", "true")
        .start();
    let api = login(&server).await;
    let reserved = |len, allocated| allocated >= len + RESERVED;
    let (len, allocated) = grow_one_segment(&api, dir.path(), 100, reserved).await;
    assert!(
        allocated >= len + RESERVED,
        "on: {allocated} bytes allocated for {len}"
    );
    server.kill();

    // When they are turned off.
    let dir = tempfile::tempdir().unwrap();
    let server = Launch::server(env!("CARGO_BIN_EXE_sluice"), dir.path())
        .default_root()
        .env("SLUICE_FILES_RESERVE_BLOCKS", "false")
        .start();
    let api = login(&server).await;
    // (Given 2 s, where the same reservation with them on is seen at once.)
    let (len, allocated) = grow_one_segment(&api, dir.path(), 20, reserved).await;
    // Then the segment's blocks are those of its bytes.
    assert!(
        allocated < len + (1 << 20),
        "off: {allocated} bytes allocated for {len}"
    );
    server.kill();
}
