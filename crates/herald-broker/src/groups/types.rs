//! What the broker's consumer group operations take and answer (domain side; the HTTP DTOs
//! live in `api::dto::groups`).

use std::time::Duration;

use crate::ConsumedMessage;
use herald_domain::groups::{OffsetReset, TopicPartition};

/// Limits on consumer groups, from the node configuration.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// The shortest and longest session a member may ask for.
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    /// The session a member gets when it asks for none.
    pub default_session_timeout: Duration,
    /// The most members one group may have.
    pub max_members: u32,
    /// The longest poll cursor a request may carry, in characters; an answer's cursor is kept
    /// within it too (see `cursor`).
    pub max_cursor_bytes: usize,
    /// The most groups that get their own metric series; the others are counted, not listed.
    pub max_metric_groups: usize,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            min_session_timeout: Duration::from_secs(1),
            max_session_timeout: Duration::from_secs(300),
            default_session_timeout: Duration::from_secs(10),
            max_members: 1000,
            max_cursor_bytes: DEFAULT_MAX_CURSOR_BYTES,
            max_metric_groups: 1000,
        }
    }
}

/// The default of [`GroupOptions::max_cursor_bytes`]: room for a cursor of several thousand
/// partitions.
pub const DEFAULT_MAX_CURSOR_BYTES: usize = 64 * 1024;

/// The most topics one member may subscribe to.
pub const MAX_GROUP_TOPICS: usize = 100;
/// The most offsets one commit may carry.
pub const MAX_COMMIT_OFFSETS: usize = 10_000;

#[derive(Debug, Clone)]
pub struct JoinGroup {
    pub group: String,
    /// Who joins: the principal's subject, or `None` with authentication off. The member is
    /// theirs alone (see `GroupService::group_member`).
    pub owner: Option<String>,
    pub topics: Vec<String>,
    pub session_timeout: Option<Duration>,
    pub offset_reset: Option<OffsetReset>,
}

/// A member's place in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub member_id: String,
    pub generation: u64,
    pub assignments: Vec<TopicPartition>,
}

pub struct GroupPoll {
    pub group: String,
    pub member_id: String,
    /// The generation the member believes in; a poll naming an older one is refused.
    pub generation: Option<u64>,
    pub max_messages: usize,
    pub max_wait: Duration,
    pub auto_commit: bool,
    /// The cursor of the last answer the member received: where this poll continues.
    pub cursor: Option<String>,
}

/// A message a group poll delivers, with its topic (a member may read several).
#[derive(Debug, Clone)]
pub struct GroupMessage {
    pub topic: String,
    pub message: ConsumedMessage,
}

pub struct GroupPollResult {
    pub generation: u64,
    pub assignments: Vec<TopicPartition>,
    pub messages: Vec<GroupMessage>,
    /// Where the next poll continues, after these messages: the client sends it back.
    pub cursor: String,
}

pub struct CommitOffsets {
    pub group: String,
    pub member_id: String,
    pub generation: u64,
    pub offsets: Vec<(TopicPartition, u64)>,
}

/// A committed offset as stored after a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOffset {
    pub partition: TopicPartition,
    /// The next offset the group reads (never lower than before the commit).
    pub committed: u64,
}

/// Where an operator moves a group's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTarget {
    Earliest,
    Latest,
    /// The first offset with a timestamp at or after this one.
    Timestamp(i64),
    /// This offset, brought into the partition's current bounds.
    Offset(u64),
}

pub struct ResetOffsets {
    pub group: String,
    /// The topics whose partitions move; empty means every topic the group has offsets for.
    pub topics: Vec<String>,
    pub to: ResetTarget,
}

#[derive(Debug, Clone)]
pub struct GroupMemberInfo {
    pub member_id: String,
    pub topics: Vec<String>,
    pub session_timeout_ms: u64,
    pub joined_at_ms: i64,
    pub assignments: Vec<TopicPartition>,
}

#[derive(Debug, Clone)]
pub struct GroupOffsetInfo {
    pub topic: String,
    pub partition: u32,
    pub committed: Option<u64>,
    pub high_watermark: Option<u64>,
    /// `high_watermark - committed`, when both are known.
    pub lag: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub group: String,
    pub state: &'static str,
    pub generation: u64,
    pub offset_reset: OffsetReset,
    pub members: Vec<GroupMemberInfo>,
    pub offsets: Vec<GroupOffsetInfo>,
}

#[derive(Debug, Clone)]
pub struct GroupSummary {
    pub group: String,
    pub state: &'static str,
    pub generation: u64,
    pub members: usize,
    /// Summed over the partitions with a committed offset.
    pub total_lag: u64,
}

/// The groups' gauges as `/metrics` shows them, computed when scraped so a deleted group's
/// series go with it.
#[derive(Debug, Clone, Default)]
pub struct GroupGauges {
    /// Every group, listed or not.
    pub total_groups: usize,
    /// The first [`GroupOptions::max_metric_groups`] groups by name.
    pub listed: Vec<GroupGauge>,
}

#[derive(Debug, Clone)]
pub struct GroupGauge {
    pub group: String,
    pub members: usize,
    pub generation: u64,
    /// Per topic, summed over the partitions with a committed offset.
    pub lag: Vec<(String, u64)>,
}
