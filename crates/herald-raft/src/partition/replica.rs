//! This node's replica of one partition: appending, reading, leadership and membership.

use herald_domain::RaftGroupId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::errors::{LinearizableReadError, RaftError};
use openraft::rt::watch::WatchReceiver;
use openraft::{ReadPolicy, ServerState};
use tokio::sync::watch;

use super::applier::{CompactionProgress, DeliveryView, PartitionApplier, Watermarks};
use super::compaction::KeyMap;
use super::proposal::SharedPredictions;
use super::reader::{self, ReadLimits, StoredBatch};
use super::retention::{self, RetentionPlan};
use super::subscriptions::{DeliveryCommand, DeliveryOutcome};
use crate::engine::checkpoints::CheckpointStatus;
use crate::engine::error::RaftLayerError;
use crate::engine::group::{
    blocking, bootstrap_raft, leader_of, reset_replication_backoff, start_raft,
    transfer_leadership, wait_for_leader, write_error, Bootstrap, GroupContext,
};
use crate::engine::membership::{
    converge, leader_report, members_of, take_over_from, GroupMembers, LeaderReport, MembershipStep,
};
use crate::engine::quiescence::{QuiesceOffer, Quiescence, RestartedAs};
use crate::engine::recent_entries::RecentEntries;
use crate::engine::registry::{GroupRegistry, PartitionRaft, RegisteredGroup};
use crate::engine::state_machine::GroupStateMachine;
use crate::engine::status::{status_of, RaftStatus};
use crate::engine::types::{NodeAddr, RaftRequest, RaftResponse, TypeConfig};
use herald_storage::Store;

/// This node's replica of one partition.
pub struct PartitionReplica {
    group: RaftGroupId,
    node_id: u64,
    pub(crate) raft: PartitionRaft,
    watermarks: watch::Receiver<Watermarks>,
    pub(crate) store: Store,
    registry: Arc<GroupRegistry>,
    leader_wait: Duration,
    max_ack_age: Duration,
    /// The log start whose prefix was purged here already.
    purged_offset: AtomicU64,
    /// The applied index of the last purge check.
    checked_at: AtomicU64,
    /// The partition's high watermark as of the newest checkpoint a purge check saw taken (0:
    /// none yet): a replica rebuilt from a snapshot replays the retained log from there on.
    checkpointed_offset: AtomicU64,
    /// One purge at a time: the retention pass and the purge loop may both ask.
    purge_lock: tokio::sync::Mutex<()>,
    /// Shared with the log store: see [`compaction`](super::compaction).
    pub(crate) log_lock: Arc<std::sync::Mutex<()>>,
    /// Set when the group stops: a running compaction pass stops at the next batch.
    pub(crate) closing: Arc<AtomicBool>,
    pub(crate) compaction: watch::Receiver<CompactionProgress>,
    /// The key map the leader built when it planned a pass, for its own cleaner.
    pub(crate) prepared_map: std::sync::Mutex<Option<(u64, KeyMap)>>,
    queues: DeliveryView,
    /// The log's recently appended entries, shared with the log store.
    pub(crate) recent: Arc<RecentEntries>,
    /// Where the appender's next appends land, while certain (see [`super::proposal`]).
    pub(crate) predictions: SharedPredictions,
    /// Whether the group is quiet (see [`crate::engine::quiescence`]); shared with the
    /// registry, where incoming raft messages wake it.
    quiescence: Arc<Quiescence>,
    /// The term in which this replica, leading, asked raft to transfer its leadership (0:
    /// never); see [`Self::is_handing_over`].
    handing_over_in_term: AtomicU64,
}

/// Runs in the state-machine worker, between applies (see `engine::checkpoints`). Also
/// answers the partition's high watermark as of the newest checkpoint when that checkpoint is
/// of the state as it is now (nothing applied since), the only time it is known exactly.
fn maintain_checkpoints(
    machine: &mut GroupStateMachine<PartitionApplier>,
    limit: u64,
) -> futures::future::BoxFuture<'_, Result<(CheckpointStatus, Option<u64>), std::io::Error>> {
    Box::pin(async move {
        let status = machine.maintain_checkpoints(limit).await?;
        let current = status.newest.is_some() && status.newest == machine.applied_index();
        let offset = current.then(|| machine.applier.watermarks().borrow().high_watermark);
        Ok((status, offset))
    })
}

/// How long a replica that restarted as its group's leader is watched for a step-down that
/// sends it dormant (see `engine::quiescence`).
const RESTORED_LEADER_WATCH: Duration = Duration::from_secs(30);

/// How long a snapshot and a purge may take before the next retention pass retries.
const PURGE_WAIT: Duration = Duration::from_secs(30);

impl PartitionReplica {
    pub async fn start(
        context: &GroupContext,
        group: RaftGroupId,
        bootstrap: Bootstrap,
    ) -> Result<Self, RaftLayerError> {
        let applier = PartitionApplier::new(group);
        let watermarks = applier.watermarks();
        let compaction = applier.compaction();
        let queues = applier.delivery_view();
        let log_lock = Arc::new(std::sync::Mutex::new(()));
        let recent = Arc::new(RecentEntries::default());
        let (raft, leader_wait) = start_raft(
            context,
            group,
            applier,
            log_lock.clone(),
            recent.clone(),
            !context.dormant_restarts,
        )
        .await?;
        let quiescence = Arc::new(Quiescence::default());
        context.registry.insert(
            group,
            RegisteredGroup::Partition(raft.clone(), quiescence.clone()),
        );
        let initialized = bootstrap_raft(&raft, group, &bootstrap).await?;
        // Ticks are off until here when the replica may start dormant (see `start_raft`).
        if context.dormant_restarts {
            if initialized {
                raft.runtime_config().tick(true);
            } else {
                let kept = quiescence.start_dormant(&raft, context.node_id).await;
                if kept != RestartedAs::Dormant {
                    raft.runtime_config().tick(true);
                }
                if let RestartedAs::Leader { term } = kept {
                    quiescence.dormant_after_step_down(&raft, term, RESTORED_LEADER_WATCH);
                }
            }
        }
        Ok(PartitionReplica {
            group,
            node_id: context.node_id,
            raft,
            watermarks,
            store: context.store.clone(),
            registry: context.registry.clone(),
            leader_wait,
            max_ack_age: context.max_ack_age(),
            purged_offset: AtomicU64::new(0),
            checked_at: AtomicU64::new(0),
            checkpointed_offset: AtomicU64::new(0),
            purge_lock: tokio::sync::Mutex::new(()),
            log_lock,
            closing: Arc::new(AtomicBool::new(false)),
            compaction,
            prepared_map: std::sync::Mutex::new(None),
            queues,
            recent,
            predictions: SharedPredictions::default(),
            quiescence,
            handing_over_in_term: AtomicU64::new(0),
        })
    }

    /// Before anything is proposed: notes the activity and, when the group was quiet, wakes
    /// it and waits until a quorum answered a heartbeat, so the leader's lease is valid again
    /// (a leader quiet for longer than its lease refuses writes until then).
    pub(crate) async fn awake(&self) {
        self.quiescence.touch();
        if self.quiescence.wake(&self.raft) && self.is_leader() {
            let renewed = tokio::time::timeout(
                self.leader_wait,
                self.raft.ensure_linearizable(ReadPolicy::ReadIndex),
            )
            .await;
            if !matches!(renewed, Ok(Ok(_))) {
                tracing::debug!(
                    group = self.group.get(),
                    "no quorum answered the wake-up heartbeat in time"
                );
            }
        }
    }

    /// Whether the group is quiet here (no ticks, no heartbeats).
    pub fn is_quiet(&self) -> bool {
        self.quiescence.is_quiet()
    }

    /// Whether this quiet replica waits for another survivor's takeover of its dead leader's
    /// group (see [`Self::take_over_from`]).
    pub fn is_awaiting_candidate(&self) -> bool {
        self.quiescence.is_awaiting_candidate()
    }

    /// On the leader: an offer to go quiet, when the group was idle for `idle_after` and every
    /// follower `is_up` says is up (a quorum with the leader) holds the whole log (see
    /// [`crate::engine::quiescence`]).
    pub fn quiesce_offer(
        &self,
        idle_after: Duration,
        is_up: impl Fn(u64) -> bool,
    ) -> Option<QuiesceOffer> {
        self.quiescence
            .offer(&self.raft, self.node_id, idle_after, is_up)
    }

    /// On a quiet leader: the followers it went quiet without, which are not in sync.
    pub fn absent_followers(&self) -> Vec<u64> {
        self.quiescence.absent()
    }

    /// On the leader, with the followers' answers to `offer`: answers whether it went quiet.
    pub fn settle_quiesce(&self, offer: &QuiesceOffer, all_agreed: bool) -> bool {
        self.quiescence.settle(&self.raft, offer, all_agreed)
    }

    /// On a follower: goes quiet if `leader` leads in `term` and this replica has its whole
    /// log up to `last_index`, committed and applied.
    pub fn accept_quiesce(&self, leader: u64, term: u64, last_index: u64) -> bool {
        self.quiescence.accept(&self.raft, leader, term, last_index)
    }

    /// `peer` stopped answering. A quiet group it leads wakes (its election timer, long run
    /// out, elects at once); a quiet group this node leads with it as a follower records it
    /// absent, or wakes when the others are no quorum. Answers whether the group woke.
    pub fn wake_for_peer(&self, peer: u64) -> bool {
        if !self.quiescence.is_quiet() {
            return false;
        }
        let leader = self.leader();
        if leader == Some(peer) {
            // Unless another survivor was picked to take over: its vote wakes this one.
            if self.quiescence.is_awaiting_candidate() {
                return false;
            }
            return self.quiescence.wake(&self.raft);
        }
        if leader != Some(self.node_id) {
            return false;
        }
        let voters: Vec<u64> = self.members().voters.into_iter().collect();
        if !voters.contains(&peer) || self.quiescence.mark_absent(peer, &voters) {
            return false;
        }
        self.quiescence.wake(&self.raft)
    }

    /// Wakes a quiet group this node leads that went quiet without `peer`, which answers
    /// again: the leader's heartbeat catches it up. Answers whether it did.
    pub fn wake_for_return(&self, peer: u64) -> bool {
        self.quiescence.absent().contains(&peer) && self.quiescence.wake(&self.raft)
    }

    /// Wakes a quiet group (its election timer runs at once): nothing will wake it otherwise,
    /// e.g. a dormant replica whose group nobody leads. Answers whether it was quiet.
    pub fn wake_to_elect(&self) -> bool {
        self.quiescence.wake(&self.raft)
    }

    pub fn group(&self) -> RaftGroupId {
        self.group
    }

    pub(crate) fn node_id(&self) -> u64 {
        self.node_id
    }

    /// Replicates one stored batch; answers its base offset once applied (durable on a quorum).
    pub async fn append(&self, batch: Bytes) -> Result<(u64, u32), RaftLayerError> {
        self.awake().await;
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
            _ => Err(RaftLayerError::Rejected(
                "unexpected answer to an append".into(),
            )),
        }
    }

    /// Replicates a change of a subscription's delivery state; answers what it did.
    pub async fn queue(&self, command: DeliveryCommand) -> Result<DeliveryOutcome, RaftLayerError> {
        self.awake().await;
        let response = self
            .raft
            .client_write(RaftRequest::Delivery(command))
            .await
            .map_err(|e| write_error(self.group, e))?;
        match response.data {
            RaftResponse::Delivery(outcome) => Ok(outcome),
            RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
            _ => Err(RaftLayerError::Rejected(
                "unexpected answer to a queue command".into(),
            )),
        }
    }

    /// The subscriptions' delivery state as applied here.
    pub fn delivery_view(&self) -> &DeliveryView {
        &self.queues
    }

    pub fn watermarks(&self) -> Watermarks {
        *self.watermarks.borrow()
    }

    /// On the leader: which batches have expired (see [`retention::plan`]).
    pub async fn plan_retention(
        &self,
        cutoff_ms: Option<i64>,
        max_bytes: Option<u64>,
    ) -> Result<Option<RetentionPlan>, RaftLayerError> {
        let (store, group, watermarks) = (self.store.clone(), self.group, self.watermarks());
        blocking(move || retention::plan(&store, group, watermarks, cutoff_ms, max_bytes)).await
    }

    /// Replicates a retention decision; answers the log start it left.
    pub async fn trim(&self, plan: RetentionPlan) -> Result<u64, RaftLayerError> {
        self.awake().await;
        let response = self
            .raft
            .client_write(RaftRequest::Trim {
                log_start_offset: plan.log_start_offset,
                time_index_before: plan.time_index_before,
            })
            .await
            .map_err(|e| write_error(self.group, e))?;
        match response.data {
            RaftResponse::Trimmed { log_start_offset } => Ok(log_start_offset),
            RaftResponse::Rejected(reason) => Err(RaftLayerError::Rejected(reason)),
            _ => Err(RaftLayerError::Rejected(
                "unexpected answer to a trim".into(),
            )),
        }
    }

    /// The log start below which this replica's raft log was purged.
    pub fn purged_offset(&self) -> u64 {
        self.purged_offset.load(Ordering::Relaxed)
    }

    /// The partition's high watermark as of this replica's newest checkpoint, as far as its
    /// purge checks saw (0: none yet).
    pub fn checkpointed_offset(&self) -> u64 {
        self.checkpointed_offset.load(Ordering::Relaxed)
    }

    /// Waits (a bounded time) until this group's raft metrics satisfy `done`.
    async fn wait_metrics(
        &self,
        done: impl Fn(&openraft::RaftMetrics<TypeConfig>) -> bool,
    ) -> Result<(), RaftLayerError> {
        let mut metrics = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + PURGE_WAIT;
        loop {
            if done(&metrics.borrow_watched()) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(RaftLayerError::Rejected(format!(
                        "group {}: snapshot or purge did not finish in time",
                        self.group
                    )))
                }
            }
        }
    }

    /// Every purge check (each second, and after each retention pass): keeps checkpoints of
    /// this replica's state, snapshots at the newest one before the partition's first
    /// retained batch, purges the raft log up to it through raft, and compacts the range so
    /// the disk space comes back. The log is never purged past the first retained batch, so
    /// a replica that falls behind replays every retained entry after the snapshot (see
    /// `engine::checkpoints`). Cheap when nothing was applied since the last check.
    pub async fn purge_trimmed(&self) -> Result<(), RaftLayerError> {
        let _one_at_a_time = self.purge_lock.lock().await;
        let watermarks = self.watermarks();
        // Two indexes read under the watch's lock rather than a clone of every metric: this
        // runs for each replica every second.
        let (applied, purged_before) = {
            let receiver = self.raft.metrics();
            let metrics = receiver.borrow_watched();
            (
                metrics.last_applied.as_ref().map(|log_id| log_id.index),
                metrics.purged.as_ref().map(|purged| purged.index),
            )
        };
        let Some(applied) = applied else {
            return Ok(());
        };
        let start = watermarks.log_start_offset;
        if applied == self.checked_at.load(Ordering::Relaxed)
            && start <= self.purged_offset.load(Ordering::Relaxed)
        {
            return Ok(());
        }
        let (store, group) = (self.store.clone(), self.group);
        let first_kept =
            blocking(move || retention::raft_index_of_batch(&store, group, start)).await?;
        let limit = match first_kept {
            Some(index) => index.saturating_sub(1),
            // Nothing retained: every applied entry may go.
            None if start >= watermarks.high_watermark => applied,
            None => return Ok(()),
        };
        if watermarks.high_watermark == 0 {
            // Never written to: the log holds only membership and leader entries, not worth a
            // checkpoint, a snapshot and a compaction (tens of milliseconds together: thousands
            // of new partitions spent minutes of CPU on them). Nothing is purged, so nothing
            // relies on a snapshot yet.
            self.checked_at.store(applied, Ordering::Relaxed);
            return Ok(());
        }
        let fatal = |error: openraft::errors::Fatal<TypeConfig>| RaftLayerError::Fatal {
            group: self.group,
            reason: error.to_string(),
        };
        let (status, checkpointed_offset) = self
            .raft
            .with_state_machine(move |machine| maintain_checkpoints(machine, limit))
            .await
            .map_err(fatal)?
            .map_err(RaftLayerError::Storage)?;
        self.checked_at.store(applied, Ordering::Relaxed);
        if let Some(offset) = checkpointed_offset {
            self.checkpointed_offset.store(offset, Ordering::Relaxed);
        }
        if let Some(checkpoint) = status.usable {
            self.raft.trigger().snapshot().await.map_err(fatal)?;
            self.wait_metrics(|metrics| {
                metrics
                    .snapshot
                    .as_ref()
                    .is_some_and(|snapshot| snapshot.index >= checkpoint)
            })
            .await?;
        }
        let snapshot = self
            .raft
            .metrics()
            .borrow_watched()
            .snapshot
            .as_ref()
            .map(|snapshot| snapshot.index);
        let Some(upto) = snapshot.filter(|index| *index <= limit) else {
            return Ok(());
        };
        let purged = |metrics: &openraft::RaftMetrics<TypeConfig>| {
            metrics
                .purged
                .as_ref()
                .is_some_and(|purged| purged.index >= upto)
        };
        if purged_before.is_none_or(|index| index < upto) {
            self.raft.trigger().purge_log(upto).await.map_err(fatal)?;
            self.wait_metrics(purged).await?;
            let (store, group) = (self.store.clone(), self.group);
            blocking(move || retention::compact_log_prefix(&store, group, upto + 1)).await?;
        }
        if upto == limit {
            self.purged_offset.store(start, Ordering::Relaxed);
        }
        Ok(())
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

    /// Role, term, indexes and follower lag, for metrics.
    pub fn raft_status(&self) -> RaftStatus {
        status_of(&self.raft, self.node_id)
    }

    /// Leader, voters and in-sync replicas, when this node leads the group.
    pub fn leader_report(&self) -> Option<LeaderReport> {
        // Most replicas are followers: answered before the quiet list is copied.
        if !self.is_leader() {
            return None;
        }
        let quiet = self.quiescence.is_quiet().then(|| self.quiescence.absent());
        leader_report(&self.raft, self.node_id, self.max_ack_age, quiet.as_deref())
    }

    pub fn members(&self) -> GroupMembers {
        members_of(&self.raft)
    }

    /// On the leader: one step toward `replicas` being the voters (see [`membership`]).
    ///
    /// [`membership`]: crate::engine::membership
    pub async fn converge_replicas(
        &self,
        replicas: &BTreeSet<u64>,
        addresses: &BTreeMap<u64, NodeAddr>,
    ) -> Result<MembershipStep, RaftLayerError> {
        let members = self.members();
        let settled = members.voters == *replicas && members.learners.is_empty() && !members.joint;
        if !settled {
            // Only a change wakes a quiet group: this runs on every reconcile pass.
            self.awake().await;
        }
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
        self.awake().await;
        let term = self.raft.metrics().borrow_watched().current_term;
        if transfer_leadership(&self.raft, self.group, to).await {
            self.handing_over_in_term.store(term, Ordering::SeqCst);
        }
    }

    /// Whether this replica leads and is handing its leadership over (a transfer asked in its
    /// current term). Openraft's leader then neither heartbeats nor proposes until the target,
    /// or another replica, is elected; if the target died meanwhile, only the followers'
    /// election ends that. So such a leader does not claim the group in its reports to peers,
    /// whose followers would otherwise wait for it as a live leader (see
    /// `engine::leader_liveness`).
    pub fn is_handing_over(&self) -> bool {
        let term = self.handing_over_in_term.load(Ordering::SeqCst);
        if term == 0 {
            return false;
        }
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics.state == ServerState::Leader && metrics.current_term == term
    }

    /// The group's leader `dead` is gone: elect `candidate` now (see [`take_over_from`]). The
    /// candidate's replica wakes (no heartbeat to wait for, only the election timer to
    /// restart); a quiet replica elsewhere stays quiet until the candidate's vote reaches it
    /// (see `engine::quiescence`), so each group has one campaign, not one per survivor.
    pub async fn take_over_from(&self, dead: u64, candidate: u64) {
        if candidate == self.node_id {
            self.quiescence.wake(&self.raft);
        } else {
            self.quiescence.await_candidate();
        }
        take_over_from(&self.raft, self.group, dead, candidate).await
    }

    /// Ends this leader's replication backoff to `peer`, whose connection came back (see
    /// `engine::replication_backoff`).
    pub async fn reset_replication_backoff(&self, peer: u64) {
        reset_replication_backoff(&self.raft, self.group, peer).await
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
        blocking(move || reader::read_batches(&store, group, from_offset, high_watermark, limits))
            .await
    }

    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<u64>, RaftLayerError> {
        let (store, group) = (self.store.clone(), self.group);
        blocking(move || reader::offset_for_timestamp(&store, group, timestamp)).await
    }

    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::Relaxed);
        self.registry.remove(self.group);
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(group = self.group.get(), %error, "raft group did not shut down cleanly");
        }
    }

    /// Stops the group and removes all it stored.
    pub async fn destroy(&self) -> Result<(), RaftLayerError> {
        self.shutdown().await;
        let (store, group, log_lock) = (self.store.clone(), self.group, self.log_lock.clone());
        blocking(move || {
            // A cleaner storing rewrites finishes first, and stores nothing after this.
            let _no_rewrites = log_lock
                .lock()
                .map_err(|_| std::io::Error::other("log lock poisoned"))?;
            reader::destroy_group(&store, group)
        })
        .await
    }
}
