//! What only the metadata leader does: keep the metadata group's voters and learners in line
//! with the registered nodes, and finish drains once every partition has moved.

use std::collections::{BTreeMap, BTreeSet};

use super::Cluster;
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, METADATA_GROUP};
use herald_domain::zones::{ZoneKey, Zones};
use herald_raft::NodeAddr;

impl Cluster {
    pub(super) async fn control_metadata(&self) {
        if !self.metadata.is_leader() {
            return;
        }
        self.converge_metadata_members().await;
        self.finish_drains().await;
    }

    /// Voters: the current ones minus draining nodes, topped up from caught-up learners to
    /// `metadata_voters`; every other registered node follows as a learner.
    async fn converge_metadata_members(&self) {
        let state = self.metadata.current();
        let members = self.metadata.replica().members();
        let draining: BTreeSet<u64> = state
            .nodes
            .iter()
            .filter(|(_, record)| record.draining)
            .map(|(id, _)| *id)
            .collect();
        let mut voters: BTreeSet<u64> = members.voters.difference(&draining).copied().collect();
        let active = state.active_nodes();
        let target = self.metadata_voters.min(active.len().max(1));
        // Candidates: up learners, those of zones no voter is in first.
        let covered: BTreeSet<ZoneKey> = voters.iter().map(|id| state.zones.key(*id)).collect();
        let mut candidates: Vec<u64> = active
            .iter()
            .copied()
            .filter(|node| members.learners.contains(node) && self.membership.is_up(*node))
            .collect();
        candidates.sort_by_key(|node| (covered.contains(&state.zones.key(*node)), *node));
        for candidate in &candidates {
            if voters.len() >= target {
                break;
            }
            voters.insert(*candidate);
        }
        if let Some((out, into)) = zone_swap(&voters, &candidates, &state.zones) {
            tracing::info!(out, into, "moving a metadata vote to a zone that had none");
            voters.remove(&out);
            voters.insert(into);
        }
        if voters.is_empty() {
            return;
        }
        let learners: BTreeSet<u64> = state
            .nodes
            .keys()
            .copied()
            .filter(|node| !voters.contains(node))
            .collect();
        let addresses: BTreeMap<u64, NodeAddr> = state
            .nodes
            .iter()
            .map(|(id, record)| (*id, Cluster::raft_node(&record.raft_addr)))
            .collect();
        let step = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            self.metadata
                .replica()
                .converge_members(&voters, &learners, &addresses),
        )
        .await;
        match step {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "metadata membership change failed"),
            Err(_) => tracing::warn!("metadata membership change is slow"),
        }
    }

    /// A draining node is removed once no partition lists it and every partition's leader
    /// reports a group without it: its data has been copied elsewhere.
    async fn finish_drains(&self) {
        let state = self.metadata.current();
        let draining: Vec<u64> = state
            .nodes
            .iter()
            .filter(|(_, record)| record.draining)
            .map(|(id, _)| *id)
            .collect();
        for node in draining {
            let moved = state.topics.values().all(|topic| {
                topic.partitions.iter().all(|assignment| {
                    if assignment.replicas.contains(&node) {
                        return false;
                    }
                    match self.routing.leader_map().get(assignment.group_id) {
                        Some((leader, leadership)) => {
                            leader != node
                                && !leadership.voters.contains(&node)
                                && !leadership.learners.contains(&node)
                        }
                        None => false,
                    }
                })
            });
            let metadata_voter = self.metadata.replica().members().voters.contains(&node);
            if !moved || metadata_voter {
                continue;
            }
            match self
                .metadata
                .propose(MetadataCommand::RemoveNode { node_id: node })
                .await
            {
                Ok(MetadataOutcome::Done) => {
                    tracing::info!(node, "drained node removed from the cluster");
                    self.rpc.forget(node);
                    self.routing.leader_map().forget(METADATA_GROUP, node);
                }
                Ok(outcome) => tracing::warn!(node, ?outcome, "could not remove a drained node"),
                Err(error) => tracing::warn!(node, %error, "could not remove a drained node"),
            }
        }
    }
}

/// One voter to replace so the voters span one more zone: a voter whose zone another voter
/// shares (the highest id), and a candidate of a zone no voter is in (the lowest id). Once
/// per pass, so votes move one at a time.
fn zone_swap(voters: &BTreeSet<u64>, candidates: &[u64], zones: &Zones) -> Option<(u64, u64)> {
    let mut per_zone: BTreeMap<ZoneKey, Vec<u64>> = BTreeMap::new();
    for voter in voters {
        per_zone.entry(zones.key(*voter)).or_default().push(*voter);
    }
    let into = candidates
        .iter()
        .copied()
        .filter(|node| !voters.contains(node) && !per_zone.contains_key(&zones.key(*node)))
        .min()?;
    let out = per_zone
        .values()
        .filter(|members| members.len() > 1)
        .filter_map(|members| members.iter().max().copied())
        .max()?;
    Some((out, into))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vote_moves_from_a_shared_zone_to_an_empty_one() {
        let zones = Zones(
            [(1, "a"), (2, "a"), (3, "b"), (4, "c")]
                .into_iter()
                .map(|(n, z)| (n, z.to_string()))
                .collect(),
        );
        let voters: BTreeSet<u64> = [1, 2, 3].into();
        assert_eq!(zone_swap(&voters, &[4], &zones), Some((2, 4)));
        // Every zone has a vote already, or no candidate in a new zone: nothing moves.
        let spread: BTreeSet<u64> = [1, 3, 4].into();
        assert_eq!(zone_swap(&spread, &[2], &zones), None);
        assert_eq!(zone_swap(&voters, &[], &zones), None);
        // Without zones every node is its own: nothing to move.
        assert_eq!(zone_swap(&voters, &[4], &Zones::default()), None);
    }
}
