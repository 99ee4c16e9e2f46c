//! One raft group's keys, found and copied between stores.
//!
//! Every key but the node's own facts starts with its raft group id (`keys`), so a group's
//! whole state (log, vote, state machine, indexes) is one contiguous range per column family.
//! A whole-cluster restore uses this to give every replica of a group the same copy: copies
//! taken of several nodes at slightly different moments would otherwise hold logs of different
//! lengths, and raft could elect a replica whose log lacks entries another replica already
//! applied.

use crate::{keys, Cf, StorageError, Store, WriteSet};

/// The column families whose keys start with a group id (all but `Cf::Node`).
const GROUP_FAMILIES: [Cf; 4] = [Cf::RaftLog, Cf::RaftState, Cf::OffsetIndex, Cf::TimeIndex];

/// Largest write of a group copy: a multi-gigabyte log is copied in batches of this size.
const COPY_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// Past every key: group ids are 8 bytes, and the longest keys are a few dozen.
const PAST_EVERY_KEY: [u8; 9] = [0xff; 9];

impl Store {
    /// The raft groups this store holds anything of, ascending. One seek per group and column
    /// family, whatever the size of the groups.
    pub fn group_ids(&self) -> Result<Vec<u64>, StorageError> {
        let mut groups = std::collections::BTreeSet::new();
        for cf in GROUP_FAMILIES {
            let mut next = 0u64;
            while let Some((key, _)) =
                self.first_at_or_after(cf, &keys::group_start(next), &PAST_EVERY_KEY)?
            {
                let Some(prefix) = key.get(..8) else {
                    return Err(StorageError::Corrupt(format!(
                        "a key of {} shorter than a group id",
                        cf.name()
                    )));
                };
                let group = u64::from_be_bytes(prefix.try_into().unwrap_or_default());
                groups.insert(group);
                match group.checked_add(1) {
                    Some(after) => next = after,
                    None => break,
                }
            }
        }
        Ok(groups.into_iter().collect())
    }

    /// Replaces everything this store holds of `group` with what `source` holds of it (nothing,
    /// if `source` holds nothing of it), and syncs. Returns the bytes copied. The node's own
    /// facts (`Cf::Node`) and other groups are untouched.
    pub fn replace_group_from(&self, source: &Store, group: u64) -> Result<u64, StorageError> {
        let (start, end) = (keys::group_start(group), keys::group_end(group));
        let mut clear = WriteSet::new();
        for cf in GROUP_FAMILIES {
            clear.delete_range(cf, start.to_vec(), end.to_vec());
        }
        self.write(clear, false)?;
        let mut copied = 0u64;
        for cf in GROUP_FAMILIES {
            let mut batch = WriteSet::new();
            let mut failed = None;
            source.scan(cf, &start, &end, |key, value| {
                batch.put(cf, key.to_vec(), value.to_vec());
                copied += (key.len() + value.len()) as u64;
                if batch.bytes() >= COPY_BATCH_BYTES {
                    if let Err(error) = self.write(std::mem::take(&mut batch), false) {
                        failed = Some(error);
                        return Ok(false);
                    }
                }
                Ok(true)
            })?;
            if let Some(error) = failed {
                return Err(error);
            }
            if !batch.is_empty() {
                self.write(batch, false)?;
            }
        }
        self.flush()?;
        Ok(copied)
    }
}

#[cfg(test)]
mod tests {
    use crate::{keys, Cf, Store, StoreOptions, WriteSet};

    fn store_with(dir: &std::path::Path, entries: &[(Cf, Vec<u8>, &[u8])]) -> Store {
        let store = Store::open(&StoreOptions::new(dir)).unwrap();
        let mut writes = WriteSet::new();
        for (cf, key, value) in entries {
            writes.put(*cf, key.clone(), value.to_vec());
        }
        store.write(writes, true).unwrap();
        store
    }

    #[test]
    fn groups_are_listed_once_each_whatever_the_family() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(
            dir.path(),
            &[
                (Cf::RaftLog, keys::group_u64(3u64, 1).to_vec(), b"a"),
                (Cf::RaftLog, keys::group_u64(3u64, 2).to_vec(), b"b"),
                (Cf::RaftState, keys::group_tag(3u64, 1).to_vec(), b"vote"),
                (Cf::RaftState, keys::group_tag(0u64, 1).to_vec(), b"vote"),
                (Cf::TimeIndex, keys::group_u64(9u64, 1).to_vec(), b"t"),
                (Cf::Node, b"node_id".to_vec(), b"1"),
            ],
        );
        assert_eq!(store.group_ids().unwrap(), vec![0, 3, 9]);
    }

    #[test]
    fn a_group_is_replaced_whole_and_nothing_else_moves() {
        let dir = tempfile::tempdir().unwrap();
        let source = store_with(
            &dir.path().join("source"),
            &[
                (Cf::RaftLog, keys::group_u64(5u64, 1).to_vec(), b"one"),
                (Cf::RaftLog, keys::group_u64(5u64, 2).to_vec(), b"two"),
                (Cf::RaftLog, keys::group_u64(5u64, 3).to_vec(), b"three"),
                (Cf::RaftState, keys::group_tag(5u64, 1).to_vec(), b"vote-b"),
                (
                    Cf::RaftLog,
                    keys::group_u64(6u64, 1).to_vec(),
                    b"other group",
                ),
            ],
        );
        let target = store_with(
            &dir.path().join("target"),
            &[
                (Cf::RaftLog, keys::group_u64(5u64, 1).to_vec(), b"one"),
                (Cf::RaftLog, keys::group_u64(5u64, 2).to_vec(), b"stale"),
                (
                    Cf::OffsetIndex,
                    keys::group_u64(5u64, 7).to_vec(),
                    b"stale index",
                ),
                (Cf::RaftState, keys::group_tag(5u64, 1).to_vec(), b"vote-a"),
                (Cf::RaftLog, keys::group_u64(4u64, 1).to_vec(), b"kept"),
                (Cf::Node, b"node_id".to_vec(), b"2"),
            ],
        );
        let copied = target.replace_group_from(&source, 5).unwrap();
        assert!(copied > 0);
        let log = |store: &Store, group: u64, index: u64| {
            store
                .get(Cf::RaftLog, &keys::group_u64(group, index))
                .unwrap()
        };
        assert_eq!(log(&target, 5, 2), Some(b"two".to_vec()));
        assert_eq!(log(&target, 5, 3), Some(b"three".to_vec()));
        assert_eq!(
            target
                .get(Cf::RaftState, &keys::group_tag(5u64, 1))
                .unwrap(),
            Some(b"vote-b".to_vec())
        );
        assert_eq!(
            target
                .get(Cf::OffsetIndex, &keys::group_u64(5u64, 7))
                .unwrap(),
            None,
            "what only the target held of the group is gone"
        );
        assert_eq!(log(&target, 4, 1), Some(b"kept".to_vec()));
        assert_eq!(log(&target, 6, 1), None, "other groups of the source stay");
        assert_eq!(
            target.get(Cf::Node, b"node_id").unwrap(),
            Some(b"2".to_vec())
        );
    }
}
