//! Writing one source partition's batches into the target partition of the same number, in
//! file order, as the import's idempotent producer.
//!
//! Each batch gets the producer's id and epoch and the next sequence of this partition, and is
//! sent byte for byte otherwise (`domain::batch::restamp`). The sequences are numbered from the
//! file alone: the first batch of a partition starts at 0, each next one where the previous
//! one's `offset_span` ends (the server counts a batch's sequences by its span, which for all
//! but a compacted batch is its record count). A run again of the same file numbers every batch
//! as the first run did, so the partition answers each batch it wrote then as a duplicate and
//! writes only what is missing. One batch is in flight per partition: the partition must see a
//! producer's sequences in order, and a retry (of a batch whose answer was lost) is safe.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use tokio::sync::{mpsc, Semaphore};

use super::archive::Frame;
use super::batch_reads::BATCH_MEDIA_TYPE;
use super::client::{Acks, Api, BatchProduceResponse};
use super::import_target::Producer;
use super::progress::Progress;
use super::retry::retrying;
use herald_domain::batch::{restamp, ProducerStamp};

/// How long one produce request may take: the server's produce timeout (30 s by default) and
/// then some.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// What one partition's import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub batches: u64,
    pub records: u64,
    /// Batches (and their records) the partition had from an earlier run: not written again.
    pub duplicate_batches: u64,
    pub duplicate_records: u64,
}

/// Where and as whom one partition writes.
pub struct PartitionWriter {
    pub api: Api,
    pub topic: Arc<str>,
    pub partition: u32,
    pub producer: Producer,
    /// Bounds the produce requests in flight over every partition.
    pub permits: Arc<Semaphore>,
    /// How long a batch is retried while the cluster cannot take it.
    pub patience: Duration,
    pub progress: Progress,
}

/// The sequence of a partition's next batch, and the stamp of a batch that spans `span`
/// offsets from it; an error when its last sequence would not fit a sequence (`i32`).
pub fn stamp_for(producer: Producer, sequence: i64, span: u32) -> anyhow::Result<ProducerStamp> {
    let last = sequence + i64::from(span.max(1)) - 1;
    let base_sequence = i32::try_from(sequence)
        .ok()
        .filter(|_| last <= i64::from(i32::MAX))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the partition's batches span more than {} offsets, more than one import producer numbers",
                i32::MAX
            )
        })?;
    Ok(ProducerStamp {
        producer_id: producer.producer_id,
        producer_epoch: producer.producer_epoch,
        base_sequence,
    })
}

impl PartitionWriter {
    /// Writes the frames that arrive, in order, until the channel closes; stops at the first
    /// batch that cannot be written.
    pub async fn run(self, mut frames: mpsc::Receiver<Frame>) -> anyhow::Result<Written> {
        let mut written = Written::default();
        let mut sequence = 0i64;
        while let Some(frame) = frames.recv().await {
            let header = frame.header;
            // What compaction left of a batch whose every record went: nothing to write (and
            // the server takes no empty batch). Numbered as nothing, too.
            if header.record_count == 0 {
                continue;
            }
            let stamp = stamp_for(self.producer, sequence, header.offset_span)?;
            let (batch, _) = restamp(&frame.batch, stamp).with_context(|| {
                format!(
                    "partition {}: the batch from offset {}",
                    self.partition, frame.base_offset
                )
            })?;
            let answer = self.send(batch).await.with_context(|| {
                format!(
                    "partition {}: the batch from source offset {} (sequence {sequence}) was not written",
                    self.partition, frame.base_offset
                )
            })?;
            let records = u64::from(header.record_count);
            if answer.duplicate {
                written.duplicate_batches += 1;
                written.duplicate_records += records;
            } else {
                written.batches += 1;
                written.records += records;
            }
            self.progress.add(records);
            sequence += i64::from(header.offset_span);
        }
        Ok(written)
    }

    /// Sends one stamped batch, again while the cluster answers that it cannot take it now.
    async fn send(&self, batch: Bytes) -> anyhow::Result<BatchProduceResponse> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| anyhow::anyhow!("the import stopped"))?;
        retrying(self.patience, || {
            let request = self
                .api
                .http()
                .post(
                    self.api
                        .produce_batch_url(&self.topic, self.partition, Acks::All),
                )
                .header(reqwest::header::CONTENT_TYPE, BATCH_MEDIA_TYPE)
                .timeout(REQUEST_TIMEOUT)
                .body(batch.clone());
            self.api.send_json::<BatchProduceResponse>(request)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRODUCER: Producer = Producer {
        producer_id: 5,
        producer_epoch: 2,
    };

    #[test]
    fn stamps_number_the_sequences_by_the_span() {
        let stamp = stamp_for(PRODUCER, 0, 10).expect("fits");
        assert_eq!(
            (stamp.producer_id, stamp.producer_epoch, stamp.base_sequence),
            (5, 2, 0)
        );
        assert_eq!(
            stamp_for(PRODUCER, i64::from(i32::MAX) - 9, 10)
                .expect("the last sequence is i32::MAX")
                .base_sequence,
            i32::MAX - 9
        );
        assert!(stamp_for(PRODUCER, i64::from(i32::MAX) - 8, 10).is_err());
        assert!(stamp_for(PRODUCER, i64::from(i32::MAX) + 1, 1).is_err());
    }
}
