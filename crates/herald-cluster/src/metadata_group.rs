//! The metadata group as the rest of the node uses it: the state this node applied, who leads,
//! and proposals from any node, forwarded to the metadata leader (one hop), then waited for until
//! this node applied them.
//!
//! Every failure keeps the outcome it really has: a request that could not be encoded was never
//! sent (a local fault, 500), one the RPC certainly did not deliver is retried or answered as
//! unavailable, and only one that may have been delivered is an unknown outcome.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use serde::{Deserialize, Serialize};

use super::operation::{ask, local_fault, AskError, ClusterOperation, ClusterOperationKind};
use super::service::ProposeFailure;
use super::{Cluster, ClusterError};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome, MetadataState};
use herald_raft::{MetadataReplica, RaftLayerError};
use herald_rpc::RpcClient;

/// The metadata group on this node: its replica, the founders (whom a node that knows no
/// leader asks), and what proposing from here needs.
pub struct MetadataGroup {
    replica: MetadataReplica,
    node_id: u64,
    /// The founding members (id to raft address); empty means this node alone.
    founders: BTreeMap<u64, String>,
    leader_wait: Duration,
    rpc: RpcClient,
}

impl MetadataGroup {
    pub(crate) fn new(
        replica: MetadataReplica,
        node_id: u64,
        founders: BTreeMap<u64, String>,
        leader_wait: Duration,
        rpc: RpcClient,
    ) -> MetadataGroup {
        MetadataGroup {
            replica,
            node_id,
            founders,
            leader_wait,
            rpc,
        }
    }

    /// The latest metadata applied on this node.
    pub fn current(&self) -> Arc<MetadataState> {
        self.replica.state()
    }

    /// The metadata group's leader, as this node knows it.
    pub fn leader(&self) -> Option<u64> {
        self.replica.leader()
    }

    /// Whether this node leads the metadata group now (what runs only there asks this).
    pub fn is_leader(&self) -> bool {
        self.replica.is_leader()
    }

    /// Every metadata state this node applies, as it is published.
    pub fn changes(&self) -> watch::Receiver<Arc<MetadataState>> {
        self.replica.subscribe()
    }

    /// Whether this start of the node founded the cluster (once per cluster, on one node):
    /// what is created only once, at a cluster's birth, asks this.
    pub fn founded_here(&self) -> bool {
        self.replica.founded_here()
    }

    /// The replica itself, for the cluster's own loops (membership, elections, status).
    pub(crate) fn replica(&self) -> &MetadataReplica {
        &self.replica
    }

    pub(crate) fn founders(&self) -> &BTreeMap<u64, String> {
        &self.founders
    }

    /// Proposes a metadata change through the metadata leader, wherever it is, waiting up to
    /// the leader wait for one to be elected. When it returns, this node has applied the
    /// change too, so what the caller reads next includes it.
    ///
    /// A command that needs a feature the cluster version does not allow yet (not every node
    /// is upgraded to know it) is refused with nothing proposed.
    pub async fn propose(&self, command: MetadataCommand) -> Result<MetadataOutcome, ClusterError> {
        let cluster_version = self.current().cluster_version;
        if let Err(feature) = command.may_propose(cluster_version) {
            return Err(ClusterError::FeatureNotEnabled {
                feature,
                cluster_version,
            });
        }
        let deadline = Instant::now() + self.leader_wait;
        let propose = Propose { command, hops: 0 };
        let (outcome, index) = self.run_on_leader(self, &propose, deadline).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !self
            .replica
            .wait_applied(index, remaining.max(Duration::from_secs(1)))
            .await
        {
            return Err(ClusterError::Timeout(
                "this node to apply the metadata change".into(),
            ));
        }
        Ok(outcome)
    }

    /// Runs `operation` on the metadata leader: here when this node leads (against
    /// `context`), else sent to the leader, or while none is known to another node, which
    /// passes it on. Tries again only what was certainly not done (or what may be repeated),
    /// until `deadline`.
    pub(crate) async fn run_on_leader<Op>(
        &self,
        context: &Op::Context,
        operation: &Op,
        deadline: Instant,
    ) -> Result<Op::Answer, ClusterError>
    where
        Op: MetadataLeaderOperation
            + ClusterOperation<
                Reply = Result<<Op as MetadataLeaderOperation>::Answer, ProposeFailure>,
            >,
    {
        let mut attempt = 0usize;
        loop {
            attempt += 1;
            let verdict = if self.replica.is_leader() {
                operation.run_here(context, deadline).await
            } else if let Some(target) = self.metadata_target(attempt) {
                match ask(&self.rpc, target, operation, deadline).await {
                    Ok(Ok(answer)) => Try::Done(Ok(answer)),
                    Ok(Err(failure)) => Op::failed(failure),
                    Err(AskError::Encode(reason)) => Try::Done(Err(local_fault(reason))),
                    Err(AskError::Rpc(error)) if !error.maybe_delivered() || Op::REPEATABLE => {
                        Try::Again
                    }
                    Err(AskError::Rpc(error)) => Try::Done(Err(ClusterError::Rpc(error))),
                }
            } else {
                Try::Again
            };
            if let Try::Done(result) = verdict {
                return result;
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::NoMetadataLeader);
            }
            tokio::time::sleep(Op::PAUSE).await;
        }
    }

    /// Where to send a metadata proposal: the known leader, or else some other node in turn
    /// (which passes it on if it knows the leader).
    pub(crate) fn metadata_target(&self, attempt: usize) -> Option<u64> {
        if let Some(leader) = self
            .replica
            .leader()
            .filter(|leader| *leader != self.node_id)
        {
            return Some(leader);
        }
        let mut candidates: Vec<u64> = self
            .current()
            .nodes
            .keys()
            .chain(self.founders.keys())
            .copied()
            .filter(|node| *node != self.node_id)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[attempt % candidates.len()])
    }

    /// Serves a forwarded proposal: proposes it when this node leads, else passes it on to
    /// the leader once (`hops` stops loops while leadership moves).
    async fn propose_here(
        &self,
        command: MetadataCommand,
        hops: u8,
    ) -> Result<(MetadataOutcome, u64), ProposeFailure> {
        // The sender checked it too, against a metadata state that may be behind this one's.
        let cluster_version = self.current().cluster_version;
        if let Err(feature) = command.may_propose(cluster_version) {
            let refused = ClusterError::FeatureNotEnabled {
                feature,
                cluster_version,
            };
            return Err(ProposeFailure::Failed(refused.to_string()));
        }
        if self.replica.is_leader() {
            let proposal = self.replica.propose(command);
            return match tokio::time::timeout(self.leader_wait, proposal).await {
                Err(_elapsed) => Err(ProposeFailure::TimedOut),
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(RaftLayerError::NotLeader { .. } | RaftLayerError::NoLeader { .. })) => {
                    Err(ProposeFailure::NoLeader)
                }
                Ok(Err(error @ RaftLayerError::OutcomeUnknown { .. })) => {
                    Err(ProposeFailure::OutcomeUnknown(error.to_string()))
                }
                Ok(Err(error)) => Err(ProposeFailure::Failed(error.to_string())),
            };
        }
        let leader = self
            .replica
            .leader()
            .filter(|leader| *leader != self.node_id);
        match leader {
            Some(leader) if hops == 0 => {
                let request = Propose { command, hops: 1 };
                match ask(
                    &self.rpc,
                    leader,
                    &request,
                    Instant::now() + self.leader_wait,
                )
                .await
                {
                    Ok(result) => result,
                    // Not proposed, but a retry would fail the same way.
                    Err(AskError::Encode(reason)) => {
                        Err(ProposeFailure::Failed(local_fault(reason).to_string()))
                    }
                    Err(AskError::Rpc(error)) if !error.maybe_delivered() => {
                        Err(ProposeFailure::NoLeader)
                    }
                    Err(AskError::Rpc(error)) => {
                        Err(ProposeFailure::OutcomeUnknown(error.to_string()))
                    }
                }
            }
            _ => Err(ProposeFailure::NoLeader),
        }
    }
}

/// A metadata change for the metadata leader; a node that does not lead passes it on once
/// (`hops` stops loops while leadership moves).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Propose {
    pub(crate) command: MetadataCommand,
    pub(crate) hops: u8,
}

impl ClusterOperation for Propose {
    const KIND: ClusterOperationKind = ClusterOperationKind::Propose;
    /// The outcome and the raft index it was applied at.
    type Reply = Result<(MetadataOutcome, u64), ProposeFailure>;

    async fn serve(self, cluster: &Cluster) -> Self::Reply {
        cluster
            .metadata()
            .propose_here(self.command, self.hops)
            .await
    }
}

impl MetadataLeaderOperation for Propose {
    type Answer = (MetadataOutcome, u64);
    type Context = MetadataGroup;
    /// A proposal whose outcome is unknown may have been applied: never sent again blindly.
    const REPEATABLE: bool = false;
    const PAUSE: Duration = Duration::from_millis(100);

    async fn run_here(&self, group: &MetadataGroup, deadline: Instant) -> Try<Self::Answer> {
        match tokio::time::timeout_at(deadline, group.replica.propose(self.command.clone())).await {
            Err(_elapsed) => Try::Done(Err(not_committed_in_time())),
            Ok(Err(RaftLayerError::NotLeader { .. } | RaftLayerError::NoLeader { .. })) => {
                Try::Again
            }
            Ok(other) => Try::Done(other.map_err(ClusterError::from)),
        }
    }

    fn failed(failure: ProposeFailure) -> Try<Self::Answer> {
        let error = match failure {
            // Nothing was proposed: ask again.
            ProposeFailure::NoLeader => return Try::Again,
            ProposeFailure::Failed(reason) => ClusterError::Unavailable(reason),
            ProposeFailure::TimedOut => not_committed_in_time(),
            ProposeFailure::OutcomeUnknown(reason) => ClusterError::Timeout(format!(
                "the metadata change's outcome ({reason}); it may still be applied"
            )),
        };
        Try::Done(Err(error))
    }
}

/// One try's verdict: done, or worth another try (at the leader, or a new one).
pub(crate) enum Try<T> {
    Done(Result<T, ClusterError>),
    Again,
}

/// An operation that runs on the metadata group's leader, wherever it is
/// ([`MetadataGroup::run_on_leader`]). Its reply on the wire is its answer or why the leader
/// (or the node passing it on) did not run it.
pub(crate) trait MetadataLeaderOperation: Send + Sync {
    type Answer: Send;
    /// What it runs against on the leader.
    type Context: Sync;
    /// Whether a call whose outcome is unknown may be sent again (it changes nothing durable).
    const REPEATABLE: bool;
    /// How long to wait before another try.
    const PAUSE: Duration;

    /// Runs it here, on the leader (this node led when the try began).
    fn run_here(
        &self,
        context: &Self::Context,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Try<Self::Answer>> + Send;

    /// What a failure answered by another node means.
    fn failed(failure: ProposeFailure) -> Try<Self::Answer>;
}

/// A proposal that was made but not committed within its deadline (a metadata leader that
/// lost its quorum cannot commit): its outcome is unknown.
fn not_committed_in_time() -> ClusterError {
    ClusterError::Timeout(
        "the metadata change to commit (the metadata leader may have lost its quorum); it may still be applied".into(),
    )
}
