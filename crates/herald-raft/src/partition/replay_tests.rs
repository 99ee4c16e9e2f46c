//! Issue 29 at the applier: a replica that installs a checkpoint and replays the entries after
//! it ends with exactly the state of the replica that applied everything (progress, dedup
//! window, subscription leases and acks), the same offset- and time-index rows and the same
//! watermarks, although the checkpoint was taken before retention moved the log start and the
//! restored replica had an older state of its own.

use bytes::Bytes;
use herald_domain::RaftGroupId;

use super::applier::PartitionApplier;
use super::subscriptions::{DeliveryCommand, DeliveryOutcome, LeaseFacts, LeaseRef, MessageFacts};
use crate::engine::state_machine::GroupApplier;
use crate::engine::types::{RaftRequest, RaftResponse};
use herald_domain::batch::{self, Compression, ProducerStamp};
use herald_domain::record::{Record, RecordValue};
use herald_domain::subscriptions::RetryPolicy;
use herald_storage::{keys, Cf, Store, StoreOptions, WriteSet};

const GROUP: RaftGroupId = RaftGroupId::new(11);
const SUB: u64 = 3;
const PER_BATCH: usize = 10;

struct Replica {
    _dir: tempfile::TempDir,
    store: Store,
    applier: PartitionApplier,
}

impl Replica {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        Replica {
            _dir: dir,
            store,
            applier: PartitionApplier::new(GROUP),
        }
    }

    fn apply(&mut self, index: u64, request: &RaftRequest) -> RaftResponse {
        let mut writes = WriteSet::new();
        let response = self.applier.apply(index, request, &mut writes);
        self.store.write(writes, false).unwrap();
        self.applier.publish();
        response
    }

    fn install(&mut self, snapshot: &[u8]) {
        let mut writes = WriteSet::new();
        self.applier
            .restore_snapshot(snapshot, &mut writes)
            .unwrap();
        self.store.write(writes, false).unwrap();
        self.applier.publish();
    }

    fn rows(&self, cf: Cf) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rows = Vec::new();
        self.store
            .scan(
                cf,
                &keys::group_start(GROUP),
                &keys::group_end(GROUP),
                |k, v| {
                    rows.push((k.to_vec(), v.to_vec()));
                    Ok(true)
                },
            )
            .unwrap();
        rows
    }
}

fn timestamp(batch: u64) -> i64 {
    1_000_000 + batch as i64 * 1_000
}

fn append(batch: u64) -> RaftRequest {
    let records: Vec<Record> = (0..PER_BATCH)
        .map(|delta| Record {
            offset_delta: delta as u32,
            timestamp: timestamp(batch),
            key: None,
            value: RecordValue::Json(Bytes::from(format!("{batch}.{delta}"))),
            headers: Vec::new(),
        })
        .collect();
    RaftRequest::Append {
        batch: batch::encode_batch(&records, Compression::None, ProducerStamp::NONE).unwrap(),
    }
}

fn lease(now_ms: i64, max: u32, high_watermark: u64) -> RaftRequest {
    RaftRequest::Delivery(DeliveryCommand::Lease {
        subscription: SUB,
        now_ms,
        max_messages: max,
        ack_deadline_ms: 600_000,
        start_offset: 0,
        retry: RetryPolicy {
            min_backoff_ms: 100,
            max_backoff_ms: 1_000,
        },
        max_attempts: None,
        key_ordering: false,
        facts: LeaseFacts {
            first_offset: 0,
            messages: vec![MessageFacts::default(); high_watermark as usize],
        },
    })
}

fn trim(start: u64, before_batch: u64) -> RaftRequest {
    RaftRequest::Trim {
        log_start_offset: start,
        time_index_before: Some(timestamp(before_batch)),
    }
}

/// The leader's log: appends, leases (some acked), trims; each request is built from what the
/// leader answered before it (ack ids name its leases).
struct Leader {
    replica: Replica,
    entries: Vec<RaftRequest>,
    batches: u64,
}

impl Leader {
    fn push(&mut self, request: RaftRequest) -> RaftResponse {
        let response = self.replica.apply(self.entries.len() as u64 + 1, &request);
        self.entries.push(request);
        response
    }

    fn append(&mut self, count: u64) {
        for _ in 0..count {
            let request = append(self.batches);
            self.batches += 1;
            self.push(request);
        }
    }

    /// Leases `max` and acks the first `acked` of them.
    fn lease_and_ack(&mut self, now_ms: i64, max: u32, acked: usize) {
        let high = self.batches * PER_BATCH as u64;
        let token = self.entries.len() as u64 + 1;
        let RaftResponse::Delivery(DeliveryOutcome::Leased { deliveries, .. }) =
            self.push(lease(now_ms, max, high))
        else {
            panic!("not leased");
        };
        assert_eq!(deliveries.len(), max as usize);
        let leases = deliveries[..acked]
            .iter()
            .map(|(offset, attempt)| LeaseRef {
                offset: *offset,
                attempt: *attempt,
                token,
            })
            .collect();
        self.push(RaftRequest::Delivery(DeliveryCommand::Ack {
            subscription: SUB,
            now_ms: now_ms + 1,
            leases,
        }));
    }
}

#[test]
fn a_replica_restored_from_a_checkpoint_replays_to_the_leaders_state() {
    let mut leader = Leader {
        replica: Replica::new(),
        entries: Vec::new(),
        batches: 0,
    };
    leader.append(4);
    leader.lease_and_ack(10_000, 15, 5);
    let stale = leader.entries.len();
    leader.append(2);
    // The checkpoint: the partition starts at 0, next offset 60.
    let checkpoint_index = leader.entries.len();
    let checkpoint = leader.replica.applier.encode_snapshot().unwrap();
    leader.append(3);
    leader.lease_and_ack(20_000, 20, 12);
    leader.push(trim(40, 4));
    leader.append(2);
    leader.lease_and_ack(30_000, 30, 7);
    leader.push(trim(70, 7));
    leader.append(1);
    assert_eq!(
        *leader.replica.applier.watermarks().borrow(),
        super::applier::Watermarks {
            log_start_offset: 70,
            high_watermark: 120
        }
    );

    // A replica that had an older state of its own installs the checkpoint, then replays.
    let mut restored = Replica::new();
    for (position, request) in leader.entries[..stale].iter().enumerate() {
        restored.apply(position as u64 + 1, request);
    }
    restored.install(&checkpoint);
    assert_eq!(
        restored.applier.watermarks().borrow().log_start_offset,
        60,
        "before replay it holds no batch before the checkpoint's next offset"
    );
    for (position, request) in leader.entries.iter().enumerate().skip(checkpoint_index) {
        restored.apply(position as u64 + 1, request);
    }

    assert_eq!(
        *restored.applier.watermarks().borrow(),
        *leader.replica.applier.watermarks().borrow()
    );
    assert_eq!(
        restored.applier.encode_snapshot().unwrap(),
        leader.replica.applier.encode_snapshot().unwrap(),
        "progress, dedup window and subscription state"
    );
    for cf in [Cf::OffsetIndex, Cf::TimeIndex] {
        assert_eq!(restored.rows(cf), leader.replica.rows(cf), "{cf:?} rows");
    }
    assert!(!restored.rows(Cf::OffsetIndex).is_empty());
}
