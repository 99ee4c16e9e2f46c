//! What nodes ask each other on the cluster service (besides raft), one small type per request
//! in its concern's file: [`Ping`](super::service::Ping) (who is alive, who leads what) and
//! [`VersionedPing`](super::service::VersionedPing) (the same and the wire version),
//! [`Propose`](super::metadata_group::Propose) (a metadata change for the metadata leader),
//! [`GroupHeartbeat`](super::groups::GroupHeartbeat) and
//! [`ReplicaProgress`](super::handback::ReplicaProgressQuery). Each declares its kind (a `u16`
//! tag that travels before its postcard body), its reply and how the receiving node serves it;
//! [`ask`] sends one, and the server in `service` picks the handler by the tag.
//!
//! A failed request keeps how far it got: never sent (a local fault), certainly not delivered,
//! or maybe delivered (an unknown outcome); and a node that does not know the request's tag (of
//! an older release) says so (`RpcError::UnknownOperation`). Tags follow the rules of
//! `herald_rpc::operation_tag`: a request's or reply's layout never changes, a new one gets a
//! new tag, and a sender uses it only towards a node whose wire version knows it.

use std::future::Future;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use super::service;
use super::{Cluster, ClusterError};
use herald_rpc::operation_tag::with_tag;
use herald_rpc::{RpcClient, RpcError};

/// Declares the kinds with explicit tags: a tag on the wire never depends on the order of a
/// list, and is never reused for another request.
macro_rules! cluster_operation_kinds {
    ($($(#[$doc:meta])* $name:ident = $tag:literal,)*) => {
        /// Which request a body of the cluster service carries.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u16)]
        pub(crate) enum ClusterOperationKind {
            $($(#[$doc])* $name = $tag,)*
        }

        impl ClusterOperationKind {
            #[cfg(test)]
            pub(crate) const ALL: &'static [ClusterOperationKind] =
                &[$(ClusterOperationKind::$name,)*];

            /// The kind of `tag`; `None` for a tag this node does not know.
            pub(crate) fn from_tag(tag: u16) -> Option<ClusterOperationKind> {
                match tag {
                    $($tag => Some(ClusterOperationKind::$name),)*
                    _ => None,
                }
            }
        }
    };
}

cluster_operation_kinds! {
    /// Who is alive and which groups it leads (`gossip`, the failure detector).
    Ping = 1,
    /// A metadata change for the metadata leader (`metadata_group`).
    Propose = 2,
    /// A consumer group member is alive; for the metadata leader (`groups`).
    GroupHeartbeat = 3,
    /// A replica's progress on a partition group, asked by its leader before a hand-back
    /// (`handback`).
    ReplicaProgress = 4,
    /// A ping whose report carries the node's wire version (wire version 1 on; `Ping` stays
    /// served for nodes of the release before).
    VersionedPing = 5,
    /// A leader's offer that idle partition groups go quiet (`quiescence`; wire version 3 on).
    QuiesceGroups = 6,
}

impl ClusterOperationKind {
    pub(crate) fn tag(self) -> u16 {
        self as u16
    }
}

/// A request of the cluster service. The type itself travels (postcard).
pub(crate) trait ClusterOperation:
    Serialize + DeserializeOwned + Send + Sync + 'static
{
    const KIND: ClusterOperationKind;
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Serves it on the node it was sent to.
    fn serve(self, cluster: &Cluster) -> impl Future<Output = Self::Reply> + Send;
}

/// Sends `operation` to `node` and reads its reply, by `deadline`.
pub(crate) async fn ask<Op: ClusterOperation>(
    rpc: &RpcClient,
    node: u64,
    operation: &Op,
    deadline: Instant,
) -> Result<Op::Reply, AskError> {
    let body = encode_request(Op::KIND, operation)?;
    let timeout = deadline.saturating_duration_since(Instant::now());
    let service = service::CLUSTER_SERVICE;
    let answer = rpc
        .call(node, service::lane_of(service), service, body, timeout)
        .await?;
    // The peer's handler ran: a garbled answer is an outcome unknown to us.
    postcard::from_bytes(&answer).map_err(|error| {
        AskError::Rpc(RpcError::Remote(format!(
            "decoding a cluster answer to {:?}: {error}",
            Op::KIND
        )))
    })
}

/// Why asking another node failed, with how far the request got.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskError {
    /// The request could not be encoded: a fault of this node; nothing was sent.
    #[error("encoding a cluster request: {0}")]
    Encode(String),
    /// The call failed; [`RpcError::maybe_delivered`] says whether it may have taken effect.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// The tag, then the operation.
fn encode_request(
    kind: ClusterOperationKind,
    operation: &impl Serialize,
) -> Result<Bytes, AskError> {
    postcard::to_extend(operation, with_tag(kind.tag()))
        .map(Bytes::from)
        .map_err(|error| AskError::Encode(error.to_string()))
}

/// Decodes a request of `Op`'s kind and serves it; the reply encoded.
pub(crate) async fn serve<Op: ClusterOperation>(
    cluster: &Cluster,
    body: &[u8],
) -> Result<Bytes, String> {
    let operation: Op = postcard::from_bytes(body)
        .map_err(|error| format!("bad cluster request {:?}: {error}", Op::KIND))?;
    let reply = operation.serve(cluster).await;
    postcard::to_stdvec(&reply)
        .map(Bytes::from)
        .map_err(|error| format!("encoding a cluster answer: {error}"))
}

/// A request this node could not encode: logged here, answered as an internal error.
pub(crate) fn local_fault(reason: String) -> ClusterError {
    tracing::error!(%reason, "a cluster request could not be encoded; nothing was sent");
    ClusterError::Internal(format!("encoding a cluster request: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value whose encoding always fails, as a command too large or malformed for postcard
    /// would.
    struct Unencodable;

    impl serde::Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("cannot encode this"))
        }
    }

    #[test]
    fn a_request_that_cannot_be_encoded_is_a_local_fault_not_an_unknown_outcome() {
        let error = encode_request(ClusterOperationKind::Propose, &Unencodable).unwrap_err();
        let AskError::Encode(reason) = error else {
            panic!("an encoding failure is no RPC outcome: {error}");
        };
        let error = local_fault(reason);
        assert!(matches!(error, ClusterError::Internal(_)), "{error}");
    }

    #[test]
    fn a_request_travels_as_its_tag_then_its_body() {
        let body = encode_request(ClusterOperationKind::Ping, &service::Ping).unwrap();
        let (tag, rest) = herald_rpc::operation_tag::split_tag(&body).unwrap();
        assert_eq!(
            ClusterOperationKind::from_tag(tag),
            Some(ClusterOperationKind::Ping)
        );
        let _: service::Ping = postcard::from_bytes(rest).unwrap();
        // The bytes themselves: what an older or newer node, and the mTLS tests, send.
        assert_eq!(&body[..], &[0, 1]);
    }

    #[test]
    fn tags_are_distinct_and_unknown_ones_are_no_kind() {
        let mut tags: Vec<u16> = ClusterOperationKind::ALL
            .iter()
            .map(|kind| kind.tag())
            .collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), ClusterOperationKind::ALL.len());
        assert_eq!(ClusterOperationKind::from_tag(0), None);
        assert_eq!(ClusterOperationKind::from_tag(u16::MAX), None);
    }
}
