//! The raft engine every group kind shares: openraft's type configuration, the log store over
//! the node's RocksDB, the generic state machine, the network, group start-up, leadership and
//! membership, and the registry of running groups.

pub(crate) mod catch_up_throttle;
pub(crate) mod checkpoints;
pub(crate) mod codec;
pub(crate) mod error;
pub(crate) mod group;
pub(crate) mod heartbeats;
pub(crate) mod leader_liveness;
pub(crate) mod log_rank;
pub(crate) mod log_store;
pub(crate) mod membership;
pub(crate) mod network;
pub(crate) mod quiescence;
pub(crate) mod recent_entries;
pub(crate) mod registry;
pub(crate) mod replication_backoff;
pub(crate) mod state_machine;
pub(crate) mod status;
pub(crate) mod stream_append;
pub(crate) mod types;

#[cfg(test)]
pub(crate) mod entry_fixtures;
#[cfg(test)]
mod message_fixtures;
#[cfg(test)]
mod storage_suite;
