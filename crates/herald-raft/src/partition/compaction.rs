//! Log compaction by key: keep, for every key, only its latest message; drop tombstones (null
//! values) once they are old enough. Blocking: callers run this off the async runtime.
//!
//! Compaction rewrites stored batches in place, in the raft entries that hold them: the entry
//! keeps its raft index and log id, its batch keeps its base offset, offset span and maximum
//! timestamp (a compacted batch, `domain::batch`), and loses the records that are superseded.
//! A batch that loses every record stays as a header, so every offset still belongs to one
//! entry and a replica that receives compacted entries from its leader assigns the same
//! offsets as if it had received the originals.
//!
//! A pass is planned by the leader (`compaction_plan`: the dirty section `[dirty_start, end)` and the tombstone
//! horizon) and replicated as a `Compact` command; every replica then runs the same passes in
//! the same order on the same committed entries, so all end with the same messages. Running a
//! pass again over its own output, or over output of later passes, changes nothing, which is
//! what makes a pass safe to resume after a crash and safe on entries that arrived compacted.
//!
//! One pass:
//! 1. builds a map from each key in the dirty section to the offset of its latest message;
//! 2. reads every batch from the log start to `end` and keeps a record when it has a key, no
//!    later message of that key is in the map, and it is not a tombstone below the horizon.

use herald_domain::RaftGroupId;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::EntryPayload;

use super::cleaner_state::{self, CleanTally, CleanerState, PassCheckpoint, QueuedPass};
use super::throttle::Throttle;
use crate::engine::codec;
use crate::engine::types::Entry;
use herald_domain::batch::{self, encode_compacted_batch, RecordView};
use herald_domain::record::Record;
use herald_storage::{keys, Cf, Store, WriteSet};

/// What one key costs in the map beyond its bytes (hash table slot, box, offset).
const KEY_OVERHEAD: usize = 48;
/// Rewrites are stored (with the pass checkpoint) every this many bytes, or this often, so
/// a pass slowed down by its I/O budget still keeps its progress across a crash.
const FLUSH_BYTES: usize = 4 << 20;
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(500);
/// How many offset-index entries are listed at a time.
const LIST_CHUNK: usize = 1024;

/// The offset of the latest message of each key in a dirty section.
#[derive(Default)]
pub struct KeyMap {
    latest: HashMap<Box<[u8]>, u64>,
    memory: usize,
}

impl KeyMap {
    fn note(&mut self, key: &[u8], offset: u64) {
        match self.latest.get_mut(key) {
            Some(latest) => *latest = (*latest).max(offset),
            None => {
                self.memory += key.len() + KEY_OVERHEAD;
                self.latest.insert(key.into(), offset);
            }
        }
    }

    fn latest(&self, key: &[u8]) -> Option<u64> {
        self.latest.get(key).copied()
    }

    pub fn keys(&self) -> usize {
        self.latest.len()
    }

    pub fn memory(&self) -> usize {
        self.memory
    }
}

/// Where a replica's cleaner runs: its storage, the node's I/O budget, and the signals that
/// stop it.
pub struct CleanContext<'a> {
    pub store: &'a Store,
    pub group: RaftGroupId,
    pub throttle: &'a Mutex<Throttle>,
    /// Set when the group shuts down or is deleted: the pass stops at the next batch.
    pub closing: &'a AtomicBool,
    /// Held while rewritten entries are stored, and by the log store's purge: an entry that was
    /// purged meanwhile is never written back.
    pub log_lock: &'a Mutex<()>,
}

impl CleanContext<'_> {
    fn spend(&self, bytes: usize) {
        if let Ok(mut throttle) = self.throttle.lock() {
            throttle.spend(bytes as u64);
        }
    }
}

/// `(base offset, raft index)` of the batches starting in `[from, to)`, at most `limit`.
fn list_batches(
    store: &Store,
    group: RaftGroupId,
    from: u64,
    to: u64,
    limit: usize,
) -> Result<Vec<(u64, u64)>, io::Error> {
    let mut batches = Vec::new();
    if from >= to {
        return Ok(batches);
    }
    store.scan(
        Cf::OffsetIndex,
        &keys::group_u64(group, from),
        &keys::group_u64(group, to),
        |key, value| {
            if let (Some((_, base)), Ok(index)) =
                (keys::decode_group_u64(key), <[u8; 8]>::try_from(value))
            {
                batches.push((base, u64::from_be_bytes(index)));
            }
            Ok(batches.len() < limit)
        },
    )?;
    Ok(batches)
}

/// Visits every batch starting in `[from, to)` in log order, a chunk of the index at a time;
/// stops when `visit` answers false.
fn for_each_batch(
    store: &Store,
    group: RaftGroupId,
    from: u64,
    to: u64,
    mut visit: impl FnMut(u64, u64) -> Result<bool, io::Error>,
) -> Result<(), io::Error> {
    let mut next = from;
    loop {
        let chunk = list_batches(store, group, next, to, LIST_CHUNK)?;
        let Some(&(last, _)) = chunk.last() else {
            return Ok(());
        };
        for (base, index) in chunk.iter().copied() {
            if !visit(base, index)? {
                return Ok(());
            }
        }
        next = last + 1;
    }
}

/// A raft entry holding a batch, as the cleaner reads it (records not decoded yet).
struct StoredEntry {
    entry: Entry,
    batch: Bytes,
    stored_len: usize,
}

/// The batch in raft entry `index`; `None` when the entry is gone (purged meanwhile).
fn load_entry(
    store: &Store,
    group: RaftGroupId,
    index: u64,
) -> Result<Option<StoredEntry>, io::Error> {
    let Some(value) = store.get(Cf::RaftLog, &keys::group_u64(group, index))? else {
        return Ok(None);
    };
    let entry = codec::decode_entry(&value)?;
    let Some(batch) = (match &entry.payload {
        EntryPayload::Normal(request) => request.batch(),
        _ => None,
    }) else {
        return Err(io::Error::other(format!(
            "group {group}: indexed raft entry {index} holds no batch"
        )));
    };
    let batch = batch.clone();
    Ok(Some(StoredEntry {
        entry,
        batch,
        stored_len: value.len(),
    }))
}

fn corrupt(error: batch::BatchError) -> io::Error {
    io::Error::other(error.to_string())
}

/// Maps each key in the batches starting in `[from, to)` to its latest offset. With a
/// `budget`, stops after the batch that took the map to it (so the map holds at most the budget
/// plus one batch's keys); answers where it stopped.
pub(crate) fn build_map(
    context: &CleanContext<'_>,
    from: u64,
    to: u64,
    budget: Option<usize>,
) -> Result<(u64, KeyMap), io::Error> {
    let (store, group) = (context.store, context.group);
    let mut map = KeyMap::default();
    let mut end = from;
    for_each_batch(store, group, from, to, |base, index| {
        if context.closing.load(Ordering::Relaxed) {
            return Err(io::Error::other("the group is shutting down"));
        }
        let Some(stored) = load_entry(store, group, index)? else {
            return Ok(true);
        };
        context.spend(stored.stored_len);
        let header = batch::visit_records(&stored.batch, |record| {
            if let Some(key) = record.key {
                map.note(key, base + u64::from(record.offset_delta));
            }
        })
        .map_err(corrupt)?;
        end = base + u64::from(header.offset_span);
        Ok(budget.is_none_or(|budget| map.memory() < budget))
    })?;
    Ok((end.max(from), map))
}

/// Whether cleaning keeps `record` at `offset`.
fn survives(record: &RecordView<'_>, offset: u64, map: &KeyMap, tombstone_horizon: u64) -> bool {
    // A compacted topic refuses messages without a key; any written before the topic became
    // compacted have nothing to be kept by.
    let Some(key) = record.key else {
        return false;
    };
    if map.latest(key).is_some_and(|latest| offset < latest) {
        return false;
    }
    !(record.is_tombstone() && offset < tombstone_horizon)
}

/// What a finished pass did on this replica.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassReport {
    pub pass: u64,
    /// Keys in the dirty section.
    pub dirty_keys: usize,
    pub bytes_read: u64,
    /// Stored bytes the rewritten entries lost.
    pub bytes_reclaimed: u64,
    pub records_removed: u64,
    /// What the cleaned log holds now.
    pub tally: CleanTally,
    /// The raft indexes rewritten, to compact in RocksDB afterwards.
    pub rewritten: Option<(u64, u64)>,
}

/// How a pass ended.
pub enum PassEnd {
    Finished(PassReport),
    /// The group is shutting down; the pass resumes from its checkpoint next time.
    Interrupted,
}

/// An entry rewritten but not stored yet.
struct Rewrite {
    index: u64,
    value: Vec<u8>,
}

/// Runs `pass` on this replica, from its checkpoint if it was interrupted before. `map` is the
/// dirty section's key map when the caller has it (the leader that planned the pass).
pub fn run_pass(
    context: &CleanContext<'_>,
    pass: &QueuedPass,
    log_start_offset: u64,
    map: Option<KeyMap>,
    mut state: CleanerState,
) -> Result<PassEnd, io::Error> {
    let (store, group) = (context.store, context.group);
    let mut report = PassReport {
        pass: pass.pass,
        ..PassReport::default()
    };
    let map = match map {
        Some(map) => map,
        None => {
            let dirty_start = pass.dirty_start.max(log_start_offset);
            match build_map(context, dirty_start, pass.end, None) {
                Ok((_, map)) => map,
                Err(_) if context.closing.load(Ordering::Relaxed) => {
                    return Ok(PassEnd::Interrupted)
                }
                Err(error) => return Err(error),
            }
        }
    };
    report.dirty_keys = map.keys();
    let (from, mut tally) = match state.checkpoint {
        Some(checkpoint) if checkpoint.pass == pass.pass => {
            tracing::info!(
                group = group.get(),
                pass = pass.pass,
                from = checkpoint.next_offset,
                "resuming a compaction pass"
            );
            (
                checkpoint.next_offset.max(log_start_offset),
                checkpoint.tally,
            )
        }
        _ => (log_start_offset, CleanTally::default()),
    };
    let mut last_checkpoint = Instant::now();
    let mut pending: Vec<Rewrite> = Vec::new();
    let mut pending_bytes = 0usize;
    let mut interrupted = false;
    let mut next_offset = from;
    for_each_batch(store, group, from, pass.end, |base, index| {
        if context.closing.load(Ordering::Relaxed) {
            interrupted = true;
            return Ok(false);
        }
        let Some(stored) = load_entry(store, group, index)? else {
            return Ok(true);
        };
        context.spend(stored.stored_len);
        report.bytes_read += stored.stored_len as u64;
        // Decide from views; decode (allocate) only a batch that loses records.
        let mut survivors: Vec<bool> = Vec::new();
        let header = batch::visit_records(&stored.batch, |record| {
            let offset = base + u64::from(record.offset_delta);
            let keep = survives(&record, offset, &map, pass.tombstone_horizon);
            if keep {
                tally.records_kept += 1;
                if record.is_tombstone() {
                    tally.note_tombstone(offset);
                }
            }
            survivors.push(keep);
        })
        .map_err(corrupt)?;
        next_offset = base + u64::from(header.offset_span);
        let removed = survivors.iter().filter(|keep| !**keep).count();
        if removed == 0 {
            tally.bytes_kept += stored.stored_len as u64;
        } else {
            // A second walk makes owned records of the survivors only.
            let mut kept: Vec<Record> = Vec::with_capacity(survivors.len() - removed);
            let mut position = 0;
            let mut failed = None;
            batch::visit_records(&stored.batch, |record| {
                if survivors.get(position) == Some(&true) {
                    match record.to_record() {
                        Ok(record) => kept.push(record),
                        Err(error) => failed = Some(error),
                    }
                }
                position += 1;
            })
            .map_err(corrupt)?;
            if let Some(error) = failed {
                return Err(corrupt(error));
            }
            let compacted = encode_compacted_batch(
                &kept,
                header.compression,
                header.producer,
                header.offset_span,
                header.max_timestamp,
            )
            .map_err(corrupt)?;
            let mut entry = stored.entry;
            // An idempotent append keeps its claim: a replica that receives the rewritten
            // entry must decide about it as this one did.
            let rewritten = match &entry.payload {
                EntryPayload::Normal(request) => request.with_batch(compacted),
                _ => None,
            };
            let Some(rewritten) = rewritten else {
                return Err(io::Error::other(format!(
                    "group {}: raft entry {index} holds no batch",
                    context.group
                )));
            };
            entry.payload = EntryPayload::Normal(rewritten);
            let value = codec::encode_entry(&entry)?;
            context.spend(value.len());
            report.records_removed += removed as u64;
            report.bytes_reclaimed += stored.stored_len.saturating_sub(value.len()) as u64;
            tally.bytes_kept += value.len() as u64;
            report.rewritten = Some(match report.rewritten {
                Some((first, _)) => (first, index),
                None => (index, index),
            });
            pending_bytes += value.len();
            pending.push(Rewrite { index, value });
        }
        if pending_bytes >= FLUSH_BYTES || last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
            state.checkpoint = Some(PassCheckpoint {
                pass: pass.pass,
                next_offset,
                tally,
            });
            store_rewrites(context, std::mem::take(&mut pending), &state, None)?;
            pending_bytes = 0;
            last_checkpoint = Instant::now();
        }
        Ok(true)
    })?;
    if interrupted {
        state.checkpoint = Some(PassCheckpoint {
            pass: pass.pass,
            next_offset,
            tally,
        });
        store_rewrites(context, pending, &state, None)?;
        return Ok(PassEnd::Interrupted);
    }
    state.done_pass = pass.pass;
    state.checkpoint = None;
    state.cleaned = tally;
    store_rewrites(context, pending, &state, Some(pass.pass))?;
    report.tally = tally;
    Ok(PassEnd::Finished(report))
}

/// Stores rewritten entries with the cleaner's progress, atomically; `finished` also takes the
/// pass off the queue. An entry purged meanwhile stays purged.
fn store_rewrites(
    context: &CleanContext<'_>,
    rewrites: Vec<Rewrite>,
    state: &CleanerState,
    finished: Option<u64>,
) -> Result<(), io::Error> {
    let (store, group) = (context.store, context.group);
    let _purges_wait = context
        .log_lock
        .lock()
        .map_err(|_| io::Error::other("log lock poisoned"))?;
    if context.closing.load(Ordering::Relaxed) {
        // A deleted group's entries must not come back; a shut-down one redoes this part
        // from its last checkpoint when it starts again.
        return Ok(());
    }
    let mut writes = WriteSet::new();
    for rewrite in rewrites {
        let key = keys::group_u64(group, rewrite.index);
        if store.contains(Cf::RaftLog, &key)? {
            writes.put(Cf::RaftLog, key.to_vec(), rewrite.value);
        }
    }
    cleaner_state::save(&mut writes, group, state)?;
    if let Some(pass) = finished {
        cleaner_state::dequeue(&mut writes, group, pass);
    }
    store.write(writes, false)?;
    Ok(())
}
