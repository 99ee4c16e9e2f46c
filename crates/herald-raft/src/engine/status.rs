//! A group's raft progress as an operator reads it (role, term, indexes, how far each follower
//! trails), taken from openraft's metrics so the layers above never see openraft's types.

use openraft::rt::watch::WatchReceiver;
use openraft::storage::RaftStateMachine;
use openraft::{Raft, ServerState};

use super::types::TypeConfig;

/// The raft roles a node can have in a group, as metric label values.
pub const ROLES: [&str; 5] = ["leader", "follower", "candidate", "learner", "shutdown"];

/// One group's raft progress on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    /// One of [`ROLES`].
    pub role: &'static str,
    pub term: u64,
    /// The last log index this node has (durable or not).
    pub last_log_index: u64,
    /// The last index this node knows to be committed (its own quorum's on the leader).
    pub committed_index: u64,
    pub applied_index: u64,
    /// On the leader, each other replica and how many entries it is behind the leader's log
    /// (a replica that has matched nothing yet counts the whole log); empty elsewhere.
    pub follower_lag: Vec<(u64, u64)>,
}

pub(crate) fn status_of<SM>(raft: &Raft<TypeConfig, SM>, node_id: u64) -> RaftStatus
where
    SM: RaftStateMachine<TypeConfig>,
{
    let metrics = raft.metrics().borrow_watched().clone();
    let role = match metrics.state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    };
    let last_log_index = metrics.last_log_index.unwrap_or(0);
    let follower_lag = metrics
        .replication
        .as_ref()
        .map(|replication| {
            replication
                .iter()
                .filter(|(follower, _)| **follower != node_id)
                .map(|(follower, matched)| {
                    let matched = matched.as_ref().map(|log_id| log_id.index);
                    let behind = match matched {
                        Some(index) => last_log_index.saturating_sub(index),
                        None => last_log_index,
                    };
                    (*follower, behind)
                })
                .collect()
        })
        .unwrap_or_default();
    RaftStatus {
        role,
        term: metrics.current_term,
        last_log_index,
        committed_index: metrics
            .local_committed
            .map(|log_id| log_id.index)
            .unwrap_or(0),
        applied_index: metrics.last_applied.map(|log_id| log_id.index).unwrap_or(0),
        follower_lag,
    }
}
