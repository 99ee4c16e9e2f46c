//! What a replica's cleaner keeps on disk: the queue of compaction passes it still has to run
//! (written when a `Compact` command is applied, so every replica queues the same passes in the
//! same order) and its own progress (how far it got, what the last pass left). The progress is
//! local to the replica and never replicated: it only says how much of the shared work is done
//! here.

use herald_domain::RaftGroupId;
use std::io;

use serde::{Deserialize, Serialize};

use crate::engine::codec;
use herald_storage::{keys, Cf, Store, WriteSet};

/// Queued passes: `(group, TAG_QUEUED_PASS, pass number)`.
const TAG_QUEUED_PASS: u8 = 20;
/// This replica's cleaner progress.
const TAG_CLEANER: u8 = 21;

/// A pass every replica runs, in order of `pass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedPass {
    pub pass: u64,
    /// The dirty section is `[dirty_start, end)`; everything before it was cleaned already.
    pub dirty_start: u64,
    pub end: u64,
    /// Tombstones below this offset are removed.
    pub tombstone_horizon: u64,
}

/// Where a pass that was interrupted resumes, and what it had counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassCheckpoint {
    pub pass: u64,
    /// Batches starting below this offset are rewritten already.
    pub next_offset: u64,
    pub tally: CleanTally,
}

/// What a pass found in the part of the log it has cleaned: the messages and bytes kept and
/// the oldest tombstone still there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanTally {
    pub records_kept: u64,
    pub bytes_kept: u64,
    pub oldest_tombstone: Option<u64>,
}

impl CleanTally {
    pub fn note_tombstone(&mut self, offset: u64) {
        self.oldest_tombstone = Some(self.oldest_tombstone.map_or(offset, |old| old.min(offset)));
    }
}

/// This replica's cleaner progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanerState {
    /// The last pass finished here.
    pub done_pass: u64,
    /// The pass under way, if one was interrupted.
    pub checkpoint: Option<PassCheckpoint>,
    /// What the last finished pass left in the cleaned section.
    pub cleaned: CleanTally,
}

pub fn queue(
    writes: &mut WriteSet,
    group: RaftGroupId,
    pass: &QueuedPass,
) -> Result<(), io::Error> {
    writes.put(
        Cf::RaftState,
        keys::group_tag_u64(group, TAG_QUEUED_PASS, pass.pass).to_vec(),
        codec::encode(pass)?,
    );
    Ok(())
}

pub fn dequeue(writes: &mut WriteSet, group: RaftGroupId, pass: u64) {
    writes.delete(
        Cf::RaftState,
        keys::group_tag_u64(group, TAG_QUEUED_PASS, pass).to_vec(),
    );
}

/// The oldest queued pass of `group`, if any.
pub fn next_queued(store: &Store, group: RaftGroupId) -> Result<Option<QueuedPass>, io::Error> {
    match store.first_at_or_after(
        Cf::RaftState,
        &keys::group_tag_u64(group, TAG_QUEUED_PASS, 0),
        &keys::group_tag_u64(group, TAG_QUEUED_PASS, u64::MAX),
    )? {
        Some((_, value)) => Ok(Some(codec::decode(&value)?)),
        None => Ok(None),
    }
}

pub fn load(store: &Store, group: RaftGroupId) -> Result<CleanerState, io::Error> {
    match store.get(Cf::RaftState, &keys::group_tag(group, TAG_CLEANER))? {
        Some(bytes) => codec::decode(&bytes),
        None => Ok(CleanerState::default()),
    }
}

pub fn save(
    writes: &mut WriteSet,
    group: RaftGroupId,
    state: &CleanerState,
) -> Result<(), io::Error> {
    writes.put(
        Cf::RaftState,
        keys::group_tag(group, TAG_CLEANER).to_vec(),
        codec::encode(state)?,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_storage::StoreOptions;

    #[test]
    fn passes_come_back_in_order_and_per_group() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        let mut writes = WriteSet::new();
        for (group, pass) in [(3, 2), (3, 1), (4, 1), (3, 300)] {
            let queued = QueuedPass {
                pass,
                dirty_start: pass * 10,
                end: pass * 10 + 5,
                tombstone_horizon: 0,
            };
            queue(&mut writes, RaftGroupId::new(group), &queued).unwrap();
        }
        store.write(writes, false).unwrap();
        assert_eq!(
            next_queued(&store, RaftGroupId::new(3))
                .unwrap()
                .unwrap()
                .pass,
            1
        );
        let mut writes = WriteSet::new();
        dequeue(&mut writes, RaftGroupId::new(3), 1);
        store.write(writes, false).unwrap();
        assert_eq!(
            next_queued(&store, RaftGroupId::new(3))
                .unwrap()
                .unwrap()
                .pass,
            2
        );
        assert_eq!(
            next_queued(&store, RaftGroupId::new(4))
                .unwrap()
                .unwrap()
                .dirty_start,
            10
        );
        assert_eq!(next_queued(&store, RaftGroupId::new(5)).unwrap(), None);
    }

    #[test]
    fn cleaner_state_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        assert_eq!(
            load(&store, RaftGroupId::new(7)).unwrap(),
            CleanerState::default()
        );
        let state = CleanerState {
            done_pass: 4,
            checkpoint: Some(PassCheckpoint {
                pass: 5,
                next_offset: 99,
                tally: CleanTally {
                    records_kept: 3,
                    bytes_kept: 300,
                    oldest_tombstone: Some(12),
                },
            }),
            cleaned: CleanTally::default(),
        };
        let mut writes = WriteSet::new();
        save(&mut writes, RaftGroupId::new(7), &state).unwrap();
        store.write(writes, false).unwrap();
        assert_eq!(load(&store, RaftGroupId::new(7)).unwrap(), state);
    }
}
