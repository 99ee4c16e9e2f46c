//! The frames of group and queue subscriptions on `GET /v1/ws`: `subscribe` with `group` or
//! `subscription`, `commit`, `ack`, `nack`, `extend` (what the server delivers for them is in
//! `api::dto::streams`, shared with server-sent events).

use serde::Deserialize;
use utoipa::ToSchema;

use crate::api::dto::groups::{OffsetCommitDto, OffsetResetDto};
pub use crate::api::dto::streams::{
    AssignmentBody, CommitPosition, GroupDelivered, LeaseDelivered,
};
use crate::api::dto::subscriptions::AckIdText;

/// `subscribe` as a member of consumer group `group`, reading `topics`.
#[derive(Debug, Deserialize, ToSchema)]
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
    /// `"json"`: values (and keys) in the Confluent wire format come decoded as JSON, with the
    /// schema beside them (docs/schemas.md).
    #[serde(default)]
    pub decode: Option<crate::api::dto::consume::DecodeMode>,
}

/// `subscribe` to queue subscription `subscription`: leases, at most `credit` un-settled.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueSubscribeFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub subscription: String,
    #[serde(default)]
    pub credit: Option<u64>,
    /// `"json"`: values (and keys) in the Confluent wire format come decoded as JSON, with the
    /// schema beside them (docs/schemas.md).
    #[serde(default)]
    pub decode: Option<crate::api::dto::consume::DecodeMode>,
}

/// `commit`: offsets (each the next offset to read) of group subscription `id`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitFrame {
    #[allow(dead_code)]
    op: String,
    pub id: String,
    pub offsets: Vec<OffsetCommitDto>,
}

/// `ack`, `nack` or `extend` of leases of queue subscription `id`.
#[derive(Debug, Deserialize, ToSchema)]
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
