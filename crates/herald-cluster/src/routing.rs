//! Where requests go: the leader of a partition as this node knows it (its own replica's
//! view, else the gossip), and the partition state `GET /v1/topics` shows.

use herald_domain::RaftGroupId;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::gossip::LeaderMap;
use super::replicas::LocalReplicas;
use super::{ClusterError, PartitionState, Route};
use herald_raft::Watermarks;
use herald_rpc::{RpcClient, RpcError};

/// Routes to partition leaders: this node's own replicas know their leader; for the others,
/// the leaders other nodes report in their pings (`gossip`).
pub struct Routing {
    node_id: u64,
    leaders: LeaderMap,
    replicas: Arc<LocalReplicas>,
    rpc: RpcClient,
}

impl Routing {
    pub(crate) fn new(node_id: u64, replicas: Arc<LocalReplicas>, rpc: RpcClient) -> Routing {
        Routing {
            node_id,
            leaders: LeaderMap::default(),
            replicas,
            rpc,
        }
    }

    /// The leaders other nodes reported, for the loops that feed and read it.
    pub(crate) fn leader_map(&self) -> &LeaderMap {
        &self.leaders
    }

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
            match self.replicas.get(group) {
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
        if let Some(replica) = self.replicas.get(group) {
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
        let local = self.replicas.get(group);
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
}
