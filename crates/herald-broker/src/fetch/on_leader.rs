//! The reads that run on a partition's leader, here or sent there: stored batches from an
//! offset (possibly after a long poll) and the offset for a timestamp. A read answers stored
//! batches as they are on disk; the node the client asked decodes them.
//!
//! A read that arrives from another node is held to this node's limits: at most
//! `fetch_max_bytes` and a long poll of at most [`super::MAX_WAIT`], whatever the sender asked.

use crate::FetchService;
use herald_domain::RaftGroupId;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::leader::{LeaderOperation, OperationKind};
use crate::{Broker, BrokerError, BrokerOptions, BrokerResult, OffsetSpec};
use herald_raft::{PartitionReplica, ReadLimits, Watermarks};

/// Stored batches from a partition's leader, with its watermarks after the read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RawRead {
    /// The offset the read started at (resolved from earliest/latest).
    pub from: u64,
    pub batches: Vec<(u64, Bytes)>,
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

/// Stored batches of a partition from an offset, read on its leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReadBatches {
    pub(crate) group: RaftGroupId,
    pub(crate) from: OffsetSpec,
    pub(crate) max_records: usize,
    pub(crate) max_bytes: usize,
    /// How long the leader may wait for something past `from` (a long poll).
    pub(crate) max_wait: Duration,
}

impl LeaderOperation for ReadBatches {
    const KIND: OperationKind = OperationKind::ReadBatches;
    type Reply = RawRead;
    type Service = FetchService;

    fn service(broker: &Broker) -> &FetchService {
        broker.fetch()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    fn wait(&self) -> Duration {
        self.max_wait
    }

    fn on_arrival(&mut self, options: &BrokerOptions) -> BrokerResult<()> {
        self.max_bytes = self.max_bytes.min(options.fetch_max_bytes);
        self.max_wait = self.max_wait.min(super::MAX_WAIT);
        Ok(())
    }

    async fn run_here(
        &mut self,
        fetch: &FetchService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<RawRead> {
        let limits = ReadLimits {
            max_records: self.max_records,
            max_bytes: self.max_bytes,
        };
        fetch
            .read_here(replica, self.from, limits, self.max_wait)
            .await
    }
}

/// The first offset of a partition at or after a timestamp, asked of its leader: the log
/// start when the timestamp is older than what is left, the high watermark when no message
/// is that recent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OffsetForTimestamp {
    pub(crate) group: RaftGroupId,
    pub(crate) timestamp: i64,
}

impl LeaderOperation for OffsetForTimestamp {
    const KIND: OperationKind = OperationKind::OffsetForTimestamp;
    type Reply = u64;
    type Service = FetchService;

    fn service(broker: &Broker) -> &FetchService {
        broker.fetch()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    async fn run_here(
        &mut self,
        _fetch: &FetchService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<u64> {
        let watermarks = replica.watermarks();
        let found = replica.offset_for_timestamp(self.timestamp).await?;
        Ok(found
            .map(|offset| offset.max(watermarks.log_start_offset))
            .unwrap_or(watermarks.high_watermark))
    }
}

impl FetchService {
    /// Reads stored batches of `group` on its leader.
    pub(crate) async fn read_batches(
        &self,
        group: RaftGroupId,
        from: OffsetSpec,
        limits: ReadLimits,
        max_wait: Duration,
    ) -> BrokerResult<RawRead> {
        self.core
            .run_on_leader(
                self,
                ReadBatches {
                    group,
                    from,
                    max_records: limits.max_records,
                    max_bytes: limits.max_bytes,
                    max_wait,
                },
            )
            .await
    }

    /// The first offset of `group` at or after `timestamp`, asked of its leader.
    pub(crate) async fn find_offset(
        &self,
        group: RaftGroupId,
        timestamp: i64,
    ) -> BrokerResult<u64> {
        self.core
            .run_on_leader(self, OffsetForTimestamp { group, timestamp })
            .await
    }

    /// On the partition's leader: stored batches from `spec`, after a long poll of up to
    /// `max_wait` when nothing is there yet.
    pub(crate) async fn read_here(
        &self,
        replica: Arc<PartitionReplica>,
        spec: OffsetSpec,
        limits: ReadLimits,
        max_wait: Duration,
    ) -> BrokerResult<RawRead> {
        let mut watermarks = replica.watermarks();
        if let OffsetSpec::At(offset) = spec {
            if offset > watermarks.high_watermark {
                // A leader elected a moment ago may not have applied all that its predecessor
                // committed: catch up before calling the offset out of range.
                replica.catch_up_applied().await?;
                watermarks = replica.watermarks();
            }
        }
        let from = match spec {
            OffsetSpec::Earliest => watermarks.log_start_offset,
            OffsetSpec::Latest => watermarks.high_watermark,
            OffsetSpec::At(offset) => offset,
        };
        let out_of_range = |watermarks: Watermarks| BrokerError::OffsetOutOfRange {
            offset: from,
            log_start_offset: watermarks.log_start_offset,
            high_watermark: watermarks.high_watermark,
        };
        if from < watermarks.log_start_offset || from > watermarks.high_watermark {
            return Err(out_of_range(watermarks));
        }

        // A long poll: wait for the high watermark to pass `from`, woken by apply.
        if from >= watermarks.high_watermark && !max_wait.is_zero() {
            let mut changes = replica.subscribe();
            let deadline = Instant::now() + max_wait.min(super::MAX_WAIT);
            let waited = tokio::time::timeout_at(
                deadline,
                changes.wait_for(|marks| marks.high_watermark > from),
            )
            .await;
            watermarks = match waited {
                Ok(Ok(marks)) => *marks,
                _ => replica.watermarks(),
            };
        }
        if from < watermarks.log_start_offset {
            return Err(out_of_range(watermarks));
        }
        let batches = replica.read(from, limits).await?;
        let latest = replica.watermarks();
        Ok(RawRead {
            from,
            batches: batches
                .into_iter()
                .map(|batch| (batch.base_offset, batch.bytes))
                .collect(),
            log_start_offset: latest.log_start_offset,
            high_watermark: latest.high_watermark,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::round_trip;

    #[test]
    fn an_offset_lookup_travels_whole() {
        let lookup = OffsetForTimestamp {
            group: RaftGroupId::new(3),
            timestamp: -5,
        };
        assert_eq!(
            round_trip(OperationKind::OffsetForTimestamp, &lookup),
            lookup
        );
    }

    #[test]
    fn a_read_from_another_node_is_held_to_this_nodes_limits() {
        let options = BrokerOptions {
            fetch_max_bytes: 1000,
            ..BrokerOptions::default()
        };
        let mut read = ReadBatches {
            group: RaftGroupId::new(2),
            from: OffsetSpec::At(5),
            max_records: 10,
            max_bytes: 1 << 30,
            max_wait: Duration::from_secs(3600),
        };
        let mut arrived = round_trip(OperationKind::ReadBatches, &read);
        assert_eq!(arrived, read);
        arrived.on_arrival(&options).unwrap();
        assert_eq!(arrived.max_bytes, 1000);
        assert_eq!(arrived.max_wait, super::super::MAX_WAIT);
        assert_eq!(arrived.wait(), super::super::MAX_WAIT);
        // Within the limits, nothing changes.
        read.max_bytes = 10;
        read.max_wait = Duration::from_millis(250);
        let mut small = read.clone();
        small.on_arrival(&options).unwrap();
        assert_eq!(small, read);
    }
}
