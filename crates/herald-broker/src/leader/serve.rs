//! The receiving side: serves the operations other nodes send here (the cluster's broker
//! service). The kind tag picks the operation's handler; each handler decodes it, checks that
//! this node leads its group (else answers `NotLeader`, and the sender finds the leader),
//! applies the arrival checks, runs it and encodes its answer. A kind this node does not know
//! is answered with an error, like any other failure; nothing a peer sends panics.

use bytes::Bytes;
use futures::future::BoxFuture;

use super::wire::{self, WireError};
use super::{LeaderOperation, NodeOperation, OperationKind};
use crate::fetch::on_leader::{OffsetForTimestamp, ReadBatches};
use crate::produce::on_leader::{AppendRecords, AppendStored};
use crate::produce::stored_once::AppendStoredOnce;
use crate::requests::deliver::DeliverReply;
use crate::subscriptions::on_leader::{ApplyDeliveryCommand, ReadSubscriptionStats, WaitForLease};
use crate::{Broker, Services};
use herald_cluster::BrokerService;
use herald_rpc::operation_tag::split_tag;

/// Gauge of requests other nodes forwarded here that are being served right now (long polls
/// included); a forwarded call its sender gave up on is aborted and leaves it.
pub const FORWARDED_IN_FLIGHT: &str = "herald_forwarded_requests_in_flight";

/// Serves one body of the broker service.
async fn serve(broker: &Broker, body: &[u8]) -> Result<Bytes, String> {
    let Some((tag, body)) = split_tag(body) else {
        return Err("a broker request without an operation kind".to_string());
    };
    let Some(kind) = OperationKind::from_tag(tag) else {
        return unknown_kind(tag);
    };
    match kind {
        OperationKind::AppendRecords => on_leader::<AppendRecords>(broker, body).await,
        OperationKind::AppendStored => on_leader::<AppendStored>(broker, body).await,
        OperationKind::AppendStoredOnce => on_leader::<AppendStoredOnce>(broker, body).await,
        OperationKind::ReadBatches => on_leader::<ReadBatches>(broker, body).await,
        OperationKind::OffsetForTimestamp => on_leader::<OffsetForTimestamp>(broker, body).await,
        OperationKind::ApplyDeliveryCommand => {
            on_leader::<ApplyDeliveryCommand>(broker, body).await
        }
        OperationKind::ReadSubscriptionStats => {
            on_leader::<ReadSubscriptionStats>(broker, body).await
        }
        OperationKind::WaitForLease => on_leader::<WaitForLease>(broker, body).await,
        OperationKind::DeliverReply => on_node::<DeliverReply>(broker, body).await,
    }
}

/// The answer to an operation kind this node does not know: nothing was done.
fn unknown_kind(tag: u16) -> Result<Bytes, String> {
    tracing::warn!(tag, "a node sent an operation kind this node does not know");
    encode(tag, &Err::<(), _>(WireError::UnknownOperation(tag)))
}

/// Serves a [`LeaderOperation`], when this node leads its group.
async fn on_leader<Op: LeaderOperation>(broker: &Broker, body: &[u8]) -> Result<Bytes, String> {
    let reply = async {
        let mut operation: Op = decode(body)?;
        let replica = broker
            .core()
            .cluster()
            .replicas()
            .get(operation.group())
            .filter(|replica| replica.is_leader())
            .ok_or(WireError::NotLeader)?;
        operation.on_arrival(&broker.core().options)?;
        Ok::<_, WireError>(operation.run_here(Op::service(broker), replica).await?)
    };
    encode(Op::KIND.tag(), &reply.await)
}

/// Serves a [`NodeOperation`].
async fn on_node<Op: NodeOperation>(broker: &Broker, body: &[u8]) -> Result<Bytes, String> {
    let reply = async {
        let operation: Op = decode(body)?;
        Ok::<_, WireError>(operation.run_here(Op::service(broker)).await?)
    };
    encode(Op::KIND.tag(), &reply.await)
}

fn decode<Op: serde::de::DeserializeOwned>(body: &[u8]) -> Result<Op, WireError> {
    postcard::from_bytes(body)
        .map_err(|error| WireError::Failed(format!("bad forwarded request: {error}")))
}

fn encode<T: serde::Serialize>(tag: u16, reply: &Result<T, WireError>) -> Result<Bytes, String> {
    wire::encode_reply(tag, reply).map_err(|error| format!("encoding a forwarded answer: {error}"))
}

/// The broker as the cluster's broker service. It holds the broker weakly: the cluster (which
/// keeps the service) must not keep the broker alive past shutdown.
pub(crate) struct ForwardedRequests(pub(crate) std::sync::Weak<Services>);

impl BrokerService for ForwardedRequests {
    fn handle(&self, _from: u64, body: Bytes) -> BoxFuture<'static, Result<Bytes, String>> {
        let broker = self.0.upgrade().map(|inner| Broker { inner });
        Box::pin(async move {
            let _in_flight = InFlight::enter();
            match broker {
                Some(broker) => serve(&broker, &body).await,
                None => Err("the broker is shutting down".to_string()),
            }
        })
    }
}

/// Counts one forwarded request in [`FORWARDED_IN_FLIGHT`] until it ends or is aborted.
struct InFlight;

impl InFlight {
    fn enter() -> InFlight {
        metrics::gauge!(FORWARDED_IN_FLIGHT).increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!(FORWARDED_IN_FLIGHT).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;
    use herald_domain::RaftGroupId;

    #[test]
    fn tags_are_distinct_and_each_kind_is_found_by_its_tag() {
        let mut tags: Vec<u16> = OperationKind::ALL.iter().map(|kind| kind.tag()).collect();
        for kind in OperationKind::ALL {
            assert_eq!(OperationKind::from_tag(kind.tag()), Some(*kind));
        }
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), OperationKind::ALL.len());
        assert_eq!(OperationKind::from_tag(0), None);
        assert_eq!(OperationKind::from_tag(u16::MAX), None);
    }

    #[test]
    fn an_unknown_kind_is_answered_with_an_error_the_sender_understands() {
        // What an older node answers a newer node's operation: under the sender's own tag, so
        // the sender reads it as its answer, an error saying nothing was done.
        let kind = OperationKind::WaitForLease;
        let answer = unknown_kind(kind.tag()).unwrap();
        let reply = wire::decode_reply::<()>(kind, &answer).unwrap();
        assert_eq!(reply, Err(WireError::UnknownOperation(kind.tag())));
        let error = reply.unwrap_err().into_broker(RaftGroupId::new(4));
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    }

    #[test]
    fn a_request_that_does_not_decode_is_a_failure_not_a_panic() {
        let error = decode::<AppendStored>(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(matches!(error, WireError::Failed(_)), "{error:?}");
        assert!(split_tag(&[7]).is_none());
    }
}
