//! This node's replica of the metadata group: proposing, the applied state, membership.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::applier::MetadataApplier;
use super::consumer_groups::ConsumerGroupsView;
use crate::engine::error::RaftLayerError;
use crate::engine::group::{
    bootstrap_raft, leader_of, reset_replication_backoff, start_raft, transfer_leadership,
    wait_for_leader, write_error, Bootstrap, GroupContext,
};
use crate::engine::membership::{
    converge, leader_report, members_of, take_over_from, GroupMembers, LeaderReport, MembershipStep,
};
use crate::engine::registry::{GroupRegistry, MetadataRaft, RegisteredGroup};
use crate::engine::status::{status_of, RaftStatus};
use crate::engine::types::{NodeAddr, RaftRequest, RaftResponse};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState, METADATA_GROUP};

/// This node's replica of the metadata group.
pub struct MetadataReplica {
    node_id: u64,
    raft: MetadataRaft,
    state: watch::Receiver<Arc<MetadataState>>,
    groups: ConsumerGroupsView,
    registry: Arc<GroupRegistry>,
    leader_wait: Duration,
    max_ack_age: Duration,
    founded_here: bool,
}

impl MetadataReplica {
    pub async fn start(
        context: &GroupContext,
        bootstrap: Bootstrap,
    ) -> Result<Self, RaftLayerError> {
        let applier = MetadataApplier::new();
        let state = applier.subscribe();
        let groups = applier.groups();
        let (raft, leader_wait) = start_raft(
            context,
            METADATA_GROUP,
            applier,
            Default::default(),
            Default::default(),
            true,
        )
        .await?;
        // Read before the group is registered, so no peer's message can have reached it: what
        // this node's disk held. A founder slower to start than its peers may be initialized by
        // the first leader's replication before its own `initialize`, and is still the founder.
        let fresh = !raft
            .is_initialized()
            .await
            .map_err(|fatal| RaftLayerError::Fatal {
                group: METADATA_GROUP,
                reason: fatal.to_string(),
            })?;
        context
            .registry
            .insert(METADATA_GROUP, RegisteredGroup::Metadata(raft.clone()));
        let preferred_founder = matches!(bootstrap, Bootstrap::Initialize { campaign: true, .. });
        bootstrap_raft(&raft, METADATA_GROUP, &bootstrap).await?;
        let founded_here = fresh && preferred_founder;
        Ok(MetadataReplica {
            node_id: context.node_id,
            raft,
            state,
            groups,
            registry: context.registry.clone(),
            leader_wait,
            max_ack_age: context.max_ack_age(),
            founded_here,
        })
    }

    /// Whether this start founded the cluster: this node is the metadata group's preferred
    /// first leader and its disk held no metadata group when it started. True on exactly one
    /// node of a new cluster, once.
    pub fn founded_here(&self) -> bool {
        self.founded_here
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
            _ => Err(RaftLayerError::Rejected(
                "unexpected answer to a metadata command".into(),
            )),
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

    /// The consumer groups as applied on this node.
    pub fn groups(&self) -> &ConsumerGroupsView {
        &self.groups
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

    /// Role, term, indexes and follower lag, for metrics.
    pub fn raft_status(&self) -> RaftStatus {
        status_of(&self.raft, self.node_id)
    }

    pub fn leader_report(&self) -> Option<LeaderReport> {
        leader_report(&self.raft, self.node_id, self.max_ack_age, None)
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

    /// Ends this leader's replication backoff to `peer`, whose connection came back.
    pub async fn reset_replication_backoff(&self, peer: u64) {
        reset_replication_backoff(&self.raft, METADATA_GROUP, peer).await
    }

    /// Asks this leader to hand the metadata group's leadership to `to` (before a graceful
    /// stop).
    pub async fn transfer_leadership(&self, to: u64) {
        transfer_leadership(&self.raft, METADATA_GROUP, to).await;
    }

    pub async fn shutdown(&self) {
        self.registry.remove(METADATA_GROUP);
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "metadata raft group did not shut down cleanly");
        }
    }
}
