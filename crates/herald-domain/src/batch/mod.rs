//! The stored form of a record batch: the unit the log writes, replicates and reads.
//!
//! A batch is a fixed-size header followed by a records section. All integers in the header are
//! big-endian, so batches compare and debug the same on every platform:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 1 | magic ([`BATCH_MAGIC`]) |
//! | 1  | 1 | format version ([`BATCH_VERSION`]) |
//! | 2  | 4 | CRC-32C of every byte from offset 6 to the end of the records section |
//! | 6  | 1 | attributes: bits 0-2 the compression codec, bit 3 [`ATTR_COMPACTED`], bits 4-7 reserved (zero) |
//! | 7  | 4 | record_count |
//! | 11 | 4 | offset_span (last offset_delta + 1; compacted: at least that) |
//! | 15 | 8 | first_timestamp |
//! | 23 | 8 | max_timestamp (largest record timestamp; compacted: at least that) |
//! | 31 | 8 | producer_id |
//! | 39 | 2 | producer_epoch |
//! | 41 | 4 | base_sequence |
//! | 45 | 4 | records_len (stored length of the records section) |
//! | 49 | 4 | uncompressed_len |
//!
//! The CRC sits right after magic and version so it covers every other header field as well as
//! the records: a flipped bit anywhere is caught before any of it is trusted. Magic and version
//! are checked on their own, before the CRC, so a foreign or newer format gets a precise error.
//!
//! A *compacted* batch ([`ATTR_COMPACTED`] set, written by [`encode_compacted_batch`]) is what log
//! compaction leaves of a stored batch once superseded records are removed. It keeps the
//! `offset_span` and `max_timestamp` of the batch it was cleaned from, so a replica that applies
//! it instead of the original assigns the same offsets and builds the same time index; its
//! surviving records may therefore end before the span does (every offset_delta is still below
//! it) and have a smaller largest timestamp. It may even hold no record at all: then it is a
//! header only, with record_count, records_len and uncompressed_len 0, codec none, and
//! first_timestamp equal to max_timestamp. Without the flag the span and max timestamp must
//! match the records exactly and a batch holds at least one record.
//!
//! Each record in the (uncompressed) records section is: an attributes byte ([`REC_KEY_PRESENT`],
//! [`REC_KEY_TEXT`], [`REC_VALUE_JSON`]), offset_delta as an unsigned LEB128 varint, the
//! timestamp minus first_timestamp as a zigzag varint, the key (length varint + bytes) if
//! present, the value (length varint + bytes), a header count varint, and per header its name
//! and value (each length varint + UTF-8 bytes). Varints keep the common small numbers to one
//! byte; compression (LZ4 block or zstd level 1) applies to the records section only, so the
//! header can be read without decompressing.
//!
//! [`decode_batch`] copies every record out; [`visit_records`] walks them as borrowed
//! [`RecordView`]s instead, for readers that only look (the log cleaner). Both run the same walk,
//! so they accept and refuse exactly the same batches.
//!
//! Decoding treats its input as untrusted (a disk can rot, a peer can be buggy): it never panics,
//! checks every length against what is actually there, and allocates at most
//! [`MAX_UNCOMPRESSED_LEN`] for decompression, and only after the CRC matched.

mod encode;
mod records;
mod restamp;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::record::Record;
use records::walk_records;

pub use encode::{encode_batch, encode_compacted_batch};
pub use records::{encoded_record_len, RecordView};
pub use restamp::restamp;

/// First byte of every batch ('H' for Herald): tells a batch from garbage or a foreign format.
pub const BATCH_MAGIC: u8 = 0x48;
/// The layout version this code writes and reads.
pub const BATCH_VERSION: u8 = 1;
/// Length of the fixed header that precedes the records section.
pub const BATCH_HEADER_LEN: usize = 53;
/// The largest records section (uncompressed) accepted, so a corrupt or hostile length can not
/// make the decoder allocate without bound.
pub const MAX_UNCOMPRESSED_LEN: usize = 256 * 1024 * 1024;

/// Batch attribute bit: the batch is what compaction left of a stored batch, so its
/// `offset_span` and `max_timestamp` may exceed what its records need and it may hold no record
/// (see the module documentation).
pub const ATTR_COMPACTED: u8 = 0b0000_1000;

/// Record attribute bit: the record has a key.
pub const REC_KEY_PRESENT: u8 = 0b001;
/// Record attribute bit: the key is UTF-8 text (`key`) rather than bytes (`key_b64`).
pub const REC_KEY_TEXT: u8 = 0b010;
/// Record attribute bit: the value is JSON text (`value`) rather than bytes (`value_b64`).
pub const REC_VALUE_JSON: u8 = 0b100;

const CRC_START: usize = 2;
const CRC_END: usize = 6;
const CODEC_MASK: u8 = 0b0000_0111;
/// The fewest bytes one encoded record can take (attributes, delta, timestamp, value length,
/// header count): bounds how many records a section of a given length can hold.
const MIN_RECORD_LEN: usize = 5;
/// The fewest bytes one encoded header can take (two empty strings).
const MIN_HEADER_LEN: usize = 2;

/// How the records section of a batch is compressed. Serialised as `"none"`, `"lz4"`, `"zstd"`,
/// the spelling of the topic config in API.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Lz4,
    Zstd,
}

impl Compression {
    /// The API spelling: `"none"`, `"lz4"` or `"zstd"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Parses the API spelling; anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(Compression::None),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        }
    }

    fn codec_id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd => 2,
        }
    }

    fn from_codec_id(id: u8) -> Option<Self> {
        match id {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

/// Who produced a batch, for idempotent producers: lets the leader drop a retried batch it has
/// already appended. Batches from ordinary producers carry [`ProducerStamp::NONE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStamp {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerStamp {
    /// No producer identity, Kafka's convention of -1 everywhere.
    pub const NONE: ProducerStamp = ProducerStamp {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };

    /// Whether this stamp identifies an idempotent producer.
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }
}

impl Default for ProducerStamp {
    fn default() -> Self {
        ProducerStamp::NONE
    }
}

/// The decoded fixed header of a batch: enough to index, retain and fetch it without touching
/// the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub compression: Compression,
    /// Whether [`ATTR_COMPACTED`] is set: the batch is what compaction left of a stored batch.
    pub compacted: bool,
    /// How many records the batch holds; 0 only for a compacted batch.
    pub record_count: u32,
    /// How many offsets the batch covers, gaps included: last offset_delta + 1, or for a
    /// compacted batch that of the batch it was cleaned from (larger than every offset_delta).
    pub offset_span: u32,
    /// Timestamp of the first record (for an empty compacted batch, `max_timestamp`).
    pub first_timestamp: i64,
    /// Largest timestamp of any record (timestamps need not be ordered), or for a compacted
    /// batch that of the batch it was cleaned from (at least every record's timestamp).
    pub max_timestamp: i64,
    pub producer: ProducerStamp,
    /// Stored (possibly compressed) length of the records section.
    pub records_len: u32,
    /// Length of the records section once decompressed.
    pub uncompressed_len: u32,
}

impl BatchHeader {
    /// The full stored length of the batch: header plus records section.
    pub fn batch_len(&self) -> usize {
        BATCH_HEADER_LEN + self.records_len as usize
    }
}

/// Why a batch could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("a batch needs at least one record")]
    Empty,
    #[error("batch is truncated")]
    Truncated,
    #[error("not a batch: bad magic byte")]
    BadMagic,
    #[error("unsupported batch format version {0}")]
    UnsupportedVersion(u8),
    #[error("batch CRC mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    #[error("corrupt batch: {0}")]
    Corrupt(String),
    #[error("batch records section of {0} bytes exceeds the limit of {MAX_UNCOMPRESSED_LEN}")]
    TooLarge(usize),
    #[error("records can not form a batch: {0}")]
    InvalidRecords(String),
    #[error("compression failed: {0}")]
    Compression(String),
}

fn corrupt(what: impl Into<String>) -> BatchError {
    BatchError::Corrupt(what.into())
}

/// Decodes and verifies the header of the batch in `buf`, which must hold exactly one batch.
///
/// Checks magic, version, lengths, the CRC over header and records, and the header's own
/// consistency; the records themselves are not parsed (see [`decode_batch`]).
pub fn decode_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header_bytes: &[u8; BATCH_HEADER_LEN] = buf
        .get(..BATCH_HEADER_LEN)
        .and_then(|slice| slice.try_into().ok())
        .ok_or(BatchError::Truncated)?;
    if header_bytes[0] != BATCH_MAGIC {
        return Err(BatchError::BadMagic);
    }
    if header_bytes[1] != BATCH_VERSION {
        return Err(BatchError::UnsupportedVersion(header_bytes[1]));
    }
    let mut fields = HeaderFields(&header_bytes[CRC_START..]);
    let expected_crc = fields.u32();
    let attributes = fields.u8();
    let record_count = fields.u32();
    let offset_span = fields.u32();
    let first_timestamp = fields.i64();
    let max_timestamp = fields.i64();
    let producer_id = fields.i64();
    let producer_epoch = fields.i16();
    let base_sequence = fields.i32();
    let records_len = fields.u32();
    let uncompressed_len = fields.u32();

    let batch_len = BATCH_HEADER_LEN
        .checked_add(records_len as usize)
        .ok_or(BatchError::Truncated)?;
    if buf.len() < batch_len {
        return Err(BatchError::Truncated);
    }
    if buf.len() > batch_len {
        return Err(corrupt(format!(
            "{} bytes after the end of the batch",
            buf.len() - batch_len
        )));
    }
    let actual_crc = crc32c::crc32c(&buf[CRC_END..]);
    if actual_crc != expected_crc {
        return Err(BatchError::CrcMismatch {
            expected: expected_crc,
            actual: actual_crc,
        });
    }

    // The CRC matched, so what follows catches encoder bugs rather than bit rot.
    if attributes & !(CODEC_MASK | ATTR_COMPACTED) != 0 {
        return Err(corrupt(format!(
            "reserved attribute bits set: {attributes:#04x}"
        )));
    }
    let compacted = attributes & ATTR_COMPACTED != 0;
    let compression = Compression::from_codec_id(attributes & CODEC_MASK).ok_or_else(|| {
        corrupt(format!(
            "unknown compression codec {}",
            attributes & CODEC_MASK
        ))
    })?;
    if record_count == 0 {
        if !compacted {
            return Err(corrupt("batch holds no records"));
        }
        // All that compaction left of a batch: the header alone, still covering its offsets.
        if compression != Compression::None || records_len != 0 || uncompressed_len != 0 {
            return Err(corrupt("empty compacted batch with a records section"));
        }
        if offset_span == 0 {
            return Err(corrupt("empty compacted batch covers no offsets"));
        }
        if first_timestamp != max_timestamp {
            return Err(corrupt(
                "empty compacted batch with differing first and max timestamps",
            ));
        }
    }
    if offset_span < record_count {
        return Err(corrupt(format!(
            "offset span {offset_span} is smaller than the record count {record_count}"
        )));
    }
    if max_timestamp < first_timestamp {
        return Err(corrupt("max timestamp is before the first timestamp"));
    }
    if uncompressed_len as usize > MAX_UNCOMPRESSED_LEN {
        return Err(corrupt(format!(
            "uncompressed length {uncompressed_len} exceeds the limit"
        )));
    }
    if compression == Compression::None && uncompressed_len != records_len {
        return Err(corrupt("uncompressed batch with differing lengths"));
    }
    if (record_count as usize).saturating_mul(MIN_RECORD_LEN) > uncompressed_len as usize {
        return Err(corrupt(format!(
            "{record_count} records can not fit in {uncompressed_len} bytes"
        )));
    }

    Ok(BatchHeader {
        compression,
        compacted,
        record_count,
        offset_span,
        first_timestamp,
        max_timestamp,
        producer: ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence,
        },
        records_len,
        uncompressed_len,
    })
}

/// Decodes the batch in `buf` (exactly one batch): its verified header and all its records.
///
/// The owned counterpart of [`visit_records`], built on the same walk: it accepts and refuses
/// exactly the same inputs, with the same errors.
pub fn decode_batch(buf: &[u8]) -> Result<(BatchHeader, Vec<Record>), BatchError> {
    let header = decode_header(buf)?;
    let section = records_section(buf, &header)?;
    let mut records =
        Vec::with_capacity((header.record_count as usize).min(section.len() / MIN_RECORD_LEN));
    walk_records(&section, &header, |view| {
        records.push(view.to_record()?);
        Ok(())
    })?;
    Ok((header, records))
}

/// Walks the records of the batch in `buf` (exactly one batch) without copying them: `visit`
/// gets each record, in order, as a [`RecordView`] borrowed from the batch (or from its
/// decompressed records section), and the verified header is returned at the end.
///
/// Everything [`decode_batch`] checks is checked here too, so the two accept and refuse exactly
/// the same inputs; only the allocation per record is saved (a compressed batch still costs one
/// buffer to decompress into). The header, CRC and decompression are checked before the first
/// record is visited, but the records are checked as they are walked, and some checks (trailing
/// bytes, the offset span and max timestamp against the records) can only be made after the
/// last one. So on `Err`, `visit` may already have seen some records of the refused batch:
/// callers must discard whatever they gathered from them.
///
/// A view lives only for its call (it may borrow the decompression buffer): copy out what is
/// kept.
pub fn visit_records(
    buf: &[u8],
    mut visit: impl FnMut(RecordView<'_>),
) -> Result<BatchHeader, BatchError> {
    let header = decode_header(buf)?;
    let section = records_section(buf, &header)?;
    walk_records(&section, &header, |view| {
        visit(view);
        Ok(())
    })?;
    Ok(header)
}

/// The records section of the verified batch in `buf`: borrowed as stored, or decompressed into
/// one buffer of the length the header declares.
fn records_section<'b>(buf: &'b [u8], header: &BatchHeader) -> Result<Cow<'b, [u8]>, BatchError> {
    let stored = &buf[BATCH_HEADER_LEN..header.batch_len()];
    let expected_len = header.uncompressed_len as usize;
    let section = match header.compression {
        Compression::None => Cow::Borrowed(stored),
        Compression::Lz4 => Cow::Owned(
            lz4_flex::block::decompress(stored, expected_len)
                .map_err(|err| corrupt(format!("lz4: {err}")))?,
        ),
        Compression::Zstd => Cow::Owned(
            zstd::bulk::decompress(stored, expected_len)
                .map_err(|err| corrupt(format!("zstd: {err}")))?,
        ),
    };
    if section.len() != expected_len {
        return Err(corrupt(format!(
            "records section decompressed to {} bytes, expected {expected_len}",
            section.len()
        )));
    }
    Ok(section)
}

/// Reads the fixed header fields; the caller guarantees the slice is long enough (it is cut from
/// a `[u8; BATCH_HEADER_LEN]`), so each read takes its bytes and advances.
struct HeaderFields<'a>(&'a [u8]);

impl HeaderFields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some((head, rest)) = self.0.split_at_checked(N) {
            out.copy_from_slice(head);
            self.0 = rest;
        }
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take())
    }
}
