//! The bounded queue of frames to one socket.
//!
//! Subscriptions and answers are produced faster than a slow client reads; the writer task
//! drains this queue into the socket at the client's pace. The bytes queued and not yet
//! written are counted, and `max_outbound_bytes` bounds them by backpressure, not by cutting
//! the client off: a subscription's reader waits for room ([`Outbox::room`]) before it reads
//! or leases the next messages, and resumes as the client drains the queue. A client that
//! reads slowly is served at its pace whatever credit it granted; the queue holds at most the
//! limit plus one frame per subscription. Answers to the client's own frames (`ok`, `acked`,
//! errors) do not wait: past twice the limit (a client that keeps sending and never reads) a
//! frame is refused and the socket closed with 1008. A client that reads nothing at all while
//! frames wait is closed after `client_stall_timeout_ms` ([`Outbox::stalled`]).
//!
//! Every frame queued is charged to the client's consume bytes per second; while the client is
//! in debt, the subscriptions' readers pause ([`Outbox::quota_pause`]) before their next
//! delivery, so a client over its quota is served slower rather than cut off (and its queue
//! does not grow while it waits).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::Message;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::frames::ServerFrame;
use super::{BACKPRESSURE_WAITS_TOTAL, FRAMES_TOTAL, OUTBOUND_OVERFLOWS_TOTAL};
use crate::broker::quota::{QuotaKey, QuotaKind, Quotas};

/// The sending side; cheap to clone into each subscription's readers.
#[derive(Clone)]
pub struct Outbox {
    sender: mpsc::UnboundedSender<Message>,
    shared: Arc<Shared>,
    /// Whom the frames are charged to, when quotas are on.
    quota: Option<Arc<(Quotas, QuotaKey)>>,
}

struct Shared {
    queued_bytes: AtomicUsize,
    limit: usize,
    overflowed: AtomicBool,
    /// Woken once when the hard limit is crossed, for the connection to close the socket.
    overflow: Notify,
    /// Woken when a write takes the queue below the limit: readers waiting for room go on.
    drained: Notify,
    /// When the client last made progress (ms since `started`): a frame written to it, or the
    /// queue becoming non-empty. A stall is measured from there.
    progress_ms: AtomicU64,
    started: Instant,
}

impl Shared {
    fn mark_progress(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.progress_ms.store(now, Ordering::Release);
    }
}

/// The frame was not queued: the client is not reading, or the socket is gone.
#[derive(Debug)]
pub struct Refused;

/// The receiving side, for the writer task.
pub struct OutboxReceiver {
    receiver: mpsc::UnboundedReceiver<Message>,
    shared: Arc<Shared>,
}

pub fn outbox(limit: usize) -> (Outbox, OutboxReceiver) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        queued_bytes: AtomicUsize::new(0),
        limit,
        overflowed: AtomicBool::new(false),
        overflow: Notify::new(),
        drained: Notify::new(),
        progress_ms: AtomicU64::new(0),
        started: Instant::now(),
    });
    (
        Outbox {
            sender,
            shared: shared.clone(),
            quota: None,
        },
        OutboxReceiver { receiver, shared },
    )
}

impl Outbox {
    /// Charges what is queued from now on to `key`'s consume bytes.
    pub fn charged_to(mut self, quotas: Quotas, key: QuotaKey) -> Outbox {
        if quotas.enabled() {
            self.quota = Some(Arc::new((quotas, key)));
        }
        self
    }

    /// Waits while the client is over its consume quota: readers call it before each delivery.
    pub async fn quota_pause(&self) {
        let Some(quota) = &self.quota else {
            return;
        };
        let (quotas, key) = quota.as_ref();
        // Bounded: each wait pays the debt off as it stands; frames queued meanwhile (answers)
        // may add a little, so a few rounds at most.
        for _ in 0..16 {
            let debt = quotas.debt(key, QuotaKind::ConsumeBytes);
            if debt.is_zero() {
                return;
            }
            quotas.count_delay();
            tokio::time::sleep(debt).await;
        }
    }

    /// Queues an answer to the client's own frame, or refuses it (and flags the overflow)
    /// past twice the byte limit: the client keeps sending and does not read.
    pub fn send(&self, frame: &ServerFrame) -> Result<(), Refused> {
        let text = encode(frame)?;
        self.queue(
            frame.op(),
            Message::Text(text.into()),
            Some(self.hard_limit()),
        )
    }

    /// Queues a subscription's delivery, which waited for [`Outbox::room`] first: never
    /// refused for the limit (it was below it), only when the socket is gone or cut off.
    pub fn deliver(&self, frame: &ServerFrame) -> Result<(), Refused> {
        let text = encode(frame)?;
        self.queue(frame.op(), Message::Text(text.into()), None)
    }

    /// Queues a binary delivery (`binary.rs`), as [`Outbox::deliver`].
    pub fn deliver_binary(&self, op: &'static str, frame: bytes::Bytes) -> Result<(), Refused> {
        self.queue(op, Message::Binary(frame), None)
    }

    /// Waits until the queue is below the byte limit (or the socket is cut off, when a send
    /// then refuses): a subscription's reader calls it before it reads the next messages, so
    /// a slow client slows its subscriptions down instead of being dropped.
    pub async fn room(&self) {
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.shared.queued_bytes.load(Ordering::Acquire) < self.shared.limit
                || self.shared.overflowed.load(Ordering::Acquire)
                || self.sender.is_closed()
            {
                return;
            }
            metrics::counter!(BACKPRESSURE_WAITS_TOTAL).increment(1);
            drained.await;
        }
    }

    /// Resolves once frames have waited for the client for `timeout` without it reading any
    /// (measured from the last frame written, or from when the queue stopped being empty).
    pub async fn stalled(&self, timeout: Duration) {
        loop {
            let progress = Duration::from_millis(self.shared.progress_ms.load(Ordering::Acquire));
            let waiting = self.shared.queued_bytes.load(Ordering::Acquire) > 0;
            let due = self.shared.started + progress + timeout;
            if waiting && Instant::now() >= due {
                return;
            }
            // Re-checked at the deadline the state gives (or soon, while nothing waits): the
            // answer does not depend on when this future was created.
            let recheck = if waiting {
                due
            } else {
                Instant::now() + timeout.min(Duration::from_secs(1))
            };
            tokio::time::sleep_until(recheck).await;
        }
    }

    fn hard_limit(&self) -> usize {
        self.shared.limit.saturating_mul(2)
    }

    fn queue(&self, op: &'static str, message: Message, cap: Option<usize>) -> Result<(), Refused> {
        let size = frame_size(&message);
        let before = self.shared.queued_bytes.fetch_add(size, Ordering::AcqRel);
        // A frame into an empty queue always goes, so one frame larger than the limit (a big
        // read) does not cut off a client that reads.
        let over = cap.is_some_and(|cap| before > 0 && before + size > cap);
        if over || self.shared.overflowed.load(Ordering::Acquire) {
            self.shared.queued_bytes.fetch_sub(size, Ordering::AcqRel);
            if over && !self.shared.overflowed.swap(true, Ordering::AcqRel) {
                metrics::counter!(OUTBOUND_OVERFLOWS_TOTAL).increment(1);
                self.shared.overflow.notify_one();
                self.shared.drained.notify_waiters();
            }
            return Err(Refused);
        }
        if before == 0 {
            // The clock of a stall starts when something waits for the client.
            self.shared.mark_progress();
        }
        metrics::counter!(FRAMES_TOTAL, "direction" => "out", "op" => op).increment(1);
        if let Some(quota) = &self.quota {
            let (quotas, key) = quota.as_ref();
            quotas.charge(key, QuotaKind::ConsumeBytes, size as u64);
        }
        self.sender.send(message).map_err(|_| Refused)
    }

    /// Queues a control frame (ping, close): small, and never refused for the limit.
    pub fn send_control(&self, message: Message) {
        let _ = self.sender.send(message);
    }

    /// Resolves once an answer was refused for the hard limit (twice the byte limit).
    pub async fn overflowed(&self) {
        if self.shared.overflowed.load(Ordering::Acquire) {
            return;
        }
        self.shared.overflow.notified().await;
    }
}

impl OutboxReceiver {
    pub async fn next(&mut self) -> Option<Message> {
        self.receiver.recv().await
    }

    /// The frame left the queue for the socket: the client reads.
    pub fn written(&self, message: &Message) {
        let size = frame_size(message);
        let before = self.shared.queued_bytes.fetch_sub(size, Ordering::AcqRel);
        self.shared.mark_progress();
        if before.saturating_sub(size) < self.shared.limit {
            self.shared.drained.notify_waiters();
        }
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        // The socket is gone: readers waiting for room find the sender closed.
        self.shared.drained.notify_waiters();
    }
}

fn encode(frame: &ServerFrame) -> Result<String, Refused> {
    serde_json::to_string(frame).map_err(|error| {
        tracing::error!(%error, "encoding a WebSocket frame failed");
        Refused
    })
}

/// The bytes a frame counts for under the limit; control frames count for nothing.
fn frame_size(message: &Message) -> usize {
    match message {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) => bytes.len(),
        _ => 0,
    }
}
