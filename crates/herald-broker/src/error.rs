//! The broker layer's error: what a client did wrong, or why the service could not do it.
//! Each variant has one stable [`ErrorCode`] ([`BrokerError::code`]); `api::problem` renders
//! it as problem+json.

use thiserror::Error;

use super::ErrorCode;

#[derive(Debug, Clone, Error)]
pub enum BrokerError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("topic '{0}' does not exist")]
    TopicNotFound(String),
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{topic}' has no partition {partition}")]
    PartitionNotFound { topic: String, partition: u32 },
    #[error("message of {size} bytes as stored (key, value, headers and their framing) exceeds the topic's max_message_bytes of {max}")]
    MessageTooLarge { size: usize, max: u32 },
    #[error("offset {offset} is outside the log [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
        offset: u64,
        log_start_offset: u64,
        high_watermark: u64,
    },
    /// A commit names an offset past the partition's end: committing it would make the group
    /// skip messages that do not exist yet (409, code `offset_out_of_range`).
    #[error("offset {offset} of {topic}/{partition} is past the end of the log (high watermark {high_watermark}); a committed offset is the next offset to read, at most the high watermark")]
    CommitOutOfRange {
        topic: String,
        partition: u32,
        offset: u64,
        log_start_offset: u64,
        high_watermark: u64,
    },
    #[error("no leader is available for {0}; retry shortly")]
    NoLeader(String),
    #[error("the request timed out: {0}")]
    Timeout(String),
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// A limit of this node or of a partition is reached; nothing was done, retry later.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// The partition leader's data directory is under its disk reserve; nothing was written.
    #[error("insufficient storage: {0}")]
    InsufficientStorage(String),
    /// A conflict with the cluster's state, with its stable code (e.g. `node_exists`).
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
    #[error("node {0} is not in the cluster")]
    NodeNotFound(u64),
    /// Something named in the path does not exist, with its stable code (e.g.
    /// `group_not_found`, `unknown_member`).
    #[error("{message}")]
    NotFound { code: ErrorCode, message: String },
    /// An idempotent producer's request does not continue its sequence on the partition.
    #[error("producer {producer_id} sent sequence {sequence} to partition {partition}, which expects sequence {expected} next")]
    OutOfOrderSequence {
        producer_id: i64,
        partition: u32,
        sequence: i64,
        expected: i64,
    },
    /// An idempotent producer's epoch was superseded: a newer holder of the id registered.
    #[error("{0}")]
    ProducerFenced(String),
    /// The `Idempotency-Key` was used before for a different request.
    #[error("Idempotency-Key '{0}' was already used for a different request to this topic; a retry must send the same request")]
    IdempotencyKeyReused(String),
    /// A produced `application/vnd.herald.batch` body that can not be stored as it is, with its
    /// stable code (`invalid_batch`, `batch_crc_mismatch`, `unsupported_batch_version`).
    #[error("{message}")]
    InvalidBatch { code: ErrorCode, message: String },
    /// A schema registry refusal, or a message that does not follow its topic's schema, with
    /// its stable code (`subject_not_found`, `incompatible_schema`, `schema_validation_failed`,
    /// ...).
    #[error("{message}")]
    Schema { code: ErrorCode, message: String },
    /// A fault of ours (storage, raft): logged in full, answered as a bare 500.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type BrokerResult<T> = Result<T, BrokerError>;

impl BrokerError {
    /// The stable code clients see for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            BrokerError::TopicNotFound(_) => ErrorCode::TopicNotFound,
            BrokerError::TopicExists(_) => ErrorCode::TopicExists,
            BrokerError::PartitionNotFound { .. } => ErrorCode::PartitionNotFound,
            BrokerError::MessageTooLarge { .. } => ErrorCode::MessageTooLarge,
            BrokerError::OffsetOutOfRange { .. } | BrokerError::CommitOutOfRange { .. } => {
                ErrorCode::OffsetOutOfRange
            }
            BrokerError::NoLeader(_) => ErrorCode::NoLeader,
            BrokerError::Timeout(_) => ErrorCode::Timeout,
            BrokerError::Unavailable(_) => ErrorCode::Unavailable,
            BrokerError::Overloaded(_) => ErrorCode::Overloaded,
            BrokerError::InsufficientStorage(_) => ErrorCode::InsufficientStorage,
            BrokerError::Conflict { code, .. }
            | BrokerError::NotFound { code, .. }
            | BrokerError::InvalidBatch { code, .. }
            | BrokerError::Schema { code, .. } => *code,
            BrokerError::NodeNotFound(_) => ErrorCode::NodeNotFound,
            BrokerError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequence,
            BrokerError::ProducerFenced(_) => ErrorCode::ProducerFenced,
            BrokerError::IdempotencyKeyReused(_) => ErrorCode::IdempotencyKeyReused,
            BrokerError::Internal(_) => ErrorCode::InternalError,
        }
    }
}
