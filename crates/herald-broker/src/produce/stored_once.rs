//! An idempotent producer's batch in the stored layout: a batch whose header carries a
//! producer stamp (id, epoch, first sequence) goes through the partition's dedup window as an
//! idempotent JSON request does, and is still stored byte for byte.
//!
//! This is what lets `herald topics import` write a source cluster's batches untouched but for
//! their producer fields, and run again after an interruption without writing anything twice:
//! a batch whose sequences the partition has already written is answered as a duplicate.
//!
//! It runs on the partition's leader as its own operation kind (`AppendStoredOnce`), not as a
//! field added to `AppendStored`: a node that does not know the kind refuses it, where one that
//! decoded it as a plain stored batch would write a retry twice.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::appender::AppendRequest;
use super::idempotence::{fenced, Landing, OnceClaim};
use super::stored::BatchLanding;
use super::{count_produced, ANSWER_GRACE};
use crate::leader::{LeaderOperation, OperationKind};
use crate::{
    Acks, Broker, BrokerError, BrokerOptions, BrokerResult, Idempotence, ProduceService,
    ProducerFields,
};
use herald_domain::batch::{decode_header, BatchHeader};
use herald_domain::{Compression, RaftGroupId, TopicConfig};
use herald_raft::PartitionReplica;

/// Where a stored idempotent batch goes: the partition, its raft group and its topic's
/// configuration (for the dedup window's limits).
pub(super) struct StoredTarget<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub group: RaftGroupId,
    pub config: &'a TopicConfig,
}

impl ProduceService {
    /// Appends a checked batch stamped by an idempotent producer through the partition's dedup
    /// window: written when its first sequence is the producer's next one (or the partition
    /// does not know the producer), answered as a duplicate when every sequence was written
    /// before, refused when out of order or of a fenced epoch.
    pub(super) async fn produce_batch_once(
        &self,
        target: StoredTarget<'_>,
        batch: Bytes,
        header: &BatchHeader,
        value_bytes: usize,
        acks: Acks,
    ) -> BrokerResult<BatchLanding> {
        let stamp = header.producer;
        let fields = ProducerFields {
            producer_id: stamp.producer_id,
            producer_epoch: stamp.producer_epoch,
            sequence: stamp.base_sequence,
        };
        let idempotence = Idempotence {
            idempotency_key: None,
            producer: Some(fields),
        };
        // The sequences were checked with the batch (its offset span); acks needs all.
        idempotence.validate(acks, 1)?;
        self.check_registered_epoch(&idempotence)?;
        // The CRC of the batch's bytes (all but magic, version and the CRC itself): what the
        // window would compare were the batch ever claimed with a key; none is.
        let fingerprint = crc32c::crc32c(batch.get(6..).unwrap_or_default());
        let claim = idempotence.claim(fingerprint, target.config);
        let deadline = Instant::now() + self.core.options.produce_timeout;
        let append = AppendStoredOnce {
            group: target.group,
            batch,
            claim,
            deadline,
        };
        let landing = self.core.run_on_leader(self, append);
        let landing = match tokio::time::timeout_at(deadline + ANSWER_GRACE, landing).await {
            Ok(landing) => landing?,
            Err(_) => {
                return Err(BrokerError::Timeout(format!(
                    "partition {} did not acknowledge within {} ms; the batch may still be written (sending it again is safe: its sequences are known)",
                    target.partition,
                    self.core.options.produce_timeout.as_millis()
                )))
            }
        };
        let (base_offset, duplicate) = match landing {
            Landing::Appended { base_offset } => (Some(base_offset), false),
            Landing::Duplicate { base_offset } => (base_offset, true),
            Landing::OutOfOrderSequence { expected } => {
                return Err(BrokerError::OutOfOrderSequence {
                    producer_id: fields.producer_id,
                    partition: target.partition,
                    sequence: i64::from(fields.sequence),
                    expected,
                })
            }
            Landing::ProducerFenced { current_epoch } => {
                return Err(fenced(
                    fields.producer_id,
                    fields.producer_epoch,
                    current_epoch,
                ))
            }
            Landing::IdempotencyKeyReused => {
                return Err(BrokerError::Internal(
                    "a stored batch without an idempotency key was answered as a reused key".into(),
                ))
            }
        };
        if !duplicate {
            count_produced(
                target.topic,
                target.partition,
                u64::from(header.record_count),
                value_bytes as u64,
            );
        }
        Ok(BatchLanding {
            partition: target.partition,
            base_offset,
            record_count: header.record_count,
            duplicate,
        })
    }
}

/// A stored batch stamped by an idempotent producer, appended alone and byte for byte on the
/// partition's leader through its dedup window. The leader checks its header again on
/// arrival; its CRC guards the hop, and its producer stamp travels in it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AppendStoredOnce {
    pub(crate) group: RaftGroupId,
    pub(crate) batch: Bytes,
    pub(crate) claim: OnceClaim,
    /// Not proposed by then, the batch is never written.
    #[serde(skip, default = "Instant::now")]
    pub(crate) deadline: Instant,
}

impl LeaderOperation for AppendStoredOnce {
    const KIND: OperationKind = OperationKind::AppendStoredOnce;
    type Reply = Landing;
    type Service = ProduceService;

    fn service(broker: &Broker) -> &ProduceService {
        broker.produce()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    fn on_arrival(&mut self, options: &BrokerOptions) -> BrokerResult<()> {
        self.deadline = Instant::now() + options.produce_timeout;
        let header = decode_header(&self.batch).map_err(|error| {
            BrokerError::InvalidRequest(format!("bad forwarded batch: {error}"))
        })?;
        if !header.producer.is_idempotent() {
            return Err(BrokerError::InvalidRequest(
                "bad forwarded batch: an idempotent stored batch without a producer stamp".into(),
            ));
        }
        Ok(())
    }

    async fn run_here(
        &mut self,
        produce: &ProduceService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<Landing> {
        produce.check_disk()?;
        let stamp = decode_header(&self.batch)
            .map_err(|error| BrokerError::Internal(format!("a checked batch: {error}")))?
            .producer;
        let request = AppendRequest {
            records: Vec::new(),
            stored: Some(self.batch.clone()),
            compression: Compression::None,
            leader_ack: false,
            once: Some((self.claim.clone(), stamp)),
            deadline: self.deadline,
        };
        let appender = produce.appenders.for_group(replica.group());
        appender.append(replica, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::round_trip;
    use herald_domain::batch::{encode_batch, ProducerStamp};
    use herald_domain::{Record, RecordValue};

    fn stamped(stamp: ProducerStamp) -> Bytes {
        let record = Record {
            offset_delta: 0,
            timestamp: 1,
            key: None,
            value: RecordValue::Bytes(Bytes::from_static(b"x")),
            headers: Vec::new(),
        };
        encode_batch(&[record], Compression::None, stamp).expect("encode")
    }

    fn claim() -> OnceClaim {
        OnceClaim {
            idempotency_key: None,
            fingerprint: 3,
            limits: herald_raft::DedupLimits {
                max_age_ms: 1000,
                max_entries: 10,
            },
        }
    }

    #[test]
    fn a_stamped_batch_travels_byte_for_byte_with_its_claim() {
        let batch = stamped(ProducerStamp {
            producer_id: 4,
            producer_epoch: 1,
            base_sequence: 9,
        });
        let sent_at = Instant::now();
        let append = AppendStoredOnce {
            group: RaftGroupId::new(6),
            batch: batch.clone(),
            claim: claim(),
            deadline: sent_at,
        };
        let mut arrived = round_trip(OperationKind::AppendStoredOnce, &append);
        let options = BrokerOptions::default();
        arrived.on_arrival(&options).expect("a sound batch");
        assert_eq!(arrived.group, RaftGroupId::new(6));
        assert_eq!(arrived.batch, batch);
        assert_eq!(arrived.claim, claim());
        assert!(arrived.deadline >= sent_at + options.produce_timeout);
    }

    #[test]
    fn an_unstamped_or_broken_batch_is_refused_on_arrival() {
        for batch in [
            stamped(ProducerStamp::NONE),
            Bytes::from_static(b"not a batch"),
        ] {
            let mut append = AppendStoredOnce {
                group: RaftGroupId::new(1),
                batch,
                claim: claim(),
                deadline: Instant::now(),
            };
            let error = append
                .on_arrival(&BrokerOptions::default())
                .expect_err("refused");
            assert!(error.to_string().contains("bad forwarded batch"), "{error}");
        }
    }
}
