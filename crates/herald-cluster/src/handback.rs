//! Handing leadership back to each partition's preferred replica (the first in its
//! assignment) once that replica is up and complete, so leaders stay balanced after a failed
//! node returns.
//!
//! "Complete" is more than raft's "matched the leader's log": the target must hold the whole
//! retained range of the partition (its log start at or below the leader's) and have applied
//! everything the leader had committed when asked, so its offsets, indexes and subscription
//! state are the leader's. A replica still replaying after a snapshot, or one that somehow
//! lacks retained batches, keeps following (issue 29: a replica restored from a snapshot
//! without the retained messages was made leader and answered 416 for acknowledged data).

use herald_domain::RaftGroupId;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use super::operation::{ask, ClusterOperation, ClusterOperationKind};
use super::service::ReplicaProgress;
use super::Cluster;
use herald_raft::PartitionReplica;

/// The least time between two leadership hand-backs of one group.
const TRANSFER_PAUSE: Duration = Duration::from_secs(10);
/// How long the target gets to report its progress.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(2);
/// How many groups this node hands back per pass (one a second): each is an election on the
/// target, and a node returning to a cluster of 10,000 partitions is the preferred replica of
/// thousands, which its peers otherwise handed back within a few seconds, overloading it
/// while it was still catching up.
const HANDBACKS_PER_PASS: usize = 100;

/// A replica's progress on a partition group: asked by the group's leader before it hands
/// leadership to it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReplicaProgressQuery {
    pub(crate) group: RaftGroupId,
}

impl ClusterOperation for ReplicaProgressQuery {
    const KIND: ClusterOperationKind = ClusterOperationKind::ReplicaProgress;
    /// None when the node has no replica of the group.
    type Reply = Option<ReplicaProgress>;

    async fn serve(self, cluster: &Cluster) -> Self::Reply {
        cluster.replica_progress(self.group)
    }
}

/// Why a replica may not take over leadership, if it may not.
pub(super) fn incomplete(
    target: &ReplicaProgress,
    leader_log_start: u64,
    leader_committed: u64,
) -> Option<String> {
    if target.log_start_offset > leader_log_start {
        return Some(format!(
            "its log starts at {}, after the partition's {leader_log_start}",
            target.log_start_offset
        ));
    }
    if target.applied_index < leader_committed {
        return Some(format!(
            "it applied up to raft index {}, the leader committed {leader_committed}",
            target.applied_index
        ));
    }
    None
}

impl Cluster {
    /// This node's progress on `group`, for a leader deciding whether this node may lead it.
    fn replica_progress(&self, group: RaftGroupId) -> Option<ReplicaProgress> {
        // A node handing off its leadership to stop must not be handed any, nor one still
        // starting its replicas: each hand-back costs an election, on a node that is busy.
        if self.is_leaving() || !self.started.load(Ordering::Relaxed) {
            return None;
        }
        let replica = self.replicas.get(group)?;
        let watermarks = replica.watermarks();
        Some(ReplicaProgress {
            log_start_offset: watermarks.log_start_offset,
            high_watermark: watermarks.high_watermark,
            applied_index: replica.raft_status().applied_index,
        })
    }

    /// On the leader of `replica`'s group: asks `target` for its progress and checks that it
    /// holds the whole retained range (see the module doc). Answers why not, if not.
    pub(super) async fn check_complete(
        &self,
        replica: &PartitionReplica,
        target: u64,
    ) -> Option<String> {
        // Read before asking: what the target reports afterwards must cover it.
        let committed = replica.raft_status().committed_index;
        let log_start = replica.watermarks().log_start_offset;
        let request = ReplicaProgressQuery {
            group: replica.group(),
        };
        match ask(
            &self.rpc,
            target,
            &request,
            Instant::now() + PROGRESS_TIMEOUT,
        )
        .await
        {
            Ok(Some(progress)) => incomplete(&progress, log_start, committed),
            Ok(None) => Some("it has no replica here, or is starting or stopping".into()),
            Err(error) => Some(format!("it did not answer: {error}")),
        }
    }

    /// Hands leadership back to each group's preferred replica once it is up, in sync and
    /// complete, at most [`HANDBACKS_PER_PASS`] groups.
    pub(super) async fn hand_back_leadership(&self) {
        if self.is_leaving() {
            return;
        }
        let state = self.metadata.current();
        let mut handed_back = 0;
        for topic in state.topics.values() {
            for assignment in &topic.partitions {
                if handed_back >= HANDBACKS_PER_PASS {
                    return;
                }
                let Some(&preferred) = assignment.replicas.first() else {
                    continue;
                };
                if preferred == self.node_id {
                    continue;
                }
                let Some(replica) = self.replicas.get(assignment.group_id) else {
                    continue;
                };
                let Some(report) = replica.leader_report() else {
                    continue;
                };
                if !report.in_sync.contains(&preferred) || !self.membership.is_up(preferred) {
                    continue;
                }
                let now = Instant::now();
                let recent = self
                    .transfers
                    .lock()
                    .get(&assignment.group_id)
                    .is_some_and(|at| now.duration_since(*at) < TRANSFER_PAUSE);
                if recent {
                    continue;
                }
                if let Some(reason) = self.check_complete(&replica, preferred).await {
                    tracing::info!(
                        group = assignment.group_id.get(),
                        to = preferred,
                        %reason,
                        "not handing leadership back yet: the preferred replica is incomplete"
                    );
                    metrics::counter!("herald_cluster_handbacks_deferred_total").increment(1);
                    continue;
                }
                self.transfers.lock().insert(assignment.group_id, now);
                tracing::info!(
                    group = assignment.group_id.get(),
                    to = preferred,
                    "handing leadership back to the preferred replica"
                );
                replica.transfer_leadership(preferred).await;
                handed_back += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(log_start_offset: u64, applied_index: u64) -> ReplicaProgress {
        ReplicaProgress {
            log_start_offset,
            high_watermark: 7_000,
            applied_index,
        }
    }

    #[test]
    fn only_a_replica_holding_the_whole_retained_range_may_lead() {
        assert_eq!(incomplete(&progress(5_700, 90), 5_700, 90), None);
        assert_eq!(incomplete(&progress(5_000, 95), 5_700, 90), None);
        // Restored from a snapshot without the retained batches (issue 29).
        assert!(incomplete(&progress(7_000, 90), 5_700, 90).is_some());
        // Still applying what the leader committed.
        assert!(incomplete(&progress(5_700, 80), 5_700, 90).is_some());
    }
}
