//! `GET` and `POST /v1/cluster/rebalance`: what a rebalance moves, and each node's share.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::broker::{NodeShareInfo, PartitionMove, RebalanceInfo};

/// A rebalance plan: the partitions whose replicas move, each node's share before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = RebalancePlan)]
pub struct RebalancePlanDto {
    /// Zone fixes first, then replica moves, then preferred-leader swaps.
    pub moves: Vec<PartitionMoveDto>,
    pub nodes: Vec<NodeShareDto>,
    /// Partitions still copying to new replicas from earlier steps.
    pub moving: usize,
    /// Whether the moves are being made (`POST` with a plan that has any); false for a dry
    /// run.
    pub started: bool,
}

/// One partition's replicas before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = PartitionMove)]
pub struct PartitionMoveDto {
    pub topic: String,
    pub partition: u32,
    /// The first replica is the preferred leader.
    pub replicas_before: Vec<u64>,
    pub replicas_after: Vec<u64>,
    /// False when only the order changes (a new preferred leader, no data copied).
    pub copies_data: bool,
}

/// A node's replicas and preferred leaderships, before and after the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = NodeShare)]
pub struct NodeShareDto {
    pub node_id: u64,
    pub replicas_before: usize,
    pub replicas_after: usize,
    pub leaders_before: usize,
    pub leaders_after: usize,
}

impl From<RebalanceInfo> for RebalancePlanDto {
    fn from(info: RebalanceInfo) -> Self {
        RebalancePlanDto {
            moves: info.moves.into_iter().map(PartitionMoveDto::from).collect(),
            nodes: info.nodes.into_iter().map(NodeShareDto::from).collect(),
            moving: info.moving,
            started: info.started,
        }
    }
}

impl From<PartitionMove> for PartitionMoveDto {
    fn from(moved: PartitionMove) -> Self {
        PartitionMoveDto {
            topic: moved.topic,
            partition: moved.partition,
            replicas_before: moved.replicas_before,
            replicas_after: moved.replicas_after,
            copies_data: moved.copies_data,
        }
    }
}

impl From<NodeShareInfo> for NodeShareDto {
    fn from(share: NodeShareInfo) -> Self {
        NodeShareDto {
            node_id: share.node_id,
            replicas_before: share.replicas_before,
            replicas_after: share.replicas_after,
            leaders_before: share.leaders_before,
            leaders_after: share.leaders_after,
        }
    }
}
