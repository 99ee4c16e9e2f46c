//! Consumer groups: members, which partitions each reads, and the group's offsets.
//!
//! The state is replicated by the metadata raft group: every change is a [`GroupCommand`]
//! applied by [`ConsumerGroups::apply`] on every node, deterministically (times, new member
//! ids and partition counts are decided by the proposer and carried in the command). So any
//! node can answer for any group, and losing a node loses no member, assignment or offset.
//! What is not replicated is liveness: heartbeats go to the metadata leader, which proposes
//! [`GroupCommand::Expire`] for members whose session ran out.

mod assign;
mod group;
#[cfg(test)]
mod tests;

pub use assign::assign;
pub use group::{CommittedOffset, ConsumerGroup, GroupMember};

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.topic, self.partition)
    }
}

/// Where a member starts on a partition the group has no committed offset for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OffsetReset {
    /// The log start: nothing already in the partition is skipped. The default, so that a
    /// partition moving between members before any commit loses nothing.
    #[default]
    Earliest,
    /// The high watermark when the member first reads: only new messages.
    Latest,
}

/// A conditional commit: `partition`'s committed offset becomes `offset` only if it is still
/// `expected` (None: the group has none yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetSwap {
    pub partition: TopicPartition,
    pub expected: Option<u64>,
    pub offset: u64,
}

/// A change to a consumer group, replicated through the metadata group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupCommand {
    /// A new member joins (creating the group if needed): the group rebalances.
    Join {
        group: String,
        member_id: String,
        /// Who joins (a token's subject; `None` with authentication off): the member is theirs.
        owner: Option<String>,
        topics: Vec<String>,
        session_timeout_ms: u64,
        /// Sets the group's reset policy when given.
        offset_reset: Option<OffsetReset>,
        /// Partition counts of the topics involved, as the proposer's metadata had them.
        partition_counts: BTreeMap<String, u32>,
        now_ms: i64,
        /// The most members the group may have.
        max_members: u32,
    },
    /// A member leaves on its own: the group rebalances.
    Leave {
        group: String,
        member_id: String,
        partition_counts: BTreeMap<String, u32>,
        now_ms: i64,
    },
    /// The metadata leader saw no heartbeat from these members within their session timeout.
    Expire {
        group: String,
        member_ids: Vec<String>,
        partition_counts: BTreeMap<String, u32>,
        now_ms: i64,
    },
    /// Subscribed topics changed partition counts (grew, or were deleted): rebalance.
    Resize {
        group: String,
        partition_counts: BTreeMap<String, u32>,
        now_ms: i64,
    },
    /// A member commits offsets of its partitions (the next offset to read).
    Commit {
        group: String,
        member_id: String,
        generation: u64,
        offsets: Vec<(TopicPartition, u64)>,
        /// The partitions whose offset the proposer found past the log's end (which is not
        /// part of the group state): once the member's ownership is checked, such a commit
        /// is refused as a whole (`PastLogEnd`), so the refusal a client sees is the group's
        /// when both apply.
        past_log_end: Vec<TopicPartition>,
        now_ms: i64,
    },
    /// What a poll needs replicated, compare-and-set on the committed offsets it read: where
    /// the reset policy started a partition the group had no (or a lost) committed offset
    /// for, so the next poll does not choose again; and with auto-commit, what it delivered.
    /// Refused as a whole (`OffsetMoved`) if any offset changed since the poll read it.
    CompareAndCommit {
        group: String,
        member_id: String,
        generation: u64,
        offsets: Vec<OffsetSwap>,
        now_ms: i64,
    },
    /// An operator sets offsets of a group with no members (possibly backwards).
    Reset {
        group: String,
        offsets: Vec<(TopicPartition, u64)>,
        now_ms: i64,
    },
    /// Forgets a group with no members, offsets included.
    Delete { group: String },
}

impl GroupCommand {
    pub fn group(&self) -> &str {
        match self {
            GroupCommand::Join { group, .. }
            | GroupCommand::Leave { group, .. }
            | GroupCommand::Expire { group, .. }
            | GroupCommand::Resize { group, .. }
            | GroupCommand::Commit { group, .. }
            | GroupCommand::CompareAndCommit { group, .. }
            | GroupCommand::Reset { group, .. }
            | GroupCommand::Delete { group } => group,
        }
    }
}

impl fmt::Display for GroupCommand {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, group) = match self {
            GroupCommand::Join { .. } => ("join", self.group()),
            GroupCommand::Leave { .. } => ("leave", self.group()),
            GroupCommand::Expire { .. } => ("expire members of", self.group()),
            GroupCommand::Resize { .. } => ("resize", self.group()),
            GroupCommand::Commit { .. } => ("commit offsets of", self.group()),
            GroupCommand::CompareAndCommit { .. } => {
                ("compare and commit offsets of", self.group())
            }
            GroupCommand::Reset { .. } => ("reset offsets of", self.group()),
            GroupCommand::Delete { .. } => ("delete", self.group()),
        };
        write!(formatter, "{what} group {group}")
    }
}

/// What applying a [`GroupCommand`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupOutcome {
    /// The member's view after a join: its generation and partitions.
    Joined {
        generation: u64,
        assignments: Vec<TopicPartition>,
    },
    /// Membership changed (or not): the group's generation now.
    Rebalanced {
        generation: u64,
    },
    Done,
    /// A commit was applied: the committed offsets of the partitions it named, as stored
    /// (a commit never moves one back, so they may be above what it asked).
    Committed {
        offsets: Vec<(TopicPartition, u64)>,
    },
    GroupNotFound,
    UnknownMember,
    /// The command named an older generation than the group's.
    StaleGeneration {
        current: u64,
    },
    /// The member does not own this partition in this generation.
    NotAssigned(TopicPartition),
    /// A commit named an offset past this partition's high watermark: nothing was stored.
    PastLogEnd(TopicPartition),
    /// A compare-and-commit found an offset changed since the poll read it (another poll or a
    /// commit of the same member came first).
    OffsetMoved {
        partition: TopicPartition,
        current: Option<u64>,
    },
    /// The operation needs a group without members.
    GroupNotEmpty {
        members: usize,
    },
    TooManyMembers {
        max: u32,
    },
}

/// Every consumer group, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroups {
    pub groups: BTreeMap<String, ConsumerGroup>,
}

impl ConsumerGroups {
    /// Applies one command. The group it names is the only one it changes; afterwards that
    /// group either is in `groups` (possibly changed) or was removed.
    pub fn apply(&mut self, command: &GroupCommand) -> GroupOutcome {
        let name = command.group();
        if let GroupCommand::Delete { .. } = command {
            return match self.groups.get(name) {
                None => GroupOutcome::GroupNotFound,
                Some(group) if !group.members.is_empty() => GroupOutcome::GroupNotEmpty {
                    members: group.members.len(),
                },
                Some(_) => {
                    self.groups.remove(name);
                    GroupOutcome::Done
                }
            };
        }
        let creates = matches!(
            command,
            GroupCommand::Join { .. } | GroupCommand::Reset { .. }
        );
        if !creates && !self.groups.contains_key(name) {
            return match command {
                GroupCommand::Leave { .. }
                | GroupCommand::Commit { .. }
                | GroupCommand::CompareAndCommit { .. } => GroupOutcome::UnknownMember,
                _ => GroupOutcome::GroupNotFound,
            };
        }
        let group = self
            .groups
            .entry(name.to_string())
            .or_insert_with(|| ConsumerGroup::new(name));
        let outcome = group.apply(command);
        // A group with nothing left to remember (no member, no offset) goes away, as if it
        // never existed.
        if group.members.is_empty() && group.offsets.is_empty() {
            self.groups.remove(name);
        }
        outcome
    }

    pub fn get(&self, name: &str) -> Option<&ConsumerGroup> {
        self.groups.get(name)
    }
}
