//! Server-side batching: concurrent produce requests for one partition share one raft entry,
//! several entries are in flight at once, and what waits for a partition is bounded in bytes
//! and in time.
//!
//! Requests for a partition queue up; a drain task takes everything queued as the next batch
//! and proposes it, and goes on with the next batch as soon as raft has this one queued, up to
//! `max_in_flight` entries proposed and not yet answered (`max_in_flight_appends_per_partition`).
//! A run smaller than [`PIPELINE_MIN_BYTES`] with no `acks=leader` request in it does not take
//! a free slot while other entries are in flight: it waits for one of them to be answered and
//! goes out merged, so many small requests cost one entry per round trip, not many tiny ones.
//! So a partition's throughput is not one entry per quorum round trip, and an `acks=leader`
//! request is answered once the leader has its entry durable, whatever the quorum of the
//! entries before it is doing. With every slot taken, requests queue and go out together in
//! the next batch: under load, many requests cost one raft entry, one RocksDB write and one
//! share of an fsync instead of one each; an idle partition adds no delay, since the first
//! request starts a batch at once. Entries are proposed by the one drain task, in queue order,
//! and raft logs them in the order they are proposed, so each request still gets its own
//! contiguous offsets, in the order the requests arrived. A merged batch holds at most
//! [`MAX_MERGED_BYTES`] of encoded records and [`MAX_MESSAGES_PER_REQUEST`] records (offset
//! deltas are u32, and a batch is decoded whole when read).
//!
//! An idempotent request is never merged: its batch goes alone, as one `AppendOnce` entry, so
//! the partition's dedup window decides about exactly what the client sent (and its retry).
//! It still waits its turn in the queue, so requests keep their order. Consecutive idempotent
//! requests in the queue are proposed together, each as its own entry, in order: they share the
//! log write and its fsync, not an entry. A retry of an idempotent request is only sent by its
//! client after the first attempt was answered, so the dedup window sees them in order however
//! many entries are in flight.
//!
//! A *stored* request (a producer's `application/vnd.herald.batch`) carries a batch already in
//! the stored layout instead of records: it is proposed alone, as its own entry, byte for byte,
//! since merging it with others would mean decoding and encoding it again.
//!
//! **Bounds.** A leader that cannot reach a quorum never finishes its appends, so without a
//! bound its queue would take every request's records. The appender counts the encoded bytes it
//! holds, queued and in flight, and refuses a request that would take it past
//! `max_queued_bytes` at once with `overloaded` (nothing written, `Retry-After`); a request is
//! only let past the bound when the appender holds nothing, so one larger than the bound is
//! still written. Every request has a deadline: one still queued when it passes is taken out
//! and answered "not written" (`unavailable`), so it is never written later, and one whose
//! caller went away (the produce was dropped) is taken out at once. Only a request already
//! proposed when its deadline passes has an unknown outcome (`timeout`).

use herald_domain::RaftGroupId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use super::appender_writes::{propose_each, propose_merged, propose_stored, PartitionLog};
use super::idempotence::{Landing, OnceClaim};
use super::MAX_MESSAGES_PER_REQUEST;
use crate::BrokerError;
use herald_domain::batch::ProducerStamp;
use herald_domain::{Compression, Record};
use herald_telemetry::handles::OnceHandle;
use herald_telemetry::otlp::exporting;

/// The most encoded record bytes merged into one raft entry; a single larger request still
/// goes alone.
pub(super) const MAX_MERGED_BYTES: usize = 8 << 20;

/// While entries are in flight, a new one is proposed only once this many bytes wait (or an
/// `acks=leader` request does); smaller runs wait for an entry to be answered and go out
/// merged. Many small requests (single-message POSTs) then cost one entry per round trip, as
/// without pipelining, instead of several small entries each paying raft's and RocksDB's
/// per-entry cost: measured on one node with 64 connections of single messages, 4 entries of
/// a few requests each served 15% fewer requests than one merged entry. Batched producers fill
/// this at once and keep the pipeline.
pub(super) const PIPELINE_MIN_BYTES: usize = 64 << 10;

/// Where a request's records landed (for an ordinary request always
/// [`Landing::Appended`] with their base offset), or why they were not written.
pub(crate) type AppendOutcome = Result<Landing, BrokerError>;

/// One appender per partition group on this node.
pub(crate) struct Appenders {
    by_group: Mutex<HashMap<RaftGroupId, Arc<PartitionAppender>>>,
    max_queued_bytes: usize,
    max_in_flight: usize,
    pipeline_min_bytes: usize,
}

impl Appenders {
    /// Appenders that each hold at most `max_queued_bytes` of records and have at most
    /// `max_in_flight` raft entries proposed and not yet answered (at least one).
    pub(crate) fn new(max_queued_bytes: usize, max_in_flight: usize) -> Appenders {
        Appenders {
            by_group: Mutex::new(HashMap::new()),
            max_queued_bytes,
            max_in_flight: max_in_flight.max(1),
            pipeline_min_bytes: PIPELINE_MIN_BYTES,
        }
    }

    /// The same, pipelining runs of any size (the unit tests' small requests).
    #[cfg(test)]
    pub(crate) fn pipelining_everything(mut self) -> Appenders {
        self.pipeline_min_bytes = 0;
        self
    }

    pub(crate) fn for_group(&self, group: RaftGroupId) -> Arc<PartitionAppender> {
        self.by_group
            .lock()
            .entry(group)
            .or_insert_with(|| {
                Arc::new(PartitionAppender::new(
                    group,
                    self.max_queued_bytes,
                    self.max_in_flight,
                    self.pipeline_min_bytes,
                ))
            })
            .clone()
    }

    pub(crate) fn forget(&self, groups: &[RaftGroupId]) {
        let mut by_group = self.by_group.lock();
        groups.iter().for_each(|group| {
            by_group.remove(group);
        });
    }
}

/// One request's records for a partition, and how to write them.
pub(crate) struct AppendRequest {
    pub records: Vec<Record>,
    /// A batch already in the stored layout (then `records` is empty): goes alone, as is.
    pub stored: Option<Bytes>,
    pub compression: Compression,
    /// `acks=leader`: answer once the leader has the batch durable, before a quorum has it.
    pub leader_ack: bool,
    /// An idempotent request: its claim and its batch's producer stamp. Goes alone.
    pub once: Option<(OnceClaim, ProducerStamp)>,
    /// Past it, the request is answered: "not written" while still queued, "outcome unknown"
    /// once proposed.
    pub deadline: Instant,
}

pub(crate) struct PartitionAppender {
    group: RaftGroupId,
    max_queued_bytes: usize,
    queue: Mutex<Queue>,
    /// One permit per raft entry that may be in flight.
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    /// See [`PIPELINE_MIN_BYTES`].
    pipeline_min_bytes: usize,
    /// Wakes a drain whose small run waits: an entry in flight was answered, or a request
    /// arrived that should not wait (large, or `acks=leader`).
    wake: Notify,
}

#[derive(Default)]
struct Queue {
    /// Waiting requests by arrival number: the first is the oldest.
    pending: BTreeMap<u64, Pending>,
    next_id: u64,
    /// Encoded bytes of the waiting requests and of those in flight.
    held_bytes: usize,
    draining: bool,
}

/// A request waiting its turn.
pub(super) struct Pending {
    pub records: Vec<Record>,
    pub stored: Option<Bytes>,
    /// The records' encoded size.
    pub bytes: usize,
    pub compression: Compression,
    pub leader_ack: bool,
    pub once: Option<(OnceClaim, ProducerStamp)>,
    deadline: Instant,
    pub done: oneshot::Sender<AppendOutcome>,
    /// The span of the request that sent it: the raft proposal's span is its child (or
    /// follows from it when the proposal carries several requests).
    span: tracing::Span,
}

impl Pending {
    /// No longer worth writing: its deadline passed, or nobody waits for its answer.
    fn abandoned(&self, now: Instant) -> bool {
        self.deadline <= now || self.done.is_closed()
    }
}

impl PartitionAppender {
    fn new(
        group: RaftGroupId,
        max_queued_bytes: usize,
        max_in_flight: usize,
        pipeline_min_bytes: usize,
    ) -> PartitionAppender {
        PartitionAppender {
            group,
            max_queued_bytes,
            queue: Mutex::new(Queue::default()),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            pipeline_min_bytes,
            wake: Notify::new(),
        }
    }

    /// Appends one request's records to `log` (this node's replica, which leads the partition):
    /// answers where they landed, once a quorum has them, or with `leader_ack` once the leader
    /// has them durable; `overloaded` at once when the appender holds too much; "not written"
    /// when the deadline passes before they were proposed, "outcome unknown" when it passes
    /// after.
    pub(crate) async fn append<L: PartitionLog>(
        self: &Arc<Self>,
        log: Arc<L>,
        request: AppendRequest,
    ) -> AppendOutcome {
        let deadline = request.deadline;
        let (mut queued, mut outcome) = self.submit(log, request)?;
        tokio::select! {
            answered = &mut outcome => {
                queued.answered();
                answered.unwrap_or_else(|_| {
                    Err(BrokerError::Internal("the partition appender stopped".into()))
                })
            }
            () = tokio::time::sleep_until(deadline) => {
                if queued.withdraw() {
                    return Err(self.not_written());
                }
                // Taken already: answered "not written" by the drain a moment ago, or proposed.
                outcome.try_recv().unwrap_or_else(|_| {
                    Err(BrokerError::Timeout(format!(
                        "partition group {}: the messages were proposed but not acknowledged before the produce deadline; they may still be written",
                        self.group
                    )))
                })
            }
        }
    }

    /// Queues a request, or refuses it when it does not fit; starts draining if nothing does.
    fn submit<L: PartitionLog>(
        self: &Arc<Self>,
        log: Arc<L>,
        request: AppendRequest,
    ) -> Result<(Queued, oneshot::Receiver<AppendOutcome>), BrokerError> {
        let bytes = match &request.stored {
            Some(batch) => batch.len(),
            None => request.records.iter().map(Record::encoded_len).sum(),
        };
        let urgent = request.leader_ack || bytes >= self.pipeline_min_bytes;
        let (done, outcome) = oneshot::channel();
        let (id, start_draining) = {
            let mut queue = self.queue.lock();
            if queue.held_bytes > 0 && queue.held_bytes + bytes > self.max_queued_bytes {
                metrics::counter!("herald_produce_overloaded_total").increment(1);
                return Err(BrokerError::Overloaded(format!(
                    "partition group {} holds {} bytes of messages not yet written, and these {bytes} would take it past its bound of {} (max_queued_bytes_per_partition); nothing was written, retry later",
                    self.group, queue.held_bytes, self.max_queued_bytes
                )));
            }
            let id = queue.next_id;
            queue.next_id += 1;
            queue.held_bytes += bytes;
            queued_bytes_gauge().increment(bytes as f64);
            queue.pending.insert(
                id,
                Pending {
                    records: request.records,
                    stored: request.stored,
                    bytes,
                    compression: request.compression,
                    leader_ack: request.leader_ack,
                    once: request.once,
                    deadline: request.deadline,
                    done,
                    span: tracing::Span::current(),
                },
            );
            (id, !std::mem::replace(&mut queue.draining, true))
        };
        if start_draining {
            tokio::spawn(self.clone().drain(log));
        } else if urgent {
            // A drain may be holding small requests back until an answer: this one should
            // not wait for it.
            self.wake.notify_one();
        }
        let queued = Queued {
            appender: self.clone(),
            id,
            settled: false,
        };
        Ok((queued, outcome))
    }

    /// Takes request `id` out of the queue if it is still there; whether it was.
    fn withdraw(&self, id: u64) -> bool {
        let mut queue = self.queue.lock();
        match queue.pending.remove(&id) {
            Some(pending) => {
                queue.held_bytes -= pending.bytes;
                queued_bytes_gauge().decrement(pending.bytes as f64);
                true
            }
            None => false,
        }
    }

    fn not_written(&self) -> BrokerError {
        BrokerError::Unavailable(format!(
            "partition group {}: the messages were still waiting behind earlier writes when the produce deadline passed (is the partition's quorum lost?); they were not written and never will be, so a retry is safe",
            self.group
        ))
    }

    /// The encoded bytes this appender holds now, waiting or being proposed.
    #[cfg(test)]
    pub(super) fn held_bytes(&self) -> usize {
        self.queue.lock().held_bytes
    }

    /// How many requests wait now.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.queue.lock().pending.len()
    }

    /// Proposes queued requests, batch after batch, until the queue is empty: each batch as
    /// soon as an in-flight slot is free; a spawned task answers its requests and frees the
    /// slot once raft has the outcome.
    async fn drain<L: PartitionLog>(self: Arc<Self>, log: Arc<L>) {
        loop {
            let Ok(slot) = self.in_flight.clone().acquire_owned().await else {
                return;
            };
            // Registered before the queue is looked at, so an answer that lands in between
            // is not missed (a notification with nobody waiting is kept for the next wait).
            let woken = self.wake.notified();
            let run = {
                let mut queue = self.queue.lock();
                if queue.pending.is_empty() {
                    queue.draining = false;
                    return;
                }
                if self.waits_for_an_answer(&queue) {
                    None
                } else {
                    Some(self.take_run(&mut queue))
                }
            };
            let Some((taken, bytes)) = run else {
                drop(slot);
                woken.await;
                continue;
            };
            let Some(first) = taken.first() else {
                continue;
            };
            let span = self.proposal_span(&taken, bytes);
            let answering = if first.stored.is_some() {
                propose_stored(&*log, taken).instrument(span.clone()).await
            } else if first.once.is_some() {
                propose_each(&*log, taken).instrument(span.clone()).await
            } else {
                propose_merged(&*log, taken).instrument(span.clone()).await
            };
            let appender = self.clone();
            tokio::spawn(
                async move {
                    answering.await;
                    appender.queue.lock().held_bytes -= bytes;
                    queued_bytes_gauge().decrement(bytes as f64);
                    drop(slot);
                    appender.wake.notify_one();
                }
                .instrument(span),
            );
        }
    }

    /// Whether the waiting requests should wait for an entry in flight to be answered rather
    /// than go out now as an entry of their own: other entries are in flight, and what waits
    /// is small and has no `acks=leader` request (which must not wait behind a quorum).
    fn waits_for_an_answer(&self, queue: &Queue) -> bool {
        // Ours is taken: any other permit missing is an entry in flight.
        let others_in_flight = self.max_in_flight - 1 - self.in_flight.available_permits();
        if others_in_flight == 0 || self.pipeline_min_bytes == 0 {
            return false;
        }
        let mut waiting_bytes = 0;
        for pending in queue.pending.values() {
            if pending.leader_ack {
                return false;
            }
            waiting_bytes += pending.bytes;
            if waiting_bytes >= self.pipeline_min_bytes {
                return false;
            }
        }
        true
    }

    /// The span of one proposal, from the moment it is proposed until raft has its outcome:
    /// the first request's child, following from the others it carries, so each request's
    /// trace shows the raft round trip its messages waited for.
    /// None when spans are not exported: nothing logs inside a proposal, and an enabled span
    /// per entry would cost the log layer its fields' formatting for nothing.
    fn proposal_span(&self, taken: &[Pending], bytes: usize) -> tracing::Span {
        if !exporting() {
            return tracing::Span::none();
        }
        let records: usize = taken.iter().map(|pending| pending.records.len()).sum();
        let span = tracing::info_span!(
            parent: taken.first().and_then(|pending| pending.span.id()),
            "raft.propose",
            otel.name = "raft propose",
            partition_group = self.group.get(),
            requests = taken.len(),
            records,
            bytes,
        );
        for pending in taken.iter().skip(1) {
            span.follows_from(&pending.span);
        }
        span
    }

    /// How many entries are in flight now.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.max_in_flight - self.in_flight.available_permits()
    }

    /// Takes the next run of requests of one kind from the queue, within the merge caps:
    /// ordinary ones are merged into one entry, idempotent ones each get their own. Abandoned
    /// requests met on the way are answered "not written" and dropped. Answers the run and
    /// its encoded bytes (still counted as held until written).
    fn take_run(&self, queue: &mut Queue) -> (Vec<Pending>, usize) {
        let now = Instant::now();
        let mut taken: Vec<Pending> = Vec::new();
        let (mut bytes, mut records) = (0usize, 0usize);
        while let Some(entry) = queue.pending.first_entry() {
            let pending = entry.get();
            if pending.abandoned(now) {
                let pending = entry.remove();
                queue.held_bytes -= pending.bytes;
                queued_bytes_gauge().decrement(pending.bytes as f64);
                // Under the lock, so a waiter that finds its request gone finds this answer.
                let _ = pending.done.send(Err(self.not_written()));
                continue;
            }
            if let Some(first) = taken.first() {
                // A stored batch goes alone: nothing merges with it.
                let same_kind = first.once.is_some() == pending.once.is_some()
                    && first.stored.is_none()
                    && pending.stored.is_none();
                let fits = bytes + pending.bytes <= MAX_MERGED_BYTES
                    && records + pending.records.len() <= MAX_MESSAGES_PER_REQUEST;
                if !same_kind || !fits {
                    break;
                }
            }
            let pending = entry.remove();
            bytes += pending.bytes;
            records += pending.records.len();
            taken.push(pending);
        }
        (taken, bytes)
    }
}

/// The encoded bytes every appender of the node holds, queued or being proposed.
fn queued_bytes_gauge() -> metrics::Gauge {
    static GAUGE: OnceHandle<metrics::Gauge> = OnceHandle::new();
    GAUGE.get(|| metrics::gauge!("herald_produce_queued_bytes"))
}

/// A request in an appender's queue, as its waiter holds it: dropping it (the produce was
/// cancelled: the client went away, or a deadline above fired) takes the request out of the
/// queue if it is still there, so it is not written and holds no bytes.
struct Queued {
    appender: Arc<PartitionAppender>,
    id: u64,
    /// Answered or withdrawn already: nothing left to take out.
    settled: bool,
}

impl Queued {
    /// Takes the request out if it is still queued; whether it was.
    fn withdraw(&mut self) -> bool {
        self.settled = true;
        self.appender.withdraw(self.id)
    }

    fn answered(&mut self) {
        self.settled = true;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.settled {
            self.appender.withdraw(self.id);
        }
    }
}
