//! What a subscription's state on a partition tells an operator: its counts and the age of its
//! oldest message not done. Computed where the state is authoritative, on the partition's
//! leader: for `GET /v1/subscriptions/{sub}` (asked of the leader, `on_leader::ReadSubscriptionStats`,
//! when it is elsewhere) and for the `/metrics` gauges of the partitions this node leads.

use serde::{Deserialize, Serialize};

use super::{DeliveryCounts, SubscriptionService};
use crate::topics::now_ms;
use crate::{BrokerError, BrokerResult};
use herald_domain::batch::decode_batch;
use herald_raft::{PartitionReplica, ReadLimits};

/// A subscription's counts on one partition, and how old its oldest message not done is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionStats {
    #[serde(with = "WireCounts")]
    pub counts: DeliveryCounts,
    /// Now (the leader's clock) minus the stored timestamp of the oldest message not done
    /// (delivered and not acked, or never delivered); `None` when every message is done.
    /// A timestamp in the future counts as age 0.
    pub oldest_unacked_age_ms: Option<u64>,
}

/// [`DeliveryCounts`] (a raft type, without serde) as a leader answers them to another node.
#[derive(Serialize, Deserialize)]
#[serde(remote = "DeliveryCounts")]
struct WireCounts {
    backlog: u64,
    in_flight: u64,
    delayed: u64,
    dead_lettered: u64,
}

impl SubscriptionStats {
    /// Sums the counts; the oldest age is the largest.
    pub fn add(&mut self, other: SubscriptionStats) {
        self.counts.backlog += other.counts.backlog;
        self.counts.in_flight += other.counts.in_flight;
        self.counts.delayed += other.counts.delayed;
        self.counts.dead_lettered += other.counts.dead_lettered;
        self.oldest_unacked_age_ms = match (self.oldest_unacked_age_ms, other.oldest_unacked_age_ms)
        {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

/// One series of the subscription gauges: a subscription on a partition this node leads.
#[derive(Debug, Clone)]
pub struct SubscriptionGauge {
    pub subscription: String,
    pub topic: String,
    pub partition: u32,
    pub stats: SubscriptionStats,
}

/// A subscription's stats as this replica applied them. A partition the subscription never
/// read counts its whole log (an `earliest` start; a `latest` one reads it once).
pub(crate) async fn stats_here(
    replica: &PartitionReplica,
    subscription: u64,
) -> BrokerResult<SubscriptionStats> {
    let watermarks = replica.watermarks();
    let now = now_ms();
    let (counts, oldest) = replica
        .delivery_view()
        .read(|states| match states.get(&subscription) {
            Some(state) => {
                let oldest = state
                    .pending
                    .keys()
                    .next()
                    .copied()
                    .or((state.read_position < watermarks.high_watermark)
                        .then_some(state.read_position));
                (state.counts(now, watermarks.high_watermark), oldest)
            }
            None => (
                DeliveryCounts {
                    backlog: watermarks.high_watermark - watermarks.log_start_offset,
                    ..DeliveryCounts::default()
                },
                (watermarks.log_start_offset < watermarks.high_watermark)
                    .then_some(watermarks.log_start_offset),
            ),
        });
    let oldest_unacked_age_ms = match oldest {
        Some(offset) => timestamp_at(replica, offset)
            .await?
            .map(|timestamp| now.saturating_sub(timestamp).max(0) as u64),
        None => None,
    };
    Ok(SubscriptionStats {
        counts,
        oldest_unacked_age_ms,
    })
}

/// The stored timestamp of the first message at or after `offset` (compaction leaves gaps;
/// retention may have removed it: then nothing).
async fn timestamp_at(replica: &PartitionReplica, offset: u64) -> BrokerResult<Option<i64>> {
    let limits = ReadLimits {
        max_records: 1,
        max_bytes: 1,
    };
    let batches = replica.read(offset, limits).await?;
    for batch in &batches {
        let (_, records) = decode_batch(&batch.bytes).map_err(|error| {
            BrokerError::Internal(format!(
                "stored batch at offset {}: {error}",
                batch.base_offset
            ))
        })?;
        if let Some(record) = records
            .iter()
            .find(|record| batch.base_offset + u64::from(record.offset_delta) >= offset)
        {
            return Ok(Some(record.timestamp));
        }
    }
    Ok(None)
}

impl SubscriptionService {
    /// The stats of every subscription on the partitions this node leads, for `/metrics`:
    /// a partition led elsewhere now, or a deleted subscription, is simply not there.
    pub async fn local_gauges(&self) -> Vec<SubscriptionGauge> {
        let metadata = self.core.cluster().metadata().current();
        let mut wanted = Vec::new();
        for meta in metadata.subscriptions.by_name.values() {
            let Some(topic) = metadata.topics.get(&meta.config.topic) else {
                continue;
            };
            for (partition, assignment) in topic.partitions.iter().enumerate() {
                let Some(replica) = self.core.cluster().replicas().get(assignment.group_id) else {
                    continue;
                };
                if replica.is_leader() {
                    wanted.push((
                        meta.name.clone(),
                        meta.id,
                        topic.name.clone(),
                        partition as u32,
                        replica,
                    ));
                }
            }
        }
        drop(metadata);
        let mut gauges = Vec::with_capacity(wanted.len());
        for (subscription, id, topic, partition, replica) in wanted {
            match stats_here(&replica, id).await {
                Ok(stats) => gauges.push(SubscriptionGauge {
                    subscription,
                    topic,
                    partition,
                    stats,
                }),
                Err(error) => {
                    tracing::debug!(subscription, partition, %error, "subscription gauges")
                }
            }
        }
        gauges
    }
}
