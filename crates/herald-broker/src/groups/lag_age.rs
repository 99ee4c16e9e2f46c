//! Consumer-group lag in seconds: how old the oldest message a group has not consumed is.
//! Lag in messages says how much is left; lag in seconds says how late the consumer is, which
//! is what an alert wants (a thousand messages behind is nothing at 100k/s and hours at 1/min).
//!
//! Each partition's leader answers for its partitions: it holds the log, so the age costs one
//! local read of one batch header and record per lagging partition and scrape, never a
//! forwarded read, and each series comes from exactly one node. The committed offsets come
//! from the metadata group, which every node applies. Like the other group gauges, these are
//! computed at scrape time and only for the first `max_metric_groups` groups by name.

use crate::GroupService;
use herald_domain::RaftGroupId;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::OffsetSpec;
use herald_domain::batch::decode_batch;
use herald_raft::ReadLimits;

/// One group's lag on one partition this node leads.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupLagAge {
    pub group: String,
    pub topic: String,
    pub partition: u32,
    /// Messages after the committed offset.
    pub messages: u64,
    /// Age of the first of them (now minus its timestamp), 0 when there is none.
    pub seconds: f64,
}

impl GroupService {
    /// The lag, in messages and seconds, of every listed group on every partition this node
    /// leads and the group has committed an offset on.
    pub async fn group_lag_ages(&self) -> Vec<GroupLagAge> {
        let cluster = self.core.cluster();
        let metadata = cluster.metadata().current();
        let limit = self.core.options.groups.max_metric_groups;
        let committed: Vec<(String, String, u32, RaftGroupId, u64)> =
            cluster.groups().read(|groups| {
                groups
                    .groups
                    .values()
                    .take(limit)
                    .flat_map(|group| {
                        group.offsets.iter().filter_map(|(partition, committed)| {
                            let assignment = metadata
                                .topics
                                .get(&partition.topic)?
                                .partitions
                                .get(partition.partition as usize)?;
                            Some((
                                group.name.clone(),
                                partition.topic.clone(),
                                partition.partition,
                                assignment.group_id,
                                committed.offset,
                            ))
                        })
                    })
                    .collect()
            });
        let mut ages = Vec::new();
        for (group, topic, partition, raft_group, offset) in committed {
            let Some(replica) = cluster.replicas().get(raft_group) else {
                continue;
            };
            if !replica.is_leader() {
                continue;
            }
            let high_watermark = replica.watermarks().high_watermark;
            let messages = high_watermark.saturating_sub(offset);
            let seconds = if messages == 0 {
                0.0
            } else {
                self.first_timestamp_from(replica, offset)
                    .await
                    .map(age_seconds)
                    .unwrap_or(0.0)
            };
            ages.push(GroupLagAge {
                group,
                topic,
                partition,
                messages,
                seconds,
            });
        }
        ages
    }

    /// The timestamp of the first message at or after `offset` in a local replica (an offset
    /// retention removed starts at the log start).
    async fn first_timestamp_from(
        &self,
        replica: std::sync::Arc<herald_raft::PartitionReplica>,
        offset: u64,
    ) -> Option<i64> {
        let limits = ReadLimits {
            max_records: 1,
            max_bytes: 1,
        };
        let read = self
            .fetch
            .read_here(replica, OffsetSpec::At(offset), limits, Duration::ZERO)
            .await
            .ok()?;
        let from = read.from;
        read.batches.iter().find_map(|(base_offset, batch)| {
            let (_, records) = decode_batch(batch).ok()?;
            records
                .into_iter()
                .find(|record| base_offset + u64::from(record.offset_delta) >= from)
                .map(|record| record.timestamp)
        })
    }
}

/// Seconds from `timestamp_ms` to now; 0 for a timestamp in the future (a producer's clock
/// ahead of this node's).
fn age_seconds(timestamp_ms: i64) -> f64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_millis() as i64)
        .unwrap_or(0);
    (now_ms.saturating_sub(timestamp_ms)).max(0) as f64 / 1000.0
}
