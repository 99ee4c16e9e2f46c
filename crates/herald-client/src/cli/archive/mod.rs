//! Herald's topic export file (`herald topics export`, `herald topics import`): a topic's
//! stored batches, as a node served them, in one self-describing file. docs/export-import.md
//! is the specification; this module is its reference writer and reader.
//!
//! ```text
//! file    = magic version header frame* end
//! magic   = 89 48 4c 58 0d 0a 1a 0a          ("\x89HLX\r\n\x1a\n")
//! version = u16                              (1)
//! header  = u32 length, JSON, u32 CRC-32C of the JSON
//! frame   = 01, u32 partition, u64 base offset, u32 length, the batch as stored
//! end     = ff, u32 length, JSON trailer, u32 CRC-32C of the JSON; nothing after it
//! ```
//!
//! Integers are big-endian, as in the batches. The magic begins with a byte above 0x7f and
//! holds a CR LF and a ^Z, as PNG's does, so a transfer that mangles text (7-bit, line endings)
//! shows at the first bytes. The header and the trailer are JSON so fields can be added without
//! a new version; everything a reader must know to find the frames is binary. The trailer holds
//! every partition's batch and record counts and the CRC-32C of every byte before the end
//! marker: a file cut short (an export that was interrupted, a copy that stopped) has no end
//! marker and is refused as truncated, and one whose bytes changed is refused by that CRC or by
//! the batch's own.

mod header;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use header::{ExportHeader, ExportTrailer, PartitionCounts, PartitionRange};
pub use reader::{ArchiveReader, Frame};
pub use writer::ArchiveWriter;

/// The first eight bytes of every export file.
pub const MAGIC: [u8; 8] = *b"\x89HLX\r\n\x1a\n";
/// The file format version this code writes, and the newest it reads.
pub const VERSION: u16 = 1;
/// The tag of a frame holding one batch.
const TAG_BATCH: u8 = 0x01;
/// The tag of the end marker (the trailer follows).
const TAG_END: u8 = 0xff;
/// The largest header or trailer JSON read: a damaged length must not make the reader
/// allocate without bound (a trailer of a million partitions is a few tens of MB).
const MAX_JSON_LEN: u32 = 256 << 20;
/// The largest batch a frame may hold: a batch header and a records section of at most
/// 256 MiB, with room for a compressed section slightly larger than its input.
const MAX_BATCH_LEN: u32 = (256 << 20) + (1 << 20);

/// Why an export file could not be read (or written).
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("not a Herald export file (its first bytes are not the export magic)")]
    BadMagic,
    #[error(
        "the file is in export format version {0}, newer than this herald reads ({VERSION}): import it with a newer release"
    )]
    UnsupportedVersion(u16),
    #[error(
        "the file is truncated: it ends after {frames} batch frame(s) without its end marker (the export was interrupted, or the copy cut short)"
    )]
    Truncated { frames: u64 },
    #[error("the file is damaged: {0}")]
    Corrupt(String),
    #[error("the export does not fit the file format: {0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
