//! What an operation that runs elsewhere is: its stable kind, the group it concerns, its reply,
//! and how it runs where it must. The dispatcher (`dispatch`) and the server (`serve`) do the
//! rest for every operation alike.

use herald_domain::RaftGroupId;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Broker, BrokerOptions, BrokerResult};
use herald_raft::PartitionReplica;
use herald_rpc::RpcError;

/// Declares the operation kinds: each with an explicit tag, so that the tags on the wire do
/// not depend on the order of a list and a later release can keep understanding them.
macro_rules! operation_kinds {
    ($($(#[$doc:meta])* $name:ident = $tag:literal,)*) => {
        /// Which operation a body of the broker service carries, as the `u16` tag before it.
        /// A tag is never reused for another operation, even after its operation is gone.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub(in crate) enum OperationKind {
            $($(#[$doc])* $name = $tag,)*
        }

        impl OperationKind {
            /// Every kind this node serves.
            #[cfg(test)]
            pub(in crate) const ALL: &'static [OperationKind] =
                &[$(OperationKind::$name,)*];

            /// The kind of `tag`; `None` for a tag this node does not know (a newer node's
            /// operation, or garbage).
            pub(in crate) fn from_tag(tag: u16) -> Option<OperationKind> {
                match tag {
                    $($tag => Some(OperationKind::$name),)*
                    _ => None,
                }
            }
        }
    };
}

operation_kinds! {
    /// Records appended on a partition's leader, plain or idempotent (`produce/`).
    AppendRecords = 1,
    /// Stored batches read on a partition's leader, possibly after a long poll (`fetch/`).
    ReadBatches = 2,
    /// The first offset at or after a timestamp (`fetch/`).
    OffsetForTimestamp = 3,
    /// A subscription's delivery state changed on the partition (`subscriptions/`).
    ApplyDeliveryCommand = 4,
    /// A responder's reply handed to the node its request waits on (`requests/`).
    DeliverReply = 5,
    /// A subscription's counts on the partition (`subscriptions/`).
    ReadSubscriptionStats = 6,
    /// A wait until a lease could get something on the partition (`subscriptions/`).
    WaitForLease = 7,
    /// A producer's batch in the stored layout, appended byte for byte (`produce/`).
    AppendStored = 8,
    /// An idempotent producer's batch in the stored layout, appended byte for byte through
    /// the partition's dedup window (`produce/stored_once`).
    AppendStoredOnce = 9,
}

impl OperationKind {
    /// The tag on the wire.
    pub(crate) fn tag(self) -> u16 {
        self as u16
    }
}

/// An operation that runs on the leader of a raft group: on this node when it leads, or sent
/// to the leader. The type itself is what travels (postcard); fields that only make sense on
/// one node (a deadline, records not yet encoded) are `#[serde(skip)]` and set by the hooks.
pub(crate) trait LeaderOperation:
    Serialize + DeserializeOwned + Send + Sync + 'static
{
    const KIND: OperationKind;

    /// What the leader answers. Fields meaningful only on the leader's own node may be
    /// `#[serde(skip)]`: another node then gets their default.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// The capability service that runs it.
    type Service: Send + Sync + 'static;

    /// Where a node that serves it for another node finds its service.
    fn service(broker: &Broker) -> &Self::Service;

    /// The raft group whose leader runs it.
    fn group(&self) -> RaftGroupId;

    /// How long the leader may hold it before answering (a long poll's wait); the call's
    /// timeout grows by it.
    fn wait(&self) -> Duration {
        Duration::ZERO
    }

    /// Readies it for the wire before each send (e.g. encodes records once). An error here
    /// answers the request with nothing sent.
    fn before_sending(&mut self) -> BrokerResult<()> {
        Ok(())
    }

    /// On the leader, for an operation that came from another node, before it runs: what the
    /// sender's values cannot be trusted for (its batches are checked, its limits clamped to
    /// this node's) and what does not travel (a deadline starts again from arrival).
    fn on_arrival(&mut self, options: &BrokerOptions) -> BrokerResult<()> {
        let _ = options;
        Ok(())
    }

    /// Runs it on `replica`, which led the group when it was looked up. A replica that no
    /// longer leads answers `BrokerError::NoLeader` with nothing done: the dispatcher then
    /// follows the new leader and runs it again. `&mut` because an operation that arrived
    /// from another node runs exactly once and may give away what it holds (an append's
    /// records) instead of copying it.
    fn run_here(
        &mut self,
        service: &Self::Service,
        replica: Arc<PartitionReplica>,
    ) -> impl Future<Output = BrokerResult<Self::Reply>> + Send;
}

/// An operation for one given node rather than a group's leader (e.g. a reply for a request
/// that waits there). Sent once; never retried, never redirected.
pub(crate) trait NodeOperation:
    Serialize + DeserializeOwned + Send + Sync + 'static
{
    const KIND: OperationKind;
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// The capability service that runs it.
    type Service: Send + Sync + 'static;

    /// Where the node it is sent to finds its service.
    fn service(broker: &Broker) -> &Self::Service;

    /// What it means for this operation that `node` did not answer: an error that keeps
    /// whether it may have been done (`error.maybe_delivered()`).
    fn unanswered(&self, node: u64, error: &RpcError) -> crate::BrokerError;

    /// Runs it on this node.
    fn run_here(
        &self,
        service: &Self::Service,
    ) -> impl Future<Output = BrokerResult<Self::Reply>> + Send;
}
