//! Idempotent appends on a partition's leader: each batch is its own `AppendOnce` entry, and
//! the partition's dedup window decides at apply whether it is written (see
//! [`dedup`](super::dedup)).

use bytes::Bytes;
use futures::StreamExt;
use openraft::errors::ClientWriteError;

use super::replica::PartitionReplica;
use crate::raft::engine::error::RaftLayerError;
use crate::raft::engine::types::{DedupClaim, RaftRequest, RaftResponse};

/// What an idempotent append came to, as the partition's dedup window decided at apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnceOutcome {
    /// Written now, from this offset.
    Appended { base_offset: u64 },
    /// Written before and not again; where, when the window still remembers.
    Duplicate { base_offset: Option<u64> },
    /// Refused: the producer's next sequence is `expected`.
    OutOfOrderSequence { expected: i64 },
    /// Refused: the partition knows a newer epoch of the producer.
    ProducerFenced { current_epoch: i16 },
    /// Refused: the idempotency key was used for a different request.
    IdempotencyKeyReused,
}

impl PartitionReplica {
    /// Replicates idempotent batches, each as its own entry, in this order; answers each one's
    /// outcome, in the same order. They reach raft in one message, so consecutive idempotent
    /// requests share the log write and its fsync without sharing an entry.
    ///
    /// An entry a new leader discarded may still commit through another leader (openraft's
    /// `LogEntryDiscarded`), or never; it is reported as not led here all the same, because
    /// retrying an idempotent append is safe either way: a retry of an entry that did commit
    /// is answered as a duplicate by the dedup window.
    pub async fn append_once_many(
        &self,
        appends: Vec<(Bytes, DedupClaim)>,
    ) -> Vec<Result<OnceOutcome, RaftLayerError>> {
        let count = appends.len();
        let stopped = |group| RaftLayerError::Fatal {
            group,
            reason: "the raft group stopped".into(),
        };
        let requests = appends
            .into_iter()
            .map(|(batch, claim)| RaftRequest::AppendOnce { batch, claim });
        let mut outcomes = Vec::with_capacity(count);
        match self.raft.client_write_many(requests).await {
            Ok(mut results) => {
                while let Some(result) = results.next().await {
                    outcomes.push(match result {
                        Ok(Ok(written)) => once_outcome(written.response),
                        Ok(Err(ClientWriteError::ForwardToLeader(forward))) => {
                            Err(match forward.leader_id {
                                Some(leader) => RaftLayerError::NotLeader {
                                    group: self.group(),
                                    leader: Some(leader),
                                },
                                None => RaftLayerError::NoLeader {
                                    group: self.group(),
                                },
                            })
                        }
                        Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => {
                            Err(RaftLayerError::NoLeader {
                                group: self.group(),
                            })
                        }
                        Ok(Err(other)) => Err(RaftLayerError::Rejected(other.to_string())),
                        Err(fatal) => Err(RaftLayerError::Fatal {
                            group: self.group(),
                            reason: fatal.to_string(),
                        }),
                    });
                }
            }
            Err(fatal) => {
                tracing::warn!(group = self.group(), %fatal, "idempotent appends not proposed");
            }
        }
        while outcomes.len() < count {
            outcomes.push(Err(stopped(self.group())));
        }
        outcomes
    }
}

fn once_outcome(response: RaftResponse) -> Result<OnceOutcome, RaftLayerError> {
    Ok(match response {
        RaftResponse::Appended { base_offset, .. } => OnceOutcome::Appended { base_offset },
        RaftResponse::Duplicate { base_offset, .. } => OnceOutcome::Duplicate { base_offset },
        RaftResponse::OutOfOrderSequence { expected } => {
            OnceOutcome::OutOfOrderSequence { expected }
        }
        RaftResponse::ProducerFenced { current_epoch } => {
            OnceOutcome::ProducerFenced { current_epoch }
        }
        RaftResponse::IdempotencyKeyReused => OnceOutcome::IdempotencyKeyReused,
        RaftResponse::Rejected(reason) => return Err(RaftLayerError::Rejected(reason)),
        _ => {
            return Err(RaftLayerError::Rejected(
                "unexpected answer to an idempotent append".into(),
            ))
        }
    })
}
