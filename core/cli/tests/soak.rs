//! The kill -9 soak, CI-sized: the real `sluice` binary is SIGKILLed at
//! seeded moments under concurrent HTTP clients and restarted; the soak's
//! oracle must find no violation (docs/reliability.md, "Kill -9 soak").
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::process::Command;

#[test]
fn given_a_seeded_kill_schedule_when_the_server_is_sigkilled_under_load_then_nothing_acknowledged_is_lost_or_resurrected()
 {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("soak");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "soak",
            "--cycles",
            "12",
            "--seed",
            "7",
            "--clients",
            "3",
            "--max-ops",
            "30",
            "--data-dir",
        ])
        .arg(&work)
        .env_remove("RUST_LOG")
        .output()
        .expect("sluice soak runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = std::fs::read_to_string(work.join("server.log")).unwrap_or_default();
    let tail: String = log
        .lines()
        .rev()
        .take(60)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "soak failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log tail:\n{tail}",
        out.status
    );
    assert!(stdout.contains("cycles run: 12 ("), "{stdout}");
    assert!(stdout.contains("violations: 0"), "{stdout}");
    let acknowledged: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("operations acknowledged: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("an operations line");
    assert!(acknowledged > 0, "{stdout}");
}

#[test]
fn given_a_non_empty_work_directory_when_soaking_then_it_refuses_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious"), b"x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["soak", "--cycles", "1", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("sluice soak runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(dir.path().join("precious").exists());
}
