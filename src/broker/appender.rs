//! Server-side batching: concurrent produce requests for one partition share one raft entry.
//!
//! While a partition's append is being replicated, requests for it queue up; when it is done,
//! everything queued goes out as the next batch. Under load, many requests cost one raft entry,
//! one RocksDB write and one share of an fsync instead of one each; an idle partition adds no
//! delay, since the first request starts a batch at once. Each request still gets its own
//! contiguous offsets, in the order the requests arrived.
//!
//! An idempotent request is never merged: its batch goes alone, as one `AppendOnce` entry, so
//! the partition's dedup window decides about exactly what the client sent (and its retry).
//! It still waits its turn in the queue, so requests keep their order. Consecutive idempotent
//! requests in the queue are proposed together, each as its own entry, in order: they share the
//! log write and its fsync, not an entry.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::idempotence::{Landing, OnceClaim};
use super::topics::now_ms;
use super::BrokerError;
use crate::domain::batch::{encode_batch, ProducerStamp};
use crate::domain::{Compression, Record};
use crate::raft::{DedupClaim, PartitionReplica};

/// The most record bytes merged into one raft entry; a single larger request still goes alone.
const MAX_MERGED_BYTES: usize = 8 << 20;

/// Where a request's records landed (for an ordinary request always
/// [`Landing::Appended`] with their base offset), or why they were not written.
pub(super) type AppendOutcome = Result<Landing, BrokerError>;

/// One appender per partition group on this node.
#[derive(Default)]
pub(super) struct Appenders {
    by_group: Mutex<HashMap<u64, Arc<PartitionAppender>>>,
}

impl Appenders {
    pub(super) fn for_group(&self, group: u64) -> Arc<PartitionAppender> {
        self.by_group.lock().entry(group).or_default().clone()
    }

    pub(super) fn forget(&self, groups: &[u64]) {
        let mut by_group = self.by_group.lock();
        groups.iter().for_each(|group| {
            by_group.remove(group);
        });
    }
}

#[derive(Default)]
pub(super) struct PartitionAppender {
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    draining: bool,
}

struct Pending {
    records: Vec<Record>,
    bytes: usize,
    compression: Compression,
    /// `acks=leader`: answer once the leader has the batch durable, before a quorum has it.
    leader_ack: bool,
    /// An idempotent request: its claim and its batch's producer stamp. Goes alone.
    once: Option<(OnceClaim, ProducerStamp)>,
    done: oneshot::Sender<AppendOutcome>,
}

impl PartitionAppender {
    /// Queues one request's records for `replica`; the receiver yields where they landed, once
    /// a quorum has them, or with `leader_ack` once the leader has them durable. With `once`,
    /// an idempotent request's claim and stamp, the records go as their own entry.
    pub(super) fn submit(
        self: &Arc<Self>,
        replica: Arc<PartitionReplica>,
        records: Vec<Record>,
        compression: Compression,
        leader_ack: bool,
        once: Option<(OnceClaim, ProducerStamp)>,
    ) -> oneshot::Receiver<AppendOutcome> {
        let (done, outcome) = oneshot::channel();
        let bytes = records.iter().map(Record::size_bytes).sum();
        let start_draining = {
            let mut queue = self.queue.lock();
            queue.pending.push(Pending {
                records,
                bytes,
                compression,
                leader_ack,
                once,
                done,
            });
            !std::mem::replace(&mut queue.draining, true)
        };
        if start_draining {
            tokio::spawn(self.clone().drain(replica));
        }
        outcome
    }

    /// Appends queued requests, batch after batch, until the queue is empty.
    async fn drain(self: Arc<Self>, replica: Arc<PartitionReplica>) {
        loop {
            let taken = {
                let mut queue = self.queue.lock();
                if queue.pending.is_empty() {
                    queue.draining = false;
                    return;
                }
                // A run of requests of one kind: ordinary ones are merged into one entry,
                // idempotent ones each get their own.
                let idempotent = queue.pending[0].once.is_some();
                let mut bytes = 0;
                let count = queue
                    .pending
                    .iter()
                    .take_while(|pending| {
                        let fits = bytes == 0 || bytes + pending.bytes <= MAX_MERGED_BYTES;
                        bytes += pending.bytes;
                        fits && pending.once.is_some() == idempotent
                    })
                    .count();
                queue.pending.drain(..count).collect::<Vec<_>>()
            };
            if taken[0].once.is_some() {
                append_each(&replica, taken).await;
            } else {
                append_merged(&replica, taken).await;
            }
        }
    }
}

/// Writes each idempotent request's records as its own `AppendOnce` entry, stamped with the
/// leader's clock now: the partition's dedup window decides at apply whether they are new.
async fn append_each(replica: &PartitionReplica, taken: Vec<Pending>) {
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
    let outcomes = replica.append_once_many(appends).await;
    for (done, outcome) in proposed.into_iter().zip(outcomes) {
        let outcome = outcome.map(Landing::from).map_err(BrokerError::from);
        // A requester that gave up (its client went away) no longer listens; nothing to do.
        let _ = done.send(outcome);
    }
}

/// Writes several requests' records as one batch and tells each where its records landed.
async fn append_merged(replica: &PartitionReplica, taken: Vec<Pending>) {
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
    let batch = match encode_batch(&merged, compression, ProducerStamp::NONE) {
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
    let outcome = if leader_waiters.is_empty() {
        replica.append(batch).await
    } else {
        let (early, early_base) = oneshot::channel();
        let appended = replica.append_early(batch, early);
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
