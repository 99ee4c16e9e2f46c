//! The cluster's metadata: topics, their partitions' raft groups and replicas, and nodes.
//!
//! The metadata raft group replicates [`MetadataCommand`]s; every node applies them with
//! [`MetadataState::apply`], which is deterministic (no clock, no randomness: whatever varies is
//! decided by the proposer and carried in the command), so every replica ends in the same state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::auth::{AuthCommand, AuthOutcome, AuthState};
use super::groups::{GroupCommand, GroupOutcome};
use super::names::{is_internal, validate_name};
use super::producers::{ProducerRegistration, ProducerRegistry};
use super::redrive::{RedriveCommand, RedriveOutcome, Redrives};
use super::schemas::{SchemaCommand, SchemaOutcome, SchemaRegistry};
use super::subscriptions::{SubscriptionCommand, SubscriptionOutcome, Subscriptions};
use super::topic::{TopicConfig, TopicConfigPatch, MAX_PARTITIONS};
use crate::raft_group::RaftGroupId;
use crate::replica_moves::ReplicaMove;
use crate::wire_version::{ClusterVersion, Feature, WireVersion};
use crate::zones::Zones;

/// The raft group id of the metadata group; partition groups count up from 1.
pub const METADATA_GROUP: RaftGroupId = RaftGroupId::METADATA;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAssignment {
    /// The raft group holding this partition's log. Never reused, so a deleted topic's data
    /// can never be mistaken for a new one's.
    pub group_id: RaftGroupId,
    /// Node ids of the replicas; the first is the preferred leader.
    pub replicas: Vec<u64>,
    /// The replicas the partition was created with. Only they found its raft group; a replica
    /// added later (a drained node's replacement) joins the running group instead.
    pub founders: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub config: TopicConfig,
    pub replication_factor: u16,
    pub partitions: Vec<PartitionAssignment>,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub http_addr: String,
    pub raft_addr: String,
    /// Being drained: its replicas are moving away and it gets no new ones.
    pub draining: bool,
}

/// Every applied change is published to the node's watchers as a new `Arc<MetadataState>`, a
/// clone of the applier's copy. So that the clone stays cheap with 100,000 partitions, the large
/// parts are shared with the versions already published: each topic, and the schema registry,
/// is behind an `Arc`, and a change copies only what it touches (`Arc::make_mut`, see
/// [`MetadataState::topic_mut`]). An `Arc<T>` encodes exactly as `T` (serde's `rc`), so the
/// encoding is that of the plain values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataState {
    /// Chosen once, by the node that bootstraps the cluster.
    pub cluster_id: Option<String>,
    /// Shared with the published versions: change one through [`MetadataState::topic_mut`].
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    pub nodes: BTreeMap<u64, NodeRecord>,
    pub next_group_id: RaftGroupId,
    /// Ids of nodes drained and removed. Never reused: a node that comes back with one must
    /// not rejoin groups whose history it no longer matches.
    pub removed_nodes: BTreeSet<u64>,
    /// Idempotent producer ids and the epochs of named producers.
    pub producers: ProducerRegistry,
    /// Names of deleted topics and when they were deleted (the proposer's clock), the most
    /// recent [`MAX_DELETED_TOPICS`]: a delete retried after its first answer was lost finds
    /// the topic here and succeeds again instead of answering 404.
    pub deleted_topics: BTreeMap<String, i64>,
    /// Subscriptions' settings (their delivery state is in the partitions' groups).
    pub subscriptions: Subscriptions,
    /// The latest redrive job of each subscription, with its checkpoint.
    pub redrives: Redrives,
    /// OAuth2 clients, signing keys and the authorization policy.
    pub auth: AuthState,
    /// The wire version every node is known to speak (see `wire_version`). Not part of this
    /// type's own encoding, which is frozen in the data directories of format 11: the metadata
    /// state machine stores and snapshots it after the state, as an extension a node of an
    /// older release ignores.
    #[serde(skip)]
    pub cluster_version: ClusterVersion,
    /// The schema registry (wire version 2 on). Stored after the frozen encoding, in the same
    /// extension as the cluster version. Shared with the published versions: a change copies
    /// it (`Arc::make_mut`).
    #[serde(skip)]
    pub schemas: Arc<SchemaRegistry>,
    /// The nodes' zones (wire version 3 on). Stored after the frozen encoding, in the same
    /// extension as the cluster version.
    #[serde(skip)]
    pub zones: Zones,
}

/// How many deleted topic names the metadata remembers.
pub const MAX_DELETED_TOPICS: usize = 1024;
/// How long after its deletion a delete of the same topic still answers success.
pub const DELETE_RETRY_WINDOW_MS: i64 = 60 * 60 * 1000;

impl Default for MetadataState {
    fn default() -> Self {
        MetadataState {
            cluster_id: None,
            topics: BTreeMap::new(),
            nodes: BTreeMap::new(),
            next_group_id: METADATA_GROUP.next(),
            removed_nodes: BTreeSet::new(),
            producers: ProducerRegistry::default(),
            deleted_topics: BTreeMap::new(),
            subscriptions: Subscriptions::default(),
            redrives: Redrives::default(),
            auth: AuthState::default(),
            cluster_version: ClusterVersion::default(),
            schemas: Arc::default(),
            zones: Zones::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataCommand {
    /// Sets the cluster id unless one is set already.
    InitCluster { cluster_id: String },
    RegisterNode {
        node_id: u64,
        http_addr: String,
        raft_addr: String,
    },
    /// `replicas[p]` are partition p's replicas, chosen by the proposer.
    CreateTopic {
        name: String,
        replication_factor: u16,
        config: TopicConfig,
        replicas: Vec<Vec<u64>>,
        created_at_ms: i64,
    },
    /// Grows partitions (with `new_replicas` for the added ones) and/or patches the config.
    UpdateTopic {
        name: String,
        partitions: Option<u32>,
        config: TopicConfigPatch,
        new_replicas: Vec<Vec<u64>>,
    },
    DeleteTopic {
        name: String,
        /// The proposer's clock, remembered with the name for retries.
        deleted_at_ms: i64,
    },
    /// An operator adds a node (`POST /v1/cluster/nodes`); refused if the id is taken by
    /// other addresses.
    AddNode {
        node_id: u64,
        http_addr: String,
        raft_addr: String,
    },
    /// Marks a node draining and moves its replicas: `moves` are (topic, partition, new
    /// replica list), chosen by the proposer.
    DrainNode {
        node_id: u64,
        moves: Vec<(String, u32, Vec<u64>)>,
    },
    /// Forgets a drained node that no partition lists any more.
    RemoveNode { node_id: u64 },
    /// A consumer group change. Replicated by the metadata group but kept apart from this
    /// state (see `domain::groups`): group commits are frequent and must not rewrite or
    /// republish the topics.
    Groups(GroupCommand),
    /// Registers an idempotent producer (`POST /v1/producers`): a name gets its id back with
    /// the next epoch (fencing the previous holder), no name a fresh id.
    InitProducer { name: Option<String> },
    /// Creates, changes or deletes a subscription.
    Subscription(SubscriptionCommand),
    /// Starts, moves, ends or cancels a subscription's redrive job.
    Redrive(RedriveCommand),
    /// Clients, signing keys, the policy.
    Auth(AuthCommand),
    /// Raises the cluster version to `version` (never lowers it): proposed by the metadata
    /// leader once every member node reports at least `version` (wire version 1 on; see
    /// `wire_version`).
    RaiseClusterVersion { version: WireVersion },
    /// A schema registry change (wire version 2 on).
    Schemas(SchemaCommand),
    /// Sets (or clears) the zone of a registered node: the node reports its own (wire
    /// version 3 on; see `zones`).
    SetNodeZone { node_id: u64, zone: Option<String> },
    /// Moves partitions' replicas between active nodes, all or none, each only while its
    /// replicas are still those it was planned from (a rebalance; wire version 3 on; see
    /// `replica_moves`).
    MoveReplicas { moves: Vec<ReplicaMove> },
}

impl MetadataCommand {
    /// What a command needs every replica to know before it may be proposed (see
    /// `wire_version`); `None` for the commands every supported release knows. A new command
    /// names its feature here: the match has no wildcard on purpose.
    pub fn feature(&self) -> Option<Feature> {
        match self {
            MetadataCommand::InitCluster { .. }
            | MetadataCommand::RegisterNode { .. }
            | MetadataCommand::CreateTopic { .. }
            | MetadataCommand::UpdateTopic { .. }
            | MetadataCommand::DeleteTopic { .. }
            | MetadataCommand::AddNode { .. }
            | MetadataCommand::DrainNode { .. }
            | MetadataCommand::RemoveNode { .. }
            | MetadataCommand::Groups(_)
            | MetadataCommand::InitProducer { .. }
            | MetadataCommand::Subscription(_)
            | MetadataCommand::Redrive(_)
            | MetadataCommand::Auth(_) => None,
            MetadataCommand::RaiseClusterVersion { .. } => Some(Feature::ClusterVersionCommand),
            MetadataCommand::Schemas(_) => Some(Feature::SchemaRegistry),
            MetadataCommand::SetNodeZone { .. } => Some(Feature::Zones),
            MetadataCommand::MoveReplicas { .. } => Some(Feature::ReplicaMoves),
        }
    }

    /// The gate every metadata proposal passes: `Err(feature)` when the command needs a
    /// feature the cluster version (`cluster_version`) does not allow yet. A raise of the
    /// cluster version vouches for its own version, which its proposer checked every member
    /// reports (`ClusterVersion::raise_to`).
    pub fn may_propose(&self, cluster_version: ClusterVersion) -> Result<(), Feature> {
        let Some(feature) = self.feature() else {
            return Ok(());
        };
        let vouched = match self {
            MetadataCommand::RaiseClusterVersion { version } => {
                cluster_version.max(ClusterVersion(*version))
            }
            _ => cluster_version,
        };
        if vouched.allows(feature) {
            Ok(())
        } else {
            Err(feature)
        }
    }
}

impl std::fmt::Display for MetadataCommand {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetadataCommand::InitCluster { cluster_id } => {
                write!(formatter, "init cluster {cluster_id}")
            }
            MetadataCommand::RegisterNode { node_id, .. } => {
                write!(formatter, "register node {node_id}")
            }
            MetadataCommand::CreateTopic { name, replicas, .. } => {
                write!(
                    formatter,
                    "create topic {name} ({} partitions)",
                    replicas.len()
                )
            }
            MetadataCommand::UpdateTopic { name, .. } => write!(formatter, "update topic {name}"),
            MetadataCommand::DeleteTopic { name, .. } => {
                write!(formatter, "delete topic {name}")
            }
            MetadataCommand::AddNode { node_id, .. } => write!(formatter, "add node {node_id}"),
            MetadataCommand::DrainNode { node_id, moves } => {
                write!(formatter, "drain node {node_id} ({} moves)", moves.len())
            }
            MetadataCommand::RemoveNode { node_id } => write!(formatter, "remove node {node_id}"),
            MetadataCommand::Groups(command) => write!(formatter, "{command}"),
            MetadataCommand::Subscription(command) => write!(formatter, "{command}"),
            MetadataCommand::Redrive(command) => write!(formatter, "{command}"),
            MetadataCommand::Auth(command) => write!(formatter, "{command}"),
            MetadataCommand::Schemas(command) => write!(formatter, "{command}"),
            MetadataCommand::SetNodeZone { node_id, zone } => match zone {
                Some(zone) => write!(formatter, "node {node_id} is in zone {zone}"),
                None => write!(formatter, "node {node_id} is in no zone"),
            },
            MetadataCommand::MoveReplicas { moves } => {
                write!(formatter, "move the replicas of {} partitions", moves.len())
            }
            MetadataCommand::RaiseClusterVersion { version } => {
                write!(formatter, "raise the cluster version to {version}")
            }
            MetadataCommand::InitProducer { name } => match name {
                Some(name) => write!(formatter, "init producer {name}"),
                None => write!(formatter, "init an unnamed producer"),
            },
        }
    }
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataOutcome {
    Done,
    TopicExists,
    TopicNotFound,
    Invalid(String),
    /// The node id belongs to a node with other addresses.
    NodeExists,
    NodeNotFound,
    Groups(GroupOutcome),
    /// A producer's id and epoch.
    ProducerInitialized(ProducerRegistration),
    Subscription(SubscriptionOutcome),
    Redrive(RedriveOutcome),
    Auth(AuthOutcome),
    Schemas(SchemaOutcome),
}

impl MetadataState {
    /// Whether `name` was deleted within [`DELETE_RETRY_WINDOW_MS`] of now (and not created
    /// again since): a delete of it is a retry and succeeds.
    pub fn recently_deleted(&self, name: &str) -> bool {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or(0);
        self.deleted_topics
            .get(name)
            .is_some_and(|deleted_at| now_ms.saturating_sub(*deleted_at) <= DELETE_RETRY_WINDOW_MS)
    }

    pub fn apply(&mut self, command: &MetadataCommand) -> MetadataOutcome {
        match command {
            MetadataCommand::InitCluster { cluster_id } => {
                self.cluster_id.get_or_insert_with(|| cluster_id.clone());
                MetadataOutcome::Done
            }
            MetadataCommand::RegisterNode {
                node_id,
                http_addr,
                raft_addr,
            } => {
                if self.removed_nodes.contains(node_id) {
                    return MetadataOutcome::Invalid(format!(
                        "node {node_id} was removed from the cluster; node ids are not reused"
                    ));
                }
                let draining = self
                    .nodes
                    .get(node_id)
                    .is_some_and(|record| record.draining);
                self.nodes.insert(
                    *node_id,
                    NodeRecord {
                        http_addr: http_addr.clone(),
                        raft_addr: raft_addr.clone(),
                        draining,
                    },
                );
                MetadataOutcome::Done
            }
            MetadataCommand::AddNode {
                node_id,
                http_addr,
                raft_addr,
            } => match self.nodes.get(node_id) {
                Some(record)
                    if record.http_addr == *http_addr && record.raft_addr == *raft_addr =>
                {
                    MetadataOutcome::Done
                }
                Some(_) => MetadataOutcome::NodeExists,
                None if self.removed_nodes.contains(node_id) => MetadataOutcome::NodeExists,
                None if *node_id == 0 => MetadataOutcome::Invalid("node ids start at 1".into()),
                // Two nodes at one address would be one process answering for two ids.
                None if self.nodes.values().any(|record| {
                    record.http_addr == *http_addr || record.raft_addr == *raft_addr
                }) =>
                {
                    MetadataOutcome::NodeExists
                }
                None => {
                    self.nodes.insert(
                        *node_id,
                        NodeRecord {
                            http_addr: http_addr.clone(),
                            raft_addr: raft_addr.clone(),
                            draining: false,
                        },
                    );
                    MetadataOutcome::Done
                }
            },
            MetadataCommand::DrainNode { node_id, moves } => self.drain(*node_id, moves),
            MetadataCommand::MoveReplicas { moves } => self.move_replicas(moves),
            MetadataCommand::Subscription(command) => {
                let topics = &self.topics;
                let outcome = self
                    .subscriptions
                    .apply(command, |topic| topics.contains_key(topic));
                self.redrives.retain_subscriptions(&self.subscriptions);
                MetadataOutcome::Subscription(outcome)
            }
            MetadataCommand::Redrive(command) => {
                MetadataOutcome::Redrive(self.redrives.apply(command, &self.subscriptions))
            }
            MetadataCommand::Auth(command) => MetadataOutcome::Auth(self.auth.apply(command)),
            MetadataCommand::Schemas(command) => {
                let topics = &self.topics;
                MetadataOutcome::Schemas(
                    Arc::make_mut(&mut self.schemas)
                        .apply(command, |topic| topics.contains_key(topic)),
                )
            }
            MetadataCommand::RaiseClusterVersion { version } => {
                // A raise that crossed a newer one (two leaders in turn) changes nothing.
                if ClusterVersion(*version) > self.cluster_version {
                    self.cluster_version = ClusterVersion(*version);
                }
                MetadataOutcome::Done
            }
            MetadataCommand::Groups(_) => {
                MetadataOutcome::Invalid("group commands apply to the consumer groups".into())
            }
            MetadataCommand::RemoveNode { node_id } => {
                if !self.nodes.contains_key(node_id) {
                    return MetadataOutcome::NodeNotFound;
                }
                let still_used = self.topics.values().any(|topic| {
                    topic
                        .partitions
                        .iter()
                        .any(|partition| partition.replicas.contains(node_id))
                });
                if still_used {
                    return MetadataOutcome::Invalid(format!(
                        "node {node_id} still holds replicas"
                    ));
                }
                self.nodes.remove(node_id);
                self.zones.set(*node_id, None);
                self.removed_nodes.insert(*node_id);
                MetadataOutcome::Done
            }
            MetadataCommand::SetNodeZone { node_id, zone } => {
                if !self.nodes.contains_key(node_id) {
                    return MetadataOutcome::NodeNotFound;
                }
                if let Some(Err(reason)) = zone.as_deref().map(crate::zones::validate_zone) {
                    return MetadataOutcome::Invalid(reason);
                }
                self.zones.set(*node_id, zone.clone());
                MetadataOutcome::Done
            }
            MetadataCommand::CreateTopic {
                name,
                replication_factor,
                config,
                replicas,
                created_at_ms,
            } => {
                if self.topics.contains_key(name) {
                    return MetadataOutcome::TopicExists;
                }
                if replicas.is_empty() || replicas.len() > MAX_PARTITIONS as usize {
                    return MetadataOutcome::Invalid(format!(
                        "partitions must be between 1 and {MAX_PARTITIONS}"
                    ));
                }
                let partitions = self.assign_groups(replicas);
                self.deleted_topics.remove(name);
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicMeta {
                        name: name.clone(),
                        config: config.clone(),
                        replication_factor: *replication_factor,
                        partitions,
                        created_at_ms: *created_at_ms,
                    }),
                );
                MetadataOutcome::Done
            }
            MetadataCommand::UpdateTopic {
                name,
                partitions,
                config,
                new_replicas,
            } => {
                let Some(topic) = self.topics.get(name) else {
                    return MetadataOutcome::TopicNotFound;
                };
                let next_config = match topic.config.patched(config) {
                    Ok(next) => next,
                    Err(message) => return MetadataOutcome::Invalid(message),
                };
                let current = topic.partitions.len() as u32;
                let wanted = partitions.unwrap_or(current);
                if wanted < current {
                    return MetadataOutcome::Invalid(format!(
                        "partitions can only grow: topic '{name}' has {current}, asked for {wanted}"
                    ));
                }
                if wanted > MAX_PARTITIONS {
                    return MetadataOutcome::Invalid(format!(
                        "partitions must be between 1 and {MAX_PARTITIONS}"
                    ));
                }
                if new_replicas.len() != (wanted - current) as usize {
                    return MetadataOutcome::Invalid(
                        "placement does not match the partition count".into(),
                    );
                }
                let added = self.assign_groups(new_replicas);
                let Some(topic) = self.topic_mut(name) else {
                    return MetadataOutcome::TopicNotFound;
                };
                topic.config = next_config;
                topic.partitions.extend(added);
                MetadataOutcome::Done
            }
            MetadataCommand::DeleteTopic {
                name,
                deleted_at_ms,
            } => match self.topics.remove(name) {
                Some(_) => {
                    self.subscriptions.topic_deleted(name);
                    // Only a bound topic copies the shared registry.
                    if self.schemas.topics.contains_key(name) {
                        Arc::make_mut(&mut self.schemas).forget_topic(name);
                    }
                    self.redrives.retain_subscriptions(&self.subscriptions);
                    self.deleted_topics.insert(name.clone(), *deleted_at_ms);
                    if self.deleted_topics.len() > MAX_DELETED_TOPICS {
                        let oldest = self
                            .deleted_topics
                            .iter()
                            .min_by_key(|(name, at)| (**at, (*name).clone()))
                            .map(|(name, _)| name.clone());
                        if let Some(oldest) = oldest {
                            self.deleted_topics.remove(&oldest);
                        }
                    }
                    MetadataOutcome::Done
                }
                None => MetadataOutcome::TopicNotFound,
            },
            MetadataCommand::InitProducer { name } => {
                if let Some(name) = name {
                    if let Err(message) = validate_name("producer name", name) {
                        return MetadataOutcome::Invalid(message);
                    }
                    if is_internal(name) {
                        return MetadataOutcome::Invalid(format!(
                            "producer name '{name}' is reserved: names starting with '__' are internal"
                        ));
                    }
                }
                MetadataOutcome::ProducerInitialized(self.producers.init(name.as_deref()))
            }
        }
    }

    /// Checks every move first, so a refused drain changes nothing.
    fn drain(&mut self, node_id: u64, moves: &[(String, u32, Vec<u64>)]) -> MetadataOutcome {
        if !self.nodes.contains_key(&node_id) {
            return MetadataOutcome::NodeNotFound;
        }
        for (topic, partition, replicas) in moves {
            let Some(assignment) = self
                .topics
                .get(topic)
                .and_then(|meta| meta.partitions.get(*partition as usize))
            else {
                return MetadataOutcome::Invalid(format!("no partition {topic}/{partition}"));
            };
            let mut distinct = replicas.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let valid = distinct.len() == replicas.len()
                && replicas.len() == assignment.replicas.len()
                && !replicas.contains(&node_id)
                && replicas
                    .iter()
                    .all(|node| self.nodes.get(node).is_some_and(|record| !record.draining));
            if !valid {
                return MetadataOutcome::Invalid(format!(
                    "invalid new replicas {replicas:?} for {topic}/{partition}"
                ));
            }
        }
        for (topic, partition, replicas) in moves {
            if let Some(assignment) = self
                .topic_mut(topic)
                .and_then(|meta| meta.partitions.get_mut(*partition as usize))
            {
                assignment.replicas = replicas.clone();
            }
        }
        if let Some(record) = self.nodes.get_mut(&node_id) {
            record.draining = true;
        }
        MetadataOutcome::Done
    }

    /// The topic `name` to change: copied first if a published version shares it, so no
    /// published version changes.
    pub fn topic_mut(&mut self, name: &str) -> Option<&mut TopicMeta> {
        self.topics.get_mut(name).map(Arc::make_mut)
    }

    /// A copy of everything but the topics: what the metadata state machine persists after
    /// each change, the topics being stored one row each (see the raft layer's `topic_rows`).
    pub fn without_topics(&self) -> MetadataState {
        MetadataState {
            cluster_id: self.cluster_id.clone(),
            topics: BTreeMap::new(),
            nodes: self.nodes.clone(),
            next_group_id: self.next_group_id,
            removed_nodes: self.removed_nodes.clone(),
            producers: self.producers.clone(),
            deleted_topics: self.deleted_topics.clone(),
            subscriptions: self.subscriptions.clone(),
            redrives: self.redrives.clone(),
            auth: self.auth.clone(),
            cluster_version: self.cluster_version,
            schemas: self.schemas.clone(),
            zones: self.zones.clone(),
        }
    }

    /// Every partition of every topic: its topic, its index, where it is placed.
    pub fn partitions(&self) -> impl Iterator<Item = (&TopicMeta, u32, &PartitionAssignment)> {
        self.topics.values().map(Arc::as_ref).flat_map(|topic| {
            topic
                .partitions
                .iter()
                .enumerate()
                .map(move |(index, assignment)| (topic, index as u32, assignment))
        })
    }

    /// Nodes that take new replicas: registered and not draining.
    pub fn active_nodes(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, record)| !record.draining)
            .map(|(id, _)| *id)
            .collect()
    }

    fn assign_groups(&mut self, replicas: &[Vec<u64>]) -> Vec<PartitionAssignment> {
        replicas
            .iter()
            .map(|nodes| {
                let group_id = self.next_group_id;
                self.next_group_id = group_id.next();
                PartitionAssignment {
                    group_id,
                    replicas: nodes.clone(),
                    founders: nodes.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, partitions: usize) -> MetadataCommand {
        MetadataCommand::CreateTopic {
            name: name.into(),
            replication_factor: 1,
            config: TopicConfig::default(),
            replicas: vec![vec![1]; partitions],
            created_at_ms: 5,
        }
    }

    #[test]
    fn commands_of_a_newer_feature_wait_for_the_cluster_version() {
        let before = ClusterVersion(WireVersion::UNREPORTED);
        assert_eq!(create("orders", 1).may_propose(before), Ok(()));
        // Raised to a version that knows the command: it vouches for it.
        let raise_to_1 = MetadataCommand::RaiseClusterVersion {
            version: WireVersion(1),
        };
        assert_eq!(raise_to_1.may_propose(before), Ok(()));
        // Raised "to" a version before the command existed: refused.
        let raise_to_0 = MetadataCommand::RaiseClusterVersion {
            version: WireVersion::UNREPORTED,
        };
        assert_eq!(
            raise_to_0.may_propose(before),
            Err(Feature::ClusterVersionCommand)
        );
        assert_eq!(
            raise_to_0.may_propose(ClusterVersion(WireVersion(1))),
            Ok(())
        );
    }

    #[test]
    fn the_cluster_version_only_rises() {
        let mut state = MetadataState::default();
        assert_eq!(
            state.cluster_version,
            ClusterVersion(WireVersion::UNREPORTED)
        );
        let raise = |version| MetadataCommand::RaiseClusterVersion {
            version: WireVersion(version),
        };
        assert_eq!(state.apply(&raise(2)), MetadataOutcome::Done);
        assert_eq!(state.cluster_version, ClusterVersion(WireVersion(2)));
        // A stale raise (proposed before a newer one was applied) changes nothing.
        assert_eq!(state.apply(&raise(1)), MetadataOutcome::Done);
        assert_eq!(state.cluster_version, ClusterVersion(WireVersion(2)));
    }

    #[test]
    fn create_assigns_fresh_groups_and_refuses_duplicates() {
        let mut state = MetadataState::default();
        assert_eq!(state.apply(&create("orders", 3)), MetadataOutcome::Done);
        assert_eq!(
            state.apply(&create("orders", 1)),
            MetadataOutcome::TopicExists
        );
        let groups: Vec<u64> = state.topics["orders"]
            .partitions
            .iter()
            .map(|p| p.group_id.get())
            .collect();
        assert_eq!(groups, vec![1, 2, 3]);
    }

    #[test]
    fn recreated_topic_never_reuses_group_ids() {
        let mut state = MetadataState::default();
        state.apply(&create("t", 2));
        assert_eq!(state.apply(&delete("t", 7)), MetadataOutcome::Done);
        assert_eq!(state.deleted_topics.get("t"), Some(&7));
        state.apply(&create("t", 2));
        assert!(!state.deleted_topics.contains_key("t"), "created again");
        let groups: Vec<u64> = state.topics["t"]
            .partitions
            .iter()
            .map(|p| p.group_id.get())
            .collect();
        assert_eq!(groups, vec![3, 4]);
        assert_eq!(state.apply(&delete("x", 8)), MetadataOutcome::TopicNotFound);
        assert!(!state.deleted_topics.contains_key("x"));
    }

    fn delete(name: &str, deleted_at_ms: i64) -> MetadataCommand {
        MetadataCommand::DeleteTopic {
            name: name.into(),
            deleted_at_ms,
        }
    }

    #[test]
    fn deleted_names_are_remembered_up_to_a_bound_oldest_first_out() {
        let mut state = MetadataState::default();
        for index in 0..=MAX_DELETED_TOPICS as i64 {
            let name = format!("t{index}");
            state.apply(&create(&name, 1));
            assert_eq!(
                state.apply(&delete(&name, 1000 + index)),
                MetadataOutcome::Done
            );
        }
        assert_eq!(state.deleted_topics.len(), MAX_DELETED_TOPICS);
        assert!(!state.deleted_topics.contains_key("t0"), "the oldest went");
        assert!(state.deleted_topics.contains_key("t1"));
        // Timestamps from long ago are not recent.
        assert!(!state.recently_deleted("t1"));
    }

    #[test]
    fn partitions_only_grow_and_config_is_validated() {
        let mut state = MetadataState::default();
        state.apply(&create("t", 2));
        let shrink = MetadataCommand::UpdateTopic {
            name: "t".into(),
            partitions: Some(1),
            config: TopicConfigPatch::default(),
            new_replicas: vec![],
        };
        assert!(matches!(state.apply(&shrink), MetadataOutcome::Invalid(_)));
        let grow = MetadataCommand::UpdateTopic {
            name: "t".into(),
            partitions: Some(4),
            config: TopicConfigPatch {
                retention_ms: Some(1000),
                ..Default::default()
            },
            new_replicas: vec![vec![1], vec![1]],
        };
        assert_eq!(state.apply(&grow), MetadataOutcome::Done);
        assert_eq!(state.topics["t"].partitions.len(), 4);
        assert_eq!(state.topics["t"].config.retention_ms, 1000);
        let bad = MetadataCommand::UpdateTopic {
            name: "t".into(),
            partitions: None,
            config: TopicConfigPatch {
                retention_ms: Some(-7),
                ..Default::default()
            },
            new_replicas: vec![],
        };
        assert!(matches!(state.apply(&bad), MetadataOutcome::Invalid(_)));
        assert_eq!(
            state.topics["t"].config.retention_ms, 1000,
            "a refused update changes nothing"
        );
    }

    #[test]
    fn producers_are_registered_through_the_metadata() {
        let mut state = MetadataState::default();
        let init = |name: Option<&str>| MetadataCommand::InitProducer {
            name: name.map(str::to_string),
        };
        let MetadataOutcome::ProducerInitialized(first) = state.apply(&init(Some("etl-1"))) else {
            panic!("not initialized");
        };
        let MetadataOutcome::ProducerInitialized(again) = state.apply(&init(Some("etl-1"))) else {
            panic!("not initialized");
        };
        assert_eq!(again.producer_id, first.producer_id);
        assert_eq!(again.producer_epoch, 1);
        let MetadataOutcome::ProducerInitialized(unnamed) = state.apply(&init(None)) else {
            panic!("not initialized");
        };
        assert_ne!(unnamed.producer_id, first.producer_id);
        let before = state.clone();
        assert!(matches!(
            state.apply(&init(Some("bad name"))),
            MetadataOutcome::Invalid(_)
        ));
        assert!(matches!(
            state.apply(&init(Some("__internal"))),
            MetadataOutcome::Invalid(_)
        ));
        assert_eq!(state, before, "a refused registration changes nothing");
    }

    /// The bytes of a state as a published version's watchers would see it, deep (topics and
    /// registry encoded, not compared through shared `Arc`s).
    fn deep_bytes(state: &MetadataState) -> (Vec<u8>, Vec<u8>) {
        (
            postcard::to_allocvec(state).unwrap(),
            postcard::to_allocvec(&state.schemas).unwrap(),
        )
    }

    #[test]
    fn a_change_never_reaches_a_published_version() {
        use crate::replica_moves::ReplicaMove;
        use crate::schemas::{SchemaCommand, SchemaFormat, StoredSchema, TopicSchemas};
        let mut state = MetadataState::default();
        for node in 1..=4 {
            state.apply(&add(node));
        }
        for name in ["a", "b", "c"] {
            state.apply(&MetadataCommand::CreateTopic {
                name: name.into(),
                replication_factor: 2,
                config: TopicConfig::default(),
                replicas: vec![vec![1, 2], vec![2, 3]],
                created_at_ms: 0,
            });
        }
        let register = MetadataCommand::Schemas(SchemaCommand::Register {
            subject: "a-value".into(),
            schema: StoredSchema {
                format: SchemaFormat::Json,
                text: r#"{"type":"object"}"#.into(),
                references: Vec::new(),
            },
            checked_against: None,
        });
        assert!(matches!(
            state.apply(&register),
            MetadataOutcome::Schemas(_)
        ));
        let bind = MetadataCommand::Schemas(SchemaCommand::BindTopic {
            topic: "a".into(),
            schemas: TopicSchemas {
                key_subject: None,
                value_subject: Some("a-value".into()),
            },
        });
        state.apply(&bind);
        assert!(state.schemas.topics.contains_key("a"));

        // Published as the metadata applier does: a clone that shares the topics and registry.
        let published = Arc::new(state.clone());
        let seen = deep_bytes(&published);
        assert!(Arc::ptr_eq(&published.topics["a"], &state.topics["a"]));
        assert!(Arc::ptr_eq(&published.schemas, &state.schemas));

        let grow = MetadataCommand::UpdateTopic {
            name: "a".into(),
            partitions: Some(3),
            config: TopicConfigPatch {
                retention_ms: Some(1000),
                ..Default::default()
            },
            new_replicas: vec![vec![3, 4]],
        };
        assert_eq!(state.apply(&grow), MetadataOutcome::Done);
        let rebalance = MetadataCommand::MoveReplicas {
            moves: vec![ReplicaMove {
                topic: "b".into(),
                partition: 0,
                from: vec![1, 2],
                to: vec![3, 4],
            }],
        };
        assert_eq!(state.apply(&rebalance), MetadataOutcome::Done);
        let drain = MetadataCommand::DrainNode {
            node_id: 1,
            moves: vec![("c".into(), 0, vec![4, 2])],
        };
        assert_eq!(state.apply(&drain), MetadataOutcome::Done);
        assert_eq!(state.apply(&delete("a", 9)), MetadataOutcome::Done);
        assert!(!state.schemas.topics.contains_key("a"), "the binding went");

        assert_eq!(
            deep_bytes(&published),
            seen,
            "the published version is as it was"
        );
        assert_eq!(published.topics["a"].partitions.len(), 2);
        assert_eq!(published.topics["b"].partitions[0].replicas, vec![1, 2]);
        assert_eq!(published.topics["c"].partitions[0].replicas, vec![1, 2]);
        assert!(published.schemas.topics.contains_key("a"));
        assert_eq!(state.topics["b"].partitions[0].replicas, vec![3, 4]);
        assert_eq!(state.topics["c"].partitions[0].replicas, vec![4, 2]);
        // What a change did not touch is still shared.
        let again = Arc::new(state.clone());
        let mut untouched = MetadataState::default();
        untouched.apply(&add(1));
        let before_create = Arc::new(untouched.clone());
        untouched.apply(&create("d", 1));
        assert!(before_create.topics.is_empty());
        assert!(Arc::ptr_eq(&again.topics["b"], &state.topics["b"]));
        assert!(!Arc::ptr_eq(&again.topics["b"], &published.topics["b"]));
    }

    #[test]
    fn shared_topics_and_registry_encode_as_the_plain_values() {
        use crate::schemas::{SchemaCommand, SchemaFormat, StoredSchema};
        let mut state = MetadataState::default();
        state.apply(&add(1));
        state.apply(&create("orders", 3));
        state.apply(&create("payments", 1));
        state.apply(&MetadataCommand::Schemas(SchemaCommand::Register {
            subject: "orders-value".into(),
            schema: StoredSchema {
                format: SchemaFormat::Avro,
                text: r#""string""#.into(),
                references: Vec::new(),
            },
            checked_against: None,
        }));
        // The shape of the state before its topics were shared (format 11's encoding).
        #[derive(Serialize, Deserialize)]
        struct Plain {
            cluster_id: Option<String>,
            topics: BTreeMap<String, TopicMeta>,
            nodes: BTreeMap<u64, NodeRecord>,
            next_group_id: RaftGroupId,
            removed_nodes: BTreeSet<u64>,
            producers: ProducerRegistry,
            deleted_topics: BTreeMap<String, i64>,
            subscriptions: Subscriptions,
            redrives: Redrives,
            auth: AuthState,
        }
        let plain = Plain {
            cluster_id: state.cluster_id.clone(),
            topics: state
                .topics
                .iter()
                .map(|(name, topic)| (name.clone(), TopicMeta::clone(topic)))
                .collect(),
            nodes: state.nodes.clone(),
            next_group_id: state.next_group_id,
            removed_nodes: state.removed_nodes.clone(),
            producers: state.producers.clone(),
            deleted_topics: state.deleted_topics.clone(),
            subscriptions: state.subscriptions.clone(),
            redrives: state.redrives.clone(),
            auth: state.auth.clone(),
        };
        let bytes = postcard::to_allocvec(&plain).unwrap();
        assert_eq!(postcard::to_allocvec(&state).unwrap(), bytes);
        let decoded: MetadataState = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(decoded.topics, state.topics);
        assert_eq!(
            postcard::to_allocvec(&state.schemas).unwrap(),
            postcard::to_allocvec(&*state.schemas).unwrap()
        );
    }

    fn add(node_id: u64) -> MetadataCommand {
        MetadataCommand::AddNode {
            node_id,
            http_addr: format!("h{node_id}"),
            raft_addr: format!("r{node_id}"),
        }
    }

    #[test]
    fn nodes_are_added_drained_and_removed() {
        let mut state = MetadataState::default();
        for node in 1..=4 {
            assert_eq!(state.apply(&add(node)), MetadataOutcome::Done);
        }
        assert_eq!(
            state.apply(&add(2)),
            MetadataOutcome::Done,
            "same addresses: idempotent"
        );
        let taken = MetadataCommand::AddNode {
            node_id: 2,
            http_addr: "other".into(),
            raft_addr: "r2".into(),
        };
        assert_eq!(state.apply(&taken), MetadataOutcome::NodeExists);
        let create = MetadataCommand::CreateTopic {
            name: "t".into(),
            replication_factor: 2,
            config: TopicConfig::default(),
            replicas: vec![vec![1, 2], vec![2, 3]],
            created_at_ms: 0,
        };
        assert_eq!(state.apply(&create), MetadataOutcome::Done);

        let before = state.clone();
        let bad = MetadataCommand::DrainNode {
            node_id: 2,
            moves: vec![("t".into(), 0, vec![1, 4]), ("t".into(), 1, vec![3, 2])],
        };
        assert!(matches!(state.apply(&bad), MetadataOutcome::Invalid(_)));
        assert_eq!(state, before, "a refused drain changes nothing");

        let drain = MetadataCommand::DrainNode {
            node_id: 2,
            moves: vec![("t".into(), 0, vec![1, 4]), ("t".into(), 1, vec![4, 3])],
        };
        assert_eq!(state.apply(&drain), MetadataOutcome::Done);
        let partitions = &state.topics["t"].partitions;
        assert_eq!(partitions[0].replicas, vec![1, 4]);
        assert_eq!(partitions[0].founders, vec![1, 2], "founders never change");
        assert!(state.nodes[&2].draining);
        assert_eq!(state.active_nodes(), vec![1, 3, 4]);
        assert!(matches!(
            state.apply(&MetadataCommand::RemoveNode { node_id: 1 }),
            MetadataOutcome::Invalid(_)
        ));
        assert_eq!(
            state.apply(&MetadataCommand::RemoveNode { node_id: 2 }),
            MetadataOutcome::Done
        );
        assert!(!state.nodes.contains_key(&2));
        assert_eq!(
            state.apply(&add(2)),
            MetadataOutcome::NodeExists,
            "ids are not reused"
        );
        let comeback = MetadataCommand::RegisterNode {
            node_id: 2,
            http_addr: "h2".into(),
            raft_addr: "r2".into(),
        };
        assert!(matches!(
            state.apply(&comeback),
            MetadataOutcome::Invalid(_)
        ));
        assert_eq!(
            state.apply(&MetadataCommand::RemoveNode { node_id: 2 }),
            MetadataOutcome::NodeNotFound
        );
    }
}
