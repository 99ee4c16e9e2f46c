//! The raft type configuration shared by every group on a node, and the commands they
//! replicate.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::partition::subscriptions::{DeliveryCommand, DeliveryOutcome};
use herald_domain::metadata::{MetadataCommand, MetadataOutcome};
use herald_domain::wire_version::Feature;

/// Where a node can be reached; carried in raft memberships.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    pub http_addr: String,
    pub raft_addr: String,
}

/// A command replicated by a raft group.
///
/// Its encoding is in every data directory and travels to every replica: an existing variant
/// never changes (golden bytes in `migrations/wire/`), a change is a new variant at the end,
/// and a new variant names the [`Feature`] it needs in [`RaftRequest::feature`], which its
/// proposer checks against the cluster version (`ClusterVersion::allows`) before proposing:
/// a replica of an older release could not decode it.
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
    /// For a partition group: a batch of an idempotent produce, appended only when the
    /// partition's replicated dedup state says it is new (see `raft::dedup`). The producer's
    /// identity (id, epoch, first sequence) is in the batch header's producer stamp; the
    /// claim carries the rest. Everything the decision needs is in the command or in
    /// replicated state, so every replica decides alike.
    AppendOnce { batch: Bytes, claim: DedupClaim },
    /// For a partition group: a change of a subscription's delivery state on the partition
    /// (see `raft::partition::subscriptions`).
    Delivery(DeliveryCommand),
}

/// What an idempotent append asks the partition's dedup state to check and remember.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupClaim {
    /// The request's `Idempotency-Key`, if it had one.
    pub idempotency_key: Option<String>,
    /// CRC-32C of this partition's share of the request as the client sent it: a retry with
    /// the same key and another body is refused, not answered with the first offsets.
    pub fingerprint: u32,
    /// The leader's clock when it proposed the entry: what the window's age is measured by.
    pub leader_time_ms: i64,
    /// The topic's window when the leader proposed.
    pub limits: DedupLimits,
}

/// How much a partition's dedup window remembers: keys and producers younger than
/// `max_age_ms`, at most `max_entries` of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupLimits {
    pub max_age_ms: i64,
    pub max_entries: u32,
}

impl RaftRequest {
    /// What every replica must know before this entry may be proposed (see
    /// `herald_domain::wire_version`); `None` for what every supported release knows. The
    /// match has no wildcard on purpose: a new variant says what it needs.
    pub fn feature(&self) -> Option<Feature> {
        match self {
            RaftRequest::Metadata(command) => command.feature(),
            RaftRequest::Append { .. }
            | RaftRequest::Trim { .. }
            | RaftRequest::Compact(_)
            | RaftRequest::AppendOnce { .. }
            | RaftRequest::Delivery(_) => None,
        }
    }

    /// The stored batch of an append of either kind.
    pub fn batch(&self) -> Option<&Bytes> {
        match self {
            RaftRequest::Append { batch } | RaftRequest::AppendOnce { batch, .. } => Some(batch),
            _ => None,
        }
    }

    /// The same append with another batch (what compaction left of it): an `AppendOnce`
    /// keeps its claim, so a replica that receives the rewritten entry decides as the
    /// others did.
    pub fn with_batch(&self, batch: Bytes) -> Option<RaftRequest> {
        match self {
            RaftRequest::Append { .. } => Some(RaftRequest::Append { batch }),
            RaftRequest::AppendOnce { claim, .. } => Some(RaftRequest::AppendOnce {
                batch,
                claim: claim.clone(),
            }),
            _ => None,
        }
    }
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
            RaftRequest::AppendOnce { batch, claim } => write!(
                formatter,
                "append once {} bytes (idempotency key: {})",
                batch.len(),
                claim.idempotency_key.is_some()
            ),
            RaftRequest::Delivery(command) => write!(
                formatter,
                "queue command of subscription {}",
                command.subscription()
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
    /// An `AppendOnce` that was written before; nothing was written now. `base_offset` is
    /// where the original landed, when the dedup state still knows (a producer's last few
    /// batches, every idempotency key in the window).
    Duplicate {
        base_offset: Option<u64>,
        offset_span: u32,
    },
    /// An `AppendOnce` whose first sequence is not the producer's next one.
    OutOfOrderSequence {
        expected: i64,
    },
    /// An `AppendOnce` of a producer epoch older than the partition knows.
    ProducerFenced {
        current_epoch: i16,
    },
    /// An `AppendOnce` whose idempotency key was used for a different request.
    IdempotencyKeyReused,
    /// What a queue command did.
    Delivery(DeliveryOutcome),
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
