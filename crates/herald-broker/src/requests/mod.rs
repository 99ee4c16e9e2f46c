//! Request/reply on the log: a request is an ordinary message published to a topic with two
//! headers added (`herald-reply-to`, `herald-correlation-id`); the requester's HTTP call waits,
//! on the node it came to, until a responder posts the reply (to any node: a reply for another
//! node is forwarded to it over the internal RPC) or the timeout passes.
//!
//! The wait is a oneshot channel registered before the request is published, never a poll. A
//! request that ends (reply, timeout, client gone) removes its entry at once; a reply that
//! finds no entry is "late" (404). Nothing of a waiting request is replicated: the wait lives
//! and dies with the requester's connection, so a reply is delivered at most once, and not at
//! all when the requester's node restarts in between.
//!
//! The transports (HTTP now, WebSocket later) call [`Broker::request`] and [`Broker::reply`].

pub(crate) mod deliver;
pub mod ids;
pub mod waiters;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use self::ids::{random_u128, CorrelationId, ReplyTo};
use self::waiters::{Delivery, Waiters};
use super::{
    Acks, BrokerError, BrokerResult, ErrorCode, Idempotence, ProduceMessage, ProduceService,
};
use crate::broker_core::Core;

pub use self::waiters::Reply;

/// The header naming where the reply goes.
pub const REPLY_TO_HEADER: &str = "herald-reply-to";
/// The header naming the request on its node.
pub const CORRELATION_ID_HEADER: &str = "herald-correlation-id";

/// The longest and the default wait for a reply. The longest stays below the default
/// `request_timeout_ms` (90 s) with room for the publish, like long polls (60 s).
pub const MAX_REQUEST_TIMEOUT_MS: u64 = 60_000;
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// Counter of replies handed to their waiting request.
pub const REPLIES_DELIVERED_TOTAL: &str = "herald_replies_delivered_total";
/// Counter of replies that found no request waiting (late, duplicate or unknown ids).
pub const REPLIES_LATE_TOTAL: &str = "herald_replies_late_total";
/// Counter of requests that got no reply in time.
pub const REQUESTS_TIMED_OUT_TOTAL: &str = "herald_requests_timed_out_total";
/// Histogram of a request's round trip (publish, wait, reply), answered ones only.
pub const REQUEST_DURATION_SECONDS: &str = "herald_request_reply_duration_seconds";

/// Request/reply limits of a node.
#[derive(Debug, Clone)]
pub struct RequestOptions {
    /// The most requests waiting for a reply on this node; past it a request answers 503
    /// `overloaded` and publishes nothing.
    pub max_waiting: usize,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            max_waiting: 10_000,
        }
    }
}

/// This node's side of request/reply: its waiting requests and its reply address.
pub(super) struct RequestReply {
    waiters: Waiters,
    /// This node's `reply_to`: its id and this process's random instance number.
    reply_to: ReplyTo,
}

/// Request/reply: a request is a message produced with a reply address, and its reply is
/// handed to the node (and process) where it waits. Owns this node's waiting requests.
#[derive(Clone)]
pub struct RequestService {
    core: Arc<Core>,
    produce: ProduceService,
    waiting: Arc<RequestReply>,
}

impl RequestService {
    pub(crate) fn new(core: Arc<Core>, produce: ProduceService) -> RequestService {
        let waiting = Arc::new(RequestReply::new(
            core.cluster().node_id(),
            &core.options.requests,
        ));
        RequestService {
            core,
            produce,
            waiting,
        }
    }
}

impl RequestReply {
    pub(super) fn new(node: u64, options: &RequestOptions) -> RequestReply {
        // Without randomness the instance number only has to differ across restarts; the
        // clock does that. Correlation ids, which must not be guessable, have no fallback.
        let instance = random_u128().map(|bits| bits as u64).unwrap_or_else(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos() as u64)
                .unwrap_or(0)
        });
        // Published from the start, so a dashboard sees 0 rather than no series.
        metrics::gauge!(waiters::WAITING_REQUESTS).set(0.0);
        RequestReply {
            waiters: Waiters::new(options.max_waiting),
            reply_to: ReplyTo { node, instance },
        }
    }

    /// Hands a reply to a request waiting here, if `instance` is this process.
    pub(super) fn deliver_here(
        &self,
        instance: u64,
        correlation_id: CorrelationId,
        reply: Reply,
    ) -> Delivery {
        if instance != self.reply_to.instance {
            return Delivery::NoWaiter;
        }
        self.waiters.deliver(correlation_id, reply)
    }
}

/// A request's answer: where the request was written, and its reply.
#[derive(Debug, Clone)]
pub struct RequestAnswer {
    pub correlation_id: String,
    pub partition: u32,
    pub offset: u64,
    pub reply: Reply,
}

/// A responder's reply, as a transport received it.
#[derive(Debug, Clone)]
pub struct ReplyDelivery {
    pub reply_to: String,
    pub correlation_id: String,
    pub reply: Reply,
}

/// Checks a request's `timeout_ms`: 1 to [`MAX_REQUEST_TIMEOUT_MS`], default
/// [`DEFAULT_REQUEST_TIMEOUT_MS`].
pub fn request_timeout(timeout_ms: Option<u64>) -> BrokerResult<Duration> {
    let timeout_ms = timeout_ms.unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
    if !(1..=MAX_REQUEST_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(BrokerError::InvalidRequest(format!(
            "timeout_ms must be between 1 and {MAX_REQUEST_TIMEOUT_MS}, got {timeout_ms}"
        )));
    }
    Ok(Duration::from_millis(timeout_ms))
}

impl RequestService {
    /// Publishes `message` to `topic` as a request and waits up to `timeout` for its reply.
    /// 504 `timeout` when none came in time (the request itself was written).
    pub async fn request(
        &self,
        topic: &str,
        mut message: ProduceMessage,
        timeout: Duration,
    ) -> BrokerResult<RequestAnswer> {
        let started = Instant::now();
        if timeout.is_zero() || timeout > Duration::from_millis(MAX_REQUEST_TIMEOUT_MS) {
            return Err(BrokerError::InvalidRequest(format!(
                "timeout_ms must be between 1 and {MAX_REQUEST_TIMEOUT_MS}"
            )));
        }
        if let Some((name, _)) = message.headers.iter().find(|(name, _)| {
            name.eq_ignore_ascii_case(REPLY_TO_HEADER)
                || name.eq_ignore_ascii_case(CORRELATION_ID_HEADER)
        }) {
            return Err(BrokerError::InvalidRequest(format!(
                "header '{name}' is set by the broker on a request; leave it out"
            )));
        }
        let max_reply_bytes = self.core.topic(topic)?.config.max_message_bytes;
        let requests = &self.waiting;
        let correlation_id = CorrelationId(random_u128()?);
        // Registered before publishing: a responder may answer before the publish returns.
        let mut waiting = requests.waiters.register(correlation_id, max_reply_bytes)?;
        message
            .headers
            .push((REPLY_TO_HEADER.to_string(), requests.reply_to.to_string()));
        message.headers.push((
            CORRELATION_ID_HEADER.to_string(),
            correlation_id.to_string(),
        ));
        let answer = self
            .produce
            .produce(topic, vec![message], Acks::All, Idempotence::default())
            .await?;
        let (partition, offset) = match (answer.offsets.first(), answer.failed.first()) {
            (_, Some(failed)) => return Err(failed.error.clone()),
            (Some(landed), None) => match landed.offset {
                Some(offset) => (landed.partition, offset),
                None => {
                    return Err(BrokerError::Internal(
                        "a request written with acks=all has no offset".into(),
                    ))
                }
            },
            (None, None) => {
                return Err(BrokerError::Internal(
                    "a request's produce answered no offset".into(),
                ))
            }
        };
        let reply = match tokio::time::timeout_at(started + timeout, waiting.reply()).await {
            Ok(reply) => reply,
            // A reply handed over as the deadline passed was answered 204: it is taken.
            Err(_) => waiting.close(),
        };
        drop(waiting);
        match reply {
            Some(reply) => {
                metrics::histogram!(REQUEST_DURATION_SECONDS)
                    .record(started.elapsed().as_secs_f64());
                Ok(RequestAnswer {
                    correlation_id: correlation_id.to_string(),
                    partition,
                    offset,
                    reply,
                })
            }
            None => {
                metrics::counter!(REQUESTS_TIMED_OUT_TOTAL).increment(1);
                Err(BrokerError::Timeout(format!(
                    "no reply to request {correlation_id} (written to {topic}/{partition} at offset {offset}) within {} ms",
                    timeout.as_millis()
                )))
            }
        }
    }

    /// Delivers a responder's reply to the request waiting for it, on whichever node that is.
    /// 404 `no_waiting_request` when none waits (late, answered already, or never existed).
    pub async fn reply(&self, delivery: ReplyDelivery) -> BrokerResult<()> {
        let reply_to = ReplyTo::parse(&delivery.reply_to)?;
        let correlation_id = CorrelationId::parse(&delivery.correlation_id)?;
        if delivery.reply.headers.len() > super::MAX_HEADERS_PER_MESSAGE {
            return Err(BrokerError::InvalidRequest(format!(
                "a reply carries at most {} headers",
                super::MAX_HEADERS_PER_MESSAGE
            )));
        }
        let requests = &self.waiting;
        let outcome = if reply_to.node == requests.reply_to.node {
            requests.deliver_here(reply_to.instance, correlation_id, delivery.reply)
        } else if !self
            .core
            .cluster()
            .metadata()
            .current()
            .nodes
            .contains_key(&reply_to.node)
        {
            Delivery::NoWaiter
        } else {
            self.forward_reply(reply_to, correlation_id, delivery.reply)
                .await?
        };
        match outcome {
            Delivery::Delivered => {
                metrics::counter!(REPLIES_DELIVERED_TOTAL).increment(1);
                Ok(())
            }
            Delivery::NoWaiter => {
                metrics::counter!(REPLIES_LATE_TOTAL).increment(1);
                Err(BrokerError::NotFound {
                    code: ErrorCode::NoWaitingRequest,
                    message: format!(
                        "no request waits for a reply under correlation id {correlation_id} on node {}: it timed out, was answered already, or never existed",
                        reply_to.node
                    ),
                })
            }
            Delivery::TooLarge { size, max } => Err(BrokerError::MessageTooLarge {
                size: size as usize,
                max,
            }),
        }
    }
}
