//! Compaction on real RocksDB, through the partition applier as raft would drive it: what a
//! pass keeps, and that every replica ends with the same bytes whatever it received.

use herald_domain::RaftGroupId;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use bytes::Bytes;
use openraft::EntryPayload;

use super::applier::PartitionApplier;
use super::cleaner_state::{self, CleanerState};
use super::compaction::{self, CleanContext, PassEnd};
use super::compaction_plan::{self, PlanSettings};
use super::reader::{self, ReadLimits};
use super::throttle::Throttle;
use crate::engine::codec;
use crate::engine::state_machine::GroupApplier;
use crate::engine::types::{CompactionPlan, Entry, RaftRequest, RaftResponse, TypeConfig};
use herald_domain::batch::{self, Compression, ProducerStamp};
use herald_domain::record::{Record, RecordKey, RecordValue};
use herald_storage::{keys, Cf, Store, StoreOptions, WriteSet};

const GROUP: RaftGroupId = RaftGroupId::new(7);

/// One replica's storage and state machine, driven entry by entry.
struct TestReplica {
    _dir: tempfile::TempDir,
    store: Store,
    applier: PartitionApplier,
    next_index: u64,
    throttle: Mutex<Throttle>,
    closing: AtomicBool,
    log_lock: Mutex<()>,
}

impl TestReplica {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreOptions::new(dir.path())).unwrap();
        TestReplica {
            _dir: dir,
            store,
            applier: PartitionApplier::new(GROUP),
            next_index: 1,
            throttle: Mutex::new(Throttle::new(u64::MAX / 2)),
            closing: AtomicBool::new(false),
            log_lock: Mutex::new(()),
        }
    }

    fn context(&self) -> CleanContext<'_> {
        CleanContext {
            store: &self.store,
            group: GROUP,
            throttle: &self.throttle,
            closing: &self.closing,
            log_lock: &self.log_lock,
        }
    }

    /// Stores `entry` in the raft log and applies it, as raft does once it is committed.
    fn commit(&mut self, entry: Entry) -> Option<RaftResponse> {
        let mut writes = WriteSet::new();
        writes.put(
            Cf::RaftLog,
            keys::group_u64(GROUP, entry.log_id.index).to_vec(),
            codec::encode_entry(&entry).unwrap(),
        );
        let response = match &entry.payload {
            EntryPayload::Normal(request) => {
                Some(self.applier.apply(entry.log_id.index, request, &mut writes))
            }
            _ => None,
        };
        self.store.write(writes, false).unwrap();
        self.applier.publish();
        self.next_index = entry.log_id.index + 1;
        response
    }

    fn propose(&mut self, request: RaftRequest) -> RaftResponse {
        let entry = Entry {
            log_id: openraft::testing::log_id::<TypeConfig>(1, 1, self.next_index),
            payload: EntryPayload::Normal(request),
        };
        self.commit(entry).unwrap()
    }

    /// Appends one batch of `(key, value)` messages (`None`: a tombstone) at `timestamp`.
    fn append(&mut self, messages: &[(&str, Option<&str>)], timestamp: i64) -> u64 {
        let records: Vec<Record> = messages
            .iter()
            .enumerate()
            .map(|(delta, (key, value))| Record {
                offset_delta: delta as u32,
                timestamp,
                key: Some(RecordKey::Text(key.to_string())),
                value: RecordValue::Json(Bytes::from(match value {
                    Some(text) => format!("\"{text}\""),
                    None => "null".to_string(),
                })),
                headers: Vec::new(),
            })
            .collect();
        let bytes = batch::encode_batch(&records, Compression::Lz4, ProducerStamp::NONE).unwrap();
        match self.propose(RaftRequest::Append { batch: bytes }) {
            RaftResponse::Appended { base_offset, .. } => base_offset,
            other => panic!("append answered {other:?}"),
        }
    }

    fn compact(&mut self, plan: CompactionPlan) -> RaftResponse {
        self.propose(RaftRequest::Compact(plan))
    }

    /// Runs every queued pass to the end.
    fn run_passes(&self) -> usize {
        let mut passes = 0;
        while let Some(pass) = cleaner_state::next_queued(&self.store, GROUP).unwrap() {
            let state = cleaner_state::load(&self.store, GROUP).unwrap();
            let start = self.applier.watermarks().borrow().log_start_offset;
            match compaction::run_pass(&self.context(), &pass, start, None, state).unwrap() {
                PassEnd::Finished(_) => passes += 1,
                PassEnd::Interrupted => panic!("pass interrupted"),
            }
        }
        passes
    }

    /// Every message left, as `offset -> (key, value text)`.
    fn messages(&self) -> BTreeMap<u64, (String, String)> {
        let watermarks = *self.applier.watermarks().borrow();
        let limits = ReadLimits {
            max_records: usize::MAX,
            max_bytes: usize::MAX,
        };
        let batches = reader::read_batches(
            &self.store,
            GROUP,
            watermarks.log_start_offset,
            watermarks.high_watermark,
            limits,
        )
        .unwrap();
        let mut messages = BTreeMap::new();
        for stored in batches {
            let (_, records) = batch::decode_batch(&stored.bytes).unwrap();
            for record in records {
                let key = String::from_utf8(record.key.unwrap().as_bytes().to_vec()).unwrap();
                let value = String::from_utf8(record.value.as_bytes().to_vec()).unwrap();
                messages.insert(
                    stored.base_offset + u64::from(record.offset_delta),
                    (key, value),
                );
            }
        }
        messages
    }

    /// Every stored key and value of the group in `cf`.
    fn dump(&self, cf: Cf) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        self.store
            .scan(
                cf,
                &keys::group_start(GROUP),
                &keys::group_end(GROUP),
                |key, value| {
                    all.push((key.to_vec(), value.to_vec()));
                    Ok(true)
                },
            )
            .unwrap();
        all
    }

    fn entries(&self) -> Vec<Entry> {
        self.dump(Cf::RaftLog)
            .iter()
            .map(|(_, value)| codec::decode_entry(value).unwrap())
            .collect()
    }

    fn plan(&self, now_ms: i64, delete_retention_ms: i64) -> Option<CompactionPlan> {
        self.plan_with_map(now_ms, delete_retention_ms)
            .map(|(plan, _)| plan)
    }

    /// The plan, with the key map the leader built for it.
    fn plan_with_map(
        &self,
        now_ms: i64,
        delete_retention_ms: i64,
    ) -> Option<(CompactionPlan, compaction::KeyMap)> {
        let watermarks = *self.applier.watermarks().borrow();
        let progress = self.applier.compaction().borrow().clone();
        let cleaner: CleanerState = cleaner_state::load(&self.store, GROUP).unwrap();
        let settings = PlanSettings {
            now_ms,
            delete_retention_ms,
            min_compaction_lag_ms: 0,
            min_dirty_ratio: 0.5,
            map_budget: 64 << 20,
        };
        compaction_plan::plan(&self.context(), watermarks, &progress, &cleaner, settings)
            .unwrap()
            .plan
    }
}

fn text(value: &str) -> String {
    format!("\"{value}\"")
}

#[test]
fn a_pass_keeps_the_latest_value_of_each_key_at_its_offset() {
    let mut replica = TestReplica::new();
    // Offsets 0..=2, 3..=5, 6..=7, then the active tail at 8.
    replica.append(
        &[("a", Some("a1")), ("b", Some("b1")), ("c", Some("c1"))],
        10,
    );
    replica.append(&[("a", Some("a2")), ("b", None), ("d", Some("d1"))], 20);
    replica.append(&[("a", Some("a3")), ("c", Some("c2"))], 30);
    replica.append(&[("a", Some("a4"))], 40);

    let plan = replica.plan(1_000, 86_400_000).expect("a pass is due");
    assert_eq!(
        (plan.clean_end, plan.end),
        (0, 8),
        "the newest batch is the active tail"
    );
    assert_eq!(
        replica.compact(plan),
        RaftResponse::CompactionQueued { pass: 1 }
    );
    assert_eq!(replica.run_passes(), 1);

    let expected: BTreeMap<u64, (String, String)> = [
        (4, ("b", "null".to_string())),
        (5, ("d", text("d1"))),
        (6, ("a", text("a3"))),
        (7, ("c", text("c2"))),
        (8, ("a", text("a4"))),
    ]
    .into_iter()
    .map(|(offset, (key, value))| (offset, (key.to_string(), value)))
    .collect();
    assert_eq!(replica.messages(), expected);
    // The first batch lost every message but still holds its offsets: the log goes on.
    let watermarks = *replica.applier.watermarks().borrow();
    assert_eq!(watermarks.high_watermark, 9);
    assert_eq!(replica.append(&[("e", Some("e1"))], 50), 9);
}

#[test]
fn tombstones_go_once_delete_retention_passed_since_first_cleaned() {
    let mut replica = TestReplica::new();
    replica.append(&[("a", Some("a1")), ("b", Some("b1"))], 10);
    replica.append(&[("a", None)], 20);
    replica.append(&[("c", Some("c1"))], 30);
    let first = replica.plan(1_000, 500).expect("dirty");
    replica.compact(first);
    replica.run_passes();
    let after_first: Vec<u64> = replica.messages().keys().copied().collect();
    assert_eq!(
        after_first,
        vec![1, 2, 3],
        "the tombstone of a stays for now"
    );

    // Nothing new was written: only the tombstone makes a pass due, and only once
    // delete_retention_ms has passed since the pass that first cleaned it.
    assert_eq!(replica.plan(1_400, 500), None);
    let second = replica.plan(1_600, 500).expect("the tombstone is due");
    assert_eq!(second.tombstone_horizon, 3);
    replica.compact(second);
    replica.run_passes();
    let left: Vec<(u64, String)> = replica
        .messages()
        .into_iter()
        .map(|(offset, (key, _))| (offset, key))
        .collect();
    assert_eq!(left, vec![(1, "b".to_string()), (3, "c".to_string())]);
    assert_eq!(replica.plan(5_000, 500), None, "nothing left to do");
}

#[test]
fn a_stale_plan_is_refused_and_changes_nothing() {
    let mut replica = TestReplica::new();
    replica.append(&[("a", Some("a1"))], 10);
    replica.append(&[("a", Some("a2"))], 20);
    let plan = replica.plan(1_000, 1).unwrap();
    replica.compact(plan);
    let again = replica.compact(plan);
    assert!(matches!(again, RaftResponse::Rejected(_)), "{again:?}");
    let beyond = replica.compact(CompactionPlan {
        clean_end: plan.end,
        end: 1_000,
        tombstone_horizon: 0,
        planned_at_ms: 0,
    });
    assert!(matches!(beyond, RaftResponse::Rejected(_)), "{beyond:?}");
    assert_eq!(replica.run_passes(), 1);
}

/// The property every replica relies on: a replica that received entries its leader had
/// already compacted, and runs the same passes on them, ends with the same bytes as the
/// leader; and running a pass again changes nothing.
#[test]
fn replicas_end_identical_whether_they_received_compacted_entries_or_not() {
    let mut leader = TestReplica::new();
    let mut raw_follower = TestReplica::new();
    let keys = ["k0", "k1", "k2", "k3", "k4", "k5", "k6"];
    let mut round = 0;
    let write_round = |replicas: &mut [&mut TestReplica], round: &mut i64| {
        for batch in 0..6 {
            let messages: Vec<(&str, Option<String>)> = (0..5)
                .map(|slot| {
                    let key = keys[(batch * 3 + slot + *round as usize) % keys.len()];
                    let value = (slot + batch) % 4 != 0;
                    (key, value.then(|| format!("{key}-{round}-{batch}-{slot}")))
                })
                .collect();
            let borrowed: Vec<(&str, Option<&str>)> = messages
                .iter()
                .map(|(key, value)| (*key, value.as_deref()))
                .collect();
            for replica in replicas.iter_mut() {
                replica.append(&borrowed, *round * 100 + batch as i64);
            }
        }
        *round += 1;
    };
    for now in [1_000, 2_000, 3_000] {
        write_round(&mut [&mut leader, &mut raw_follower], &mut round);
        let plan = leader.plan(now, 1_500).expect("a pass is due");
        leader.compact(plan);
        raw_follower.compact(plan);
        leader.run_passes();
    }
    raw_follower.run_passes();
    let left = leader.messages().len();
    assert!(
        left <= keys.len() * 2 && left > 0,
        "{left} of 90 messages left"
    );

    // A follower that was behind gets the leader's log as it is now: partly compacted.
    let mut late_follower = TestReplica::new();
    let compacted_entries = leader
        .entries()
        .iter()
        .filter(|entry| match &entry.payload {
            EntryPayload::Normal(RaftRequest::Append { batch }) => {
                batch::decode_header(batch).unwrap().compacted
            }
            _ => false,
        })
        .count();
    assert!(
        compacted_entries >= 10,
        "{compacted_entries} compacted entries"
    );
    for entry in leader.entries() {
        late_follower.commit(entry);
    }
    late_follower.run_passes();

    for follower in [&raw_follower, &late_follower] {
        assert_eq!(follower.messages(), leader.messages());
        for cf in [Cf::RaftLog, Cf::OffsetIndex, Cf::TimeIndex] {
            assert!(follower.dump(cf) == leader.dump(cf), "{cf:?} differs");
        }
    }
    // Running a finished pass again is a no-op.
    let before = leader.dump(Cf::RaftLog);
    let pass = cleaner_state::QueuedPass {
        pass: 99,
        dirty_start: 0,
        end: leader.applier.compaction().borrow().clean_end,
        tombstone_horizon: 0,
    };
    let state = cleaner_state::load(&leader.store, GROUP).unwrap();
    compaction::run_pass(&leader.context(), &pass, 0, None, state).unwrap();
    assert!(leader.dump(Cf::RaftLog) == before);
}

#[test]
fn a_closing_group_stops_its_pass_and_stores_nothing() {
    let mut replica = TestReplica::new();
    for round in 0..4 {
        replica.append(&[("a", Some(&format!("a{round}")))], round);
    }
    let plan = replica.plan(1_000, 1).unwrap();
    replica.compact(plan);
    let before = replica.dump(Cf::RaftLog);
    replica
        .closing
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let pass = cleaner_state::next_queued(&replica.store, GROUP)
        .unwrap()
        .unwrap();
    let state = cleaner_state::load(&replica.store, GROUP).unwrap();
    let ended = compaction::run_pass(&replica.context(), &pass, 0, None, state).unwrap();
    assert!(matches!(ended, PassEnd::Interrupted));
    assert!(replica.dump(Cf::RaftLog) == before);
    assert!(cleaner_state::next_queued(&replica.store, GROUP)
        .unwrap()
        .is_some());
}

/// A pass stopped part way (a shutdown, or a crash after its last checkpoint) resumes from its
/// checkpoint and ends exactly as an uninterrupted one.
#[test]
fn an_interrupted_pass_resumes_from_its_checkpoint_and_ends_the_same() {
    // Values that do not compress, so the batches really are ~5 KB each.
    let noise = |seed: u64| -> String {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..32)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                format!("{:016x}", state >> 1)
            })
            .collect()
    };
    let fill = |replica: &mut TestReplica| {
        for round in 0..40 {
            let messages: Vec<(String, Option<String>)> = (0..10)
                .map(|key| (format!("k{key}"), Some(noise(round * 10 + key))))
                .collect();
            let borrowed: Vec<(&str, Option<&str>)> = messages
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_deref()))
                .collect();
            replica.append(&borrowed, round as i64);
        }
        let (plan, map) = replica.plan_with_map(1_000, 1).expect("dirty");
        replica.compact(plan);
        map
    };
    let mut uninterrupted = TestReplica::new();
    fill(&mut uninterrupted);
    uninterrupted.run_passes();

    // About 200 KB read and some written at 64 KiB/s: the pass takes seconds; stop it as soon
    // as it has stored its first checkpoint (every 500 ms), well before its end.
    let mut replica = TestReplica::new();
    let map = fill(&mut replica);
    *replica.throttle.lock().unwrap() = Throttle::new(64 << 10);
    let pass = cleaner_state::next_queued(&replica.store, GROUP)
        .unwrap()
        .unwrap();
    // The leader's own map: the pass reads the log once, rewriting as it goes.
    let ended = std::thread::scope(|scope| {
        scope.spawn(|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while cleaner_state::load(&replica.store, GROUP)
                .unwrap()
                .checkpoint
                .is_none()
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the pass stored no checkpoint within a minute"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            replica
                .closing
                .store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let state = cleaner_state::load(&replica.store, GROUP).unwrap();
        compaction::run_pass(&replica.context(), &pass, 0, Some(map), state).unwrap()
    });
    assert!(
        matches!(ended, PassEnd::Interrupted),
        "the pass was not stopped"
    );
    let checkpoint = cleaner_state::load(&replica.store, GROUP)
        .unwrap()
        .checkpoint
        .expect("a checkpoint was stored");
    assert_eq!(checkpoint.pass, pass.pass);
    assert!(checkpoint.next_offset > 0 && checkpoint.next_offset < pass.end);

    replica
        .closing
        .store(false, std::sync::atomic::Ordering::Relaxed);
    *replica.throttle.lock().unwrap() = Throttle::new(u64::MAX / 2);
    assert_eq!(replica.run_passes(), 1);
    assert_eq!(replica.messages(), uninterrupted.messages());
    assert!(replica.dump(Cf::RaftLog) == uninterrupted.dump(Cf::RaftLog));
    assert_eq!(
        cleaner_state::load(&replica.store, GROUP).unwrap().cleaned,
        cleaner_state::load(&uninterrupted.store, GROUP)
            .unwrap()
            .cleaned,
        "the resumed pass counted what the first part kept"
    );
}
