//! `sluice-server`: the engine (metadata, partitions, logs, offsets), its
//! recovery, and the `sluice` binary.
//!
//! Layering (docs/adr/0001-architecture.md): transports ([`http`], [`tcp`]) →
//! [`iggy`] → [`engine::Engine`] → [`partition::Partition`] →
//! `sluice_storage::DurableStorage`; other callers (the simulator, tests)
//! enter at the engine. Nothing in this crate touches `std::fs`; every byte
//! goes through the storage trait, so the simulator sees exactly what a disk
//! would. `tests/tidy.rs` holds these rules.

pub mod auth;
pub mod clock;
pub mod config;
pub mod crc;
pub(crate) mod datadir;
pub(crate) mod dirchain;
pub(crate) mod dirsync;
pub mod engine;
pub mod error;
pub(crate) mod fanout;
pub mod frame;
pub mod http;
pub mod identifier;
pub mod iggy;
pub mod layout;
pub mod membership;
pub mod metadata;
pub mod partition;
pub(crate) mod password;
pub(crate) mod persist;
pub mod server;
pub mod sessions;
pub mod slots;
pub mod tcp;
pub mod teeth;
pub mod tls;
pub mod users;

pub use engine::{
    CleanupRun, DataWrite, DeletePhase, Engine, EngineConfig, LocalRetention, MemberPoll,
    Partitioning, PurgeMode, ReconcilerWaker, RecoveryReport, SendRequest, Sent, TierFigures,
    TierPlan, TierReport, TieredTopic, TieringConfig,
};
pub use error::{EngineError, Result};
pub use identifier::Identifier;
pub use metadata::ResourceKey;
pub use partition::reconciler::ObligationKey;
