//! The raft type configuration shared by every group on a node, and the commands they
//! replicate.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::domain::metadata::{MetadataCommand, MetadataOutcome};

/// Where a node can be reached; carried in raft memberships.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    pub http_addr: String,
    pub raft_addr: String,
}

/// A command replicated by a raft group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftRequest {
    /// For the metadata group.
    Metadata(MetadataCommand),
    /// For a partition group: one stored batch (`domain::batch` layout). This entry *is* the
    /// partition's copy of the batch; offsets are assigned when it is applied.
    Append { batch: Bytes },
    /// For a partition group: retention moves the log start to `log_start_offset` (a batch
    /// boundary, or the high watermark), decided by the leader and applied by every replica
    /// at the same point of the log. `time_index_before`: time-index entries with a smaller
    /// timestamp all belong to removed batches.
    Trim {
        log_start_offset: u64,
        time_index_before: Option<i64>,
    },
    /// For a partition group: queues one log-compaction pass on every replica (see
    /// `raft::compaction`). Planned by the leader; refused when `clean_end` is not where the
    /// last pass ended (a stale or repeated plan).
    Compact(CompactionPlan),
}

/// One compaction pass, as the leader planned it. Every replica runs it on the same committed
/// log, so all end with the same messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionPlan {
    /// Where the previous pass ended: the dirty section starts here.
    pub clean_end: u64,
    /// The dirty section ends here (a batch boundary before the active tail).
    pub end: u64,
    /// Tombstones below this offset have been passed by the cleaner at least
    /// `delete_retention_ms` ago and go.
    pub tombstone_horizon: u64,
    /// The leader's clock when it planned: what later passes measure `delete_retention_ms`
    /// from.
    pub planned_at_ms: i64,
}

impl fmt::Display for RaftRequest {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RaftRequest::Metadata(command) => write!(formatter, "metadata: {command}"),
            RaftRequest::Append { batch } => write!(formatter, "append {} bytes", batch.len()),
            RaftRequest::Trim {
                log_start_offset, ..
            } => write!(formatter, "trim to offset {log_start_offset}"),
            RaftRequest::Compact(plan) => write!(
                formatter,
                "compact offsets {}..{} (tombstones below {})",
                plan.clean_end, plan.end, plan.tombstone_horizon
            ),
        }
    }
}

/// The outcome of applying a [`RaftRequest`], handed back to the proposer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftResponse {
    Metadata(MetadataOutcome),
    /// The batch's first offset and how many offsets it took.
    Appended {
        base_offset: u64,
        offset_span: u32,
    },
    /// The partition's log start after a trim.
    Trimmed {
        log_start_offset: u64,
    },
    /// The number of the compaction pass a `Compact` queued.
    CompactionQueued {
        pass: u64,
    },
    /// The command was refused deterministically (e.g. a corrupt batch, a wrong group kind).
    Rejected(String),
}

openraft::declare_raft_types!(
    /// Herald's raft types: u64 node ids, [`NodeAddr`] nodes, Tokio.
    pub TypeConfig:
        D = RaftRequest,
        R = RaftResponse,
        NodeId = u64,
        Node = NodeAddr,
);

pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, Vec<u8>>;
