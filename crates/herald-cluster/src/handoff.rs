//! Handing every leadership this node holds to an in-sync replica before it stops, so a
//! rolling restart moves leaders instead of losing them.
//!
//! A node that simply exits leaves its groups leaderless until their followers notice (at
//! once when the connection drops, see `detector`, but still an election), and requests it was
//! serving as leader end with an unknown outcome (504). On SIGTERM the node first asks raft to
//! transfer each group it leads to a replica that is up, in sync and complete (the checks of
//! `handback`), waits (bounded) until each group has its new leader, and only then stops
//! taking client requests. Entries proposed before the transfer are in the target's log before
//! it campaigns, so they commit and their requests are answered; requests arriving meanwhile
//! are refused with "not the leader" and sent on to the new one.
//!
//! The transfers run a bounded number at a time ([`HANDOFF_IN_FLIGHT`]), groups with recent
//! writes first: each costs its target an election (a vote written to disk, a blank entry
//! replicated), and a node leading thousands of groups that asked for all of them at once had
//! its peers time out on most of them, so that most groups then failed over by election after
//! it exited, on peers already overloaded.
//!
//! From the start of the hand-off the node counts as leaving: it reports no replica progress,
//! so its peers do not hand leadership back to it, and it never picks itself to take over a
//! dead peer's groups.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use herald_domain::RaftGroupId;
use tokio::time::Instant;

use super::Cluster;
use herald_raft::PartitionReplica;

/// How often a moved group's leader is looked at while waiting for it.
const LEADER_CHECK_INTERVAL: Duration = Duration::from_millis(20);
/// How long before the replicas of a group that none could take yet are asked again.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// How many groups are being handed off at once.
const HANDOFF_IN_FLIGHT: usize = 64;

/// What a hand-off did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HandoffReport {
    /// Groups whose leadership moved to another node (the metadata group included).
    pub moved: Vec<(RaftGroupId, u64)>,
    /// Groups this node still leads, and why: no replica could take it, or it did not within
    /// the time given.
    pub kept: Vec<(RaftGroupId, String)>,
}

impl Cluster {
    /// Whether this node is handing off its leadership to stop.
    pub fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::Relaxed)
    }

    /// Moves the leadership of every group this node leads (partitions first, then the
    /// metadata group) to an in-sync replica, waiting at most `within` for all of them.
    pub async fn hand_off_leadership(&self, within: Duration) -> HandoffReport {
        self.leaving.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + within;
        let mut report = HandoffReport::default();
        let mut led: Vec<(Vec<u64>, std::sync::Arc<PartitionReplica>)> = {
            let state = self.metadata.current();
            state
                .topics
                .values()
                .flat_map(|topic| topic.partitions.iter())
                .filter_map(|assignment| {
                    let replica = self.replicas.get(assignment.group_id)?;
                    replica
                        .is_leader()
                        .then(|| (assignment.replicas.clone(), replica))
                })
                .collect()
        };
        // Groups with clients first: a quiet group has nobody waiting on it.
        led.sort_by_key(|(_, replica)| replica.is_quiet());
        let outcomes: Vec<(RaftGroupId, Result<Option<u64>, String>)> = stream::iter(&led)
            .map(|(replicas, replica)| async move {
                let outcome = self.hand_off_partition(replica, replicas, deadline).await;
                (replica.group(), outcome)
            })
            .buffer_unordered(HANDOFF_IN_FLIGHT)
            .collect()
            .await;
        for (group, outcome) in outcomes {
            match outcome {
                Ok(Some(to)) => report.moved.push((group, to)),
                // One replica only: nobody to hand it to, and nothing a client loses by it
                // that a restart of a one-replica group would not lose anyway.
                Ok(None) => {}
                Err(reason) => report.kept.push((group, reason)),
            }
        }
        match self.hand_off_metadata(deadline).await {
            Ok(Some(to)) => report.moved.push((RaftGroupId::METADATA, to)),
            Ok(None) => {}
            Err(reason) => report.kept.push((RaftGroupId::METADATA, reason)),
        }
        report
    }

    /// Hands one partition group to the first replica of its assignment (the preferred order)
    /// that is up, in sync and complete; answers the new leader (None: the group has no other
    /// replica). Under load a follower is
    /// usually a few entries short of what the leader committed a moment before: the checks
    /// are repeated until one passes or time is up.
    async fn hand_off_partition(
        &self,
        replica: &PartitionReplica,
        assignment: &[u64],
        deadline: Instant,
    ) -> Result<Option<u64>, String> {
        if assignment.iter().all(|node| *node == self.node_id) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Err("its turn came after the time for the hand-off was up".into());
        }
        loop {
            let Some(report) = replica.leader_report() else {
                return match replica.leader() {
                    Some(leader) if leader != self.node_id => Ok(Some(leader)),
                    _ => Err("it lost leadership before the hand-off, to no one yet".into()),
                };
            };
            let mut refusals = Vec::new();
            for &target in assignment.iter().filter(|node| **node != self.node_id) {
                if !report.in_sync.contains(&target) {
                    refusals.push(format!("node {target} is not in sync"));
                    continue;
                }
                if !self.membership.is_up(target) {
                    refusals.push(format!("node {target} is not up"));
                    continue;
                }
                if let Some(reason) = self.check_complete(replica, target).await {
                    refusals.push(format!("node {target}: {reason}"));
                    continue;
                }
                replica.transfer_leadership(target).await;
                return wait_for_new_leader(|| replica.leader(), self.node_id, deadline)
                    .await
                    .map(Some);
            }
            if Instant::now() + RETRY_INTERVAL >= deadline {
                return Err(refusals.join("; "));
            }
            tokio::time::sleep(RETRY_INTERVAL).await;
        }
    }

    /// Hands the metadata group to an in-sync voter that is up; None when this node does not
    /// lead it.
    async fn hand_off_metadata(&self, deadline: Instant) -> Result<Option<u64>, String> {
        let metadata = self.metadata.replica();
        let Some(report) = metadata.leader_report() else {
            return Ok(None);
        };
        // The only voter (a node alone, or `metadata_voters = 1`): nobody to hand it to.
        if report.voters.iter().all(|node| *node == self.node_id) {
            return Ok(None);
        }
        let target = report
            .in_sync
            .iter()
            .copied()
            .find(|node| *node != self.node_id && self.membership.is_up(*node));
        let Some(target) = target else {
            return Err("no other voter is up and in sync".into());
        };
        metadata.transfer_leadership(target).await;
        wait_for_new_leader(|| metadata.leader(), self.node_id, deadline)
            .await
            .map(Some)
    }
}

/// Waits until `leader()` names another node than `this`; answers it.
async fn wait_for_new_leader(
    leader: impl Fn() -> Option<u64>,
    this: u64,
    deadline: Instant,
) -> Result<u64, String> {
    loop {
        if let Some(node) = leader().filter(|node| *node != this) {
            return Ok(node);
        }
        if Instant::now() >= deadline {
            return Err("no other replica took over in time".into());
        }
        tokio::time::sleep(LEADER_CHECK_INTERVAL).await;
    }
}
