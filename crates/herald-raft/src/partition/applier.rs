//! A partition's state machine: assigns offsets to batches as their raft entries are applied,
//! and indexes them by offset and by time. The batch bytes stay where raft stored them. An
//! idempotent append first asks the partition's dedup window ([`super::dedup`]) whether it is
//! new.

use herald_domain::RaftGroupId;
use std::io;

use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::cleaner_state::{self, QueuedPass};
use super::dedup::{DedupSnapshot, DedupState, Verdict};
use super::dedup_rows;
use super::subscriptions::{self, DeliveryCommand, DeliveryStates};
use super::subscriptions_rows;
use crate::engine::codec;
use crate::engine::state_machine::GroupApplier;
use crate::engine::types::{CompactionPlan, DedupClaim, RaftRequest, RaftResponse};
use herald_domain::batch::{self, BatchHeader};
use herald_storage::{keys, Cf, Store, WriteSet};

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
    /// Compaction: where the last planned pass ended (the next one's dirty section starts
    /// here), how many passes were planned, and when recent ones were, newest last.
    compaction: CompactionProgress,
}

/// The replicated part of log compaction (what each replica's cleaner did is its own).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CompactionProgress {
    pub clean_end: u64,
    pub passes: u64,
    /// `(end, planned_at_ms)` of the last [`PASS_HISTORY`] passes: a tombstone below a pass's
    /// end was first cleaned when that pass was planned, so once that is `delete_retention_ms`
    /// ago it may go.
    pub history: Vec<(u64, i64)>,
}

/// How many passes the history keeps. Forgetting older ones only keeps tombstones longer.
const PASS_HISTORY: usize = 32;

impl CompactionProgress {
    /// The offset below which tombstones were first cleaned at or before `cutoff_ms`.
    pub fn tombstone_horizon(&self, cutoff_ms: i64) -> u64 {
        self.history
            .iter()
            .filter(|(_, planned_at)| *planned_at <= cutoff_ms)
            .map(|(end, _)| *end)
            .max()
            .unwrap_or(0)
    }
}

/// What a partition's snapshot carries: the small state and the whole dedup window (which
/// lives in rows of its own, not in the per-apply state).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PartitionSnapshot {
    progress: PartitionProgress,
    dedup: DedupSnapshot,
    queues: DeliveryStates,
}

pub struct PartitionApplier {
    group: RaftGroupId,
    progress: PartitionProgress,
    /// Idempotency keys and producers (see [`super::dedup`]).
    pub(crate) dedup: DedupState,
    watermarks: watch::Sender<Watermarks>,
    compaction: watch::Sender<CompactionProgress>,
    /// Subscriptions' delivery state (see [`super::subscriptions`]), shared with readers.
    queues: Arc<RwLock<DeliveryStates>>,
    queue_changes: watch::Sender<u64>,
    queues_dirty: bool,
    /// Where this replica's own batches start when it was built from a snapshot (the
    /// snapshot's next offset; 0 otherwise). Not replicated: `progress.log_start_offset`
    /// stays the partition's, which replayed commands depend on, while readers see
    /// `max(log_start_offset, data_start)` until a replayed trim passes it.
    data_start: u64,
}

/// `(group, TAG_DATA_START)` → `data_start`, u64 BE.
const TAG_DATA_START: u8 = 27;

/// A read-only view of a partition's applied subscription state, cheap to clone.
#[derive(Clone)]
pub struct DeliveryView {
    shared: Arc<RwLock<DeliveryStates>>,
    changes: watch::Receiver<u64>,
}

impl DeliveryView {
    pub fn read<R>(&self, read: impl FnOnce(&DeliveryStates) -> R) -> R {
        read(&self.shared.read())
    }

    /// Changes each time applied queue commands become visible.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }
}

impl PartitionApplier {
    pub fn new(group: RaftGroupId) -> Self {
        PartitionApplier {
            group,
            progress: PartitionProgress::default(),
            dedup: DedupState::default(),
            watermarks: watch::Sender::new(Watermarks::default()),
            compaction: watch::Sender::new(CompactionProgress::default()),
            queues: Arc::default(),
            queue_changes: watch::Sender::new(0),
            queues_dirty: false,
            data_start: 0,
        }
    }

    pub fn delivery_view(&self) -> DeliveryView {
        DeliveryView {
            shared: self.queues.clone(),
            changes: self.queue_changes.subscribe(),
        }
    }

    fn apply_delivery(
        &mut self,
        index: u64,
        command: &DeliveryCommand,
        writes: &mut WriteSet,
    ) -> RaftResponse {
        let mut states = self.queues.write();
        let outcome = subscriptions::apply(
            &mut states,
            index,
            command,
            self.progress.log_start_offset,
            self.progress.next_offset,
        );
        let subscription = command.subscription();
        if let Err(error) =
            subscriptions_rows::persist(writes, self.group, subscription, states.get(&subscription))
        {
            // Plain types cannot fail to encode; if one did, the row would be stale until the
            // next change, and a restart would replay the log from the last state record.
            tracing::error!(group = self.group.get(), subscription, %error, "encoding subscription state");
        }
        self.queues_dirty = true;
        RaftResponse::Delivery(outcome)
    }

    pub fn watermarks(&self) -> watch::Receiver<Watermarks> {
        self.watermarks.subscribe()
    }

    /// The applied compaction progress, for the leader's planning.
    pub fn compaction(&self) -> watch::Receiver<CompactionProgress> {
        self.compaction.subscribe()
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

    /// Queues a compaction pass on this replica. The dirty section starts where the last pass
    /// ended, or at the log start if retention removed that point since.
    fn compact(
        &mut self,
        plan: &CompactionPlan,
        writes: &mut WriteSet,
    ) -> Result<RaftResponse, io::Error> {
        let progress = &mut self.progress;
        let compaction = &mut progress.compaction;
        if plan.clean_end != compaction.clean_end
            || plan.end < plan.clean_end
            || plan.end > progress.next_offset
        {
            return Ok(RaftResponse::Rejected(format!(
                "stale compaction plan: offsets {}..{}, the last pass ended at {} and the log at {}",
                plan.clean_end, plan.end, compaction.clean_end, progress.next_offset
            )));
        }
        let dirty_start = plan.clean_end.max(progress.log_start_offset);
        let queued = QueuedPass {
            pass: compaction.passes + 1,
            dirty_start: dirty_start.min(plan.end),
            end: plan.end,
            // Tombstones in the dirty section are seen for the first time: they stay.
            tombstone_horizon: plan.tombstone_horizon.min(dirty_start),
        };
        cleaner_state::queue(writes, self.group, &queued)?;
        compaction.passes = queued.pass;
        compaction.clean_end = plan.end;
        compaction.history.push((plan.end, plan.planned_at_ms));
        if compaction.history.len() > PASS_HISTORY {
            compaction.history.remove(0);
        }
        Ok(RaftResponse::CompactionQueued { pass: queued.pass })
    }
}

impl PartitionApplier {
    /// Gives a checked batch its offsets and indexes it; answers its base offset.
    fn append_batch(&mut self, index: u64, header: &BatchHeader, writes: &mut WriteSet) -> u64 {
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
        base_offset
    }

    /// An idempotent append: the dedup window decides whether the batch is new; only a new
    /// one takes offsets, and the window remembers it in the same write.
    fn append_once(
        &mut self,
        index: u64,
        bytes: &[u8],
        claim: &DedupClaim,
        writes: &mut WriteSet,
    ) -> RaftResponse {
        let header = match batch::decode_header(bytes) {
            Ok(header) => header,
            Err(error) => return RaftResponse::Rejected(format!("corrupt batch: {error}")),
        };
        let verdict = self.dedup.check(
            self.group,
            claim,
            header.producer,
            header.offset_span,
            writes,
        );
        match verdict {
            Verdict::New => {
                let base_offset = self.progress.next_offset;
                if let Err(error) = self.dedup.record(
                    self.group,
                    claim,
                    header.producer,
                    base_offset,
                    header.offset_span,
                    writes,
                ) {
                    return RaftResponse::Rejected(format!("dedup window: {error}"));
                }
                let base_offset = self.append_batch(index, &header, writes);
                RaftResponse::Appended {
                    base_offset,
                    offset_span: header.offset_span,
                }
            }
            Verdict::Duplicate {
                base_offset,
                offset_span,
            } => {
                if let Err(error) = self.dedup.note_epoch(self.group, header.producer, writes) {
                    tracing::warn!(group = self.group.get(), %error, "could not note a newer producer epoch");
                }
                RaftResponse::Duplicate {
                    base_offset,
                    offset_span,
                }
            }
            Verdict::OutOfOrder { expected } => RaftResponse::OutOfOrderSequence { expected },
            Verdict::Fenced { current_epoch } => RaftResponse::ProducerFenced { current_epoch },
            Verdict::KeyReused => RaftResponse::IdempotencyKeyReused,
        }
    }
}

impl GroupApplier for PartitionApplier {
    fn apply(&mut self, index: u64, request: &RaftRequest, writes: &mut WriteSet) -> RaftResponse {
        let bytes = match request {
            RaftRequest::Append { batch } => batch,
            RaftRequest::AppendOnce { batch, claim } => {
                return self.append_once(index, batch, claim, writes)
            }
            RaftRequest::Trim {
                log_start_offset,
                time_index_before,
            } => return self.trim(*log_start_offset, *time_index_before, writes),
            RaftRequest::Compact(plan) => {
                return self.compact(plan, writes).unwrap_or_else(|error| {
                    RaftResponse::Rejected(format!("compaction plan: {error}"))
                })
            }
            RaftRequest::Delivery(command) => return self.apply_delivery(index, command, writes),
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
        let base_offset = self.append_batch(index, &header, writes);
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

    fn load_rows(&mut self, store: &Store) -> Result<(), io::Error> {
        self.data_start = store
            .get(Cf::RaftState, &keys::group_tag(self.group, TAG_DATA_START))?
            .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
            .map_or(0, u64::from_be_bytes);
        self.dedup = dedup_rows::load(store, self.group)?;
        *self.queues.write() = subscriptions_rows::load(store, self.group)?;
        self.queues_dirty = true;
        Ok(())
    }

    fn encode_snapshot(&self) -> Result<Vec<u8>, io::Error> {
        codec::encode(&PartitionSnapshot {
            progress: self.progress.clone(),
            dedup: self.dedup.snapshot(),
            queues: self.queues.read().clone(),
        })
    }

    /// A replica that needed a snapshot takes the state the leader checkpointed before the
    /// partition's first retained batch (see `engine::checkpoints`), then replays every
    /// entry after it: the retained batches, trims and subscription commands rebuild the
    /// same offsets, indexes and delivery state as on the leader. It holds no batch before
    /// the checkpoint's next offset; index rows of its older state go.
    fn restore_snapshot(&mut self, bytes: &[u8], writes: &mut WriteSet) -> Result<(), io::Error> {
        let snapshot: PartitionSnapshot = codec::decode(bytes)?;
        dedup_rows::replace_all(writes, self.group, &snapshot.dedup)?;
        subscriptions_rows::replace_all(writes, self.group, &snapshot.queues)?;
        for cf in [Cf::OffsetIndex, Cf::TimeIndex] {
            writes.delete_range(
                cf,
                keys::group_start(self.group).to_vec(),
                keys::group_end(self.group).to_vec(),
            );
        }
        *self.queues.write() = snapshot.queues;
        self.queues_dirty = true;
        self.progress = snapshot.progress;
        self.data_start = self.progress.next_offset;
        writes.put(
            Cf::RaftState,
            keys::group_tag(self.group, TAG_DATA_START).to_vec(),
            self.data_start.to_be_bytes().to_vec(),
        );
        self.dedup = DedupState::from_snapshot(snapshot.dedup);
        Ok(())
    }

    /// A partition's messages live in its raft log: its snapshots must not pass its first
    /// retained batch (see `engine::checkpoints`).
    fn snapshots_at_checkpoints(&self) -> bool {
        true
    }

    fn publish(&mut self) {
        if std::mem::take(&mut self.queues_dirty) {
            self.queue_changes.send_modify(|version| *version += 1);
        }
        let next = Watermarks {
            log_start_offset: self.progress.log_start_offset.max(self.data_start),
            high_watermark: self.progress.next_offset,
        };
        self.watermarks.send_if_modified(|current| {
            let changed = *current != next;
            *current = next;
            changed
        });
        let compaction = &self.progress.compaction;
        self.compaction.send_if_modified(|current| {
            let changed = current.passes != compaction.passes;
            if changed {
                *current = compaction.clone();
            }
            changed
        });
    }
}
