//! A reply posted to a node other than the requester's travels there on the internal RPC's
//! client lane (the broker service), like an append for another node's partition: a
//! [`DeliverReply`] for that node (not a group's leader), sent once. The call is a future of the
//! responder's HTTP request: dropped with it, the RPC cancels it.

use crate::RequestService;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ids::{CorrelationId, ReplyTo};
use super::waiters::{Delivery, Reply};
use crate::leader::{NodeOperation, OperationKind};
use crate::{Broker, BrokerError, BrokerResult};
use herald_domain::RecordValue;
use herald_rpc::RpcError;

/// A responder's reply for a request waiting on the receiving node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeliverReply {
    /// The requester process's instance number, from its `reply_to`.
    pub(crate) instance: u64,
    pub(crate) correlation_id: u128,
    /// The value was sent as JSON (`value`), not bytes (`value_b64`).
    pub(crate) json: bool,
    pub(crate) value: Bytes,
    pub(crate) headers: Vec<(String, String)>,
}

impl DeliverReply {
    fn new(instance: u64, correlation_id: CorrelationId, reply: Reply) -> DeliverReply {
        let (json, value) = match reply.value {
            RecordValue::Json(value) => (true, value),
            RecordValue::Bytes(value) => (false, value),
        };
        DeliverReply {
            instance,
            correlation_id: correlation_id.0,
            json,
            value,
            headers: reply.headers,
        }
    }
}

impl NodeOperation for DeliverReply {
    const KIND: OperationKind = OperationKind::DeliverReply;
    type Reply = Delivery;
    type Service = RequestService;

    fn service(broker: &Broker) -> &RequestService {
        broker.requests()
    }

    fn unanswered(&self, node: u64, error: &RpcError) -> BrokerError {
        if error.maybe_delivered() {
            BrokerError::Timeout(format!(
                "node {node}, where the request waits, did not answer; the reply may or may not have been delivered: {error}"
            ))
        } else {
            BrokerError::Unavailable(format!(
                "node {node}, where the request waits, cannot be reached; the reply was not delivered: {error}"
            ))
        }
    }

    async fn run_here(&self, requests: &RequestService) -> BrokerResult<Delivery> {
        let value = if self.json {
            RecordValue::Json(self.value.clone())
        } else {
            RecordValue::Bytes(self.value.clone())
        };
        let reply = Reply {
            value,
            headers: self.headers.clone(),
        };
        let correlation_id = CorrelationId(self.correlation_id);
        Ok(requests
            .waiting
            .deliver_here(self.instance, correlation_id, reply))
    }
}

impl RequestService {
    /// Hands `reply` to the node its request waits on (`reply_to.node`, not this one).
    pub(super) async fn forward_reply(
        &self,
        reply_to: ReplyTo,
        correlation_id: CorrelationId,
        reply: Reply,
    ) -> BrokerResult<Delivery> {
        let delivery = DeliverReply::new(reply_to.instance, correlation_id, reply);
        let timeout = self.core.options.leader_wait;
        self.core
            .run_on_node(reply_to.node, &delivery, timeout)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_travels_whole_and_keeps_its_value_kind() {
        for value in [
            RecordValue::Json(Bytes::from_static(b"{\"a\":1}")),
            RecordValue::Bytes(Bytes::from_static(b"\x00\x01")),
        ] {
            let reply = Reply {
                value: value.clone(),
                headers: vec![("h".into(), "v".into())],
            };
            let delivery = DeliverReply::new(3, CorrelationId(42), reply);
            let arrived = crate::leader::round_trip(OperationKind::DeliverReply, &delivery);
            assert_eq!(arrived, delivery);
            assert_eq!(arrived.json, matches!(value, RecordValue::Json(_)));
        }
    }

    #[test]
    fn an_unanswered_node_keeps_whether_the_reply_may_have_been_delivered() {
        let delivery = DeliverReply::new(
            1,
            CorrelationId(1),
            Reply {
                value: RecordValue::Bytes(Bytes::new()),
                headers: Vec::new(),
            },
        );
        let maybe = delivery.unanswered(2, &RpcError::Timeout { node: 2 });
        assert_eq!(maybe.code(), crate::ErrorCode::Timeout);
        let not = delivery.unanswered(2, &RpcError::NoAddress(2));
        assert_eq!(not.code(), crate::ErrorCode::Unavailable);
    }
}
