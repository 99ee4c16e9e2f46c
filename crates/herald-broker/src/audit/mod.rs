//! The audit log: who did what, to which resource, from where, allowed or not.
//!
//! Events go to the replicated internal topic `__audit` (one partition, so they are read back
//! in the order they were written; created by the first event). Recording never waits: the
//! transport calls [`AuditLog::record`], which puts the event in a bounded queue and returns;
//! a background task ([`writer`]) batches the queue into produces with `acks=all`. When the
//! queue is full (the topic cannot be written, or events come faster than it takes them) an
//! event is dropped and counted in `herald_audit_dropped_total`, never delaying the request
//! it describes. [`reader`] answers `GET /v1/audit`.
//!
//! What anyone can make a node record is bounded: every event's texts are cut
//! ([`AuditEvent::bounded`]), and refusals of unauthenticated requests are counted per address
//! and window ([`refusals`]) instead of recorded one by one.

pub mod event;
mod reader;
mod refusals;
mod writer;

use std::sync::Arc;
use std::time::Duration;

pub use event::AuditEvent;
pub use reader::{AuditPage, AuditQuery, AuditService, MAX_AUDIT_LIMIT};

use tokio::sync::mpsc;

use super::Broker;

/// The internal topic audit events are kept in.
pub const AUDIT_TOPIC: &str = "__audit";

/// Counter of events put in the queue, labelled `allowed` (`true`/`false`).
pub const AUDIT_EVENTS_TOTAL: &str = "herald_audit_events_total";
/// Counter of events lost, labelled `reason`: `queue_full` (recording did not wait),
/// `write_failed` (the topic could not be written after retries), `stopped` (shutting down).
pub const AUDIT_DROPPED_TOTAL: &str = "herald_audit_dropped_total";
/// Counter of events written to `__audit`.
pub const AUDIT_WRITTEN_TOTAL: &str = "herald_audit_written_total";
/// Counter of refusals of unauthenticated requests counted in a window's event instead of
/// recorded one by one.
pub const AUDIT_REFUSALS_COUNTED_TOTAL: &str = "herald_audit_refusals_counted_total";

/// How the audit log keeps its events (`[audit]` in the configuration).
#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// The topic's `retention_ms` (-1: forever).
    pub retention_ms: i64,
    /// The topic's `retention_bytes` (-1: unlimited).
    pub retention_bytes: i64,
    /// Replicas of the topic when it is created, capped at the nodes there are then.
    pub replication_factor: u16,
    /// The most events waiting to be written.
    pub queue_capacity: usize,
    /// The most events in one produce.
    pub max_batch: usize,
    /// Refusals of unauthenticated requests from one address within this long are recorded
    /// as the first one and one event counting the others.
    pub refusal_window: Duration,
}

/// Where events are recorded. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    queue: mpsc::Sender<AuditEvent>,
    node_id: u64,
    refusals: Arc<refusals::RefusalWindows>,
}

impl AuditLog {
    /// Starts the writer on the current runtime, and the task that records the windows of
    /// refusals as they end. Both stop when every clone of the log is gone.
    pub fn start(broker: Broker, settings: AuditSettings) -> AuditLog {
        let (queue, events) = mpsc::channel(settings.queue_capacity.max(1));
        let node_id = broker.core().cluster().node_id();
        let refusals = Arc::new(refusals::RefusalWindows::new(settings.refusal_window));
        tokio::spawn(writer::run(broker, settings, events));
        tokio::spawn(close_windows(queue.downgrade(), node_id, refusals.clone()));
        AuditLog {
            queue,
            node_id,
            refusals,
        }
    }

    /// Queues an event to be written (its texts cut to their bounds, stamped with this node's
    /// id); never waits. A full queue drops the event (counted). A refusal of an
    /// unauthenticated request after the first from its address in a window is only counted.
    pub fn record(&self, event: AuditEvent) {
        let event = event.bounded();
        let event = if event.is_unauthenticated_refusal() {
            match self.refusals.admit(event, tokio::time::Instant::now()) {
                Some(first) => first,
                None => {
                    metrics::counter!(AUDIT_REFUSALS_COUNTED_TOTAL).increment(1);
                    return;
                }
            }
        } else {
            event
        };
        enqueue(&self.queue, self.node_id, event);
    }
}

/// Records the windows of refusals as they end, until the log is gone.
async fn close_windows(
    queue: mpsc::WeakSender<AuditEvent>,
    node_id: u64,
    refusals: Arc<refusals::RefusalWindows>,
) {
    let mut ticks = tokio::time::interval(refusals.check_period());
    loop {
        ticks.tick().await;
        let Some(queue) = queue.upgrade() else {
            return;
        };
        for event in refusals.ended(tokio::time::Instant::now(), now_ms()) {
            enqueue(&queue, node_id, event);
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// Puts an event in the queue, or counts it dropped.
fn enqueue(queue: &mpsc::Sender<AuditEvent>, node_id: u64, mut event: AuditEvent) {
    event.node_id = node_id;
    let allowed = if event.allowed { "true" } else { "false" };
    match queue.try_send(event) {
        Ok(()) => metrics::counter!(AUDIT_EVENTS_TOTAL, "allowed" => allowed).increment(1),
        Err(mpsc::error::TrySendError::Full(event)) => {
            metrics::counter!(AUDIT_DROPPED_TOTAL, "reason" => "queue_full").increment(1);
            tracing::debug!(action = %event.action, "audit queue full: event dropped");
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            metrics::counter!(AUDIT_DROPPED_TOTAL, "reason" => "stopped").increment(1);
        }
    }
}
