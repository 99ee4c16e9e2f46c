//! The cluster's nodes: who may connect, who is up, adding nodes to a running cluster and
//! draining them away, and what `GET /v1/cluster` shows of each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::gossip;
use super::metadata_group::MetadataGroup;
use super::node_versions::NodeVersions;
use super::replicas::LocalReplicas;
use super::routing::Routing;
use super::{ClusterError, NodeView};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState, NodeRecord};
use herald_domain::wire_version::WireVersion;
use herald_domain::zones::ZoneKey;
use herald_domain::RaftGroupId;
use herald_rpc::{PeerAdmission, RpcClient};

/// Membership of the cluster as this node sees and changes it. Owns nothing: the members are
/// the metadata's, liveness is the RPC's last answers, leadership the routing's, versions the
/// pings'.
pub struct Membership {
    node_id: u64,
    metadata: Arc<MetadataGroup>,
    replicas: Arc<LocalReplicas>,
    routing: Arc<Routing>,
    rpc: RpcClient,
    /// This node's wire version, and what the others report.
    versions: (WireVersion, Arc<NodeVersions>),
}

impl Membership {
    pub(crate) fn new(
        node_id: u64,
        metadata: Arc<MetadataGroup>,
        replicas: Arc<LocalReplicas>,
        routing: Arc<Routing>,
        rpc: RpcClient,
        versions: (WireVersion, Arc<NodeVersions>),
    ) -> Membership {
        Membership {
            node_id,
            metadata,
            replicas,
            routing,
            rpc,
            versions,
        }
    }

    /// The wire version `node` speaks, as far as this node knows (its own for itself; `None`
    /// when it has not reported lately): what a sender checks before it uses an operation
    /// tag newer than the oldest supported release (`herald_rpc::operation_tag`).
    pub fn wire_version_of(&self, node: u64) -> Option<WireVersion> {
        if node == self.node_id {
            return Some(self.versions.0);
        }
        self.versions.1.current(node)
    }

    /// Whether node `node` may connect to this one: a member of the cluster (a registered or
    /// added node, draining ones included, a voter or learner of the metadata group, a founder
    /// that has not registered yet), never a removed one. A node waiting to join admits
    /// whoever adds it.
    pub fn peer_admission(&self, node: u64) -> PeerAdmission {
        let state = self.metadata.current();
        if state.removed_nodes.contains(&node) {
            return PeerAdmission::NotMember;
        }
        let founders = self.metadata.founders();
        let waiting_to_join = state.nodes.is_empty() && founders.is_empty();
        if waiting_to_join
            || state.nodes.contains_key(&node)
            || founders.contains_key(&node)
            || self.metadata.replica().members().contains(node)
        {
            return PeerAdmission::Member;
        }
        PeerAdmission::NotMember
    }

    /// Whether this node is listed in the metadata (founded or added, and registered).
    pub fn is_registered(&self) -> bool {
        self.metadata.current().nodes.contains_key(&self.node_id)
    }

    /// Whether `node` answered recently (this node always counts as up).
    pub fn is_up(&self, node: u64) -> bool {
        node == self.node_id
            || self
                .rpc
                .last_answer(node)
                .is_some_and(|answered| answered.elapsed() <= gossip::REPORT_TTL)
    }

    /// Each node's status (`up`, `down`, `draining`), without what it leads.
    pub fn node_statuses(&self) -> Vec<&'static str> {
        let metadata = self.metadata.current();
        metadata
            .nodes
            .iter()
            .map(|(&id, record)| self.status_of(id, record))
            .collect()
    }

    fn status_of(&self, id: u64, record: &NodeRecord) -> &'static str {
        if record.draining {
            "draining"
        } else if self.is_up(id) {
            "up"
        } else {
            "down"
        }
    }

    /// The nodes with their status and what each leads.
    pub fn nodes_view(&self) -> Vec<NodeView> {
        let metadata = self.metadata.current();
        // Sets: a node leads thousands of groups, and each is looked up as it is added.
        let mut leads: HashMap<u64, BTreeSet<RaftGroupId>> = HashMap::new();
        for (group, leader) in self.routing.leader_map().leaders() {
            if !group.is_metadata() {
                leads.entry(leader).or_default().insert(group);
            }
        }
        for replica in self.replicas.all() {
            if replica.is_leader() {
                leads
                    .entry(self.node_id)
                    .or_default()
                    .insert(replica.group());
            }
        }
        metadata
            .nodes
            .iter()
            .map(|(&id, record)| NodeView {
                id,
                http_addr: record.http_addr.clone(),
                raft_addr: record.raft_addr.clone(),
                status: self.status_of(id, record),
                leads: leads.remove(&id).unwrap_or_default().into_iter().collect(),
                zone: metadata.zones.of(id).map(str::to_string),
                wire_version: if id == self.node_id {
                    Some(self.versions.0)
                } else {
                    self.versions.1.last(id)
                },
            })
            .collect()
    }

    /// Registers a new node; the metadata leader then adds it to the metadata group as a
    /// learner, and it takes replicas of partitions created (or moved) from then on.
    pub async fn add_node(
        &self,
        node_id: u64,
        http_addr: String,
        raft_addr: String,
    ) -> Result<MetadataOutcome, ClusterError> {
        if node_id != self.node_id {
            self.rpc.set_address(node_id, &raft_addr);
        }
        self.metadata
            .propose(MetadataCommand::AddNode {
                node_id,
                http_addr,
                raft_addr,
            })
            .await
    }

    /// Marks a node draining and gives each of its replicas to another node. The groups' leaders
    /// copy the data over; the metadata leader removes the node once nothing depends on it.
    pub async fn drain_node(&self, node_id: u64) -> Result<MetadataOutcome, ClusterError> {
        let state = self.metadata.current();
        if !state.nodes.contains_key(&node_id) {
            return Ok(MetadataOutcome::NodeNotFound);
        }
        let moves = plan_drain(&state, node_id).map_err(ClusterError::CannotDrain)?;
        self.metadata
            .propose(MetadataCommand::DrainNode { node_id, moves })
            .await
    }
}

/// For every partition on `node`, a replacement: the active node holding the fewest replicas
/// that the partition does not already use, preferring one in a zone the partition's other
/// replicas are not in. The replacement takes the drained node's position,
/// so a drained preferred leader is replaced as preferred leader too.
pub fn plan_drain(
    state: &MetadataState,
    node: u64,
) -> Result<Vec<(String, u32, Vec<u64>)>, String> {
    let mut load: BTreeMap<u64, usize> = state
        .active_nodes()
        .into_iter()
        .filter(|id| *id != node)
        .map(|id| (id, 0))
        .collect();
    for topic in state.topics.values() {
        for assignment in &topic.partitions {
            for replica in &assignment.replicas {
                if let Some(count) = load.get_mut(replica) {
                    *count += 1;
                }
            }
        }
    }
    let mut moves = Vec::new();
    for topic in state.topics.values() {
        for (index, assignment) in topic.partitions.iter().enumerate() {
            let Some(position) = assignment.replicas.iter().position(|id| *id == node) else {
                continue;
            };
            // Zones the partition keeps without the drained node: a replacement outside them
            // keeps the partition spread over zones.
            let kept_zones: BTreeSet<ZoneKey> = assignment
                .replicas
                .iter()
                .filter(|id| **id != node)
                .map(|id| state.zones.key(*id))
                .collect();
            let replacement = load
                .iter()
                .filter(|(id, _)| !assignment.replicas.contains(id))
                .min_by_key(|(id, count)| {
                    (kept_zones.contains(&state.zones.key(**id)), **count, **id)
                })
                .map(|(id, _)| *id)
                .ok_or_else(|| {
                    format!(
                        "cannot drain node {node}: partition {}/{index} needs {} replicas on other \
                         nodes, and no node is free for it",
                        topic.name,
                        assignment.replicas.len()
                    )
                })?;
            if let Some(count) = load.get_mut(&replacement) {
                *count += 1;
            }
            let mut replicas = assignment.replicas.clone();
            replicas[position] = replacement;
            moves.push((topic.name.clone(), index as u32, replicas));
        }
    }
    Ok(moves)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_domain::metadata::MetadataCommand;
    use herald_domain::topic::TopicConfig;

    fn state_with(nodes: &[u64], replicas: Vec<Vec<u64>>) -> MetadataState {
        let mut state = MetadataState::default();
        for node in nodes {
            state.apply(&MetadataCommand::AddNode {
                node_id: *node,
                http_addr: format!("h{node}"),
                raft_addr: format!("r{node}"),
            });
        }
        let command = MetadataCommand::CreateTopic {
            name: "t".into(),
            replication_factor: replicas[0].len() as u16,
            config: TopicConfig::default(),
            replicas,
            created_at_ms: 0,
        };
        assert_eq!(state.apply(&command), MetadataOutcome::Done);
        state
    }

    #[test]
    fn drained_replicas_go_to_the_least_loaded_free_node() {
        let state = state_with(&[1, 2, 3, 4], vec![vec![1, 2], vec![2, 3], vec![3, 1]]);
        let moves = plan_drain(&state, 1).unwrap();
        assert_eq!(
            moves,
            vec![("t".into(), 0, vec![4, 2]), ("t".into(), 2, vec![3, 4])],
            "node 4 holds nothing, so it takes both, in place"
        );
        let mut drained = state.clone();
        assert_eq!(
            drained.apply(&MetadataCommand::DrainNode { node_id: 1, moves }),
            MetadataOutcome::Done
        );
    }

    #[test]
    fn a_drain_that_would_break_the_replication_factor_is_refused() {
        let state = state_with(&[1, 2, 3], vec![vec![1, 2, 3]]);
        let error = plan_drain(&state, 2).unwrap_err();
        assert!(error.contains("cannot drain node 2"), "{error}");
    }
}
