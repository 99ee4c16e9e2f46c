//! What this node reports of its raft groups and storage when metrics are scraped. Read at
//! scrape time rather than recorded, so a group that moved away or a deleted topic leaves no
//! stale series behind. Raft groups are labelled for operators: the metadata group as
//! `metadata`, a partition's as `<topic>/<partition>`.

use super::Cluster;
use herald_raft::RaftStatus;
use herald_storage::StorageGauges;

/// One local raft group's progress and its operator-facing name.
#[derive(Debug, Clone)]
pub struct GroupRaftStatus {
    /// `metadata`, or `<topic>/<partition>`.
    pub raft_group: String,
    pub status: RaftStatus,
}

impl Cluster {
    /// The metadata group's progress on this node, then each local partition replica's, in
    /// topic and partition order.
    pub fn raft_statuses(&self) -> Vec<GroupRaftStatus> {
        let mut statuses = vec![GroupRaftStatus {
            raft_group: "metadata".to_string(),
            status: self.metadata.replica().raft_status(),
        }];
        let state = self.metadata.current();
        for topic in state.topics.values() {
            for (index, assignment) in topic.partitions.iter().enumerate() {
                if let Some(replica) = self.replicas.get(assignment.group_id) {
                    statuses.push(GroupRaftStatus {
                        raft_group: format!("{}/{index}", topic.name),
                        status: replica.raft_status(),
                    });
                }
            }
        }
        statuses
    }

    /// The storage engine's gauges (disk use, compaction debt, write stalls).
    pub fn storage_gauges(&self) -> StorageGauges {
        self.context.store.gauges()
    }

    /// `Some` while this node's data directory is under its disk reserve: it takes no client
    /// data then.
    pub fn disk_full(&self) -> Option<herald_storage::DiskFull> {
        self.context.store.disk_full()
    }
}
