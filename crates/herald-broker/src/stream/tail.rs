//! A subscriber's reader of a topic's partitions: one follower per partition reads the log
//! through the broker's fetch (the long poll woken by apply, on whichever node leads the
//! partition) while behind, then takes the partition's shared reads from the node's
//! [`TailHub`], and hands batches to the subscriber in order per partition. The channel between
//! them is bounded, so a subscriber that does not read stops its follower (which lags and
//! detaches from the hub) instead of piling up messages.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::follow::follow_partition;
use super::hub::{ReadKind, TailHub, TailSource, SHARED_READ_BYTES};
use super::retry::{is_transient, Retry};
use super::{Positions, StartFrom};
use crate::broker_core::Core;
use crate::memory::{StreamKind, StreamMemory};
use crate::{
    BrokerError, BrokerResult, ConsumedMessage, FetchRequest, FetchResult, FetchService, OffsetSpec,
};

/// The most messages one read hands over.
const TAIL_BATCH_MESSAGES: usize = 500;
/// How many times opening a stream asks a partition without a leader where it starts.
const START_ATTEMPTS: u32 = 20;

/// One message and the resume token right after it.
#[derive(Debug, Clone)]
pub struct TailItem {
    pub message: ConsumedMessage,
    /// Hand it back (`from`) to continue after this message, in every partition of the stream.
    pub resume: String,
}

/// A live reader of some partitions of a topic; dropping it stops its reads.
pub struct Tail {
    topic: String,
    positions: Positions,
    batches: mpsc::Receiver<BrokerResult<(u32, Vec<ConsumedMessage>)>>,
    _readers: JoinSet<()>,
}

impl Tail {
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Where the stream stands: its resume token before any message is delivered.
    pub fn positions(&self) -> &Positions {
        &self.positions
    }

    /// The next messages of one partition, each with its resume token; `None` never comes
    /// while the readers run (they stop only on a lasting error, which comes as `Err`).
    pub async fn next_batch(&mut self) -> Option<BrokerResult<Vec<TailItem>>> {
        let (partition, messages) = match self.batches.recv().await? {
            Ok(batch) => batch,
            Err(error) => return Some(Err(error)),
        };
        let items = messages
            .into_iter()
            .map(|message| {
                self.positions.set(partition, message.offset + 1);
                TailItem {
                    message,
                    resume: self.positions.to_string(),
                }
            })
            .collect();
        Some(Ok(items))
    }
}

impl TailSource for StreamService {
    async fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait: Duration,
        kind: ReadKind,
    ) -> BrokerResult<FetchResult> {
        metrics::counter!("herald_tail_reads_total", "kind" => kind.label()).increment(1);
        let request = FetchRequest {
            topic: topic.to_string(),
            partition,
            offset: OffsetSpec::At(offset),
            max_messages: TAIL_BATCH_MESSAGES,
            max_wait,
        };
        match kind {
            // What the hub keeps for slow subscribers is bounded by its reads' size.
            ReadKind::Shared => self.fetch.fetch_within(request, SHARED_READ_BYTES).await,
            ReadKind::Own => self.fetch.fetch(request).await,
        }
    }

    fn hub(&self) -> &TailHub {
        &self.tail_hub
    }
}

/// Live streams at the tails of partitions, for every push transport. Owns the node's
/// [`TailHub`], whose shared reads serve every stream at a partition's tail, and counts push
/// subscriptions against the node's memory budget.
#[derive(Clone)]
pub struct StreamService {
    core: Arc<Core>,
    fetch: FetchService,
    tail_hub: Arc<TailHub>,
}

impl StreamService {
    pub(crate) fn new(core: Arc<Core>, fetch: FetchService) -> StreamService {
        StreamService {
            core,
            fetch,
            tail_hub: Arc::new(TailHub::default()),
        }
    }

    /// Counts a new push subscription of `kind` against the node's memory budget.
    pub fn reserve_stream_memory(&self, kind: StreamKind) -> BrokerResult<StreamMemory> {
        self.core.memory.reserve_stream(kind.estimated_bytes())
    }

    /// Opens a live reader of `topic` (one partition or all), each partition starting at
    /// `from`. Refuses an unknown topic or partition and a token naming a partition outside the
    /// stream; a partition that has no leader is asked again for a few seconds.
    pub async fn open_tail(
        &self,
        topic: &str,
        partition: Option<u32>,
        from: StartFrom,
    ) -> BrokerResult<Tail> {
        let partitions: Vec<u32> = {
            let meta = self.core.topic(topic)?;
            match partition {
                Some(partition) => {
                    self.core.assignment(&meta, partition)?;
                    vec![partition]
                }
                None => (0..meta.partitions.len() as u32).collect(),
            }
        };
        if let StartFrom::Positions(token) = &from {
            if let Some(outside) = token.partitions().find(|p| !partitions.contains(p)) {
                return Err(BrokerError::InvalidRequest(format!(
                    "the resume token names partition {outside}, which is not part of this stream of topic '{topic}'"
                )));
            }
        }
        let mut positions = Positions::default();
        for &partition in &partitions {
            let offset = self.start_offset(topic, partition, &from).await?;
            positions.set(partition, offset);
        }
        let (sender, batches) = mpsc::channel(partitions.len().clamp(1, 64));
        let mut readers = JoinSet::new();
        for &partition in &partitions {
            let start = positions.get(partition).unwrap_or(0);
            readers.spawn(follow_partition(
                self.clone(),
                topic.to_string(),
                partition,
                start,
                sender.clone(),
            ));
        }
        Ok(Tail {
            topic: topic.to_string(),
            positions,
            batches,
            _readers: readers,
        })
    }

    /// The offset `from` means in one partition, asking again while it has no leader.
    async fn start_offset(
        &self,
        topic: &str,
        partition: u32,
        from: &StartFrom,
    ) -> BrokerResult<u64> {
        let mut retry = Retry::new("topic");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let answer = match from {
                StartFrom::Offset(offset) => return Ok(*offset),
                StartFrom::Positions(token) => match token.get(partition) {
                    Some(offset) => return Ok(offset),
                    None => self
                        .watermarks(topic, partition)
                        .await
                        .map(|(start, _)| start),
                },
                StartFrom::Earliest => self
                    .watermarks(topic, partition)
                    .await
                    .map(|(start, _)| start),
                StartFrom::Latest => self.watermarks(topic, partition).await.map(|(_, end)| end),
                StartFrom::Timestamp(ms) => {
                    self.fetch.offset_for_timestamp(topic, partition, *ms).await
                }
            };
            match answer {
                Err(error) if is_transient(&error) && attempt < START_ATTEMPTS => {
                    retry.pause(&error).await;
                }
                answer => return answer,
            }
        }
    }

    /// A partition's log start offset and high watermark.
    async fn watermarks(&self, topic: &str, partition: u32) -> BrokerResult<(u64, u64)> {
        let read = self
            .fetch
            .fetch(FetchRequest {
                topic: topic.to_string(),
                partition,
                offset: OffsetSpec::Latest,
                max_messages: 1,
                max_wait: Duration::ZERO,
            })
            .await?;
        Ok((read.log_start_offset, read.high_watermark))
    }
}
