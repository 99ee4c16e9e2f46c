//! One shared reader per partition for every live stream of this node that is at the tail.
//!
//! Each [`Tail`](super::Tail) follows a partition on its own only while it is behind (catching
//! up from an old offset); at the tail it attaches here. The hub runs one reader per
//! (topic, partition) that has attached subscribers: it long-polls the partition, decodes each
//! read once and broadcasts it, as an `Arc`, to all of them. The broadcast keeps a fixed number
//! of batches: a subscriber that does not keep up is told it lagged and goes back to its own
//! reads, so one slow client never makes the hub hold more. The reader stops when its last
//! subscriber detaches.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

use super::retry::{is_transient, Retry};
use crate::{BrokerError, BrokerResult, ConsumedMessage, FetchResult};

/// How long one read of a partition waits for a message before it asks again.
pub const TAIL_POLL_WAIT: Duration = Duration::from_secs(10);
/// How many reads a shared reader keeps for its subscribers: with reads of at most
/// [`SHARED_READ_BYTES`], what one partition's subscribers can hold up is bounded.
pub const SHARED_READS_KEPT: usize = 64;
/// The most bytes of stored batches one shared read gathers.
pub const SHARED_READ_BYTES: usize = 1 << 20;

/// Who reads: a shared reader of the hub, or one stream on its own (catching up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    Shared,
    Own,
}

impl ReadKind {
    pub fn label(self) -> &'static str {
        match self {
            ReadKind::Shared => "shared",
            ReadKind::Own => "own",
        }
    }
}

/// Where streams read a partition: the broker's fetch (a long poll on the leader), or a log in
/// memory in the hub's tests.
pub trait TailSource: Clone + Send + Sync + 'static {
    /// Messages from `offset`, waiting up to `max_wait` while there are none.
    fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait: Duration,
        kind: ReadKind,
    ) -> impl Future<Output = BrokerResult<FetchResult>> + Send;

    /// This node's hub of shared readers.
    fn hub(&self) -> &TailHub;
}

/// One read of the shared reader: the offsets `[from, to)` it covers (compaction and retention
/// leave offsets without a message) and the messages in them, decoded once.
#[derive(Debug)]
pub struct SharedRead {
    pub from: u64,
    pub to: u64,
    pub messages: Vec<ConsumedMessage>,
}

/// What a shared reader broadcasts.
#[derive(Debug, Clone)]
pub enum Broadcast {
    Read(Arc<SharedRead>),
    /// The reader met an error that lasts (the topic went away); it stops. Subscribers go
    /// back to their own reads, which report the error.
    Stopped,
}

struct ReaderState {
    /// Where the next broadcast read starts.
    position: u64,
    sender: broadcast::Sender<Broadcast>,
    stopped: bool,
}

/// A running shared reader; dropping the last handle stops it.
struct SharedReader {
    state: Arc<Mutex<ReaderState>>,
    task: AbortHandle,
}

impl Drop for SharedReader {
    fn drop(&mut self) {
        self.task.abort();
        metrics::gauge!("herald_tail_shared_readers").decrement(1.0);
    }
}

/// A subscriber's place at a shared reader: it receives every read from `position` on.
pub struct Attachment {
    pub receiver: broadcast::Receiver<Broadcast>,
    pub position: u64,
    _reader: Arc<SharedReader>,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        metrics::gauge!("herald_tail_attached_streams").decrement(1.0);
    }
}

/// The node's shared readers, by (topic, partition).
pub struct TailHub {
    readers: Mutex<HashMap<(String, u32), Weak<SharedReader>>>,
    kept: usize,
}

impl Default for TailHub {
    fn default() -> Self {
        TailHub::new(SHARED_READS_KEPT)
    }
}

impl TailHub {
    /// A hub whose readers keep `kept` reads for their subscribers.
    pub fn new(kept: usize) -> TailHub {
        TailHub {
            readers: Mutex::new(HashMap::new()),
            kept: kept.max(1),
        }
    }

    /// Attaches a stream at `offset` (at or near the partition's end) to the partition's shared
    /// reader, starting one there if none runs. The stream then gets every read from the
    /// attachment's `position`; what lies between its offset and that position it reads itself.
    pub fn attach<S: TailSource>(
        &self,
        source: &S,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Attachment {
        let key = (topic.to_string(), partition);
        let mut readers = self.readers.lock();
        if let Some(reader) = readers.get(&key).and_then(Weak::upgrade) {
            let state = reader.state.lock();
            if !state.stopped {
                let receiver = state.sender.subscribe();
                let position = state.position;
                drop(state);
                metrics::gauge!("herald_tail_attached_streams").increment(1.0);
                return Attachment {
                    receiver,
                    position,
                    _reader: reader,
                };
            }
        }
        readers.retain(|_, reader| reader.strong_count() > 0);
        let (sender, receiver) = broadcast::channel(self.kept);
        let state = Arc::new(Mutex::new(ReaderState {
            position: offset,
            sender,
            stopped: false,
        }));
        let task = tokio::spawn(run_reader(
            source.clone(),
            topic.to_string(),
            partition,
            offset,
            state.clone(),
        ))
        .abort_handle();
        metrics::gauge!("herald_tail_shared_readers").increment(1.0);
        metrics::gauge!("herald_tail_attached_streams").increment(1.0);
        let reader = Arc::new(SharedReader { state, task });
        readers.insert(key, Arc::downgrade(&reader));
        Attachment {
            receiver,
            position: offset,
            _reader: reader,
        }
    }

    /// How many shared readers run.
    pub fn readers(&self) -> usize {
        self.readers
            .lock()
            .values()
            .filter(|reader| reader.strong_count() > 0)
            .count()
    }
}

/// Publishes one read and moves the reader's position past it, atomically with respect to
/// attaching: a stream attaching gets either this read or a position after it.
fn publish(state: &Mutex<ReaderState>, read: SharedRead) {
    let mut state = state.lock();
    state.position = read.to;
    // No receiver right now is fine: streams attach and detach at any time.
    let _ = state.sender.send(Broadcast::Read(Arc::new(read)));
}

/// The shared reader of one partition: follows it from `position` until aborted (its last
/// subscriber left) or an error that lasts.
async fn run_reader<S: TailSource>(
    source: S,
    topic: String,
    partition: u32,
    mut position: u64,
    state: Arc<Mutex<ReaderState>>,
) {
    let mut retry = Retry::new("topic");
    loop {
        let read = source
            .read(
                &topic,
                partition,
                position,
                TAIL_POLL_WAIT,
                ReadKind::Shared,
            )
            .await;
        match read {
            Ok(FetchResult {
                messages,
                next_offset,
                ..
            }) => {
                retry.succeeded();
                let to = position.max(next_offset);
                if to > position {
                    publish(
                        &state,
                        SharedRead {
                            from: position,
                            to,
                            messages,
                        },
                    );
                    position = to;
                }
            }
            Err(BrokerError::OffsetOutOfRange {
                log_start_offset, ..
            }) if position < log_start_offset => {
                // Retention removed messages not yet read: they are gone, as for a stream
                // reading on its own.
                publish(
                    &state,
                    SharedRead {
                        from: position,
                        to: log_start_offset,
                        messages: Vec::new(),
                    },
                );
                position = log_start_offset;
            }
            Err(error)
                if is_transient(&error)
                    || matches!(error, BrokerError::OffsetOutOfRange { .. }) =>
            {
                // A leadership change, or a new leader still applying: ask again, from the
                // same offset, wherever the partition went.
                retry.pause(&error).await;
            }
            Err(error) => {
                tracing::debug!(%topic, partition, %error, "shared tail reader stops");
                let mut state = state.lock();
                state.stopped = true;
                let _ = state.sender.send(Broadcast::Stopped);
                return;
            }
        }
    }
}
