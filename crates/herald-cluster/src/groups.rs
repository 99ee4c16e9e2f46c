//! Consumer group coordination at the cluster level: group commands go through the metadata
//! group like any metadata change, and the metadata leader is the groups' coordinator for
//! what is not replicated, members' liveness.
//!
//! Heartbeats are not written anywhere: a member's liveness is the metadata leader's memory
//! of when it last heard from it. Replicating every heartbeat would cost a raft write per
//! member every few seconds for nothing; losing this memory with the leader only means that
//! the new leader gives every member a full session timeout from the moment it takes over
//! (as Kafka's coordinator failover does), and expires those that stay silent.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::metadata_group::{MetadataGroup, MetadataLeaderOperation, Try};
use super::operation::{ClusterOperation, ClusterOperationKind};
use super::service::ProposeFailure;
use super::{now_ms, Cluster, ClusterError};
use herald_domain::groups::{ConsumerGroup, GroupCommand, GroupOutcome, TopicPartition};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use herald_raft::ConsumerGroupsView;

/// How often the metadata leader looks for expired members and resized topics.
pub(super) const COORDINATION_INTERVAL: Duration = Duration::from_millis(200);

/// A member's view of its group, as a heartbeat answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    pub generation: u64,
    pub assignments: Vec<TopicPartition>,
}

/// A consumer group member is alive: for the coordinator, the metadata leader.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct GroupHeartbeat {
    pub(crate) group: String,
    pub(crate) member_id: String,
}

impl ClusterOperation for GroupHeartbeat {
    const KIND: ClusterOperationKind = ClusterOperationKind::GroupHeartbeat;
    /// The member's generation and partitions; None for an unknown member.
    type Reply = Result<Option<MemberView>, ProposeFailure>;

    async fn serve(self, cluster: &Cluster) -> Self::Reply {
        cluster
            .groups()
            .serve_heartbeat(&self.group, &self.member_id)
    }
}

impl MetadataLeaderOperation for GroupHeartbeat {
    type Answer = Option<MemberView>;
    type Context = GroupCoordinator;
    /// A heartbeat changes nothing durable: trying again elsewhere is always safe.
    const REPEATABLE: bool = true;
    const PAUSE: Duration = Duration::from_millis(50);

    async fn run_here(&self, groups: &GroupCoordinator, _deadline: Instant) -> Try<Self::Answer> {
        Try::Done(Ok(groups.heartbeat_here(&self.group, &self.member_id)))
    }

    fn failed(failure: ProposeFailure) -> Try<Self::Answer> {
        match failure {
            ProposeFailure::Failed(reason) => Try::Done(Err(ClusterError::Unavailable(reason))),
            // Not the leader (any more): ask again, elsewhere if need be.
            ProposeFailure::NoLeader
            | ProposeFailure::TimedOut
            | ProposeFailure::OutcomeUnknown(_) => Try::Again,
        }
    }
}

/// When the metadata leader last heard from each member, by (group, member id).
#[derive(Default)]
struct Liveness {
    seen: parking_lot::Mutex<HashMap<(String, String), Instant>>,
}

/// Consumer groups at the cluster level: their replicated state (in the metadata), their
/// commands, and, on the metadata leader, the members' liveness it coordinates by.
pub struct GroupCoordinator {
    metadata: Arc<MetadataGroup>,
    liveness: Liveness,
    leader_wait: Duration,
}

impl GroupCoordinator {
    pub(crate) fn new(metadata: Arc<MetadataGroup>, leader_wait: Duration) -> GroupCoordinator {
        GroupCoordinator {
            metadata,
            liveness: Liveness::default(),
            leader_wait,
        }
    }

    /// Reads the consumer groups as applied on this node.
    pub fn read<R>(&self, read: impl FnOnce(&herald_domain::groups::ConsumerGroups) -> R) -> R {
        self.view().read(read)
    }

    /// Bumped whenever the groups change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.view().changes()
    }

    fn view(&self) -> &ConsumerGroupsView {
        self.metadata.replica().groups()
    }

    /// Proposes a group command through the metadata leader; when it returns, this node has
    /// applied it.
    pub async fn propose(&self, command: GroupCommand) -> Result<GroupOutcome, ClusterError> {
        match self
            .metadata
            .propose(MetadataCommand::Groups(command))
            .await?
        {
            MetadataOutcome::Groups(outcome) => Ok(outcome),
            other => Err(ClusterError::Unavailable(format!(
                "unexpected answer to a group command: {other:?}"
            ))),
        }
    }

    /// Tells the coordinator (the metadata leader, wherever it is) that a member is alive.
    /// Answers the member's generation and partitions, or None if the group has no such
    /// member (it left, or its session expired).
    pub async fn heartbeat(
        &self,
        group: &str,
        member_id: &str,
    ) -> Result<Option<MemberView>, ClusterError> {
        let heartbeat = GroupHeartbeat {
            group: group.to_string(),
            member_id: member_id.to_string(),
        };
        let deadline = Instant::now() + self.leader_wait;
        self.metadata
            .run_on_leader(self, &heartbeat, deadline)
            .await
    }

    /// Serves a heartbeat forwarded by another node.
    fn serve_heartbeat(
        &self,
        group: &str,
        member_id: &str,
    ) -> Result<Option<MemberView>, ProposeFailure> {
        if self.metadata.is_leader() {
            Ok(self.heartbeat_here(group, member_id))
        } else {
            Err(ProposeFailure::NoLeader)
        }
    }

    fn heartbeat_here(&self, group: &str, member_id: &str) -> Option<MemberView> {
        let view = self.read(|groups| {
            let group = groups.get(group)?;
            let member = group.members.get(member_id)?;
            Some(MemberView {
                generation: group.generation,
                assignments: member.assignments.clone(),
            })
        })?;
        self.liveness
            .seen
            .lock()
            .insert((group.to_string(), member_id.to_string()), Instant::now());
        Some(view)
    }

    /// On the metadata leader: expires members whose session ran out and rebalances groups
    /// whose topics changed partition counts. Elsewhere: forgets liveness, so that becoming
    /// leader later starts every member's session afresh.
    pub(crate) async fn coordinate(&self) {
        if !self.metadata.is_leader() {
            self.liveness.seen.lock().clear();
            return;
        }
        let metadata = self.metadata.current();
        let now = Instant::now();
        let (expired, resized) = self.read(|groups| {
            let mut seen = self.liveness.seen.lock();
            let mut expired: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut resized = Vec::new();
            for group in groups.groups.values() {
                for member in group.members.values() {
                    let last = *seen
                        .entry((group.name.clone(), member.member_id.clone()))
                        .or_insert(now);
                    if now.duration_since(last) > Duration::from_millis(member.session_timeout_ms) {
                        expired
                            .entry(group.name.clone())
                            .or_default()
                            .push(member.member_id.clone());
                    }
                }
                if !group.members.is_empty()
                    && partition_counts(&metadata, group) != group.partition_counts
                {
                    resized.push(group.name.clone());
                }
            }
            seen.retain(|(group, member), _| {
                groups
                    .get(group)
                    .is_some_and(|group| group.members.contains_key(member))
            });
            (expired, resized)
        });
        for (group, member_ids) in expired {
            let counts = self.group_partition_counts(&metadata, &group);
            let expired_count = member_ids.len();
            let command = GroupCommand::Expire {
                group: group.clone(),
                member_ids,
                partition_counts: counts,
                now_ms: now_ms(),
            };
            match self.propose(command).await {
                Ok(_) => {
                    tracing::info!(group, members = expired_count, "expired silent members");
                    metrics::counter!("herald_group_members_expired_total")
                        .increment(expired_count as u64);
                }
                Err(error) => tracing::warn!(group, %error, "expiring members"),
            }
        }
        for group in resized {
            let command = GroupCommand::Resize {
                group: group.clone(),
                partition_counts: self.group_partition_counts(&metadata, &group),
                now_ms: now_ms(),
            };
            if let Err(error) = self.propose(command).await {
                tracing::warn!(group, %error, "rebalancing after a partition change");
            }
        }
    }

    fn group_partition_counts(
        &self,
        metadata: &MetadataState,
        group: &str,
    ) -> BTreeMap<String, u32> {
        self.read(|groups| {
            groups
                .get(group)
                .map(|group| partition_counts(metadata, group))
                .unwrap_or_default()
        })
    }
}

/// The current partition count of every topic the group's members subscribe to (0 for a
/// topic that does not exist).
fn partition_counts(metadata: &MetadataState, group: &ConsumerGroup) -> BTreeMap<String, u32> {
    topic_partition_counts(metadata, group.topics())
}

/// The partition counts of `topics` in `metadata` (0 for a missing topic).
pub fn topic_partition_counts<'a>(
    metadata: &MetadataState,
    topics: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, u32> {
    topics
        .into_iter()
        .map(|topic| {
            let count = metadata
                .topics
                .get(topic)
                .map_or(0, |meta| meta.partitions.len() as u32);
            (topic.to_string(), count)
        })
        .collect()
}
