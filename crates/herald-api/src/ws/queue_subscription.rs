//! A queue subscription on a socket: leases through the broker's pull (a [`LeaseStream`]),
//! at most the subscription's credit of them un-settled; `ack`, `nack` and `extend` frames go
//! through the same broker settle call as the REST API, and a settled lease gives its place
//! back. Closing the socket (or `unsubscribe`) nacks the leases still held, so their messages
//! are delivered again at once.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::frames::{QueueSubscribeFrame, ServerFrame, SettleFrame};
use super::outbox::Outbox;
use super::subscription::end_with;
use crate::api::dto::decoded::ReadDecoder;
use crate::api::dto::streams::LeaseDelivered;
use crate::api::problem::ApiError;
use crate::broker::stream::ResumingLeases;
use crate::broker::subscriptions::{LeaseStream, Settle, MAX_IN_FLIGHT};
use crate::broker::Broker;

/// A running queue subscription; dropping it stops its task and nacks what it holds.
pub struct QueueSubscription {
    leases: Arc<LeaseStream>,
    task: JoinHandle<()>,
}

impl Drop for QueueSubscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which settle a frame asks for.
#[derive(Debug, Clone, Copy)]
pub enum SettleOp {
    Ack,
    Nack,
    Extend,
}

/// Checks a `subscribe` with `subscription`: the subscription exists, the credit is a window
/// the broker allows (1 to 10000; the node's default credit, capped there, without one).
pub fn open(
    broker: &Broker,
    frame: &QueueSubscribeFrame,
    default_credit: u64,
) -> Result<LeaseStream, ApiError> {
    let credit = match frame.credit {
        Some(credit) => u32::try_from(credit).unwrap_or(u32::MAX),
        None => default_credit.min(u64::from(MAX_IN_FLIGHT)) as u32,
    };
    Ok(broker
        .subscriptions()
        .open_lease_stream(&frame.subscription, credit)?)
}

/// Starts leasing; `messages` frames go to `outbox`, decoded with a decoder.
pub fn start(
    id: String,
    leases: LeaseStream,
    decoder: Option<ReadDecoder>,
    outbox: &Outbox,
) -> QueueSubscription {
    let leases = Arc::new(leases);
    let task = tokio::spawn(deliver(
        id,
        ResumingLeases::new(leases.clone()),
        outbox.clone(),
        decoder,
    ));
    QueueSubscription { leases, task }
}

impl QueueSubscription {
    pub fn grant(&self, messages: u64) -> Result<(), ApiError> {
        let more = u32::try_from(messages).unwrap_or(u32::MAX);
        Ok(self.leases.widen(more)?)
    }

    /// Settles through the broker; answers `acked`, `nacked` or `extended` (or an error).
    pub fn settle(&self, op: SettleOp, frame: SettleFrame, outbox: &Outbox) {
        let leases = self.leases.clone();
        let outbox = outbox.clone();
        tokio::spawn(async move {
            let id = frame.id.clone();
            let answer = match settle(&leases, op, frame).await {
                Ok(answer) => answer,
                Err(error) => ServerFrame::error(Some(id.into()), &error),
            };
            let _ = outbox.send(&answer);
        });
    }
}

async fn settle(
    leases: &LeaseStream,
    op: SettleOp,
    frame: SettleFrame,
) -> Result<ServerFrame, ApiError> {
    let settle = match op {
        SettleOp::Ack => {
            if frame.delay_ms.is_some() || frame.dead_letter || frame.ack_deadline_ms.is_some() {
                return Err(ApiError::invalid_request("ack takes only id and ack_ids"));
            }
            Settle::Ack
        }
        SettleOp::Nack if frame.ack_deadline_ms.is_some() => {
            return Err(ApiError::invalid_request(
                "nack takes delay_ms or dead_letter, not ack_deadline_ms",
            ))
        }
        SettleOp::Nack if frame.dead_letter => Settle::DeadLetter {
            with_delay: frame.delay_ms.is_some(),
        },
        SettleOp::Nack => Settle::Nack {
            delay_ms: frame.delay_ms,
        },
        SettleOp::Extend => match frame.ack_deadline_ms {
            Some(ack_deadline_ms) if frame.delay_ms.is_none() && !frame.dead_letter => {
                Settle::Extend { ack_deadline_ms }
            }
            _ => {
                return Err(ApiError::invalid_request(
                    "extend takes ack_ids and ack_deadline_ms",
                ))
            }
        },
    };
    let ack_ids = frame.ack_ids.into_iter().map(|id| id.0).collect();
    let settled = leases.settle(ack_ids, settle).await?;
    let id = frame.id;
    Ok(match op {
        SettleOp::Ack => ServerFrame::Acked {
            id,
            acked: settled.done,
            expired: settled.expired,
        },
        SettleOp::Nack => ServerFrame::Nacked {
            id,
            nacked: settled.done,
            expired: settled.expired,
        },
        SettleOp::Extend => ServerFrame::Extended {
            id,
            extended: settled.done,
            expired: settled.expired,
        },
    })
}

/// Forwards what the leases hand over (they ride out leader changes themselves), with the
/// socket's outbound queue checked before each attempt.
async fn deliver(
    id: String,
    mut leases: ResumingLeases,
    outbox: Outbox,
    mut decoder: Option<ReadDecoder>,
) {
    loop {
        // Backpressure: no lease is taken while the socket's queue is full, so leases do not
        // run down their deadlines waiting to be written.
        outbox.room().await;
        outbox.quota_pause().await;
        let pulled = match leases.attempt().await {
            Ok(None) => continue,
            Ok(Some(pulled)) => pulled,
            Err(error) => return end_with(&outbox, id, error),
        };
        let frame = ServerFrame::Leases {
            id: id.clone(),
            messages: LeaseDelivered::all(pulled, decoder.as_mut()).await,
        };
        if outbox.deliver(&frame).is_err() {
            return;
        }
    }
}
