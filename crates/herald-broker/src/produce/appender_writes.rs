//! How the requests an appender took from its queue become raft entries: ordinary ones merged
//! into one batch, idempotent ones each as its own `AppendOnce` entry; and the partition log
//! they are proposed to, a trait so the appender's unit tests can drive a log that never
//! commits (a leader whose quorum is gone) or commits when told. Proposing returns once the
//! entry is queued in raft; what answers the requests runs on, so the appender can propose the
//! next entry before this one is committed.

use std::future::Future;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;

use super::appender::{AppendOutcome, Pending};
use super::idempotence::{Landing, OnceClaim};
use crate::topics::now_ms;
use crate::BrokerError;
use herald_domain::batch::{encode_batch, ProducerStamp};
use herald_raft::{DedupClaim, PartitionReplica, PendingAppend, PendingOnce, RaftLayerError};

/// What an appender writes to: this node's replica of a partition it leads.
pub(crate) trait PartitionLog: Send + Sync + 'static {
    /// Proposes one stored batch; returns once it is queued in raft (proposals reach the log
    /// in the order they are made), with what resolves to its base offset and offset span
    /// once a quorum has it. With `early`, the base offset is also sent there once the leader
    /// alone has the batch durable, when it can tell it for certain.
    fn propose(
        &self,
        batch: Bytes,
        early: Option<oneshot::Sender<u64>>,
    ) -> impl Future<Output = Result<PendingAppend, RaftLayerError>> + Send;

    /// Proposes idempotent batches, each as its own entry, in order; returns once they are
    /// queued in raft, with what resolves to each one's outcome.
    fn propose_once_many(
        &self,
        appends: Vec<(Bytes, DedupClaim)>,
    ) -> impl Future<Output = PendingOnce> + Send;
}

impl PartitionLog for PartitionReplica {
    fn propose(
        &self,
        batch: Bytes,
        early: Option<oneshot::Sender<u64>>,
    ) -> impl Future<Output = Result<PendingAppend, RaftLayerError>> + Send {
        PartitionReplica::propose_append(self, batch, early)
    }

    fn propose_once_many(
        &self,
        appends: Vec<(Bytes, DedupClaim)>,
    ) -> impl Future<Output = PendingOnce> + Send {
        PartitionReplica::propose_once_many(self, appends)
    }
}

/// What answers a run of requests once raft has the outcome of their entries.
pub(super) type Answering = BoxFuture<'static, ()>;

/// Proposes each idempotent request's records as its own `AppendOnce` entry, stamped with the
/// leader's clock now: the partition's dedup window decides at apply whether they are new.
/// Returns once they are proposed, with what answers the requests.
pub(super) async fn propose_each(log: &impl PartitionLog, taken: Vec<Pending>) -> Answering {
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
        return async {}.boxed();
    }
    let outcomes = log.propose_once_many(appends).await;
    async move {
        let outcomes = outcomes.await;
        for (done, outcome) in proposed.into_iter().zip(outcomes) {
            let outcome = outcome.map(Landing::from).map_err(BrokerError::from);
            // A requester that gave up (its client went away) no longer listens; nothing to do.
            let _ = done.send(outcome);
        }
    }
    .boxed()
}

/// Proposes several requests' records as one batch; returns once it is proposed, with what
/// tells each request where its records landed (an `acks=leader` one as early as it can).
pub(super) async fn propose_merged(log: &impl PartitionLog, taken: Vec<Pending>) -> Answering {
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
            return async {}.boxed();
        }
    };
    propose_and_answer(log, batch, quorum_waiters, leader_waiters).await
}

/// Proposes each request's batch, already in the stored layout (a producer's
/// `application/vnd.herald.batch`), as its own entry, byte for byte, in order; returns once they
/// are proposed, with what answers them. A batch with a claim (an idempotent producer's) is an
/// `AppendOnce` entry, decided by the partition's dedup window at apply.
pub(super) async fn propose_stored(log: &impl PartitionLog, taken: Vec<Pending>) -> Answering {
    let mut answering = Vec::with_capacity(taken.len());
    for pending in taken {
        let Some(batch) = pending.stored else {
            continue;
        };
        if let Some((once, _)) = pending.once {
            answering.push(propose_stored_once(log, batch, once, pending.done).await);
            continue;
        }
        let waiter = vec![(0, pending.done)];
        let (quorum_waiters, leader_waiters) = if pending.leader_ack {
            (Vec::new(), waiter)
        } else {
            (waiter, Vec::new())
        };
        answering.push(propose_and_answer(log, batch, quorum_waiters, leader_waiters).await);
    }
    futures::future::join_all(answering).map(|_| ()).boxed()
}

/// Proposes one stored batch of an idempotent producer as an `AppendOnce` entry stamped with
/// the leader's clock now (its producer stamp is in the batch); returns once it is proposed,
/// with what answers where it landed.
async fn propose_stored_once(
    log: &impl PartitionLog,
    batch: Bytes,
    once: OnceClaim,
    done: oneshot::Sender<AppendOutcome>,
) -> Answering {
    let claim = DedupClaim {
        idempotency_key: once.idempotency_key,
        fingerprint: once.fingerprint,
        leader_time_ms: now_ms(),
        limits: once.limits,
    };
    let outcomes = log.propose_once_many(vec![(batch, claim)]).await;
    async move {
        let outcome = match outcomes.await.into_iter().next() {
            Some(outcome) => outcome.map(Landing::from).map_err(BrokerError::from),
            None => Err(BrokerError::Internal(
                "an idempotent stored batch was proposed and answered no outcome".into(),
            )),
        };
        // A requester that gave up (its client went away) no longer listens; nothing to do.
        let _ = done.send(outcome);
    }
    .boxed()
}

/// Proposes `batch`; returns once it is proposed, with what tells each waiter where its records
/// landed: the leader waiters as soon as the leader alone has it durable (when that can be told
/// for certain), the quorum waiters once a quorum has it.
async fn propose_and_answer(
    log: &impl PartitionLog,
    batch: Bytes,
    quorum_waiters: Vec<(u64, oneshot::Sender<AppendOutcome>)>,
    mut leader_waiters: Vec<(u64, oneshot::Sender<AppendOutcome>)>,
) -> Answering {
    let (early, early_base) = if leader_waiters.is_empty() {
        (None, None)
    } else {
        let (early, early_base) = oneshot::channel();
        (Some(early), Some(early_base))
    };
    let pending = match log.propose(batch, early).await {
        Ok(pending) => pending,
        Err(error) => {
            answer(
                quorum_waiters.into_iter().chain(leader_waiters),
                &Err(BrokerError::from(error)),
            );
            return async {}.boxed();
        }
    };
    async move {
        let outcome = match early_base {
            None => pending.await,
            Some(early_base) => {
                tokio::pin!(pending);
                tokio::select! {
                    outcome = &mut pending => outcome,
                    Ok(base_offset) = early_base => {
                        answer(std::mem::take(&mut leader_waiters), &Ok(base_offset));
                        pending.await
                    }
                }
            }
        };
        let outcome = outcome
            .map(|(base_offset, _)| base_offset)
            .map_err(BrokerError::from);
        answer(quorum_waiters.into_iter().chain(leader_waiters), &outcome);
    }
    .boxed()
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
