//! `sluice-sim`: the crash-point explorer (`sluice sim explore`) and the seeded
//! random simulator (`sluice sim run`). Both drive the production engine,
//! recovery and reconciler on `SimStorage`; nothing here re-implements them.
//!
//! A separate crate because it depends on the server (to drive it) and the
//! `sluice` binary depends on it (docs/adr/0007-simulator-and-cli-crates.md).

pub mod ack;
pub mod explore;
pub mod oracle;
pub mod run;
pub mod workload;
pub mod world;
