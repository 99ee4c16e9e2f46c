//! What crosses the wire when a request is forwarded to a partition's leader (postcard
//! bodies of the cluster's broker service): the requests, the answers and the errors a leader
//! answers with. New variants go at the end of each enum, so nodes of different versions keep
//! understanding the old ones.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::idempotence::{Landing, OnceClaim};
use super::requests::waiters::Delivery;
use super::{BrokerError, OffsetSpec};
use crate::domain::subscriptions::RetryPolicy;
use crate::domain::Compression;
use crate::raft::{QueueCommand, QueueOutcome};

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum ForwardRequest {
    Append {
        group: u64,
        /// The records, in the stored batch layout, uncompressed.
        batch: Bytes,
        compression: Compression,
        /// `acks=leader`: answer at the leader's own fsync.
        leader_ack: bool,
    },
    Read {
        group: u64,
        from: WireOffset,
        max_records: usize,
        max_bytes: usize,
        max_wait_ms: u64,
    },
    OffsetForTimestamp {
        group: u64,
        timestamp: i64,
    },
    /// An idempotent produce's share of one partition: appended alone, through the leader's
    /// dedup window. The producer stamp is in the batch header.
    AppendOnce {
        group: u64,
        /// The records, in the stored batch layout, uncompressed, with the producer stamp.
        batch: Bytes,
        compression: Compression,
        claim: OnceClaim,
    },
    /// A change of a subscription's delivery state on the partition; the leader stamps its
    /// clock on it.
    Queue {
        group: u64,
        command: QueueCommand,
    },
    /// A responder's reply for a request waiting on the receiving node (`broker::requests`).
    Reply {
        /// The requester process's instance number, from its `reply_to`.
        instance: u64,
        correlation_id: u128,
        /// The value was sent as JSON (`value`), not bytes (`value_b64`).
        json: bool,
        value: Bytes,
        headers: Vec<(String, String)>,
    },
    /// A subscription's counts and oldest unacked age on the partition, as its leader has
    /// applied them.
    QueueStats {
        group: u64,
        subscription: u64,
    },
    /// Wait (up to `max_wait_ms`) until a lease of the subscription on the partition could get
    /// something; answered then, or at the deadline, or when the node stops leading.
    QueueWait {
        group: u64,
        subscription: u64,
        retry: RetryPolicy,
        max_wait_ms: u64,
    },
    /// A producer's batch in the stored layout (`application/vnd.herald.batch`), checked by
    /// the node it was sent to: appended alone and byte for byte. Answered with `Appended`.
    AppendStored {
        group: u64,
        batch: Bytes,
        /// `acks=leader`: answer at the leader's own fsync.
        leader_ack: bool,
    },
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) enum WireOffset {
    Earliest,
    Latest,
    At(u64),
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum ForwardReply {
    Appended(Result<u64, WireError>),
    Read(Result<RawRead, WireError>),
    Offset(Result<u64, WireError>),
    AppendedOnce(Result<Landing, WireError>),
    Queue(Result<QueueOutcome, WireError>),
    Replied(Result<Delivery, WireError>),
    QueueStats(Result<WireStats, WireError>),
    QueueWaited(Result<(), WireError>),
}

/// [`super::queue::stats::QueueStats`] on the wire.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct WireStats {
    pub counts: WireCounts,
    pub oldest_unacked_age_ms: Option<u64>,
}

/// [`crate::raft::QueueCounts`] on the wire: backlog, in flight, delayed, dead-lettered.
pub(super) type WireCounts = (u64, u64, u64, u64);

/// The errors a leader answers a forwarded request with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum WireError {
    /// This node does not lead the group: nothing was written, ask the leader.
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
}

/// Stored batches from a partition's leader, with its watermarks after the read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RawRead {
    /// The offset the read started at (resolved from earliest/latest).
    pub from: u64,
    pub batches: Vec<(u64, Bytes)>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
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
            other => WireError::Failed(other.to_string()),
        }
    }
}

impl WireError {
    pub(super) fn into_broker(self, group: u64) -> BrokerError {
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
        }
    }
}

impl From<OffsetSpec> for WireOffset {
    fn from(spec: OffsetSpec) -> Self {
        match spec {
            OffsetSpec::Earliest => WireOffset::Earliest,
            OffsetSpec::Latest => WireOffset::Latest,
            OffsetSpec::At(offset) => WireOffset::At(offset),
        }
    }
}

impl From<WireOffset> for OffsetSpec {
    fn from(spec: WireOffset) -> Self {
        match spec {
            WireOffset::Earliest => OffsetSpec::Earliest,
            WireOffset::Latest => OffsetSpec::Latest,
            WireOffset::At(offset) => OffsetSpec::At(offset),
        }
    }
}
