//! What crosses the internal RPC for an operation run elsewhere (bodies of the cluster's
//! broker service): a request is the operation's kind tag (`u16`, big-endian) followed by the
//! operation in postcard; an answer is the same tag followed by `Result<Reply, WireError>` in
//! postcard. The answer repeats the tag so that a sender never takes one operation's answer for
//! another's.

use bytes::Bytes;
use herald_domain::RaftGroupId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::OperationKind;
use crate::{BrokerError, BrokerResult};
use herald_rpc::operation_tag::{split_tag, with_tag};

/// The errors a serving node answers an operation with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum WireError {
    /// This node does not lead the group: nothing was done, ask the leader.
    NotLeader,
    OffsetOutOfRange {
        offset: u64,
        log_start_offset: u64,
        high_watermark: u64,
    },
    Timeout(String),
    Failed(String),
    /// The leader's appender for the partition is full: nothing was written, retry later.
    Overloaded(String),
    /// Certainly not done (e.g. the share's deadline passed while it waited on the leader).
    Unavailable(String),
    /// This node does not know the operation kind (a node of another version): nothing was
    /// done.
    UnknownOperation(u16),
    /// The leader's data directory is under its disk reserve: nothing was written.
    InsufficientStorage(String),
}

impl From<BrokerError> for WireError {
    fn from(error: BrokerError) -> Self {
        match error {
            BrokerError::NoLeader(_) => WireError::NotLeader,
            BrokerError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            } => WireError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            },
            BrokerError::Timeout(what) => WireError::Timeout(what),
            BrokerError::Overloaded(what) => WireError::Overloaded(what),
            BrokerError::Unavailable(what) => WireError::Unavailable(what),
            BrokerError::InsufficientStorage(what) => WireError::InsufficientStorage(what),
            other => WireError::Failed(other.to_string()),
        }
    }
}

impl WireError {
    /// The error as the node that sent an operation to the leader of `group` answers it.
    pub(super) fn into_broker(self, group: RaftGroupId) -> BrokerError {
        match self {
            WireError::NotLeader => BrokerError::NoLeader(format!("partition group {group}")),
            WireError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            } => BrokerError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            },
            WireError::Timeout(what) => BrokerError::Timeout(what),
            WireError::Failed(reason) => {
                BrokerError::Internal(format!("the partition leader failed: {reason}"))
            }
            WireError::Overloaded(what) => BrokerError::Overloaded(what),
            WireError::Unavailable(what) => BrokerError::Unavailable(what),
            WireError::InsufficientStorage(what) => BrokerError::InsufficientStorage(what),
            WireError::UnknownOperation(tag) => BrokerError::Unavailable(format!(
                "the leader of partition group {group} does not know operation kind {tag} (a node of another version); nothing was done"
            )),
        }
    }
}

/// A request body: `kind`'s tag, then `operation`.
pub(super) fn encode_request<Op: Serialize>(
    kind: OperationKind,
    operation: &Op,
) -> Result<Bytes, postcard::Error> {
    encode(kind.tag(), operation)
}

/// An answer body: the tag of the operation answered, then `reply`.
pub(super) fn encode_reply<T: Serialize>(
    tag: u16,
    reply: &Result<T, WireError>,
) -> Result<Bytes, postcard::Error> {
    encode(tag, reply)
}

fn encode<T: Serialize + ?Sized>(tag: u16, value: &T) -> Result<Bytes, postcard::Error> {
    let body = postcard::to_extend(value, with_tag(tag))?;
    Ok(Bytes::from(body))
}

pub(super) fn decode_reply<T: DeserializeOwned>(
    kind: OperationKind,
    answer: &[u8],
) -> BrokerResult<Result<T, WireError>> {
    match split_tag(answer) {
        Some((tag, body)) if tag == kind.tag() => postcard::from_bytes(body).map_err(|error| {
            BrokerError::Internal(format!("decoding a forwarded {kind:?}'s answer: {error}"))
        }),
        _ => Err(BrokerError::Internal(format!(
            "a forwarded {kind:?} got the wrong kind of answer"
        ))),
    }
}

/// Sends `operation` through a request envelope and back, checking its tag; for the tests of
/// each operation.
#[cfg(test)]
pub(crate) fn round_trip<Op: Serialize + DeserializeOwned>(
    kind: OperationKind,
    operation: &Op,
) -> Op {
    let body = encode_request(kind, operation).expect("encodes");
    let (tag, rest) = split_tag(&body).expect("tagged");
    assert_eq!(OperationKind::from_tag(tag), Some(kind));
    let arrived: Op = postcard::from_bytes(rest).expect("decodes");
    // Nothing is lost on the way: the arrived operation encodes to the same bytes.
    assert_eq!(encode_request(kind, &arrived).expect("encodes"), body);
    arrived
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn an_answer_of_another_kind_is_rejected_not_misread() {
        let answer = encode_reply(OperationKind::OffsetForTimestamp.tag(), &Ok(7u64)).unwrap();
        // Same payload type, another operation: refused by the tag, not decoded by luck.
        let error = decode_reply::<u64>(OperationKind::AppendStored, &answer).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InternalError);
        assert!(
            error.to_string().contains("wrong kind of answer"),
            "{error}"
        );
        assert_eq!(
            decode_reply::<u64>(OperationKind::OffsetForTimestamp, &answer).unwrap(),
            Ok(7)
        );
        // Too short to carry a tag at all.
        assert!(decode_reply::<u64>(OperationKind::AppendStored, &[1]).is_err());
    }

    #[test]
    fn an_undecodable_answer_is_an_internal_error() {
        let answer = encode_reply(OperationKind::ReadBatches.tag(), &Ok(())).unwrap();
        let error =
            decode_reply::<(u64, String)>(OperationKind::ReadBatches, &answer[..3]).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InternalError, "{error}");
    }

    #[test]
    fn an_error_answer_decodes_whatever_the_reply_type() {
        // The server answers errors it finds before knowing the reply type (unknown kind,
        // undecodable request) as `Result<(), WireError>`.
        let answer = encode_reply(
            OperationKind::ReadBatches.tag(),
            &Err::<(), _>(WireError::NotLeader),
        )
        .unwrap();
        assert_eq!(
            decode_reply::<Vec<u64>>(OperationKind::ReadBatches, &answer).unwrap(),
            Err(WireError::NotLeader)
        );
    }

    #[test]
    fn errors_keep_their_meaning_across_the_hop() {
        let cases = [
            (
                BrokerError::NoLeader("x".into()),
                WireError::NotLeader,
                ErrorCode::NoLeader,
            ),
            (
                BrokerError::OffsetOutOfRange {
                    offset: 9,
                    log_start_offset: 1,
                    high_watermark: 5,
                },
                WireError::OffsetOutOfRange {
                    offset: 9,
                    log_start_offset: 1,
                    high_watermark: 5,
                },
                ErrorCode::OffsetOutOfRange,
            ),
            (
                BrokerError::Timeout("t".into()),
                WireError::Timeout("t".into()),
                ErrorCode::Timeout,
            ),
            (
                BrokerError::Overloaded("o".into()),
                WireError::Overloaded("o".into()),
                ErrorCode::Overloaded,
            ),
            (
                BrokerError::Unavailable("u".into()),
                WireError::Unavailable("u".into()),
                ErrorCode::Unavailable,
            ),
            (
                BrokerError::Internal("i".into()),
                WireError::Failed("internal error: i".into()),
                ErrorCode::InternalError,
            ),
            // A client's error on the leader is a failure of the leader for the sender.
            (
                BrokerError::InvalidRequest("bad".into()),
                WireError::Failed("bad".into()),
                ErrorCode::InternalError,
            ),
        ];
        for (error, wire, code) in cases {
            assert_eq!(WireError::from(error), wire);
            assert_eq!(wire.into_broker(RaftGroupId::new(3)).code(), code);
        }
        let unknown = WireError::UnknownOperation(999).into_broker(RaftGroupId::new(3));
        assert_eq!(unknown.code(), ErrorCode::Unavailable, "{unknown}");
        assert!(unknown.to_string().contains("999"), "{unknown}");
    }
}
