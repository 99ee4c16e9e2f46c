//! Running raft groups: starting one on its storage, proposing to it, and the handles the
//! layers above hold for a partition ([`PartitionReplica`]) and for the metadata
//! ([`MetadataReplica`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::errors::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::rt::watch::WatchReceiver;
use openraft::{Config, Raft, ReadPolicy, SnapshotPolicy};
use tokio::sync::watch;

use super::error::RaftLayerError;
use super::log_store::LogStore;
use super::membership::{
    converge, leader_report, members_of, take_over_from, GroupMembers, LeaderReport, MembershipStep,
};
use super::metadata::MetadataApplier;
use super::network::NetworkFactory;
use super::partition::{PartitionApplier, Watermarks};
use super::partition_reader::{self, ReadLimits, StoredBatch};
use super::registry::{GroupRegistry, MetadataRaft, PartitionRaft, RegisteredGroup};
use super::state_machine::{GroupApplier, GroupStateMachine};
use super::types::{NodeAddr, RaftRequest, RaftResponse, TypeConfig};
use crate::domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState, METADATA_GROUP};
use crate::rpc::RpcClient;
use crate::storage::Store;

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
}

impl GroupContext {
    /// How long a follower may stay silent and still count as in sync.
    fn max_ack_age(&self) -> Duration {
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

fn raft_config(timing: RaftTiming) -> Result<Arc<Config>, RaftLayerError> {
    let config = Config {
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
        group: 0,
        reason: error.to_string(),
    })?;
    Ok(Arc::new(config))
}

async fn start_raft<A: GroupApplier>(
    context: &GroupContext,
    group: u64,
    applier: A,
) -> Result<(Raft<TypeConfig, GroupStateMachine<A>>, Duration), RaftLayerError> {
    let state_machine = GroupStateMachine::open(group, context.store.clone(), applier).await?;
    let log_store = LogStore::new(group, context.store.clone());
    let raft = Raft::new(
        context.node_id,
        raft_config(context.timing)?,
        NetworkFactory::new(context.rpc.clone(), group),
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

/// Initializes a new group when asked to and when it has no state yet.
async fn bootstrap_raft<SM>(
    raft: &Raft<TypeConfig, SM>,
    group: u64,
    bootstrap: &Bootstrap,
) -> Result<(), RaftLayerError>
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    let Bootstrap::Initialize { voters, campaign } = bootstrap else {
        return Ok(());
    };
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|fatal| RaftLayerError::Fatal {
            group,
            reason: fatal.to_string(),
        })?;
    if initialized {
        return Ok(());
    }
    if let Err(error) = raft.initialize(voters.clone()).await {
        tracing::debug!(group, %error, "group already initialized");
        return Ok(());
    }
    if *campaign && voters.len() > 1 {
        if let Err(error) = raft.trigger().elect(true).await {
            tracing::debug!(group, %error, "could not start an election");
        }
    }
    Ok(())
}

fn write_error(
    group: u64,
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
        RaftError::APIError(other) => RaftLayerError::Rejected(other.to_string()),
        RaftError::Fatal(fatal) => RaftLayerError::Fatal {
            group,
            reason: fatal.to_string(),
        },
    }
}

/// Waits until the group knows a leader, or the deadline passes.
async fn wait_for_leader<SM>(raft: &Raft<TypeConfig, SM>, timeout: Duration) -> Option<u64>
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

fn leader_of<SM>(raft: &Raft<TypeConfig, SM>) -> Option<u64>
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    raft.metrics().borrow_watched().current_leader
}

/// Asks the leader to hand leadership to `to` (e.g. back to the preferred replica).
async fn transfer_leadership<SM>(raft: &Raft<TypeConfig, SM>, group: u64, to: u64)
where
    SM: openraft::storage::RaftStateMachine<TypeConfig>,
{
    if let Err(error) = raft.trigger().transfer_leader(to).await {
        tracing::debug!(group, to, %error, "could not transfer leadership");
    }
}

/// This node's replica of one partition.
pub struct PartitionReplica {
    group: u64,
    node_id: u64,
    raft: PartitionRaft,
    watermarks: watch::Receiver<Watermarks>,
    store: Store,
    registry: Arc<GroupRegistry>,
    leader_wait: Duration,
    max_ack_age: Duration,
}

impl PartitionReplica {
    pub async fn start(
        context: &GroupContext,
        group: u64,
        bootstrap: Bootstrap,
    ) -> Result<Self, RaftLayerError> {
        let applier = PartitionApplier::new(group);
        let watermarks = applier.watermarks();
        let (raft, leader_wait) = start_raft(context, group, applier).await?;
        context
            .registry
            .insert(group, RegisteredGroup::Partition(raft.clone()));
        bootstrap_raft(&raft, group, &bootstrap).await?;
        Ok(PartitionReplica {
            group,
            node_id: context.node_id,
            raft,
            watermarks,
            store: context.store.clone(),
            registry: context.registry.clone(),
            leader_wait,
            max_ack_age: context.max_ack_age(),
        })
    }

    pub fn group(&self) -> u64 {
        self.group
    }

    /// Replicates one stored batch; answers its base offset once applied (durable on a quorum).
    pub async fn append(&self, batch: Bytes) -> Result<(u64, u32), RaftLayerError> {
        let response = self
            .raft
            .client_write(RaftRequest::Append { batch })
            .await
            .map_err(|e| write_error(self.group, e))?;
        match response.data {
            RaftResponse::Appended {
                base_offset,
                offset_span,
            } => Ok((base_offset, offset_span)),
            RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
            RaftResponse::Metadata(_) => Err(RaftLayerError::Rejected(
                "unexpected metadata answer".into(),
            )),
        }
    }

    pub fn watermarks(&self) -> Watermarks {
        *self.watermarks.borrow()
    }

    /// A receiver that changes whenever the high watermark moves: what long polls wait on.
    pub fn subscribe(&self) -> watch::Receiver<Watermarks> {
        self.watermarks.clone()
    }

    pub fn leader(&self) -> Option<u64> {
        leader_of(&self.raft)
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    pub async fn wait_for_leader(&self) -> Option<u64> {
        wait_for_leader(&self.raft, self.leader_wait).await
    }

    /// On the leader: waits until everything committed before this call is applied here, so
    /// a leader elected a moment ago does not report a high watermark below what its
    /// predecessor served.
    pub async fn catch_up_applied(&self) -> Result<(), RaftLayerError> {
        self.raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map(|_| ())
            .map_err(|error| RaftLayerError::NotLeader {
                group: self.group,
                leader: match error {
                    RaftError::APIError(LinearizableReadError::ForwardToLeader(forward)) => {
                        forward.leader_id
                    }
                    _ => None,
                },
            })
    }

    /// Leader, voters and in-sync replicas, when this node leads the group.
    pub fn leader_report(&self) -> Option<LeaderReport> {
        leader_report(&self.raft, self.node_id, self.max_ack_age)
    }

    pub fn members(&self) -> GroupMembers {
        members_of(&self.raft)
    }

    /// On the leader: one step toward `replicas` being the voters (see [`membership`]).
    ///
    /// [`membership`]: super::membership
    pub async fn converge_replicas(
        &self,
        replicas: &BTreeSet<u64>,
        addresses: &BTreeMap<u64, NodeAddr>,
    ) -> Result<MembershipStep, RaftLayerError> {
        converge(
            &self.raft,
            self.group,
            self.node_id,
            replicas,
            &BTreeSet::new(),
            addresses,
        )
        .await
    }

    pub async fn transfer_leadership(&self, to: u64) {
        transfer_leadership(&self.raft, self.group, to).await
    }

    /// The group's leader `dead` is gone: elect `candidate` now (see [`take_over_from`]).
    pub async fn take_over_from(&self, dead: u64, candidate: u64) {
        take_over_from(&self.raft, self.group, dead, candidate).await
    }

    /// Batches from `from_offset` to the high watermark, within `limits`.
    pub async fn read(
        &self,
        from_offset: u64,
        limits: ReadLimits,
    ) -> Result<Vec<StoredBatch>, RaftLayerError> {
        let (store, group, high_watermark) = (
            self.store.clone(),
            self.group,
            self.watermarks().high_watermark,
        );
        blocking(move || {
            partition_reader::read_batches(&store, group, from_offset, high_watermark, limits)
        })
        .await
    }

    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<u64>, RaftLayerError> {
        let (store, group) = (self.store.clone(), self.group);
        blocking(move || partition_reader::offset_for_timestamp(&store, group, timestamp)).await
    }

    pub async fn shutdown(&self) {
        self.registry.remove(self.group);
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(group = self.group, %error, "raft group did not shut down cleanly");
        }
    }

    /// Stops the group and removes all it stored.
    pub async fn destroy(&self) -> Result<(), RaftLayerError> {
        self.shutdown().await;
        let (store, group) = (self.store.clone(), self.group);
        blocking(move || partition_reader::destroy_group(&store, group)).await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, std::io::Error> + Send + 'static,
) -> Result<T, RaftLayerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| RaftLayerError::Storage(std::io::Error::other(join.to_string())))?
        .map_err(RaftLayerError::Storage)
}

/// This node's replica of the metadata group.
pub struct MetadataReplica {
    node_id: u64,
    raft: MetadataRaft,
    state: watch::Receiver<Arc<MetadataState>>,
    registry: Arc<GroupRegistry>,
    leader_wait: Duration,
    max_ack_age: Duration,
}

impl MetadataReplica {
    pub async fn start(
        context: &GroupContext,
        bootstrap: Bootstrap,
    ) -> Result<Self, RaftLayerError> {
        let applier = MetadataApplier::new();
        let state = applier.subscribe();
        let (raft, leader_wait) = start_raft(context, METADATA_GROUP, applier).await?;
        context
            .registry
            .insert(METADATA_GROUP, RegisteredGroup::Metadata(raft.clone()));
        bootstrap_raft(&raft, METADATA_GROUP, &bootstrap).await?;
        Ok(MetadataReplica {
            node_id: context.node_id,
            raft,
            state,
            registry: context.registry.clone(),
            leader_wait,
            max_ack_age: context.max_ack_age(),
        })
    }

    /// Whether this node has metadata raft state (it founded or joined a cluster).
    pub async fn is_initialized(&self) -> bool {
        self.raft.is_initialized().await.unwrap_or(false)
    }

    /// Proposes a command on this node, which must be the leader (`NotLeader` otherwise).
    /// Answers the outcome and the raft index it was applied at.
    pub async fn propose(
        &self,
        command: MetadataCommand,
    ) -> Result<(MetadataOutcome, u64), RaftLayerError> {
        let response = self
            .raft
            .client_write(RaftRequest::Metadata(command))
            .await
            .map_err(|e| write_error(METADATA_GROUP, e))?;
        match response.data {
            RaftResponse::Metadata(outcome) => Ok((outcome, response.log_id.index)),
            RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
            RaftResponse::Appended { .. } => {
                Err(RaftLayerError::Rejected("unexpected append answer".into()))
            }
        }
    }

    /// Waits until this node applied the metadata up to `index` (read-your-writes after a
    /// proposal another node made); false if `timeout` passed first.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "metadata proposal applied here")
            .await
            .is_ok()
    }

    /// The latest applied metadata.
    pub fn state(&self) -> Arc<MetadataState> {
        self.state.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.state.clone()
    }

    pub fn leader(&self) -> Option<u64> {
        leader_of(&self.raft)
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    pub async fn wait_for_leader(&self) -> Option<u64> {
        wait_for_leader(&self.raft, self.leader_wait).await
    }

    pub fn leader_report(&self) -> Option<LeaderReport> {
        leader_report(&self.raft, self.node_id, self.max_ack_age)
    }

    pub fn members(&self) -> GroupMembers {
        members_of(&self.raft)
    }

    /// On the leader: one step toward these voters and learners.
    pub async fn converge_members(
        &self,
        voters: &BTreeSet<u64>,
        learners: &BTreeSet<u64>,
        addresses: &BTreeMap<u64, NodeAddr>,
    ) -> Result<MembershipStep, RaftLayerError> {
        converge(
            &self.raft,
            METADATA_GROUP,
            self.node_id,
            voters,
            learners,
            addresses,
        )
        .await
    }

    pub async fn take_over_from(&self, dead: u64, candidate: u64) {
        take_over_from(&self.raft, METADATA_GROUP, dead, candidate).await
    }

    pub async fn shutdown(&self) {
        self.registry.remove(METADATA_GROUP);
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "metadata raft group did not shut down cleanly");
        }
    }
}
