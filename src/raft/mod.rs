//! Raft: openraft's types, the log store and state machines over `storage`, and the running
//! groups (one for metadata, one per partition). This is the only module that imports
//! `openraft`.

mod codec;
mod error;
mod group;
mod log_store;
mod membership;
mod metadata;
mod metadata_replica;
mod network;
mod partition;
mod partition_reader;
mod partition_replica;
mod registry;
mod retention;
mod state_machine;
mod types;

pub use error::RaftLayerError;
pub use group::{Bootstrap, GroupContext, RaftTiming};
pub use log_store::LogStore;
pub use membership::{GroupMembers, LeaderReport, MembershipStep};
pub use metadata_replica::MetadataReplica;
pub use network::{RaftService, RAFT_SERVICE};
pub use partition::Watermarks;
pub use partition_reader::{ReadLimits, StoredBatch};
pub use partition_replica::PartitionReplica;
pub use registry::GroupRegistry;
pub use retention::RetentionPlan;
pub use types::NodeAddr;

#[cfg(test)]
mod storage_suite;
