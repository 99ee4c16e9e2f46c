//! The node's RocksDB instance. All methods here block: callers run them off the async
//! runtime (`spawn_blocking`), except `sync_then`, which only enqueues.

use std::path::PathBuf;
use std::sync::Arc;

use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, ReadOptions, WriteBatch,
    WriteOptions, DB,
};

use super::syncer::{SyncCallback, Syncer};
use super::write_set::WriteOp;
use super::{Cf, StorageError, WriteSet};

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
}

impl StoreOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreOptions {
            path: path.into(),
            log_write_buffer_bytes: 64 << 20,
            block_cache_bytes: 256 << 20,
        }
    }
}

/// The one RocksDB of a node, shared by every raft group on it.
#[derive(Clone)]
pub struct Store {
    // Field order matters: the database reference goes first, then the syncer is joined.
    pub(super) db: Arc<DB>,
    syncer: Arc<Syncer>,
}

impl Store {
    /// Opens (creating if needed) the database and starts its syncer thread.
    pub fn open(options: &StoreOptions) -> Result<Store, StorageError> {
        std::fs::create_dir_all(&options.path)?;
        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        db_options.set_max_background_jobs(2);
        db_options.set_keep_log_file_num(4);
        db_options.set_max_total_wal_size(512 << 20);
        let cache = rocksdb::Cache::new_lru_cache(options.block_cache_bytes);
        let descriptors = Cf::ALL.iter().map(|cf| {
            let mut cf_options = Options::default();
            let mut table = rocksdb::BlockBasedOptions::default();
            table.set_block_cache(&cache);
            match cf {
                Cf::RaftLog => {
                    cf_options.set_write_buffer_size(options.log_write_buffer_bytes);
                    cf_options.set_max_write_buffer_number(4);
                    // Batches are compressed per topic already; compressing SSTs again would
                    // spend CPU for little.
                    cf_options.set_compression_type(rocksdb::DBCompressionType::None);
                    table.set_block_size(64 << 10);
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
        Ok(Store { db, syncer })
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
        let mut batch = WriteBatch::default();
        for op in set.ops {
            match op {
                WriteOp::Put(cf, key, value) => batch.put_cf(self.handle(cf)?, key, value),
                WriteOp::Delete(cf, key) => batch.delete_cf(self.handle(cf)?, key),
                WriteOp::DeleteRange(cf, from, to) => {
                    batch.delete_range_cf(self.handle(cf)?, from, to)
                }
            }
        }
        let mut write_options = WriteOptions::default();
        write_options.set_sync(sync);
        self.db.write_opt(batch, &write_options)?;
        Ok(())
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
        let iter = self.db.iterator_cf_opt(
            self.handle(cf)?,
            read_options,
            IteratorMode::From(from, Direction::Forward),
        );
        for item in iter {
            let (key, value) = item?;
            if !visit(&key, &value)? {
                break;
            }
        }
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

    /// Asks RocksDB to compact a key range, so deleted data gives its disk space back.
    pub fn compact_range(&self, cf: Cf, from: &[u8], to: &[u8]) -> Result<(), StorageError> {
        self.db
            .compact_range_cf(self.handle(cf)?, Some(from), Some(to));
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
    use crate::storage::keys;

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
                &keys::group_start(0),
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
