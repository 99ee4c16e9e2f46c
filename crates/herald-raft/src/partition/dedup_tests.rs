//! The dedup window on real RocksDB, through the partition applier as raft drives it: what is
//! a duplicate, a gap or fenced, what is forgotten and when, and that the window survives a
//! restart and travels whole in a snapshot.

use bytes::Bytes;
use herald_domain::RaftGroupId;

use super::applier::PartitionApplier;
use super::dedup::DedupState;
use super::reader;
use crate::engine::state_machine::GroupApplier;
use crate::engine::types::{DedupClaim, DedupLimits, RaftRequest, RaftResponse};
use herald_domain::batch::{self, Compression, ProducerStamp};
use herald_domain::record::{Record, RecordValue};
use herald_storage::{keys, Cf, Store, StoreOptions, WriteSet};

const GROUP: RaftGroupId = RaftGroupId::new(9);
const DAY_MS: i64 = 86_400_000;

/// One replica's storage and partition applier, fed entry by entry.
struct Replica {
    _dir: tempfile::TempDir,
    store: Store,
    applier: PartitionApplier,
    index: u64,
}

impl Replica {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        Replica {
            _dir: dir,
            store,
            applier: PartitionApplier::new(GROUP),
            index: 0,
        }
    }

    /// Applies `request` as the next entry and stores what it wrote, as the state machine does.
    fn apply(&mut self, request: RaftRequest) -> RaftResponse {
        self.index += 1;
        let mut writes = WriteSet::new();
        let response = self.applier.apply(self.index, &request, &mut writes);
        self.store.write(writes, false).unwrap();
        self.applier.publish();
        response
    }

    fn high_watermark(&self) -> u64 {
        self.applier.watermarks().borrow().high_watermark
    }

    /// How many rows of the window are stored.
    fn stored_rows(&self, tag: u8) -> usize {
        let mut count = 0;
        self.store
            .scan(
                Cf::RaftState,
                &keys::group_tag(GROUP, tag),
                &keys::group_tag(GROUP, tag + 1),
                |_, _| {
                    count += 1;
                    Ok(true)
                },
            )
            .unwrap();
        count
    }

    /// What a restarted replica loads: the small state, then the rows.
    fn reopened(&self) -> PartitionApplier {
        let mut applier = PartitionApplier::new(GROUP);
        applier
            .restore_state(&self.applier.encode_state().unwrap())
            .unwrap();
        applier.load_rows(&self.store).unwrap();
        applier
    }
}

fn batch_of(messages: usize, stamp: ProducerStamp) -> Bytes {
    let records: Vec<Record> = (0..messages)
        .map(|delta| Record {
            offset_delta: delta as u32,
            timestamp: 1_000,
            key: None,
            value: RecordValue::Json(Bytes::from(format!("{delta}"))),
            headers: Vec::new(),
        })
        .collect();
    batch::encode_batch(&records, Compression::None, stamp).unwrap()
}

fn limits() -> DedupLimits {
    DedupLimits {
        max_age_ms: DAY_MS,
        max_entries: 10_000,
    }
}

fn keyed(key: &str, fingerprint: u32, at_ms: i64, messages: usize) -> RaftRequest {
    RaftRequest::AppendOnce {
        batch: batch_of(messages, ProducerStamp::NONE),
        claim: DedupClaim {
            idempotency_key: Some(key.into()),
            fingerprint,
            leader_time_ms: at_ms,
            limits: limits(),
        },
    }
}

fn produced(id: i64, epoch: i16, sequence: i32, messages: usize, at_ms: i64) -> RaftRequest {
    RaftRequest::AppendOnce {
        batch: batch_of(
            messages,
            ProducerStamp {
                producer_id: id,
                producer_epoch: epoch,
                base_sequence: sequence,
            },
        ),
        claim: DedupClaim {
            idempotency_key: None,
            fingerprint: 0,
            leader_time_ms: at_ms,
            limits: limits(),
        },
    }
}

fn appended(base_offset: u64, offset_span: u32) -> RaftResponse {
    RaftResponse::Appended {
        base_offset,
        offset_span,
    }
}

fn duplicate(base_offset: Option<u64>, offset_span: u32) -> RaftResponse {
    RaftResponse::Duplicate {
        base_offset,
        offset_span,
    }
}

#[test]
fn a_key_writes_once_and_refuses_another_body() {
    let mut replica = Replica::new();
    assert_eq!(replica.apply(keyed("k1", 7, 1_000, 3)), appended(0, 3));
    assert_eq!(
        replica.apply(keyed("k1", 7, 2_000, 3)),
        duplicate(Some(0), 3)
    );
    assert_eq!(
        replica.apply(keyed("k1", 8, 2_000, 3)),
        RaftResponse::IdempotencyKeyReused
    );
    assert_eq!(replica.apply(keyed("k2", 7, 2_000, 2)), appended(3, 2));
    assert_eq!(replica.high_watermark(), 5, "duplicates take no offsets");
    // Ordinary appends go on beside the window.
    let plain = RaftRequest::Append {
        batch: batch_of(1, ProducerStamp::NONE),
    };
    assert_eq!(replica.apply(plain), appended(5, 1));
    assert_eq!(
        replica.apply(keyed("k2", 7, 3_000, 2)),
        duplicate(Some(3), 2)
    );
}

#[test]
fn producer_sequences_duplicates_gaps_and_fencing() {
    let mut replica = Replica::new();
    // A producer the partition never saw may start anywhere.
    assert_eq!(replica.apply(produced(4, 0, 10, 2, 1_000)), appended(0, 2));
    assert_eq!(replica.apply(produced(4, 0, 12, 3, 1_000)), appended(2, 3));
    // A retry of either batch answers its offsets and writes nothing.
    assert_eq!(
        replica.apply(produced(4, 0, 10, 2, 1_000)),
        duplicate(Some(0), 2)
    );
    assert_eq!(
        replica.apply(produced(4, 0, 12, 3, 1_000)),
        duplicate(Some(2), 3)
    );
    // A gap, and an overlap of written and new sequences, are out of order.
    assert_eq!(
        replica.apply(produced(4, 0, 16, 1, 1_000)),
        RaftResponse::OutOfOrderSequence { expected: 15 }
    );
    assert_eq!(
        replica.apply(produced(4, 0, 14, 2, 1_000)),
        RaftResponse::OutOfOrderSequence { expected: 15 }
    );
    // A newer epoch continues the numbering and fences the older one.
    assert_eq!(replica.apply(produced(4, 1, 15, 1, 1_000)), appended(5, 1));
    assert_eq!(
        replica.apply(produced(4, 0, 16, 1, 1_000)),
        RaftResponse::ProducerFenced { current_epoch: 1 }
    );
    // A newer epoch's duplicate fences too, although it writes nothing.
    assert_eq!(
        replica.apply(produced(4, 2, 15, 1, 1_000)),
        duplicate(Some(5), 1)
    );
    assert_eq!(
        replica.apply(produced(4, 1, 16, 1, 1_000)),
        RaftResponse::ProducerFenced { current_epoch: 2 }
    );
    // Another producer has its own sequences.
    assert_eq!(replica.apply(produced(5, 0, 0, 1, 1_000)), appended(6, 1));
    assert_eq!(replica.high_watermark(), 7);
}

#[test]
fn old_duplicates_are_acknowledged_without_offsets() {
    let mut replica = Replica::new();
    for sequence in 0..7 {
        replica.apply(produced(1, 0, sequence, 1, 1_000));
    }
    // The last five batches keep their offsets; older ones are known only as written.
    assert_eq!(
        replica.apply(produced(1, 0, 0, 1, 1_000)),
        duplicate(None, 1)
    );
    assert_eq!(
        replica.apply(produced(1, 0, 1, 1, 1_000)),
        duplicate(None, 1)
    );
    assert_eq!(
        replica.apply(produced(1, 0, 2, 1, 1_000)),
        duplicate(Some(2), 1)
    );
    assert_eq!(
        replica.apply(produced(1, 0, 6, 1, 1_000)),
        duplicate(Some(6), 1)
    );
    assert_eq!(replica.high_watermark(), 7);
}

#[test]
fn the_window_forgets_the_oldest_beyond_its_size() {
    let mut replica = Replica::new();
    let small = DedupLimits {
        max_age_ms: DAY_MS,
        max_entries: 3,
    };
    let with_limits = |request: RaftRequest| match request {
        RaftRequest::AppendOnce { batch, mut claim } => {
            claim.limits = small;
            RaftRequest::AppendOnce { batch, claim }
        }
        other => other,
    };
    for (n, key) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        let response = replica.apply(with_limits(keyed(key, 1, 1_000 + n as i64, 1)));
        assert_eq!(response, appended(n as u64, 1));
    }
    for producer in 0..5 {
        replica.apply(with_limits(produced(100 + producer, 0, 0, 1, 2_000)));
    }
    assert_eq!(replica.applier.dedup.key_count(), 3);
    assert_eq!(replica.applier.dedup.producer_count(), 3);
    assert_eq!(replica.stored_rows(22), 3, "evicted keys' rows are deleted");
    assert_eq!(
        replica.stored_rows(23),
        3,
        "evicted producers' rows are deleted"
    );
    // The newest are remembered, the oldest forgotten (and would be written again).
    assert_eq!(
        replica.apply(with_limits(keyed("e", 1, 3_000, 1))),
        duplicate(Some(4), 1)
    );
    assert_eq!(
        replica.apply(with_limits(keyed("a", 1, 3_000, 1))),
        appended(10, 1)
    );
    // A forgotten producer may start over anywhere, a remembered one may not.
    assert_eq!(
        replica.apply(with_limits(produced(100, 0, 50, 1, 3_000))),
        appended(11, 1)
    );
    assert_eq!(
        replica.apply(with_limits(produced(104, 0, 50, 1, 3_000))),
        RaftResponse::OutOfOrderSequence { expected: 1 }
    );
}

#[test]
fn the_window_forgets_what_is_older_than_its_age() {
    let mut replica = Replica::new();
    let short = |request: RaftRequest| match request {
        RaftRequest::AppendOnce { batch, mut claim } => {
            claim.limits.max_age_ms = 1_000;
            RaftRequest::AppendOnce { batch, claim }
        }
        other => other,
    };
    assert_eq!(
        replica.apply(short(keyed("k", 1, 10_000, 1))),
        appended(0, 1)
    );
    assert_eq!(
        replica.apply(short(produced(3, 0, 0, 1, 10_500))),
        appended(1, 1)
    );
    assert_eq!(
        replica.apply(short(keyed("k", 1, 11_000, 1))),
        duplicate(Some(0), 1),
        "exactly max_age_ms old is still in the window"
    );
    // A leader whose clock is behind does not bring the window back in time.
    assert_eq!(
        replica.apply(short(keyed("late", 1, 12_000, 1))),
        appended(2, 1)
    );
    assert_eq!(
        replica.apply(short(keyed("k", 1, 5_000, 1))),
        appended(3, 1)
    );
    assert_eq!(
        replica.apply(short(produced(3, 0, 7, 1, 5_000))),
        appended(4, 1),
        "the producer was forgotten too"
    );
    assert_eq!(replica.stored_rows(22), 2, "k (again) and late");
}

#[test]
fn the_window_is_loaded_back_after_a_restart() {
    let mut replica = Replica::new();
    replica.apply(keyed("k1", 7, 1_000, 2));
    replica.apply(produced(4, 3, 0, 2, 1_000));
    replica.apply(keyed("k2", 8, 2_000, 1));
    let reopened = replica.reopened();
    assert_eq!(reopened.dedup, replica.applier.dedup);
    replica.applier = reopened;
    assert_eq!(
        replica.apply(keyed("k1", 7, 3_000, 2)),
        duplicate(Some(0), 2)
    );
    assert_eq!(
        replica.apply(produced(4, 3, 0, 2, 3_000)),
        duplicate(Some(2), 2)
    );
    assert_eq!(
        replica.apply(produced(4, 2, 2, 1, 3_000)),
        RaftResponse::ProducerFenced { current_epoch: 3 }
    );
    assert_eq!(replica.apply(keyed("k3", 9, 3_000, 1)), appended(5, 1));
}

#[test]
fn a_snapshot_carries_the_whole_window() {
    let mut leader = Replica::new();
    leader.apply(keyed("k1", 7, 1_000, 2));
    leader.apply(produced(4, 0, 0, 2, 1_000));
    leader.apply(keyed("k2", 8, 2_000, 1));
    let snapshot = leader.applier.encode_snapshot().unwrap();

    let mut follower = Replica::new();
    // Whatever the follower had is replaced, rows included.
    follower.apply(keyed("stale", 1, 500, 1));
    let mut writes = WriteSet::new();
    follower
        .applier
        .restore_snapshot(&snapshot, &mut writes)
        .unwrap();
    follower.store.write(writes, false).unwrap();
    follower.applier.publish();
    assert_eq!(follower.applier.dedup, leader.applier.dedup);
    assert_eq!(follower.high_watermark(), 5);
    assert_eq!(follower.reopened().dedup, leader.applier.dedup);
    assert_eq!(follower.stored_rows(22), 2, "the stale key's row is gone");

    // Both decide the same from here on.
    for request in [
        keyed("k1", 7, 3_000, 2),
        keyed("stale", 1, 3_000, 1),
        produced(4, 0, 2, 1, 3_000),
        produced(4, 0, 9, 1, 3_000),
    ] {
        assert_eq!(
            leader.apply(request.clone()),
            follower.apply(request.clone()),
            "{request}"
        );
    }
}

#[test]
fn a_rewritten_entry_keeps_its_claim() {
    let request = keyed("k", 3, 1_000, 2);
    let smaller = batch_of(1, ProducerStamp::NONE);
    let Some(RaftRequest::AppendOnce { batch, claim }) = request.with_batch(smaller.clone()) else {
        panic!("not an AppendOnce any more");
    };
    assert_eq!(batch, smaller);
    assert_eq!(claim.idempotency_key.as_deref(), Some("k"));
    assert_eq!(claim.fingerprint, 3);
}

#[test]
fn destroying_the_partition_removes_the_window() {
    let mut replica = Replica::new();
    replica.apply(keyed("k1", 7, 1_000, 2));
    replica.apply(produced(4, 0, 0, 2, 1_000));
    assert!(replica.stored_rows(22) > 0 && replica.stored_rows(23) > 0);
    reader::destroy_group(&replica.store, GROUP).unwrap();
    assert_eq!(replica.stored_rows(22), 0);
    assert_eq!(replica.stored_rows(23), 0);
    assert_eq!(replica.stored_rows(24), 0);
    let mut fresh = PartitionApplier::new(GROUP);
    fresh.load_rows(&replica.store).unwrap();
    assert_eq!(fresh.dedup, DedupState::default());
}
