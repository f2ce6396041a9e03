//! `sluice-faulty`: the `sluice` command line with its test faults compiled
//! in, for tests that must show a broken server gets caught (ADR 0014).
//!
//! Invariant: this is the only binary in which `SLUICE_TEST_NAIVE_PURGE=1`,
//! `SLUICE_TEST_NOOP_DIR_SYNC=1` and `SLUICE_TEST_NAIVE_USERS_SAVE=1` take
//! effect; the shipped `sluice` refuses them. Its dependencies on
//! `sluice-server` and `sluice-storage` exist only to carry those features:
//! the code is `sluice_cli`'s.

// Linked for their features alone (naive-purge, naive-users-save,
// test-faults).
use sluice_server as _;
use sluice_storage as _;

fn main() -> std::process::ExitCode {
    sluice_cli::main()
}
