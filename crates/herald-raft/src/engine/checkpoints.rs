//! Checkpoints: copies of a group's state-machine state taken at an applied raft index and
//! kept as candidate snapshots.
//!
//! Why: a partition's snapshot must never be ahead of the partition's retained data. Its
//! messages stay in the raft log, so a replica that installs a snapshot at index `C` gets
//! only the entries after `C` from its leader. If `C` were the leader's applied point, that
//! replica would hold none of the retained batches before it (issue 29: a restored replica
//! started its log at the high watermark, then led). So a partition snapshots at a checkpoint
//! taken *before* its first retained batch, and purges its raft log only that far: a lagging
//! replica installs the checkpoint and then replays every retained entry (batches, trims,
//! subscription commands), which rebuilds the same offsets, indexes and delivery state as
//! the leader's. See `docs/architecture.md` ("Snapshots are checkpoints before the log start").
//!
//! The partition asks (every purge check) with a limit: the raft index just before its first
//! retained batch. A checkpoint is taken whenever none waits inside the retained range, or
//! the newest is more than a quarter of the retained range old, so the purge stays within
//! about a quarter of the retained log of the limit while a handful of checkpoints are kept.
//! Between checks, apply takes one after every [`BURST_BYTES`] of batches (and at least 16
//! times the checkpoint's own size, so checkpoints cost at most a sixteenth of what is
//! written): a burst written within a second still gets checkpoints inside it, so the disk
//! comes back when retention cuts into it. Groups that never set a limit (the metadata group)
//! snapshot at their applied point.

use herald_domain::RaftGroupId;
use std::io;

use super::codec;
use super::state_machine::{GroupApplier, GroupStateMachine, SnapshotBuilder, TAG_SNAPSHOT};
use super::types::SnapshotMeta;
use herald_storage::{keys, Cf, Store, WriteSet};

/// `(group, TAG_CHECKPOINT, raft index u64 BE)` → `(SnapshotMeta, state record)`, the format
/// of the stored snapshot.
const TAG_CHECKPOINT: u8 = 12;

/// Apply takes a checkpoint after this many bytes of batches at least (see the module doc).
const BURST_BYTES: usize = 1 << 20;

/// At most this many checkpoints wait inside the retained range (beyond it only the newest
/// one is kept, to become the next snapshot).
const MAX_PENDING: usize = 8;

/// The checkpoints of one group, as indexes (the rows hold the state).
#[derive(Debug, Default)]
pub struct Checkpoints {
    /// The group snapshots at checkpoints (a partition).
    enabled: bool,
    /// Indexes of the stored checkpoints, ascending.
    indexes: Vec<u64>,
    /// A snapshot may use no checkpoint past this index; `None`: snapshots at the applied
    /// point.
    limit: Option<u64>,
    /// The index of the current snapshot (built or installed).
    snapshot: Option<u64>,
    /// Bytes of batches applied since the last checkpoint, and the size of that checkpoint.
    bytes_since: usize,
    last_size: usize,
}

/// What [`GroupStateMachine::maintain_checkpoints`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointStatus {
    /// The checkpoint a snapshot would use now, if newer than the current snapshot.
    pub usable: Option<u64>,
    /// The raft index of the newest stored checkpoint (operators and tests watch it: a
    /// lagging replica can be rebuilt from a snapshot no older than it).
    pub newest: Option<u64>,
}

fn row_key(group: RaftGroupId, index: u64) -> Vec<u8> {
    keys::group_tag_u64(group, TAG_CHECKPOINT, index).to_vec()
}

/// Deletes the checkpoint rows at or below `upto`.
pub(super) fn drop_rows_upto(writes: &mut WriteSet, group: RaftGroupId, upto: u64) {
    writes.delete_range(
        Cf::RaftState,
        row_key(group, 0),
        row_key(group, upto.saturating_add(1)),
    );
}

impl Checkpoints {
    /// Reads the indexes of `group`'s checkpoints and of its snapshot back (blocking work on
    /// a blocking thread).
    pub(super) async fn load(
        store: &Store,
        group: RaftGroupId,
        enabled: bool,
    ) -> Result<Self, io::Error> {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let mut indexes = Vec::new();
            store.scan(
                Cf::RaftState,
                &keys::group_tag(group, TAG_CHECKPOINT),
                &keys::group_tag(group, TAG_CHECKPOINT + 1),
                |key, _| {
                    if let Some(index) = keys::group_tag_suffix(group, TAG_CHECKPOINT, key)
                        .and_then(|suffix| <[u8; 8]>::try_from(suffix).ok())
                    {
                        indexes.push(u64::from_be_bytes(index));
                    }
                    Ok(true)
                },
            )?;
            let snapshot = match store.get(Cf::RaftState, &keys::group_tag(group, TAG_SNAPSHOT))? {
                Some(bytes) => {
                    let (meta, _): (SnapshotMeta, Vec<u8>) = codec::decode(&bytes)?;
                    meta.last_log_id.map(|log_id| log_id.index)
                }
                None => None,
            };
            Ok(Checkpoints {
                enabled,
                indexes,
                snapshot,
                ..Checkpoints::default()
            })
        })
        .await
        .map_err(io::Error::other)?
    }

    pub(super) fn limited(&self) -> bool {
        self.enabled
    }

    /// Counts `bytes` of batches just applied; answers whether apply should take a
    /// checkpoint now (only for groups with a limit).
    pub(super) fn note_applied(&mut self, bytes: usize) -> bool {
        self.bytes_since += bytes;
        self.limited() && self.bytes_since >= BURST_BYTES.max(self.last_size * 16)
    }

    /// Forgets every checkpoint (a snapshot from the leader replaces the state).
    pub(super) fn clear(&mut self, group: RaftGroupId, writes: &mut WriteSet) {
        drop_rows_upto(writes, group, u64::MAX - 1);
        self.indexes.clear();
    }

    pub(super) fn snapshot_installed(&mut self, index: Option<u64>) {
        self.snapshot = index;
    }

    /// The newest checkpoint within the limit that is newer than the current snapshot.
    fn usable(&self) -> Option<u64> {
        let limit = self.limit?;
        self.indexes
            .iter()
            .rev()
            .copied()
            .find(|index| *index <= limit)
            .filter(|index| self.snapshot.is_none_or(|snapshot| *index > snapshot))
    }

    /// Whether to take a checkpoint at `applied` now.
    fn due(&self, applied: u64, limit: u64) -> bool {
        let newest = self.indexes.last().copied().or(self.snapshot);
        match newest {
            None => true,
            Some(newest) if applied <= newest => false,
            // Nothing waits inside the retained range: the next candidate.
            Some(newest) if newest <= limit => true,
            Some(newest) => {
                let retained = applied.saturating_sub(limit);
                applied - newest >= (retained / 4).max(1)
            }
        }
    }

    /// The checkpoints no snapshot will use: below the newest one within the limit, and the
    /// densest ones inside the retained range past [`MAX_PENDING`]. Removes them here.
    fn surplus(&mut self) -> Vec<u64> {
        let Some(limit) = self.limit else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        let within = self.indexes.iter().filter(|index| **index <= limit).count();
        if within > 1 {
            dropped.extend(self.indexes.drain(..within - 1));
        }
        // The pending ones start after the (at most one) checkpoint within the limit.
        let first_pending = usize::from(self.indexes.first().is_some_and(|i| *i <= limit));
        while self.indexes.len() - first_pending > MAX_PENDING {
            // Never the oldest pending (the next to become usable) nor the newest: the one
            // closest to its predecessor.
            let start = first_pending + 1;
            let Some(position) = (start..self.indexes.len() - 1)
                .min_by_key(|&position| self.indexes[position] - self.indexes[position - 1])
            else {
                break;
            };
            dropped.push(self.indexes.remove(position));
        }
        dropped
    }
}

impl<A: GroupApplier> GroupStateMachine<A> {
    /// Sets the snapshot limit to `limit` (the raft index before the first retained batch),
    /// takes a checkpoint of the applied state if one is due, and answers the checkpoint a
    /// snapshot would use now, if newer than the current snapshot, and the newest one. Runs
    /// between applies (in the state-machine worker), so the checkpoint is the state at
    /// exactly its index.
    pub async fn maintain_checkpoints(
        &mut self,
        limit: u64,
    ) -> Result<CheckpointStatus, io::Error> {
        self.checkpoints.limit = Some(limit);
        let mut writes = WriteSet::new();
        if let Some(applied) = self.last_applied {
            if self.checkpoints.due(applied.index, limit) {
                self.put_checkpoint(&mut writes)?;
            }
        }
        for index in self.checkpoints.surplus() {
            writes.delete(Cf::RaftState, row_key(self.group, index));
        }
        if !writes.is_empty() {
            super::group::write_unsynced(&self.store, writes).await?;
        }
        Ok(CheckpointStatus {
            usable: self.checkpoints.usable(),
            newest: self.checkpoints.indexes.last().copied(),
        })
    }

    /// Adds a checkpoint of the applied state to `writes` (the state as of `last_applied`,
    /// so `writes` must carry nothing applied after it).
    pub(super) fn put_checkpoint(&mut self, writes: &mut WriteSet) -> Result<(), io::Error> {
        let Some(applied) = self.last_applied else {
            return Ok(());
        };
        if self.checkpoints.indexes.last() == Some(&applied.index) {
            return Ok(());
        }
        let meta = SnapshotMeta {
            last_log_id: Some(applied),
            last_membership: self.membership.clone(),
        };
        let record = codec::encode(&self.snapshot_record()?)?;
        let row = codec::encode(&(meta, record))?;
        self.checkpoints.last_size = row.len();
        self.checkpoints.bytes_since = 0;
        writes.put(Cf::RaftState, row_key(self.group, applied.index), row);
        self.checkpoints.indexes.push(applied.index);
        Ok(())
    }

    /// A builder for the usable checkpoint, if there is one (see [`Self::maintain_checkpoints`]).
    pub(super) async fn checkpoint_builder(
        &mut self,
    ) -> Result<Option<SnapshotBuilder>, io::Error> {
        let Some(index) = self.checkpoints.usable() else {
            return Ok(None);
        };
        let (store, group) = (self.store.clone(), self.group);
        let row =
            tokio::task::spawn_blocking(move || store.get(Cf::RaftState, &row_key(group, index)))
                .await
                .map_err(io::Error::other)??;
        let Some(row) = row else {
            self.checkpoints.indexes.retain(|kept| *kept != index);
            return Err(io::Error::other(format!(
                "group {group}: checkpoint {index} is missing"
            )));
        };
        let (meta, record): (SnapshotMeta, Vec<u8>) = codec::decode(&row)?;
        self.checkpoints.snapshot = Some(index);
        self.checkpoints.indexes.retain(|kept| *kept > index);
        Ok(Some(SnapshotBuilder {
            group,
            store: self.store.clone(),
            meta,
            record: Ok(record),
            drop_checkpoints_below: Some(index),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(indexes: &[u64], limit: u64, snapshot: Option<u64>) -> Checkpoints {
        Checkpoints {
            enabled: true,
            indexes: indexes.to_vec(),
            limit: Some(limit),
            snapshot,
            ..Checkpoints::default()
        }
    }

    #[test]
    fn a_snapshot_uses_the_newest_checkpoint_before_the_first_retained_batch() {
        assert_eq!(at(&[10, 50, 90], 60, None).usable(), Some(50));
        assert_eq!(at(&[10, 50, 90], 60, Some(50)).usable(), None);
        assert_eq!(at(&[90], 60, None).usable(), None);
        assert_eq!(at(&[10, 50], 9, None).usable(), None);
    }

    #[test]
    fn checkpoints_are_taken_when_none_waits_or_the_newest_is_a_quarter_behind() {
        // None at all, or the newest already within the limit: take one.
        assert!(at(&[], 100, None).due(500, 100));
        assert!(at(&[90], 100, None).due(500, 100));
        // Retained range 400 entries: one every 100.
        assert!(!at(&[450], 100, None).due(500, 100));
        assert!(at(&[400], 100, None).due(500, 100));
        // Nothing applied since.
        assert!(!at(&[500], 600, None).due(500, 600));
    }

    #[test]
    fn surplus_keeps_one_usable_and_a_bounded_number_pending() {
        let mut checkpoints = at(&[5, 10, 20], 15, None);
        assert_eq!(checkpoints.surplus(), vec![5]);
        assert_eq!(checkpoints.indexes, vec![10, 20]);
        let pending: Vec<u64> = (1..=12).map(|i| 100 + i * i).collect();
        let mut checkpoints = at(&pending, 50, None);
        let dropped = checkpoints.surplus();
        assert_eq!(dropped.len(), 12 - MAX_PENDING);
        assert_eq!(checkpoints.indexes.first(), Some(&101));
        assert_eq!(checkpoints.indexes.last(), Some(&244));
    }
}
