//! The appends that run on a partition's leader, here or sent there: records (plain, or an
//! idempotent request's share through the dedup window) and a producer's stored batch.
//!
//! What crosses the wire is already compact: records travel in the stored batch layout,
//! uncompressed (the leader merges them with its own queue and compresses), encoded only when
//! the leader is another node. The sender's deadline does not travel: an append that arrives
//! gets `produce_timeout` from its arrival, and its batch is checked there.

use crate::ProduceService;
use herald_domain::RaftGroupId;

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::appender::AppendRequest;
use super::idempotence::{Landing, OnceClaim};
use crate::leader::{LeaderOperation, OperationKind};
use crate::{Broker, BrokerError, BrokerOptions, BrokerResult};
use herald_domain::batch::{decode_batch, decode_header, encode_batch, ProducerStamp};
use herald_domain::{Compression, Record};
use herald_raft::PartitionReplica;

/// Records appended to a partition on its leader. Retried at a new leader only when certainly
/// not written, like any leader operation; a retried idempotent share the window saw before is
/// answered as a duplicate.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AppendRecords {
    pub(crate) group: RaftGroupId,
    /// The records, on the node that appends them: the client's, or decoded from `batch` on
    /// arrival.
    #[serde(skip)]
    pub(crate) records: Vec<Record>,
    /// The producer stamp of an idempotent share (on the wire, in the batch header).
    #[serde(skip, default = "no_stamp")]
    pub(crate) stamp: ProducerStamp,
    /// The records in the stored batch layout, uncompressed, with the stamp: what travels.
    /// Encoded once, before the first send.
    pub(crate) batch: Option<Bytes>,
    pub(crate) compression: Compression,
    /// `acks=leader`: answer at the leader's own fsync.
    pub(crate) leader_ack: bool,
    /// An idempotent share: appended alone, through the partition's dedup window.
    pub(crate) claim: Option<OnceClaim>,
    /// Not proposed by then, the records are never written.
    #[serde(skip, default = "Instant::now")]
    pub(crate) deadline: Instant,
    /// It came from another node: it runs once, and gives its records to the appender.
    #[serde(skip)]
    pub(crate) arrived: bool,
}

fn no_stamp() -> ProducerStamp {
    ProducerStamp::NONE
}

impl AppendRecords {
    /// An ordinary append of `records`.
    pub(crate) fn new(
        group: RaftGroupId,
        records: Vec<Record>,
        compression: Compression,
        leader_ack: bool,
        deadline: Instant,
    ) -> Self {
        AppendRecords {
            group,
            records,
            stamp: ProducerStamp::NONE,
            batch: None,
            compression,
            leader_ack,
            claim: None,
            deadline,
            arrived: false,
        }
    }

    /// An idempotent request's share of one partition, stamped with `stamp`: appended alone,
    /// through the partition's dedup window.
    pub(crate) fn once(
        group: RaftGroupId,
        records: Vec<Record>,
        compression: Compression,
        claim: OnceClaim,
        stamp: ProducerStamp,
        deadline: Instant,
    ) -> Self {
        AppendRecords {
            stamp,
            claim: Some(claim),
            ..AppendRecords::new(group, records, compression, false, deadline)
        }
    }
}

impl LeaderOperation for AppendRecords {
    const KIND: OperationKind = OperationKind::AppendRecords;
    type Reply = Landing;
    type Service = ProduceService;

    fn service(broker: &Broker) -> &ProduceService {
        broker.produce()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    fn before_sending(&mut self) -> BrokerResult<()> {
        if self.batch.is_none() {
            self.batch = Some(wire_batch(&self.records, self.stamp)?);
        }
        Ok(())
    }

    fn on_arrival(&mut self, options: &BrokerOptions) -> BrokerResult<()> {
        self.deadline = Instant::now() + options.produce_timeout;
        let batch = self.batch.take().unwrap_or_default();
        let (header, records) = decode_batch(&batch).map_err(|error| {
            // The sending node's fault; it answers it as a failure of the leader.
            BrokerError::InvalidRequest(format!("bad forwarded batch: {error}"))
        })?;
        self.records = records;
        if self.claim.is_some() {
            self.stamp = header.producer;
        }
        self.arrived = true;
        Ok(())
    }

    async fn run_here(
        &mut self,
        produce: &ProduceService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<Landing> {
        produce.check_disk()?;
        let records = if self.arrived {
            std::mem::take(&mut self.records)
        } else {
            // Kept for another try should leadership move before the append is queued.
            self.records.clone()
        };
        let request = AppendRequest {
            records,
            stored: None,
            compression: self.compression,
            leader_ack: self.leader_ack,
            once: self.claim.clone().map(|claim| (claim, self.stamp)),
            deadline: self.deadline,
        };
        let appender = produce.appenders.for_group(replica.group());
        appender.append(replica, request).await
    }
}

/// A producer's batch in the stored layout, checked by the node it was sent to: appended alone
/// and byte for byte. The leader checks its header again on arrival; its CRC guards the hop.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AppendStored {
    pub(crate) group: RaftGroupId,
    pub(crate) batch: Bytes,
    /// `acks=leader`: answer at the leader's own fsync.
    pub(crate) leader_ack: bool,
    /// Not proposed by then, the batch is never written.
    #[serde(skip, default = "Instant::now")]
    pub(crate) deadline: Instant,
}

impl LeaderOperation for AppendStored {
    const KIND: OperationKind = OperationKind::AppendStored;
    /// The batch's base offset.
    type Reply = u64;
    type Service = ProduceService;

    fn service(broker: &Broker) -> &ProduceService {
        broker.produce()
    }

    fn group(&self) -> RaftGroupId {
        self.group
    }

    fn on_arrival(&mut self, options: &BrokerOptions) -> BrokerResult<()> {
        self.deadline = Instant::now() + options.produce_timeout;
        decode_header(&self.batch).map_err(|error| {
            BrokerError::InvalidRequest(format!("bad forwarded batch: {error}"))
        })?;
        Ok(())
    }

    async fn run_here(
        &mut self,
        produce: &ProduceService,
        replica: Arc<PartitionReplica>,
    ) -> BrokerResult<u64> {
        produce.check_disk()?;
        let request = AppendRequest {
            records: Vec::new(),
            stored: Some(self.batch.clone()),
            compression: Compression::None,
            leader_ack: self.leader_ack,
            once: None,
            deadline: self.deadline,
        };
        let appender = produce.appenders.for_group(replica.group());
        match appender.append(replica, request).await? {
            Landing::Appended { base_offset } => Ok(base_offset),
            other => Err(BrokerError::Internal(format!(
                "a stored batch landed as {other:?}"
            ))),
        }
    }
}

impl ProduceService {
    /// Refuses client data while this node's (the partition leader's) data directory is under
    /// its disk reserve, before anything is queued.
    pub(super) fn check_disk(&self) -> BrokerResult<()> {
        match self.core.cluster().disk_full() {
            None => Ok(()),
            Some(full) => {
                metrics::counter!("herald_produce_refused_disk_full_total").increment(1);
                Err(BrokerError::InsufficientStorage(format!(
                    "node {}: {full}; nothing was written. Writes resume once space is freed \
                     (retention, a deleted topic, a bigger volume)",
                    self.core.cluster().node_id()
                )))
            }
        }
    }

    /// Appends `records` to the partition of `group` on its leader; answers the base offset
    /// once a quorum has them, or with `leader_ack` once the leader has them durable. Not
    /// proposed by `deadline`, they are never written.
    pub(crate) async fn append_records(
        &self,
        group: RaftGroupId,
        records: Vec<Record>,
        compression: Compression,
        leader_ack: bool,
        deadline: Instant,
    ) -> BrokerResult<u64> {
        let append = AppendRecords::new(group, records, compression, leader_ack, deadline);
        match self.core.run_on_leader(self, append).await? {
            Landing::Appended { base_offset } => Ok(base_offset),
            other => Err(BrokerError::Internal(format!(
                "an ordinary append landed as {other:?}"
            ))),
        }
    }

    /// Appends `batch` (in the stored layout, checked) to the partition of `group` on its
    /// leader, alone and byte for byte; answers its base offset once a quorum has it, or with
    /// `leader_ack` once the leader has it durable. Not proposed by `deadline`, it is never
    /// written.
    pub(crate) async fn append_stored(
        &self,
        group: RaftGroupId,
        batch: Bytes,
        leader_ack: bool,
        deadline: Instant,
    ) -> BrokerResult<u64> {
        self.core
            .run_on_leader(
                self,
                AppendStored {
                    group,
                    batch,
                    leader_ack,
                    deadline,
                },
            )
            .await
    }
}

/// The records of a forwarded append in the stored batch layout, uncompressed (the leader
/// compresses). Records that cannot be encoded fail the request here, before anything is sent:
/// forwarding an empty batch instead would answer success for messages never written.
fn wire_batch(records: &[Record], stamp: ProducerStamp) -> BrokerResult<Bytes> {
    encode_batch(records, Compression::None, stamp).map_err(|error| {
        BrokerError::Internal(format!(
            "encoding a forwarded append's records (not sent): {error}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::round_trip;
    use crate::ErrorCode;
    use herald_domain::RecordValue;

    fn record(offset_delta: u32, value: &'static [u8]) -> Record {
        Record {
            offset_delta,
            timestamp: 1,
            key: None,
            value: RecordValue::Bytes(Bytes::from_static(value)),
            headers: Vec::new(),
        }
    }

    #[test]
    fn records_that_cannot_be_encoded_fail_the_append_instead_of_forwarding_an_empty_batch() {
        // No records: the batch layout cannot hold them (the same path as any encoding error).
        let error = wire_batch(&[], ProducerStamp::NONE).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InternalError, "{error}");
        assert!(error.to_string().contains("not sent"), "{error}");
        // The same through the operation: it fails before anything is encoded for the wire.
        let mut append = AppendRecords::new(
            RaftGroupId::new(1),
            Vec::new(),
            Compression::None,
            false,
            Instant::now(),
        );
        let error = append.before_sending().unwrap_err();
        assert!(error.to_string().contains("not sent"), "{error}");
    }

    #[test]
    fn encodable_records_travel_whole() {
        let records = vec![record(0, b"v")];
        let batch = wire_batch(&records, ProducerStamp::NONE).unwrap();
        let (_, decoded) = decode_batch(&batch).unwrap();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].value, records[0].value);
    }

    #[test]
    fn an_idempotent_share_arrives_with_its_records_stamp_and_a_fresh_deadline() {
        let stamp = ProducerStamp {
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 3,
        };
        let claim = OnceClaim {
            idempotency_key: Some("k".into()),
            fingerprint: 9,
            limits: herald_raft::DedupLimits {
                max_age_ms: 1,
                max_entries: 1,
            },
        };
        let sent_at = Instant::now();
        let mut append = AppendRecords::once(
            RaftGroupId::new(4),
            vec![record(0, b"a"), record(1, b"b")],
            Compression::None,
            claim.clone(),
            stamp,
            sent_at,
        );
        append.before_sending().unwrap();
        let mut arrived = round_trip(OperationKind::AppendRecords, &append);
        assert!(
            arrived.records.is_empty(),
            "records travel only in the batch"
        );
        let options = BrokerOptions::default();
        arrived.on_arrival(&options).unwrap();
        assert_eq!(arrived.group, RaftGroupId::new(4));
        assert_eq!(arrived.records.len(), 2);
        assert_eq!(arrived.stamp, stamp);
        assert_eq!(arrived.claim, Some(claim));
        assert!(arrived.deadline >= sent_at + options.produce_timeout);
    }

    #[test]
    fn a_stored_batch_travels_byte_for_byte() {
        let batch = wire_batch(&[record(0, b"x")], ProducerStamp::NONE).unwrap();
        let stored = AppendStored {
            group: RaftGroupId::new(5),
            batch: batch.clone(),
            leader_ack: true,
            deadline: Instant::now(),
        };
        let mut arrived = round_trip(OperationKind::AppendStored, &stored);
        arrived.on_arrival(&BrokerOptions::default()).unwrap();
        assert_eq!(
            (arrived.group, arrived.leader_ack),
            (RaftGroupId::new(5), true)
        );
        assert_eq!(arrived.batch, batch);
    }

    #[test]
    fn a_batch_that_does_not_decode_is_refused_on_arrival() {
        let mut append = AppendRecords::new(
            RaftGroupId::new(1),
            Vec::new(),
            Compression::None,
            false,
            Instant::now(),
        );
        append.batch = Some(Bytes::from_static(b"not a batch"));
        assert!(append.on_arrival(&BrokerOptions::default()).is_err());
        let mut stored = AppendStored {
            group: RaftGroupId::new(1),
            batch: Bytes::from_static(b"not a batch"),
            leader_ack: false,
            deadline: Instant::now(),
        };
        let error = stored.on_arrival(&BrokerOptions::default()).unwrap_err();
        assert!(error.to_string().contains("bad forwarded batch"), "{error}");
    }
}
