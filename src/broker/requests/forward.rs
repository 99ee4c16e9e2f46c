//! A reply posted to a node other than the requester's travels there on the internal RPC's
//! client lane (the broker service), like a forwarded produce. The call is a future of the
//! responder's HTTP request: dropped with it, the RPC cancels it.

use bytes::Bytes;

use super::ids::{CorrelationId, ReplyTo};
use super::waiters::{Delivery, Reply};
use crate::broker::forward_wire::{ForwardReply, ForwardRequest, WireError};
use crate::broker::{Broker, BrokerError, BrokerResult};
use crate::cluster::BROKER_SERVICE;
use crate::domain::RecordValue;

impl Broker {
    pub(super) async fn forward_reply(
        &self,
        reply_to: ReplyTo,
        correlation_id: CorrelationId,
        reply: Reply,
    ) -> BrokerResult<Delivery> {
        let (json, value) = match reply.value {
            RecordValue::Json(value) => (true, value),
            RecordValue::Bytes(value) => (false, value),
        };
        let request = ForwardRequest::Reply {
            instance: reply_to.instance,
            correlation_id: correlation_id.0,
            json,
            value,
            headers: reply.headers,
        };
        let body = postcard::to_stdvec(&request).map_err(|error| {
            BrokerError::Internal(format!("encoding a forwarded reply (not sent): {error}"))
        })?;
        let node = reply_to.node;
        let answer = self
            .cluster()
            .call_node(
                node,
                BROKER_SERVICE,
                Bytes::from(body),
                self.inner.options.leader_wait,
            )
            .await
            .map_err(|error| {
                if error.maybe_delivered() {
                    BrokerError::Timeout(format!(
                        "node {node}, where the request waits, did not answer; the reply may or may not have been delivered: {error}"
                    ))
                } else {
                    BrokerError::Unavailable(format!(
                        "node {node}, where the request waits, cannot be reached; the reply was not delivered: {error}"
                    ))
                }
            })?;
        match postcard::from_bytes::<ForwardReply>(&answer) {
            Ok(ForwardReply::Replied(Ok(delivery))) => Ok(delivery),
            Ok(ForwardReply::Replied(Err(WireError::Unavailable(reason)))) => {
                Err(BrokerError::Unavailable(reason))
            }
            Ok(ForwardReply::Replied(Err(error))) => Err(BrokerError::Internal(format!(
                "node {node} failed to take a reply: {error:?}"
            ))),
            Ok(_) => Err(BrokerError::Internal(
                "a forwarded reply got the wrong kind of answer".into(),
            )),
            Err(error) => Err(BrokerError::Internal(format!(
                "decoding a forwarded reply's answer: {error}"
            ))),
        }
    }
}
