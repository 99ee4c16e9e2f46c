use thiserror::Error;

/// Why a call failed. The variants say how far the request got, which is what a caller needs
/// to decide whether retrying could apply it twice: see [`RpcError::maybe_delivered`]; and
/// whether the peer is merely too old for it ([`RpcError::UnknownOperation`]).
#[derive(Debug, Clone, Error)]
pub enum RpcError {
    /// No address is known for the node: the request was not sent.
    #[error("no address known for node {0}")]
    NoAddress(u64),
    /// Could not connect, the handshake failed, or the peer is in its reconnect backoff: the
    /// request was not sent.
    #[error("node {node} is unreachable: {reason}")]
    Unreachable { node: u64, reason: String },
    /// No answer within the call's timeout: the request may or may not have been delivered.
    #[error("node {node} did not answer in time")]
    Timeout { node: u64 },
    /// The connection broke after the request was queued: outcome unknown.
    #[error("the connection to node {node} was lost: {reason}")]
    ConnectionLost { node: u64, reason: String },
    /// The peer's handler answered with an error.
    #[error("remote error: {0}")]
    Remote(String),
    /// The peer does not know the request's operation (its tag): a node of an older release.
    /// Nothing was done; the sender may use an operation that node knows
    /// ([`crate::operation_tag`]).
    #[error("node {node} does not know operation kind {tag} (a node of an older release); nothing was done")]
    UnknownOperation { node: u64, tag: u16 },
    /// The request frame exceeds the frame limit: not sent.
    #[error("a frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
}

impl RpcError {
    /// False when the request certainly did not reach the peer's handler, so it can be retried
    /// without risk of applying it twice. True for `Timeout` and `ConnectionLost` (unknown) and
    /// for `Remote` (the handler ran and answered).
    pub fn maybe_delivered(&self) -> bool {
        match self {
            RpcError::NoAddress(_)
            | RpcError::Unreachable { .. }
            | RpcError::TooLarge { .. }
            | RpcError::UnknownOperation { .. } => false,
            RpcError::Timeout { .. } | RpcError::ConnectionLost { .. } | RpcError::Remote(_) => {
                true
            }
        }
    }

    /// The `outcome` label of [`super::CALLS_TOTAL`].
    pub(crate) fn outcome_label(&self) -> &'static str {
        match self {
            RpcError::NoAddress(_) => "no_address",
            RpcError::Unreachable { .. } => "unreachable",
            RpcError::Timeout { .. } => "timeout",
            RpcError::ConnectionLost { .. } => "connection_lost",
            RpcError::Remote(_) => "remote_error",
            RpcError::TooLarge { .. } => "too_large",
            RpcError::UnknownOperation { .. } => "unknown_operation",
        }
    }
}
