use herald_domain::wire_version::{ClusterVersion, Feature};
use herald_domain::RaftGroupId;
use thiserror::Error;

use herald_raft::RaftLayerError;
use herald_rpc::RpcError;

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error(transparent)]
    Raft(#[from] RaftLayerError),
    /// No leader of the partition group became known within the wait.
    #[error("raft group {0} has no leader")]
    NoLeader(RaftGroupId),
    #[error("the metadata group has no leader")]
    NoMetadataLeader,
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A call to another node failed in a way that may or may not have taken effect.
    #[error("internal RPC: {0}")]
    Rpc(#[from] RpcError),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    CannotDrain(String),
    /// A rebalance cannot run now (a node is draining): nothing was moved.
    #[error("{0}")]
    CannotRebalance(String),
    /// A fault of this node, such as a request that could not be encoded: nothing was sent.
    #[error("{0}")]
    Internal(String),
    #[error("cannot listen for internal RPC on {address}: {reason}")]
    Listen { address: String, reason: String },
    /// What was asked needs every node to know `feature`, and the cluster version does not
    /// say so yet (a rolling upgrade is not finished): nothing was done.
    #[error("{feature:?} needs every node at wire version {} or later; the cluster version is {cluster_version} (an upgrade is not finished)", feature.since())]
    FeatureNotEnabled {
        feature: Feature,
        cluster_version: ClusterVersion,
    },
}
