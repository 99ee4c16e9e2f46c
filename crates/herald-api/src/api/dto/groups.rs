//! Consumer group DTOs: joining, polling, committing, describing and resetting.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::consume::{read_limits, ConsumedMessageDto};
use crate::api::problem::ApiError;
use crate::broker::{
    CommitOffsets, GroupInfo, GroupPoll, GroupPollResult, GroupSummary, JoinGroup, Membership,
    ResetOffsets, ResetTarget, StoredOffset,
};
use crate::domain::groups::{OffsetReset, TopicPartition};

/// Where a member starts on a partition its group has no committed offset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OffsetResetDto {
    /// The oldest message still in the partition (the default).
    Earliest,
    /// Only messages produced after the member first polls.
    Latest,
}

impl From<OffsetResetDto> for OffsetReset {
    fn from(reset: OffsetResetDto) -> Self {
        match reset {
            OffsetResetDto::Earliest => OffsetReset::Earliest,
            OffsetResetDto::Latest => OffsetReset::Latest,
        }
    }
}

impl From<OffsetReset> for OffsetResetDto {
    fn from(reset: OffsetReset) -> Self {
        match reset {
            OffsetReset::Earliest => OffsetResetDto::Earliest,
            OffsetReset::Latest => OffsetResetDto::Latest,
        }
    }
}

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TopicPartitionDto {
    pub topic: String,
    pub partition: u32,
}

impl From<TopicPartition> for TopicPartitionDto {
    fn from(partition: TopicPartition) -> Self {
        TopicPartitionDto {
            topic: partition.topic,
            partition: partition.partition,
        }
    }
}

fn assignments_dto(assignments: Vec<TopicPartition>) -> Vec<TopicPartitionDto> {
    assignments.into_iter().map(Into::into).collect()
}

/// Body of `POST /v1/groups/{group}/members`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"topics": ["orders"], "session_timeout_ms": 10000}))]
pub struct JoinGroupRequest {
    /// The topics to read (1 to 100).
    #[schema(schema_with = crate::api::openapi::rules::member_topics_schema)]
    pub topics: Vec<String>,
    /// Without a heartbeat or poll for this long, the member is removed and its partitions
    /// go to the others. Default 10000; the node's limits apply (1000 to 300000 by default,
    /// `groups.min_session_timeout_ms` and `groups.max_session_timeout_ms`).
    #[serde(default)]
    #[schema(minimum = 1000, maximum = 300000)]
    pub session_timeout_ms: Option<u64>,
    /// Where members start on partitions without a committed offset; sets the group's policy.
    /// Default `earliest`.
    #[serde(default)]
    pub auto_offset_reset: Option<OffsetResetDto>,
}

impl JoinGroupRequest {
    /// The join of `owner` (the caller's subject; `None` with authentication off).
    pub fn into_domain(self, group: String, owner: Option<String>) -> JoinGroup {
        JoinGroup {
            group,
            owner,
            topics: self.topics,
            session_timeout: self.session_timeout_ms.map(Duration::from_millis),
            offset_reset: self.auto_offset_reset.map(Into::into),
        }
    }
}

/// A member's place in its group: answer of a join or a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"member_id": "member-1-5f0c2a9d13e4b7aa", "generation": 3,
    "assignments": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}]}))]
pub struct MembershipDto {
    pub member_id: String,
    /// Bumped by every rebalance; commits must name the current one.
    pub generation: u64,
    /// The partitions this member reads in this generation.
    pub assignments: Vec<TopicPartitionDto>,
}

impl From<Membership> for MembershipDto {
    fn from(membership: Membership) -> Self {
        MembershipDto {
            member_id: membership.member_id,
            generation: membership.generation,
            assignments: assignments_dto(membership.assignments),
        }
    }
}

/// Body of `POST /v1/groups/{group}/members/{member}/poll`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"max_messages": 100, "max_wait_ms": 1000, "auto_commit": false,
    "cursor": "AZvK3n0s8d2QBAEGb3JkZXJzAgAUAR4"}))]
pub struct PollRequest {
    /// 1 to 10000; default 100. Shared evenly by the member's partitions.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    pub max_messages: Option<usize>,
    /// Long poll: wait up to this long (0 to 60000 ms; default 0) for a first message.
    #[serde(default)]
    #[schema(maximum = 60000)]
    pub max_wait_ms: Option<u64>,
    /// Commit what this poll answers before answering (at-most-once). Default false: commit
    /// after processing (at-least-once).
    #[serde(default)]
    pub auto_commit: bool,
    /// The generation the member knows; if the group moved on, the poll is 409
    /// `stale_generation` instead of reading the new assignment.
    #[serde(default)]
    pub generation: Option<u64>,
    /// The `cursor` of the last poll answer the member received: the poll continues after
    /// the messages that answer delivered. Without it the poll starts at the committed
    /// offsets (a lost answer is delivered again; progress then needs commits). A cursor of
    /// another member is ignored; a malformed one, or one longer than the node's
    /// `groups.max_cursor_bytes` (65536 by default), is 400 `invalid_request`.
    #[serde(default)]
    #[schema(max_length = 65536, pattern = "^[A-Za-z0-9_-]*$")]
    pub cursor: Option<String>,
    /// `json`: values (and keys) in the Confluent wire format come back decoded as JSON, with
    /// the schema beside them.
    #[serde(default)]
    pub decode: Option<super::consume::DecodeMode>,
}

impl PollRequest {
    pub fn into_domain(self, group: String, member_id: String) -> Result<GroupPoll, ApiError> {
        let (max_messages, max_wait) = read_limits(self.max_messages, self.max_wait_ms)?;
        Ok(GroupPoll {
            group,
            member_id,
            generation: self.generation,
            max_messages,
            max_wait,
            auto_commit: self.auto_commit,
            cursor: self.cursor,
        })
    }
}

/// Answer of a poll.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PollResponse {
    /// Interleaved across the member's partitions; in offset order within each.
    pub messages: Vec<ConsumedMessageDto>,
    /// The generation the messages were read in: commit them with it.
    pub generation: u64,
    pub assignments: Vec<TopicPartitionDto>,
    /// Opaque: where the member's next poll continues, after these messages. Send it with
    /// the next poll.
    pub cursor: String,
}

impl PollResponse {
    /// The answer with values in the Confluent wire format decoded (`decode: "json"`).
    pub async fn decoded(broker: &crate::broker::Broker, result: GroupPollResult) -> Self {
        let mut decoder = super::decoded::ReadDecoder::new(broker);
        let mut messages = Vec::with_capacity(result.messages.len());
        for delivered in result.messages {
            messages.push(decoder.message(&delivered.topic, delivered.message).await);
        }
        PollResponse {
            messages,
            generation: result.generation,
            assignments: assignments_dto(result.assignments),
            cursor: result.cursor,
        }
    }
}

impl From<GroupPollResult> for PollResponse {
    fn from(result: GroupPollResult) -> Self {
        PollResponse {
            messages: result
                .messages
                .into_iter()
                .map(|delivered| {
                    ConsumedMessageDto::from_domain(&delivered.topic, delivered.message)
                })
                .collect(),
            generation: result.generation,
            assignments: assignments_dto(result.assignments),
            cursor: result.cursor,
        }
    }
}

/// One offset to commit: the next offset to read.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OffsetCommitDto {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// Body of `POST /v1/groups/{group}/offsets`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"member_id": "member-1-5f0c2a9d13e4b7aa", "generation": 3,
    "offsets": [{"topic": "orders", "partition": 0, "offset": 18}]}))]
pub struct CommitRequest {
    pub member_id: String,
    pub generation: u64,
    /// 1 to 10000 offsets.
    #[schema(min_items = 1, max_items = 10000)]
    pub offsets: Vec<OffsetCommitDto>,
}

impl CommitRequest {
    pub fn into_domain(self, group: String) -> CommitOffsets {
        CommitOffsets {
            group,
            member_id: self.member_id,
            generation: self.generation,
            offsets: self
                .offsets
                .into_iter()
                .map(|offset| {
                    (
                        TopicPartition::new(offset.topic, offset.partition),
                        offset.offset,
                    )
                })
                .collect(),
        }
    }
}

/// A committed offset as stored after a commit.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StoredOffsetDto {
    pub topic: String,
    pub partition: u32,
    /// The next offset the group reads: the commit's offset, or a higher one committed before
    /// (commits never go back).
    pub committed: u64,
}

/// Answer of a commit with `Prefer: return=representation`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"offsets": [{"topic": "orders", "partition": 0, "committed": 18}]}))]
pub struct CommittedOffsetsDto {
    /// In the order of the request.
    pub offsets: Vec<StoredOffsetDto>,
}

impl From<Vec<StoredOffset>> for CommittedOffsetsDto {
    fn from(offsets: Vec<StoredOffset>) -> Self {
        CommittedOffsetsDto {
            offsets: offsets
                .into_iter()
                .map(|offset| StoredOffsetDto {
                    topic: offset.partition.topic,
                    partition: offset.partition.partition,
                    committed: offset.committed,
                })
                .collect(),
        }
    }
}

/// Where `POST /v1/groups/{group}/offsets/reset` moves offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResetToDto {
    Earliest,
    Latest,
    /// The first offset with a timestamp at or after `timestamp`.
    Timestamp,
    /// `offset`, brought into each partition's bounds.
    Offset,
}

/// Body of `POST /v1/groups/{group}/offsets/reset`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"to": "timestamp", "timestamp": 1764400000000i64, "topics": ["orders"]}))]
pub struct ResetOffsetsRequest {
    pub to: ResetToDto,
    /// With `to: timestamp` (and only then): milliseconds since the Unix epoch, at least 0.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub timestamp: Option<i64>,
    /// With `to: offset` (and only then).
    #[serde(default)]
    pub offset: Option<u64>,
    /// The topics whose partitions move; default every topic the group has offsets for.
    #[serde(default)]
    #[schema(schema_with = crate::api::openapi::rules::optional_topic_list_schema)]
    pub topics: Vec<String>,
}

impl ResetOffsetsRequest {
    pub fn into_domain(self, group: String) -> Result<ResetOffsets, ApiError> {
        let to = match (self.to, self.timestamp, self.offset) {
            (ResetToDto::Earliest, None, None) => ResetTarget::Earliest,
            (ResetToDto::Latest, None, None) => ResetTarget::Latest,
            (ResetToDto::Timestamp, Some(timestamp), None) if timestamp >= 0 => {
                ResetTarget::Timestamp(timestamp)
            }
            (ResetToDto::Offset, None, Some(offset)) => ResetTarget::Offset(offset),
            _ => {
                return Err(ApiError::invalid_request(
                    "give `timestamp` (>= 0) exactly with to=timestamp and `offset` exactly with to=offset",
                ))
            }
        };
        for topic in &self.topics {
            crate::api::dto::topic::check_topic_name(topic)?;
        }
        Ok(ResetOffsets {
            group,
            topics: self.topics,
            to,
        })
    }
}

/// A member as `GET /v1/groups/{group}` shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupMemberDto {
    pub member_id: String,
    pub topics: Vec<String>,
    pub session_timeout_ms: u64,
    pub joined_at: i64,
    pub assignments: Vec<TopicPartitionDto>,
}

/// A partition's committed offset and lag.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupOffsetDto {
    pub topic: String,
    pub partition: u32,
    /// The next offset the group reads; null when it never committed this partition.
    pub committed: Option<u64>,
    /// The offset after the last readable message; null for a partition of a deleted topic.
    pub high_watermark: Option<u64>,
    /// `high_watermark - committed`: messages not yet processed.
    pub lag: Option<u64>,
}

/// Answer of `GET /v1/groups/{group}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"group": "billing", "state": "stable", "generation": 3,
    "auto_offset_reset": "earliest",
    "members": [{"member_id": "member-1-5f0c2a9d13e4b7aa", "topics": ["orders"],
                 "session_timeout_ms": 10000, "joined_at": 1764400000000i64,
                 "assignments": [{"topic": "orders", "partition": 0}]}],
    "offsets": [{"topic": "orders", "partition": 0, "committed": 15, "high_watermark": 18, "lag": 3}]}))]
pub struct GroupDto {
    pub group: String,
    /// `stable` (it has members) or `empty`.
    pub state: String,
    pub generation: u64,
    pub auto_offset_reset: OffsetResetDto,
    pub members: Vec<GroupMemberDto>,
    /// Every partition of the subscribed topics, and every partition with a committed offset.
    pub offsets: Vec<GroupOffsetDto>,
}

impl From<GroupInfo> for GroupDto {
    fn from(info: GroupInfo) -> Self {
        GroupDto {
            group: info.group,
            state: info.state.to_string(),
            generation: info.generation,
            auto_offset_reset: info.offset_reset.into(),
            members: info
                .members
                .into_iter()
                .map(|member| GroupMemberDto {
                    member_id: member.member_id,
                    topics: member.topics,
                    session_timeout_ms: member.session_timeout_ms,
                    joined_at: member.joined_at_ms,
                    assignments: assignments_dto(member.assignments),
                })
                .collect(),
            offsets: info
                .offsets
                .into_iter()
                .map(|offset| GroupOffsetDto {
                    topic: offset.topic,
                    partition: offset.partition,
                    committed: offset.committed,
                    high_watermark: offset.high_watermark,
                    lag: offset.lag,
                })
                .collect(),
        }
    }
}

/// A group as `GET /v1/groups` lists it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupSummaryDto {
    pub group: String,
    pub state: String,
    pub generation: u64,
    pub members: usize,
    /// Summed over the partitions with a committed offset.
    pub lag: u64,
}

impl From<GroupSummary> for GroupSummaryDto {
    fn from(summary: GroupSummary) -> Self {
        GroupSummaryDto {
            group: summary.group,
            state: summary.state.to_string(),
            generation: summary.generation,
            members: summary.members,
            lag: summary.total_lag,
        }
    }
}

/// Answer of `GET /v1/groups`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GroupListDto {
    pub groups: Vec<GroupSummaryDto>,
}
