//! Asking another node a cluster request (`service::ClusterRequest`) on the RPC's control lane,
//! with how far a failed request got: never sent (a local fault), certainly not delivered, or
//! maybe delivered (an unknown outcome).

use bytes::Bytes;
use tokio::time::Instant;

use super::service::{self, ClusterReply, ClusterRequest};
use super::ClusterError;
use herald_rpc::{RpcClient, RpcError};

/// Asks `node` `request`, answering by `deadline`.
pub(crate) async fn ask(
    rpc: &RpcClient,
    node: u64,
    request: &ClusterRequest,
    deadline: Instant,
) -> Result<ClusterReply, AskError> {
    let body = encode_request(request)?;
    let timeout = deadline.saturating_duration_since(Instant::now());
    let service = service::CLUSTER_SERVICE;
    let answer = rpc
        .call(node, service::lane_of(service), service, body, timeout)
        .await?;
    // The peer's handler ran: a garbled answer is an outcome unknown to us.
    postcard::from_bytes(&answer).map_err(|error| {
        AskError::Rpc(RpcError::Remote(format!(
            "decoding a cluster answer: {error}"
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

fn encode_request(request: &impl serde::Serialize) -> Result<Bytes, AskError> {
    postcard::to_stdvec(request)
        .map(Bytes::from)
        .map_err(|error| AskError::Encode(error.to_string()))
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
        let error = encode_request(&Unencodable).unwrap_err();
        let AskError::Encode(reason) = error else {
            panic!("an encoding failure is no RPC outcome: {error}");
        };
        let error = local_fault(reason);
        assert!(matches!(error, ClusterError::Internal(_)), "{error}");
    }

    #[test]
    fn cluster_requests_encode() {
        assert!(encode_request(&ClusterRequest::Ping).is_ok());
    }
}
