//! `sluice-remote`'s tests, one binary (one link of `object_store` and `s3s`):
//! - `contract`: the shared contract (`sluice_remote::contract::check`) and the
//!   conditional-create probe against `SimRemote`, `ObjectStoreRemote` on the local file
//!   system, and `ObjectStoreRemote` on `s3s-fs` served in-process over hyper;
//! - `sim`: `SimRemote`'s fault model (before, after, after-retried, late, halt and crash),
//!   its determinism, and a proptest against a naive model;
//! - `differential`: a proptest that runs random calls on `SimRemote` and on the local
//!   `ObjectStoreRemote` and requires identical answers and contents;
//! - `local`: what is specific to the real backend (the async-worker rule, foreign files).

// Fixtures and proptest bodies unwrap outside `#[test]` functions, as `tests/main.rs` does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract;
mod differential;
mod local;
mod sim;
