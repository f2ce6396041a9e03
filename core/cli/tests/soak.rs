//! The kill -9 soak, CI-sized: the real `sluice` binary is SIGKILLed at
//! seeded moments under concurrent HTTP clients and restarted, topics are
//! purged and (after every topic purge here) deleted and created again
//! under the same ids, and users and their tokens are changed (issue 29);
//! the soak's oracle must find no violation
//! (docs/reliability.md, "Kill -9 soak").
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use sluice_testkit::process::command;
use sluice_testkit::soak::{assert_users_step_ran, number_after, run};

#[test]
fn given_a_seeded_kill_schedule_when_the_server_is_sigkilled_under_load_then_nothing_acknowledged_is_lost_or_resurrected()
 {
    let s = run(
        env!("CARGO_BIN_EXE_sluice"),
        "--cycles 24 --seed 7 --clients 3 --max-ops 30 --recreate-percent 100",
    );
    s.assert_clean(24);
    let recreated = "re-creations under the same ids: ";
    assert!(number_after(&s.stdout, recreated) > 0, "{}", s.stdout);
    assert_users_step_ran(&s.stdout);
}

#[test]
fn given_a_non_empty_work_directory_when_soaking_then_it_refuses_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious"), b"x").unwrap();
    let out = command(env!("CARGO_BIN_EXE_sluice"))
        .args(["soak", "--cycles", "1", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("sluice soak runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(dir.path().join("precious").exists());
}

/// The users step's teeth run only on the test-only `sluice-faulty`
/// (core/faulty/tests): the shipped binary refuses to start with the fault
/// asked for, so a soak can never believe it ran with it.
#[test]
fn given_the_shipped_binary_when_asked_for_the_naive_users_save_then_the_soak_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = command(env!("CARGO_BIN_EXE_sluice"))
        .args(["soak", "--cycles", "1", "--test-fault", "naive-users-save"])
        .arg("--data-dir")
        .arg(dir.path().join("soak"))
        .output()
        .expect("sluice soak runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let log = std::fs::read_to_string(dir.path().join("soak/server.log")).unwrap();
    assert!(
        log.contains(
            "SLUICE_TEST_NAIVE_USERS_SAVE=1 needs a build with the naive-users-save feature"
        ),
        "{log}"
    );
}
