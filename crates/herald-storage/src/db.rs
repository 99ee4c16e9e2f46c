//! The node's RocksDB instance. All methods here block: callers run them off the async
//! runtime (`spawn_blocking`), except `sync_then`, which only enqueues, and
//! `write_unless_waiting`, which never waits.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rocksdb::{
    ColumnFamilyDescriptor, Options, ReadOptions, WriteBatch, WriteBufferManager, WriteOptions, DB,
};

use super::disk_space::{DiskFull, DiskSpace};
use super::log_layout;
use super::syncer::{SyncCallback, Syncer};
use super::write_set::WriteOp;
use super::{Cf, StorageError, WriteSet};

/// The largest write set [`Store::write_unless_waiting`] writes on the caller's thread: one
/// memtable insert of up to this size takes microseconds. Larger ones (produced batches of
/// thousands of messages) go to a blocking thread, whose hand-over they amortise.
pub const MAX_QUICK_WRITE_BYTES: usize = 64 * 1024;

/// A key and its value, as read back.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// Tuning of the RocksDB instance.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub path: PathBuf,
    /// Memtable size of the raft log column family, where every produced byte lands first.
    pub log_write_buffer_bytes: usize,
    /// Block cache for reads, shared by all column families.
    pub block_cache_bytes: usize,
    /// The memory the memtables may take. The raft log, where nearly all of it goes, is sized
    /// so that what RocksDB holds of its memtables stays within it (plus each memtable's small
    /// overshoot; `log_layout::log_memtables`), and a write finding them all full waits for a
    /// flush to give memory back: a disk slower than the producers makes them wait, and the
    /// heap does not grow. Past it the write buffer manager also flushes the other column
    /// families' memtables.
    pub memtable_bytes: usize,
    /// Flush and compaction output is synced every this many bytes as it is written (0: at
    /// the end of each file only); see `log_layout::db_options`.
    pub bytes_per_sync: u64,
    /// Memtable flushes and compactions write their files with direct I/O (`O_DIRECT`) when
    /// the data directory's file system allows it; see `log_layout::db_options`.
    pub direct_io_for_flush: bool,
    /// Produce requests are refused (507) while the data directory's file system has less
    /// free space than this, so what must still be written (replication, metadata, the
    /// compactions that free space) has room; see `disk_space`.
    pub disk_reserve_bytes: u64,
}

/// 512 MiB: the default free space kept for writes other than clients' data.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 512 << 20;
/// 64 MiB: the default raft log memtable.
pub const DEFAULT_LOG_WRITE_BUFFER_BYTES: usize = 64 << 20;
/// 256 MiB: the default block cache.
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 256 << 20;
/// 256 MiB: the default bound of all memtables together.
pub const DEFAULT_MEMTABLE_BYTES: usize = 256 << 20;
/// 1 MiB: flush and compaction output synced every MiB (measured in `docs/architecture.md`).
pub const DEFAULT_BYTES_PER_SYNC: u64 = 1 << 20;
/// Flushes and compactions write with direct I/O by default (measured in
/// `docs/architecture.md`).
pub const DEFAULT_DIRECT_IO_FOR_FLUSH: bool = true;

impl StoreOptions {
    /// The defaults, which `[storage]` in the node's configuration also starts from.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreOptions {
            path: path.into(),
            log_write_buffer_bytes: DEFAULT_LOG_WRITE_BUFFER_BYTES,
            block_cache_bytes: DEFAULT_BLOCK_CACHE_BYTES,
            memtable_bytes: DEFAULT_MEMTABLE_BYTES,
            bytes_per_sync: DEFAULT_BYTES_PER_SYNC,
            direct_io_for_flush: DEFAULT_DIRECT_IO_FOR_FLUSH,
            disk_reserve_bytes: DEFAULT_DISK_RESERVE_BYTES,
        }
    }
}

/// The one RocksDB of a node, shared by every raft group on it.
#[derive(Clone)]
pub struct Store {
    // Field order matters: the database reference goes first, then the syncer is joined.
    pub(super) db: Arc<DB>,
    syncer: Arc<Syncer>,
    memtables: WriteBufferManager,
    pub(super) block_cache: rocksdb::Cache,
    /// How many `compact_range` calls on the log run with blob garbage collection turned on:
    /// the last one to finish turns it off again.
    log_compactions: Arc<Mutex<usize>>,
    disk: Arc<DiskSpace>,
}

/// What the store holds in memory now, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Every column family's memtables, as the write buffer manager counts them.
    pub memtables: usize,
    /// Blocks in the block cache.
    pub block_cache: usize,
}

impl Store {
    /// Opens (creating if needed) the database and starts its syncer thread. The directory is
    /// made private first (`private_files`): one that was open to other users is closed, with
    /// a warning.
    pub fn open(options: &StoreOptions) -> Result<Store, StorageError> {
        let closed = super::private_files::make_private(&options.path)?;
        if !closed.paths.is_empty() {
            tracing::warn!(
                path = %options.path.display(),
                closed = closed.paths.len(),
                "the data directory was open to other users: its files and directories are now \
                 the node's alone (0600 and 0700). Whatever it held may have been read by other \
                 users: rotate the OAuth2 client secrets (and the admin's)"
            );
        }
        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        db_options.set_max_background_jobs(2);
        db_options.set_keep_log_file_num(4);
        db_options.set_max_total_wal_size(512 << 20);
        // No stall in the write buffer manager: RocksDB's stall there can miss the flush that
        // would end it and hold every writer forever (facebook/rocksdb#11780; caught here as
        // writers parked in `WriteBufferManagerStallWrites` with the flush pool idle). The
        // manager only starts flushes once memtables pass the budget; what makes writers wait
        // is the raft log's own memtable count (`log_layout::log_memtables`, which also leaves
        // room for the memtables a flush hands back after writers went on), RocksDB's ordinary
        // write stall, which a finished flush always ends.
        let memtables = WriteBufferManager::new_write_buffer_manager(options.memtable_bytes, false);
        let direct_io = options.direct_io_for_flush && log_layout::direct_io_works(&options.path);
        if options.direct_io_for_flush && !direct_io {
            tracing::warn!(
                path = %options.path.display(),
                "the data directory's file system does not take direct I/O (O_DIRECT): flushes and compactions write through the page cache"
            );
        }
        log_layout::db_options(
            &mut db_options,
            &memtables,
            options.bytes_per_sync,
            direct_io,
        );
        let cache = rocksdb::Cache::new_lru_cache(options.block_cache_bytes);
        let descriptors = Cf::ALL.iter().map(|cf| {
            let mut cf_options = Options::default();
            let mut table = rocksdb::BlockBasedOptions::default();
            table.set_block_cache(&cache);
            match cf {
                Cf::RaftLog => {
                    log_layout::raft_log_options(
                        &mut cf_options,
                        &mut table,
                        options.log_write_buffer_bytes,
                        options.memtable_bytes,
                    );
                }
                _ => {
                    cf_options.set_compression_type(rocksdb::DBCompressionType::Lz4);
                }
            }
            cf_options.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(cf.name(), cf_options)
        });
        let db = Arc::new(DB::open_cf_descriptors(
            &db_options,
            &options.path,
            descriptors,
        )?);
        let syncer = Arc::new(Syncer::start(&db)?);
        Ok(Store {
            db,
            syncer,
            memtables,
            block_cache: cache,
            log_compactions: Arc::new(Mutex::new(0)),
            disk: Arc::new(DiskSpace::new(&options.path, options.disk_reserve_bytes)),
        })
    }

    /// `Some` while the data directory's file system is under its reserve: clients' data is
    /// refused then (see `disk_space`).
    pub fn disk_full(&self) -> Option<DiskFull> {
        self.disk.full()
    }

    /// What the memtables and the block cache hold now.
    pub fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage {
            memtables: self.memtables.get_usage(),
            block_cache: self.block_cache.get_usage(),
        }
    }

    fn handle(&self, cf: Cf) -> Result<&rocksdb::ColumnFamily, StorageError> {
        self.db
            .cf_handle(cf.name())
            .ok_or_else(|| StorageError::Corrupt(format!("column family {} is missing", cf.name())))
    }

    /// Applies a write set atomically. With `sync`, it is on disk when this returns; without,
    /// it is in the WAL (it survives a process crash) and becomes durable with the next sync.
    pub fn write(&self, set: WriteSet, sync: bool) -> Result<(), StorageError> {
        if set.is_empty() {
            return Ok(());
        }
        let mut write_options = WriteOptions::default();
        write_options.set_sync(sync);
        self.db.write_opt(self.batch(&set)?, &write_options)?;
        Ok(())
    }

    /// Applies a small write set (at most [`MAX_QUICK_WRITE_BYTES`]) unless RocksDB would
    /// make it wait (memtables full, too many level-0 files): then nothing is written and the
    /// set comes back, for [`Self::write`] on a thread that may block. Without `sync`, so the
    /// write is a memtable insert and a WAL `write(2)`: a few microseconds, cheaper on the
    /// calling (async) thread than the hand-over to a blocking thread and back, which was a
    /// tenth of a single-message produce's CPU.
    pub fn write_unless_waiting(&self, set: WriteSet) -> Result<Option<WriteSet>, StorageError> {
        if set.is_empty() {
            return Ok(None);
        }
        if set.bytes() > MAX_QUICK_WRITE_BYTES {
            return Ok(Some(set));
        }
        let mut write_options = WriteOptions::default();
        write_options.set_no_slowdown(true);
        match self.db.write_opt(self.batch(&set)?, &write_options) {
            Ok(()) => Ok(None),
            Err(error) if error.kind() == rocksdb::ErrorKind::Incomplete => Ok(Some(set)),
            Err(error) => Err(error.into()),
        }
    }

    fn batch(&self, set: &WriteSet) -> Result<WriteBatch, StorageError> {
        let mut batch = WriteBatch::default();
        for op in &set.ops {
            match op {
                WriteOp::Put(cf, key, value) => batch.put_cf(self.handle(*cf)?, key, value),
                WriteOp::Delete(cf, key) => batch.delete_cf(self.handle(*cf)?, key),
                WriteOp::DeleteRange(cf, from, to) => {
                    batch.delete_range_cf(self.handle(*cf)?, from, to)
                }
            }
        }
        Ok(batch)
    }

    /// Calls `callback` once everything written before this call is durable. Many callers
    /// share one fsync: this is the group commit.
    pub fn sync_then(&self, callback: SyncCallback) {
        self.syncer.enqueue(callback);
    }

    /// How many group-commit fsyncs have run since the store was opened.
    pub fn fsyncs(&self) -> u64 {
        self.syncer.fsyncs()
    }

    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self
            .db
            .get_pinned_cf(self.handle(cf)?, key)?
            .map(|value| value.to_vec()))
    }

    /// Hands `key`'s value to `read` where RocksDB holds it (block cache, memtable or the
    /// blob read's buffer), without copying it out first: a log read decodes a batch of a
    /// megabyte straight from there.
    pub fn get_with<T>(
        &self,
        cf: Cf,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StorageError> {
        Ok(self
            .db
            .get_pinned_cf(self.handle(cf)?, key)?
            .map(|value| read(&value)))
    }

    /// Whether `key` holds a value, without copying the value out.
    pub fn contains(&self, cf: Cf, key: &[u8]) -> Result<bool, StorageError> {
        Ok(self.db.get_pinned_cf(self.handle(cf)?, key)?.is_some())
    }

    /// Visits keys in `[from, to)` in order until `visit` returns false.
    pub fn scan(
        &self,
        cf: Cf,
        from: &[u8],
        to: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(to.to_vec());
        // The raw iterator lends each key and value where RocksDB holds them; the boxed one
        // would copy both out first (a megabyte per batch on a log scan).
        let mut iter = self.db.raw_iterator_cf_opt(self.handle(cf)?, read_options);
        iter.seek(from);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !visit(key, value)? {
                return Ok(());
            }
            iter.next();
        }
        iter.status()?;
        Ok(())
    }

    /// The last entry with a key in `[from, at]`, if any.
    pub fn last_at_or_before(
        &self,
        cf: Cf,
        from: &[u8],
        at: &[u8],
    ) -> Result<Option<KeyValue>, StorageError> {
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(from.to_vec());
        let mut iter = self.db.raw_iterator_cf_opt(self.handle(cf)?, read_options);
        iter.seek_for_prev(at);
        if iter.valid() {
            if let (Some(key), Some(value)) = (iter.key(), iter.value()) {
                return Ok(Some((key.to_vec(), value.to_vec())));
            }
        }
        iter.status()?;
        Ok(None)
    }

    /// The first entry with a key in `[at, to)`, if any.
    pub fn first_at_or_after(
        &self,
        cf: Cf,
        at: &[u8],
        to: &[u8],
    ) -> Result<Option<KeyValue>, StorageError> {
        let mut found = None;
        self.scan(cf, at, to, |key, value| {
            found = Some((key.to_vec(), value.to_vec()));
            Ok(false)
        })?;
        Ok(found)
    }

    /// The last entry with a key in `[from, to)`, if any.
    pub fn last_in_range(
        &self,
        cf: Cf,
        from: &[u8],
        to: &[u8],
    ) -> Result<Option<KeyValue>, StorageError> {
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(from.to_vec());
        read_options.set_iterate_upper_bound(to.to_vec());
        let mut iter = self.db.raw_iterator_cf_opt(self.handle(cf)?, read_options);
        iter.seek_to_last();
        if iter.valid() {
            if let (Some(key), Some(value)) = (iter.key(), iter.value()) {
                return Ok(Some((key.to_vec(), value.to_vec())));
            }
        }
        iter.status()?;
        Ok(None)
    }

    /// Asks RocksDB to compact a key range, so deleted data gives its disk space back. On the
    /// log, the blob files the range's batches live in are garbage collected too (see
    /// `log_layout`): live batches sharing a file with deleted ones are moved out, so the file
    /// goes.
    pub fn compact_range(&self, cf: Cf, from: &[u8], to: &[u8]) -> Result<(), StorageError> {
        let handle = self.handle(cf)?;
        if cf != Cf::RaftLog {
            self.db.compact_range_cf(handle, Some(from), Some(to));
            return Ok(());
        }
        self.set_log_blob_gc(true)?;
        self.db.compact_range_cf(handle, Some(from), Some(to));
        self.set_log_blob_gc(false)
    }

    /// Turns the log's blob garbage collection on for one more caller, or off for one fewer
    /// (really off when none is left).
    fn set_log_blob_gc(&self, enable: bool) -> Result<(), StorageError> {
        let mut running = self
            .log_compactions
            .lock()
            .map_err(|_| StorageError::Corrupt("the log compaction counter is poisoned".into()))?;
        let was = *running;
        *running = if enable {
            was + 1
        } else {
            was.saturating_sub(1)
        };
        if (enable && was == 0) || (!enable && *running == 0) {
            self.db.set_options_cf(
                self.handle(Cf::RaftLog)?,
                &log_layout::blob_gc_options(enable),
            )?;
        }
        Ok(())
    }

    /// Flushes memtables and the WAL: a clean shutdown leaves nothing to replay.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.db.flush_wal(true)?;
        for cf in Cf::ALL {
            self.db.flush_cf(self.handle(cf)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::thread;

    use super::*;
    use crate::keys;

    #[test]
    fn small_sets_are_written_at_once_and_large_ones_come_back_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        let mut small = WriteSet::new();
        small.put(
            Cf::RaftLog,
            keys::group_u64(1u64, 1).to_vec(),
            vec![1u8; 100],
        );
        assert!(store.write_unless_waiting(small).unwrap().is_none());
        assert_eq!(
            store.get(Cf::RaftLog, &keys::group_u64(1u64, 1)).unwrap(),
            Some(vec![1u8; 100])
        );
        let mut large = WriteSet::new();
        large.put(
            Cf::RaftLog,
            keys::group_u64(1u64, 2).to_vec(),
            vec![2u8; MAX_QUICK_WRITE_BYTES + 1],
        );
        let back = store
            .write_unless_waiting(large)
            .unwrap()
            .expect("handed back");
        assert_eq!(
            store.get(Cf::RaftLog, &keys::group_u64(1u64, 2)).unwrap(),
            None
        );
        store.write(back, false).unwrap();
        assert_eq!(
            store
                .get(Cf::RaftLog, &keys::group_u64(1u64, 2))
                .unwrap()
                .map(|value| value.len()),
            Some(MAX_QUICK_WRITE_BYTES + 1)
        );
    }

    #[test]
    fn concurrent_writers_share_fsyncs_and_all_complete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        let (writers, writes_each) = (8u64, 200u64);
        let (done_sender, done) = mpsc::channel();
        let handles: Vec<_> = (0..writers)
            .map(|writer| {
                let (store, done_sender) = (store.clone(), done_sender.clone());
                thread::spawn(move || {
                    for index in 0..writes_each {
                        let mut set = WriteSet::new();
                        set.put(
                            Cf::RaftLog,
                            keys::group_u64(writer, index).to_vec(),
                            vec![7u8; 100],
                        );
                        store.write(set, false).unwrap();
                        let (sender, receiver) = mpsc::channel();
                        store.sync_then(Box::new(move |outcome| sender.send(outcome).unwrap()));
                        receiver.recv().unwrap().unwrap();
                        done_sender.send(()).unwrap();
                    }
                })
            })
            .collect();
        drop(done_sender);
        handles
            .into_iter()
            .for_each(|handle| handle.join().unwrap());
        assert_eq!(done.iter().count() as u64, writers * writes_each);
        let fsyncs = store.fsyncs();
        assert!(fsyncs >= 1);
        assert!(
            fsyncs < writers * writes_each,
            "{fsyncs} fsyncs for {} writes: no group commit",
            writers * writes_each
        );
        // Everything written is readable back, in key order.
        let mut count = 0;
        store
            .scan(
                Cf::RaftLog,
                &keys::group_start(0u64),
                &keys::group_end(writers),
                |_, value| {
                    assert_eq!(value, &[7u8; 100][..]);
                    count += 1;
                    Ok(true)
                },
            )
            .unwrap();
        assert_eq!(count, writers * writes_each);
    }

    /// Bytes of the blob files in `dir`: where the log's batches live.
    fn blob_bytes(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "blob"))
            .map(|entry| entry.metadata().unwrap().len())
            .sum()
    }

    /// What RocksDB adds to one entry besides its value in a memtable, at most: the internal
    /// key (16 bytes of key, 8 of sequence number and type), two length varints (10), the
    /// skip-list node (up to 12 next pointers: 96), alignment (15) and malloc's rounding of
    /// the entry's own arena block (24): 169 bytes, taken as 256.
    const ENTRY_BOOKKEEPING_BYTES: usize = 256;

    /// The most memory the write buffer manager can count while `writers` writers, each with
    /// one write of `value_bytes` under way at a time, flood the log of a store whose other
    /// column families stay empty, with `count` log memtables of `size`
    /// (`log_layout::log_memtables`). Read from RocksDB 11.8's source:
    /// - `log_layout::log_memtables_held_at_most` memtables of the log: `count` unflushed and
    ///   the `count` that the last flush wrote and has not handed back yet;
    /// - each holds what it had allocated when it was marked full plus what was under way: a
    ///   memtable is marked at the latest once it allocated more than `size` plus 0.6 of an
    ///   arena block (`MemTable::ShouldFlushNow`; a block is an eighth of `size`, at most
    ///   1 MiB, in 4 KiB units: `SanitizeCfOptions`), and the writes already past RocksDB's
    ///   admission still go in, one per writer at most;
    /// - every column family's memtable, the empty ones and the log's fresh one too, starts
    ///   with a 2 KiB inline block (`Arena::kInlineSize`): `Cf::ALL` and RocksDB's `default`.
    fn memtables_held_at_most(
        size: usize,
        count: usize,
        writers: usize,
        value_bytes: usize,
    ) -> usize {
        let arena_block = (size / 8).min(1 << 20).next_multiple_of(4 << 10);
        let one = size + arena_block * 6 / 10 + writers * (value_bytes + ENTRY_BOOKKEEPING_BYTES);
        log_layout::log_memtables_held_at_most(1, count) * one + (Cf::ALL.len() + 1) * (2 << 10)
    }

    #[test]
    fn memtables_stay_within_their_budget_while_writers_flood_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = StoreOptions::new(dir.path());
        // Asked for 8 MiB log memtables within a 2 MiB budget: they are held to 512 KiB, two
        // of them (`log_layout::log_memtables`), and writers wait for flushes. This test once
        // hung for good with the write buffer manager's own stall (see `Store::open`).
        options.log_write_buffer_bytes = 8 << 20;
        options.memtable_bytes = 2 << 20;
        let (size, count) =
            log_layout::log_memtables(options.log_write_buffer_bytes, options.memtable_bytes);
        assert_eq!((size, count), (512 << 10, 2));
        let store = Store::open(&options).unwrap();
        let (writers, writes_each, value_bytes) = (4u64, 256u64, 64usize << 10);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (store, stop) = (store.clone(), stop.clone());
            thread::spawn(move || {
                let mut peak = 0;
                for _ in 0..1_000_000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    peak = peak.max(store.memory_usage().memtables);
                    thread::sleep(std::time::Duration::from_micros(200));
                }
                peak
            })
        };
        let handles: Vec<_> = (0..writers)
            .map(|writer| {
                let store = store.clone();
                thread::spawn(move || {
                    for index in 0..writes_each {
                        let mut set = WriteSet::new();
                        set.put(
                            Cf::RaftLog,
                            keys::group_u64(writer, index).to_vec(),
                            vec![writer as u8; value_bytes],
                        );
                        store.write(set, false).unwrap();
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .for_each(|handle| handle.join().unwrap());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.join().unwrap();
        let written = (writers * writes_each) as usize * value_bytes;
        assert_eq!(written, 64 << 20);
        // Writers waited for flushes: the 64 MiB went through memtables that never held more
        // than the budget (which the log's memtables fill exactly) plus RocksDB's overshoot
        // per memtable: 3.2 MiB in all here, where four 64 KiB values under way are large next
        // to a 512 KiB memtable (with the defaults' 64 MiB memtables the arena's part is
        // 0.6 MiB each, and the writes under way are the batches inside RocksDB then).
        assert_eq!(
            log_layout::log_memtables_held_at_most(size, count),
            options.memtable_bytes
        );
        let bound = memtables_held_at_most(size, count, writers as usize, value_bytes);
        assert!(
            peak <= bound,
            "memtables peaked at {peak} bytes, over the {bound} that {count} memtables of {size} bytes may hold (budget {}), while {written} bytes were written",
            options.memtable_bytes
        );
        assert!(peak > 0);
        // Nothing was lost to the waiting.
        for writer in 0..writers {
            let last = store
                .last_in_range(
                    Cf::RaftLog,
                    &keys::group_start(writer),
                    &keys::group_end(writer),
                )
                .unwrap()
                .unwrap();
            assert_eq!(last.0, keys::group_u64(writer, writes_each - 1).to_vec());
            assert_eq!(last.1.len(), value_bytes);
        }
    }

    /// Flushes written with direct I/O (where the file system takes it, as the probe decides)
    /// hold exactly what was written, across many flushes and a reopen.
    #[test]
    fn flushes_written_with_direct_io_read_back_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = StoreOptions::new(dir.path());
        options.log_write_buffer_bytes = 1 << 20;
        options.memtable_bytes = 4 << 20;
        options.direct_io_for_flush = true;
        // Not a multiple of any sector or page size, so direct writes need their padding.
        let value = |index: u64| -> Vec<u8> {
            (0..100_003u64)
                .map(|byte| (byte.wrapping_mul(31) ^ index) as u8)
                .collect()
        };
        {
            let store = Store::open(&options).unwrap();
            for index in 0..48u64 {
                let mut set = WriteSet::new();
                set.put(
                    Cf::RaftLog,
                    keys::group_u64(7u64, index).to_vec(),
                    value(index),
                );
                store.write(set, false).unwrap();
            }
            store.flush().unwrap();
        }
        assert!(
            !dir.path().join(".direct-io-probe").exists(),
            "the probe file is removed"
        );
        let store = Store::open(&options).unwrap();
        for index in 0..48u64 {
            let stored = store
                .get(Cf::RaftLog, &keys::group_u64(7u64, index))
                .unwrap()
                .unwrap_or_else(|| panic!("entry {index} is missing"));
            assert!(stored == value(index), "entry {index} differs");
        }
    }

    #[test]
    fn batches_go_to_blob_files_and_a_compacted_trimmed_prefix_frees_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        let entry = |group: u64, index: u64| {
            let mut set = WriteSet::new();
            set.put(
                Cf::RaftLog,
                keys::group_u64(group, index).to_vec(),
                vec![index as u8; 100 << 10],
            );
            store.write(set, false).unwrap();
        };
        // Two partitions whose batches share the blob files of every flush.
        for index in 0..100 {
            entry(1, index);
            entry(2, index);
        }
        store.flush().unwrap();
        let full = blob_bytes(dir.path());
        assert!(
            full >= 200 * (100 << 10),
            "batches are in blob files: {full} bytes"
        );
        for index in 100..120 {
            entry(1, index);
        }
        store.flush().unwrap();

        // Partition 1 trims its first 100 entries, as retention does.
        let mut set = WriteSet::new();
        set.delete_range(
            Cf::RaftLog,
            keys::group_u64(1u64, 0).to_vec(),
            keys::group_u64(1u64, 100).to_vec(),
        );
        store.write(set, false).unwrap();
        store.flush().unwrap();
        store
            .compact_range(
                Cf::RaftLog,
                &keys::group_u64(1u64, 0),
                &keys::group_u64(1u64, 100),
            )
            .unwrap();
        let after = blob_bytes(dir.path());
        let live = 120 * (100 << 10);
        assert!(
            after < full && after <= live + live / 10,
            "{after} bytes of blob files after trimming ({full} before, {live} live)"
        );
        // What was kept reads back whole; what was trimmed is gone.
        assert_eq!(
            store.get(Cf::RaftLog, &keys::group_u64(2u64, 7)).unwrap(),
            Some(vec![7u8; 100 << 10])
        );
        assert_eq!(
            store.get(Cf::RaftLog, &keys::group_u64(1u64, 119)).unwrap(),
            Some(vec![119u8; 100 << 10])
        );
        assert_eq!(
            store.get(Cf::RaftLog, &keys::group_u64(1u64, 7)).unwrap(),
            None
        );
    }

    #[test]
    fn data_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
            let mut set = WriteSet::new();
            set.put(Cf::Node, b"k".to_vec(), b"v".to_vec());
            store.write(set, true).unwrap();
        }
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        assert_eq!(store.get(Cf::Node, b"k").unwrap(), Some(b"v".to_vec()));
        let first = store.first_at_or_after(Cf::Node, b"a", b"z").unwrap();
        assert_eq!(first, Some((b"k".to_vec(), b"v".to_vec())));
        assert_eq!(store.last_at_or_before(Cf::Node, b"a", b"j").unwrap(), None);
    }
}
