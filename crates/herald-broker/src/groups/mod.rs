//! Consumer groups: joining, heartbeats, leaving, describing, resetting and deleting here;
//! committing in `commit`, polling in `poll` (with `cursor` and `poll_reads`), the gauges in
//! `gauges`. The state is replicated (see `domain::groups`); any node serves any group,
//! proposing changes through the metadata leader.

mod commit;
mod cursor;
mod gauges;
pub mod lag_age;
pub mod member_stream;
mod ownership;
mod poll;
mod poll_reads;
mod refusal;
pub mod types;

pub use ownership::MemberFacts;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use self::refusal::{check_group_name, group_not_found, not_empty, refusal, unknown_member};
use super::topics::now_ms;
use crate::broker_core::Core;
use crate::{
    BrokerError, BrokerResult, FetchService, GroupInfo, GroupMemberInfo, GroupOffsetInfo,
    GroupSummary, JoinGroup, Membership, ResetOffsets, ResetTarget, MAX_GROUP_TOPICS,
};
use herald_cluster::topic_partition_counts;
use herald_domain::groups::{ConsumerGroup, GroupCommand, GroupOutcome, TopicPartition};
use herald_domain::names::validate_public_topic_name;

/// Consumer groups: membership, rebalancing, polls, committed offsets, lag. The groups' state
/// is the cluster's (replicated by the metadata group); this service reads partitions through
/// [`FetchService`].
#[derive(Clone)]
pub struct GroupService {
    core: Arc<Core>,
    fetch: FetchService,
}

impl GroupService {
    pub(crate) fn new(core: Arc<Core>, fetch: FetchService) -> GroupService {
        GroupService { core, fetch }
    }

    pub async fn join_group(&self, request: JoinGroup) -> BrokerResult<Membership> {
        check_group_name(&request.group)?;
        let options = &self.core.options.groups;
        if request.topics.is_empty() || request.topics.len() > MAX_GROUP_TOPICS {
            return Err(BrokerError::InvalidRequest(format!(
                "a member subscribes to between 1 and {MAX_GROUP_TOPICS} topics"
            )));
        }
        let metadata = self.core.cluster().metadata().current();
        for topic in &request.topics {
            // Internal topics (the audit log) are the node's own: no member reads them.
            validate_public_topic_name("topic name", topic).map_err(BrokerError::InvalidRequest)?;
            if !metadata.topics.contains_key(topic) {
                return Err(BrokerError::TopicNotFound(topic.clone()));
            }
        }
        let session = request
            .session_timeout
            .unwrap_or(options.default_session_timeout);
        if session < options.min_session_timeout || session > options.max_session_timeout {
            return Err(BrokerError::InvalidRequest(format!(
                "session_timeout_ms must be between {} and {}",
                options.min_session_timeout.as_millis(),
                options.max_session_timeout.as_millis()
            )));
        }
        // Counts for every topic of the group after the join, as this node knows them: the
        // rebalance the join causes covers the other members' topics too.
        let known_topics: BTreeSet<String> = self.core.cluster().groups().read(|groups| {
            groups
                .get(&request.group)
                .map(|group| group.topics().into_iter().map(String::from).collect())
                .unwrap_or_default()
        });
        let partition_counts = topic_partition_counts(
            &metadata,
            known_topics
                .iter()
                .map(String::as_str)
                .chain(request.topics.iter().map(String::as_str)),
        );
        let member_id = new_member_id(self.core.cluster().node_id());
        let command = GroupCommand::Join {
            group: request.group.clone(),
            member_id: member_id.clone(),
            owner: request.owner,
            topics: request.topics,
            session_timeout_ms: session.as_millis() as u64,
            offset_reset: request.offset_reset,
            partition_counts,
            now_ms: now_ms(),
            max_members: options.max_members,
        };
        match self.core.cluster().groups().propose(command).await? {
            GroupOutcome::Joined {
                generation,
                assignments,
            } => {
                metrics::counter!("herald_group_rebalances_total", "cause" => "join").increment(1);
                Ok(Membership {
                    member_id,
                    generation,
                    assignments,
                })
            }
            other => Err(refusal(&request.group, &member_id, other)),
        }
    }

    /// Keeps a member's session alive; answers its generation and partitions.
    pub async fn group_heartbeat(&self, group: &str, member_id: &str) -> BrokerResult<Membership> {
        check_group_name(group)?;
        match self
            .core
            .cluster()
            .groups()
            .heartbeat(group, member_id)
            .await?
        {
            Some(view) => Ok(Membership {
                member_id: member_id.to_string(),
                generation: view.generation,
                assignments: view.assignments,
            }),
            None => Err(unknown_member(group, member_id)),
        }
    }

    pub async fn leave_group(&self, group: &str, member_id: &str) -> BrokerResult<()> {
        check_group_name(group)?;
        let partition_counts = self.group_partition_counts(group);
        let command = GroupCommand::Leave {
            group: group.to_string(),
            member_id: member_id.to_string(),
            partition_counts,
            now_ms: now_ms(),
        };
        match self.core.cluster().groups().propose(command).await? {
            GroupOutcome::Rebalanced { .. } => {
                metrics::counter!("herald_group_rebalances_total", "cause" => "leave").increment(1);
                Ok(())
            }
            other => Err(refusal(group, member_id, other)),
        }
    }

    pub fn describe_group(&self, name: &str) -> BrokerResult<GroupInfo> {
        check_group_name(name)?;
        let group = self
            .core
            .cluster()
            .groups()
            .read(|groups| groups.get(name).cloned())
            .ok_or_else(|| group_not_found(name))?;
        Ok(self.group_info(&group))
    }

    pub fn list_groups(&self) -> Vec<GroupSummary> {
        let groups: Vec<ConsumerGroup> = self
            .core
            .cluster()
            .groups()
            .read(|groups| groups.groups.values().cloned().collect());
        groups
            .iter()
            .map(|group| {
                let info = self.group_info(group);
                GroupSummary {
                    group: info.group,
                    state: info.state,
                    generation: info.generation,
                    members: info.members.len(),
                    total_lag: info.offsets.iter().filter_map(|offset| offset.lag).sum(),
                }
            })
            .collect()
    }

    /// Moves the offsets of a group without members; answers them as they are after.
    pub async fn reset_group_offsets(&self, request: ResetOffsets) -> BrokerResult<GroupInfo> {
        check_group_name(&request.group)?;
        let existing = self
            .core
            .cluster()
            .groups()
            .read(|groups| groups.get(&request.group).cloned());
        if let Some(group) = &existing {
            if !group.members.is_empty() {
                return Err(not_empty(&request.group, group.members.len()));
            }
        }
        let topics: BTreeSet<String> = if request.topics.is_empty() {
            existing
                .iter()
                .flat_map(|group| {
                    group
                        .offsets
                        .keys()
                        .map(|partition| partition.topic.clone())
                })
                .collect()
        } else {
            for topic in &request.topics {
                validate_public_topic_name("topic name", topic)
                    .map_err(BrokerError::InvalidRequest)?;
            }
            request.topics.iter().cloned().collect()
        };
        if topics.is_empty() {
            return Err(BrokerError::InvalidRequest(
                "name the topics to reset: the group has no offsets yet".into(),
            ));
        }
        let metadata = self.core.cluster().metadata().current();
        let mut offsets = Vec::new();
        for topic in &topics {
            let meta = metadata
                .topics
                .get(topic)
                .ok_or_else(|| BrokerError::TopicNotFound(topic.clone()))?;
            for (index, assignment) in meta.partitions.iter().enumerate() {
                let partition = index as u32;
                let marks = self
                    .core
                    .cluster()
                    .routing()
                    .partition_state(assignment.group_id)
                    .watermarks;
                let offset = match request.to {
                    ResetTarget::Earliest => marks.log_start_offset,
                    ResetTarget::Latest => marks.high_watermark,
                    ResetTarget::Offset(offset) => {
                        offset.clamp(marks.log_start_offset, marks.high_watermark)
                    }
                    ResetTarget::Timestamp(timestamp) => {
                        self.fetch
                            .offset_for_timestamp(topic, partition, timestamp)
                            .await?
                    }
                };
                offsets.push((TopicPartition::new(topic.clone(), partition), offset));
            }
        }
        let command = GroupCommand::Reset {
            group: request.group.clone(),
            offsets,
            now_ms: now_ms(),
        };
        match self.core.cluster().groups().propose(command).await? {
            GroupOutcome::Done => self.describe_group(&request.group),
            other => Err(refusal(&request.group, "", other)),
        }
    }

    /// Forgets a group without members, its offsets included.
    pub async fn delete_group(&self, name: &str) -> BrokerResult<()> {
        check_group_name(name)?;
        let command = GroupCommand::Delete {
            group: name.to_string(),
        };
        match self.core.cluster().groups().propose(command).await? {
            GroupOutcome::Done => Ok(()),
            other => Err(refusal(name, "", other)),
        }
    }

    /// Partition counts of the group's topics as this node's metadata has them.
    pub(crate) fn group_partition_counts(&self, group: &str) -> BTreeMap<String, u32> {
        let topics: Vec<String> = self.core.cluster().groups().read(|groups| {
            groups
                .get(group)
                .map(|group| group.topics().into_iter().map(String::from).collect())
                .unwrap_or_default()
        });
        topic_partition_counts(
            &self.core.cluster().metadata().current(),
            topics.iter().map(String::as_str),
        )
    }

    fn group_info(&self, group: &ConsumerGroup) -> GroupInfo {
        let metadata = self.core.cluster().metadata().current();
        // Every partition of the subscribed topics, and every partition with an offset.
        let mut partitions: BTreeSet<TopicPartition> = group.offsets.keys().cloned().collect();
        for topic in group.topics() {
            if let Some(meta) = metadata.topics.get(topic) {
                for partition in 0..meta.partitions.len() as u32 {
                    partitions.insert(TopicPartition::new(topic, partition));
                }
            }
        }
        let offsets = partitions
            .into_iter()
            .map(|partition| {
                let high_watermark = metadata
                    .topics
                    .get(&partition.topic)
                    .and_then(|meta| meta.partitions.get(partition.partition as usize))
                    .map(|assignment| {
                        self.core
                            .cluster()
                            .routing()
                            .partition_state(assignment.group_id)
                            .watermarks
                            .high_watermark
                    });
                let committed = group.offsets.get(&partition).map(|offset| offset.offset);
                let lag = match (high_watermark, committed) {
                    (Some(end), Some(committed)) => Some(end.saturating_sub(committed)),
                    _ => None,
                };
                GroupOffsetInfo {
                    topic: partition.topic,
                    partition: partition.partition,
                    committed,
                    high_watermark,
                    lag,
                }
            })
            .collect();
        GroupInfo {
            group: group.name.clone(),
            state: group.state(),
            generation: group.generation,
            offset_reset: group.offset_reset,
            members: group
                .members
                .values()
                .map(|member| GroupMemberInfo {
                    member_id: member.member_id.clone(),
                    topics: member.topics.clone(),
                    session_timeout_ms: member.session_timeout_ms,
                    joined_at_ms: member.joined_at_ms,
                    assignments: member.assignments.clone(),
                })
                .collect(),
            offsets,
        }
    }
}

/// A fresh member id: the node that admitted it and 64 random-enough bits (not a secret; it
/// only has to be unique within the group).
fn new_member_id(node_id: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("member-{node_id}-{:016x}", hasher.finish())
}
