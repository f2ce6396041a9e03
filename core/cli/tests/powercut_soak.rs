//! The power-cut soak, CI-sized (issue 14): the real `sluice` binary keeps its
//! data directory on the power-cut FUSE file system; every SIGKILL is
//! followed by a cut (full, or with seeded partial writeback), purges (of a
//! topic or of the whole stream, over a persisted and two buffered topics)
//! arm failing fsyncs on consumers/, groups/ or segments/, seeded windows
//! refuse growth (ENOSPC), and seeded cycles store an offset on an unsynced
//! buffered message before a full cut (ADR 0010). The oracle must find
//! nothing wrong with sluice, and must find something wrong with the naive
//! purge and with directory syncs that persist nothing.
//!
//! These tests need /dev/fuse and root; where FUSE is missing they fail and
//! say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::process::{Command, Output};

fn require_fuse() {
    if let Some(reason) = sluice_powercut::fuse_unavailable_reason() {
        panic!("the power-cut soak needs FUSE and it is not available here: {reason}");
    }
}

struct Soak {
    out: Output,
    stdout: String,
    log_tail: String,
    stderr: String,
}

fn soak(extra: &[&str]) -> Soak {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("soak");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["soak", "--powercut", "--data-dir"])
        .arg(&work)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("sluice soak runs");
    let log = std::fs::read_to_string(work.join("server.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let log_tail = lines[lines.len().saturating_sub(60)..].join("\n");
    Soak {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        out,
        log_tail,
    }
}

fn number_after(text: &str, prefix: &str) -> u64 {
    number_in(text, prefix, "")
}

/// The number right after `marker` on the line starting with `prefix`.
fn number_in(text: &str, prefix: &str, marker: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|l| l.find(marker).map(|at| &l[at + marker.len()..]))
        .and_then(|l| l.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {marker:?} on a line starting with {prefix:?} in:\n{text}"))
}

#[test]
fn given_a_power_cut_after_every_kill_when_soaking_on_the_fuse_mount_then_nothing_acknowledged_is_lost_or_resurrected()
 {
    require_fuse();
    let s = soak(&[
        "--cycles",
        "24",
        "--seed",
        "7",
        "--clients",
        "3",
        "--max-ops",
        "30",
    ]);
    assert!(
        s.out.status.success(),
        "soak failed ({:?})\nstdout:\n{}\nstderr:\n{}\nserver log tail:\n{}",
        s.out.status,
        s.stdout,
        s.stderr,
        s.log_tail
    );
    assert!(s.stdout.contains("cycles run: 24 ("), "{}", s.stdout);
    assert_eq!(number_after(&s.stdout, "violations: "), 0, "{}", s.stdout);
    // Every kill was followed by a cut, and the cuts really dropped changes.
    let cuts = number_after(&s.stdout, "power cuts: ");
    assert!(cuts >= 24, "{}", s.stdout);
    assert!(
        s.stdout.contains("unsynced changes dropped "),
        "{}",
        s.stdout
    );
    assert!(number_after(&s.stdout, "operations acknowledged: ") > 0);
    // The workload reached what the issue lists: buffered messages, stream
    // purges, ENOSPC windows, and ADR 0010's continuation with the message
    // sent after the loss returned by Next.
    let acked = "operations acknowledged: ";
    assert!(
        number_in(&s.stdout, acked, "messages, ") > 0,
        "{}",
        s.stdout
    );
    assert!(
        number_in(&s.stdout, acked, "stream purges ") > 0,
        "{}",
        s.stdout
    );
    assert!(
        number_after(&s.stdout, "enospc windows: ") > 0,
        "{}",
        s.stdout
    );
    // Small segments: logs rolled between verifications, so cuts met sealed
    // segments' tails and new segments' names, not one segment per log.
    let segments = "segments of 4096 bytes: ";
    assert!(number_after(&s.stdout, segments) > 0, "{}", s.stdout);
    assert!(
        number_in(&s.stdout, segments, "at most ") > 2,
        "{}",
        s.stdout
    );
    let adr = "recoveries that continue the log past a stored offset (ADR 0010): ";
    assert!(number_after(&s.stdout, adr) > 0, "{}", s.stdout);
    assert!(
        number_in(&s.stdout, adr, "the next message sent ") > 0,
        "{}",
        s.stdout
    );
}

#[test]
fn given_the_naive_purge_when_soaking_with_power_cuts_and_failing_fsyncs_then_violations_are_reported()
 {
    require_fuse();
    let s = soak(&[
        "--cycles",
        "24",
        "--seed",
        "7",
        "--clients",
        "3",
        "--max-ops",
        "40",
        "--fail-sync-percent",
        "100",
        "--test-fault",
        "naive-purge",
    ]);
    assert_eq!(
        s.out.status.code(),
        Some(1),
        "the naive purge went unnoticed ({:?})\nstdout:\n{}\nstderr:\n{}",
        s.out.status,
        s.stdout,
        s.stderr
    );
    assert!(
        s.stdout.contains("test fault in the server: NaivePurge"),
        "{}",
        s.stdout
    );
    assert!(number_after(&s.stdout, "violations: ") > 0, "{}", s.stdout);
}

#[test]
fn given_directory_syncs_that_persist_nothing_when_soaking_with_power_cuts_then_violations_are_reported()
 {
    require_fuse();
    let s = soak(&[
        "--cycles",
        "6",
        "--seed",
        "7",
        "--clients",
        "3",
        "--max-ops",
        "30",
        "--test-fault",
        "noop-dir-sync",
    ]);
    assert_ne!(
        s.out.status.code(),
        Some(0),
        "a no-op directory sync went unnoticed\nstdout:\n{}\nstderr:\n{}",
        s.stdout,
        s.stderr
    );
    assert!(
        s.stdout.contains("violations: ") && number_after(&s.stdout, "violations: ") > 0
            || s.stderr.contains("could not run"),
        "stdout:\n{}\nstderr:\n{}",
        s.stdout,
        s.stderr
    );
}
