//! Redrive DTOs: the wire form of `/v1/subscriptions/{sub}/redrive`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::broker::subscriptions::RedriveRequest;
use crate::domain::redrive::{RedriveJob, RedriveState};

/// Body of `POST /v1/subscriptions/{sub}/redrive`. Offsets are offsets of the dead-letter
/// topic, applied to each of its partitions.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"max_per_second": 100}))]
pub struct RedriveRequestDto {
    /// The first dead-letter offset to redrive, in each partition. Default: each partition's
    /// log start.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub from_offset: Option<u64>,
    /// The last dead-letter offset to redrive (inclusive), in each partition; at most each
    /// partition's end when the redrive starts. Default: that end.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub to_offset: Option<u64>,
    /// The most messages republished per second (1 to 10000). Default 100.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000, default = 100)]
    pub max_per_second: Option<u32>,
}

impl From<RedriveRequestDto> for RedriveRequest {
    fn from(dto: RedriveRequestDto) -> Self {
        RedriveRequest {
            from_offset: dto.from_offset,
            to_offset: dto.to_offset,
            max_per_second: dto.max_per_second,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RedriveStateDto {
    Running,
    Done,
    Failed,
    Cancelled,
}

/// One dead-letter partition of a redrive.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RedrivePartitionDto {
    pub partition: u32,
    /// Where the redrive started in this partition.
    pub from_offset: u64,
    /// Everything below it is done.
    pub next_offset: u64,
    /// Exclusive: the partition's end (or `to_offset + 1`) when the redrive started.
    pub end_offset: u64,
}

/// A redrive job and its progress.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RedriveDto {
    /// Unique over the cluster's life.
    pub id: u64,
    pub state: RedriveStateDto,
    /// Why it failed (`failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub dead_letter_topic: String,
    /// Messages republished to the subscription's topic so far.
    pub redriven: u64,
    /// Messages of the range left where they are: another subscription's dead letters.
    pub skipped: u64,
    /// Offsets in the range over every partition (an upper bound of `redriven + skipped`).
    pub total: u64,
    /// As asked; absent when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_offset: Option<u64>,
    pub max_per_second: u32,
    pub partitions: Vec<RedrivePartitionDto>,
    /// Epoch ms.
    pub started_at: i64,
    /// Epoch ms, once it is not running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
}

impl From<RedriveJob> for RedriveDto {
    fn from(job: RedriveJob) -> Self {
        RedriveDto {
            id: job.id,
            total: job.total(),
            state: match job.state {
                RedriveState::Running => RedriveStateDto::Running,
                RedriveState::Done => RedriveStateDto::Done,
                RedriveState::Failed => RedriveStateDto::Failed,
                RedriveState::Cancelled => RedriveStateDto::Cancelled,
            },
            reason: job.reason,
            dead_letter_topic: job.dead_letter_topic,
            redriven: job.redriven,
            skipped: job.skipped,
            from_offset: job.from_offset,
            to_offset: job.to_offset,
            max_per_second: job.max_per_second,
            partitions: job
                .partitions
                .into_iter()
                .map(|p| RedrivePartitionDto {
                    partition: p.partition,
                    from_offset: p.start,
                    next_offset: p.next,
                    end_offset: p.end,
                })
                .collect(),
            started_at: job.started_at_ms,
            finished_at: job.finished_at_ms,
        }
    }
}
