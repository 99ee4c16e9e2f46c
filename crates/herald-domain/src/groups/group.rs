//! One consumer group's replicated state and how each command changes it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{assign, GroupCommand, GroupOutcome, OffsetReset, OffsetSwap, TopicPartition};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub member_id: String,
    /// The principal (a token's subject) that joined it: only it polls, heartbeats, commits
    /// for and removes the member. `None` when authentication was off.
    pub owner: Option<String>,
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
    /// The generation since which each assigned partition's owner has owned it without a
    /// break. A poll's cursor, made in some generation, speaks for a partition only if its
    /// owner held it since then: a partition that went away and came back starts again from
    /// the committed offset, as one that changed owner does.
    pub owned_since: BTreeMap<TopicPartition, u64>,
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
            owned_since: BTreeMap::new(),
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

    /// The committed offset of `partition`: the next offset the group reads there.
    pub fn committed(&self, partition: &TopicPartition) -> Option<u64> {
        self.offsets.get(partition).map(|offset| offset.offset)
    }

    /// The generation since which `partition`'s current owner has owned it without a break.
    pub fn owned_since(&self, partition: &TopicPartition) -> Option<u64> {
        self.owned_since.get(partition).copied()
    }

    pub(super) fn apply(&mut self, command: &GroupCommand) -> GroupOutcome {
        match command {
            GroupCommand::Join {
                member_id,
                owner,
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
                        owner: owner.clone(),
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
                past_log_end,
                now_ms,
                ..
            } => {
                if let Err(refused) = self.check_owner(member_id, *generation, offsets) {
                    return refused;
                }
                if let Some(partition) = past_log_end.first() {
                    return GroupOutcome::PastLogEnd(partition.clone());
                }
                for (partition, offset) in offsets {
                    self.commit(partition, *offset, *now_ms);
                }
                GroupOutcome::Committed {
                    offsets: offsets
                        .iter()
                        .map(|(partition, _)| {
                            (partition.clone(), self.committed(partition).unwrap_or(0))
                        })
                        .collect(),
                }
            }
            GroupCommand::CompareAndCommit {
                member_id,
                generation,
                offsets,
                now_ms,
                ..
            } => self.compare_and_commit(member_id, *generation, offsets, *now_ms),
            GroupCommand::Reset {
                offsets, now_ms, ..
            } => {
                if !self.members.is_empty() {
                    return GroupOutcome::GroupNotEmpty {
                        members: self.members.len(),
                    };
                }
                for (partition, offset) in offsets {
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
    /// a newer one; only [`GroupCommand::Reset`] goes back).
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
    }

    /// Sets every named offset if each is still what the poll read; otherwise changes nothing.
    /// The swap may set an offset lower than the one read: a committed offset past the end
    /// of a recreated topic's log is replaced by where the reset policy starts.
    fn compare_and_commit(
        &mut self,
        member_id: &str,
        generation: u64,
        swaps: &[OffsetSwap],
        now_ms: i64,
    ) -> GroupOutcome {
        let touched: Vec<(TopicPartition, u64)> = swaps
            .iter()
            .map(|swap| (swap.partition.clone(), swap.offset))
            .collect();
        if let Err(refused) = self.check_owner(member_id, generation, &touched) {
            return refused;
        }
        for swap in swaps {
            let current = self.committed(&swap.partition);
            if current != swap.expected {
                return GroupOutcome::OffsetMoved {
                    partition: swap.partition.clone(),
                    current,
                };
            }
        }
        for swap in swaps {
            self.offsets.insert(
                swap.partition.clone(),
                CommittedOffset {
                    offset: swap.offset,
                    committed_at_ms: now_ms,
                },
            );
        }
        GroupOutcome::Committed { offsets: touched }
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
    /// missing from `partition_counts` are taken from the previous assignment; a partition
    /// that keeps its owner keeps its `owned_since`, one that changes owner starts it anew;
    /// the offsets of topics that no longer exist (0 partitions) are dropped.
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
        let generation = self.generation + 1;
        let kept = std::mem::take(&mut self.owned_since);
        self.owned_since = owners
            .iter()
            .map(|(partition, owner)| {
                let since = match kept.get(partition) {
                    Some(since) if previous.get(partition) == Some(owner) => *since,
                    _ => generation,
                };
                (partition.clone(), since)
            })
            .collect();
        let gone: Vec<String> = partition_counts
            .iter()
            .filter(|(_, count)| **count == 0)
            .map(|(topic, _)| topic.clone())
            .collect();
        self.offsets
            .retain(|partition, _| !gone.contains(&partition.topic));
        self.partition_counts = counts;
        self.generation = generation;
        self.rebalanced_at_ms = now_ms;
    }
}
