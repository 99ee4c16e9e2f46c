//! Pipelined AppendEntries: a leader keeps several AppendEntries of one (group, follower) in
//! flight over the internal RPC instead of one at a time, so replicating a partition is not
//! one network and fsync round trip per request.
//!
//! **Sender** ([`pipeline`]): openraft hands the network a stream of requests for a follower
//! and reads the answers from the stream returned, in the same order. The first request of a
//! stream goes alone (it is often a probe, or a heartbeat, which is a stream of one); once it
//! is answered, up to [`MAX_PIPELINED`] requests are in flight, each tagged with the stream's
//! id and its sequence number, and their answers are yielded in order. The first failure or
//! refusal (a conflict, a higher vote) ends the stream; openraft then starts a new one where
//! the follower's log really ends.
//!
//! **Receiver** ([`Sequencer`]): the RPC server runs concurrent requests in tasks of their
//! own, so two requests of a stream may reach the follower's raft in the wrong order. The
//! sequencer hands request `n` of a stream to raft only after request `n - 1` was handed over
//! (queued in raft's core, not answered), so the follower appends them in order. Order is not
//! what makes raft safe (a request whose `prev_log_id` the follower lacks is refused as a
//! conflict and the leader starts over), only what keeps the pipeline full.

use herald_domain::RaftGroupId;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt};
use openraft::errors::RPCError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::types::{LogId, TypeConfig};

/// The most AppendEntries of one stream in flight at once (each carries at most
/// `MAX_REPLICATION_BYTES`).
pub const MAX_PIPELINED: usize = 8;

/// Counter of AppendEntries a leader sent to its followers, labelled `sent` = `alone` (nothing
/// else of its stream in flight) or `pipelined` (sent while earlier ones were).
pub const APPENDS_SENT_TOTAL: &str = "herald_raft_appends_sent_total";

/// Stream ids: unique within a process, and, starting from the clock, unlikely to repeat
/// those of the same node's previous run.
fn next_stream_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    if NEXT.load(Ordering::Relaxed) == 0 {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_nanos() as u64)
            .unwrap_or(1)
            .max(1);
        let _ = NEXT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Where a request sits in its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamPosition {
    pub stream: u64,
    pub seq: u64,
}

type Answer = Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>>;
type InFlight = Pin<Box<dyn Future<Output = (Option<LogId>, Option<LogId>, Answer)> + Send>>;

/// Sends one request of a stream; what the sender needs from the network.
pub trait SendAppend: Send + 'static {
    fn send_append(
        &self,
        position: StreamPosition,
        request: AppendEntriesRequest<TypeConfig>,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send>>;
}

struct Pipeline<N, S> {
    network: N,
    input: S,
    stream: u64,
    next_seq: u64,
    in_flight: FuturesOrdered<InFlight>,
    input_done: bool,
    finished: bool,
}

/// The answers to `input`'s requests, in order, with up to [`MAX_PIPELINED`] in flight (see
/// the module doc).
pub fn pipeline<N, S>(
    network: N,
    input: S,
) -> impl Stream<Item = Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> + Send
where
    N: SendAppend,
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    let pipeline = Pipeline {
        network,
        input,
        stream: next_stream_id(),
        next_seq: 0,
        in_flight: FuturesOrdered::new(),
        input_done: false,
        finished: false,
    };
    futures::stream::unfold(pipeline, |mut pipeline| async move {
        let item = pipeline.next().await?;
        Some((item, pipeline))
    })
}

impl<N, S> Pipeline<N, S>
where
    N: SendAppend,
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    /// Whether another request may be sent now: the first alone, then up to the window.
    fn may_send(&self) -> bool {
        !self.input_done
            && (self.in_flight.is_empty()
                || (self.next_seq > 1 && self.in_flight.len() < MAX_PIPELINED))
    }

    async fn next(
        &mut self,
    ) -> Option<Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> {
        if self.finished {
            return None;
        }
        loop {
            if self.in_flight.is_empty() && self.input_done {
                return None;
            }
            let may_send = self.may_send();
            tokio::select! {
                biased;
                Some((prev, last, answer)) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    return Some(self.answered(prev, last, answer));
                }
                request = self.input.next(), if may_send => match request {
                    Some(request) => self.send(request),
                    None => self.input_done = true,
                },
            }
        }
    }

    fn send(&mut self, request: AppendEntriesRequest<TypeConfig>) {
        let sent = if self.in_flight.is_empty() {
            "alone"
        } else {
            "pipelined"
        };
        metrics::counter!(APPENDS_SENT_TOTAL, "sent" => sent).increment(1);
        let position = StreamPosition {
            stream: self.stream,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        let prev = request.prev_log_id;
        let last = request.entries.last().map(|entry| entry.log_id).or(prev);
        let answer = self.network.send_append(position, request);
        self.in_flight
            .push_back(Box::pin(async move { (prev, last, answer.await) }));
    }

    /// One answer, in order; a failure or refusal ends the stream, and so does a partial
    /// success (the follower took less than was sent: what follows would not fit on its log).
    fn answered(
        &mut self,
        prev: Option<LogId>,
        last: Option<LogId>,
        answer: Answer,
    ) -> Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>> {
        match answer {
            Ok(response) => {
                let partial = match &response {
                    AppendEntriesResponse::PartialSuccess(upto) => *upto != last,
                    _ => false,
                };
                let result = response.into_stream_result(prev, last);
                if result.is_err() || partial {
                    self.finish();
                }
                Ok(result)
            }
            Err(error) => {
                self.finish();
                Err(error)
            }
        }
    }

    /// Ends the stream: requests still in flight are dropped (their calls cancelled).
    fn finish(&mut self) {
        self.finished = true;
        self.in_flight = FuturesOrdered::new();
    }
}

/// The receiver's order of requests: one session per (sender, group), for the sender's
/// latest stream (see the module doc).
///
/// A session lives as long as its stream, however long that stream stays idle: a group whose
/// writes stopped (a quiet group above all) keeps its leader's stream open for hours, and its
/// next request must find the session where it was. (Sessions used to be forgotten after 30 s
/// idle; the next request then waited for predecessors handed over long before, until the
/// sender's 10 s timeout.) The sender's next stream replaces the session, so there is one per
/// (sender, group); sessions of groups this node no longer hosts are dropped by
/// [`Sequencer::forget_groups`].
pub struct Sequencer {
    sessions: Mutex<Sessions>,
    /// When the sweep of departed groups is next due, in ms from `epoch`: checked without the
    /// lock, since it is asked on every pipelined request.
    next_sweep_ms: AtomicU64,
    epoch: Instant,
}

impl Default for Sequencer {
    fn default() -> Self {
        Sequencer {
            sessions: Mutex::default(),
            next_sweep_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

#[derive(Default)]
struct Sessions {
    by_sender: HashMap<(u64, RaftGroupId), Session>,
}

struct Session {
    stream: u64,
    /// The sequence number of the next request to hand to raft.
    next: u64,
    /// Requests that arrived before their turn: woken when it comes.
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

/// How often sessions of groups that left this node are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Why a request was not handed to raft.
#[derive(Debug, thiserror::Error)]
pub enum OutOfTurn {
    #[error("append {seq} of stream {stream} came after its stream moved past it")]
    Stale { stream: u64, seq: u64 },
    #[error("append {seq} of stream {stream}: the one before it never came")]
    Missing { stream: u64, seq: u64 },
}

impl Sequencer {
    /// Runs `append` (which queues the request in raft's core on its first poll, then waits
    /// for the answer) for request `position` of `from`'s stream for `group`, once the one
    /// before it was queued; waits at most `patience` for that.
    pub async fn in_turn<F, T>(
        &self,
        from: u64,
        group: RaftGroupId,
        position: StreamPosition,
        patience: Duration,
        append: F,
    ) -> Result<T, OutOfTurn>
    where
        F: Future<Output = T>,
    {
        let StreamPosition { stream, seq } = position;
        let key = (from, group);
        if seq == 0 {
            // The first request of a stream goes alone: nothing to wait for.
            return Ok(append.await);
        }
        let turn = {
            let mut sessions = self.sessions.lock();
            let session = sessions.by_sender.entry(key).or_insert_with(|| Session {
                stream,
                next: 1,
                waiting: BTreeMap::new(),
            });
            if stream != session.stream {
                // The sender's next stream: the earlier one ended before it started, and its
                // requests still waiting are refused (their wakers are dropped). Not ordered
                // by id: a sender that restarts with its clock set back starts lower.
                *session = Session {
                    stream,
                    next: 1,
                    waiting: BTreeMap::new(),
                };
            }
            if seq < session.next {
                return Err(OutOfTurn::Stale { stream, seq });
            }
            (seq > session.next).then(|| {
                let (wake, turn) = oneshot::channel();
                session.waiting.insert(seq, wake);
                turn
            })
        };
        if let Some(turn) = turn {
            match tokio::time::timeout(patience, turn).await {
                Ok(Ok(())) => {}
                _ => return Err(OutOfTurn::Missing { stream, seq }),
            }
        }
        // Our turn: whatever happens from here, the next request gets its turn.
        let next = NextTurn {
            sequencer: self,
            key,
            stream,
            seq,
        };
        let mut append = std::pin::pin!(append);
        // The first poll queues the request in raft's core.
        if let Poll::Ready(answer) = futures::poll!(append.as_mut()) {
            return Ok(answer);
        }
        drop(next);
        Ok(append.await)
    }

    /// Drops the sessions of groups `hosted` says this node no longer has (at most once a
    /// minute; cheap to call on every request).
    pub fn forget_groups(&self, hosted: impl Fn(RaftGroupId) -> bool) {
        self.forget_groups_at(Instant::now(), hosted);
    }

    fn forget_groups_at(&self, now: Instant, hosted: impl Fn(RaftGroupId) -> bool) {
        let now_ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        let due_ms = self.next_sweep_ms.load(Ordering::Relaxed);
        let next_ms = now_ms + SWEEP_EVERY.as_millis() as u64;
        if now_ms < due_ms
            || self
                .next_sweep_ms
                .compare_exchange(due_ms, next_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            // Not due, or another request sweeps now.
            return;
        }
        self.sessions
            .lock()
            .by_sender
            .retain(|(_, group), _| hosted(*group));
    }

    /// Streams with a session now (for tests).
    #[cfg(test)]
    pub fn sessions(&self) -> usize {
        self.sessions.lock().by_sender.len()
    }
}

/// Gives the next request of a stream its turn when dropped.
struct NextTurn<'a> {
    sequencer: &'a Sequencer,
    key: (u64, RaftGroupId),
    stream: u64,
    seq: u64,
}

impl Drop for NextTurn<'_> {
    fn drop(&mut self) {
        let mut sessions = self.sequencer.sessions.lock();
        if let Some(session) = sessions.by_sender.get_mut(&self.key) {
            if session.stream != self.stream {
                return;
            }
            if session.next <= self.seq {
                session.next = self.seq + 1;
            }
            if let Some(wake) = session.waiting.remove(&(self.seq + 1)) {
                let _ = wake.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;

    /// Requests arriving in any order reach the inner call in sequence order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn requests_are_handed_over_in_sequence_order() {
        let sequencer = Arc::new(Sequencer::default());
        let handed = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for seq in (1..=20u64).rev() {
            let (sequencer, handed) = (sequencer.clone(), handed.clone());
            tasks.push(tokio::spawn(async move {
                let position = StreamPosition { stream: 7, seq };
                sequencer
                    .in_turn(
                        1,
                        RaftGroupId::new(2),
                        position,
                        Duration::from_secs(10),
                        async move {
                            handed.lock().push(seq);
                            // Answered later than queued: the next may go meanwhile.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            seq
                        },
                    )
                    .await
            }));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for task in tasks {
            task.await.expect("no panic").expect("in turn");
        }
        assert_eq!(*handed.lock(), (1..=20).collect::<Vec<_>>());
    }

    /// A request whose predecessor never comes gives up after its patience; a stale one is
    /// refused at once.
    #[tokio::test]
    async fn a_missing_predecessor_and_a_stale_request_are_refused() {
        let sequencer = Sequencer::default();
        let calls = AtomicUsize::new(0);
        let position = StreamPosition { stream: 9, seq: 3 };
        let missing = sequencer
            .in_turn(
                1,
                RaftGroupId::new(2),
                position,
                Duration::from_millis(50),
                async {
                    calls.fetch_add(1, Ordering::SeqCst);
                },
            )
            .await;
        assert!(
            matches!(missing, Err(OutOfTurn::Missing { .. })),
            "{missing:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0, "never handed over");
        for seq in [1, 2] {
            let position = StreamPosition { stream: 9, seq };
            sequencer
                .in_turn(
                    1,
                    RaftGroupId::new(2),
                    position,
                    Duration::from_secs(1),
                    async {},
                )
                .await
                .expect("in turn");
        }
        let stale = sequencer
            .in_turn(
                1,
                RaftGroupId::new(2),
                StreamPosition { stream: 9, seq: 1 },
                Duration::from_secs(1),
                async {},
            )
            .await;
        assert!(matches!(stale, Err(OutOfTurn::Stale { .. })), "{stale:?}");
        assert_eq!(sequencer.sessions(), 1);
    }

    async fn hand(
        sequencer: &Sequencer,
        group: u64,
        stream: u64,
        seq: u64,
        patience: Duration,
    ) -> Result<u64, OutOfTurn> {
        sequencer
            .in_turn(
                1,
                RaftGroupId::new(group),
                StreamPosition { stream, seq },
                patience,
                async move { seq },
            )
            .await
    }

    /// A stream idle for an hour (a quiet group's) still hands its next request over at once:
    /// its session was kept. (Forgetting it made that request wait for its predecessors, handed
    /// over an hour before, until the sender timed out.)
    #[tokio::test]
    async fn a_long_idle_stream_goes_on_where_it_was() {
        let sequencer = Sequencer::default();
        for seq in 1..=3 {
            hand(&sequencer, 2, 9, seq, Duration::from_secs(1))
                .await
                .expect("in turn");
        }
        // An hour later, as the sweep sees it.
        sequencer.forget_groups_at(Instant::now() + Duration::from_secs(3600), |_| true);
        let next = hand(&sequencer, 2, 9, 4, Duration::from_millis(1)).await;
        assert_eq!(next.expect("handed over at once"), 4);
        assert_eq!(sequencer.sessions(), 1);
    }

    /// The sender's next stream replaces its session: what still waited in the earlier one is
    /// refused at once, and the new stream starts from its first pipelined request.
    #[tokio::test]
    async fn a_new_stream_replaces_the_senders_earlier_one() {
        let sequencer = Arc::new(Sequencer::default());
        hand(&sequencer, 2, 9, 1, Duration::from_secs(1))
            .await
            .expect("in turn");
        let waiting = tokio::spawn({
            let sequencer = sequencer.clone();
            async move { hand(&sequencer, 2, 9, 3, Duration::from_secs(30)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A later stream, even with a lower id (a sender restarted with its clock set back).
        hand(&sequencer, 2, 5, 1, Duration::from_secs(1))
            .await
            .expect("the new stream's first");
        let refused = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("refused at once, not after its patience")
            .expect("no panic");
        assert!(
            matches!(refused, Err(OutOfTurn::Missing { .. })),
            "{refused:?}"
        );
        hand(&sequencer, 2, 5, 2, Duration::from_millis(100))
            .await
            .expect("in turn");
        // Another group and another sender have sessions of their own.
        hand(&sequencer, 3, 5, 1, Duration::from_secs(1))
            .await
            .expect("in turn");
        assert_eq!(sequencer.sessions(), 2);
    }

    /// Sessions of groups the node no longer hosts are dropped.
    #[tokio::test]
    async fn sessions_of_departed_groups_are_dropped() {
        let sequencer = Sequencer::default();
        for group in [2, 3, 4] {
            hand(&sequencer, group, 9, 1, Duration::from_secs(1))
                .await
                .expect("in turn");
        }
        sequencer.forget_groups(|group| group != RaftGroupId::new(3));
        assert_eq!(sequencer.sessions(), 2);
    }
}
