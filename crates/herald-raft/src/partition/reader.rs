//! Reading a partition: from offsets to the raft entries holding their batches, through the
//! offset index; and from timestamps to offsets, through the time index. Blocking: callers run
//! these off the async runtime.

use herald_domain::RaftGroupId;
use std::io;

use bytes::Bytes;
use openraft::EntryPayload;

use crate::engine::codec;
use herald_domain::batch;
use herald_storage::{keys, Cf, Store};

/// A stored batch and the offset of its first message.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    pub base_offset: u64,
    pub bytes: Bytes,
}

/// How much one read may gather.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    pub max_records: usize,
    pub max_bytes: usize,
}

fn batch_at_raft_index(
    store: &Store,
    group: RaftGroupId,
    raft_index: u64,
) -> Result<Bytes, io::Error> {
    let Some(entry) = store.get_with(
        Cf::RaftLog,
        &keys::group_u64(group, raft_index),
        codec::decode_entry,
    )?
    else {
        return Err(io::Error::other(format!(
            "group {group}: indexed raft entry {raft_index} is missing"
        )));
    };
    match entry?.payload {
        EntryPayload::Normal(request) => request.batch().cloned(),
        _ => None,
    }
    .ok_or_else(|| {
        io::Error::other(format!(
            "group {group}: raft entry {raft_index} holds no batch"
        ))
    })
}

fn raft_index_of(value: &[u8]) -> Result<u64, io::Error> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| io::Error::other("malformed offset index entry"))?;
    Ok(u64::from_be_bytes(bytes))
}

/// The batches holding offsets from `from_offset` (the first may start before it) up to the
/// high watermark, within `limits`. Only applied batches are indexed, so only they are read.
pub fn read_batches(
    store: &Store,
    group: RaftGroupId,
    from_offset: u64,
    high_watermark: u64,
    limits: ReadLimits,
) -> Result<Vec<StoredBatch>, io::Error> {
    let mut batches = Vec::new();
    if from_offset >= high_watermark {
        return Ok(batches);
    }
    let start_key = match store.last_at_or_before(
        Cf::OffsetIndex,
        &keys::group_u64(group, 0),
        &keys::group_u64(group, from_offset),
    )? {
        Some((key, _)) => key,
        None => keys::group_u64(group, from_offset).to_vec(),
    };
    let (mut records, mut bytes) = (0usize, 0usize);
    store.scan(
        Cf::OffsetIndex,
        &start_key,
        &keys::group_u64(group, high_watermark),
        |key, value| {
            let Some((_, base_offset)) = keys::decode_group_u64(key) else {
                return Ok(false);
            };
            let batch_bytes = batch_at_raft_index(store, group, raft_index_of(value)?)?;
            let header = batch::decode_header(&batch_bytes)
                .map_err(|error| io::Error::other(error.to_string()))?;
            let end = base_offset + u64::from(header.offset_span);
            if end > from_offset {
                // Compaction may have removed records: the header's count is what is there.
                let span_read = end.saturating_sub(from_offset.max(base_offset));
                records += (header.record_count as u64).min(span_read) as usize;
                bytes += batch_bytes.len();
                batches.push(StoredBatch {
                    base_offset,
                    bytes: batch_bytes,
                });
            }
            Ok(records < limits.max_records && bytes < limits.max_bytes)
        },
    )?;
    Ok(batches)
}

/// The first offset whose timestamp is at least `timestamp`, if any applied message has one.
pub fn offset_for_timestamp(
    store: &Store,
    group: RaftGroupId,
    timestamp: i64,
) -> Result<Option<u64>, io::Error> {
    let Some((key, _)) = store.first_at_or_after(
        Cf::TimeIndex,
        &keys::time_index(group, timestamp, 0),
        &keys::group_end(group),
    )?
    else {
        return Ok(None);
    };
    let Some(base_offset) = keys::decode_time_index(group, &key) else {
        return Ok(None);
    };
    // The indexed batch is where the running maximum first reached `timestamp`, so no earlier
    // batch has a message this late. It had one when it was written; compaction may have
    // removed it since, so the search goes on through the batches after it.
    let mut found = None;
    let mut scan_error = None;
    store.scan(
        Cf::OffsetIndex,
        &keys::group_u64(group, base_offset),
        &keys::group_end(group),
        |key, value| {
            let Some((_, batch_base)) = keys::decode_group_u64(key) else {
                return Ok(false);
            };
            let outcome = raft_index_of(value)
                .and_then(|index| batch_at_raft_index(store, group, index))
                .and_then(|bytes| {
                    batch::decode_batch(&bytes).map_err(|error| io::Error::other(error.to_string()))
                });
            match outcome {
                Ok((_, records)) => {
                    found = records
                        .iter()
                        .find(|record| record.timestamp >= timestamp)
                        .map(|record| batch_base + u64::from(record.offset_delta));
                    Ok(found.is_none())
                }
                Err(error) => {
                    scan_error = Some(error);
                    Ok(false)
                }
            }
        },
    )?;
    match scan_error {
        Some(error) => Err(error),
        None => Ok(found),
    }
}

/// Removes everything a group stored: its log, indexes and raft state.
pub fn destroy_group(store: &Store, group: RaftGroupId) -> Result<(), io::Error> {
    let mut writes = herald_storage::WriteSet::new();
    for cf in [Cf::RaftLog, Cf::RaftState, Cf::OffsetIndex, Cf::TimeIndex] {
        writes.delete_range(
            cf,
            keys::group_start(group).to_vec(),
            keys::group_end(group).to_vec(),
        );
    }
    store.write(writes, false)?;
    for cf in [Cf::RaftLog, Cf::OffsetIndex, Cf::TimeIndex] {
        store.compact_range(cf, &keys::group_start(group), &keys::group_end(group))?;
    }
    Ok(())
}
