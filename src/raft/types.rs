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
}

impl fmt::Display for RaftRequest {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RaftRequest::Metadata(command) => write!(formatter, "metadata: {command}"),
            RaftRequest::Append { batch } => write!(formatter, "append {} bytes", batch.len()),
            RaftRequest::Trim {
                log_start_offset, ..
            } => write!(formatter, "trim to offset {log_start_offset}"),
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
