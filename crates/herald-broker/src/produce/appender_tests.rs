//! The appender against a partition log that commits only when the test says so: what a
//! leader whose quorum is gone looks like from the appender. Checks the byte bound, the
//! deadlines (a request expired in the queue is never written), the withdrawal of a dropped
//! request, and the merge caps counted in encoded bytes and records.

use herald_domain::RaftGroupId;
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
use crate::BrokerError;
use herald_domain::batch::{decode_batch, decode_header};
use herald_domain::{Compression, Record, RecordValue};
use herald_raft::{DedupClaim, OnceOutcome, PendingAppend, PendingOnce, RaftLayerError};

/// How long a test waits for something it expects to happen.
const WITHIN: Duration = Duration::from_secs(10);

/// A partition log that records what is proposed, assigns offsets in proposal order (as
/// raft's log does) and commits one append per permit.
struct HeldLog {
    proposed: Mutex<Vec<Bytes>>,
    commits: Semaphore,
    next_offset: AtomicU64,
    /// Tells an `acks=leader` proposal its base offset at once: the leader's own disk is
    /// fast, only the quorum is held.
    early_acks: bool,
}

impl Default for HeldLog {
    /// Commits nothing until [`HeldLog::release`].
    fn default() -> Self {
        HeldLog {
            proposed: Mutex::new(Vec::new()),
            commits: Semaphore::new(0),
            next_offset: AtomicU64::new(0),
            early_acks: false,
        }
    }
}

impl HeldLog {
    fn with_early_acks() -> Self {
        HeldLog {
            early_acks: true,
            ..HeldLog::default()
        }
    }

    /// Logs `batch`; what resolves once a permit lets it commit.
    fn log(
        self: &Arc<Self>,
        batch: &Bytes,
    ) -> (
        u64,
        u32,
        impl std::future::Future<Output = Result<(u64, u32), RaftLayerError>> + Send + 'static,
    ) {
        let span = decode_header(batch).expect("a valid batch").offset_span;
        let base = {
            let mut proposed = self.proposed.lock();
            proposed.push(batch.clone());
            self.next_offset
                .fetch_add(u64::from(span), Ordering::SeqCst)
        };
        let log = self.clone();
        let committed = async move {
            let permit = log
                .commits
                .acquire()
                .await
                .map_err(|_| RaftLayerError::Rejected("closed".into()))?;
            permit.forget();
            Ok((base, span))
        };
        (base, span, committed)
    }

    /// Lets every append so far, and every later one, commit.
    fn release(&self) {
        self.commits.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    /// Lets `count` more appends commit.
    fn release_some(&self, count: usize) {
        self.commits.add_permits(count);
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

    /// The tag of every record proposed, in log order.
    fn logged_tags(&self) -> Vec<u8> {
        self.proposed
            .lock()
            .iter()
            .flat_map(|batch| {
                let (_, records) = decode_batch(batch).expect("a valid batch");
                records
                    .iter()
                    .map(|r| r.value.as_bytes()[0])
                    .collect::<Vec<_>>()
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

/// The log as the appender holds it.
#[derive(Clone)]
struct SharedLog(Arc<HeldLog>);

impl std::ops::Deref for SharedLog {
    type Target = Arc<HeldLog>;

    fn deref(&self) -> &Arc<HeldLog> {
        &self.0
    }
}

impl PartitionLog for SharedLog {
    async fn propose(
        &self,
        batch: Bytes,
        early: Option<oneshot::Sender<u64>>,
    ) -> Result<PendingAppend, RaftLayerError> {
        let (base, _, committed) = self.0.log(&batch);
        if let (Some(early), true) = (early, self.0.early_acks) {
            let _ = early.send(base);
        }
        Ok(Box::pin(committed))
    }

    async fn propose_once_many(&self, appends: Vec<(Bytes, DedupClaim)>) -> PendingOnce {
        let committing: Vec<_> = appends
            .iter()
            .map(|(batch, _)| self.0.log(batch).2)
            .collect();
        Box::pin(async move {
            let mut outcomes = Vec::new();
            for committed in committing {
                outcomes.push(
                    committed
                        .await
                        .map(|(base_offset, _)| OnceOutcome::Appended { base_offset }),
                );
            }
            outcomes
        })
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

/// An appender with one entry in flight at a time.
fn appender(max_queued_bytes: usize) -> Arc<PartitionAppender> {
    Appenders::new(max_queued_bytes, 1).for_group(RaftGroupId::new(1))
}

/// Starts an append in its own task.
fn spawn_append(
    appender: &Arc<PartitionAppender>,
    log: &Arc<HeldLog>,
    request: AppendRequest,
) -> tokio::task::JoinHandle<AppendOutcome> {
    let (appender, log) = (appender.clone(), Arc::new(SharedLog(log.clone())));
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
        .append(
            Arc::new(SharedLog(log.clone())),
            request(records(b'c', 51, 5), far()),
        )
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
        .append(
            Arc::new(SharedLog(log.clone())),
            request(records(b'a', 50, 5), far()),
        )
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
        .append(
            Arc::new(SharedLog(log.clone())),
            request(records(b'c', 1, 5), far()),
        )
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
        .append(
            Arc::new(SharedLog(log.clone())),
            request(records(b'a', 3, 5), soon),
        )
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
    let most = (8 << 20) + 100_000 * herald_domain::record::MAX_DELTA_GROWTH + 100;
    for batch in log.proposed.lock().iter() {
        assert!(batch.len() <= most, "{} bytes", batch.len());
    }
}

/// With several entries in flight, each batch is proposed without waiting for the quorum of
/// the ones before; with every slot taken, requests queue and go out merged; offsets stay
/// contiguous and in request order.
#[tokio::test]
async fn several_entries_are_in_flight_and_offsets_stay_in_request_order() {
    let log = Arc::new(HeldLog::default());
    let appender = Appenders::new(1 << 20, 3)
        .pipelining_everything()
        .for_group(RaftGroupId::new(1));
    let mut handles = Vec::new();
    for (proposed, (tag, count)) in [(b'a', 2), (b'b', 3), (b'c', 4)].into_iter().enumerate() {
        handles.push(spawn_append(
            &appender,
            &log,
            request(records(tag, count, 5), far()),
        ));
        until(
            "proposed while the entries before wait for their quorum",
            || log.proposals() == proposed + 1,
        )
        .await;
    }
    assert_eq!(appender.in_flight(), 3);
    for tag in [b'd', b'e'] {
        handles.push(spawn_append(
            &appender,
            &log,
            request(records(tag, 1, 5), far()),
        ));
    }
    until("every slot is taken: they wait", || appender.waiting() == 2).await;
    assert_eq!(log.proposals(), 3);
    log.release_some(1);
    until("a freed slot takes the queue as one batch", || {
        log.proposals() == 4
    })
    .await;
    log.release();
    let mut bases = Vec::new();
    for handle in handles {
        match answer(handle).await.expect("written") {
            Landing::Appended { base_offset } => bases.push(base_offset),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(bases, [0, 2, 5, 9, 10]);
    assert_eq!(
        log.proposed_tags(),
        [vec![b'a'], vec![b'b'], vec![b'c'], vec![b'd', b'e']]
    );
    until("everything written is released", || {
        appender.held_bytes() == 0 && appender.in_flight() == 0
    })
    .await;
}

/// Hundreds of concurrent requests, a few entries in flight, commits trickling in: every
/// request's records are contiguous, where it was told, and requests are in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_get_contiguous_offsets_in_arrival_order() {
    const REQUESTS: usize = 300;
    let log = Arc::new(HeldLog::default());
    let appender = Appenders::new(usize::MAX, 4).for_group(RaftGroupId::new(1));
    let committer = {
        let log = log.clone();
        tokio::spawn(async move {
            for _ in 0..100_000 {
                log.release_some(1);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    let shared = Arc::new(SharedLog(log.clone()));
    // `join_all` polls each append once, in order, before any other: that is their arrival.
    let appends = (0..REQUESTS).map(|id| {
        let (appender, shared) = (appender.clone(), shared.clone());
        let tag = (id % 250) as u8 + 1;
        async move {
            let count = 1 + id % 7;
            let outcome = appender
                .append(shared, request(records(tag, count, 3), far()))
                .await;
            (tag, count, outcome)
        }
    });
    let answers = tokio::time::timeout(WITHIN, futures::future::join_all(appends))
        .await
        .expect("answered in time");
    committer.abort();
    let logged = log.logged_tags();
    let mut next = 0u64;
    for (tag, count, outcome) in answers {
        let Landing::Appended { base_offset } = outcome.expect("written") else {
            panic!("not appended");
        };
        assert_eq!(base_offset, next, "contiguous, in arrival order");
        let start = base_offset as usize;
        assert_eq!(logged[start..start + count], vec![tag; count]);
        next += count as u64;
    }
    assert_eq!(logged.len() as u64, next, "nothing else was written");
    assert!(
        log.proposals() < REQUESTS,
        "requests queued behind full slots were merged ({} entries)",
        log.proposals()
    );
}

/// `acks=leader` is answered once the leader has its entry durable, even while an earlier
/// entry still waits for its quorum; with a single slot it would wait behind it.
#[tokio::test]
async fn an_acks_leader_request_does_not_wait_behind_an_earlier_quorum() {
    for slots in [4, 1] {
        let log = Arc::new(HeldLog::with_early_acks());
        let appender = Appenders::new(1 << 20, slots).for_group(RaftGroupId::new(1));
        let first = spawn_append(&appender, &log, request(records(b'a', 3, 5), far()));
        until("the first request is proposed", || log.proposals() == 1).await;
        let mut leader_ack = request(records(b'b', 2, 5), far());
        leader_ack.leader_ack = true;
        let second = spawn_append(&appender, &log, leader_ack);
        if slots > 1 {
            assert_eq!(
                answer(second).await.expect("written"),
                Landing::Appended { base_offset: 3 }
            );
            assert!(!first.is_finished(), "the first still waits for its quorum");
            log.release();
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!second.is_finished(), "one slot: it waits behind the first");
            log.release();
            assert_eq!(
                answer(second).await.expect("written"),
                Landing::Appended { base_offset: 3 }
            );
        }
        assert_eq!(
            answer(first).await.expect("written"),
            Landing::Appended { base_offset: 0 }
        );
    }
}

/// The byte bound counts entries in flight: with every slot taken by unanswered entries, a
/// request past the bound is refused at once.
#[tokio::test]
async fn the_byte_bound_counts_entries_in_flight() {
    let log = Arc::new(HeldLog::default());
    let appender = Appenders::new(100, 4)
        .pipelining_everything()
        .for_group(RaftGroupId::new(1));
    let mut in_flight = Vec::new();
    for (proposed, tag) in [b'a', b'b'].into_iter().enumerate() {
        in_flight.push(spawn_append(
            &appender,
            &log,
            request(records(tag, 5, 5), far()),
        ));
        until("proposed", || log.proposals() == proposed + 1).await;
    }
    assert_eq!(appender.held_bytes(), 100);
    let refused = appender
        .append(
            Arc::new(SharedLog(log.clone())),
            request(records(b'c', 1, 5), far()),
        )
        .await;
    assert!(
        matches!(refused, Err(BrokerError::Overloaded(_))),
        "{refused:?}"
    );
    log.release();
    for handle in in_flight {
        answer(handle).await.expect("written");
    }
    until("released", || appender.held_bytes() == 0).await;
}

/// With entries in flight, a small run waits for one of them to be answered and goes out
/// merged (single messages do not become many tiny entries), while a run of at least
/// `PIPELINE_MIN_BYTES` is proposed at once.
#[tokio::test]
async fn small_runs_wait_for_an_answer_while_large_ones_are_pipelined() {
    let log = Arc::new(HeldLog::default());
    let appender = Appenders::new(usize::MAX, 4).for_group(RaftGroupId::new(1));
    let first = spawn_append(&appender, &log, request(records(b'a', 1, 5), far()));
    until("the first request is proposed", || log.proposals() == 1).await;
    let small =
        [b'b', b'c'].map(|tag| spawn_append(&appender, &log, request(records(tag, 1, 5), far())));
    until("the small ones wait", || appender.waiting() == 2).await;
    // That nothing is proposed can only be seen by giving the drain time to do it wrongly.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        log.proposals(),
        1,
        "no entry of its own while the first is in flight"
    );

    // A large request arrives: what waits is large enough now, and goes at once.
    let value_len = super::appender::PIPELINE_MIN_BYTES / 10;
    let large = spawn_append(
        &appender,
        &log,
        request(records(b'd', 10, value_len), far()),
    );
    until("the waiting run is proposed with the large one", || {
        log.proposals() == 2
    })
    .await;
    assert_eq!(log.proposed_tags()[1], vec![b'b', b'c', b'd']);
    assert_eq!(appender.in_flight(), 2);
    log.release();
    for handle in [first, large].into_iter().chain(small) {
        assert!(matches!(answer(handle).await, Ok(Landing::Appended { .. })));
    }

    // Once nothing is in flight, a small request goes at once.
    let alone = spawn_append(&appender, &log, request(records(b'e', 1, 5), far()));
    until("proposed at once", || log.proposals() == 3).await;
    log.release();
    assert!(matches!(answer(alone).await, Ok(Landing::Appended { .. })));
}
