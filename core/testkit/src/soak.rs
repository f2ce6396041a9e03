//! Running `sluice soak` (any build of the binary) to completion and reading
//! its report: the kill -9 soak and the power-cut soak's tests share it.
//!
//! Invariants: every run gets a fresh work directory, removed afterwards;
//! what a failed assertion needs (stdout, stderr, the server log's tail) is
//! kept in the [`SoakRun`].

use std::ffi::OsStr;
use std::process::ExitStatus;

use crate::process::command;

/// How many lines of the server log a failure shows.
const LOG_TAIL_LINES: usize = 60;

/// A finished soak.
pub struct SoakRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The last lines of the servers' log (`<work>/server.log`).
    pub log_tail: String,
}

impl SoakRun {
    /// Asserts a clean soak of `cycles` cycles: it exited 0, ran every
    /// cycle, found no violation and had operations acknowledged.
    pub fn assert_clean(&self, cycles: u64) {
        assert!(
            self.status.success(),
            "soak failed ({:?})\nstdout:\n{}\nstderr:\n{}\nserver log tail:\n{}",
            self.status,
            self.stdout,
            self.stderr,
            self.log_tail
        );
        let out = &self.stdout;
        assert!(out.contains(&format!("cycles run: {cycles} (")), "{out}");
        assert_eq!(number_after(out, "violations: "), 0, "{out}");
        assert!(number_after(out, "operations acknowledged: ") > 0, "{out}");
    }
}

/// Runs `exe soak <args> --data-dir <fresh directory>` to completion
/// (`args` split at white space).
pub fn run(exe: impl AsRef<OsStr>, args: &str) -> SoakRun {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let work = dir.path().join("soak");
    let out = command(exe)
        .arg("soak")
        .args(args.split_whitespace())
        .arg("--data-dir")
        .arg(&work)
        .env_remove("RUST_LOG")
        .output()
        .expect("sluice soak runs");
    let log = std::fs::read_to_string(work.join("server.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    SoakRun {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        log_tail: lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"),
    }
}

/// Asserts that the users step ran (issue 29): users changes acknowledged,
/// users created and tokens created, and recovered users judged.
pub fn assert_users_step_ran(out: &str) {
    let users = "users operations acknowledged: ";
    assert!(number_after(out, users) > 0, "{out}");
    assert!(number_in(out, users, "users created ") > 0, "{out}");
    assert!(number_in(out, users, "tokens created ") > 0, "{out}");
    assert!(
        number_in(out, users, "verified after restarts ") > 0,
        "{out}"
    );
}

/// The number at the start of the line that starts with `prefix`.
pub fn number_after(text: &str, prefix: &str) -> u64 {
    number_in(text, prefix, "")
}

/// The number right after `marker` on the line starting with `prefix`.
pub fn number_in(text: &str, prefix: &str, marker: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|l| l.find(marker).map(|at| &l[at + marker.len()..]))
        .and_then(|l| l.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {marker:?} on a line starting with {prefix:?} in:\n{text}"))
}

/// Panics, saying why, where the power-cut file system cannot mount.
pub fn require_fuse() {
    if let Some(reason) = sluice_powercut::fuse_unavailable_reason() {
        panic!("the power-cut soak needs FUSE and it is not available here: {reason}");
    }
}
