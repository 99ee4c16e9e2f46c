//! The entries a group appended last, kept in memory as they were appended (the batch bytes
//! shared, not copied), so applying them and replicating them to followers does not read them
//! back from RocksDB and decode them again, and so a leader can tell which of its proposals an
//! index holds (see `PartitionReplica::propose_append`).
//!
//! The cache mirrors the tail of the log: it holds a contiguous run of indexes ending at the
//! last appended entry, follows truncations and purges, and forgets its oldest entries past
//! its bounds: [`GROUP_BUDGET_BYTES`] per group and [`NODE_BUDGET_BYTES`] for all the groups
//! of the process together. A read it cannot serve whole goes to RocksDB.
//!
//! The node's bound is a share of the memory budget (`storage.memory_budget_bytes` sets it
//! aside, see `config::storage`): the cache stays full under a steady load (nothing leaves it
//! but by its bounds, a truncation or a purge), so what it may hold is what it holds. It
//! needs to cover what apply and replication read soon after the append, a few merged batches
//! per busy group; a follower further behind reads RocksDB.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use openraft::EntryPayload;
use parking_lot::Mutex;

use super::types::{Entry, RaftRequest};

/// The most bytes of entries one group keeps: four merged batches of up to 8 MiB in flight.
pub const GROUP_BUDGET_BYTES: usize = 32 << 20;
/// The most bytes of entries all groups of the process keep together (a 256 MiB bound held
/// a quarter of the default budget outside it; with this one, 30 minutes of
/// `benches/mixed-soak.sh` read all of its 852,172 entries from memory).
pub const NODE_BUDGET_BYTES: usize = 64 << 20;

/// Bytes held by every group's cache.
static NODE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes every group's cache of the process holds now (a gauge's value).
pub fn node_bytes() -> usize {
    NODE_BYTES.load(Ordering::Relaxed)
}

/// What an entry is counted as: its batch bytes, plus a fixed share for the rest.
fn entry_bytes(entry: &Entry) -> usize {
    const FIXED: usize = 128;
    match &entry.payload {
        EntryPayload::Normal(RaftRequest::Append { batch })
        | EntryPayload::Normal(RaftRequest::AppendOnce { batch, .. }) => FIXED + batch.len(),
        _ => FIXED,
    }
}

/// The tail of one group's log (see the module doc).
#[derive(Default)]
pub struct RecentEntries {
    tail: Mutex<Tail>,
}

#[derive(Default)]
struct Tail {
    /// Contiguous indexes; the last one is the log's last appended entry.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Tail {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(entry, _)| entry.log_id.index)
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
            NODE_BYTES.fetch_sub(size, Ordering::Relaxed);
        }
    }

    fn pop_back(&mut self) {
        if let Some((_, size)) = self.entries.pop_back() {
            self.bytes -= size;
            NODE_BYTES.fetch_sub(size, Ordering::Relaxed);
        }
    }

    fn clear(&mut self) {
        while !self.entries.is_empty() {
            self.pop_front();
        }
    }
}

impl Drop for RecentEntries {
    fn drop(&mut self) {
        self.tail.get_mut().clear();
    }
}

impl RecentEntries {
    /// Notes entries just appended (in index order), replacing any cached at or after the
    /// first of them.
    pub fn appended(&self, entries: &[Entry]) {
        let Some(first) = entries.first() else {
            return;
        };
        let mut tail = self.tail.lock();
        let first_index = first.log_id.index;
        while tail
            .entries
            .back()
            .is_some_and(|(entry, _)| entry.log_id.index >= first_index)
        {
            tail.pop_back();
        }
        let follows = tail
            .entries
            .back()
            .is_none_or(|(entry, _)| entry.log_id.index + 1 == first_index);
        if !follows {
            // A gap (a snapshot installed past the cached tail): the run starts over.
            tail.clear();
        }
        for entry in entries {
            let size = entry_bytes(entry);
            while !tail.entries.is_empty()
                && (tail.bytes + size > GROUP_BUDGET_BYTES
                    || NODE_BYTES.load(Ordering::Relaxed) + size > NODE_BUDGET_BYTES)
            {
                tail.pop_front();
            }
            if NODE_BYTES.load(Ordering::Relaxed) + size > NODE_BUDGET_BYTES
                || size > GROUP_BUDGET_BYTES
            {
                // Other groups hold the node's share, or the entry alone is too large: the
                // run cannot continue past it.
                tail.clear();
                continue;
            }
            if tail
                .entries
                .back()
                .is_some_and(|(last, _)| last.log_id.index + 1 != entry.log_id.index)
            {
                tail.clear();
            }
            tail.bytes += size;
            NODE_BYTES.fetch_add(size, Ordering::Relaxed);
            tail.entries.push_back((entry.clone(), size));
        }
    }

    /// The log was truncated: entries from `from` on are gone.
    pub fn truncated(&self, from: u64) {
        let mut tail = self.tail.lock();
        while tail
            .entries
            .back()
            .is_some_and(|(entry, _)| entry.log_id.index >= from)
        {
            tail.pop_back();
        }
    }

    /// The log was purged through `upto`.
    pub fn purged(&self, upto: u64) {
        let mut tail = self.tail.lock();
        while tail.first_index().is_some_and(|first| first <= upto) {
            tail.pop_front();
        }
    }

    /// Entries `[start, end)`, when the cache holds every one of them that the log holds
    /// (the cache's run reaches the log's end, so an `end` past it only means "not yet
    /// appended"); `None` when part of the range must come from RocksDB.
    pub fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let tail = self.tail.lock();
        let first = tail.first_index()?;
        if start < first {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        let take = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        Some(
            tail.entries
                .iter()
                .skip(skip)
                .take(take)
                .map(|(entry, _)| entry.clone())
                .collect(),
        )
    }

    /// Like [`get`](Self::get), stopping once `max_bytes` were taken (after at least one).
    pub fn get_limited(&self, start: u64, end: u64, max_bytes: usize) -> Option<Vec<Entry>> {
        let tail = self.tail.lock();
        let first = tail.first_index()?;
        if start < first {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        if skip >= tail.entries.len() {
            return None;
        }
        let take = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        let mut bytes = 0usize;
        let mut found = Vec::new();
        for (entry, size) in tail.entries.iter().skip(skip).take(take) {
            if !found.is_empty() && bytes >= max_bytes {
                break;
            }
            bytes += size;
            found.push(entry.clone());
        }
        (!found.is_empty()).then_some(found)
    }

    /// The entry at `index`, when cached.
    pub fn at(&self, index: u64) -> Option<Entry> {
        let tail = self.tail.lock();
        let first = tail.first_index()?;
        let position = usize::try_from(index.checked_sub(first)?).ok()?;
        tail.entries.get(position).map(|(entry, _)| entry.clone())
    }

    /// Bytes this group's cache holds.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.tail.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::EntryPayload;

    use super::*;
    use crate::engine::types::LogId;

    fn entry(index: u64, bytes: usize) -> Entry {
        Entry {
            log_id: LogId::new(
                openraft::vote::leader_id_adv::LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            ),
            payload: EntryPayload::Normal(RaftRequest::Append {
                batch: Bytes::from(vec![0u8; bytes]),
            }),
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|entry| entry.log_id.index).collect()
    }

    #[test]
    fn it_follows_the_log_tail_through_appends_truncations_and_purges() {
        let recent = RecentEntries::default();
        recent.appended(&(1..=5).map(|index| entry(index, 10)).collect::<Vec<_>>());
        assert_eq!(indexes(&recent.get(2, 4).unwrap()), [2, 3]);
        assert_eq!(
            indexes(&recent.get(4, 100).unwrap()),
            [4, 5],
            "the log ends there"
        );
        assert!(recent.get(0, 3).is_none(), "index 0 is not cached");
        // A new leader's entries replace the uncommitted tail.
        recent.appended(&[entry(4, 10)]);
        assert_eq!(indexes(&recent.get(1, 100).unwrap()), [1, 2, 3, 4]);
        recent.truncated(3);
        assert_eq!(indexes(&recent.get(1, 100).unwrap()), [1, 2]);
        recent.purged(1);
        assert_eq!(indexes(&recent.get(2, 100).unwrap()), [2]);
        assert!(recent.at(1).is_none());
        // A gap (a snapshot installed past the tail) starts the run over.
        recent.appended(&[entry(10, 10)]);
        assert!(recent.get(2, 100).is_none());
        assert_eq!(indexes(&recent.get(10, 11).unwrap()), [10]);
    }

    #[test]
    fn it_keeps_within_its_byte_budget_dropping_the_oldest() {
        let recent = RecentEntries::default();
        let size = 1 << 20;
        let count = GROUP_BUDGET_BYTES / size + 5;
        for index in 1..=count as u64 {
            recent.appended(&[entry(index, size)]);
        }
        assert!(recent.bytes() <= GROUP_BUDGET_BYTES);
        assert!(recent.at(1).is_none(), "the oldest went first");
        assert!(recent.at(count as u64).is_some(), "the newest is kept");
        let limited = recent.get_limited(count as u64 - 3, count as u64 + 1, size);
        assert_eq!(
            limited.map(|entries| entries.len()),
            Some(1),
            "one entry at least"
        );
        drop(recent);
    }
}
