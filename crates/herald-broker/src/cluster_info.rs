//! Cluster state, membership changes and readiness, as the broker reports them.

use std::collections::HashMap;
use std::sync::Arc;

use herald_domain::RaftGroupId;

use super::{
    BrokerError, BrokerResult, ClusterInfo, ErrorCode, NodeInfo, NodeShareInfo, PartitionMove,
    PartitionRef, Readiness, RebalanceInfo,
};
use crate::broker_core::Core;
use herald_domain::metadata::MetadataOutcome;

/// The cluster's nodes as this node sees them: their state and the partitions they lead,
/// joining and draining, this node's readiness and its raft and storage gauges.
#[derive(Clone)]
pub struct NodeService {
    core: Arc<Core>,
}

impl NodeService {
    pub(crate) fn new(core: Arc<Core>) -> NodeService {
        NodeService { core }
    }

    pub async fn cluster_info(&self) -> BrokerResult<ClusterInfo> {
        let cluster = self.core.cluster();
        let metadata = cluster.metadata().current();
        let partitions: HashMap<RaftGroupId, PartitionRef> = metadata
            .partitions()
            .map(|(topic, partition, assignment)| {
                let reference = PartitionRef {
                    topic: topic.name.clone(),
                    partition,
                };
                (assignment.group_id, reference)
            })
            .collect();
        let nodes = cluster
            .membership()
            .nodes_view()
            .into_iter()
            .map(|node| NodeInfo {
                id: node.id,
                http_addr: node.http_addr,
                raft_addr: node.raft_addr,
                status: node.status.to_string(),
                leader_of: node
                    .leads
                    .iter()
                    .filter_map(|group| partitions.get(group).cloned())
                    .collect(),
                wire_version: node.wire_version.map(|version| version.get()),
                zone: node.zone,
            })
            .collect();
        Ok(ClusterInfo {
            cluster_id: metadata.cluster_id.clone().unwrap_or_default(),
            nodes,
            metadata_leader: cluster.metadata().leader(),
            cluster_version: metadata.cluster_version.version().get(),
        })
    }

    /// Adds a node to the cluster (`POST /v1/cluster/nodes`); `true` when it was new.
    pub async fn add_node(
        &self,
        node_id: u64,
        http_addr: String,
        raft_addr: String,
    ) -> BrokerResult<(bool, NodeInfo)> {
        check_node_id(node_id)?;
        for (field, address) in [("http_addr", &http_addr), ("raft_addr", &raft_addr)] {
            let valid = address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid || address.len() > 255 {
                return Err(BrokerError::InvalidRequest(format!(
                    "{field} must be HOST:PORT, got '{address}'"
                )));
            }
        }
        let existed = self
            .core
            .cluster()
            .metadata()
            .current()
            .nodes
            .contains_key(&node_id);
        match self
            .core
            .cluster()
            .membership()
            .add_node(node_id, http_addr, raft_addr)
            .await?
        {
            MetadataOutcome::Done => {}
            MetadataOutcome::NodeExists => {
                return Err(BrokerError::Conflict {
                    code: ErrorCode::NodeExists,
                    message: format!(
                        "node id {node_id} is taken (by a node with other addresses, or by a removed node: ids are not reused), or another node has one of these addresses"
                    ),
                })
            }
            other => return Err(BrokerError::InvalidRequest(format!("{other:?}"))),
        }
        let node = self.node_info(node_id).await?;
        Ok((!existed, node))
    }

    /// Starts draining a node (`DELETE /v1/cluster/nodes/{id}`): its replicas move to other
    /// nodes, then it leaves the cluster.
    pub async fn drain_node(&self, node_id: u64) -> BrokerResult<NodeInfo> {
        check_node_id(node_id)?;
        match self.core.cluster().membership().drain_node(node_id).await? {
            MetadataOutcome::Done => self.node_info(node_id).await,
            MetadataOutcome::NodeNotFound => Err(BrokerError::NodeNotFound(node_id)),
            MetadataOutcome::Invalid(reason) => Err(BrokerError::Conflict {
                code: ErrorCode::CannotDrain,
                message: reason,
            }),
            other => Err(BrokerError::Internal(format!(
                "unexpected drain outcome {other:?}"
            ))),
        }
    }

    /// What a rebalance would move now (`GET /v1/cluster/rebalance`): nothing moves.
    pub fn rebalance_plan(&self) -> RebalanceInfo {
        let (plan, moving) = self.core.cluster().rebalance_plan();
        rebalance_info(plan, moving, false)
    }

    /// Starts a rebalance stepping from this node (`POST /v1/cluster/rebalance`); answers the
    /// plan as it stands.
    pub fn start_rebalance(&self) -> BrokerResult<RebalanceInfo> {
        let (plan, moving) = self.core.cluster.start_rebalance()?;
        let started = !plan.moves.is_empty();
        Ok(rebalance_info(plan, moving, started))
    }

    async fn node_info(&self, node_id: u64) -> BrokerResult<NodeInfo> {
        self.cluster_info()
            .await?
            .nodes
            .into_iter()
            .find(|node| node.id == node_id)
            .ok_or(BrokerError::NodeNotFound(node_id))
    }

    pub async fn readiness(&self) -> Readiness {
        let cluster = self.core.cluster();
        let mut reasons = Vec::new();
        // First, so a load balancer takes the node out of rotation while it hands off its
        // leadership, before it stops taking requests.
        if cluster.is_leaving() {
            reasons.push("this node is stopping: it is handing off its leadership".to_string());
        }
        if cluster.metadata().leader().is_none() {
            reasons.push("the metadata group has no leader".to_string());
        }
        if !cluster.membership().is_registered() {
            reasons.push("this node is not (yet) part of the cluster metadata".to_string());
        }
        let metadata = cluster.metadata().current();
        for topic in metadata.topics.values() {
            for (index, assignment) in topic.partitions.iter().enumerate() {
                if !assignment.replicas.contains(&cluster.node_id()) {
                    continue;
                }
                match cluster.replicas().get(assignment.group_id) {
                    Some(replica) if replica.leader().is_some() => {}
                    Some(_) => reasons.push(format!("{}/{index} has no leader", topic.name)),
                    None => reasons.push(format!("{}/{index} is not started", topic.name)),
                }
            }
        }
        // Reads, consumer groups and admin go on: the node stays ready, and says what it
        // refuses.
        let warnings = cluster
            .disk_full()
            .map(|full| format!("{full}: produce requests are refused (507 insufficient_storage)"))
            .into_iter()
            .collect();
        Readiness {
            ready: reasons.is_empty(),
            reasons,
            warnings,
        }
    }
}

/// Node ids are 1 to `i64::MAX`: they travel as JSON numbers, which many clients read as
/// signed 64-bit integers.
fn check_node_id(node_id: u64) -> BrokerResult<()> {
    if node_id == 0 || node_id > i64::MAX as u64 {
        return Err(BrokerError::InvalidRequest(format!(
            "node ids are 1 to {}, got {node_id}",
            i64::MAX
        )));
    }
    Ok(())
}

impl NodeService {
    /// Every local raft group's role, term, indexes and (on its leader) follower lag.
    pub fn raft_statuses(&self) -> Vec<crate::node_gauges::GroupRaftStatus> {
        self.core.cluster().raft_statuses()
    }

    /// Disk use, compaction debt and write stalls of this node's storage.
    pub fn storage_gauges(&self) -> crate::node_gauges::StorageGauges {
        self.core.cluster().storage_gauges()
    }
}

fn rebalance_info(
    plan: herald_cluster::RebalancePlan,
    moving: usize,
    started: bool,
) -> RebalanceInfo {
    RebalanceInfo {
        moves: plan
            .moves
            .into_iter()
            .map(|planned| PartitionMove {
                copies_data: planned.copies_data(),
                topic: planned.topic,
                partition: planned.partition,
                replicas_before: planned.from,
                replicas_after: planned.to,
            })
            .collect(),
        nodes: plan
            .nodes
            .into_iter()
            .map(|share| NodeShareInfo {
                node_id: share.node_id,
                replicas_before: share.replicas_before,
                replicas_after: share.replicas_after,
                leaders_before: share.leaders_before,
                leaders_after: share.leaders_after,
            })
            .collect(),
        moving,
        started,
    }
}
