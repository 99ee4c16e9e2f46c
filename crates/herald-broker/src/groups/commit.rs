//! Committing offsets: the next offset the group reads in each partition.
//!
//! A commit past a partition's high watermark would name messages that do not exist yet:
//! every later (lower) commit would then be a silent no-op, since commits never go back, and
//! the lag would read 0 forever. So each offset is checked against the partition's end before
//! the commit is proposed, and one offset past it refuses the whole commit (after the group's
//! own checks, so an unknown member hears that first).

use crate::GroupService;
use herald_domain::RaftGroupId;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};

use super::super::topics::now_ms;
use super::refusal::{check_group_name, refusal};
use crate::{
    BrokerError, BrokerResult, CommitOffsets, OffsetSpec, StoredOffset, MAX_COMMIT_OFFSETS,
};
use herald_domain::groups::{GroupCommand, GroupOutcome, TopicPartition};
use herald_raft::ReadLimits;

/// How many partition leaders one commit asks at once for their high watermark.
const LEADER_CHECKS_IN_FLIGHT: usize = 16;

impl GroupService {
    /// Commits the offsets of a member's partitions; answers them as stored afterwards
    /// (a commit never moves an offset back, so a stored one may be above the request's).
    pub async fn commit_offsets(&self, request: CommitOffsets) -> BrokerResult<Vec<StoredOffset>> {
        check_group_name(&request.group)?;
        if request.offsets.is_empty() || request.offsets.len() > MAX_COMMIT_OFFSETS {
            return Err(BrokerError::InvalidRequest(format!(
                "a commit carries between 1 and {MAX_COMMIT_OFFSETS} offsets"
            )));
        }
        let mut past_log_end = self.offsets_past_log_end(&request.offsets).await?;
        let command = GroupCommand::Commit {
            group: request.group.clone(),
            member_id: request.member_id.clone(),
            generation: request.generation,
            offsets: request.offsets,
            past_log_end: past_log_end.keys().cloned().collect(),
            now_ms: now_ms(),
        };
        match self.core.cluster().groups().propose(command).await? {
            GroupOutcome::Committed { offsets } => Ok(offsets
                .into_iter()
                .map(|(partition, committed)| StoredOffset {
                    partition,
                    committed,
                })
                .collect()),
            GroupOutcome::PastLogEnd(partition) => {
                Err(past_log_end.remove(&partition).unwrap_or_else(|| {
                    BrokerError::Internal(format!("{partition}: no bound was checked"))
                }))
            }
            other => Err(refusal(&request.group, &request.member_id, other)),
        }
    }

    /// The offsets past their partition's high watermark, each with its refusal. The
    /// watermark known here (a local replica's, or the leader's last report) can only lag
    /// the leader's, never lead it, so only an offset above it is asked of the leader,
    /// through the same forwarded read as any fetch. A partition this node does not know is
    /// left to the group, which refuses partitions the member is not assigned.
    async fn offsets_past_log_end(
        &self,
        offsets: &[(TopicPartition, u64)],
    ) -> BrokerResult<BTreeMap<TopicPartition, BrokerError>> {
        let metadata = self.core.cluster().metadata().current();
        let above_local: Vec<(TopicPartition, u64, RaftGroupId)> = offsets
            .iter()
            .filter_map(|(partition, offset)| {
                let group = metadata
                    .topics
                    .get(&partition.topic)?
                    .partitions
                    .get(partition.partition as usize)?
                    .group_id;
                let known = self
                    .core
                    .cluster()
                    .routing()
                    .partition_state(group)
                    .watermarks;
                (*offset > known.high_watermark).then(|| (partition.clone(), *offset, group))
            })
            .collect();
        let checked: Vec<Option<(TopicPartition, BrokerError)>> = stream::iter(above_local)
            .map(|(partition, offset, group)| async move {
                let refusal = self.check_on_leader(&partition, offset, group).await?;
                Ok::<_, BrokerError>(refusal.map(|refusal| (partition, refusal)))
            })
            .buffer_unordered(LEADER_CHECKS_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(checked.into_iter().flatten().collect())
    }

    /// Asks the partition's leader to read at `offset`: it refuses an offset past its high
    /// watermark (after catching up with what its predecessor committed), and a read at or
    /// below it gathers at most one batch. Answers the refusal, if the offset is past it.
    async fn check_on_leader(
        &self,
        partition: &TopicPartition,
        offset: u64,
        group: RaftGroupId,
    ) -> BrokerResult<Option<BrokerError>> {
        let limits = ReadLimits {
            max_records: 1,
            max_bytes: 1,
        };
        match self
            .fetch
            .read_batches(group, OffsetSpec::At(offset), limits, Duration::ZERO)
            .await
        {
            Ok(_) => Ok(None),
            Err(BrokerError::OffsetOutOfRange {
                log_start_offset,
                high_watermark,
                ..
            }) if offset > high_watermark => Ok(Some(BrokerError::CommitOutOfRange {
                topic: partition.topic.clone(),
                partition: partition.partition,
                offset,
                log_start_offset,
                high_watermark,
            })),
            // Below the log start (retention removed it): a harmless commit, the next poll
            // restarts where the reset policy says.
            Err(BrokerError::OffsetOutOfRange { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}
