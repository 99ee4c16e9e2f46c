//! Rebalancing: moving replicas and preferred leaderships so that nodes hold about equal
//! shares (a node that joined, partitions created while a node was away, replicas placed
//! before zones were known). `plan` decides what would move; this module runs it, a few
//! partitions at a time.
//!
//! A step proposes the plan's next moves (one `MoveReplicas` command) while fewer than
//! `max_moves` partitions are still copying to their new replicas; each group's leader then
//! adds the new replicas, lets them catch up (held to `raft.catch_up_bytes_per_sec` with every
//! other rebuild) and drops the old ones, as for a drain, and leadership follows the preferred
//! replica (`handback`). The metadata leader steps by itself once the cluster's nodes have
//! been the same, all up, for `settle` (`auto`); `POST /v1/cluster/rebalance` steps from the
//! node that took it until the plan is done.

mod plan;
#[cfg(test)]
mod plan_tests;

pub use plan::{plan_rebalance, NodeShare, RebalancePlan};

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};

use super::{Cluster, ClusterError};

/// How often the metadata leader considers a step, and an operator's rebalance takes its next.
pub(crate) const STEP_INTERVAL: Duration = Duration::from_secs(2);
/// The longest an operator's rebalance keeps stepping.
const MANUAL_DEADLINE: Duration = Duration::from_secs(6 * 3600);

/// How the cluster rebalances (`[rebalance]`).
#[derive(Debug, Clone)]
pub struct RebalanceOptions {
    /// The metadata leader rebalances by itself.
    pub auto: bool,
    /// How long the cluster's nodes must have been the same, all up, before it does.
    pub settle: Duration,
    /// The most partitions copying to new replicas at once.
    pub max_moves: usize,
}

/// A rebalance's state on this node.
pub(crate) struct Rebalancer {
    options: RebalanceOptions,
    /// The eligible nodes last seen, and since when they are those.
    stable: Mutex<Option<(BTreeSet<u64>, Instant)>>,
    /// An operator's rebalance is stepping from this node.
    manual: AtomicBool,
}

impl Rebalancer {
    pub(crate) fn new(options: RebalanceOptions) -> Rebalancer {
        Rebalancer {
            options,
            stable: Mutex::new(None),
            manual: AtomicBool::new(false),
        }
    }

    /// Whether `eligible` has not changed for the settle time (restarting the clock when it
    /// has).
    fn settled(&self, eligible: &BTreeSet<u64>) -> bool {
        let mut stable = self.stable.lock();
        match &*stable {
            Some((seen, since)) if seen == eligible => since.elapsed() >= self.options.settle,
            _ => {
                *stable = Some((eligible.clone(), Instant::now()));
                self.options.settle.is_zero()
            }
        }
    }
}

/// What one step found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebalanceStep {
    /// Moves proposed by this step.
    pub proposed: usize,
    /// Partitions still copying to new replicas.
    pub moving: usize,
    /// Moves of the plan left after this step.
    pub remaining: usize,
}

impl Cluster {
    /// The nodes a rebalance moves replicas between: registered, up, not draining.
    fn rebalance_eligible(&self, state: &MetadataState) -> BTreeSet<u64> {
        state
            .active_nodes()
            .into_iter()
            .filter(|node| self.membership.is_up(*node))
            .collect()
    }

    /// What a rebalance would do now (`GET /v1/cluster/rebalance`), and how many partitions
    /// are still copying to new replicas.
    pub fn rebalance_plan(&self) -> (RebalancePlan, usize) {
        let state = self.metadata.current();
        let plan = plan_rebalance(&state, &self.rebalance_eligible(&state));
        (plan, self.partitions_moving(&state))
    }

    /// Partitions whose group (as its leader last reported it) is not yet exactly its
    /// assigned replicas: copying to new ones, dropping old ones, or with no report yet.
    fn partitions_moving(&self, state: &MetadataState) -> usize {
        state
            .partitions()
            .filter(|(_, _, assignment)| {
                let assigned: BTreeSet<u64> = assignment.replicas.iter().copied().collect();
                match self.routing.leader_map().get(assignment.group_id) {
                    Some((_, leadership)) => {
                        !leadership.learners.is_empty()
                            || leadership.voters.iter().copied().collect::<BTreeSet<_>>()
                                != assigned
                    }
                    None => true,
                }
            })
            .count()
    }

    /// Proposes the plan's next moves, as many as `max_moves` leaves room for. (Before every
    /// node knows replica moves, `propose` refuses them: `FeatureNotEnabled`.)
    pub async fn rebalance_step(&self) -> Result<RebalanceStep, ClusterError> {
        let state = self.metadata.current();
        let plan = plan_rebalance(&state, &self.rebalance_eligible(&state));
        let moving = self.partitions_moving(&state);
        let room = self.rebalancer.options.max_moves.saturating_sub(moving);
        let moves: Vec<_> = plan.moves.iter().take(room).cloned().collect();
        let mut step = RebalanceStep {
            proposed: 0,
            moving,
            remaining: plan.moves.len(),
        };
        if moves.is_empty() {
            return Ok(step);
        }
        let count = moves.len();
        match self
            .metadata
            .propose(MetadataCommand::MoveReplicas { moves })
            .await?
        {
            MetadataOutcome::Done => {
                metrics::counter!("herald_rebalance_moves_total").increment(count as u64);
                tracing::info!(
                    count,
                    moving,
                    left = plan.moves.len() - count,
                    "rebalance: moved replicas"
                );
                step.proposed = count;
                step.remaining -= count;
            }
            // Another planner moved first: the next step plans again.
            MetadataOutcome::Invalid(reason) => tracing::debug!(%reason, "rebalance step refused"),
            other => tracing::warn!(?other, "unexpected rebalance outcome"),
        }
        Ok(step)
    }

    /// The metadata leader's automatic rebalance: a step once the nodes have settled.
    pub(crate) async fn auto_rebalance(&self) {
        if !self.rebalancer.options.auto || !self.metadata.is_leader() {
            return;
        }
        let state = self.metadata.current();
        let eligible = self.rebalance_eligible(&state);
        // Everyone registered takes part: no move while a node is down or draining.
        let everyone = eligible.len() == state.nodes.len();
        if !self.rebalancer.settled(&eligible) || !everyone {
            return;
        }
        if let Err(error) = self.rebalance_step().await {
            tracing::debug!(%error, "rebalance step skipped");
        }
    }

    /// Starts stepping through the plan from this node (`POST /v1/cluster/rebalance`), unless
    /// it is already; returns the plan as it stands and the partitions still copying.
    pub fn start_rebalance(self: &Arc<Self>) -> Result<(RebalancePlan, usize), ClusterError> {
        let state = self.metadata.current();
        // Refused now, as `propose` would refuse every step in the background.
        let no_moves = MetadataCommand::MoveReplicas { moves: Vec::new() };
        no_moves
            .may_propose(state.cluster_version)
            .map_err(|feature| ClusterError::FeatureNotEnabled {
                feature,
                cluster_version: state.cluster_version,
            })?;
        if state.nodes.values().any(|record| record.draining) {
            return Err(ClusterError::CannotRebalance(
                "a node is draining: rebalance once it has left".into(),
            ));
        }
        let plan = plan_rebalance(&state, &self.rebalance_eligible(&state));
        let moving = self.partitions_moving(&state);
        if plan.moves.is_empty() || self.rebalancer.manual.swap(true, Ordering::AcqRel) {
            return Ok((plan, moving));
        }
        let cluster = Arc::downgrade(self);
        let mut stopped = self.stopping();
        tokio::spawn(async move {
            let deadline = Instant::now() + MANUAL_DEADLINE;
            while Instant::now() < deadline {
                let Some(node) = cluster.upgrade() else {
                    return;
                };
                match node.rebalance_step().await {
                    Ok(step) if step.remaining == 0 && step.moving == 0 => break,
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "rebalance step failed; trying again"),
                }
                drop(node);
                tokio::select! {
                    () = tokio::time::sleep(STEP_INTERVAL) => {}
                    _ = stopped.wait_for(|stopped| *stopped) => break,
                }
            }
            if let Some(node) = cluster.upgrade() {
                node.rebalancer.manual.store(false, Ordering::Release);
                tracing::info!("rebalance finished");
            }
        });
        Ok((plan, moving))
    }
}
