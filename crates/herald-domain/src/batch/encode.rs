//! Writing a batch: the header a run of records needs, and the header and (compressed) records
//! section laid out as the module documentation describes.

use bytes::{BufMut, Bytes};

use super::records::encode_record;
use super::{
    BatchError, Compression, ProducerStamp, ATTR_COMPACTED, BATCH_HEADER_LEN, BATCH_MAGIC,
    BATCH_VERSION, CRC_END, CRC_START, MAX_UNCOMPRESSED_LEN,
};
use crate::record::Record;

/// Encodes records into one stored batch.
///
/// The records' `offset_delta`s must be strictly increasing (gaps allowed); the first record's
/// timestamp becomes `first_timestamp`, the largest `max_timestamp`, and the last delta + 1
/// `offset_span`.
pub fn encode_batch(
    records: &[Record],
    compression: Compression,
    producer: ProducerStamp,
) -> Result<Bytes, BatchError> {
    let summary = summarize(records)?.ok_or(BatchError::Empty)?;
    let offset_span = summary
        .last_delta
        .checked_add(1)
        .ok_or_else(|| BatchError::InvalidRecords("offset_delta too large".into()))?;
    let extent = Extent {
        compacted: false,
        offset_span,
        first_timestamp: summary.first_timestamp,
        max_timestamp: summary.max_timestamp,
    };
    write_batch(records, compression, producer, extent)
}

/// Encodes what log compaction left of a stored batch: a batch flagged [`ATTR_COMPACTED`] that
/// keeps the original batch's `offset_span` and `max_timestamp`.
///
/// The records' `offset_delta`s must be strictly increasing and below `offset_span`, and no
/// timestamp may exceed `max_timestamp`. `records` may be empty: the result is then a header
/// with no records section, uncompressed whatever `compression` says.
pub fn encode_compacted_batch(
    records: &[Record],
    compression: Compression,
    producer: ProducerStamp,
    offset_span: u32,
    max_timestamp: i64,
) -> Result<Bytes, BatchError> {
    if offset_span == 0 {
        return Err(BatchError::InvalidRecords(
            "a compacted batch covers at least one offset".into(),
        ));
    }
    let Some(summary) = summarize(records)? else {
        let extent = Extent {
            compacted: true,
            offset_span,
            first_timestamp: max_timestamp,
            max_timestamp,
        };
        return write_batch(records, Compression::None, producer, extent);
    };
    if summary.last_delta >= offset_span {
        return Err(BatchError::InvalidRecords(format!(
            "offset_delta {} is not below the offset span {offset_span}",
            summary.last_delta
        )));
    }
    if summary.max_timestamp > max_timestamp {
        return Err(BatchError::InvalidRecords(format!(
            "timestamp {} is after the max timestamp {max_timestamp}",
            summary.max_timestamp
        )));
    }
    let extent = Extent {
        compacted: true,
        offset_span,
        first_timestamp: summary.first_timestamp,
        max_timestamp,
    };
    write_batch(records, compression, producer, extent)
}

/// What the header needs to know about a non-empty run of records.
struct Summary {
    first_timestamp: i64,
    max_timestamp: i64,
    last_delta: u32,
}

/// Checks that the records' offset deltas strictly increase and summarises them; `None` when
/// there are no records.
fn summarize(records: &[Record]) -> Result<Option<Summary>, BatchError> {
    let Some((first, rest)) = records.split_first() else {
        return Ok(None);
    };
    let mut summary = Summary {
        first_timestamp: first.timestamp,
        max_timestamp: first.timestamp,
        last_delta: first.offset_delta,
    };
    for record in rest {
        if record.offset_delta <= summary.last_delta {
            return Err(BatchError::InvalidRecords(format!(
                "offset_delta {} does not increase",
                record.offset_delta
            )));
        }
        summary.last_delta = record.offset_delta;
        summary.max_timestamp = summary.max_timestamp.max(record.timestamp);
    }
    Ok(Some(summary))
}

/// The header fields the caller decides rather than the records section: whether the batch is
/// compacted, and the offsets and time it covers.
struct Extent {
    compacted: bool,
    offset_span: u32,
    first_timestamp: i64,
    max_timestamp: i64,
}

/// Writes the header and records section of a batch whose records and extent the caller has
/// already checked against each other.
fn write_batch(
    records: &[Record],
    compression: Compression,
    producer: ProducerStamp,
    extent: Extent,
) -> Result<Bytes, BatchError> {
    let record_count = u32::try_from(records.len())
        .map_err(|_| BatchError::InvalidRecords("too many records".into()))?;
    let estimate: usize = records
        .iter()
        .map(|r| r.encoded_len() + crate::record::MAX_DELTA_GROWTH)
        .sum();
    // The records go right after room for the header, so an uncompressed batch is built in
    // place: its bytes are written once, and the buffer becomes the batch without a copy.
    let mut out = Vec::with_capacity(BATCH_HEADER_LEN + estimate.min(MAX_UNCOMPRESSED_LEN));
    out.resize(BATCH_HEADER_LEN, 0);
    for record in records {
        encode_record(&mut out, record, extent.first_timestamp);
        if out.len() - BATCH_HEADER_LEN > MAX_UNCOMPRESSED_LEN {
            return Err(BatchError::TooLarge(out.len() - BATCH_HEADER_LEN));
        }
    }
    let uncompressed_len = out.len() - BATCH_HEADER_LEN;
    let compressed = match compression {
        Compression::None => None,
        Compression::Lz4 => Some(lz4_flex::block::compress(&out[BATCH_HEADER_LEN..])),
        Compression::Zstd => Some(
            zstd::bulk::compress(&out[BATCH_HEADER_LEN..], 1)
                .map_err(|err| BatchError::Compression(err.to_string()))?,
        ),
    };
    if let Some(compressed) = compressed {
        out.truncate(BATCH_HEADER_LEN);
        out.extend_from_slice(&compressed);
    }
    let records_len = out.len() - BATCH_HEADER_LEN;
    let records_len = u32::try_from(records_len).map_err(|_| BatchError::TooLarge(records_len))?;
    let uncompressed_len =
        u32::try_from(uncompressed_len).map_err(|_| BatchError::TooLarge(uncompressed_len))?;
    let mut attributes = compression.codec_id();
    if extent.compacted {
        attributes |= ATTR_COMPACTED;
    }

    let mut header = &mut out[..BATCH_HEADER_LEN];
    header.put_u8(BATCH_MAGIC);
    header.put_u8(BATCH_VERSION);
    header.put_u32(0); // CRC, filled in below once everything it covers is written.
    header.put_u8(attributes);
    header.put_u32(record_count);
    header.put_u32(extent.offset_span);
    header.put_i64(extent.first_timestamp);
    header.put_i64(extent.max_timestamp);
    header.put_i64(producer.producer_id);
    header.put_i16(producer.producer_epoch);
    header.put_i32(producer.base_sequence);
    header.put_u32(records_len);
    header.put_u32(uncompressed_len);
    debug_assert!(header.is_empty());
    let crc = crc32c::crc32c(&out[CRC_END..]);
    out[CRC_START..CRC_END].copy_from_slice(&crc.to_be_bytes());
    Ok(Bytes::from(out))
}
