use herald_domain::RaftGroupId;
use thiserror::Error;

/// What the raft layer reports to the layers above.
#[derive(Debug, Error)]
pub enum RaftLayerError {
    /// This node does not lead the group; `leader` is the node that does, when known.
    #[error("not the leader of group {group} (leader: {leader:?})")]
    NotLeader {
        group: RaftGroupId,
        leader: Option<u64>,
    },
    #[error("group {group} has no leader yet")]
    NoLeader { group: RaftGroupId },
    /// The command was refused deterministically by the state machine.
    #[error("{0}")]
    Rejected(String),
    /// The entry was appended here, then discarded when this node took another leader's log:
    /// it may still commit through another leader, or never. Not safe to retry blindly.
    #[error(
        "group {group}: the entry was discarded by a leader change; it may still be committed"
    )]
    OutcomeUnknown { group: RaftGroupId },
    #[error("raft group {group} stopped: {reason}")]
    Fatal { group: RaftGroupId, reason: String },
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
}
