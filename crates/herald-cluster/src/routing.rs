//! Where requests go: the leader of a partition as this node knows it (its own replica's
//! view, else the gossip), and what `GET /v1/topics` and `GET /v1/cluster` show.

use herald_domain::RaftGroupId;
use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{Cluster, ClusterError, NodeView, PartitionState, Route};
use herald_raft::Watermarks;
use herald_rpc::RpcError;

impl Cluster {
    /// Sends a request of `service` to another node.
    pub async fn call_node(
        &self,
        node: u64,
        service: herald_rpc::ServiceId,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, RpcError> {
        self.rpc
            .call(
                node,
                super::service::lane_of(service),
                service,
                body,
                timeout,
            )
            .await
    }

    /// Where requests for `group` go now, waiting until `deadline` for a leader.
    pub async fn route(
        &self,
        group: RaftGroupId,
        deadline: Instant,
    ) -> Result<Route, ClusterError> {
        loop {
            if let Some(route) = self.current_route(group) {
                return Ok(route);
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::NoLeader(group));
            }
            let pause = Duration::from_millis(25);
            match self.local_replica(group) {
                Some(replica) => {
                    let _ = tokio::time::timeout_at(
                        deadline.min(Instant::now() + pause * 8),
                        replica.wait_for_leader(),
                    )
                    .await;
                }
                None => tokio::time::sleep(pause.min(deadline - Instant::now())).await,
            }
        }
    }

    fn current_route(&self, group: RaftGroupId) -> Option<Route> {
        if let Some(replica) = self.local_replica(group) {
            return match replica.leader() {
                Some(leader) if leader == self.node_id => Some(Route::Local(replica)),
                Some(leader) => Some(Route::Remote(leader)),
                None => None,
            };
        }
        match self.leaders.get(group) {
            Some((leader, _)) if leader != self.node_id => Some(Route::Remote(leader)),
            _ => None,
        }
    }

    /// A forwarded request found that `node` does not lead `group` (any more).
    pub fn forget_leader(&self, group: RaftGroupId, node: u64) {
        self.leaders.forget(group, node);
    }

    /// The leader of `group`, its in-sync replicas and offsets, as known here: exact on the
    /// leader, otherwise from the leader's last ping (at most a second old) or a local replica.
    pub fn partition_state(&self, group: RaftGroupId) -> PartitionState {
        let local = self.local_replica(group);
        if let Some(replica) = &local {
            if let Some(report) = replica.leader_report() {
                return PartitionState {
                    leader: Some(self.node_id),
                    in_sync: report.in_sync,
                    watermarks: replica.watermarks(),
                };
            }
        }
        if let Some((leader, leadership)) = self.leaders.get(group) {
            let gossiped = Watermarks {
                log_start_offset: leadership.log_start_offset,
                high_watermark: leadership.high_watermark,
            };
            let local_marks = local.as_ref().map(|replica| replica.watermarks());
            return PartitionState {
                leader: Some(leader),
                in_sync: leadership.in_sync,
                // A follower may have applied past the leader's last report.
                watermarks: match local_marks {
                    Some(marks) if marks.high_watermark > gossiped.high_watermark => marks,
                    _ => gossiped,
                },
            };
        }
        PartitionState {
            leader: local.as_ref().and_then(|replica| replica.leader()),
            in_sync: Vec::new(),
            watermarks: local
                .as_ref()
                .map(|replica| replica.watermarks())
                .unwrap_or_default(),
        }
    }

    /// The nodes with their status and what each leads.
    pub fn nodes_view(&self) -> Vec<NodeView> {
        let metadata = self.metadata();
        let mut leads: HashMap<u64, Vec<RaftGroupId>> = HashMap::new();
        for (group, leader) in self.leaders.leaders() {
            if !group.is_metadata() {
                leads.entry(leader).or_default().push(group);
            }
        }
        for replica in self.local_replicas() {
            if replica.is_leader() {
                let groups = leads.entry(self.node_id).or_default();
                if !groups.contains(&replica.group()) {
                    groups.push(replica.group());
                }
            }
        }
        metadata
            .nodes
            .iter()
            .map(|(&id, record)| NodeView {
                id,
                http_addr: record.http_addr.clone(),
                raft_addr: record.raft_addr.clone(),
                status: if record.draining {
                    "draining"
                } else if self.is_up(id) {
                    "up"
                } else {
                    "down"
                },
                leads: {
                    let mut groups = leads.remove(&id).unwrap_or_default();
                    groups.sort_unstable();
                    groups
                },
            })
            .collect()
    }
}
