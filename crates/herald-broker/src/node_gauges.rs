//! The node's raft and storage gauges, for the metrics endpoint (read at scrape time; see
//! `cluster::gauges`).

pub use herald_cluster::{GroupRaftStatus, ReplicaOffsets};
pub use herald_raft::RAFT_ROLES;
pub use herald_storage::StorageGauges;
