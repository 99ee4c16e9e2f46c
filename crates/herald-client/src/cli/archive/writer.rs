//! Writing an export file: the header, then each batch as a frame, then the end marker with the
//! trailer. Every batch is verified (its CRC, its header) before it is written, so a file never
//! holds a batch that a reader would refuse.

use std::io::Write;

use serde::Serialize;

use super::header::{ExportHeader, ExportTrailer, PartitionCounts};
use super::{ArchiveError, MAGIC, MAX_BATCH_LEN, TAG_BATCH, TAG_END, VERSION};
use herald_domain::batch::{decode_header, BatchHeader};

/// Writes one export file to `out`, keeping the running CRC and the counts the trailer needs.
pub struct ArchiveWriter<W: Write> {
    out: W,
    /// CRC-32C of every byte written so far.
    crc: u32,
    /// Per partition, what its frames held so far.
    counts: Vec<PartitionCounts>,
}

impl<W: Write> ArchiveWriter<W> {
    /// Writes the magic, the version and `header`.
    pub fn new(out: W, header: &ExportHeader) -> Result<Self, ArchiveError> {
        check_ranges(header)?;
        let mut writer = ArchiveWriter {
            out,
            crc: 0,
            counts: (0..header.partition_count)
                .map(|partition| PartitionCounts {
                    partition,
                    ..PartitionCounts::default()
                })
                .collect(),
        };
        writer.put(&MAGIC)?;
        writer.put(&VERSION.to_be_bytes())?;
        writer.put_json(header)?;
        Ok(writer)
    }

    /// Writes one batch of `partition` that starts at `base_offset` in its source, as it is.
    /// Answers its header.
    pub fn write_frame(
        &mut self,
        partition: u32,
        base_offset: u64,
        batch: &[u8],
    ) -> Result<BatchHeader, ArchiveError> {
        let partitions = self.counts.len();
        let counts = self.counts.get_mut(partition as usize).ok_or_else(|| {
            ArchiveError::Invalid(format!(
                "partition {partition} is not one of the topic's {partitions}"
            ))
        })?;
        let header = decode_header(batch).map_err(|error| {
            ArchiveError::Corrupt(format!(
                "partition {partition}, batch at offset {base_offset} as the server sent it: {error}"
            ))
        })?;
        let length = u32::try_from(batch.len())
            .ok()
            .filter(|&length| length <= MAX_BATCH_LEN)
            .ok_or_else(|| {
                ArchiveError::Invalid(format!(
                    "partition {partition}, batch at offset {base_offset}: {} bytes, above the {MAX_BATCH_LEN} a frame holds",
                    batch.len()
                ))
            })?;
        counts.batches += 1;
        counts.records += u64::from(header.record_count);
        self.put(&[TAG_BATCH])?;
        self.put(&partition.to_be_bytes())?;
        self.put(&base_offset.to_be_bytes())?;
        self.put(&length.to_be_bytes())?;
        self.put(batch)?;
        Ok(header)
    }

    /// Writes the end marker and the trailer, and flushes; answers the output and the trailer.
    pub fn finish(mut self) -> Result<(W, ExportTrailer), ArchiveError> {
        let trailer = ExportTrailer {
            partitions: self.counts.clone(),
            crc32c: self.crc,
        };
        self.put(&[TAG_END])?;
        self.put_json(&trailer)?;
        self.out.flush()?;
        Ok((self.out, trailer))
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), ArchiveError> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.out.write_all(bytes)?;
        Ok(())
    }

    /// A JSON block: its length, the JSON, its own CRC-32C.
    fn put_json(&mut self, value: &impl Serialize) -> Result<(), ArchiveError> {
        let json = serde_json::to_vec(value)
            .map_err(|error| ArchiveError::Invalid(format!("JSON: {error}")))?;
        let length = u32::try_from(json.len())
            .ok()
            .filter(|&length| length <= super::MAX_JSON_LEN)
            .ok_or_else(|| {
                ArchiveError::Invalid(format!("a header of {} bytes is too large", json.len()))
            })?;
        self.put(&length.to_be_bytes())?;
        self.put(&json)?;
        self.put(&crc32c::crc32c(&json).to_be_bytes())
    }
}

/// The header lists each partition once, in order: 0, 1, 2, ... `partition_count - 1`.
pub(super) fn check_ranges(header: &ExportHeader) -> Result<(), ArchiveError> {
    let numbered = header.partitions.len() == header.partition_count as usize
        && header
            .partitions
            .iter()
            .enumerate()
            .all(|(index, range)| range.partition as usize == index);
    if numbered {
        Ok(())
    } else {
        Err(ArchiveError::Invalid(format!(
            "the header lists {} partition range(s) for {} partition(s), not one per partition in order",
            header.partitions.len(),
            header.partition_count
        )))
    }
}
