//! Raft: openraft's types, the log store and state machines over `storage`, and the running
//! groups (one for metadata, one per partition). This is the only module that imports
//! `openraft`.
//!
//! One folder per concept: [`engine`] is what every group shares (type configuration, log
//! store, generic state machine, network, start-up, membership), [`partition`] a partition's
//! group (offsets, dedup window, reads, retention, compaction) and [`metadata`] the metadata
//! group (topics, nodes, producer ids, consumer groups). The layers above use the re-exports
//! below.

mod engine;
mod metadata;
mod partition;

pub use engine::catch_up_throttle::{CatchUpThrottle, DEFAULT_CATCH_UP_BYTES_PER_SEC};
pub use engine::error::RaftLayerError;
pub use engine::group::{Bootstrap, GroupContext, RaftTiming};
pub use engine::heartbeats::{
    HeartbeatCoalescer, HEARTBEATS_COALESCED_TOTAL, HEARTBEAT_BATCHES_TOTAL,
};
pub use engine::leader_liveness::LeaderLiveness;
pub use engine::log_rank::LogRank;
pub use engine::log_store::LogStore;
pub use engine::membership::{GroupMembers, LeaderReport, MembershipStep};
pub use engine::network::{RaftService, RAFT_SERVICE};
pub use engine::quiescence::{QuiesceOffer, DORMANT_STARTS_TOTAL, QUIESCENCE_WAKES_TOTAL};
pub use engine::recent_entries::{
    node_bytes as recent_entries_bytes, NODE_BUDGET_BYTES as RECENT_ENTRIES_BUDGET_BYTES,
};
pub use engine::registry::GroupRegistry;
pub use engine::status::{RaftStatus, ROLES as RAFT_ROLES};
pub use engine::types::{CompactionPlan, DedupClaim, DedupLimits, NodeAddr};
pub use metadata::consumer_groups::ConsumerGroupsView;
pub use metadata::replica::MetadataReplica;
pub use metadata::topic_rows::move_topics_to_rows;
pub use partition::applier::{DeliveryView, Watermarks};
pub use partition::cleaner_state::CleanTally;
pub use partition::cleaning::CompactionCheck;
pub use partition::compaction::PassReport;
pub use partition::compaction_plan::PlanSettings;
pub use partition::once::OnceOutcome;
pub use partition::proposal::{PendingAppend, PendingOnce};
pub use partition::reader::{ReadLimits, StoredBatch};
pub use partition::replica::PartitionReplica;
pub use partition::retention::RetentionPlan;
pub use partition::subscriptions::{
    key_hash, DeadLetter, DeadLetterReason, DeliveryCommand, DeliveryCounts, DeliveryOutcome,
    LeaseFacts, LeaseRef, MessageFacts, SubscriptionPartition,
};
pub use partition::throttle::Throttle;
