//! Seek: a subscription restarts at an offset or a time on each partition. Replicated as a
//! queue command in each partition's group: everything before the point counts as done, and
//! every lease and individual ack is dropped there (so acks of old leases answer `expired`).

use futures::future::join_all;

use super::SubscriptionService;
use crate::topics::now_ms;
use crate::{BrokerError, BrokerResult};
use herald_raft::{DeliveryCommand, DeliveryOutcome};

/// Where to restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTarget {
    /// At this offset on every partition, or on `partition` only.
    Offset { offset: u64, partition: Option<u32> },
    /// At each partition's first message at or after this time (epoch ms).
    Timestamp { timestamp: i64 },
}

/// Where the subscription restarts on one partition (the target clamped to its log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sought {
    pub partition: u32,
    pub offset: u64,
}

impl SubscriptionService {
    pub async fn seek(&self, name: &str, target: SeekTarget) -> BrokerResult<Vec<Sought>> {
        let meta = self.get(name)?;
        let groups = self.partition_groups(&meta)?;
        let partitions: Vec<u32> = match target {
            SeekTarget::Offset {
                partition: Some(partition),
                ..
            } if partition as usize >= groups.len() => {
                return Err(BrokerError::InvalidRequest(format!(
                    "partition {partition} does not exist: topic '{}' has {}",
                    meta.config.topic,
                    groups.len()
                )))
            }
            SeekTarget::Offset {
                partition: Some(partition),
                ..
            } => vec![partition],
            _ => (0..groups.len() as u32).collect(),
        };
        // Every point is found before anything changes: a failed lookup seeks nothing.
        let mut points = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let group = groups[partition as usize];
            let offset = match target {
                SeekTarget::Offset { offset, .. } => offset,
                SeekTarget::Timestamp { timestamp } => {
                    self.fetch.find_offset(group, timestamp).await?
                }
            };
            points.push((partition, group, offset));
        }
        let calls = points.into_iter().map(|(partition, group, offset)| {
            let command = DeliveryCommand::Seek {
                subscription: meta.id,
                now_ms: now_ms(),
                offset,
            };
            async move {
                match self.apply_on_leader(group, command).await? {
                    DeliveryOutcome::Sought { offset } => Ok(Sought { partition, offset }),
                    other => Err(BrokerError::Internal(format!(
                        "a seek was answered {other:?}"
                    ))),
                }
            }
        });
        join_all(calls).await.into_iter().collect()
    }
}
