//! One consumer group's replicated state and how each command changes it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{assign, GroupCommand, GroupOutcome, OffsetReset, PositionMove, TopicPartition};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub member_id: String,
    /// Subscribed topics, sorted.
    pub topics: Vec<String>,
    pub session_timeout_ms: u64,
    pub joined_at_ms: i64,
    /// The partitions this member reads in the current generation, sorted.
    pub assignments: Vec<TopicPartition>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    /// The next offset to read.
    pub offset: u64,
    pub committed_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    pub name: String,
    /// Bumped by every rebalance; commits name the generation they were made in, so a member
    /// that missed a rebalance cannot commit partitions that moved away from it.
    pub generation: u64,
    pub members: BTreeMap<String, GroupMember>,
    pub offset_reset: OffsetReset,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// Where each partition's owner reads next, when that is past the committed offset (polls
    /// delivered messages not committed yet). Replicated, so a member's next poll may go to
    /// any node; dropped when the partition changes owner, whose new owner starts from the
    /// committed offset.
    pub positions: BTreeMap<TopicPartition, u64>,
    /// The partition counts the current assignment was computed with.
    pub partition_counts: BTreeMap<String, u32>,
    /// When membership last changed.
    pub rebalanced_at_ms: i64,
}

impl ConsumerGroup {
    pub fn new(name: &str) -> Self {
        ConsumerGroup {
            name: name.to_string(),
            generation: 0,
            members: BTreeMap::new(),
            offset_reset: OffsetReset::default(),
            offsets: BTreeMap::new(),
            positions: BTreeMap::new(),
            partition_counts: BTreeMap::new(),
            rebalanced_at_ms: 0,
        }
    }

    /// `"stable"` with members, `"empty"` without.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "empty"
        } else {
            "stable"
        }
    }

    /// The topics some member subscribes to.
    pub fn topics(&self) -> BTreeSet<&str> {
        self.members
            .values()
            .flat_map(|member| member.topics.iter().map(String::as_str))
            .collect()
    }

    /// Where `member` reads `partition` next, if it is known: its position, else the
    /// committed offset. None means the group's reset policy decides.
    pub fn position(&self, partition: &TopicPartition) -> Option<u64> {
        self.positions
            .get(partition)
            .copied()
            .or_else(|| self.offsets.get(partition).map(|offset| offset.offset))
    }

    pub(super) fn apply(&mut self, command: &GroupCommand) -> GroupOutcome {
        match command {
            GroupCommand::Join {
                member_id,
                topics,
                session_timeout_ms,
                offset_reset,
                partition_counts,
                now_ms,
                max_members,
                ..
            } => {
                if self.members.len() >= *max_members as usize
                    && !self.members.contains_key(member_id)
                {
                    return GroupOutcome::TooManyMembers { max: *max_members };
                }
                if let Some(policy) = offset_reset {
                    self.offset_reset = *policy;
                }
                let mut topics = topics.clone();
                topics.sort();
                topics.dedup();
                self.members.insert(
                    member_id.clone(),
                    GroupMember {
                        member_id: member_id.clone(),
                        topics,
                        session_timeout_ms: *session_timeout_ms,
                        joined_at_ms: *now_ms,
                        assignments: Vec::new(),
                    },
                );
                self.rebalance(partition_counts, *now_ms);
                GroupOutcome::Joined {
                    generation: self.generation,
                    assignments: self.members[member_id].assignments.clone(),
                }
            }
            GroupCommand::Leave {
                member_id,
                partition_counts,
                now_ms,
                ..
            } => {
                if self.members.remove(member_id).is_none() {
                    return GroupOutcome::UnknownMember;
                }
                self.rebalance(partition_counts, *now_ms);
                GroupOutcome::Rebalanced {
                    generation: self.generation,
                }
            }
            GroupCommand::Expire {
                member_ids,
                partition_counts,
                now_ms,
                ..
            } => {
                let before = self.members.len();
                for member_id in member_ids {
                    self.members.remove(member_id);
                }
                if self.members.len() != before {
                    self.rebalance(partition_counts, *now_ms);
                }
                GroupOutcome::Rebalanced {
                    generation: self.generation,
                }
            }
            GroupCommand::Resize {
                partition_counts,
                now_ms,
                ..
            } => {
                let changed = self.topics().into_iter().any(|topic| {
                    partition_counts.get(topic).copied().unwrap_or(0)
                        != self.partition_counts.get(topic).copied().unwrap_or(0)
                });
                if changed {
                    self.rebalance(partition_counts, *now_ms);
                }
                GroupOutcome::Rebalanced {
                    generation: self.generation,
                }
            }
            GroupCommand::Commit {
                member_id,
                generation,
                offsets,
                now_ms,
                ..
            } => {
                if let Err(refused) = self.check_owner(member_id, *generation, offsets) {
                    return refused;
                }
                for (partition, offset) in offsets {
                    self.commit(partition, *offset, *now_ms);
                }
                GroupOutcome::Done
            }
            GroupCommand::Advance {
                member_id,
                generation,
                moves,
                commit,
                now_ms,
                ..
            } => self.advance(member_id, *generation, moves, *commit, *now_ms),
            GroupCommand::Reset {
                offsets, now_ms, ..
            } => {
                if !self.members.is_empty() {
                    return GroupOutcome::GroupNotEmpty {
                        members: self.members.len(),
                    };
                }
                for (partition, offset) in offsets {
                    self.positions.remove(partition);
                    self.offsets.insert(
                        partition.clone(),
                        CommittedOffset {
                            offset: *offset,
                            committed_at_ms: *now_ms,
                        },
                    );
                }
                GroupOutcome::Done
            }
            GroupCommand::Delete { .. } => GroupOutcome::Done,
        }
    }

    /// Moves a committed offset forward (never back: a late or repeated commit does not undo
    /// a newer one; only [`GroupCommand::Reset`] goes back). The owner's position is never
    /// behind what it committed.
    fn commit(&mut self, partition: &TopicPartition, offset: u64, now_ms: i64) {
        let committed = self
            .offsets
            .entry(partition.clone())
            .or_insert(CommittedOffset {
                offset,
                committed_at_ms: now_ms,
            });
        if offset >= committed.offset {
            *committed = CommittedOffset {
                offset,
                committed_at_ms: now_ms,
            };
        }
        if let Some(position) = self.positions.get_mut(partition) {
            *position = (*position).max(offset);
        }
    }

    fn advance(
        &mut self,
        member_id: &str,
        generation: u64,
        moves: &[PositionMove],
        commit: bool,
        now_ms: i64,
    ) -> GroupOutcome {
        let touched: Vec<(TopicPartition, u64)> = moves
            .iter()
            .map(|step| (step.partition.clone(), step.to))
            .collect();
        if let Err(refused) = self.check_owner(member_id, generation, &touched) {
            return refused;
        }
        for step in moves {
            let current = self.position(&step.partition);
            if current.is_some_and(|current| current != step.from) {
                return GroupOutcome::PositionMoved {
                    partition: step.partition.clone(),
                    current,
                };
            }
        }
        for step in moves {
            self.positions.insert(step.partition.clone(), step.to);
            if commit {
                self.commit(&step.partition, step.to, now_ms);
            }
        }
        GroupOutcome::Done
    }

    /// Whether `member_id` is a member in `generation` owning every partition named.
    fn check_owner(
        &self,
        member_id: &str,
        generation: u64,
        partitions: &[(TopicPartition, u64)],
    ) -> Result<(), GroupOutcome> {
        let Some(member) = self.members.get(member_id) else {
            return Err(GroupOutcome::UnknownMember);
        };
        if generation != self.generation {
            return Err(GroupOutcome::StaleGeneration {
                current: self.generation,
            });
        }
        for (partition, _) in partitions {
            if member.assignments.binary_search(partition).is_err() {
                return Err(GroupOutcome::NotAssigned(partition.clone()));
            }
        }
        Ok(())
    }

    /// Recomputes the assignment for the current members and bumps the generation. Counts
    /// missing from `partition_counts` are taken from the previous assignment; the
    /// positions of partitions that changed owner are dropped, and so are the offsets of
    /// topics that no longer exist (0 partitions).
    fn rebalance(&mut self, partition_counts: &BTreeMap<String, u32>, now_ms: i64) {
        let topics: BTreeSet<String> = self.topics().into_iter().map(String::from).collect();
        let counts: BTreeMap<String, u32> = topics
            .iter()
            .map(|topic| {
                let count = partition_counts
                    .get(topic)
                    .or_else(|| self.partition_counts.get(topic))
                    .copied()
                    .unwrap_or(0);
                (topic.clone(), count)
            })
            .collect();
        let previous: BTreeMap<TopicPartition, String> = self
            .members
            .values()
            .flat_map(|member| {
                member
                    .assignments
                    .iter()
                    .map(|partition| (partition.clone(), member.member_id.clone()))
            })
            .collect();
        let subscriptions = self
            .members
            .iter()
            .map(|(member_id, member)| {
                (
                    member_id.clone(),
                    member.topics.iter().cloned().collect::<BTreeSet<_>>(),
                )
            })
            .collect();
        let assignment = assign(&subscriptions, &previous, &counts);
        let mut owners = BTreeMap::new();
        for (member_id, partitions) in assignment {
            for partition in &partitions {
                owners.insert(partition.clone(), member_id.clone());
            }
            if let Some(member) = self.members.get_mut(&member_id) {
                member.assignments = partitions;
            }
        }
        self.positions.retain(|partition, _| {
            owners.contains_key(partition) && previous.get(partition) == owners.get(partition)
        });
        let gone: Vec<String> = partition_counts
            .iter()
            .filter(|(_, count)| **count == 0)
            .map(|(topic, _)| topic.clone())
            .collect();
        self.offsets
            .retain(|partition, _| !gone.contains(&partition.topic));
        self.partition_counts = counts;
        self.generation += 1;
        self.rebalanced_at_ms = now_ms;
    }
}
