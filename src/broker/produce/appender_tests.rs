//! The appender against a partition log that commits only when the test says so: what a
//! leader whose quorum is gone looks like from the appender. Checks the byte bound, the
//! deadlines (a request expired in the queue is never written), the withdrawal of a dropped
//! request, and the merge caps counted in encoded bytes and records.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Semaphore};
use tokio::time::Instant;

use super::appender::{AppendOutcome, AppendRequest, Appenders, PartitionAppender};
use super::appender_writes::PartitionLog;
use super::idempotence::Landing;
use crate::broker::BrokerError;
use crate::domain::batch::{decode_batch, decode_header};
use crate::domain::{Compression, Record, RecordValue};
use crate::raft::{DedupClaim, OnceOutcome, RaftLayerError};

/// How long a test waits for something it expects to happen.
const WITHIN: Duration = Duration::from_secs(10);

/// A partition log that records what is proposed and commits one append per permit.
struct HeldLog {
    proposed: Mutex<Vec<Bytes>>,
    commits: Semaphore,
    next_offset: AtomicU64,
}

impl Default for HeldLog {
    /// Commits nothing until [`HeldLog::release`].
    fn default() -> Self {
        HeldLog {
            proposed: Mutex::new(Vec::new()),
            commits: Semaphore::new(0),
            next_offset: AtomicU64::new(0),
        }
    }
}

impl HeldLog {
    async fn commit(&self, batch: &Bytes) -> Result<(u64, u32), RaftLayerError> {
        self.proposed.lock().push(batch.clone());
        let permit = self
            .commits
            .acquire()
            .await
            .map_err(|_| RaftLayerError::Rejected("closed".into()))?;
        permit.forget();
        let span = decode_header(batch).expect("a valid batch").offset_span;
        let base = self
            .next_offset
            .fetch_add(u64::from(span), Ordering::SeqCst);
        Ok((base, span))
    }

    /// Lets every append so far, and every later one, commit.
    fn release(&self) {
        self.commits.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    fn proposals(&self) -> usize {
        self.proposed.lock().len()
    }

    /// The tags of every record proposed, batch by batch.
    fn proposed_tags(&self) -> Vec<Vec<u8>> {
        self.proposed
            .lock()
            .iter()
            .map(|batch| {
                let (_, records) = decode_batch(batch).expect("a valid batch");
                let mut tags: Vec<u8> = records.iter().map(|r| r.value.as_bytes()[0]).collect();
                tags.dedup();
                tags
            })
            .collect()
    }

    /// How many records each proposed batch holds.
    fn proposed_counts(&self) -> Vec<u32> {
        self.proposed
            .lock()
            .iter()
            .map(|batch| decode_header(batch).expect("a valid batch").record_count)
            .collect()
    }
}

impl PartitionLog for HeldLog {
    async fn append(&self, batch: Bytes) -> Result<(u64, u32), RaftLayerError> {
        self.commit(&batch).await
    }

    async fn append_early(
        &self,
        batch: Bytes,
        _early: oneshot::Sender<u64>,
    ) -> Result<(u64, u32), RaftLayerError> {
        self.commit(&batch).await
    }

    async fn append_once_many(
        &self,
        appends: Vec<(Bytes, DedupClaim)>,
    ) -> Vec<Result<OnceOutcome, RaftLayerError>> {
        let mut outcomes = Vec::new();
        for (batch, _) in appends {
            outcomes.push(
                self.commit(&batch)
                    .await
                    .map(|(base_offset, _)| OnceOutcome::Appended { base_offset }),
            );
        }
        outcomes
    }
}

/// `count` records tagged `tag` (their value's first byte), each taking `value_len + 5` bytes
/// encoded (for a value shorter than 128 bytes).
fn records(tag: u8, count: usize, value_len: usize) -> Vec<Record> {
    (0..count)
        .map(|_| Record {
            offset_delta: 0,
            timestamp: 1,
            key: None,
            value: RecordValue::Bytes(Bytes::from(vec![tag; value_len.max(1)])),
            headers: Vec::new(),
        })
        .collect()
}

fn request(records: Vec<Record>, deadline: Instant) -> AppendRequest {
    AppendRequest {
        records,
        stored: None,
        compression: Compression::None,
        leader_ack: false,
        once: None,
        deadline,
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn appender(max_queued_bytes: usize) -> Arc<PartitionAppender> {
    Appenders::new(max_queued_bytes).for_group(1)
}

/// Starts an append in its own task.
fn spawn_append(
    appender: &Arc<PartitionAppender>,
    log: &Arc<HeldLog>,
    request: AppendRequest,
) -> tokio::task::JoinHandle<AppendOutcome> {
    let (appender, log) = (appender.clone(), log.clone());
    tokio::spawn(async move { appender.append(log, request).await })
}

/// Waits until `condition` holds, or fails after [`WITHIN`].
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {WITHIN:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn answer(handle: tokio::task::JoinHandle<AppendOutcome>) -> AppendOutcome {
    tokio::time::timeout(WITHIN, handle)
        .await
        .expect("answered in time")
        .expect("the append task did not panic")
}

#[tokio::test]
async fn past_the_bound_a_request_is_refused_at_once() {
    let log = Arc::new(HeldLog::default());
    let appender = appender(1000);
    // 10 records of 10 encoded bytes: proposed, and never committed until released.
    let first = spawn_append(&appender, &log, request(records(b'a', 10, 5), far()));
    until("the first request is proposed", || log.proposals() == 1).await;
    let second = spawn_append(&appender, &log, request(records(b'b', 40, 5), far()));
    until("the second request waits", || appender.waiting() == 1).await;
    assert_eq!(appender.held_bytes(), 500, "proposed and waiting, encoded");

    let started = Instant::now();
    let refused = appender
        .append(log.clone(), request(records(b'c', 51, 5), far()))
        .await;
    assert!(
        matches!(refused, Err(BrokerError::Overloaded(_))),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    assert_eq!(
        appender.held_bytes(),
        500,
        "a refused request holds nothing"
    );

    // Exactly up to the bound still fits.
    let third = spawn_append(&appender, &log, request(records(b'd', 50, 5), far()));
    until("the third request waits", || appender.waiting() == 2).await;
    log.release();
    assert_eq!(
        answer(first).await.expect("written"),
        Landing::Appended { base_offset: 0 }
    );
    assert_eq!(
        answer(second).await.expect("written"),
        Landing::Appended { base_offset: 10 }
    );
    assert_eq!(
        answer(third).await.expect("written"),
        Landing::Appended { base_offset: 50 }
    );
    assert_eq!(log.proposed_tags(), [vec![b'a'], vec![b'b', b'd']]);
    until("everything written is released", || {
        appender.held_bytes() == 0
    })
    .await;
}

#[tokio::test]
async fn a_request_larger_than_the_bound_goes_when_nothing_is_held() {
    let log = Arc::new(HeldLog::default());
    log.release();
    let appender = appender(100);
    let outcome = appender
        .append(log.clone(), request(records(b'a', 50, 5), far()))
        .await;
    assert_eq!(
        outcome.expect("written"),
        Landing::Appended { base_offset: 0 }
    );
}

#[tokio::test]
async fn a_request_whose_deadline_passes_while_queued_is_never_written() {
    let log = Arc::new(HeldLog::default());
    let appender = appender(1 << 20);
    let first = spawn_append(&appender, &log, request(records(b'a', 3, 5), far()));
    until("the first request is proposed", || log.proposals() == 1).await;
    let soon = Instant::now() + Duration::from_millis(100);
    let expired = spawn_append(&appender, &log, request(records(b'b', 3, 5), soon));
    let outcome = answer(expired).await;
    assert!(
        matches!(&outcome, Err(BrokerError::Unavailable(detail)) if detail.contains("not written")),
        "{outcome:?}"
    );
    assert!(Instant::now() >= soon);
    assert_eq!(appender.waiting(), 0, "taken out of the queue");
    assert_eq!(
        appender.held_bytes(),
        30,
        "only the proposed request is held"
    );

    // The quorum comes back: the proposed request is written, the expired one never is.
    log.release();
    answer(first).await.expect("written");
    let later = appender
        .append(log.clone(), request(records(b'c', 1, 5), far()))
        .await;
    assert_eq!(
        later.expect("written"),
        Landing::Appended { base_offset: 3 }
    );
    assert_eq!(log.proposed_tags(), [vec![b'a'], vec![b'c']]);
}

#[tokio::test]
async fn a_request_proposed_before_its_deadline_has_an_unknown_outcome() {
    let log = Arc::new(HeldLog::default());
    let appender = appender(1 << 20);
    let soon = Instant::now() + Duration::from_millis(100);
    let outcome = appender
        .append(log.clone(), request(records(b'a', 3, 5), soon))
        .await;
    assert!(
        matches!(&outcome, Err(BrokerError::Timeout(detail)) if detail.contains("may still be written")),
        "{outcome:?}"
    );
    assert_eq!(log.proposals(), 1);
}

#[tokio::test]
async fn a_dropped_request_leaves_the_queue_and_is_never_written() {
    let log = Arc::new(HeldLog::default());
    let appender = appender(1 << 20);
    let first = spawn_append(&appender, &log, request(records(b'a', 3, 5), far()));
    until("the first request is proposed", || log.proposals() == 1).await;
    let dropped = spawn_append(&appender, &log, request(records(b'b', 3, 5), far()));
    until("the second request waits", || appender.waiting() == 1).await;
    // The client went away: its produce is dropped with everything it awaited.
    dropped.abort();
    until("the dropped request is taken out", || {
        appender.waiting() == 0
    })
    .await;
    assert_eq!(appender.held_bytes(), 30);
    log.release();
    answer(first).await.expect("written");
    until("the appender is idle", || appender.held_bytes() == 0).await;
    assert_eq!(log.proposed_tags(), [vec![b'a']]);
}

/// Records with no bytes of their own still take their framing, and a batch's record count
/// is capped: requests of empty records and of empty headers are not merged without bound.
#[tokio::test]
async fn merged_batches_stay_within_the_record_and_encoded_byte_caps() {
    let log = Arc::new(HeldLog::default());
    let appender = appender(usize::MAX);
    let blocker = spawn_append(&appender, &log, request(records(b'x', 1, 1), far()));
    until("the blocker is proposed", || log.proposals() == 1).await;

    // Three requests of 60,000 one-byte records: 100,000 records at most per batch.
    let mut waiting = Vec::new();
    for tag in [b'a', b'b', b'c'] {
        waiting.push(spawn_append(
            &appender,
            &log,
            request(records(tag, 60_000, 1), far()),
        ));
    }
    // Three requests of 2,500 records with 1,000 empty headers each (2,007 bytes encoded
    // for one value byte): 5 MB each, 8 MiB at most per batch.
    for tag in [b'd', b'e', b'f'] {
        let mut heavy = records(tag, 2_500, 1);
        for record in &mut heavy {
            record.headers = vec![(String::new(), String::new()); 1_000];
        }
        waiting.push(spawn_append(&appender, &log, request(heavy, far())));
    }
    until("every request waits", || appender.waiting() == 6).await;
    log.release();
    answer(blocker).await.expect("written");
    for handle in waiting {
        answer(handle).await.expect("written");
    }
    assert_eq!(
        log.proposed_tags(),
        [
            vec![b'x'],
            vec![b'a'],
            vec![b'b'],
            vec![b'c', b'd'],
            vec![b'e'],
            vec![b'f']
        ]
    );
    assert_eq!(
        log.proposed_counts(),
        [1, 60_000, 60_000, 62_500, 2_500, 2_500]
    );
    // Within the cap, give or take the deltas' growth past the first record.
    let most = (8 << 20) + 100_000 * crate::domain::record::MAX_DELTA_GROWTH + 100;
    for batch in log.proposed.lock().iter() {
        assert!(batch.len() <= most, "{} bytes", batch.len());
    }
}
