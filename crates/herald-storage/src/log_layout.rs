//! How RocksDB lays out the partition log (the `raft_log` column family) and how much memory
//! it may hold.
//!
//! A log is written once, read mostly sequentially and deleted as a prefix, so every rewrite
//! of a produced byte after the write-ahead log and the first flush is waste. With leveled
//! compaction of whole batches the node wrote 3.2-3.5 bytes to disk per value byte produced
//! (1000 x 1 KB per request; 3.0 with 100 B values): the WAL, the memtable flush, then
//! compaction rewriting the same batches level after level. With this layout: 1.96 (2.14). Here the batches (every raft entry of at least
//! [`LOG_BLOB_MIN_BYTES`]) are separated into blob files at flush (integrated BlobDB): the
//! write-ahead log and that one flush are the only writes of a batch's bytes, and compaction
//! only rewrites the small SSTs that map keys to blob positions. That leaves the WAL plus the
//! flush, about 2 bytes per byte of incompressible data, as the floor: going below needs the
//! log to skip one of them (e.g. the WAL serving as the log itself), which RocksDB cannot do.
//!
//! Blob garbage collection (relocating the live blobs of old blob files during compaction) is
//! off in normal operation: for a log it would rewrite long-retained batches again and again.
//! A blob file is deleted once every batch in it is deleted; the space of a trimmed prefix
//! comes back when [`Store::compact_range`](super::Store::compact_range) runs over it, which
//! turns garbage collection on for that compaction only, so the live batches sharing blob files
//! with the trimmed ones are relocated once and the files freed.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rocksdb::{BlockBasedOptions, DBCompressionType, Options, WriteBufferManager};

/// Raft entries at least this large (produce batches) go to blob files; smaller ones (single
/// messages, membership and metadata entries) stay in the SSTs, where compaction is cheap.
pub const LOG_BLOB_MIN_BYTES: u64 = 4096;

/// Target size of one blob file. A flush writes one file per memtable at most this large.
const LOG_BLOB_FILE_BYTES: u64 = 256 << 20;

/// Options of the whole database that concern the log's write path and memory.
pub(super) fn db_options(
    db: &mut Options,
    memtables: &WriteBufferManager,
    bytes_per_sync: u64,
    direct_io: bool,
) {
    // The WAL write of one writer overlaps the memtable insert of the previous one: many
    // partitions appending at once wait less on each other.
    db.set_enable_pipelined_write(true);
    // A flush writes a memtable's worth (64 MiB) of blob and table files. Left to the kernel,
    // those pages go to the disk in one burst when the flush syncs its files, and the WAL
    // fdatasync that every acknowledged produce waits for queues behind the burst. Syncing
    // them every `bytes_per_sync` (1 MiB by default) as they are written keeps what can stand
    // in front of a commit small.
    db.set_bytes_per_sync(bytes_per_sync);
    // Every column family's memtables count against one budget; past it a flush starts (see
    // `StoreOptions::memtable_bytes` and `log_memtables` for what makes writers wait).
    db.set_write_buffer_manager(memtables);
    // Even synced every MiB, a flush's writeback queues in the device ahead of the WAL
    // fdatasync that acknowledged produces wait for: WAL syncs of 4-26 ms instead of under 1
    // were logged at the start of every flush, and the slowest requests of a paced run start
    // there. Written with direct I/O, a flush goes out in 1 MiB writes each waited for, which
    // the WAL's writes interleave with (tenth-of-peak p99.9 7.1/6.2/6.1 ms against
    // 13.9/6.9/15.6 through the page cache; docs/architecture.md). The price: freshly flushed
    // batches are not in the page cache, so a consumer catching up right after them reads
    // from the disk (the first catch-up read of 1 GB about a fifth slower).
    db.set_use_direct_io_for_flush_and_compaction(direct_io);
}

/// Whether files in `dir` can be opened for direct I/O: not every file system takes
/// `O_DIRECT` (tmpfs before Linux 6.6, some FUSE and network file systems), and RocksDB would
/// fail its first flush there rather than fall back. Probed with a scratch file, removed again.
pub(super) fn direct_io_works(dir: &Path) -> bool {
    let probe = dir.join(".direct-io-probe");
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    opened.is_ok()
}

/// The most memtables the raft log fills and flushes in turn.
const LOG_MAX_MEMTABLES: usize = 4;

/// The raft log's memtable size and how many it may hold unflushed, such that the most
/// RocksDB holds of them stays within `memtable_bytes`.
///
/// That most is twice the count ([`log_memtables_held_at_most`]). A write finding `count`
/// memtables waiting for a flush waits itself (RocksDB's write stall), so at most `count` hold
/// unflushed data (the one filling among them). But the flush that ends the wait hands the
/// memtables it wrote back only after it has let writers go on (`job_context.Clean()` in
/// `DBImpl::BackgroundCallFlush`, after the new version is installed and obsolete files are
/// deleted), and a flush that fell behind writes all `count` at once: until its thread gets
/// that far, writers can fill `count` new ones. A store given two 1 MiB memtables in a 2 MiB
/// budget held four of them (up to 4.2 MiB) in 9 runs of 80 while other processes kept both cores
/// busy (the flood test in `db.rs`, before this sizing). So `count * size` is held to half the
/// budget: a memtable is at most a quarter of it (one fills while another flushes), and there
/// are 2 to [`LOG_MAX_MEMTABLES`] of them.
pub(super) fn log_memtables(write_buffer_bytes: usize, memtable_bytes: usize) -> (usize, usize) {
    let unflushed = memtable_bytes / 2;
    let size = write_buffer_bytes.min(unflushed / 2).max(1);
    let count = (unflushed / size).clamp(2, LOG_MAX_MEMTABLES);
    (size, count)
}

/// The most bytes of raft log memtables RocksDB holds with `count` memtables of `size`:
/// `count` unflushed and the `count` a finished flush has not handed back yet (see
/// [`log_memtables`]). Each may pass `size` by RocksDB's arena over-allocation allowance and
/// by the writes already under way when it filled, which the caller's bound adds. The
/// invariant `log_memtables` keeps, checked by the tests here and in `db.rs`.
#[cfg(test)]
pub(super) fn log_memtables_held_at_most(size: usize, count: usize) -> usize {
    2 * count * size
}

/// Options of the `raft_log` column family.
pub(super) fn raft_log_options(
    cf: &mut Options,
    table: &mut BlockBasedOptions,
    write_buffer_bytes: usize,
    memtable_bytes: usize,
) {
    let (size, count) = log_memtables(write_buffer_bytes, memtable_bytes);
    cf.set_write_buffer_size(size);
    cf.set_max_write_buffer_number(count as i32);
    // Batches are compressed per topic already; compressing them again would spend CPU for
    // little.
    cf.set_compression_type(DBCompressionType::None);
    table.set_block_size(64 << 10);
    cf.set_enable_blob_files(true);
    cf.set_min_blob_size(LOG_BLOB_MIN_BYTES);
    cf.set_blob_file_size(LOG_BLOB_FILE_BYTES);
    cf.set_blob_compression_type(DBCompressionType::None);
    cf.set_enable_blob_gc(false);
}

/// The dynamic options that turn blob garbage collection on (every blob file old enough) or
/// off again, for [`Store::compact_range`](super::Store::compact_range).
pub(super) fn blob_gc_options(enabled: bool) -> [(&'static str, &'static str); 2] {
    if enabled {
        [
            ("enable_blob_garbage_collection", "true"),
            ("blob_garbage_collection_age_cutoff", "1.0"),
        ]
    } else {
        [
            ("enable_blob_garbage_collection", "false"),
            ("blob_garbage_collection_age_cutoff", "0.25"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_memtables_fit_the_budget() {
        const MIB: usize = 1 << 20;
        // The defaults: two 64 MiB memtables unflushed, two more a flush may not have handed
        // back yet: 256 MiB.
        assert_eq!(log_memtables(64 * MIB, 256 * MIB), (64 * MIB, 2));
        // A larger budget: more of them, never more than four.
        assert_eq!(log_memtables(64 * MIB, 512 * MIB), (64 * MIB, 4));
        assert_eq!(log_memtables(64 * MIB, 2048 * MIB), (64 * MIB, 4));
        assert_eq!(log_memtables(64 * MIB, 384 * MIB), (64 * MIB, 3));
        // A memtable larger than a quarter of the budget is cut to a quarter.
        assert_eq!(log_memtables(64 * MIB, 128 * MIB), (32 * MIB, 2));
        assert_eq!(log_memtables(8 * MIB, 2 * MIB), (MIB / 2, 2));
        for budget in [
            2 * MIB,
            3 * MIB + 1,
            10 * MIB,
            128 * MIB,
            160 * MIB,
            256 * MIB,
            1 << 40,
        ] {
            for asked in [MIB, 3 * MIB, 64 * MIB, 1 << 30] {
                let (size, count) = log_memtables(asked, budget);
                let held = log_memtables_held_at_most(size, count);
                assert!(
                    held <= budget,
                    "{count} x {size} hold {held}, over {budget}"
                );
                assert!((2..=LOG_MAX_MEMTABLES).contains(&count));
                assert!(size <= asked);
                // What a valid configuration asks for (a budget of at least four memtables,
                // `config::storage`) is what it gets.
                if budget >= 4 * asked {
                    assert_eq!(size, asked, "{asked} in {budget}");
                }
            }
        }
    }
}
