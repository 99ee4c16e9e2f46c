//! Producing: validate, choose partitions, encode one batch per partition, replicate the
//! batches concurrently, and answer offsets in request order.

use std::sync::atomic::Ordering;

use futures::future::try_join_all;

use super::topics::now_ms;
use super::{Acks, Broker, BrokerError, BrokerResult, ProduceMessage, ProducedOffset};
use crate::domain::partitioner::partition_for_key;
use crate::domain::topic::CleanupPolicy;
use crate::domain::Record;

/// The most messages one produce request may carry.
pub const MAX_MESSAGES_PER_REQUEST: usize = 100_000;

/// The messages of one request bound for one partition, in request order.
struct PartitionBatch {
    partition: u32,
    records: Vec<Record>,
}

impl Broker {
    /// Produces messages; answers one offset per message, in request order.
    pub async fn produce(
        &self,
        topic_name: &str,
        messages: Vec<ProduceMessage>,
        acks: Acks,
    ) -> BrokerResult<Vec<ProducedOffset>> {
        if messages.is_empty() {
            return Err(BrokerError::InvalidRequest(
                "a produce request needs at least one message".into(),
            ));
        }
        if messages.len() > MAX_MESSAGES_PER_REQUEST {
            return Err(BrokerError::InvalidRequest(format!(
                "a produce request carries at most {MAX_MESSAGES_PER_REQUEST} messages"
            )));
        }
        let topic = self.topic(topic_name)?;
        let partition_count = topic.partitions.len() as u32;
        let max_bytes = topic.config.max_message_bytes;
        // A compacted topic keeps the latest message of every key: a message without one
        // could never be compacted away, so it is refused.
        let needs_keys = topic.config.cleanup_policy != CleanupPolicy::Delete;
        let now = now_ms();
        let round_robin_start = self
            .inner
            .round_robin
            .fetch_add(messages.len() as u64, Ordering::Relaxed);

        // Validate everything before writing anything: a bad message fails the whole request.
        let mut batches: Vec<Option<PartitionBatch>> = (0..partition_count).map(|_| None).collect();
        let mut placements = Vec::with_capacity(messages.len());
        for (position, message) in messages.into_iter().enumerate() {
            let partition = match (message.partition, &message.key) {
                (Some(partition), _) if partition < partition_count => partition,
                (Some(partition), _) => {
                    return Err(BrokerError::PartitionNotFound {
                        topic: topic_name.to_string(),
                        partition,
                    })
                }
                (None, Some(key)) => partition_for_key(key.as_bytes(), partition_count),
                (None, None) => {
                    ((round_robin_start + position as u64) % u64::from(partition_count)) as u32
                }
            };
            if needs_keys && message.key.is_none() {
                return Err(BrokerError::InvalidRequest(format!(
                    "message {position}: topic '{topic_name}' is compacted (cleanup_policy {}), so every message needs a key",
                    cleanup_policy_name(topic.config.cleanup_policy)
                )));
            }
            if let Some(timestamp) = message.timestamp {
                if timestamp < 0 {
                    return Err(BrokerError::InvalidRequest(format!(
                        "message {position}: timestamp must be >= 0"
                    )));
                }
            }
            let batch = batches[partition as usize].get_or_insert_with(|| PartitionBatch {
                partition,
                records: Vec::new(),
            });
            let record = Record {
                offset_delta: batch.records.len() as u32,
                timestamp: message.timestamp.unwrap_or(now),
                key: message.key,
                value: message.value,
                headers: message.headers,
            };
            let size = record.size_bytes();
            if size > max_bytes as usize {
                return Err(BrokerError::MessageTooLarge {
                    size,
                    max: max_bytes,
                });
            }
            placements.push((partition, batch.records.len() as u64));
            batch.records.push(record);
        }

        let mut appends = Vec::new();
        let compression = topic.config.compression;
        let leader_ack = acks == Acks::Leader;
        for batch in batches.into_iter().flatten() {
            let group = self.assignment(&topic, batch.partition)?.group_id;
            let value_bytes: usize = batch
                .records
                .iter()
                .map(|record| record.value.as_bytes().len())
                .sum();
            let (records, partition) = (batch.records.len(), batch.partition);
            let broker = self.clone();
            let timeout = self.inner.options.produce_timeout;
            appends.push(async move {
                let appended =
                    broker.append_records(group, batch.records, compression, leader_ack);
                let base_offset = tokio::time::timeout(timeout, appended)
                    .await
                    .map_err(|_| {
                        BrokerError::Timeout(format!(
                            "partition {partition} did not acknowledge within {} ms; the messages may still be written",
                            timeout.as_millis()
                        ))
                    })??;
                Ok::<_, BrokerError>((partition, base_offset, records, value_bytes))
            });
        }
        drop(topic);

        if acks == Acks::None {
            let topic_label = topic_name.to_string();
            let permit = self
                .inner
                .unacknowledged
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| BrokerError::Unavailable("the broker is shutting down".into()))?;
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(error) = try_join_all(appends).await {
                    tracing::warn!(topic = topic_label, %error, "an acks=none produce failed");
                }
            });
            return Ok(placements
                .iter()
                .map(|&(partition, _)| ProducedOffset {
                    partition,
                    offset: None,
                })
                .collect());
        }

        let appended = try_join_all(appends).await?;
        let mut base_offsets = vec![0u64; partition_count as usize];
        let (mut total_messages, mut total_bytes) = (0usize, 0usize);
        for (partition, base_offset, records, value_bytes) in appended {
            base_offsets[partition as usize] = base_offset;
            total_messages += records;
            total_bytes += value_bytes;
        }
        metrics::counter!("herald_produced_messages_total", "topic" => topic_name.to_string())
            .increment(total_messages as u64);
        metrics::counter!("herald_produced_bytes_total", "topic" => topic_name.to_string())
            .increment(total_bytes as u64);
        Ok(placements
            .into_iter()
            .map(|(partition, delta)| ProducedOffset {
                partition,
                offset: Some(base_offsets[partition as usize] + delta),
            })
            .collect())
    }
}

fn cleanup_policy_name(policy: CleanupPolicy) -> &'static str {
    match policy {
        CleanupPolicy::Delete => "delete",
        CleanupPolicy::Compact => "compact",
        CleanupPolicy::CompactDelete => "compact,delete",
    }
}
