//! The Iggy layer: what Apache Iggy's API means, independent of how it
//! travels. The HTTP API (`http/`) and the TCP binary protocol (`tcp/`) are
//! codecs over it: each decodes its requests, calls the engine through this
//! layer's state, and encodes the answer; the meaning (errors and their
//! codes, topic options, unit sentinels, consumers, header kinds, stats) is
//! defined here once.
//!
//! Layering (docs/adr/0001-architecture.md, "The Iggy layer"): transport →
//! `iggy` → engine → partition → storage.
//!
//! Invariants:
//! - Nothing here depends on a transport: no module of this layer imports
//!   from `http/` or `tcp/`, and neither transport imports from the other
//!   (`tests/tidy.rs` fails otherwise). What both transports need lives
//!   here, so a rule changes in one place and both answer it the same way.
//! - Every engine call of a request goes through `AppState` (`engine`,
//!   `engine_quick`, `send`: one engine lock), whichever transport it came by.

pub(crate) mod access;
pub mod clients;
pub(crate) mod consumer;
pub(crate) mod error;
pub(crate) mod header_kinds;
pub mod permissions;
pub(crate) mod sends;
pub(crate) mod state;
pub mod stats;
pub(crate) mod topic_options;
pub(crate) mod units;
pub(crate) mod users;

pub use state::{AppState, ServerInfo};
