use thiserror::Error;

use crate::raft::RaftLayerError;

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error(transparent)]
    Raft(#[from] RaftLayerError),
    /// The partition's replica is not running on this node (yet, or any more).
    #[error("raft group {0} is not available on this node")]
    GroupUnavailable(u64),
    #[error("timed out waiting for {0}")]
    Timeout(String),
}
