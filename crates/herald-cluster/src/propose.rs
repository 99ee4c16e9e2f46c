//! Metadata proposals from any node: forwarded to the metadata leader (one hop), then waited
//! for until this node applied them; and the cluster requests nodes serve each other, on the
//! RPC's control lane.
//!
//! Every failure keeps the outcome it really has: a request that could not be encoded was never
//! sent (a local fault, 500), one the RPC certainly did not deliver is retried or answered as
//! unavailable, and only one that may have been delivered is an unknown outcome.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::service::{self, ClusterReply, ClusterRequest, PingReport, ProposeFailure};
use super::{leadership, Cluster, ClusterError};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_raft::{RaftLayerError, Watermarks};
use herald_rpc::RpcError;

impl Cluster {
    /// Proposes a metadata change through the metadata leader, wherever it is, waiting up to
    /// the leader wait for one to be elected. When it returns, this node has applied the
    /// change too, so what the caller reads next includes it.
    pub async fn propose(&self, command: MetadataCommand) -> Result<MetadataOutcome, ClusterError> {
        let deadline = Instant::now() + self.leader_wait;
        let (outcome, index) = self.propose_anywhere(command, deadline).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !self
            .metadata
            .wait_applied(index, remaining.max(Duration::from_secs(1)))
            .await
        {
            return Err(ClusterError::Timeout(
                "this node to apply the metadata change".into(),
            ));
        }
        Ok(outcome)
    }

    async fn propose_anywhere(
        &self,
        command: MetadataCommand,
        deadline: Instant,
    ) -> Result<(MetadataOutcome, u64), ClusterError> {
        let mut attempt = 0usize;
        loop {
            attempt += 1;
            if self.metadata.is_leader() {
                match tokio::time::timeout_at(deadline, self.metadata.propose(command.clone()))
                    .await
                {
                    Err(_elapsed) => return Err(not_committed_in_time()),
                    Ok(Err(RaftLayerError::NotLeader { .. } | RaftLayerError::NoLeader { .. })) => {
                    }
                    Ok(other) => return Ok(other?),
                }
            } else if let Some(target) = self.metadata_target(attempt) {
                let request = ClusterRequest::Propose {
                    command: command.clone(),
                    hops: 0,
                };
                match self.ask(target, &request, deadline).await {
                    Ok(ClusterReply::Proposed(Ok(outcome))) => return Ok(outcome),
                    Ok(ClusterReply::Proposed(Err(ProposeFailure::NoLeader))) => {}
                    Ok(ClusterReply::Proposed(Err(ProposeFailure::Failed(reason)))) => {
                        return Err(ClusterError::Unavailable(reason))
                    }
                    Ok(ClusterReply::Proposed(Err(ProposeFailure::TimedOut))) => {
                        return Err(not_committed_in_time())
                    }
                    Ok(ClusterReply::Proposed(Err(ProposeFailure::OutcomeUnknown(reason)))) => {
                        return Err(ClusterError::Timeout(format!(
                            "the metadata change's outcome ({reason}); it may still be applied"
                        )))
                    }
                    Ok(
                        ClusterReply::Pong(_)
                        | ClusterReply::GroupHeartbeat(_)
                        | ClusterReply::ReplicaProgress(_),
                    ) => {}
                    Err(AskError::Encode(reason)) => return Err(local_fault(reason)),
                    Err(AskError::Rpc(error)) if !error.maybe_delivered() => {}
                    Err(AskError::Rpc(error)) => return Err(ClusterError::Rpc(error)),
                }
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::NoMetadataLeader);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where to send a metadata proposal: the known leader, or else some other node in turn
    /// (which passes it on if it knows the leader).
    pub(super) fn metadata_target(&self, attempt: usize) -> Option<u64> {
        if let Some(leader) = self
            .metadata
            .leader()
            .filter(|leader| *leader != self.node_id)
        {
            return Some(leader);
        }
        let mut candidates: Vec<u64> = self
            .metadata()
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

    pub(super) async fn ask(
        &self,
        node: u64,
        request: &ClusterRequest,
        deadline: Instant,
    ) -> Result<ClusterReply, AskError> {
        let body = encode_request(request)?;
        let timeout = deadline.saturating_duration_since(Instant::now());
        let service = service::CLUSTER_SERVICE;
        let answer = self
            .rpc
            .call(node, service::lane_of(service), service, body, timeout)
            .await?;
        // The peer's handler ran: a garbled answer is an outcome unknown to us.
        postcard::from_bytes(&answer).map_err(|error| {
            AskError::Rpc(RpcError::Remote(format!(
                "decoding a cluster answer: {error}"
            )))
        })
    }

    /// Serves a cluster request from another node.
    pub(super) async fn serve_request(&self, body: Bytes) -> Result<Bytes, String> {
        let request: ClusterRequest =
            postcard::from_bytes(&body).map_err(|error| format!("bad cluster request: {error}"))?;
        let reply = match request {
            ClusterRequest::Ping => ClusterReply::Pong(self.ping_report()),
            ClusterRequest::Propose { command, hops } => {
                ClusterReply::Proposed(self.propose_here(command, hops).await)
            }
            ClusterRequest::GroupHeartbeat { group, member_id } => {
                ClusterReply::GroupHeartbeat(self.serve_heartbeat(&group, &member_id))
            }
            ClusterRequest::ReplicaProgress { group } => {
                ClusterReply::ReplicaProgress(self.replica_progress(group))
            }
        };
        postcard::to_stdvec(&reply)
            .map(Bytes::from)
            .map_err(|error| format!("encoding a cluster answer: {error}"))
    }

    async fn propose_here(
        &self,
        command: MetadataCommand,
        hops: u8,
    ) -> Result<(MetadataOutcome, u64), ProposeFailure> {
        if self.metadata.is_leader() {
            let proposal = self.metadata.propose(command);
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
            .metadata
            .leader()
            .filter(|leader| *leader != self.node_id);
        match leader {
            Some(leader) if hops == 0 => {
                let request = ClusterRequest::Propose { command, hops: 1 };
                match self
                    .ask(leader, &request, Instant::now() + self.leader_wait)
                    .await
                {
                    Ok(ClusterReply::Proposed(result)) => result,
                    Ok(
                        ClusterReply::Pong(_)
                        | ClusterReply::GroupHeartbeat(_)
                        | ClusterReply::ReplicaProgress(_),
                    ) => Err(ProposeFailure::NoLeader),
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

    /// What this node leads, for pings.
    pub(super) fn ping_report(&self) -> PingReport {
        let mut leads = Vec::new();
        if let Some(report) = self.metadata.leader_report() {
            leads.push(leadership(
                herald_domain::metadata::METADATA_GROUP,
                report,
                Watermarks::default(),
            ));
        }
        for replica in self.local_replicas() {
            if let Some(report) = replica.leader_report() {
                leads.push(leadership(replica.group(), report, replica.watermarks()));
            }
        }
        PingReport {
            node_id: self.node_id,
            leads,
        }
    }
}

/// Why asking another node failed, with how far the request got.
#[derive(Debug, thiserror::Error)]
pub(super) enum AskError {
    /// The request could not be encoded: a fault of this node; nothing was sent.
    #[error("encoding a cluster request: {0}")]
    Encode(String),
    /// The call failed; [`RpcError::maybe_delivered`] says whether it may have taken effect.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

fn encode_request(request: &impl serde::Serialize) -> Result<Bytes, AskError> {
    postcard::to_stdvec(request)
        .map(Bytes::from)
        .map_err(|error| AskError::Encode(error.to_string()))
}

/// A request this node could not encode: logged here, answered as an internal error.
fn local_fault(reason: String) -> ClusterError {
    tracing::error!(%reason, "a cluster request could not be encoded; nothing was sent");
    ClusterError::Internal(format!("encoding a cluster request: {reason}"))
}

/// A proposal that was made but not committed within its deadline (a metadata leader that
/// lost its quorum cannot commit): its outcome is unknown.
fn not_committed_in_time() -> ClusterError {
    ClusterError::Timeout(
        "the metadata change to commit (the metadata leader may have lost its quorum); it may still be applied".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value whose encoding always fails, as a command too large or malformed for postcard
    /// would.
    struct Unencodable;

    impl serde::Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("cannot encode this"))
        }
    }

    #[test]
    fn a_request_that_cannot_be_encoded_is_a_local_fault_not_an_unknown_outcome() {
        let error = encode_request(&Unencodable).unwrap_err();
        let AskError::Encode(reason) = error else {
            panic!("an encoding failure is no RPC outcome: {error}");
        };
        let error = local_fault(reason);
        assert!(matches!(error, ClusterError::Internal(_)), "{error}");
    }

    #[test]
    fn cluster_requests_encode() {
        assert!(encode_request(&ClusterRequest::Ping).is_ok());
    }
}
