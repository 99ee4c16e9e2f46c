//! Where a partition's dedup window is kept: rows in `raft_state` under the partition's group,
//! one per idempotency key and one per producer, plus the window's clock. They are written in
//! the same atomic write as the apply that changes them and deleted when evicted, so the small
//! per-apply partition state stays small however large the window is. A deleted partition
//! loses them with the rest of its group's keys (`reader::destroy_group` deletes the
//! group's whole `raft_state` range).

use herald_domain::RaftGroupId;
use std::io;

use super::dedup::{DedupClock, DedupSnapshot, DedupState, KeyEntry, ProducerEntry};
use crate::engine::codec;
use herald_storage::{keys, Cf, Store, WriteSet};

/// `(group, TAG_KEY, key bytes)` → [`KeyEntry`].
const TAG_KEY: u8 = 22;
/// `(group, TAG_PRODUCER, producer id u64 BE)` → [`ProducerEntry`].
const TAG_PRODUCER: u8 = 23;
/// `(group, TAG_CLOCK)` → [`DedupClock`].
const TAG_CLOCK: u8 = 24;
/// The first tag past the window's rows: `[TAG_KEY, TAG_END)` is all of them.
const TAG_END: u8 = 25;

fn producer_key(group: RaftGroupId, producer_id: i64) -> Vec<u8> {
    keys::group_tag_bytes(group, TAG_PRODUCER, &(producer_id as u64).to_be_bytes())
}

pub(crate) fn put_key(writes: &mut WriteSet, group: RaftGroupId, key: &str, row: Vec<u8>) {
    writes.put(
        Cf::RaftState,
        keys::group_tag_bytes(group, TAG_KEY, key.as_bytes()),
        row,
    );
}

pub(crate) fn delete_key(writes: &mut WriteSet, group: RaftGroupId, key: &str) {
    writes.delete(
        Cf::RaftState,
        keys::group_tag_bytes(group, TAG_KEY, key.as_bytes()),
    );
}

pub(crate) fn put_producer(
    writes: &mut WriteSet,
    group: RaftGroupId,
    producer_id: i64,
    row: Vec<u8>,
) {
    writes.put(Cf::RaftState, producer_key(group, producer_id), row);
}

pub(crate) fn delete_producer(writes: &mut WriteSet, group: RaftGroupId, producer_id: i64) {
    writes.delete(Cf::RaftState, producer_key(group, producer_id));
}

/// The clock is two fixed-width numbers, written by hand: it cannot fail to encode.
pub(crate) fn put_clock(writes: &mut WriteSet, group: RaftGroupId, clock: DedupClock) {
    let mut row = Vec::with_capacity(16);
    row.extend_from_slice(&clock.now_ms.to_be_bytes());
    row.extend_from_slice(&clock.next_seq.to_be_bytes());
    writes.put(
        Cf::RaftState,
        keys::group_tag(group, TAG_CLOCK).to_vec(),
        row,
    );
}

fn decode_clock(row: &[u8]) -> Result<DedupClock, io::Error> {
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed dedup clock row");
    if row.len() != 16 {
        return Err(malformed());
    }
    let now_ms = i64::from_be_bytes(row[..8].try_into().map_err(|_| malformed())?);
    let next_seq = u64::from_be_bytes(row[8..].try_into().map_err(|_| malformed())?);
    Ok(DedupClock { now_ms, next_seq })
}

/// Reads a partition's window back from its rows (blocking).
pub(crate) fn load(store: &Store, group: RaftGroupId) -> Result<DedupState, io::Error> {
    let clock = match store.get(Cf::RaftState, &keys::group_tag(group, TAG_CLOCK))? {
        Some(row) => decode_clock(&row)?,
        None => DedupClock::default(),
    };
    let mut entries: Vec<(String, KeyEntry)> = Vec::new();
    let mut failure = None;
    store.scan(
        Cf::RaftState,
        &keys::group_tag(group, TAG_KEY),
        &keys::group_tag(group, TAG_PRODUCER),
        |key, value| {
            let decoded = keys::group_tag_suffix(group, TAG_KEY, key)
                .and_then(|suffix| String::from_utf8(suffix.to_vec()).ok())
                .ok_or_else(|| io::Error::other("malformed idempotency key row"))
                .and_then(|name| Ok((name, codec::decode::<KeyEntry>(value)?)));
            match decoded {
                Ok(entry) => {
                    entries.push(entry);
                    Ok(true)
                }
                Err(error) => {
                    failure = Some(error);
                    Ok(false)
                }
            }
        },
    )?;
    let mut producers: Vec<(i64, ProducerEntry)> = Vec::new();
    store.scan(
        Cf::RaftState,
        &keys::group_tag(group, TAG_PRODUCER),
        &keys::group_tag(group, TAG_CLOCK),
        |key, value| {
            let decoded = keys::group_tag_suffix(group, TAG_PRODUCER, key)
                .and_then(|suffix| <[u8; 8]>::try_from(suffix).ok())
                .map(|id| u64::from_be_bytes(id) as i64)
                .ok_or_else(|| io::Error::other("malformed producer row"))
                .and_then(|id| Ok((id, codec::decode::<ProducerEntry>(value)?)));
            match decoded {
                Ok(entry) => {
                    producers.push(entry);
                    Ok(true)
                }
                Err(error) => {
                    failure = Some(error);
                    Ok(false)
                }
            }
        },
    )?;
    if let Some(error) = failure {
        return Err(error);
    }
    Ok(DedupState::from_parts(clock, entries, producers))
}

/// Replaces every row of the window with a snapshot's: what a replica installing a leader's
/// snapshot must end with.
pub(crate) fn replace_all(
    writes: &mut WriteSet,
    group: RaftGroupId,
    snapshot: &DedupSnapshot,
) -> Result<(), io::Error> {
    writes.delete_range(
        Cf::RaftState,
        keys::group_tag(group, TAG_KEY).to_vec(),
        keys::group_tag(group, TAG_END).to_vec(),
    );
    for (key, entry) in &snapshot.keys {
        put_key(writes, group, key, codec::encode(entry)?);
    }
    for (id, entry) in &snapshot.producers {
        put_producer(writes, group, *id, codec::encode(entry)?);
    }
    put_clock(writes, group, snapshot.clock);
    Ok(())
}
