//! Streams, topics, partitions and consumer groups, and their durable store.

mod model;
mod store;

pub use model::*;
pub use store::{LEGACY_ONE_BASED_VERSION, METADATA_VERSION, MetadataStore};
