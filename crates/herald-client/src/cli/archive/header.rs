//! What an export file says about itself: the header before the frames (the topic, enough to
//! create it again, and each partition's range at the time of the export) and the trailer after
//! them (what the frames hold, so a reader can tell a whole file from a cut one).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The header: the source topic as it was when the export started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportHeader {
    /// The source topic's name; the default target of an import.
    pub topic: String,
    /// The source topic's partitions: an import needs at least as many.
    pub partition_count: u32,
    /// The source topic's replication factor (an import uses the target cluster's default
    /// unless told otherwise: the target may have fewer nodes).
    pub replication_factor: u16,
    /// The source topic's configuration, as `GET /v1/topics/{topic}` answered it: an import
    /// creates a missing topic with it.
    pub config: Map<String, Value>,
    /// When the export started (ms since the Unix epoch, the exporting machine's clock).
    pub exported_at_ms: i64,
    /// Unique to this export (16 hex digits): an import names its producer after it, so a run
    /// again of the same file into the same topic is recognised (docs/export-import.md).
    pub export_id: String,
    /// Each partition's range at the start of the export: the frames of a partition cover its
    /// batches from `log_start_offset` up to `high_watermark`.
    pub partitions: Vec<PartitionRange>,
}

/// One partition's range at the start of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRange {
    pub partition: u32,
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

impl ExportHeader {
    /// How many offsets the export covers: what a progress bar counts before the records are
    /// known.
    pub fn offsets(&self) -> u64 {
        self.partitions
            .iter()
            .map(|range| range.high_watermark.saturating_sub(range.log_start_offset))
            .sum()
    }
}

/// The trailer: what the frames held, per partition, and the CRC-32C of every byte of the
/// file before the end marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportTrailer {
    /// One entry per partition of the header, in partition order.
    pub partitions: Vec<PartitionCounts>,
    /// CRC-32C of the file from its first byte up to (not including) the end marker's tag.
    pub crc32c: u32,
}

/// What one partition's frames held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartitionCounts {
    pub partition: u32,
    pub batches: u64,
    pub records: u64,
}

impl ExportTrailer {
    /// Every partition's batches, added up.
    pub fn batches(&self) -> u64 {
        self.partitions.iter().map(|counts| counts.batches).sum()
    }

    /// Every partition's records, added up.
    pub fn records(&self) -> u64 {
        self.partitions.iter().map(|counts| counts.records).sum()
    }
}
