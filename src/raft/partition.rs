//! A partition's state machine: assigns offsets to batches as their raft entries are applied,
//! and indexes them by offset and by time. The batch bytes stay where raft stored them.

use std::io;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::codec;
use super::state_machine::GroupApplier;
use super::types::{RaftRequest, RaftResponse};
use crate::domain::batch;
use crate::storage::{keys, Cf, WriteSet};

/// What readers may see of a partition: offsets in `[log_start_offset, high_watermark)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Watermarks {
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PartitionProgress {
    next_offset: u64,
    log_start_offset: u64,
    /// The largest timestamp applied so far: the time index records where it grows.
    max_timestamp: Option<i64>,
}

pub struct PartitionApplier {
    group: u64,
    progress: PartitionProgress,
    watermarks: watch::Sender<Watermarks>,
}

impl PartitionApplier {
    pub fn new(group: u64) -> Self {
        PartitionApplier {
            group,
            progress: PartitionProgress::default(),
            watermarks: watch::Sender::new(Watermarks::default()),
        }
    }

    pub fn watermarks(&self) -> watch::Receiver<Watermarks> {
        self.watermarks.subscribe()
    }
}

impl PartitionApplier {
    /// Moves the log start forward (never back, never past the high watermark) and drops the
    /// index entries of the removed batches; the raft log prefix itself is purged afterwards
    /// through raft (`PartitionReplica::purge_trimmed`).
    fn trim(
        &mut self,
        log_start_offset: u64,
        time_index_before: Option<i64>,
        writes: &mut WriteSet,
    ) -> RaftResponse {
        let progress = &mut self.progress;
        if log_start_offset <= progress.log_start_offset || log_start_offset > progress.next_offset
        {
            return RaftResponse::Trimmed {
                log_start_offset: progress.log_start_offset,
            };
        }
        progress.log_start_offset = log_start_offset;
        writes.delete_range(
            Cf::OffsetIndex,
            keys::group_u64(self.group, 0).to_vec(),
            keys::group_u64(self.group, log_start_offset).to_vec(),
        );
        if let Some(before) = time_index_before {
            writes.delete_range(
                Cf::TimeIndex,
                keys::time_index(self.group, i64::MIN, 0).to_vec(),
                keys::time_index(self.group, before, 0).to_vec(),
            );
        }
        RaftResponse::Trimmed { log_start_offset }
    }
}

impl GroupApplier for PartitionApplier {
    fn apply(&mut self, index: u64, request: &RaftRequest, writes: &mut WriteSet) -> RaftResponse {
        let bytes = match request {
            RaftRequest::Append { batch } => batch,
            RaftRequest::Trim {
                log_start_offset,
                time_index_before,
            } => return self.trim(*log_start_offset, *time_index_before, writes),
            RaftRequest::Metadata(_) => {
                return RaftResponse::Rejected("a partition group takes no metadata".into())
            }
        };
        // The leader checked the batch; checking again here keeps a corrupt entry from ever
        // taking offsets, identically on every replica.
        let header = match batch::decode_header(bytes) {
            Ok(header) => header,
            Err(error) => return RaftResponse::Rejected(format!("corrupt batch: {error}")),
        };
        let base_offset = self.progress.next_offset;
        self.progress.next_offset += u64::from(header.offset_span);
        writes.put(
            Cf::OffsetIndex,
            keys::group_u64(self.group, base_offset).to_vec(),
            index.to_be_bytes().to_vec(),
        );
        if self
            .progress
            .max_timestamp
            .is_none_or(|max| header.max_timestamp > max)
        {
            self.progress.max_timestamp = Some(header.max_timestamp);
            writes.put(
                Cf::TimeIndex,
                keys::time_index(self.group, header.max_timestamp, base_offset).to_vec(),
                Vec::new(),
            );
        }
        RaftResponse::Appended {
            base_offset,
            offset_span: header.offset_span,
        }
    }

    fn encode_state(&self) -> Result<Vec<u8>, io::Error> {
        codec::encode(&self.progress)
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        self.progress = codec::decode(bytes)?;
        Ok(())
    }

    /// A replica that needed a snapshot lacks every batch before it: its log starts at the
    /// snapshot's next offset (reads go to the leader, whose log may start earlier).
    fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<(), io::Error> {
        self.restore_state(bytes)?;
        self.progress.log_start_offset = self.progress.next_offset;
        Ok(())
    }

    fn publish(&mut self) {
        let next = Watermarks {
            log_start_offset: self.progress.log_start_offset,
            high_watermark: self.progress.next_offset,
        };
        self.watermarks.send_if_modified(|current| {
            let changed = *current != next;
            *current = next;
            changed
        });
    }
}
