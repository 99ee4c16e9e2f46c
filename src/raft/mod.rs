//! Raft: openraft's types, the log store and state machines over `storage`, and the running
//! groups (one for metadata, one per partition). This is the only module that imports
//! `openraft`.

mod cleaner_state;
mod codec;
mod compaction;
mod compaction_plan;
mod consumer_groups;
mod dedup;
mod dedup_rows;
mod error;
mod group;
mod log_store;
mod membership;
mod metadata;
mod metadata_replica;
mod network;
mod partition;
mod partition_cleaning;
mod partition_once;
mod partition_reader;
mod partition_replica;
mod registry;
mod retention;
mod state_machine;
mod throttle;
mod types;

pub use cleaner_state::CleanTally;
pub use compaction::PassReport;
pub use compaction_plan::PlanSettings;
pub use consumer_groups::ConsumerGroupsView;
pub use error::RaftLayerError;
pub use group::{Bootstrap, GroupContext, RaftTiming};
pub use log_store::LogStore;
pub use membership::{GroupMembers, LeaderReport, MembershipStep};
pub use metadata_replica::MetadataReplica;
pub use network::{RaftService, RAFT_SERVICE};
pub use partition::Watermarks;
pub use partition_cleaning::CompactionCheck;
pub use partition_once::OnceOutcome;
pub use partition_reader::{ReadLimits, StoredBatch};
pub use partition_replica::PartitionReplica;
pub use registry::GroupRegistry;
pub use retention::RetentionPlan;
pub use throttle::Throttle;
pub use types::{CompactionPlan, DedupClaim, DedupLimits, NodeAddr};

#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod dedup_tests;
#[cfg(test)]
mod storage_suite;
