//! The hub and followers against a log in memory: order, catching up then attaching, lagging
//! then catching up again without a gap or a repeat, and the shared reader stopping with its
//! last subscriber.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::follow::{follow_partition, BatchSender};
use super::hub::{ReadKind, TailHub, TailSource};
use crate::{BrokerError, BrokerResult, ConsumedMessage, FetchResult};
use herald_domain::record::RecordValue;

const DEADLINE: Duration = Duration::from_secs(20);

/// A single partition's log in memory with the broker's read semantics (long poll, out of
/// range past the end), counting reads by kind.
#[derive(Clone)]
struct MemoryLog {
    messages: Arc<Mutex<Vec<ConsumedMessage>>>,
    length: watch::Sender<u64>,
    shared_reads: Arc<AtomicU64>,
    own_reads: Arc<AtomicU64>,
    hub: Arc<TailHub>,
    max_messages: usize,
    /// The topic is gone: every read fails for good.
    deleted: Arc<std::sync::atomic::AtomicBool>,
}

impl MemoryLog {
    fn new(kept: usize, max_messages: usize) -> MemoryLog {
        MemoryLog {
            messages: Arc::default(),
            length: watch::channel(0).0,
            shared_reads: Arc::default(),
            own_reads: Arc::default(),
            hub: Arc::new(TailHub::new(kept)),
            max_messages,
            deleted: Arc::default(),
        }
    }

    fn append(&self, count: usize) {
        let mut messages = self.messages.lock();
        for _ in 0..count {
            let offset = messages.len() as u64;
            messages.push(ConsumedMessage {
                partition: 0,
                offset,
                timestamp: 0,
                key: None,
                value: RecordValue::Json(Bytes::from(offset.to_string())),
                headers: Vec::new(),
            });
        }
        self.length.send_replace(messages.len() as u64);
    }

    fn reads(&self, kind: ReadKind) -> u64 {
        match kind {
            ReadKind::Shared => self.shared_reads.load(Ordering::SeqCst),
            ReadKind::Own => self.own_reads.load(Ordering::SeqCst),
        }
    }
}

impl TailSource for MemoryLog {
    async fn read(
        &self,
        _topic: &str,
        _partition: u32,
        offset: u64,
        max_wait: Duration,
        kind: ReadKind,
    ) -> BrokerResult<FetchResult> {
        match kind {
            ReadKind::Shared => self.shared_reads.fetch_add(1, Ordering::SeqCst),
            ReadKind::Own => self.own_reads.fetch_add(1, Ordering::SeqCst),
        };
        if self.deleted.load(Ordering::SeqCst) {
            return Err(BrokerError::TopicNotFound("t".into()));
        }
        let end = *self.length.borrow();
        if offset > end {
            return Err(BrokerError::OffsetOutOfRange {
                offset,
                log_start_offset: 0,
                high_watermark: end,
            });
        }
        if offset == end && !max_wait.is_zero() {
            let mut length = self.length.subscribe();
            let _ = tokio::time::timeout(max_wait, length.wait_for(|&len| len > offset)).await;
            if self.deleted.load(Ordering::SeqCst) {
                return Err(BrokerError::TopicNotFound("t".into()));
            }
        }
        let messages = self.messages.lock();
        let taken: Vec<ConsumedMessage> = messages
            .iter()
            .skip(offset as usize)
            .take(self.max_messages)
            .cloned()
            .collect();
        Ok(FetchResult {
            topic: "t".into(),
            next_offset: offset + taken.len() as u64,
            messages: taken,
            high_watermark: messages.len() as u64,
            log_start_offset: 0,
        })
    }

    fn hub(&self) -> &TailHub {
        &self.hub
    }
}

type Batches = mpsc::Receiver<BrokerResult<(u32, Vec<ConsumedMessage>)>>;

fn follower(log: &MemoryLog, from: u64, room: usize, tasks: &mut JoinSet<()>) -> Batches {
    let (sender, receiver): (BatchSender, Batches) = mpsc::channel(room);
    tasks.spawn(follow_partition(log.clone(), "t".into(), 0, from, sender));
    receiver
}

/// Receives until `count` messages came; asserts they are exactly the offsets from `first` on.
async fn expect_offsets(batches: &mut Batches, first: u64, count: u64) {
    let mut next = first;
    while next < first + count {
        let batch = tokio::time::timeout(DEADLINE, batches.recv())
            .await
            .expect("a batch within the deadline")
            .expect("the follower runs")
            .expect("no error");
        for message in batch.1 {
            assert_eq!(message.offset, next, "offsets must be contiguous");
            next += 1;
        }
    }
    assert_eq!(next, first + count, "more messages than appended");
}

/// Appends `count` messages and waits until the shared reader has read them: one shared read
/// per append (the reader is back in its next long poll before the following append).
async fn append_read_by_the_shared_reader(log: &MemoryLog, count: usize) {
    let shared = log.reads(ReadKind::Shared);
    log.append(count);
    until("the shared reader read it", || {
        log.reads(ReadKind::Shared) > shared
    })
    .await;
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn many_followers_at_the_tail_share_one_reader_and_get_every_message_in_order() {
    let log = MemoryLog::new(64, 50);
    let mut tasks = JoinSet::new();
    let mut followers: Vec<Batches> = (0..20).map(|_| follower(&log, 0, 4, &mut tasks)).collect();
    until("all attached", || log.reads(ReadKind::Own) >= 20).await;
    until("one shared reader", || log.hub.readers() == 1).await;
    let own_before = log.reads(ReadKind::Own);
    for _ in 0..30 {
        append_read_by_the_shared_reader(&log, 7).await;
    }
    for batches in &mut followers {
        expect_offsets(batches, 0, 210).await;
    }
    assert_eq!(log.hub.readers(), 1);
    // One reader's worth of reads, not one per follower.
    let shared = log.reads(ReadKind::Shared);
    assert!(shared <= 40, "{shared} shared reads for 30 appends");
    assert_eq!(
        log.reads(ReadKind::Own),
        own_before,
        "attached followers read on their own"
    );
}

#[tokio::test]
async fn a_follower_from_the_start_catches_up_on_its_own_then_attaches() {
    let log = MemoryLog::new(64, 50);
    log.append(1_000);
    let mut tasks = JoinSet::new();
    let mut at_tail = follower(&log, 1_000, 4, &mut tasks);
    until("the tail follower attached", || log.hub.readers() == 1).await;
    let mut from_start = follower(&log, 0, 4, &mut tasks);
    expect_offsets(&mut from_start, 0, 1_000).await;
    until("caught up", || log.reads(ReadKind::Own) >= 21).await;
    let own_after_catch_up = log.reads(ReadKind::Own);
    for _ in 0..10 {
        append_read_by_the_shared_reader(&log, 10).await;
    }
    expect_offsets(&mut from_start, 1_000, 100).await;
    expect_offsets(&mut at_tail, 1_000, 100).await;
    assert_eq!(log.hub.readers(), 1);
    // A read or two to close the gap to the shared reader, then none of its own.
    assert!(log.reads(ReadKind::Own) <= own_after_catch_up + 2);
}

#[tokio::test]
async fn a_follower_that_lags_detaches_and_catches_up_without_gap_or_repeat() {
    // The hub keeps 2 reads; the slow follower's channel holds 1 batch.
    let log = MemoryLog::new(2, 5);
    let mut tasks = JoinSet::new();
    let mut fast = follower(&log, 0, 1_000, &mut tasks);
    let mut slow = follower(&log, 0, 1, &mut tasks);
    until("both attached", || log.reads(ReadKind::Own) >= 2).await;
    until("one shared reader", || log.hub.readers() == 1).await;
    for _ in 0..40 {
        // Each append is its own shared read, so the broadcast runs far past the 2 reads it
        // keeps.
        append_read_by_the_shared_reader(&log, 5).await;
    }
    expect_offsets(&mut fast, 0, 200).await;
    let own_before_reading = log.reads(ReadKind::Own);
    expect_offsets(&mut slow, 0, 200).await;
    assert!(
        log.reads(ReadKind::Own) > own_before_reading,
        "the slow follower read on its own after it lagged"
    );
    // It attaches again and follows new messages from the shared reader.
    log.append(5);
    expect_offsets(&mut slow, 200, 5).await;
    expect_offsets(&mut fast, 200, 5).await;
}

#[tokio::test]
async fn the_shared_reader_stops_when_its_last_subscriber_leaves() {
    let log = MemoryLog::new(8, 50);
    let mut tasks = JoinSet::new();
    let _a = follower(&log, 0, 4, &mut tasks);
    let _b = follower(&log, 0, 4, &mut tasks);
    until("one shared reader", || log.hub.readers() == 1).await;
    tasks.shutdown().await;
    assert_eq!(log.hub.readers(), 0);
    // A reader at the tail always waits in a long poll on the log: none waits any more.
    until("no read waits on the log", || {
        log.length.receiver_count() == 0
    })
    .await;
    let shared = log.reads(ReadKind::Shared);
    log.append(3);
    tokio::task::yield_now().await;
    assert_eq!(
        log.reads(ReadKind::Shared),
        shared,
        "a stopped reader reads nothing"
    );
}

#[tokio::test]
async fn a_lasting_error_stops_the_shared_reader_and_reaches_every_stream() {
    let log = MemoryLog::new(8, 50);
    let mut tasks = JoinSet::new();
    let mut followers: Vec<Batches> = (0..3).map(|_| follower(&log, 0, 4, &mut tasks)).collect();
    until("one shared reader", || log.hub.readers() == 1).await;
    log.deleted.store(true, Ordering::SeqCst);
    // Wakes the shared reader's long poll, which now fails.
    log.append(1);
    for batches in &mut followers {
        let answer = tokio::time::timeout(DEADLINE, batches.recv())
            .await
            .expect("an answer within the deadline")
            .expect("the error comes before the channel closes");
        assert!(matches!(answer, Err(BrokerError::TopicNotFound(_))));
    }
    tasks.shutdown().await;
    assert_eq!(log.hub.readers(), 0);
}
