//! Retention by time and size: which whole batches at the start of a partition have expired.
//! The leader plans (reading its own indexes); the plan becomes a `Trim` raft command, so every
//! replica moves its log start at the same point of the log, not by its own clock.
//! Blocking: callers run these off the async runtime.

use herald_domain::RaftGroupId;
use std::collections::HashMap;
use std::io;

use super::applier::Watermarks;
use herald_storage::{keys, Cf, Store};

/// Where the log start moves to and which time-index entries go with the removed batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPlan {
    pub log_start_offset: u64,
    pub time_index_before: Option<i64>,
}

/// Plans retention for `group`: batches whose every message is older than `cutoff_ms`
/// (`None`: no time limit), then, from the start, batches while the partition holds more than
/// `max_bytes` (`None`: no size limit), always keeping the newest batch. `None` when nothing
/// expires.
pub fn plan(
    store: &Store,
    group: RaftGroupId,
    watermarks: Watermarks,
    cutoff_ms: Option<i64>,
    max_bytes: Option<u64>,
) -> Result<Option<RetentionPlan>, io::Error> {
    let mut start = watermarks.log_start_offset;
    if let Some(cutoff) = cutoff_ms {
        // The time index is keyed by the running maximum timestamp: every batch before the
        // first entry at or past the cutoff has only older messages.
        let first_live = store.first_at_or_after(
            Cf::TimeIndex,
            &keys::time_index(group, cutoff, 0),
            &keys::group_end(group),
        )?;
        let expired_until = match first_live {
            Some((key, _)) => keys::decode_time_index(group, &key).unwrap_or(start),
            None => watermarks.high_watermark,
        };
        start = start.max(expired_until);
    }
    if let Some(max_bytes) = max_bytes {
        start = start.max(size_cut(store, group, watermarks, max_bytes)?);
    }
    if start <= watermarks.log_start_offset {
        return Ok(None);
    }
    Ok(Some(RetentionPlan {
        log_start_offset: start,
        time_index_before: time_index_cut(store, group, start)?,
    }))
}

/// The first batch to keep so that what is kept holds at most `max_bytes` of stored batches.
fn size_cut(
    store: &Store,
    group: RaftGroupId,
    watermarks: Watermarks,
    max_bytes: u64,
) -> Result<u64, io::Error> {
    // (base offset, raft index) of every retained batch, in log order.
    let mut batches: Vec<(u64, u64)> = Vec::new();
    store.scan(
        Cf::OffsetIndex,
        &keys::group_u64(group, watermarks.log_start_offset),
        &keys::group_u64(group, watermarks.high_watermark),
        |key, value| {
            if let (Some((_, base)), Ok(index)) =
                (keys::decode_group_u64(key), <[u8; 8]>::try_from(value))
            {
                batches.push((base, u64::from_be_bytes(index)));
            }
            Ok(true)
        },
    )?;
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
        return Ok(watermarks.log_start_offset);
    };
    let mut sizes: HashMap<u64, u64> = HashMap::with_capacity(batches.len());
    store.scan(
        Cf::RaftLog,
        &keys::group_u64(group, first.1),
        &keys::group_u64(group, last.1 + 1),
        |key, value| {
            if let Some((_, index)) = keys::decode_group_u64(key) {
                sizes.insert(index, value.len() as u64);
            }
            Ok(true)
        },
    )?;
    let mut total: u64 = batches
        .iter()
        .map(|(_, index)| sizes.get(index).copied().unwrap_or(0))
        .sum();
    // The newest batch always stays: a partition is kept within `max_bytes` plus one batch.
    for (position, (_, index)) in batches.iter().enumerate() {
        if total <= max_bytes || position + 1 == batches.len() {
            return Ok(batches[position].0);
        }
        total -= sizes.get(index).copied().unwrap_or(0);
    }
    Ok(watermarks.log_start_offset)
}

/// The timestamp below which every time-index entry points before `log_start_offset`.
fn time_index_cut(
    store: &Store,
    group: RaftGroupId,
    log_start_offset: u64,
) -> Result<Option<i64>, io::Error> {
    let mut cut = None;
    let mut any_before = false;
    store.scan(
        Cf::TimeIndex,
        &keys::group_start(group),
        &keys::group_end(group),
        |key, _| {
            let Some(base) = keys::decode_time_index(group, key) else {
                return Ok(false);
            };
            if base >= log_start_offset {
                cut = keys::decode_time_index_timestamp(group, key);
                return Ok(false);
            }
            any_before = true;
            Ok(true)
        },
    )?;
    Ok(match (cut, any_before) {
        (Some(timestamp), _) => Some(timestamp),
        (None, true) => Some(i64::MAX),
        (None, false) => None,
    })
}

/// The raft index of the entry holding the batch that starts at `offset`.
pub fn raft_index_of_batch(
    store: &Store,
    group: RaftGroupId,
    offset: u64,
) -> Result<Option<u64>, io::Error> {
    Ok(store
        .get(Cf::OffsetIndex, &keys::group_u64(group, offset))?
        .and_then(|value| <[u8; 8]>::try_from(value.as_slice()).ok())
        .map(u64::from_be_bytes))
}

/// Gives back the disk space of a purged log prefix (RocksDB drops range-deleted data only
/// when it compacts, and the write-ahead log holding it only when every memtable was flushed).
pub fn compact_log_prefix(
    store: &Store,
    group: RaftGroupId,
    below_index: u64,
) -> Result<(), io::Error> {
    // Flush every column family first: the write-ahead log is shared, and a WAL file is
    // deleted only once no column family's memtable still needs it.
    store.flush()?;
    store.compact_range(
        Cf::RaftLog,
        &keys::group_u64(group, 0),
        &keys::group_u64(group, below_index),
    )?;
    store.compact_range(
        Cf::OffsetIndex,
        &keys::group_start(group),
        &keys::group_end(group),
    )?;
    Ok(())
}
