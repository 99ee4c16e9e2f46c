//! A partition's dedup window: what lets a retried produce be acknowledged without being
//! written twice.
//!
//! Two kinds of memory, both replicated state of the partition (decided at apply time, so every
//! replica agrees and a new leader knows what the old one wrote):
//! - **idempotency keys** (the `Idempotency-Key` header): key → where the request's share of
//!   this partition landed, and a fingerprint of what the client sent, so a reused key with
//!   another body is refused instead of answered with the first offsets;
//! - **idempotent producers** (`producer_id`, `producer_epoch`, `sequence`): producer → its
//!   epoch, the last sequence written, and its last [`REMEMBERED_BATCHES`] batches with their
//!   offsets, so a recent retry answers the offsets it was first given.
//!
//! The rules for a producer's batch with sequences `first..=last`: an epoch older than the
//! known one is fenced; `first == last_written + 1` is appended; `last <= last_written` is a
//! duplicate; anything else (a gap, or an overlap of old and new sequences) is out of order. A
//! producer this partition has never seen (or has forgotten) may start at any sequence. A newer
//! epoch is accepted and keeps the numbering: the epoch only fences older holders of the id.
//!
//! Everything decided here comes from the command (the leader's clock and the topic's limits
//! travel in the claim) and the replicated state, never from the local clock or configuration.
//! Times are the window's own clock, the largest leader time applied so far, so they never go
//! backwards when leadership moves to a node whose clock is behind, and the oldest entry is
//! always the first in insertion order: eviction walks from there. The state lives in rows of
//! its own (`dedup_rows`), written in the same atomic write as the apply, not in the small
//! per-apply partition state.

use herald_domain::RaftGroupId;
use std::collections::{BTreeMap, HashMap};
use std::io;

use serde::{Deserialize, Serialize};

use super::dedup_rows;
use crate::engine::codec;
use crate::engine::types::{DedupClaim, DedupLimits};
use herald_domain::batch::ProducerStamp;
use herald_storage::WriteSet;

/// How many of a producer's latest batches keep their offsets, so a retry of any of them
/// (a producer with up to this many requests in flight) answers the offsets it was first given.
pub(crate) const REMEMBERED_BATCHES: usize = 5;

/// What the window remembers of one idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyEntry {
    pub base_offset: u64,
    pub offset_span: u32,
    pub fingerprint: u32,
    /// The window's clock when the key was written.
    pub written_at_ms: i64,
    /// Insertion order: the oldest key goes first.
    pub seq: u64,
}

/// One of a producer's recent batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecentBatch {
    pub first_sequence: i64,
    pub last_sequence: i64,
    pub base_offset: u64,
    pub offset_span: u32,
}

/// What the window remembers of one idempotent producer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProducerEntry {
    pub epoch: i16,
    pub last_sequence: i64,
    /// The latest batches, oldest first, at most [`REMEMBERED_BATCHES`].
    pub batches: Vec<RecentBatch>,
    /// The window's clock at the producer's last write.
    pub written_at_ms: i64,
    /// Order of last writes: the producer idle longest goes first.
    pub seq: u64,
}

/// The window's clock and the next insertion number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DedupClock {
    pub now_ms: i64,
    pub next_seq: u64,
}

/// What the window says of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not seen before: append it, then [`DedupState::record`] it.
    New,
    /// Written before; `base_offset` is where, when still remembered.
    Duplicate {
        base_offset: Option<u64>,
        offset_span: u32,
    },
    OutOfOrder {
        expected: i64,
    },
    Fenced {
        current_epoch: i16,
    },
    KeyReused,
}

/// A partition's dedup window (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DedupState {
    clock: DedupClock,
    keys: HashMap<String, KeyEntry>,
    /// `seq` → key, oldest first.
    key_order: BTreeMap<u64, String>,
    producers: HashMap<i64, ProducerEntry>,
    /// `seq` → producer id, idle longest first.
    producer_order: BTreeMap<u64, i64>,
}

/// The window as a snapshot carries it: everything, in insertion order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DedupSnapshot {
    pub clock: DedupClock,
    pub keys: Vec<(String, KeyEntry)>,
    pub producers: Vec<(i64, ProducerEntry)>,
}

/// The sequences a batch of a producer covers: `offset_span` of them from its base sequence.
/// The span, not the record count: compaction may drop records of a batch but keeps its
/// span, so a replica applying the compacted entry decides as the others did.
fn sequences(producer: ProducerStamp, offset_span: u32) -> (i64, i64) {
    let first = i64::from(producer.base_sequence);
    (first, first + i64::from(offset_span.max(1)) - 1)
}

impl DedupState {
    /// Rebuilds the window from its entries (rows loaded at open, or a snapshot).
    pub(crate) fn from_parts(
        clock: DedupClock,
        keys: impl IntoIterator<Item = (String, KeyEntry)>,
        producers: impl IntoIterator<Item = (i64, ProducerEntry)>,
    ) -> DedupState {
        let mut state = DedupState {
            clock,
            ..DedupState::default()
        };
        for (key, entry) in keys {
            state.key_order.insert(entry.seq, key.clone());
            state.keys.insert(key, entry);
        }
        for (id, entry) in producers {
            state.producer_order.insert(entry.seq, id);
            state.producers.insert(id, entry);
        }
        state
    }

    pub(crate) fn snapshot(&self) -> DedupSnapshot {
        DedupSnapshot {
            clock: self.clock,
            keys: self
                .key_order
                .values()
                .filter_map(|key| Some((key.clone(), self.keys.get(key)?.clone())))
                .collect(),
            producers: self
                .producer_order
                .values()
                .filter_map(|id| Some((*id, self.producers.get(id)?.clone())))
                .collect(),
        }
    }

    pub(crate) fn from_snapshot(snapshot: DedupSnapshot) -> DedupState {
        DedupState::from_parts(snapshot.clock, snapshot.keys, snapshot.producers)
    }

    #[cfg(test)]
    pub(crate) fn key_count(&self) -> usize {
        self.keys.len()
    }

    #[cfg(test)]
    pub(crate) fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Moves the window's clock to the claim's time (never back) and forgets what is older
    /// than the window, then says what the window knows of this batch. `offset_span` is the
    /// batch's.
    pub(crate) fn check(
        &mut self,
        group: RaftGroupId,
        claim: &DedupClaim,
        producer: ProducerStamp,
        offset_span: u32,
        writes: &mut WriteSet,
    ) -> Verdict {
        self.advance_clock(group, claim.leader_time_ms, claim.limits, writes);
        if let Some(key) = &claim.idempotency_key {
            if let Some(entry) = self.keys.get(key) {
                return if entry.fingerprint == claim.fingerprint {
                    Verdict::Duplicate {
                        base_offset: Some(entry.base_offset),
                        offset_span: entry.offset_span,
                    }
                } else {
                    Verdict::KeyReused
                };
            }
        }
        if !producer.is_idempotent() {
            return Verdict::New;
        }
        let Some(known) = self.producers.get(&producer.producer_id) else {
            return Verdict::New;
        };
        if producer.producer_epoch < known.epoch {
            return Verdict::Fenced {
                current_epoch: known.epoch,
            };
        }
        let (first, last) = sequences(producer, offset_span);
        if first == known.last_sequence + 1 {
            return Verdict::New;
        }
        if last <= known.last_sequence {
            let original = known
                .batches
                .iter()
                .find(|batch| batch.first_sequence == first && batch.last_sequence == last);
            return Verdict::Duplicate {
                base_offset: original.map(|batch| batch.base_offset),
                offset_span: original.map_or(offset_span, |batch| batch.offset_span),
            };
        }
        Verdict::OutOfOrder {
            expected: known.last_sequence + 1,
        }
    }

    /// After a duplicate: a newer epoch of the producer still fences the older ones, although
    /// nothing was written.
    pub(crate) fn note_epoch(
        &mut self,
        group: RaftGroupId,
        producer: ProducerStamp,
        writes: &mut WriteSet,
    ) -> Result<(), io::Error> {
        let Some(known) = self.producers.get(&producer.producer_id) else {
            return Ok(());
        };
        if !producer.is_idempotent() || producer.producer_epoch <= known.epoch {
            return Ok(());
        }
        let mut entry = known.clone();
        entry.epoch = producer.producer_epoch;
        let row = codec::encode(&entry)?;
        dedup_rows::put_producer(writes, group, producer.producer_id, row);
        self.producers.insert(producer.producer_id, entry);
        Ok(())
    }

    /// Remembers a batch the window called [`Verdict::New`], appended at `base_offset`.
    /// Everything is encoded before anything changes: on an error the window is as before.
    pub(crate) fn record(
        &mut self,
        group: RaftGroupId,
        claim: &DedupClaim,
        producer: ProducerStamp,
        base_offset: u64,
        offset_span: u32,
        writes: &mut WriteSet,
    ) -> Result<(), io::Error> {
        let now = self.clock.now_ms;
        let mut next_seq = self.clock.next_seq;
        let key = match &claim.idempotency_key {
            Some(key) => {
                let entry = KeyEntry {
                    base_offset,
                    offset_span,
                    fingerprint: claim.fingerprint,
                    written_at_ms: now,
                    seq: next_seq,
                };
                next_seq += 1;
                let row = codec::encode(&entry)?;
                Some((key.clone(), entry, row))
            }
            None => None,
        };
        let producer_entry = if producer.is_idempotent() {
            let (first, last) = sequences(producer, offset_span);
            let mut entry = self
                .producers
                .get(&producer.producer_id)
                .cloned()
                .unwrap_or(ProducerEntry {
                    epoch: producer.producer_epoch,
                    last_sequence: last,
                    batches: Vec::new(),
                    written_at_ms: now,
                    seq: next_seq,
                });
            let previous_seq = self
                .producers
                .get(&producer.producer_id)
                .map(|known| known.seq);
            entry.epoch = entry.epoch.max(producer.producer_epoch);
            entry.last_sequence = last;
            entry.batches.push(RecentBatch {
                first_sequence: first,
                last_sequence: last,
                base_offset,
                offset_span,
            });
            if entry.batches.len() > REMEMBERED_BATCHES {
                entry.batches.remove(0);
            }
            entry.written_at_ms = now;
            entry.seq = next_seq;
            next_seq += 1;
            let row = codec::encode(&entry)?;
            Some((producer.producer_id, entry, row, previous_seq))
        } else {
            None
        };

        if let Some((key, entry, row)) = key {
            dedup_rows::put_key(writes, group, &key, row);
            self.key_order.insert(entry.seq, key.clone());
            if let Some(replaced) = self.keys.insert(key, entry) {
                self.key_order.remove(&replaced.seq);
            }
        }
        if let Some((id, entry, row, previous_seq)) = producer_entry {
            dedup_rows::put_producer(writes, group, id, row);
            if let Some(previous) = previous_seq {
                self.producer_order.remove(&previous);
            }
            self.producer_order.insert(entry.seq, id);
            self.producers.insert(id, entry);
        }
        self.clock.next_seq = next_seq;
        dedup_rows::put_clock(writes, group, self.clock);
        self.evict(group, i64::MIN, claim.limits.max_entries, writes);
        Ok(())
    }

    fn advance_clock(
        &mut self,
        group: RaftGroupId,
        leader_time_ms: i64,
        limits: DedupLimits,
        writes: &mut WriteSet,
    ) {
        if leader_time_ms > self.clock.now_ms {
            self.clock.now_ms = leader_time_ms;
            dedup_rows::put_clock(writes, group, self.clock);
        }
        let cutoff = self.clock.now_ms.saturating_sub(limits.max_age_ms.max(0));
        self.evict(group, cutoff, limits.max_entries, writes);
    }

    /// Forgets keys and producers written before `cutoff_ms`, and the oldest ones beyond
    /// `max_entries` of each kind.
    fn evict(
        &mut self,
        group: RaftGroupId,
        cutoff_ms: i64,
        max_entries: u32,
        writes: &mut WriteSet,
    ) {
        let max_entries = max_entries as usize;
        while let Some((&seq, key)) = self.key_order.first_key_value() {
            let expired = self
                .keys
                .get(key)
                .is_none_or(|entry| entry.written_at_ms < cutoff_ms);
            if !expired && self.keys.len() <= max_entries {
                break;
            }
            if let Some(key) = self.key_order.remove(&seq) {
                self.keys.remove(&key);
                dedup_rows::delete_key(writes, group, &key);
            }
        }
        while let Some((&seq, &id)) = self.producer_order.first_key_value() {
            let expired = self
                .producers
                .get(&id)
                .is_none_or(|entry| entry.written_at_ms < cutoff_ms);
            if !expired && self.producers.len() <= max_entries {
                break;
            }
            self.producer_order.remove(&seq);
            self.producers.remove(&id);
            dedup_rows::delete_producer(writes, group, id);
        }
    }
}
