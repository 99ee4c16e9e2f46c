//! What an operator watches of the storage engine: how much disk it takes and has left, the
//! compaction debt that will be written, and whether writes are slowed or stopped.

use super::{Cf, Store};

/// RocksDB's own view of the node's database, read when metrics are scraped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageGauges {
    /// Bytes of live SST files, over every column family.
    pub sst_bytes: u64,
    /// Bytes in memtables (written, not yet flushed), over every column family.
    pub memtable_bytes: u64,
    /// Bytes compaction estimates it still has to rewrite (RocksDB slows writes past a limit).
    pub pending_compaction_bytes: u64,
    /// Whether RocksDB has stopped writes (too many L0 files or too much compaction debt).
    pub write_stopped: bool,
    /// The rate RocksDB throttles writes to, in bytes/s, or 0 when writes are not delayed.
    pub delayed_write_rate: u64,
    /// Bytes of blocks in the block cache, and of those pinned by readers (iterators, table
    /// readers): the cache is bounded by `block_cache_bytes`, pinned blocks are not evicted.
    pub block_cache_bytes: u64,
    pub block_cache_pinned_bytes: u64,
    /// Bytes RocksDB's open table readers hold outside the block cache (index and filter
    /// blocks): grows with the number and size of SST files.
    pub table_readers_bytes: u64,
    /// Size and free space of the file system holding the data directory (`None` when the
    /// file system does not answer).
    pub disk_total_bytes: Option<u64>,
    pub disk_free_bytes: Option<u64>,
    /// The free space is under `storage.disk_reserve_bytes`: produce requests are refused.
    pub disk_full: bool,
}

impl Store {
    /// The storage gauges, summed over the column families.
    pub fn gauges(&self) -> StorageGauges {
        let mut gauges = StorageGauges::default();
        for cf in Cf::ALL {
            let Some(handle) = self.db.cf_handle(cf.name()) else {
                continue;
            };
            let property = |name: &str| {
                self.db
                    .property_int_value_cf(&handle, name)
                    .ok()
                    .flatten()
                    .unwrap_or(0)
            };
            gauges.sst_bytes += property("rocksdb.live-sst-files-size");
            gauges.memtable_bytes += property("rocksdb.cur-size-all-mem-tables");
            gauges.pending_compaction_bytes +=
                property("rocksdb.estimate-pending-compaction-bytes");
            gauges.table_readers_bytes += property("rocksdb.estimate-table-readers-mem");
        }
        // One cache is shared by every column family: read once.
        gauges.block_cache_bytes = self.block_cache.get_usage() as u64;
        gauges.block_cache_pinned_bytes = self.block_cache.get_pinned_usage() as u64;
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        gauges.write_stopped = property("rocksdb.is-write-stopped") != 0;
        gauges.delayed_write_rate = property("rocksdb.actual-delayed-write-rate");
        if let Some((total, free)) = crate::disk_space::file_system_space(self.db.path()) {
            gauges.disk_total_bytes = Some(total);
            gauges.disk_free_bytes = Some(free);
        }
        gauges.disk_full = self.disk_full().is_some();
        gauges
    }
}
