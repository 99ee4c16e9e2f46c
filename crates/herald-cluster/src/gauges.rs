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
    /// A partition replica's view of its log (none for the metadata group).
    pub replica: Option<ReplicaOffsets>,
}

/// What a partition replica knows of its log, as the `herald_replica_*` gauges show it.
#[derive(Debug, Clone)]
pub struct ReplicaOffsets {
    pub topic: String,
    pub partition: u32,
    pub log_start_offset: u64,
    pub high_watermark: u64,
    /// The log start whose prefix this replica purged already.
    pub purged_offset: u64,
    /// The high watermark as of the newest checkpoint of the replica's state.
    pub checkpointed_offset: u64,
}

impl Cluster {
    /// The metadata group's progress on this node, then each local partition replica's, in
    /// topic and partition order.
    pub fn raft_statuses(&self) -> Vec<GroupRaftStatus> {
        let mut statuses = vec![GroupRaftStatus {
            raft_group: "metadata".to_string(),
            status: self.metadata.replica().raft_status(),
            replica: None,
        }];
        let state = self.metadata.current();
        for topic in state.topics.values() {
            for (index, assignment) in topic.partitions.iter().enumerate() {
                if let Some(replica) = self.replicas.get(assignment.group_id) {
                    // This node's own view: on a follower it may trail the leader's; retention
                    // moves every replica's log start at the same point of the log.
                    let marks = replica.watermarks();
                    statuses.push(GroupRaftStatus {
                        raft_group: format!("{}/{index}", topic.name),
                        status: replica.raft_status(),
                        replica: Some(ReplicaOffsets {
                            topic: topic.name.clone(),
                            partition: index as u32,
                            log_start_offset: marks.log_start_offset,
                            high_watermark: marks.high_watermark,
                            purged_offset: replica.purged_offset(),
                            checkpointed_offset: replica.checkpointed_offset(),
                        }),
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
