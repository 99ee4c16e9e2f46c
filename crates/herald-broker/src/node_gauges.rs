//! The node's raft and storage gauges, for the metrics endpoint (read at scrape time; see
//! `cluster::gauges`).

use super::Broker;

pub use herald_cluster::GroupRaftStatus;
pub use herald_raft::RAFT_ROLES;
pub use herald_storage::StorageGauges;

impl Broker {
    /// Every local raft group's role, term, indexes and (on its leader) follower lag.
    pub fn raft_statuses(&self) -> Vec<GroupRaftStatus> {
        self.cluster().raft_statuses()
    }

    /// Disk use, compaction debt and write stalls of this node's storage.
    pub fn storage_gauges(&self) -> StorageGauges {
        self.cluster().storage_gauges()
    }
}
