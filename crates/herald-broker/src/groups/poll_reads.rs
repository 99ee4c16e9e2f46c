//! The reads of one group poll: where each partition starts, reading the partitions within
//! one byte budget, and choosing what the answer delivers.
//!
//! The budget is the node's `fetch_max_bytes`, shared by every partition of the poll: each
//! partition reads at most an even share of it (its first batch whatever the size, so a poll
//! always progresses), at most [`READS_IN_FLIGHT`] partitions are read at once and no new
//! read starts once the messages gathered fill the budget, and the answer stops before the
//! message that would overflow it (unless it is the first). So a member with many partitions
//! gets one budget's worth per poll, not one per partition.

use crate::GroupService;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::{
    BrokerError, BrokerResult, ConsumedMessage, FetchRequest, FetchResult, GroupMessage, OffsetSpec,
};
use herald_domain::groups::{OffsetReset, OffsetSwap, TopicPartition};

/// The most partitions of one poll read at the same time.
const READS_IN_FLIGHT: usize = 16;

/// Which partition a poll reads first, turning from poll to poll so that when the budget runs
/// out, it is not always the same partitions that wait.
static FIRST_READ: AtomicUsize = AtomicUsize::new(0);

/// Where one assigned partition's read starts.
#[derive(Debug, Clone)]
pub(super) struct PartitionPlan {
    pub partition: TopicPartition,
    /// The committed offset as this node had it when the poll began: what the poll's
    /// compare-and-commit expects.
    pub committed: Option<u64>,
    /// The cursor's position, when the cursor speaks for this partition and is past the
    /// committed offset.
    pub cursor: Option<u64>,
}

impl PartitionPlan {
    /// Where the poll resumes, if that is known without the reset policy.
    pub fn resume_at(&self) -> Option<u64> {
        self.cursor.or(self.committed)
    }
}

/// What a poll knows before it reads.
pub(super) struct PollPlan {
    pub reset: OffsetReset,
    pub partitions: Vec<PartitionPlan>,
}

/// One partition's read.
pub(super) struct PartitionRead {
    pub partition: TopicPartition,
    pub committed: Option<u64>,
    /// Where the read started.
    pub start: u64,
    /// Whether the reset policy chose `start` (no committed offset, or it fell off the log):
    /// the poll records it as the committed offset, so the next poll does not choose again.
    pub reset: bool,
    pub result: FetchResult,
}

/// What an answer delivers of one partition read, and where the member continues there.
pub(super) struct PartitionDelivery {
    pub partition: TopicPartition,
    pub committed: Option<u64>,
    pub reset_start: Option<u64>,
    /// The next offset to read after what the answer holds.
    pub next: u64,
    pub delivered: bool,
}

impl PartitionDelivery {
    /// The compare-and-commit this partition needs: the reset policy's start (recorded once),
    /// or with auto-commit what was delivered.
    pub fn swap(&self, auto_commit: bool) -> Option<OffsetSwap> {
        let offset = match (auto_commit && self.delivered, self.reset_start) {
            (true, _) => self.next,
            (false, Some(start)) => start,
            (false, None) => return None,
        };
        Some(OffsetSwap {
            partition: self.partition.clone(),
            expected: self.committed,
            offset,
        })
    }
}

/// The bytes a message adds to an answer: its key, value and headers.
pub(super) fn message_bytes(message: &ConsumedMessage) -> usize {
    message.key.as_ref().map_or(0, |key| key.as_bytes().len())
        + message.value.as_bytes().len()
        + message
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum::<usize>()
}

impl GroupService {
    /// The poll's byte budget.
    pub(super) fn poll_budget(&self) -> usize {
        self.core.options.fetch_max_bytes.max(1)
    }

    /// Reads the planned partitions without waiting, within the poll's budget; partitions
    /// not read (the budget filled first) are absent from the answer.
    pub(super) async fn read_planned(
        &self,
        plan: &PollPlan,
        max_messages: usize,
    ) -> BrokerResult<Vec<PartitionRead>> {
        let count = plan.partitions.len().max(1);
        let budget = self.poll_budget();
        let (share_messages, share_bytes) =
            (max_messages.div_ceil(count).max(1), (budget / count).max(1));
        let first = FIRST_READ.fetch_add(1, Ordering::Relaxed) % count;
        let mut order =
            (0..plan.partitions.len()).map(|index| &plan.partitions[(first + index) % count]);
        let mut in_flight = FuturesUnordered::new();
        let mut reads = Vec::with_capacity(plan.partitions.len());
        let (mut gathered_bytes, mut gathered_messages) = (0usize, 0usize);
        loop {
            while in_flight.len() < READS_IN_FLIGHT
                && gathered_bytes < budget
                && gathered_messages < max_messages
            {
                let Some(partition) = order.next() else { break };
                in_flight.push(self.read_from(partition, plan.reset, share_messages, share_bytes));
            }
            let Some(read) = in_flight.next().await else {
                break;
            };
            let read = read?;
            gathered_messages += read.result.messages.len();
            gathered_bytes += read
                .result
                .messages
                .iter()
                .map(message_bytes)
                .sum::<usize>();
            reads.push(read);
        }
        Ok(reads)
    }

    /// One partition from the cursor's position, else the committed offset, else where the
    /// reset policy says; a start outside the log (retention removed it, or a recreated
    /// topic is shorter) falls to the next.
    async fn read_from(
        &self,
        plan: &PartitionPlan,
        reset: OffsetReset,
        max_messages: usize,
        max_bytes: usize,
    ) -> BrokerResult<PartitionRead> {
        let fetch = |offset| FetchRequest {
            topic: plan.partition.topic.clone(),
            partition: plan.partition.partition,
            offset,
            max_messages,
            max_wait: Duration::ZERO,
        };
        let read = |start, reset, result| PartitionRead {
            partition: plan.partition.clone(),
            committed: plan.committed,
            start,
            reset,
            result,
        };
        for start in [plan.cursor, plan.committed].into_iter().flatten() {
            match self
                .fetch
                .fetch_within(fetch(OffsetSpec::At(start)), max_bytes)
                .await
            {
                Ok(result) => return Ok(read(start, false, result)),
                Err(BrokerError::OffsetOutOfRange { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let spec = match reset {
            OffsetReset::Earliest => OffsetSpec::Earliest,
            OffsetReset::Latest => OffsetSpec::Latest,
        };
        let result = self.fetch.fetch_within(fetch(spec), max_bytes).await?;
        let start = result
            .messages
            .first()
            .map_or(result.next_offset, |message| message.offset);
        Ok(read(start, true, result))
    }

    /// When every read was empty: a long poll of all of them, from where each ended, that
    /// answers the first partition to get a message (None at the deadline). Their starts
    /// are recorded by now, so each read expects its start as the committed offset.
    pub(super) async fn long_poll(
        &self,
        reads: &[PartitionRead],
        max_messages: usize,
        wait: Duration,
    ) -> BrokerResult<Option<PartitionRead>> {
        let count = reads.len().max(1);
        let (share_messages, share_bytes) = (
            max_messages.div_ceil(count).max(1),
            (self.poll_budget() / count).max(1),
        );
        let mut waiting: FuturesUnordered<_> = reads
            .iter()
            .map(|first| async move {
                let start = first.result.next_offset;
                let request = FetchRequest {
                    topic: first.partition.topic.clone(),
                    partition: first.partition.partition,
                    offset: OffsetSpec::At(start),
                    max_messages: share_messages,
                    max_wait: wait,
                };
                match self.fetch.fetch_within(request, share_bytes).await {
                    Ok(result) => Ok(Some(PartitionRead {
                        partition: first.partition.clone(),
                        committed: first.committed,
                        start,
                        reset: false,
                        result,
                    })),
                    // Retention passed the start meanwhile: the next poll starts again.
                    Err(BrokerError::OffsetOutOfRange { .. }) => Ok(None),
                    Err(error) => Err(error),
                }
            })
            .collect();
        while let Some(read) = waiting.next().await {
            if let Some(read) = read? {
                if !read.result.messages.is_empty() {
                    // The other long polls are dropped with `waiting`.
                    return Ok(Some(read));
                }
            }
        }
        Ok(None)
    }
}

/// The messages to answer, interleaved across partitions (so a client that stops early has
/// not favoured one), at most `max_messages` and `max_bytes` (the first message whatever its
/// size); and per partition where the member continues: past the last message answered, or
/// past the batches read when all of them were answered (which skips compaction's gaps), or
/// where the read started when none of its messages fit.
pub(super) fn deliver(
    reads: Vec<PartitionRead>,
    max_messages: usize,
    max_bytes: usize,
) -> (Vec<GroupMessage>, Vec<PartitionDelivery>) {
    let mut metas = Vec::with_capacity(reads.len());
    let mut queues = Vec::with_capacity(reads.len());
    for read in reads {
        metas.push((
            read.partition,
            read.committed,
            read.start,
            read.reset,
            read.result.next_offset,
            read.result.messages.len(),
            read.result.topic,
        ));
        queues.push(read.result.messages.into_iter());
    }
    let mut taken = vec![0usize; queues.len()];
    let mut last_taken: Vec<Option<u64>> = vec![None; queues.len()];
    let mut chosen: Vec<(usize, ConsumedMessage)> = Vec::new();
    let mut bytes = 0usize;
    'rounds: loop {
        let mut any = false;
        for (index, queue) in queues.iter_mut().enumerate() {
            if chosen.len() >= max_messages {
                break 'rounds;
            }
            let Some(message) = queue.as_slice().first() else {
                continue;
            };
            let size = message_bytes(message);
            if !chosen.is_empty() && bytes + size > max_bytes {
                break 'rounds;
            }
            let Some(message) = queue.next() else {
                continue;
            };
            bytes += size;
            taken[index] += 1;
            last_taken[index] = Some(message.offset);
            chosen.push((index, message));
            any = true;
        }
        if !any {
            break;
        }
    }
    let deliveries = metas
        .iter()
        .enumerate()
        .map(
            |(index, (partition, committed, start, reset, next_offset, read_count, _))| {
                let next = match last_taken[index] {
                    _ if taken[index] == *read_count => *next_offset,
                    Some(offset) => offset + 1,
                    None => *start,
                };
                PartitionDelivery {
                    partition: partition.clone(),
                    committed: *committed,
                    reset_start: reset.then_some(*start),
                    next,
                    delivered: taken[index] > 0,
                }
            },
        )
        .collect();
    let messages = chosen
        .into_iter()
        .map(|(index, message)| GroupMessage {
            topic: metas[index].6.clone(),
            message,
        })
        .collect();
    (messages, deliveries)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use herald_domain::RecordValue;

    fn read(partition: u32, from: u64, sizes: &[usize]) -> PartitionRead {
        let messages: Vec<ConsumedMessage> = sizes
            .iter()
            .enumerate()
            .map(|(index, size)| ConsumedMessage {
                partition,
                offset: from + index as u64,
                timestamp: 0,
                key: None,
                value: RecordValue::Bytes(Bytes::from(vec![0u8; *size])),
                headers: Vec::new(),
            })
            .collect();
        PartitionRead {
            partition: TopicPartition::new("t", partition),
            committed: Some(from),
            start: from,
            reset: false,
            result: FetchResult {
                topic: "t".into(),
                next_offset: from + sizes.len() as u64,
                messages,
                high_watermark: from + sizes.len() as u64,
                log_start_offset: 0,
            },
        }
    }

    #[test]
    fn one_byte_budget_is_shared_by_every_partition_of_a_poll() {
        let reads = (0..4)
            .map(|partition| read(partition, 10, &[100; 10]))
            .collect();
        let (messages, deliveries) = deliver(reads, 1000, 1000);
        assert_eq!(messages.len(), 10, "1000 bytes of 100-byte messages");
        let per_partition: Vec<usize> = (0..4)
            .map(|partition| {
                messages
                    .iter()
                    .filter(|delivered| delivered.message.partition == partition)
                    .count()
            })
            .collect();
        assert_eq!(per_partition, vec![3, 3, 2, 2], "interleaved fairly");
        let next: Vec<u64> = deliveries.iter().map(|delivery| delivery.next).collect();
        assert_eq!(
            next,
            vec![13, 13, 12, 12],
            "each continues after what it delivered"
        );
    }

    #[test]
    fn a_first_message_larger_than_the_budget_goes_alone() {
        let reads = vec![read(0, 5, &[5000, 10]), read(1, 0, &[10])];
        let (messages, deliveries) = deliver(reads, 1000, 1000);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].message.offset, 5);
        assert_eq!(deliveries[0].next, 6);
        assert_eq!(
            deliveries[1].next, 0,
            "nothing of partition 1 fit: it stays"
        );
        assert!(!deliveries[1].delivered);
    }

    #[test]
    fn a_reset_start_is_recorded_and_auto_commit_commits_what_was_delivered() {
        let mut reset = read(0, 40, &[1, 1]);
        reset.reset = true;
        reset.committed = None;
        let (_, deliveries) = deliver(vec![reset, read(1, 7, &[])], 1, 1000);
        let swap = |delivery: &PartitionDelivery, auto_commit| {
            delivery
                .swap(auto_commit)
                .map(|swap| (swap.expected, swap.offset))
        };
        assert_eq!(swap(&deliveries[0], false), Some((None, 40)));
        assert_eq!(swap(&deliveries[0], true), Some((None, 41)));
        assert_eq!(swap(&deliveries[1], false), None);
        assert_eq!(
            swap(&deliveries[1], true),
            None,
            "nothing delivered, nothing to commit"
        );
    }
}
