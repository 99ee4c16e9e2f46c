//! Reading: by offset, with long polls woken by the append itself, and by timestamp. The
//! partition's leader reads stored batches (`on_leader`, possibly for another node); the node
//! the client asked decodes them into messages.

pub(crate) mod on_leader;

use std::sync::Arc;
use std::time::Duration;

use super::{BrokerError, BrokerResult, ConsumedMessage, FetchRequest, FetchResult};
use crate::broker_core::Core;
use herald_domain::batch::{decode_batch, decode_header};
use herald_raft::ReadLimits;

/// The most messages one fetch answers.
pub const MAX_FETCH_MESSAGES: usize = 10_000;
/// Stored batches as a read found them, with where the next read starts.
#[derive(Debug, Clone)]
pub struct BatchFetch {
    /// The offset the read started at (`earliest`/`latest` resolved).
    pub from: u64,
    /// `(base_offset, batch)` in log order, each batch byte for byte as stored.
    pub batches: Vec<(u64, bytes::Bytes)>,
    /// Where the batches end: the offset to read from next.
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

/// The longest long poll a leader serves, whoever asks.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);

/// Reading: by offset (with long polls) and by timestamp. Holds no state of its own: what a
/// read needs is the partition's replica, on whichever node leads it.
#[derive(Clone)]
pub struct FetchService {
    core: Arc<Core>,
}

impl FetchService {
    pub(crate) fn new(core: Arc<Core>) -> FetchService {
        FetchService { core }
    }

    pub async fn fetch(&self, request: FetchRequest) -> BrokerResult<FetchResult> {
        self.fetch_within(request, self.core.options.fetch_max_bytes)
            .await
    }

    /// A fetch gathering at most `max_bytes` of stored batches (the first batch whatever its
    /// size): a group poll shares one node budget among its partitions this way.
    pub(super) async fn fetch_within(
        &self,
        request: FetchRequest,
        max_bytes: usize,
    ) -> BrokerResult<FetchResult> {
        let started = std::time::Instant::now();
        let topic = self.core.topic(&request.topic)?;
        let group = self.core.assignment(&topic, request.partition)?.group_id;
        drop(topic);
        let max_messages = request.max_messages.clamp(1, MAX_FETCH_MESSAGES);
        let limits = ReadLimits {
            max_records: max_messages,
            max_bytes: max_bytes.min(self.core.options.fetch_max_bytes).max(1),
        };
        let read = self
            .read_batches(group, request.offset, limits, request.max_wait)
            .await?;
        let from = read.from;
        let mut messages = Vec::with_capacity(max_messages.min(1024));
        let mut bytes = 0usize;
        // Where the batches read end. Compaction leaves gaps (even whole batches without a
        // message), so when the page is not full the next read starts after the last batch,
        // not after the last message.
        let mut batches_end = from;
        let mut full = false;
        'batches: for (base_offset, batch) in &read.batches {
            let (header, records) = decode_batch(batch).map_err(|error| {
                BrokerError::Internal(format!("stored batch at offset {base_offset}: {error}"))
            })?;
            batches_end = batches_end.max(base_offset + u64::from(header.offset_span));
            for record in records {
                let offset = base_offset + u64::from(record.offset_delta);
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
                    full = true;
                    break 'batches;
                }
            }
        }
        let next_offset = match messages.last() {
            Some(last) if full => last.offset + 1,
            _ => batches_end,
        };
        let labels = [
            ("topic", request.topic.clone()),
            ("partition", request.partition.to_string()),
        ];
        metrics::counter!("herald_consumed_messages_total", &labels)
            .increment(messages.len() as u64);
        metrics::counter!("herald_consumed_bytes_total", &labels).increment(bytes as u64);
        let long_poll = if request.max_wait.is_zero() {
            "false"
        } else {
            "true"
        };
        metrics::histogram!("herald_fetch_duration_seconds", "long_poll" => long_poll)
            .record(started.elapsed());
        Ok(FetchResult {
            topic: request.topic,
            messages,
            next_offset,
            high_watermark: read.high_watermark,
            log_start_offset: read.log_start_offset,
        })
    }

    /// A read answering the stored batches as they are, for clients that decode the stored
    /// layout themselves (`Accept: application/vnd.herald.batch`): whole batches, the first
    /// possibly starting before the offset asked for, within `max_messages` records (the first
    /// batch whatever its size) and the node's `fetch_max_bytes`.
    pub async fn fetch_batches(&self, request: FetchRequest) -> BrokerResult<BatchFetch> {
        let topic = self.core.topic(&request.topic)?;
        let group = self.core.assignment(&topic, request.partition)?.group_id;
        drop(topic);
        let limits = ReadLimits {
            max_records: request.max_messages.clamp(1, MAX_FETCH_MESSAGES),
            max_bytes: self.core.options.fetch_max_bytes.max(1),
        };
        let read = self
            .read_batches(group, request.offset, limits, request.max_wait)
            .await?;
        let mut next_offset = read.from;
        let mut bytes = 0usize;
        for (base_offset, batch) in &read.batches {
            let header = decode_header(batch).map_err(|error| {
                BrokerError::Internal(format!("stored batch at offset {base_offset}: {error}"))
            })?;
            next_offset = next_offset.max(base_offset + u64::from(header.offset_span));
            bytes += batch.len();
        }
        metrics::counter!("herald_consumed_bytes_total", "topic" => request.topic.clone())
            .increment(bytes as u64);
        Ok(BatchFetch {
            from: read.from,
            batches: read.batches,
            next_offset,
            high_watermark: read.high_watermark,
            log_start_offset: read.log_start_offset,
        })
    }

    /// The first offset whose timestamp is >= `timestamp`, or the high watermark if none.
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> BrokerResult<u64> {
        let topic_meta = self.core.topic(topic)?;
        let group = self.core.assignment(&topic_meta, partition)?.group_id;
        drop(topic_meta);
        self.find_offset(group, timestamp).await
    }
}
