//! The broker layer's error: what a client did wrong, or why the service could not do it.
//! `api::problem` maps each variant to one HTTP status and one stable `code`.

use thiserror::Error;

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
    #[error("message of {size} bytes exceeds the topic's max_message_bytes of {max}")]
    MessageTooLarge { size: usize, max: u32 },
    #[error("offset {offset} is outside the log [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
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
    /// A conflict with the cluster's state, with its stable code (e.g. `node_exists`).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("node {0} is not in the cluster")]
    NodeNotFound(u64),
    /// Something named in the path does not exist, with its stable code (e.g.
    /// `group_not_found`, `unknown_member`).
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
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
    /// A fault of ours (storage, raft): logged in full, answered as a bare 500.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type BrokerResult<T> = Result<T, BrokerError>;
