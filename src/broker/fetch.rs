//! Reading: by offset, with long polls woken by the append itself, and by timestamp.

use tokio::time::Instant;

use super::{
    Broker, BrokerError, BrokerResult, ConsumedMessage, FetchRequest, FetchResult, OffsetSpec,
};
use crate::domain::batch::decode_batch;
use crate::raft::{ReadLimits, Watermarks};

/// The most messages one fetch answers.
pub const MAX_FETCH_MESSAGES: usize = 10_000;

impl Broker {
    pub async fn fetch(&self, request: FetchRequest) -> BrokerResult<FetchResult> {
        let topic = self.topic(&request.topic)?;
        let assignment = self.assignment(&topic, request.partition)?;
        let replica = self.replica(assignment).await?;
        let max_messages = request.max_messages.clamp(1, MAX_FETCH_MESSAGES);
        let watermarks = replica.watermarks();
        let from = match request.offset {
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
        let mut watermarks = watermarks;
        if from >= watermarks.high_watermark && !request.max_wait.is_zero() {
            let mut changes = replica.subscribe();
            let deadline = Instant::now() + request.max_wait;
            let waited = tokio::time::timeout_at(
                deadline,
                changes.wait_for(|marks| marks.high_watermark > from),
            )
            .await;
            if let Ok(Ok(marks)) = waited {
                watermarks = *marks;
            } else {
                watermarks = replica.watermarks();
            }
        }
        if from < watermarks.log_start_offset {
            return Err(out_of_range(watermarks));
        }

        let limits = ReadLimits {
            max_records: max_messages,
            max_bytes: self.inner.options.fetch_max_bytes,
        };
        let batches = replica.read(from, limits).await?;
        let mut messages = Vec::with_capacity(max_messages.min(1024));
        let mut bytes = 0usize;
        'batches: for batch in batches {
            let (_, records) = decode_batch(&batch.bytes).map_err(|error| {
                BrokerError::Internal(format!(
                    "stored batch at offset {}: {error}",
                    batch.base_offset
                ))
            })?;
            for record in records {
                let offset = batch.base_offset + u64::from(record.offset_delta);
                if offset < from {
                    continue;
                }
                bytes += record.value.as_bytes().len();
                messages.push(ConsumedMessage {
                    partition: request.partition,
                    offset,
                    timestamp: record.timestamp,
                    key: record.key,
                    value: record.value,
                    headers: record.headers,
                });
                if messages.len() >= max_messages {
                    break 'batches;
                }
            }
        }
        let next_offset = messages
            .last()
            .map(|message| message.offset + 1)
            .unwrap_or(from);
        let latest = replica.watermarks();
        metrics::counter!("herald_consumed_messages_total", "topic" => request.topic.clone())
            .increment(messages.len() as u64);
        metrics::counter!("herald_consumed_bytes_total", "topic" => request.topic.clone())
            .increment(bytes as u64);
        Ok(FetchResult {
            topic: request.topic,
            messages,
            next_offset,
            high_watermark: latest.high_watermark,
            log_start_offset: latest.log_start_offset,
        })
    }

    /// The first offset whose timestamp is >= `timestamp`, or the high watermark if none.
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> BrokerResult<u64> {
        let topic_meta = self.topic(topic)?;
        let assignment = self.assignment(&topic_meta, partition)?;
        let replica = self.replica(assignment).await?;
        let watermarks = replica.watermarks();
        let found = replica.offset_for_timestamp(timestamp).await?;
        Ok(found
            .map(|offset| offset.max(watermarks.log_start_offset))
            .unwrap_or(watermarks.high_watermark))
    }
}
