//! Committing offsets: the next offset the group reads in each partition.
//!
//! A commit past a partition's high watermark would name messages that do not exist yet:
//! every later (lower) commit would then be a silent no-op, since commits never go back, and
//! the lag would read 0 forever. So each offset is checked against the partition's end before
//! anything is proposed, and one offset past it refuses the whole commit.

use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};

use super::refusal::{check_group_name, refusal};
use super::super::topics::now_ms;
use crate::broker::{
    Broker, BrokerError, BrokerResult, CommitOffsets, OffsetSpec, StoredOffset,
    MAX_COMMIT_OFFSETS,
};
use crate::domain::groups::{GroupCommand, GroupOutcome, TopicPartition};
use crate::raft::ReadLimits;

/// How many partition leaders one commit asks at once for their high watermark.
const LEADER_CHECKS_IN_FLIGHT: usize = 16;

impl Broker {
    /// Commits the offsets of a member's partitions; answers them as stored afterwards
    /// (a commit never moves an offset back, so a stored one may be above the request's).
    pub async fn commit_offsets(&self, request: CommitOffsets) -> BrokerResult<Vec<StoredOffset>> {
        check_group_name(&request.group)?;
        if request.offsets.is_empty() || request.offsets.len() > MAX_COMMIT_OFFSETS {
            return Err(BrokerError::InvalidRequest(format!(
                "a commit carries between 1 and {MAX_COMMIT_OFFSETS} offsets"
            )));
        }
        self.check_within_logs(&request.offsets).await?;
        let command = GroupCommand::Commit {
            group: request.group.clone(),
            member_id: request.member_id.clone(),
            generation: request.generation,
            offsets: request.offsets,
            now_ms: now_ms(),
        };
        match self.cluster().propose_group(command).await? {
            GroupOutcome::Committed { offsets } => Ok(offsets
                .into_iter()
                .map(|(partition, committed)| StoredOffset {
                    partition,
                    committed,
                })
                .collect()),
            other => Err(refusal(&request.group, &request.member_id, other)),
        }
    }

    /// Refuses an offset above its partition's high watermark. The watermark known here (a
    /// local replica's, or the leader's last report) can only lag the leader's, never lead
    /// it, so only an offset above it is asked of the leader, through the same forwarded
    /// read as any fetch. A partition this node does not know is left to the group, which
    /// refuses partitions the member is not assigned.
    async fn check_within_logs(&self, offsets: &[(TopicPartition, u64)]) -> BrokerResult<()> {
        let metadata = self.cluster().metadata();
        let above_local: Vec<(TopicPartition, u64, u64)> = offsets
            .iter()
            .filter_map(|(partition, offset)| {
                let group = metadata
                    .topics
                    .get(&partition.topic)?
                    .partitions
                    .get(partition.partition as usize)?
                    .group_id;
                let known = self.cluster().partition_state(group).watermarks;
                (*offset > known.high_watermark).then(|| (partition.clone(), *offset, group))
            })
            .collect();
        stream::iter(above_local)
            .map(|(partition, offset, group)| async move {
                self.check_on_leader(&partition, offset, group).await
            })
            .buffer_unordered(LEADER_CHECKS_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    /// Asks the partition's leader to read at `offset`: it refuses an offset past its high
    /// watermark (after catching up with what its predecessor committed), and a read at or
    /// below it gathers at most one batch.
    async fn check_on_leader(
        &self,
        partition: &TopicPartition,
        offset: u64,
        group: u64,
    ) -> BrokerResult<()> {
        let limits = ReadLimits {
            max_records: 1,
            max_bytes: 1,
        };
        match self
            .read_batches(group, OffsetSpec::At(offset), limits, Duration::ZERO)
            .await
        {
            Ok(_) => Ok(()),
            Err(BrokerError::OffsetOutOfRange {
                log_start_offset,
                high_watermark,
                ..
            }) if offset > high_watermark => Err(BrokerError::CommitOutOfRange {
                topic: partition.topic.clone(),
                partition: partition.partition,
                offset,
                log_start_offset,
                high_watermark,
            }),
            // Below the log start (retention removed it): a harmless commit, the next poll
            // restarts where the reset policy says.
            Err(BrokerError::OffsetOutOfRange { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }
}
