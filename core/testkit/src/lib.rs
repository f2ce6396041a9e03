//! `sluice-testkit`: the fixtures every sluice test shares, in one crate
//! compiled once (ADR 0014).
//!
//! - [`engine`]: engines on `SimStorage` or the disk, the default subject
//!   (`orders`/`events`), messages and offsets, simulator inspection.
//! - [`http`]: the server started in-process, and [`http::Api`], the one HTTP
//!   client of the tests (login through `sluice_cli::login`, typed errors).
//! - [`process`]: the one launcher of the `sluice` binary (any build of it):
//!   readiness, SIGKILL, SIGTERM, cleanup on drop.
//! - [`tcp`]: the official SDK's `TcpClient` and a raw Iggy 0.11 connection.
//! - [`props`]: proptest settings (`SLUICE_PROPTEST_CASES`, no regression files).
//! - [`remote`]: a local object store, and `s3s-fs` served in-process (honest, or a double
//!   that ignores conditional creates), for `sluice-remote`'s tests and the tiering suites.
//! - [`soak`]: running `sluice soak` and reading its report.
//! - [`trace`]: storage traces rendered for snapshots (normalised paths).
//!
//! Invariants: nothing here turns a test feature on (no `naive-purge`, no
//! `teeth`, no `test-faults`), so depending on the kit never changes the
//! build under test. A fixture that cannot do its job panics with what went
//! wrong: that is a test failure, which is why `unwrap`/`expect` are allowed
//! in this crate alone outside the test targets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod engine;
pub mod http;
pub mod process;
pub mod props;
pub mod remote;
pub mod soak;
pub mod tcp;
pub mod trace;

/// Iggy's default root user, which every test server is started with
/// (unless a test names its own).
pub const ROOT_USER: &str = sluice_server::http::auth::DEFAULT_ROOT_USERNAME;
/// The default root user's password.
pub const ROOT_PASSWORD: &str = sluice_server::http::auth::DEFAULT_ROOT_PASSWORD;
