//! The requests waiting on this node for their reply: one oneshot channel per correlation id,
//! registered before the request is published (a responder may answer before the publish
//! returns) and removed when the request ends however it ends (reply, timeout, client gone),
//! so the table holds exactly the requests still waiting, up to a configured bound.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::ids::CorrelationId;
use crate::{BrokerError, BrokerResult};
use herald_domain::{Record, RecordValue};

/// Gauge of the requests waiting for a reply on this node.
pub const WAITING_REQUESTS: &str = "herald_requests_waiting";

/// A responder's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub value: RecordValue,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// The reply's size measured as a stored message (value, headers and their framing), the
    /// measure a topic's `max_message_bytes` limits.
    pub fn stored_size(&self) -> usize {
        herald_domain::batch::encoded_record_len(
            &Record {
                offset_delta: 0,
                timestamp: 0,
                key: None,
                value: self.value.clone(),
                headers: self.headers.clone(),
            },
            0,
            0,
        )
    }
}

/// What became of a reply handed to the node its request waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Delivery {
    /// The waiting request has it.
    Delivered,
    /// No request waits under that id (never did, timed out, or answered already).
    NoWaiter,
    /// Over the request's topic's `max_message_bytes`; the request still waits.
    TooLarge { size: u64, max: u32 },
}

struct Waiter {
    /// The request topic's `max_message_bytes`: a reply is held to the limits of the message
    /// it answers.
    max_reply_bytes: u32,
    sender: oneshot::Sender<Reply>,
}

type Table = Arc<Mutex<HashMap<CorrelationId, Waiter>>>;

/// The waiting requests of this node.
pub struct Waiters {
    table: Table,
    max_waiting: usize,
}

/// One registered request. Dropping it (reply taken, timed out, or the client went away)
/// removes its entry at once.
pub struct Waiting {
    table: Table,
    id: CorrelationId,
    receiver: oneshot::Receiver<Reply>,
}

impl Waiters {
    pub fn new(max_waiting: usize) -> Waiters {
        Waiters {
            table: Arc::new(Mutex::new(HashMap::new())),
            max_waiting,
        }
    }

    /// Registers a request under a fresh id; past `max_waiting` requests, 503 `overloaded`.
    pub fn register(&self, id: CorrelationId, max_reply_bytes: u32) -> BrokerResult<Waiting> {
        let (sender, receiver) = oneshot::channel();
        let mut table = self.table.lock();
        if table.len() >= self.max_waiting {
            return Err(BrokerError::Overloaded(format!(
                "this node has {} requests waiting for a reply, its limit (requests.max_waiting)",
                table.len()
            )));
        }
        if table.contains_key(&id) {
            return Err(BrokerError::Internal(format!(
                "correlation id {id} drawn twice"
            )));
        }
        table.insert(
            id,
            Waiter {
                max_reply_bytes,
                sender,
            },
        );
        metrics::gauge!(WAITING_REQUESTS).set(table.len() as f64);
        drop(table);
        Ok(Waiting {
            table: self.table.clone(),
            id,
            receiver,
        })
    }

    /// Hands `reply` to the request waiting under `id`. The first reply takes the entry, so
    /// any later one finds nobody waiting.
    pub fn deliver(&self, id: CorrelationId, reply: Reply) -> Delivery {
        let size = reply.stored_size();
        let mut table = self.table.lock();
        let Some(waiter) = table.get(&id) else {
            return Delivery::NoWaiter;
        };
        if size > waiter.max_reply_bytes as usize {
            return Delivery::TooLarge {
                size: size as u64,
                max: waiter.max_reply_bytes,
            };
        }
        let waiter = table.remove(&id).expect("looked up under the same lock");
        metrics::gauge!(WAITING_REQUESTS).set(table.len() as f64);
        drop(table);
        // Fails only when the request ended a moment ago and its entry was not yet removed.
        match waiter.sender.send(reply) {
            Ok(()) => Delivery::Delivered,
            Err(_) => Delivery::NoWaiter,
        }
    }

    /// How many requests wait now.
    pub fn len(&self) -> usize {
        self.table.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Waiting {
    /// The reply, once one is delivered. Cancel-safe: dropping the future (a timeout) leaves
    /// the registration as it was, and dropping the registration removes the entry.
    pub async fn reply(&mut self) -> Option<Reply> {
        (&mut self.receiver).await.ok()
    }

    /// Ends the wait: from now on a reply finds nobody (its responder is told 404), and one
    /// delivered just before (while the deadline passed) is taken rather than lost after its
    /// responder was told it was delivered.
    pub fn close(&mut self) -> Option<Reply> {
        self.receiver.close();
        self.receiver.try_recv().ok()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        // Already gone when a reply took it.
        if table.remove(&self.id).is_some() {
            metrics::gauge!(WAITING_REQUESTS).set(table.len() as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;

    fn reply(text: &'static str) -> Reply {
        Reply {
            value: RecordValue::Json(Bytes::from_static(text.as_bytes())),
            headers: vec![("h".into(), "v".into())],
        }
    }

    #[tokio::test]
    async fn the_first_reply_wins_and_a_second_finds_nobody() {
        let waiters = Waiters::new(10);
        let id = CorrelationId(7);
        let mut waiting = waiters.register(id, 1024).unwrap();
        assert_eq!(waiters.deliver(id, reply("1")), Delivery::Delivered);
        assert_eq!(waiters.deliver(id, reply("2")), Delivery::NoWaiter);
        assert_eq!(waiting.reply().await, Some(reply("1")));
        assert!(waiters.is_empty());
    }

    #[tokio::test]
    async fn a_timed_out_request_frees_its_entry_at_once_and_a_late_reply_finds_nobody() {
        let waiters = Waiters::new(10);
        let id = CorrelationId(8);
        let mut waiting = waiters.register(id, 1024).unwrap();
        assert_eq!(waiters.len(), 1);
        let waited = tokio::time::timeout(Duration::from_millis(10), waiting.reply()).await;
        assert!(waited.is_err(), "no reply was sent");
        drop(waiting);
        assert!(waiters.is_empty());
        assert_eq!(waiters.deliver(id, reply("late")), Delivery::NoWaiter);
    }

    #[test]
    fn a_reply_delivered_as_the_deadline_passes_is_taken_not_lost() {
        let waiters = Waiters::new(10);
        let id = CorrelationId(10);
        let mut waiting = waiters.register(id, 1024).unwrap();
        assert_eq!(
            waiters.deliver(id, reply("just in time")),
            Delivery::Delivered
        );
        assert_eq!(waiting.close(), Some(reply("just in time")));

        let id = CorrelationId(11);
        let mut waiting = waiters.register(id, 1024).unwrap();
        assert_eq!(waiting.close(), None);
        assert_eq!(waiters.deliver(id, reply("late")), Delivery::NoWaiter);
    }

    #[tokio::test]
    async fn unknown_ids_find_nobody() {
        let waiters = Waiters::new(10);
        let _waiting = waiters.register(CorrelationId(1), 1024).unwrap();
        assert_eq!(
            waiters.deliver(CorrelationId(2), reply("x")),
            Delivery::NoWaiter
        );
        assert_eq!(waiters.len(), 1);
    }

    #[test]
    fn past_the_bound_a_request_is_refused_until_one_ends() {
        let waiters = Waiters::new(2);
        let first = waiters.register(CorrelationId(1), 1024).unwrap();
        let _second = waiters.register(CorrelationId(2), 1024).unwrap();
        let refused = waiters
            .register(CorrelationId(3), 1024)
            .err()
            .expect("full");
        assert_eq!(refused.code(), crate::ErrorCode::Overloaded);
        drop(first);
        assert!(waiters.register(CorrelationId(3), 1024).is_ok());
    }

    #[tokio::test]
    async fn a_reply_over_the_limit_is_refused_and_the_request_still_waits() {
        let waiters = Waiters::new(10);
        let id = CorrelationId(9);
        let mut waiting = waiters.register(id, 16).unwrap();
        let big = Reply {
            value: RecordValue::Bytes(Bytes::from(vec![0u8; 64])),
            headers: Vec::new(),
        };
        assert!(matches!(
            waiters.deliver(id, big),
            Delivery::TooLarge { max: 16, .. }
        ));
        assert_eq!(waiters.deliver(id, reply("1")), Delivery::Delivered);
        assert_eq!(waiting.reply().await, Some(reply("1")));
    }
}
