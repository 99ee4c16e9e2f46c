//! Starting raft groups on the node's storage and the helpers both kinds of group share; the
//! handles the layers above hold are [`super::PartitionReplica`] and
//! [`super::MetadataReplica`].

use super::catch_up_throttle::CatchUpThrottle;
use super::heartbeats::HeartbeatCoalescer;
use super::leader_liveness::LeaderLiveness;
use herald_domain::RaftGroupId;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::errors::{ClientWriteError, RaftError};
use openraft::rt::watch::WatchReceiver;
use openraft::{Config, Raft, SnapshotPolicy};

use super::error::RaftLayerError;
use super::log_store::LogStore;
use super::network::NetworkFactory;
use super::recent_entries::RecentEntries;
use super::registry::GroupRegistry;
use super::state_machine::{GroupApplier, GroupStateMachine};
use super::types::{NodeAddr, TypeConfig};
use herald_rpc::RpcClient;
use herald_storage::{Store, WriteSet};

/// Raft timing for every group of a node. A failover takes about one election timeout; every
/// heartbeat interval each leader sends one message per follower, so the interval is what
/// hundreds of idle partitions cost (see `docs/clustering.md` for the measured trade-off).
#[derive(Debug, Clone, Copy)]
pub struct RaftTiming {
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval_ms: 500,
            election_timeout_min_ms: 1500,
            election_timeout_max_ms: 2500,
        }
    }
}

/// What starting a group needs.
#[derive(Clone)]
pub struct GroupContext {
    pub node_id: u64,
    pub store: Store,
    pub timing: RaftTiming,
    /// The node's internal RPC client, which every group's raft network shares.
    pub rpc: RpcClient,
    /// Where incoming raft messages find this node's groups.
    pub registry: Arc<GroupRegistry>,
    /// The rate limit on replication to followers far behind (a rebuilt replica).
    pub catch_up: Arc<CatchUpThrottle>,
    /// The node's heartbeat batches, one queue per peer (`heartbeats`).
    pub heartbeats: Arc<HeartbeatCoalescer>,
    /// Whether a partition replica that restarts knowing another node as its leader starts
    /// quiet and waits to be woken (see `quiescence`): on when groups quiesce.
    pub dormant_restarts: bool,
    /// Asked before a partition replica campaigns whether its leader is alive (see
    /// `leader_liveness`); set by the cluster layer once it exists.
    pub leader_liveness: Arc<LeaderLiveness>,
}

impl GroupContext {
    /// How long a follower may stay silent and still count as in sync.
    pub(crate) fn max_ack_age(&self) -> Duration {
        Duration::from_millis(self.timing.election_timeout_max_ms)
    }
}

/// How a group that has no raft state yet starts.
#[derive(Debug, Clone)]
pub enum Bootstrap {
    /// Initialize it with these voters (every founding replica does the same, so all agree on
    /// the first membership entry).
    Initialize {
        voters: BTreeMap<u64, NodeAddr>,
        /// Start an election at once instead of waiting for a timeout: the preferred leader.
        campaign: bool,
    },
    /// Wait for a leader to add this node (a replica that joins an existing group).
    Join,
}

/// Raft's configuration for a group. `ticking`: whether its timers run from the start (a
/// replica that may start dormant starts without, see [`start_raft`]).
pub(crate) fn raft_config(
    timing: RaftTiming,
    ticking: bool,
) -> Result<Arc<Config>, RaftLayerError> {
    let config = Config {
        enable_tick: ticking,
        cluster_name: "herald".into(),
        heartbeat_interval: timing.heartbeat_interval_ms,
        election_timeout_min: timing.election_timeout_min_ms,
        election_timeout_max: timing.election_timeout_max_ms,
        // A node coming back from a pause or a partition asks before it disrupts a leader.
        enable_pre_vote: Some(true),
        // Snapshots are the small state-machine state; give slow disks room anyway.
        install_snapshot_timeout: 30_000,
        // Retention decides when a partition's log prefix goes; raft never purges on its own.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: u64::MAX,
        ..Default::default()
    };
    let config = config.validate().map_err(|error| RaftLayerError::Fatal {
        group: RaftGroupId::METADATA,
        reason: error.to_string(),
    })?;
    Ok(Arc::new(config))
}

/// Starts a group's raft. With `ticking` false its timers stay off until the caller turns
/// them on (`runtime_config().tick(true)`): a restarting partition replica decides first
/// whether to wait dormant, and on a node starting thousands of replicas that decision can
/// come after an election timeout, when the replica would already have campaigned.
pub(crate) async fn start_raft<A: GroupApplier>(
    context: &GroupContext,
    group: RaftGroupId,
    applier: A,
    log_lock: Arc<std::sync::Mutex<()>>,
    recent: Arc<RecentEntries>,
    ticking: bool,
) -> Result<(Raft<TypeConfig, GroupStateMachine<A>>, Duration), RaftLayerError> {
    let state_machine = GroupStateMachine::open(group, context.store.clone(), applier).await?;
    let log_store = LogStore::with_recent(group, context.store.clone(), log_lock, recent);
    let raft = Raft::new(
        context.node_id,
        raft_config(context.timing, ticking)?,
        NetworkFactory::new(context, group),
        log_store,
        state_machine,
    )
    .await
    .map_err(|fatal| RaftLayerError::Fatal {
        group,
        reason: fatal.to_string(),
    })?;
    Ok((
        raft,
        Duration::from_millis(context.timing.election_timeout_max_ms),
    ))
}

/// Initializes a new group when asked to and when it has no state yet. Answers whether this
/// call initialized it (a first start, not a restart).
pub(crate) async fn bootstrap_raft<SM>(
    raft: &Raft<TypeConfig, SM>,
    group: RaftGroupId,
    bootstrap: &Bootstrap,
) -> Result<bool, RaftLayerError>
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    let Bootstrap::Initialize { voters, campaign } = bootstrap else {
        return Ok(false);
    };
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|fatal| RaftLayerError::Fatal {
            group,
            reason: fatal.to_string(),
        })?;
    if initialized {
        return Ok(false);
    }
    if let Err(error) = raft.initialize(voters.clone()).await {
        tracing::debug!(group = group.get(), %error, "group already initialized");
        return Ok(false);
    }
    if *campaign && voters.len() > 1 {
        if let Err(error) = raft.trigger().elect(true).await {
            tracing::debug!(group = group.get(), %error, "could not start an election");
        }
    }
    Ok(true)
}

pub(crate) fn write_error(
    group: RaftGroupId,
    error: RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
) -> RaftLayerError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
            match forward.leader_id {
                Some(leader) => RaftLayerError::NotLeader {
                    group,
                    leader: Some(leader),
                },
                None => RaftLayerError::NoLeader { group },
            }
        }
        // Proposed and appended, then lost from this node's log: the outcome is unknown.
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

/// Waits until the group knows a leader, or the deadline passes.
pub(crate) async fn wait_for_leader<SM>(
    raft: &Raft<TypeConfig, SM>,
    timeout: Duration,
) -> Option<u64>
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    let mut metrics = raft.metrics();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let leader = metrics.borrow_watched().current_leader;
        if let Some(leader) = leader {
            return Some(leader);
        }
        if tokio::time::timeout_at(deadline, metrics.changed())
            .await
            .ok()?
            .is_err()
        {
            return None;
        }
    }
}

pub(crate) fn leader_of<SM>(raft: &Raft<TypeConfig, SM>) -> Option<u64>
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    raft.metrics().borrow_watched().current_leader
}

/// Asks the leader to hand leadership to `to` (e.g. back to the preferred replica); answers
/// whether raft took the request.
pub(crate) async fn transfer_leadership<SM>(
    raft: &Raft<TypeConfig, SM>,
    group: RaftGroupId,
    to: u64,
) -> bool
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    match raft.trigger().transfer_leader(to).await {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(group = group.get(), to, %error, "could not transfer leadership");
            false
        }
    }
}

/// Ends the leader's replication backoff to `peer` (see `replication_backoff`): called when
/// the peer's connection comes back, so a follower that was down is caught up at once rather
/// than after the longest wait. Nothing on a replica that does not lead.
pub(crate) async fn reset_replication_backoff<SM>(
    raft: &Raft<TypeConfig, SM>,
    group: RaftGroupId,
    peer: u64,
) where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    let leads_peer = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics.state == openraft::ServerState::Leader
            && metrics
                .replication
                .as_ref()
                .is_some_and(|followers| followers.contains_key(&peer))
    };
    if !leads_peer {
        return;
    }
    if let Err(error) = raft.trigger().reset_backoff([peer]).await {
        tracing::debug!(group = group.get(), peer, %error, "could not reset the replication backoff");
    }
}

/// Writes `set` without sync: on this thread when RocksDB takes it at once (small sets, no
/// stall), else on a blocking thread, so an async worker never sleeps in a write stall.
pub(crate) async fn write_unsynced(store: &Store, set: WriteSet) -> Result<(), std::io::Error> {
    let Some(set) = store.write_unless_waiting(set)? else {
        return Ok(());
    };
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.write(set, false))
        .await
        .map_err(|join| std::io::Error::other(format!("storage task failed: {join}")))?
        .map_err(std::io::Error::from)
}

pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, std::io::Error> + Send + 'static,
) -> Result<T, RaftLayerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| RaftLayerError::Storage(std::io::Error::other(join.to_string())))?
        .map_err(RaftLayerError::Storage)
}

#[cfg(test)]
mod tests {
    use openraft::errors::ForwardToLeader;

    use super::*;

    #[test]
    fn a_refused_write_is_not_led_here_and_a_discarded_one_has_an_unknown_outcome() {
        let refused = RaftError::APIError(ClientWriteError::ForwardToLeader(ForwardToLeader::<
            TypeConfig,
        >::empty()));
        assert!(matches!(
            write_error(RaftGroupId::new(3), refused),
            RaftLayerError::NoLeader { group } if group == RaftGroupId::new(3)
        ));
        // Appended, then dropped when another leader's log replaced it: it may still commit,
        // so it must not read as "not written" (retried blindly) nor as a server bug (500).
        let discarded =
            RaftError::APIError(ClientWriteError::LogEntryDiscarded(ForwardToLeader::<
                TypeConfig,
            >::empty()));
        assert!(matches!(
            write_error(RaftGroupId::new(3), discarded),
            RaftLayerError::OutcomeUnknown { group } if group == RaftGroupId::new(3)
        ));
    }
}
