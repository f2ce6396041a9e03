//! The power-cut soak, CI-sized (issue 14), on the shipped `sluice` binary:
//! its data directory is on the power-cut FUSE file system; every SIGKILL is
//! followed by a cut (full, or with seeded partial writeback), purges (of a
//! topic or of the whole stream, over a persisted and two buffered topics)
//! arm failing fsyncs on consumers/, groups/ or segments/, seeded windows
//! refuse growth (ENOSPC), seeded cycles store an offset on an unsynced
//! buffered message before a full cut (ADR 0010), and topic purges are
//! followed by the topic, or its last partitions, deleted and created again
//! under the same ids while the purge's cleanup may still run (issue 27;
//! every one of them here, so that each run has some), and users are
//! created, given permissions, deactivated, given passwords, deleted and
//! given personal access tokens (issue 29). The oracle must find nothing
//! wrong. That it does find the naive purge and no-op directory
//! syncs, and a users file saved in place, is shown on the test-only
//! `sluice-faulty` (core/faulty/tests).
//!
//! This test needs /dev/fuse and root; where FUSE is missing it fails and
//! says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use sluice_testkit::soak::{assert_users_step_ran, number_after, number_in, require_fuse, run};

#[test]
fn given_a_power_cut_after_every_kill_when_soaking_on_the_fuse_mount_then_nothing_acknowledged_is_lost_or_resurrected()
 {
    require_fuse();
    let s = run(
        env!("CARGO_BIN_EXE_sluice"),
        "--powercut --cycles 24 --seed 7 --clients 3 --max-ops 30 --recreate-percent 100",
    );
    s.assert_clean(24);
    // Every kill was followed by a cut, and the cuts really dropped changes.
    let cuts = number_after(&s.stdout, "power cuts: ");
    assert!(cuts >= 24, "{}", s.stdout);
    assert!(
        s.stdout.contains("unsynced changes dropped "),
        "{}",
        s.stdout
    );
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
    // Re-creations under the same ids were acknowledged, and their new
    // histories judged like any other.
    let recreated = "re-creations under the same ids: ";
    assert!(number_after(&s.stdout, recreated) > 0, "{}", s.stdout);
    // Users were changed (issue 29), every kind of change acknowledged,
    // and each recovered user judged whole, tokens included: the users step
    // cannot silently not run.
    assert_users_step_ran(&s.stdout);
    let adr = "recoveries that continue the log past a stored offset (ADR 0010): ";
    assert!(number_after(&s.stdout, adr) > 0, "{}", s.stdout);
    assert!(
        number_in(&s.stdout, adr, "the next message sent ") > 0,
        "{}",
        s.stdout
    );
}
