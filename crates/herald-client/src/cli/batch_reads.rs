//! Reading a partition's stored batches over HTTP (`Accept: application/vnd.herald.batch`,
//! docs/binary-batches.md): the body is frames of an 8-byte base offset and a batch as stored,
//! the offsets are in headers. Used by `topics export`, which keeps the batches untouched.

use std::time::Duration;

use bytes::Bytes;

use super::client::{Api, OffsetSpec};
use herald_domain::batch::BATCH_HEADER_LEN;

/// The media type of stored batches.
pub const BATCH_MEDIA_TYPE: &str = "application/vnd.herald.batch";
/// The most messages one read asks for (the server's cap); the server also stops at its
/// `fetch_max_bytes`, and always answers whole batches.
pub const MAX_MESSAGES: u32 = 10_000;

/// One batch read: where it starts in the partition, and its bytes as the partition stores
/// them (not verified here: the export file's writer verifies every batch it takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedBatch {
    pub base_offset: u64,
    pub batch: Bytes,
}

/// What one read answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRead {
    pub batches: Vec<ServedBatch>,
    /// Where the next read starts (`Herald-Next-Offset`).
    pub next_offset: u64,
    /// `Herald-Log-Start-Offset`: the partition's first offset now.
    pub log_start_offset: u64,
}

impl Api {
    /// Reads stored batches of `partition` from `offset`; with `max_wait_ms`, a long poll.
    pub async fn read_batches(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait_ms: u64,
    ) -> anyhow::Result<BatchRead> {
        let url = self.fetch_url(
            topic,
            partition,
            OffsetSpec::At(offset),
            MAX_MESSAGES,
            max_wait_ms,
        );
        let timeout = Duration::from_millis(max_wait_ms) + Duration::from_secs(60);
        let request = self
            .http()
            .get(url)
            .header(reqwest::header::ACCEPT, BATCH_MEDIA_TYPE)
            .timeout(timeout);
        let response = self.send(request).await?;
        let header = |name: &str| -> anyhow::Result<u64> {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("the batch read's answer has no {name} header"))
        };
        let next_offset = header("herald-next-offset")?;
        let log_start_offset = header("herald-log-start-offset")?;
        let body = response.bytes().await?;
        let batches = split_frames(&body)
            .map_err(|error| anyhow::anyhow!("partition {partition} at {offset}: {error}"))?;
        Ok(BatchRead {
            batches,
            next_offset,
            log_start_offset,
        })
    }
}

/// Cuts a batch read's body into its frames, without copying: each is an 8-byte base offset
/// then a batch, whose length its header's `records_len` (bytes 45 to 48) gives.
pub fn split_frames(body: &Bytes) -> Result<Vec<ServedBatch>, String> {
    const RECORDS_LEN_AT: usize = 45;
    let mut batches = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        let frame = body
            .get(at..at + 8 + BATCH_HEADER_LEN)
            .ok_or_else(|| format!("a frame at byte {at} is cut short"))?;
        let mut base = [0u8; 8];
        base.copy_from_slice(&frame[..8]);
        let mut records_len = [0u8; 4];
        records_len.copy_from_slice(&frame[8 + RECORDS_LEN_AT..8 + RECORDS_LEN_AT + 4]);
        let end = at + 8 + BATCH_HEADER_LEN + u32::from_be_bytes(records_len) as usize;
        if end > body.len() {
            return Err(format!("the batch at byte {at} is cut short"));
        }
        batches.push(ServedBatch {
            base_offset: u64::from_be_bytes(base),
            batch: body.slice(at + 8..end),
        });
        at = end;
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_domain::batch::{encode_batch, ProducerStamp};
    use herald_domain::{Compression, Record, RecordValue};

    fn batch(count: u32) -> Bytes {
        let records: Vec<Record> = (0..count)
            .map(|offset_delta| Record {
                offset_delta,
                timestamp: 5,
                key: None,
                value: RecordValue::Bytes(Bytes::from_static(b"abc")),
                headers: Vec::new(),
            })
            .collect();
        encode_batch(&records, Compression::Lz4, ProducerStamp::NONE).expect("encode")
    }

    #[test]
    fn frames_are_cut_at_their_batches_ends() {
        let (first, second) = (batch(3), batch(1));
        let mut body = Vec::new();
        body.extend_from_slice(&7u64.to_be_bytes());
        body.extend_from_slice(&first);
        body.extend_from_slice(&10u64.to_be_bytes());
        body.extend_from_slice(&second);
        let body = Bytes::from(body);
        let frames = split_frames(&body).expect("frames");
        assert_eq!(
            frames,
            vec![
                ServedBatch {
                    base_offset: 7,
                    batch: first
                },
                ServedBatch {
                    base_offset: 10,
                    batch: second
                },
            ]
        );
        assert_eq!(split_frames(&Bytes::new()), Ok(Vec::new()));
        for cut in [1, 8 + BATCH_HEADER_LEN - 1, body.len() - 1] {
            assert!(split_frames(&body.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}
