//! Reading an export file: the header first, then frame after frame, each batch verified, and
//! at the end marker the trailer checked against what was read. A reader never answers a frame
//! it has not verified, and never reaches the end of a file that is cut short or changed
//! without saying so.

use std::io::{ErrorKind, Read};

use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::header::{ExportHeader, ExportTrailer, PartitionCounts};
use super::writer::check_ranges;
use super::{ArchiveError, MAGIC, MAX_BATCH_LEN, MAX_JSON_LEN, TAG_BATCH, TAG_END, VERSION};
use herald_domain::batch::{decode_header, BatchHeader};

/// One batch of the file, verified.
#[derive(Debug, Clone)]
pub struct Frame {
    pub partition: u32,
    /// Where the batch started in its source partition.
    pub base_offset: u64,
    /// The batch, as the source stored it.
    pub batch: Bytes,
    pub header: BatchHeader,
}

/// Reads one export file from `input`.
pub struct ArchiveReader<R: Read> {
    source: Source<R>,
    header: ExportHeader,
    counts: Vec<PartitionCounts>,
    /// Set once the end marker was read and checked.
    trailer: Option<ExportTrailer>,
}

impl<R: Read> ArchiveReader<R> {
    /// Reads and checks the magic, the version and the header.
    pub fn open(mut input: R) -> Result<Self, ArchiveError> {
        let mut magic = [0u8; 8];
        let got = fill(&mut input, &mut magic)?;
        if magic[..got] != MAGIC[..got] {
            return Err(ArchiveError::BadMagic);
        }
        if got < magic.len() {
            return Err(ArchiveError::Truncated { frames: 0 });
        }
        let mut source = Source {
            input,
            crc: crc32c::crc32c(&magic),
            frames: 0,
        };
        let version = u16::from_be_bytes(source.take()?);
        if version > VERSION {
            return Err(ArchiveError::UnsupportedVersion(version));
        }
        if version == 0 {
            return Err(ArchiveError::Corrupt("format version 0".into()));
        }
        let header: ExportHeader = source.take_json("header")?;
        check_ranges(&header).map_err(|error| ArchiveError::Corrupt(error.to_string()))?;
        let counts = (0..header.partition_count)
            .map(|partition| PartitionCounts {
                partition,
                ..PartitionCounts::default()
            })
            .collect();
        Ok(ArchiveReader {
            source,
            header,
            counts,
            trailer: None,
        })
    }

    pub fn header(&self) -> &ExportHeader {
        &self.header
    }

    /// The trailer, once [`next_frame`](Self::next_frame) answered `None`.
    pub fn trailer(&self) -> Option<&ExportTrailer> {
        self.trailer.as_ref()
    }

    /// The next frame; `None` at the end marker, once the trailer matched what was read and
    /// nothing follows it.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ArchiveError> {
        if self.trailer.is_some() {
            return Ok(None);
        }
        let crc_before = self.source.crc;
        let [tag] = self.source.take::<1>()?;
        match tag {
            TAG_BATCH => self.batch_frame().map(Some),
            TAG_END => {
                self.end(crc_before)?;
                Ok(None)
            }
            other => Err(ArchiveError::Corrupt(format!(
                "unknown frame tag {other:#04x} after {} frame(s)",
                self.source.frames
            ))),
        }
    }

    fn batch_frame(&mut self) -> Result<Frame, ArchiveError> {
        let source = &mut self.source;
        let partition = u32::from_be_bytes(source.take()?);
        let base_offset = u64::from_be_bytes(source.take()?);
        let length = u32::from_be_bytes(source.take()?);
        let at = format!(
            "frame {} (partition {partition}, offset {base_offset})",
            source.frames + 1
        );
        let partitions = self.counts.len();
        let Some(counts) = self.counts.get_mut(partition as usize) else {
            return Err(ArchiveError::Corrupt(format!(
                "{at}: the topic has {partitions} partition(s)"
            )));
        };
        if length > MAX_BATCH_LEN {
            return Err(ArchiveError::Corrupt(format!(
                "{at}: a batch of {length} bytes"
            )));
        }
        let batch = source.read_vec(length)?;
        let header = decode_header(&batch)
            .map_err(|error| ArchiveError::Corrupt(format!("{at}: {error}")))?;
        counts.batches += 1;
        counts.records += u64::from(header.record_count);
        source.frames += 1;
        Ok(Frame {
            partition,
            base_offset,
            batch: Bytes::from(batch),
            header,
        })
    }

    /// The end marker's trailer: its counts and CRC against what was read, then nothing after.
    fn end(&mut self, crc_before: u32) -> Result<(), ArchiveError> {
        let trailer: ExportTrailer = self.source.take_json("trailer")?;
        if trailer.crc32c != crc_before {
            return Err(ArchiveError::Corrupt(format!(
                "the file's CRC-32C is {crc_before:#010x}, its trailer says {:#010x}",
                trailer.crc32c
            )));
        }
        if trailer.partitions != self.counts {
            return Err(ArchiveError::Corrupt(format!(
                "the trailer counts {} batch(es) and {} record(s), the file holds {} and {}",
                trailer.batches(),
                trailer.records(),
                self.counts.iter().map(|c| c.batches).sum::<u64>(),
                self.counts.iter().map(|c| c.records).sum::<u64>(),
            )));
        }
        let mut extra = [0u8; 1];
        if fill(&mut self.source.input, &mut extra)? > 0 {
            return Err(ArchiveError::Corrupt(
                "bytes follow the end marker (two files run together?)".into(),
            ));
        }
        self.trailer = Some(trailer);
        Ok(())
    }
}

/// The input as the reader takes it: exact reads, each added to the running CRC, and the count
/// of whole frames read so far for a truncated file's error.
struct Source<R: Read> {
    input: R,
    /// CRC-32C of every byte read so far.
    crc: u32,
    frames: u64,
}

impl<R: Read> Source<R> {
    /// A JSON block: length, JSON, its CRC-32C.
    fn take_json<T: DeserializeOwned>(&mut self, what: &str) -> Result<T, ArchiveError> {
        let length = u32::from_be_bytes(self.take()?);
        if length > MAX_JSON_LEN {
            return Err(ArchiveError::Corrupt(format!("a {what} of {length} bytes")));
        }
        let json = self.read_vec(length)?;
        let crc = u32::from_be_bytes(self.take()?);
        if crc32c::crc32c(&json) != crc {
            return Err(ArchiveError::Corrupt(format!(
                "the {what}'s CRC-32C does not match"
            )));
        }
        serde_json::from_slice(&json)
            .map_err(|error| ArchiveError::Corrupt(format!("the {what}: {error}")))
    }

    /// The next `length` bytes, allocated as they arrive: a damaged length in a short file
    /// costs what the file holds, not what the length says.
    fn read_vec(&mut self, length: u32) -> Result<Vec<u8>, ArchiveError> {
        let mut bytes = Vec::with_capacity((length as usize).min(1 << 20));
        (&mut self.input)
            .take(u64::from(length))
            .read_to_end(&mut bytes)?;
        if bytes.len() < length as usize {
            return Err(ArchiveError::Truncated {
                frames: self.frames,
            });
        }
        self.crc = crc32c::crc32c_append(self.crc, &bytes);
        Ok(bytes)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ArchiveError> {
        let mut bytes = [0u8; N];
        self.read(&mut bytes)?;
        Ok(bytes)
    }

    /// Fills `buf`, adding it to the CRC; the file ending first is a truncated file.
    fn read(&mut self, buf: &mut [u8]) -> Result<(), ArchiveError> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.crc = crc32c::crc32c_append(self.crc, buf);
                Ok(())
            }
            Err(error) if error.kind() == ErrorKind::UnexpectedEof => {
                Err(ArchiveError::Truncated {
                    frames: self.frames,
                })
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// Reads into `buf` until it is full or the input ends; answers how many bytes were read.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, ArchiveError> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(read) => got += read,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(got)
}
