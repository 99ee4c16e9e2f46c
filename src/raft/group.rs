//! Running raft groups: starting one on its storage, proposing to it, and the handles the
//! layers above hold for a partition ([`PartitionReplica`]) and for the metadata
//! ([`MetadataReplica`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::errors::{ClientWriteError, RaftError};
use openraft::rt::watch::WatchReceiver;
use openraft::{Config, Raft, SnapshotPolicy};
use tokio::sync::watch;

use super::error::RaftLayerError;
use super::log_store::LogStore;
use super::metadata::MetadataApplier;
use super::network::NetworkFactory;
use super::partition::{PartitionApplier, Watermarks};
use super::partition_reader::{self, ReadLimits, StoredBatch};
use super::state_machine::{GroupApplier, GroupStateMachine};
use super::types::{NodeAddr, RaftRequest, RaftResponse, TypeConfig};
use crate::domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState, METADATA_GROUP};
use crate::storage::Store;

/// Raft timing for a group. Long heartbeats keep hundreds of idle groups cheap; a
/// single-voter group never waits on them.
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
            election_timeout_max_ms: 3000,
        }
    }
}

/// What starting a group needs.
#[derive(Clone)]
pub struct GroupContext {
    pub node_id: u64,
    pub node: NodeAddr,
    pub store: Store,
    pub timing: RaftTiming,
}

fn raft_config(timing: RaftTiming) -> Result<Arc<Config>, RaftLayerError> {
    let config = Config {
        cluster_name: "herald".into(),
        heartbeat_interval: timing.heartbeat_interval_ms,
        election_timeout_min: timing.election_timeout_min_ms,
        election_timeout_max: timing.election_timeout_max_ms,
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
        NetworkFactory,
        log_store,
        state_machine,
    )
    .await
    .map_err(|fatal| RaftLayerError::Fatal {
        group,
        reason: fatal.to_string(),
    })?;
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|fatal| RaftLayerError::Fatal {
            group,
            reason: fatal.to_string(),
        })?;
    if !initialized {
        // A new group on this node: this node is its single voter.
        let members = BTreeMap::from([(context.node_id, context.node.clone())]);
        if let Err(error) = raft.initialize(members).await {
            tracing::debug!(group, %error, "group already initialized");
        }
    }
    Ok((
        raft,
        Duration::from_millis(context.timing.election_timeout_max_ms),
    ))
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
        if let Some(leader) = metrics.borrow_watched().current_leader {
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

/// This node's replica of one partition.
pub struct PartitionReplica {
    group: u64,
    raft: Raft<TypeConfig, GroupStateMachine<PartitionApplier>>,
    watermarks: watch::Receiver<Watermarks>,
    store: Store,
    leader_wait: Duration,
}

impl PartitionReplica {
    pub async fn start(context: &GroupContext, group: u64) -> Result<Self, RaftLayerError> {
        let applier = PartitionApplier::new(group);
        let watermarks = applier.watermarks();
        let (raft, leader_wait) = start_raft(context, group, applier).await?;
        Ok(PartitionReplica {
            group,
            raft,
            watermarks,
            store: context.store.clone(),
            leader_wait,
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

    pub async fn wait_for_leader(&self) -> Option<u64> {
        wait_for_leader(&self.raft, self.leader_wait).await
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
    raft: Raft<TypeConfig, GroupStateMachine<MetadataApplier>>,
    state: watch::Receiver<Arc<MetadataState>>,
    leader_wait: Duration,
}

impl MetadataReplica {
    pub async fn start(context: &GroupContext) -> Result<Self, RaftLayerError> {
        let applier = MetadataApplier::new();
        let state = applier.subscribe();
        let (raft, leader_wait) = start_raft(context, METADATA_GROUP, applier).await?;
        Ok(MetadataReplica {
            raft,
            state,
            leader_wait,
        })
    }

    pub async fn propose(
        &self,
        command: MetadataCommand,
    ) -> Result<MetadataOutcome, RaftLayerError> {
        let response = self
            .raft
            .client_write(RaftRequest::Metadata(command))
            .await
            .map_err(|e| write_error(METADATA_GROUP, e))?;
        match response.data {
            RaftResponse::Metadata(outcome) => Ok(outcome),
            RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
            RaftResponse::Appended { .. } => {
                Err(RaftLayerError::Rejected("unexpected append answer".into()))
            }
        }
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

    pub async fn wait_for_leader(&self) -> Option<u64> {
        wait_for_leader(&self.raft, self.leader_wait).await
    }

    pub async fn shutdown(&self) {
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "metadata raft group did not shut down cleanly");
        }
    }
}
