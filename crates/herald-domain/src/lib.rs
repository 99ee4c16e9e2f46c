//! Pure domain types: names, records, the stored batch layout, partitioning, topic config.
//! Nothing here does I/O.

pub mod auth;
pub mod batch;
pub mod groups;
pub mod metadata;
pub mod names;
pub mod partitioner;
pub mod producers;
pub mod raft_group;
pub mod record;
pub mod redrive;
pub mod replica_moves;
pub mod schemas;
pub mod subscriptions;
pub mod topic;
pub mod urls;
pub mod wire_version;
pub mod zones;

#[cfg(test)]
mod wire_fixtures;

pub use batch::Compression;
pub use raft_group::RaftGroupId;
pub use record::{Record, RecordKey, RecordValue};
pub use topic::{CleanupPolicy, TopicConfig, TopicConfigPatch};
pub use wire_version::{ClusterVersion, Feature, WireVersion, WIRE_VERSION};
