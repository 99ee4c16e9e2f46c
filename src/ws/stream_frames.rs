//! The frames of group and queue subscriptions on `GET /v1/ws`: `subscribe` with `group` or
//! `subscription`, `commit`, `ack`, `nack`, `extend`, and what the server delivers for them.

use serde::{Deserialize, Serialize};

use crate::api::dto::consume::ConsumedMessageDto;
use crate::api::dto::groups::{OffsetCommitDto, OffsetResetDto, TopicPartitionDto};
use crate::api::dto::subscriptions::AckIdText;

/// `subscribe` as a member of consumer group `group`, reading `topics`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSubscribeFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub group: String,
    pub topics: Vec<String>,
    /// The member's session: the server heartbeats for the socket well within it.
    #[serde(default)]
    pub session_timeout_ms: Option<u64>,
    #[serde(default)]
    pub auto_offset_reset: Option<OffsetResetDto>,
    #[serde(default)]
    pub credit: Option<u64>,
    /// Commit what is delivered as it is delivered (at most once); default `false`.
    #[serde(default)]
    pub auto_commit: bool,
}

/// `subscribe` to queue subscription `subscription`: leases, at most `credit` un-settled.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSubscribeFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub subscription: String,
    #[serde(default)]
    pub credit: Option<u64>,
}

/// `commit`: offsets (each the next offset to read) of group subscription `id`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub offsets: Vec<OffsetCommitDto>,
}

/// `ack`, `nack` or `extend` of leases of queue subscription `id`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub ack_ids: Vec<AckIdText>,
    /// `nack` only.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// `nack` only.
    #[serde(default)]
    pub dead_letter: bool,
    /// `extend` only (and required there).
    #[serde(default)]
    pub ack_deadline_ms: Option<u64>,
}

/// A message delivered to a group subscription, with the offset that commits it.
#[derive(Debug, Serialize)]
pub struct GroupDelivered {
    /// Send this back in a `commit` (or `POST /v1/groups/{group}/offsets`) once processed:
    /// the next offset to read in the message's partition.
    pub commit: CommitPosition,
    #[serde(flatten)]
    pub message: ConsumedMessageDto,
}

#[derive(Debug, Serialize)]
pub struct CommitPosition {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// A lease delivered to a queue subscription: ack it with `ack_id`.
#[derive(Debug, Serialize)]
pub struct LeaseDelivered {
    pub ack_id: String,
    pub delivery_attempt: u32,
    #[serde(flatten)]
    pub message: ConsumedMessageDto,
}

/// The member's place after a join or a rebalance.
#[derive(Debug, Serialize)]
pub struct AssignmentBody {
    pub member_id: String,
    pub generation: u64,
    pub assignments: Vec<TopicPartitionDto>,
}
