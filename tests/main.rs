//! The integration suites of sluice, compiled as one test binary
//! (`integration`): a module per suite, each in its own file next to this
//! one, the shared fixtures in `sluice-testkit`, the insta snapshots in
//! `tests/snapshots/` (docs/adr/0014-one-test-kit.md).
//!
//! One binary instead of one per suite: the fixtures compile once, the
//! workspace lints apply, and the suites share the test harness's threads.
//! Invariant: a suite keeps no process-wide state another suite could see
//! (the teeth switches are per thread; the decoder fuzzing's allocator only
//! records per-thread sizes), so suites may run in any order in parallel.
//! Select one suite with a filter: `cargo test -p sluice-integration -- corruption::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cleanup_concurrency;
mod corruption;
mod deletion_regression;
mod deletion_snapshots;
mod disk_full;
mod engine_durability;
mod engine_polling;
mod engine_recovery;
mod file_pool;
mod fuzz_decoders;
mod fuzz_http;
mod http_api;
mod iggy_app;
mod iggy_groups;
mod iggy_sdk;
mod iggy_users;
mod incarnations;
mod membership_proptest;
mod purge_proptest;
mod purge_regression;
mod purge_snapshots;
mod retention_regression;
mod retention_snapshots;
mod send_many;
mod sim_explore;
mod sim_teeth;
mod storage_differential;
mod storage_model;
mod storage_sim_semantics;
mod tcp_cleanup;
mod tcp_codec;
mod tcp_fuzz;
mod tcp_purge;
mod tidy;
mod tiering;
mod tiering_e2e;
mod tls;
