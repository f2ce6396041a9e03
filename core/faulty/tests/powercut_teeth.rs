//! The power-cut soak's teeth (issue 14): with a fault compiled into
//! `sluice-faulty` and switched on by `--test-fault`, the soak's oracle must
//! find something wrong: the naive purge (Apache Iggy's order), directory
//! syncs that persist nothing, and the users file saved in place without a
//! sync (issue 29: the users step). The same soak without a fault, on the
//! shipped binary, is `core/cli/tests/powercut_soak.rs`.
//!
//! These tests need /dev/fuse and root; where FUSE is missing they fail and
//! say so.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use sluice_testkit::soak::{number_after, require_fuse, run};

const FAULTY: &str = env!("CARGO_BIN_EXE_sluice-faulty");

#[test]
fn given_the_naive_purge_when_soaking_with_power_cuts_and_failing_fsyncs_then_violations_are_reported()
 {
    require_fuse();
    let s = run(
        FAULTY,
        "--powercut --cycles 24 --seed 7 --clients 3 --max-ops 40 --fail-sync-percent 100 --test-fault naive-purge",
    );
    assert_eq!(
        s.status.code(),
        Some(1),
        "the naive purge went unnoticed ({:?})\nstdout:\n{}\nstderr:\n{}",
        s.status,
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
    let s = run(
        FAULTY,
        "--powercut --cycles 6 --seed 7 --clients 3 --max-ops 30 --test-fault noop-dir-sync",
    );
    assert_ne!(
        s.status.code(),
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

#[test]
fn given_the_users_file_saved_in_place_unsynced_when_soaking_with_power_cuts_then_users_violations_are_reported()
 {
    require_fuse();
    let s = run(
        FAULTY,
        "--powercut --cycles 8 --seed 7 --clients 3 --max-ops 30 --users-percent 40 --test-fault naive-users-save",
    );
    assert_eq!(
        s.status.code(),
        Some(1),
        "a users file saved in place went unnoticed ({:?})\nstdout:\n{}\nstderr:\n{}",
        s.status,
        s.stdout,
        s.stderr
    );
    assert!(
        s.stdout
            .contains("test fault in the server: NaiveUsersSave"),
        "{}",
        s.stdout
    );
    // What is found is about users: one lost or torn by a cut, or a users
    // file the next start cannot read.
    assert!(number_after(&s.stdout, "violations: ") > 0, "{}", s.stdout);
    assert!(
        s.stdout
            .lines()
            .any(|l| l.starts_with("  - ") && (l.contains("user ") || l.contains("users"))),
        "{}",
        s.stdout
    );
}
