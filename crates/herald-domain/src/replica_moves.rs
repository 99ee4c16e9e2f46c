//! Moving partitions' replicas between nodes outside a drain: what a rebalance proposes.
//!
//! A move is a compare-and-set on one partition's replica list: it names the list it was
//! planned from, so two planners (the metadata leader's automatic rebalance and an operator's
//! `POST /v1/cluster/rebalance`) working from states a moment apart never undo each other's
//! moves; a command whose plan went stale changes nothing.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::metadata::{MetadataOutcome, MetadataState};

/// One partition's new replica list. A list with the same nodes in another order moves only
/// the preferred leader (the first replica); other lists copy the partition to the nodes
/// added, then drop it from the nodes left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaMove {
    pub topic: String,
    pub partition: u32,
    /// The replicas the move was planned from: the move applies only while they are current.
    pub from: Vec<u64>,
    pub to: Vec<u64>,
}

impl ReplicaMove {
    /// Whether the move copies data (adds a node), rather than only reordering the replicas.
    pub fn copies_data(&self) -> bool {
        let from: BTreeSet<u64> = self.from.iter().copied().collect();
        self.to.iter().any(|node| !from.contains(node))
    }
}

impl MetadataState {
    /// Applies every move or none: each must name a partition whose replicas are still
    /// `from`, and a `to` of as many distinct nodes, each registered and not draining.
    pub(crate) fn move_replicas(&mut self, moves: &[ReplicaMove]) -> MetadataOutcome {
        for planned in moves {
            let Some(assignment) = self
                .topics
                .get(&planned.topic)
                .and_then(|meta| meta.partitions.get(planned.partition as usize))
            else {
                return MetadataOutcome::Invalid(format!(
                    "no partition {}/{}",
                    planned.topic, planned.partition
                ));
            };
            if assignment.replicas != planned.from {
                return MetadataOutcome::Invalid(format!(
                    "the replicas of {}/{} are {:?} now, not {:?}: the plan is stale",
                    planned.topic, planned.partition, assignment.replicas, planned.from
                ));
            }
            let distinct: BTreeSet<u64> = planned.to.iter().copied().collect();
            let valid = distinct.len() == planned.to.len()
                && planned.to.len() == planned.from.len()
                && planned
                    .to
                    .iter()
                    .all(|node| self.nodes.get(node).is_some_and(|record| !record.draining));
            if !valid {
                return MetadataOutcome::Invalid(format!(
                    "invalid new replicas {:?} for {}/{}",
                    planned.to, planned.topic, planned.partition
                ));
            }
        }
        let mut seen = BTreeSet::new();
        for planned in moves {
            if !seen.insert((&planned.topic, planned.partition)) {
                return MetadataOutcome::Invalid(format!(
                    "{}/{} is moved twice in one command",
                    planned.topic, planned.partition
                ));
            }
        }
        for planned in moves {
            if let Some(assignment) = self
                .topic_mut(&planned.topic)
                .and_then(|meta| meta.partitions.get_mut(planned.partition as usize))
            {
                assignment.replicas = planned.to.clone();
            }
        }
        MetadataOutcome::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataCommand;
    use crate::topic::TopicConfig;

    fn state() -> MetadataState {
        let mut state = MetadataState::default();
        for node in 1..=4 {
            state.apply(&MetadataCommand::AddNode {
                node_id: node,
                http_addr: format!("h{node}"),
                raft_addr: format!("r{node}"),
            });
        }
        let created = state.apply(&MetadataCommand::CreateTopic {
            name: "t".into(),
            replication_factor: 2,
            config: TopicConfig::default(),
            replicas: vec![vec![1, 2], vec![2, 3]],
            created_at_ms: 0,
        });
        assert_eq!(created, MetadataOutcome::Done);
        state
    }

    fn moved(partition: u32, from: &[u64], to: &[u64]) -> ReplicaMove {
        ReplicaMove {
            topic: "t".into(),
            partition,
            from: from.to_vec(),
            to: to.to_vec(),
        }
    }

    fn replicas(state: &MetadataState, partition: usize) -> Vec<u64> {
        state.topics["t"].partitions[partition].replicas.clone()
    }

    #[test]
    fn moves_apply_together() {
        let mut state = state();
        let command = MetadataCommand::MoveReplicas {
            moves: vec![moved(0, &[1, 2], &[4, 2]), moved(1, &[2, 3], &[3, 2])],
        };
        assert_eq!(state.apply(&command), MetadataOutcome::Done);
        assert_eq!(replicas(&state, 0), vec![4, 2]);
        assert_eq!(replicas(&state, 1), vec![3, 2]);
        assert!(command_copies(&command));
    }

    fn command_copies(command: &MetadataCommand) -> bool {
        match command {
            MetadataCommand::MoveReplicas { moves } => {
                moves[0].copies_data() && !moves[1].copies_data()
            }
            _ => false,
        }
    }

    #[test]
    fn a_stale_or_invalid_move_changes_nothing() {
        let mut state = state();
        let before = state.clone();
        for bad in [
            // Planned from replicas that are not current.
            vec![moved(0, &[1, 2], &[4, 2]), moved(1, &[3, 2], &[4, 2])],
            // A node twice, a node unknown, a shorter list.
            vec![moved(0, &[1, 2], &[4, 4])],
            vec![moved(0, &[1, 2], &[9, 2])],
            vec![moved(0, &[1, 2], &[2])],
            // A partition that does not exist; one partition twice.
            vec![moved(7, &[1, 2], &[4, 2])],
            vec![moved(0, &[1, 2], &[4, 2]), moved(0, &[1, 2], &[3, 2])],
        ] {
            let outcome = state.apply(&MetadataCommand::MoveReplicas { moves: bad.clone() });
            assert!(
                matches!(outcome, MetadataOutcome::Invalid(_)),
                "{bad:?}: {outcome:?}"
            );
            assert_eq!(state, before, "{bad:?}");
        }
    }

    #[test]
    fn no_replica_moves_to_a_draining_node() {
        let mut state = state();
        let drained = state.apply(&MetadataCommand::DrainNode {
            node_id: 4,
            moves: vec![],
        });
        assert_eq!(drained, MetadataOutcome::Done);
        let outcome = state.apply(&MetadataCommand::MoveReplicas {
            moves: vec![moved(0, &[1, 2], &[4, 2])],
        });
        assert!(
            matches!(outcome, MetadataOutcome::Invalid(_)),
            "{outcome:?}"
        );
    }
}
