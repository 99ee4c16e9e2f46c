//! Adding nodes to a running cluster and draining them away.

use std::collections::BTreeMap;

use super::{Cluster, ClusterError};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};

impl Cluster {
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
        self.propose(MetadataCommand::AddNode {
            node_id,
            http_addr,
            raft_addr,
        })
        .await
    }

    /// Marks a node draining and gives each of its replicas to another node. The groups' leaders
    /// copy the data over; the metadata leader removes the node once nothing depends on it.
    pub async fn drain_node(&self, node_id: u64) -> Result<MetadataOutcome, ClusterError> {
        let state = self.metadata();
        if !state.nodes.contains_key(&node_id) {
            return Ok(MetadataOutcome::NodeNotFound);
        }
        let moves = plan_drain(&state, node_id).map_err(ClusterError::CannotDrain)?;
        self.propose(MetadataCommand::DrainNode { node_id, moves })
            .await
    }
}

/// For every partition on `node`, a replacement: the active node holding the fewest replicas
/// that the partition does not already use. The replacement takes the drained node's position,
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
            let replacement = load
                .iter()
                .filter(|(id, _)| !assignment.replicas.contains(id))
                .min_by_key(|(id, count)| (**count, **id))
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
