//! `sluice bench` stays runnable: the real binary with tiny sizes completes
//! and prints every figure with its reference and ratio. No timing is
//! asserted (benchmarks are not tests; issue 6).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_os = "linux")]

use std::process::Command;

use serde_json::Value;

const KEYS: &[&str] = &[
    "purge.partition_syncs",
    "purge.topic_wall_s",
    "purge.topic_server_paced_s",
    "purge.topic_vs_raw_unlinks_s",
    "purge.call_latency_s",
    "purge.other_topic_send_p99_ms",
    "purge.other_topic_poll_p99_ms",
    "purge.server_topic_wall_s",
    "recovery.startup_s",
    "recovery.peak_memory_mib",
    "reconciler.idle_pass_small_us",
    "reconciler.idle_pass_large_us",
    "offsets.buffered_per_s",
    "offsets.persisted_per_s",
    "messages.append_buffered_msgs_per_s",
    "messages.append_persisted_msgs_per_s",
    "messages.poll_msgs_per_s",
    "http.send_msgs_per_s",
    "http.send_p50_ms",
    "http.send_p99_ms",
    "http.poll_msgs_per_s",
    "log_recovery.large_vs_small_s",
    "log_recovery.bytes_read",
];

#[test]
fn bench_tiny_prints_every_figure_with_reference_and_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "--tiny", "--json", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "error")
        .output()
        .expect("sluice bench runs");
    assert!(
        out.status.success(),
        "sluice bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let figures = report["figures"].as_array().expect("figures");
    for key in KEYS {
        let f = figures
            .iter()
            .find(|f| f["key"] == *key)
            .unwrap_or_else(|| panic!("figure {key} missing"));
        for field in ["value", "reference", "ratio"] {
            assert!(f[field].is_number(), "{key}.{field} is not a number: {f}");
        }
    }
    // Every engine ran with the server's reconciler settings, and says so.
    assert_eq!(
        report["cleanup_concurrency"],
        sluice_server::config::DEFAULT_RECONCILER_CONCURRENCY,
        "{}",
        report["cleanup_concurrency"]
    );
    assert!(report["sizes"]["purge_partitions"].is_number());
    assert!(report["sizes"]["live_purge_partitions"].is_number());
    let breakdown = report["purge_sync_breakdown"]
        .as_array()
        .expect("breakdown");
    assert!(!breakdown.is_empty());
    // The benchmark directory is removed afterwards.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bench_tier_tiny_prints_the_tier_figures_with_reference_and_ratio() {
    // Given tiny sizes, when only the remote tier section runs (`--only tier`; `--tier` adds it
    // to a full run), then its three figures come with a reference and a ratio.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "--tiny", "--json", "--only", "tier", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "error")
        .output()
        .expect("sluice bench runs");
    assert!(
        out.status.success(),
        "sluice bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let figures = report["figures"].as_array().expect("figures");
    for key in [
        "tier.upload_mib_per_s",
        "tier.poll_cold_us",
        "tier.poll_warm_us",
    ] {
        let f = figures
            .iter()
            .find(|f| f["key"] == key)
            .unwrap_or_else(|| panic!("figure {key} missing"));
        for field in ["value", "reference", "ratio"] {
            assert!(f[field].is_number(), "{key}.{field} is not a number: {f}");
        }
    }
    assert_eq!(figures.len(), 3, "{figures:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
