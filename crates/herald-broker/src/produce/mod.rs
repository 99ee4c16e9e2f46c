//! Producing: validate, choose partitions, encode one batch per partition, replicate the
//! batches concurrently, and answer offsets in request order. An idempotent request (see
//! `idempotence`) takes the same path, each partition's share going through the partition's
//! dedup window.
//!
//! Each partition's share is written or refused on its own (its own raft group, its own
//! leader), so one request can end partly written: `partial` turns the shares' outcomes into
//! one answer that says, per message, where it landed or why it was not written, so a client
//! retries exactly the messages that need it. Each share goes through its partition's
//! `appender`, which bounds what waits for a partition and never writes a share after its
//! deadline passed unproposed.

use herald_domain::RaftGroupId;
pub(super) mod appender;
mod appender_writes;
pub(crate) mod idempotence;
pub(crate) mod on_leader;
mod partial;
mod producers;
pub(super) mod stored;
pub(crate) mod stored_once;

#[cfg(test)]
mod appender_tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::future::join_all;
use metrics::Counter;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use self::idempotence::{fenced, fingerprint_message, Landing};
use self::on_leader::AppendRecords;
use self::partial::{Landed, Share};
use super::topics::now_ms;
use super::{Acks, BrokerError, BrokerResult, Idempotence, ProduceAnswer, ProduceMessage};
use crate::broker_core::Core;
use crate::schemas::{Part, Payload, SchemaService};
use herald_domain::partitioner::partition_for_key;
use herald_domain::topic::CleanupPolicy;
use herald_domain::{Record, RecordKey, RecordValue};
use herald_telemetry::handles::HandleCache;

/// The most messages one produce request may carry. The HTTP decoder stops reading at it, and
/// it is the most records the appender merges into one raft entry.
pub const MAX_MESSAGES_PER_REQUEST: usize = 100_000;

/// The most headers one message may carry. The HTTP decoder stops reading at it.
pub const MAX_HEADERS_PER_MESSAGE: usize = 1_000;

/// How much longer than its deadline a produce waits for a partition's answer: a local
/// appender answers exactly at the deadline (not written, or outcome unknown), and a forwarded
/// share's leader, whose deadline started when the share reached it, gets this long to say so
/// before the share is answered "outcome unknown" here.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// The messages of one request bound for one partition, in request order.
struct PartitionBatch {
    partition: u32,
    /// Where the share's first message is in the request: the order in which failed shares are
    /// considered.
    first_position: usize,
    records: Vec<Record>,
    /// CRC-32C of the messages as the client sent them (idempotent requests).
    fingerprint: u32,
}

/// Producing: messages (plain or idempotent), stored batches, producer ids. Owns what merges
/// and bounds the node's writes: the appenders, the unkeyed round robin and the bound on
/// `acks=none` requests.
#[derive(Clone)]
pub struct ProduceService {
    core: Arc<Core>,
    /// Spreads unkeyed messages over partitions.
    round_robin: Arc<AtomicU64>,
    /// Bounds the `acks=none` produces still being written in the background: past the bound a
    /// client waits, so a flood of fire-and-forget requests cannot pile up in memory.
    unacknowledged: Arc<Semaphore>,
    /// Merges concurrent produce requests per partition into shared raft entries.
    appenders: Arc<appender::Appenders>,
    /// The schemas a topic's messages must follow.
    schemas: SchemaService,
}

impl ProduceService {
    pub(crate) fn new(core: Arc<Core>, schemas: SchemaService) -> ProduceService {
        let options = &core.options;
        ProduceService {
            round_robin: Arc::new(AtomicU64::new(0)),
            unacknowledged: Arc::new(Semaphore::new(options.max_unacknowledged_produces)),
            appenders: Arc::new(appender::Appenders::new(
                options.max_queued_bytes_per_partition,
                options.max_in_flight_appends_per_partition,
            )),
            schemas,
            core,
        }
    }

    /// Forgets the appenders of the partitions of `groups`, gone with their topic.
    pub(crate) fn forget_partitions(&self, groups: &[RaftGroupId]) {
        self.appenders.forget(groups);
    }
}

impl ProduceService {
    /// Produces messages; answers one offset per message, in request order. With
    /// `idempotence`, a retry within the topic's window writes nothing again and answers the
    /// first offsets. When some partitions' shares fail and others are written, the answer is
    /// a partial one ([`ProduceAnswer::failed`]); when every share fails, the most telling
    /// error.
    pub async fn produce(
        &self,
        topic_name: &str,
        messages: Vec<ProduceMessage>,
        acks: Acks,
        idempotence: Idempotence,
    ) -> BrokerResult<ProduceAnswer> {
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
        let started = std::time::Instant::now();
        idempotence.validate(acks, messages.len())?;
        self.check_registered_epoch(&idempotence)?;
        let deadline = Instant::now() + self.core.options.produce_timeout;
        let topic = self.core.topic(topic_name)?;
        let partition_count = topic.partitions.len() as u32;
        let unkeyed_partition = idempotence.unkeyed_partition(partition_count);
        let idempotent = idempotence.is_idempotent();
        let max_bytes = topic.config.max_message_bytes;
        // A compacted topic keeps the latest message of every key: a message without one
        // could never be compacted away, so it is refused.
        let needs_keys = topic.config.cleanup_policy != CleanupPolicy::Delete;
        let now = now_ms();
        // Batch-sticky placement (Kafka's sticky partitioner): every unkeyed message of a
        // request without a `partition` goes to one partition, the partitions taken in turn
        // request by request. Spreading a request message by message made a 1000-message
        // request four raft entries on four partitions, each with its own append, sync wait and
        // apply, and its answer waited for the slowest of them. The turn is taken at the first
        // such message, so requests with none (all keyed) do not skip a partition.
        let mut unkeyed_partition = unkeyed_partition;
        let message_count = messages.len();

        // Validate everything before writing anything: a bad message fails the whole request.
        let mut validator = self.schemas.validator(topic_name);
        let mut batches: Vec<Option<PartitionBatch>> = (0..partition_count).map(|_| None).collect();
        let mut placements = Vec::with_capacity(messages.len());
        let mut record_bytes = 0usize;
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
                (None, None) => *unkeyed_partition.get_or_insert_with(|| {
                    (self.round_robin.fetch_add(1, Ordering::Relaxed) % u64::from(partition_count))
                        as u32
                }),
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
            super::subscriptions::message_times::check(&message.headers).map_err(|error| {
                BrokerError::InvalidRequest(format!("message {position}: {error}"))
            })?;
            if message.headers.len() > MAX_HEADERS_PER_MESSAGE {
                return Err(BrokerError::InvalidRequest(format!(
                    "message {position}: a message carries at most {MAX_HEADERS_PER_MESSAGE} headers, this one {}",
                    message.headers.len()
                )));
            }
            if let Some(validator) = validator.as_mut() {
                if let Some(key) = &message.key {
                    let key = match key {
                        RecordKey::Text(text) => Payload::Text(text),
                        RecordKey::Bytes(bytes) => Payload::Bytes(bytes),
                    };
                    validator.check(position, Part::Key, key).await?;
                }
                let value = match &message.value {
                    RecordValue::Json(json) => Payload::Json(json),
                    RecordValue::Bytes(bytes) => Payload::Bytes(bytes),
                };
                validator.check(position, Part::Value, value).await?;
            }
            let first_batch = placements.is_empty();
            let batch = batches[partition as usize].get_or_insert_with(|| PartitionBatch {
                partition,
                first_position: position,
                // Most requests go to one partition (one key, or none): its batch is sized
                // for the whole request at once rather than grown by copying.
                records: if first_batch {
                    Vec::with_capacity(message_count)
                } else {
                    Vec::new()
                },
                fingerprint: 0,
            });
            if idempotent {
                batch.fingerprint = fingerprint_message(batch.fingerprint, &message);
            }
            let record = Record {
                offset_delta: batch.records.len() as u32,
                timestamp: message.timestamp.unwrap_or(now),
                key: message.key,
                value: message.value,
                headers: message.headers,
            };
            let size = record.encoded_len();
            if size > max_bytes as usize {
                return Err(BrokerError::MessageTooLarge {
                    size,
                    max: max_bytes,
                });
            }
            record_bytes += size;
            placements.push((partition, batch.records.len() as u64));
            batch.records.push(record);
        }

        // Held until the request is answered (or, with acks=none, written): the records live
        // in the appenders' queues and raft entries until then.
        let reservation = self.core.memory.reserve(record_bytes)?;
        let batches: Vec<PartitionBatch> = batches.into_iter().flatten().collect();
        if idempotence.producer.is_some() && batches.len() > 1 {
            let partitions: Vec<u32> = batches.iter().map(|batch| batch.partition).collect();
            return Err(BrokerError::InvalidRequest(format!(
                "a request with producer fields must put all its messages in one partition \
                 (sequences are per partition), but these go to partitions {partitions:?}; \
                 send one request per partition"
            )));
        }

        let mut appends = Vec::new();
        let compression = topic.config.compression;
        let leader_ack = acks == Acks::Leader;
        for batch in batches {
            let group = self.core.assignment(&topic, batch.partition)?.group_id;
            let value_bytes: usize = batch
                .records
                .iter()
                .map(|record| record.value.as_bytes().len())
                .sum();
            let (records, partition) = (batch.records.len(), batch.partition);
            let first_position = batch.first_position;
            let produce = self.clone();
            let once = idempotent.then(|| {
                (
                    idempotence.claim(batch.fingerprint, &topic.config),
                    idempotence.stamp(),
                )
            });
            let idempotence = idempotence.clone();
            appends.push(async move {
                let landing = async {
                    match once {
                        Some((claim, stamp)) => {
                            let records = batch.records;
                            let share = AppendRecords::once(
                                group,
                                records,
                                compression,
                                claim,
                                stamp,
                                deadline,
                            );
                            produce.core.run_on_leader(&produce, share).await
                        }
                        None => produce
                            .append_records(
                                group,
                                batch.records,
                                compression,
                                leader_ack,
                                deadline,
                            )
                            .await
                            .map(|base_offset| Landing::Appended { base_offset }),
                    }
                };
                let outcome = match tokio::time::timeout_at(deadline + ANSWER_GRACE, landing).await
                {
                    Ok(landing) => landing.and_then(|landing| {
                        landed(&idempotence, partition, landing, records, value_bytes)
                    }),
                    Err(_) => Err(BrokerError::Timeout(format!(
                        "partition {partition} did not acknowledge within {} ms; the messages may still be written",
                        produce.core.options.produce_timeout.as_millis()
                    ))),
                };
                Share {
                    partition,
                    first_position,
                    outcome,
                }
            });
        }
        drop(topic);

        if acks == Acks::None {
            let topic_label = topic_name.to_string();
            let permit = self
                .unacknowledged
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| BrokerError::Unavailable("the broker is shutting down".into()))?;
            tokio::spawn(async move {
                let (_permit, _reservation) = (permit, reservation);
                for share in join_all(appends).await {
                    if let Err(error) = share.outcome {
                        tracing::warn!(topic = topic_label, partition = share.partition, %error, "an acks=none produce failed");
                    }
                }
            });
            return Ok(partial::unacknowledged(&placements));
        }

        let shares = join_all(appends).await;
        drop(reservation);
        let answer = partial::combine(&placements, shares, idempotent)?;
        count_written(topic_name, &answer.written, answer.answer.duplicate);
        static DURATION: LazyLock<HandleCache<metrics::Histogram>> =
            LazyLock::new(HandleCache::new);
        DURATION
            .get(
                acks.as_str(),
                0,
                || metrics::histogram!("herald_produce_duration_seconds", "acks" => acks.as_str()),
            )
            .record(started.elapsed());
        Ok(answer.answer)
    }
}

/// Counts what the written shares of a request added, per partition (duplicates add nothing),
/// and a request answered as a duplicate.
fn count_written(topic_name: &str, written: &[Landed], duplicate: bool) {
    if duplicate {
        metrics::counter!("herald_produce_duplicates_total", "topic" => topic_name.to_string())
            .increment(1);
    }
    for share in written.iter().filter(|share| !share.duplicate) {
        count_produced(
            topic_name,
            share.partition,
            share.records as u64,
            share.value_bytes as u64,
        );
    }
}

/// Adds to `herald_produced_messages_total` and `herald_produced_bytes_total` of a partition.
fn count_produced(topic_name: &str, partition: u32, records: u64, value_bytes: u64) {
    static PRODUCED: LazyLock<HandleCache<(Counter, Counter)>> = LazyLock::new(HandleCache::new);
    let (messages, bytes) = PRODUCED.get(topic_name, u64::from(partition), || {
        let labels = [
            ("topic", topic_name.to_string()),
            ("partition", partition.to_string()),
        ];
        (
            metrics::counter!("herald_produced_messages_total", &labels),
            metrics::counter!("herald_produced_bytes_total", &labels),
        )
    });
    messages.increment(records);
    bytes.increment(value_bytes);
}

/// What one partition's share came to: where it landed, or the refusal as the client sees it.
fn landed(
    idempotence: &Idempotence,
    partition: u32,
    landing: Landing,
    records: usize,
    value_bytes: usize,
) -> BrokerResult<Landed> {
    let (base_offset, duplicate) = match landing {
        Landing::Appended { base_offset } => (Some(base_offset), false),
        Landing::Duplicate { base_offset } => (base_offset, true),
        Landing::OutOfOrderSequence { expected } => {
            let fields = idempotence.producer.ok_or_else(|| {
                BrokerError::Internal("an out-of-order answer to a request without producer".into())
            })?;
            return Err(BrokerError::OutOfOrderSequence {
                producer_id: fields.producer_id,
                partition,
                sequence: i64::from(fields.sequence),
                expected,
            });
        }
        Landing::ProducerFenced { current_epoch } => {
            let fields = idempotence.producer.ok_or_else(|| {
                BrokerError::Internal("a fenced answer to a request without producer".into())
            })?;
            return Err(fenced(
                fields.producer_id,
                fields.producer_epoch,
                current_epoch,
            ));
        }
        Landing::IdempotencyKeyReused => {
            return Err(BrokerError::IdempotencyKeyReused(
                idempotence.idempotency_key.clone().unwrap_or_default(),
            ))
        }
    };
    Ok(Landed {
        partition,
        base_offset,
        duplicate,
        records,
        value_bytes,
    })
}

fn cleanup_policy_name(policy: CleanupPolicy) -> &'static str {
    match policy {
        CleanupPolicy::Delete => "delete",
        CleanupPolicy::Compact => "compact",
        CleanupPolicy::CompactDelete => "compact,delete",
    }
}
