//! The bounded queue of frames to one socket.
//!
//! Subscriptions and answers are produced faster than a slow client reads; the writer task
//! drains this queue into the socket at the client's pace. The bytes queued and not yet
//! written are counted: a frame that would take them past `max_outbound_bytes` is refused and
//! the socket is closed with 1008, so a client that stops reading costs the node at most that
//! much memory (plus one frame, and one fetch in flight per partition), never an unbounded
//! buffer.
//!
//! Every frame queued is charged to the client's consume bytes per second; while the client is
//! in debt, the subscriptions' readers pause ([`Outbox::quota_pause`]) before their next
//! delivery, so a client over its quota is served slower rather than cut off (and its queue
//! does not grow while it waits).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::ws::Message;
use tokio::sync::{mpsc, Notify};

use super::frames::ServerFrame;
use super::{FRAMES_TOTAL, OUTBOUND_OVERFLOWS_TOTAL};
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
    /// Woken once when the limit is crossed, for the connection to close the socket.
    overflow: Notify,
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

    /// Queues a frame, or refuses it (and flags the overflow) past the byte limit.
    pub fn send(&self, frame: &ServerFrame) -> Result<(), Refused> {
        let text = match serde_json::to_string(frame) {
            Ok(text) => text,
            Err(error) => {
                tracing::error!(%error, "encoding a WebSocket frame failed");
                return Err(Refused);
            }
        };
        self.queue(frame.op(), Message::Text(text.into()))
    }

    /// Queues a binary frame (`binary.rs`), under the same byte limit.
    pub fn send_binary(&self, op: &'static str, frame: bytes::Bytes) -> Result<(), Refused> {
        self.queue(op, Message::Binary(frame))
    }

    fn queue(&self, op: &'static str, message: Message) -> Result<(), Refused> {
        let size = frame_size(&message);
        let before = self.shared.queued_bytes.fetch_add(size, Ordering::AcqRel);
        // A frame into an empty queue always goes, so one frame larger than the limit (a big
        // read) does not cut off a client that reads.
        let over = before > 0 && before + size > self.shared.limit;
        if over || self.shared.overflowed.load(Ordering::Acquire) {
            self.shared.queued_bytes.fetch_sub(size, Ordering::AcqRel);
            if !self.shared.overflowed.swap(true, Ordering::AcqRel) {
                metrics::counter!(OUTBOUND_OVERFLOWS_TOTAL).increment(1);
                self.shared.overflow.notify_one();
            }
            return Err(Refused);
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

    /// Resolves once a frame was refused for the byte limit.
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

    /// The frame left the queue for the socket.
    pub fn written(&self, message: &Message) {
        self.shared
            .queued_bytes
            .fetch_sub(frame_size(message), Ordering::AcqRel);
    }
}

/// The bytes a frame counts for under the limit; control frames count for nothing.
fn frame_size(message: &Message) -> usize {
    match message {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) => bytes.len(),
        _ => 0,
    }
}
