//! Producing a batch the client sent in the stored layout (`application/vnd.herald.batch`,
//! docs/binary-batches.md): checked completely, then appended as it is, so the client's bytes
//! are the bytes the log stores, replicates and serves.
//!
//! Everything the JSON path refuses is refused here too, on the batch's own records, plus what
//! only a hand-made batch can get wrong: offset deltas other than 0, 1, 2, ... (they become the
//! records' offsets), a producer stamp that is neither all -1 nor a whole idempotent identity.
//! A refused batch writes nothing.
//!
//! Two things a producer's batch may carry because `herald topics import` writes batches as a
//! source cluster stored them (docs/export-import.md): a producer stamp (the batch then goes
//! through the partition's dedup window, `stored_once`), and the compacted flag, whose records
//! may leave gaps in their offset deltas within the batch's `offset_span` (the batch still takes
//! `offset_span` offsets, gaps included, as a compacted batch does in the log it came from).

use crate::ProduceService;

use bytes::Bytes;
use tokio::time::Instant;

use super::{count_produced, MAX_HEADERS_PER_MESSAGE, MAX_MESSAGES_PER_REQUEST};
use crate::schemas::{Part, Payload, Refusal, TopicValidator};
use crate::subscriptions::message_times;
use crate::{Acks, BrokerError, BrokerResult, ErrorCode};
use herald_domain::batch::{visit_records, BatchError, BatchHeader, ProducerStamp, RecordView};
use herald_domain::topic::{CleanupPolicy, TopicConfig};

/// Where a produced batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLanding {
    pub partition: u32,
    /// The first record's offset; the others follow on. `None` with `acks=none`, and for a
    /// producer's duplicate too old for the partition to remember where it was written.
    pub base_offset: Option<u64>,
    pub record_count: u32,
    /// A producer's batch written before (its sequences were): nothing was written now.
    pub duplicate: bool,
}

impl ProduceService {
    /// Appends `batch`, in the stored layout, to `partition` of `topic_name` as it is, after
    /// checking every byte of it against the layout and the topic's limits.
    pub async fn produce_batch(
        &self,
        topic_name: &str,
        partition: u32,
        batch: Bytes,
        acks: Acks,
    ) -> BrokerResult<BatchLanding> {
        let topic = self.core.topic(topic_name)?;
        if partition as usize >= topic.partitions.len() {
            return Err(BrokerError::PartitionNotFound {
                topic: topic_name.to_string(),
                partition,
            });
        }
        let (header, value_bytes) = check_produced_batch(&batch, &topic.config)?;
        if let Some(mut validator) = self.schemas.validator(topic_name) {
            if let Some(unknown) = check_batch_schemas(&batch, &mut validator)? {
                // Named what this node does not know yet: catch up once and look again.
                if !validator.refresh().await? {
                    return Err(unknown);
                }
                if let Some(unknown) = check_batch_schemas(&batch, &mut validator)? {
                    return Err(unknown);
                }
            }
        }
        let group = self.core.assignment(&topic, partition)?.group_id;
        let config = topic.config.clone();
        drop(topic);
        if header.producer.is_idempotent() {
            let target = super::stored_once::StoredTarget {
                topic: topic_name,
                partition,
                group,
                config: &config,
            };
            return self
                .produce_batch_once(target, batch, &header, value_bytes, acks)
                .await;
        }
        let deadline = Instant::now() + self.core.options.produce_timeout;
        let record_count = header.record_count;
        let landing = |base_offset| BatchLanding {
            partition,
            base_offset,
            record_count,
            duplicate: false,
        };

        if acks == Acks::None {
            let permit = self
                .unacknowledged
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| BrokerError::Unavailable("the broker is shutting down".into()))?;
            let (produce, topic_label) = (self.clone(), topic_name.to_string());
            tokio::spawn(async move {
                let _permit = permit;
                match produce.append_stored(group, batch, false, deadline).await {
                    Ok(_) => count_produced(
                        &topic_label,
                        partition,
                        u64::from(record_count),
                        value_bytes as u64,
                    ),
                    Err(error) => {
                        tracing::warn!(topic = topic_label, partition, %error, "an acks=none batch produce failed");
                    }
                }
            });
            return Ok(landing(None));
        }

        let appended = self.append_stored(group, batch, acks == Acks::Leader, deadline);
        let base_offset = match tokio::time::timeout_at(deadline + super::ANSWER_GRACE, appended)
            .await
        {
            Ok(appended) => appended?,
            Err(_) => {
                return Err(BrokerError::Timeout(format!(
                    "partition {partition} did not acknowledge within {} ms; the batch may still be written",
                    self.core.options.produce_timeout.as_millis()
                )))
            }
        };
        count_produced(
            topic_name,
            partition,
            u64::from(record_count),
            value_bytes as u64,
        );
        Ok(landing(Some(base_offset)))
    }
}

/// Checks a producer's batch: the layout (magic, version, lengths, CRC, every record, the
/// header against the records) and what a produce allows (see the module doc). Answers its
/// header and the bytes of its values.
/// Checks every record of `batch` against the topic's subjects: `Err` at the first record that
/// does not follow them, `Ok(Some(refusal))` when one names a schema this node does not know
/// (yet).
fn check_batch_schemas(
    batch: &[u8],
    validator: &mut TopicValidator,
) -> BrokerResult<Option<BrokerError>> {
    let mut outcome: Result<(), Refusal> = Ok(());
    let mut position = 0usize;
    visit_records(batch, |record| {
        if outcome.is_err() {
            return;
        }
        if let Some(key) = record.key {
            let payload = match (record.key_is_text, std::str::from_utf8(key)) {
                (true, Ok(text)) => Payload::Text(text),
                _ => Payload::Bytes(key),
            };
            outcome = validator.check_now(position, Part::Key, payload);
        }
        if outcome.is_ok() {
            let payload = if record.value_is_json {
                Payload::Json(record.value)
            } else {
                Payload::Bytes(record.value)
            };
            outcome = validator.check_now(position, Part::Value, payload);
        }
        position += 1;
    })
    .map_err(layout_error)?;
    match outcome {
        Ok(()) => Ok(None),
        Err(Refusal::Failed(error)) => Err(error),
        Err(Refusal::Unknown(error)) => Ok(Some(error)),
    }
}

pub(crate) fn check_produced_batch(
    batch: &[u8],
    config: &TopicConfig,
) -> BrokerResult<(BatchHeader, usize)> {
    let needs_keys = config.cleanup_policy != CleanupPolicy::Delete;
    let max_bytes = config.max_message_bytes as usize;
    let mut refusal: Option<BrokerError> = None;
    let mut index = 0u32;
    let mut value_bytes = 0usize;
    // The first record not numbered as 0, 1, 2, ... would have it: allowed only in a compacted
    // batch (known once the header is, after the walk; the decoder checked the deltas grow).
    let mut misnumbered: Option<(u32, u32)> = None;
    let header = visit_records(batch, |record| {
        if misnumbered.is_none() && record.offset_delta != index {
            misnumbered = Some((index, record.offset_delta));
        }
        if refusal.is_none() {
            refusal = check_record(&record, index, needs_keys, max_bytes).err();
        }
        value_bytes += record.value.len();
        index += 1;
    })
    .map_err(layout_error)?;
    if let Some(refusal) = refusal {
        return Err(refusal);
    }
    if let (false, Some((index, delta))) = (header.compacted, misnumbered) {
        return Err(invalid(format!(
            "record {index} has offset_delta {delta}; a producer's batch numbers its records 0, 1, 2, ... (only a compacted batch, bit 3, may leave gaps)"
        )));
    }
    if header.record_count == 0 {
        return Err(invalid(
            "the batch holds no records (an empty compacted batch has nothing to produce)",
        ));
    }
    if header.compacted && header.offset_span as usize > MAX_MESSAGES_PER_REQUEST {
        return Err(invalid(format!(
            "a compacted batch spans at most {MAX_MESSAGES_PER_REQUEST} offsets, this one {}",
            header.offset_span
        )));
    }
    check_stamp(&header)?;
    if header.record_count as usize > MAX_MESSAGES_PER_REQUEST {
        return Err(invalid(format!(
            "a batch carries at most {MAX_MESSAGES_PER_REQUEST} records, this one {}",
            header.record_count
        )));
    }
    if header.first_timestamp < 0 {
        return Err(invalid("record timestamps must be >= 0"));
    }
    Ok((header, value_bytes))
}

/// A producer stamp is either none (-1 everywhere) or a whole idempotent identity: an id, an
/// epoch and a first sequence, none negative, whose last sequence (`offset_span` of them) fits.
fn check_stamp(header: &BatchHeader) -> BrokerResult<()> {
    let stamp = header.producer;
    if stamp == ProducerStamp::NONE {
        return Ok(());
    }
    if stamp.producer_id < 0 || stamp.producer_epoch < 0 || stamp.base_sequence < 0 {
        return Err(invalid(
            "producer_id, producer_epoch and base_sequence must each be -1 (no producer) or none of them negative (an idempotent producer)",
        ));
    }
    let last = i64::from(stamp.base_sequence) + i64::from(header.offset_span) - 1;
    if last > i64::from(i32::MAX) {
        return Err(invalid(format!(
            "the batch's last sequence would be {last}, above the largest sequence {}",
            i32::MAX
        )));
    }
    Ok(())
}

fn check_record(
    record: &RecordView<'_>,
    index: u32,
    needs_keys: bool,
    max_bytes: usize,
) -> BrokerResult<()> {
    if record.timestamp < 0 {
        return Err(invalid(format!("record {index}: timestamp must be >= 0")));
    }
    if needs_keys && record.key.is_none() {
        return Err(invalid(format!(
            "record {index} has no key, and the topic is compacted: every message needs one"
        )));
    }
    if record.header_count() > MAX_HEADERS_PER_MESSAGE {
        return Err(invalid(format!(
            "record {index}: a message carries at most {MAX_HEADERS_PER_MESSAGE} headers, this one {}",
            record.header_count()
        )));
    }
    message_times::check_pairs(record.headers())
        .map_err(|error| invalid(format!("record {index}: {error}")))?;
    let size = record.encoded_len();
    if size > max_bytes {
        return Err(BrokerError::MessageTooLarge {
            size,
            max: max_bytes as u32,
        });
    }
    Ok(())
}

fn invalid(message: impl Into<String>) -> BrokerError {
    BrokerError::InvalidBatch {
        code: ErrorCode::InvalidBatch,
        message: message.into(),
    }
}

/// A layout error, with the code that tells a damaged batch from a foreign or broken one.
fn layout_error(error: BatchError) -> BrokerError {
    let code = match error {
        BatchError::CrcMismatch { .. } => ErrorCode::BatchCrcMismatch,
        BatchError::UnsupportedVersion(_) => ErrorCode::UnsupportedBatchVersion,
        _ => ErrorCode::InvalidBatch,
    };
    BrokerError::InvalidBatch {
        code,
        message: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use herald_domain::batch::{decode_batch, encode_batch};
    use herald_domain::{Compression, Record, RecordKey, RecordValue};

    fn valid(count: u32, compression: Compression) -> Vec<u8> {
        let records: Vec<Record> = (0..count)
            .map(|index| Record {
                offset_delta: index,
                timestamp: 1_000 + i64::from(index),
                key: Some(RecordKey::Text(format!("k{index}"))),
                value: RecordValue::Json(Bytes::from(format!("[{index}]"))),
                headers: vec![("h".into(), "v".into())],
            })
            .collect();
        encode_batch(&records, compression, ProducerStamp::NONE)
            .expect("encode")
            .to_vec()
    }

    fn resign(batch: &mut [u8]) {
        if batch.len() >= 6 {
            let crc = crc32c::crc32c(&batch[6..]);
            batch[2..6].copy_from_slice(&crc.to_be_bytes());
        }
    }

    #[test]
    fn a_valid_batch_is_taken_with_its_value_bytes() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let batch = valid(3, compression);
            let (header, value_bytes) =
                check_produced_batch(&batch, &TopicConfig::default()).expect("valid");
            assert_eq!(header.record_count, 3);
            assert_eq!(value_bytes, 9);
        }
    }

    fn records(deltas: &[u32]) -> Vec<Record> {
        deltas
            .iter()
            .map(|&offset_delta| Record {
                offset_delta,
                timestamp: 1_000,
                key: Some(RecordKey::Text(format!("k{offset_delta}"))),
                value: RecordValue::Json(Bytes::from_static(b"1")),
                headers: Vec::new(),
            })
            .collect()
    }

    fn stamp(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> ProducerStamp {
        ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence,
        }
    }

    fn detail(batch: &[u8]) -> String {
        check_produced_batch(batch, &TopicConfig::default())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn an_idempotent_stamp_is_taken_whole_or_not_at_all() {
        let batch = encode_batch(&records(&[0, 1]), Compression::None, stamp(3, 0, 7)).unwrap();
        let (header, _) = check_produced_batch(&batch, &TopicConfig::default()).expect("valid");
        assert_eq!(header.producer, stamp(3, 0, 7));
        for partial in [stamp(3, -1, -1), stamp(3, 0, -1), stamp(-1, 0, 0)] {
            let batch = encode_batch(&records(&[0]), Compression::None, partial).unwrap();
            assert!(detail(&batch).contains("must each be -1"), "{partial:?}");
        }
        let last =
            encode_batch(&records(&[0, 1]), Compression::None, stamp(3, 0, i32::MAX)).unwrap();
        assert!(detail(&last).contains("above the largest sequence"));
    }

    #[test]
    fn only_a_compacted_batch_may_leave_gaps_in_its_offsets() {
        use herald_domain::batch::encode_compacted_batch;
        let gapped = records(&[0, 3, 7]);
        let compacted =
            encode_compacted_batch(&gapped, Compression::Lz4, ProducerStamp::NONE, 10, 1_000)
                .unwrap();
        let (header, _) = check_produced_batch(&compacted, &TopicConfig::default()).expect("valid");
        assert_eq!((header.record_count, header.offset_span), (3, 10));
        let plain = encode_batch(&gapped, Compression::None, ProducerStamp::NONE).unwrap();
        assert!(detail(&plain).contains("record 1 has offset_delta 3"));
        let wide = encode_compacted_batch(
            &gapped,
            Compression::None,
            ProducerStamp::NONE,
            MAX_MESSAGES_PER_REQUEST as u32 + 1,
            1_000,
        )
        .unwrap();
        assert!(detail(&wide).contains("spans at most"));
        let empty =
            encode_compacted_batch(&[], Compression::None, ProducerStamp::NONE, 4, 1_000).unwrap();
        assert!(detail(&empty).contains("holds no records"));
    }

    proptest! {
        /// Whatever is changed in a valid batch (with its CRC recomputed or not), the check
        /// answers without panicking, and what it takes decodes into records numbered 0, 1, 2,
        /// ... with non-negative timestamps: safe to store as it is.
        #[test]
        fn damaged_batches_are_refused_or_still_sound(
            compression in prop_oneof![Just(Compression::None), Just(Compression::Lz4)],
            changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in proptest::option::of(any::<prop::sample::Index>()),
            resigned in any::<bool>(),
        ) {
            let mut batch = valid(4, compression);
            for (at, byte) in changes {
                let at = at.index(batch.len());
                batch[at] = byte;
            }
            if let Some(cut) = cut {
                batch.truncate(cut.index(batch.len() + 1));
            }
            if resigned {
                resign(&mut batch);
            }
            match check_produced_batch(&batch, &TopicConfig::default()) {
                Ok((header, _)) => {
                    let (decoded, records) = decode_batch(&batch).expect("a taken batch decodes");
                    prop_assert_eq!(decoded, header);
                    prop_assert!(header.record_count > 0);
                    let stamp = header.producer;
                    prop_assert!(
                        stamp == ProducerStamp::NONE
                            || (stamp.producer_id >= 0
                                && stamp.producer_epoch >= 0
                                && stamp.base_sequence >= 0)
                    );
                    for (index, record) in records.iter().enumerate() {
                        if !header.compacted {
                            prop_assert_eq!(record.offset_delta as usize, index);
                        }
                        prop_assert!(record.timestamp >= 0);
                    }
                }
                Err(error) => {
                    let code = error.code();
                    prop_assert!(
                        matches!(
                            code,
                            ErrorCode::InvalidBatch
                                | ErrorCode::BatchCrcMismatch
                                | ErrorCode::UnsupportedBatchVersion
                                | ErrorCode::MessageTooLarge
                        ),
                        "{:?}",
                        code
                    );
                }
            }
        }
    }
}
