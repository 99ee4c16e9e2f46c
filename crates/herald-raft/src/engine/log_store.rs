//! The raft log of one group, in the node's shared RocksDB. For a partition group this log *is*
//! the partition's data: a produced batch is stored once, as the raft entry that carries it.
//!
//! Appends become visible to readers when `append` returns (written to the WAL) and are
//! reported flushed to openraft only after the group-commit syncer's fsync covers them.

use herald_domain::RaftGroupId;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};

use super::codec;
use super::recent_entries::RecentEntries;
use super::types::{Entry, LogId, TypeConfig, Vote};
use herald_storage::{keys, Cf, Store, WriteSet};

const TAG_VOTE: u8 = 1;
const TAG_COMMITTED: u8 = 2;
pub(super) const TAG_PURGED: u8 = 3;

/// The log store (and log reader) of one raft group.
#[derive(Clone)]
pub struct LogStore {
    group: RaftGroupId,
    store: Store,
    /// Held while purging: the cleaner, which rewrites committed entries in place, holds it
    /// while it stores them, so it never writes back an entry that was purged.
    log_lock: Arc<Mutex<()>>,
    /// The entries appended last, shared by the store and its readers.
    recent: Arc<RecentEntries>,
}

impl LogStore {
    pub fn new(group: RaftGroupId, store: Store, log_lock: Arc<Mutex<()>>) -> Self {
        Self::with_recent(group, store, log_lock, Arc::default())
    }

    /// A log store whose recently appended entries are kept in `recent` (which the group's
    /// replica also reads).
    pub fn with_recent(
        group: RaftGroupId,
        store: Store,
        log_lock: Arc<Mutex<()>>,
        recent: Arc<RecentEntries>,
    ) -> Self {
        LogStore {
            group,
            store,
            log_lock,
            recent,
        }
    }

    /// Runs blocking storage work off the async runtime.
    async fn blocking<T, F>(&self, work: F) -> Result<T, std::io::Error>
    where
        T: Send + 'static,
        F: FnOnce(&Store, RaftGroupId) -> Result<T, std::io::Error> + Send + 'static,
    {
        let (store, group) = (self.store.clone(), self.group);
        tokio::task::spawn_blocking(move || work(&store, group))
            .await
            .map_err(|join| std::io::Error::other(format!("storage task failed: {join}")))?
    }

    async fn read_state<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        tag: u8,
    ) -> Result<Option<T>, std::io::Error> {
        self.blocking(move |store, group| {
            match store.get(Cf::RaftState, &keys::group_tag(group, tag))? {
                Some(bytes) => Ok(Some(codec::decode(&bytes)?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn write_state<T: serde::Serialize>(
        &self,
        tag: u8,
        value: &T,
        sync: bool,
    ) -> Result<(), std::io::Error> {
        let bytes = codec::encode(value)?;
        let mut set = WriteSet::new();
        set.put(
            Cf::RaftState,
            keys::group_tag(self.group, tag).to_vec(),
            bytes,
        );
        if !sync {
            // The committed index, saved after every commit: a few bytes that RocksDB almost
            // always takes at once, so no hop to a blocking thread (2.2% of a node's CPU on
            // single-message produces went to that hop).
            return super::group::write_unsynced(&self.store, set).await;
        }
        self.blocking(move |store, _| Ok(store.write(set, sync)?))
            .await
    }
}

/// The most bytes of entries one replication request carries (at least one entry always goes).
/// Produced batches are merged into entries of up to 8 MiB, so openraft's entry-count cap alone
/// could put gigabytes into one AppendEntries RPC.
pub const MAX_REPLICATION_BYTES: usize = 16 << 20;

/// Reads entries `[start, end)` of `group`; stops at the first gap after the first entry.
pub(crate) fn read_entries(
    store: &Store,
    group: RaftGroupId,
    start: u64,
    end: u64,
) -> Result<Vec<Entry>, std::io::Error> {
    read_entries_limited(store, group, start, end, usize::MAX)
}

/// Like [`read_entries`], but stops once `max_bytes` of stored entries were read (after at
/// least one).
pub(crate) fn read_entries_limited(
    store: &Store,
    group: RaftGroupId,
    start: u64,
    end: u64,
    max_bytes: usize,
) -> Result<Vec<Entry>, std::io::Error> {
    let mut bytes = 0usize;
    let mut entries = Vec::new();
    if start >= end {
        return Ok(entries);
    }
    let mut expected = start;
    let mut hole = None;
    store.scan(
        Cf::RaftLog,
        &keys::group_u64(group, start),
        &keys::group_u64(group, end),
        |key, value| {
            let Some((_, index)) = keys::decode_group_u64(key) else {
                return Ok(false);
            };
            if !entries.is_empty() && index != expected {
                hole = Some((expected, index));
                return Ok(false);
            }
            entries.push(codec::decode_entry(value)?);
            expected = index + 1;
            bytes += value.len();
            Ok(bytes < max_bytes)
        },
    )?;
    if let Some((expected, found)) = hole {
        return Err(std::io::Error::other(format!(
            "raft log of group {group} has a hole: expected index {expected}, found {found}"
        )));
    }
    Ok(entries)
}

/// Counter of raft log reads (apply, replication), labelled `from` = `memory` (the recently
/// appended entries) or `disk` (RocksDB).
pub const LOG_READS_TOTAL: &str = "herald_raft_log_reads_total";

fn counted_read(from: &'static str) {
    metrics::counter!(LOG_READS_TOTAL, "from" => from).increment(1);
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&index) => index,
        Bound::Excluded(&index) => index.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&index) => index.saturating_add(1),
        Bound::Excluded(&index) => index,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, std::io::Error> {
        let (start, end) = bounds(&range);
        if let Some(entries) = self.recent.get(start, end) {
            counted_read("memory");
            return Ok(entries);
        }
        counted_read("disk");
        self.blocking(move |store, group| read_entries(store, group, start, end))
            .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, std::io::Error> {
        self.read_state(TAG_VOTE).await
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, std::io::Error> {
        if let Some(entries) = self.recent.get_limited(start, end, MAX_REPLICATION_BYTES) {
            counted_read("memory");
            return Ok(entries);
        }
        counted_read("disk");
        self.blocking(move |store, group| {
            read_entries_limited(store, group, start, end, MAX_REPLICATION_BYTES)
        })
        .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, std::io::Error> {
        let last_purged_log_id: Option<LogId> = self.read_state(TAG_PURGED).await?;
        let last = self
            .blocking(|store, group| {
                match store.last_in_range(
                    Cf::RaftLog,
                    &keys::group_start(group),
                    &keys::group_end(group),
                )? {
                    Some((_, value)) => Ok(Some(codec::decode_entry(&value)?.log_id)),
                    None => Ok(None),
                }
            })
            .await?;
        let last_log_id = last.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), std::io::Error> {
        // A vote must be on disk before it is acted on: written synced.
        self.write_state(TAG_VOTE, vote, true).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), std::io::Error> {
        self.write_state(TAG_COMMITTED, &committed, false).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, std::io::Error> {
        Ok(self
            .read_state::<Option<LogId>>(TAG_COMMITTED)
            .await?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), std::io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut set = WriteSet::new();
        let entries: Vec<Entry> = entries.into_iter().collect();
        for entry in &entries {
            let key = keys::group_u64(self.group, entry.log_id.index);
            set.put(Cf::RaftLog, key.to_vec(), codec::encode_entry(entry)?);
        }
        metrics::counter!("herald_raft_log_appended_bytes_total").increment(set.bytes() as u64);
        super::group::write_unsynced(&self.store, set).await?;
        self.recent.appended(&entries);
        // Visible now; durable once the syncer's next fsync covers it.
        self.store
            .sync_then(Box::new(move |outcome| callback.io_completed(outcome)));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), std::io::Error> {
        let from = last_log_id.map(|log_id| log_id.index + 1).unwrap_or(0);
        self.recent.truncated(from);
        self.blocking(move |store, group| {
            let mut set = WriteSet::new();
            set.delete_range(
                Cf::RaftLog,
                keys::group_u64(group, from).to_vec(),
                keys::group_end(group).to_vec(),
            );
            Ok(store.write(set, false)?)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), std::io::Error> {
        // Record the purge point first, so a crash in between never shows a log with a hole.
        let upto = log_id.index;
        self.write_state(TAG_PURGED, &log_id, false).await?;
        self.recent.purged(upto);
        let log_lock = self.log_lock.clone();
        self.blocking(move |store, group| {
            let _no_rewrites = log_lock
                .lock()
                .map_err(|_| std::io::Error::other("log lock poisoned"))?;
            let mut set = WriteSet::new();
            set.delete_range(
                Cf::RaftLog,
                keys::group_u64(group, 0).to_vec(),
                keys::group_u64(group, upto.saturating_add(1)).to_vec(),
            );
            Ok(store.write(set, false)?)
        })
        .await
    }
}
