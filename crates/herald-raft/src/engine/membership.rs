//! Leadership and membership of one group, shared by metadata and partition groups: who leads,
//! which replicas keep up (in sync), and moving the voter set toward the one the cluster wants.

use herald_domain::RaftGroupId;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::errors::{ClientWriteError, RaftError};
use openraft::raft::TransferLeaderRequest;
use openraft::rt::watch::WatchReceiver;
use openraft::storage::RaftStateMachine;
use openraft::{ChangeMembers, Raft, ServerState};

use super::error::RaftLayerError;
use super::types::{NodeAddr, TypeConfig};

/// A follower further behind than this many entries is not in sync.
const IN_SYNC_MAX_LAG_ENTRIES: u64 = 64;
/// A learner is promoted to voter once it is this close to the leader's log.
const PROMOTE_MAX_LAG_ENTRIES: u64 = 16;

/// How far `matched` trails `last_index` (zero when ahead, as after a truncation).
fn lag(last_index: u64, matched: Option<u64>) -> Option<u64> {
    matched.map(|index| last_index.saturating_sub(index))
}

/// What the leader of a group knows about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderReport {
    pub term: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Voters (the leader included) that acknowledged recently and are close to its log.
    pub in_sync: Vec<u64>,
}

/// Voters and learners of the group's effective membership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupMembers {
    pub voters: BTreeSet<u64>,
    pub learners: BTreeSet<u64>,
    /// A membership change is half done (joint consensus).
    pub joint: bool,
}

impl GroupMembers {
    pub fn contains(&self, node: u64) -> bool {
        self.voters.contains(&node) || self.learners.contains(&node)
    }
}

/// What a step toward the wanted membership did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipStep {
    /// Membership already is what was asked.
    Settled,
    /// Something changed or is catching up; call again later.
    InProgress,
    /// Only the leader changes membership.
    NotLeader,
}

pub(crate) fn members_of<SM>(raft: &Raft<TypeConfig, SM>) -> GroupMembers
where
    SM: RaftStateMachine<TypeConfig>,
{
    let metrics = raft.metrics();
    let membership = metrics.borrow_watched().membership_config.clone();
    let config = membership.membership();
    GroupMembers {
        voters: config.voter_ids().collect(),
        learners: config.learner_ids().collect(),
        joint: config.get_joint_config().len() > 1,
    }
}

pub(crate) fn leader_report<SM>(
    raft: &Raft<TypeConfig, SM>,
    node_id: u64,
    max_ack_age: Duration,
    // When the group is quiet: the followers it went quiet without.
    quiet: Option<&[u64]>,
) -> Option<LeaderReport>
where
    SM: RaftStateMachine<TypeConfig>,
{
    // Read under the watch's lock, not cloned: every loop of the cluster layer asks each
    // replica once a second, and a clone copies the replication and heartbeat maps.
    let receiver = raft.metrics();
    let metrics = receiver.borrow_watched();
    if metrics.state != ServerState::Leader || metrics.current_leader != Some(node_id) {
        return None;
    }
    let config = metrics.membership_config.membership();
    let voters: Vec<u64> = config.voter_ids().collect();
    let learners: Vec<u64> = config.learner_ids().collect();
    let last_index = metrics.last_log_index.unwrap_or(0);
    let in_sync = voters
        .iter()
        .copied()
        .filter(|voter| {
            if *voter == node_id {
                return true;
            }
            let matched = metrics
                .replication
                .as_ref()
                .and_then(|replication| replication.get(voter).cloned().flatten())
                .map(|log_id| log_id.index);
            let close = lag(last_index, matched).is_some_and(|lag| lag <= IN_SYNC_MAX_LAG_ENTRIES);
            // A quiet group's followers held the whole log when it went quiet, but for those
            // it went quiet without or that stopped answering since (absent): no ack is
            // expected.
            let recent = match quiet {
                Some(absent) => !absent.contains(voter),
                None => match metrics.heartbeat.as_ref() {
                    Some(heartbeats) => heartbeats
                        .get(voter)
                        .cloned()
                        .flatten()
                        .is_some_and(|acked| openraft::Instant::elapsed(&*acked) <= max_ack_age),
                    None => true,
                },
            };
            close && recent
        })
        .collect();
    Some(LeaderReport {
        term: metrics.current_term,
        voters,
        learners,
        in_sync,
    })
}

fn change_error(
    group: RaftGroupId,
    error: RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
) -> RaftLayerError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
            RaftLayerError::NotLeader {
                group,
                leader: forward.leader_id,
            }
        }
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => {
            RaftLayerError::OutcomeUnknown { group }
        }
        RaftError::APIError(other) => RaftLayerError::Rejected(other.to_string()),
        RaftError::Fatal(fatal) => RaftLayerError::Fatal {
            group,
            reason: fatal.to_string(),
        },
    }
}

/// Starts an election at once when the group's leader `dead` is known to be gone (its process
/// refuses connections), instead of waiting out the leader lease and an election timeout.
///
/// Every survivor drops its lease on the dead leader's vote, the way a leadership transfer
/// from that leader would; `candidate` (the same on every survivor) then campaigns. Safety is
/// unchanged: votes still need a quorum and an up-to-date log; only the wait is skipped. If the
/// detection was wrong, the cost is one needless election.
pub(crate) async fn take_over_from<SM>(
    raft: &Raft<TypeConfig, SM>,
    group: RaftGroupId,
    dead: u64,
    candidate: u64,
) where
    SM: RaftStateMachine<TypeConfig>,
{
    let metrics = raft.metrics().borrow_watched().clone();
    if metrics.current_leader != Some(dead) || metrics.state == ServerState::Leader {
        return;
    }
    let request = TransferLeaderRequest::new(metrics.vote, candidate, None);
    tracing::info!(
        group = group.get(),
        dead,
        candidate,
        "leader is gone: electing a new one at once"
    );
    if let Err(error) = raft.handle_transfer_leader(request).await {
        tracing::warn!(group = group.get(), %error, "could not start a takeover election");
    }
}

/// One step toward `voters` (and `learners`) as the group's membership, taken on the leader:
/// add missing nodes as learners, promote them once caught up (so a move never drops below
/// the old replica count of up-to-date copies), then drop nodes that are not wanted.
pub(crate) async fn converge<SM>(
    raft: &Raft<TypeConfig, SM>,
    group: RaftGroupId,
    node_id: u64,
    voters: &BTreeSet<u64>,
    learners: &BTreeSet<u64>,
    addresses: &BTreeMap<u64, NodeAddr>,
) -> Result<MembershipStep, RaftLayerError>
where
    SM: RaftStateMachine<TypeConfig>,
{
    {
        // Asked of every led group each second: read under the lock, copied only below, when
        // there is something to change.
        let receiver = raft.metrics();
        let metrics = receiver.borrow_watched();
        if metrics.state != ServerState::Leader || metrics.current_leader != Some(node_id) {
            return Ok(MembershipStep::NotLeader);
        }
    }
    let current = members_of(raft);
    let wanted_all: BTreeSet<u64> = voters.union(learners).copied().collect();
    if current.voters == *voters && current.learners == *learners && !current.joint {
        return Ok(MembershipStep::Settled);
    }
    let metrics = raft.metrics().borrow_watched().clone();
    if voters.is_empty() {
        return Err(RaftLayerError::Rejected(format!(
            "group {group}: refusing to remove every voter"
        )));
    }

    // 1. Every wanted node joins as a learner first, so it copies the log before it counts.
    let mut added = false;
    for node in wanted_all.iter().filter(|node| !current.contains(**node)) {
        let Some(address) = addresses.get(node) else {
            tracing::warn!(
                group = group.get(),
                node,
                "no address for a wanted replica yet"
            );
            continue;
        };
        raft.add_learner(*node, address.clone(), false)
            .await
            .map_err(|error| change_error(group, error))?;
        added = true;
    }
    if added {
        return Ok(MembershipStep::InProgress);
    }

    // 2. Promote learners that caught up; replace the voter set in one joint change.
    if current.voters != *voters {
        let last_index = metrics.last_log_index.unwrap_or(0);
        let lagging: Vec<u64> = voters
            .iter()
            .copied()
            .filter(|node| !current.voters.contains(node))
            .filter(|node| {
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|replication| replication.get(node).cloned().flatten())
                    .map(|log_id| log_id.index);
                lag(last_index, matched).is_none_or(|lag| lag > PROMOTE_MAX_LAG_ENTRIES)
            })
            .collect();
        if !lagging.is_empty() {
            tracing::debug!(
                group = group.get(),
                ?lagging,
                "waiting for new replicas to catch up"
            );
            return Ok(MembershipStep::InProgress);
        }
        tracing::info!(group = group.get(), from = ?current.voters, to = ?voters, "changing the voters of a group");
        raft.change_membership(ChangeMembers::ReplaceAllVoters(voters.clone()), true)
            .await
            .map_err(|error| change_error(group, error))?;
        return Ok(MembershipStep::InProgress);
    }

    // 3. Drop learners nobody wants (former voters are kept as learners by step 2).
    let unwanted: BTreeSet<u64> = current
        .learners
        .iter()
        .copied()
        .filter(|node| !learners.contains(node))
        .collect();
    if !unwanted.is_empty() {
        tracing::info!(group = group.get(), removed = ?unwanted, "removing nodes from a group");
        raft.change_membership(ChangeMembers::RemoveNodes(unwanted), false)
            .await
            .map_err(|error| change_error(group, error))?;
    }
    Ok(MembershipStep::InProgress)
}
