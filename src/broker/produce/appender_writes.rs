//! How the requests an appender took from its queue become raft entries: ordinary ones merged
//! into one batch, idempotent ones each as its own `AppendOnce` entry; and the partition log
//! they are written to, a trait so the appender's unit tests can drive a log that never
//! commits (a leader whose quorum is gone) or commits when told.

use std::future::Future;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::appender::{AppendOutcome, Pending};
use super::idempotence::Landing;
use crate::broker::topics::now_ms;
use crate::broker::BrokerError;
use crate::domain::batch::{encode_batch, ProducerStamp};
use crate::raft::{DedupClaim, OnceOutcome, PartitionReplica, RaftLayerError};

/// What an appender writes to: this node's replica of a partition it leads.
pub(in crate::broker) trait PartitionLog: Send + Sync + 'static {
    /// Replicates one stored batch; its base offset and offset span once a quorum has it.
    fn append(
        &self,
        batch: Bytes,
    ) -> impl Future<Output = Result<(u64, u32), RaftLayerError>> + Send;

    /// Like [`append`](Self::append), and sends the base offset on `early` once the leader
    /// alone has the batch durable, when it can tell it for certain.
    fn append_early(
        &self,
        batch: Bytes,
        early: oneshot::Sender<u64>,
    ) -> impl Future<Output = Result<(u64, u32), RaftLayerError>> + Send;

    /// Replicates idempotent batches, each as its own entry, in order; each one's outcome.
    fn append_once_many(
        &self,
        appends: Vec<(Bytes, DedupClaim)>,
    ) -> impl Future<Output = Vec<Result<OnceOutcome, RaftLayerError>>> + Send;
}

impl PartitionLog for PartitionReplica {
    fn append(
        &self,
        batch: Bytes,
    ) -> impl Future<Output = Result<(u64, u32), RaftLayerError>> + Send {
        PartitionReplica::append(self, batch)
    }

    fn append_early(
        &self,
        batch: Bytes,
        early: oneshot::Sender<u64>,
    ) -> impl Future<Output = Result<(u64, u32), RaftLayerError>> + Send {
        PartitionReplica::append_early(self, batch, early)
    }

    fn append_once_many(
        &self,
        appends: Vec<(Bytes, DedupClaim)>,
    ) -> impl Future<Output = Vec<Result<OnceOutcome, RaftLayerError>>> + Send {
        PartitionReplica::append_once_many(self, appends)
    }
}

/// Writes each idempotent request's records as its own `AppendOnce` entry, stamped with the
/// leader's clock now: the partition's dedup window decides at apply whether they are new.
pub(super) async fn append_each(log: &impl PartitionLog, taken: Vec<Pending>) {
    let leader_time_ms = now_ms();
    let mut proposed = Vec::with_capacity(taken.len());
    let mut appends = Vec::with_capacity(taken.len());
    for pending in taken {
        let Some((once, stamp)) = pending.once else {
            continue;
        };
        let mut records = pending.records;
        for (delta, record) in records.iter_mut().enumerate() {
            record.offset_delta = delta as u32;
        }
        match encode_batch(&records, pending.compression, stamp) {
            Ok(batch) => {
                let claim = DedupClaim {
                    idempotency_key: once.idempotency_key,
                    fingerprint: once.fingerprint,
                    leader_time_ms,
                    limits: once.limits,
                };
                appends.push((batch, claim));
                proposed.push(pending.done);
            }
            Err(error) => {
                let error = BrokerError::Internal(format!("encoding a batch: {error}"));
                let _ = pending.done.send(Err(error));
            }
        }
    }
    if appends.is_empty() {
        return;
    }
    let outcomes = log.append_once_many(appends).await;
    for (done, outcome) in proposed.into_iter().zip(outcomes) {
        let outcome = outcome.map(Landing::from).map_err(BrokerError::from);
        // A requester that gave up (its client went away) no longer listens; nothing to do.
        let _ = done.send(outcome);
    }
}

/// Writes several requests' records as one batch and tells each where its records landed.
pub(super) async fn append_merged(log: &impl PartitionLog, taken: Vec<Pending>) {
    let compression = taken[0].compression;
    let total = taken.iter().map(|pending| pending.records.len()).sum();
    let mut merged = Vec::with_capacity(total);
    let mut quorum_waiters = Vec::with_capacity(taken.len());
    let mut leader_waiters = Vec::new();
    for pending in taken {
        let waiter = (merged.len() as u64, pending.done);
        if pending.leader_ack {
            leader_waiters.push(waiter);
        } else {
            quorum_waiters.push(waiter);
        }
        for mut record in pending.records {
            record.offset_delta = merged.len() as u32;
            merged.push(record);
        }
    }
    let batch = encode_batch(&merged, compression, ProducerStamp::NONE);
    drop(merged);
    let batch = match batch {
        Ok(batch) => batch,
        Err(error) => {
            let error = BrokerError::Internal(format!("encoding a batch: {error}"));
            answer(
                quorum_waiters.into_iter().chain(leader_waiters),
                &Err(error),
            );
            return;
        }
    };
    replicate(log, batch, quorum_waiters, leader_waiters).await;
}

/// Writes one request's batch, already in the stored layout, as its own entry, byte for byte.
pub(super) async fn append_stored(log: &impl PartitionLog, taken: Vec<Pending>) {
    for pending in taken {
        let Some(batch) = pending.stored else {
            continue;
        };
        let waiter = vec![(0, pending.done)];
        if pending.leader_ack {
            replicate(log, batch, Vec::new(), waiter).await;
        } else {
            replicate(log, batch, waiter, Vec::new()).await;
        }
    }
}

/// Replicates `batch` and tells each waiter where its records landed: the leader waiters as
/// soon as the leader has it durable, the quorum waiters once a quorum has it.
async fn replicate(
    log: &impl PartitionLog,
    batch: Bytes,
    quorum_waiters: Vec<(u64, oneshot::Sender<AppendOutcome>)>,
    mut leader_waiters: Vec<(u64, oneshot::Sender<AppendOutcome>)>,
) {
    let outcome = if leader_waiters.is_empty() {
        log.append(batch).await
    } else {
        let (early, early_base) = oneshot::channel();
        let appended = log.append_early(batch, early);
        tokio::pin!(appended);
        tokio::select! {
            outcome = &mut appended => outcome,
            Ok(base_offset) = early_base => {
                answer(std::mem::take(&mut leader_waiters), &Ok(base_offset));
                appended.await
            }
        }
    };
    let outcome = outcome
        .map(|(base_offset, _)| base_offset)
        .map_err(BrokerError::from);
    answer(quorum_waiters.into_iter().chain(leader_waiters), &outcome);
}

/// Tells each waiter where its records start (its position in the merged batch added).
fn answer(
    waiters: impl IntoIterator<Item = (u64, oneshot::Sender<AppendOutcome>)>,
    outcome: &Result<u64, BrokerError>,
) {
    for (start, done) in waiters {
        let landed = outcome.clone().map(|base_offset| Landing::Appended {
            base_offset: base_offset + start,
        });
        // A requester that gave up (its client went away) no longer listens; nothing to do.
        let _ = done.send(landed);
    }
}
