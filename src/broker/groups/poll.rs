//! A group member's poll: messages from its partitions, from where it left off.
//!
//! A poll is a heartbeat (it asks the coordinator for the member's current partitions), then
//! a read of every assigned partition from the member's position, then one replicated
//! `Advance` that moves the positions past what it answers (and commits them with
//! `auto_commit`). Positions are replicated so that the member's next poll may go to any node.
//! The advance is compare-and-set on the positions read from: if another poll of the same
//! member got there first, this one's messages are dropped and it reads again, so one message
//! is not delivered twice by concurrent polls.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::super::fetch::{MAX_FETCH_MESSAGES, MAX_WAIT};
use super::super::topics::now_ms;
use super::{refusal, stale_generation};
use crate::broker::{
    Broker, BrokerError, BrokerResult, FetchRequest, FetchResult, GroupMessage, GroupPoll,
    GroupPollResult, OffsetSpec,
};
use crate::domain::groups::{
    GroupCommand, GroupOutcome, OffsetReset, PositionMove, TopicPartition,
};

/// How many times one poll reads again after losing its advance to a concurrent poll or a
/// rebalance, before it answers empty.
const MAX_POLL_ROUNDS: usize = 5;

/// One partition's part of a poll.
struct PartitionRead {
    partition: TopicPartition,
    /// The member's position before the read; None when the reset policy chose the start.
    known_from: Option<u64>,
    result: FetchResult,
}

impl Broker {
    pub async fn poll_group(&self, request: GroupPoll) -> BrokerResult<GroupPollResult> {
        if request.max_messages == 0 || request.max_messages > MAX_FETCH_MESSAGES {
            return Err(BrokerError::InvalidRequest(format!(
                "max_messages must be between 1 and {MAX_FETCH_MESSAGES}"
            )));
        }
        let deadline = Instant::now() + request.max_wait.min(MAX_WAIT);
        let mut round = 0;
        loop {
            round += 1;
            let membership = self
                .group_heartbeat(&request.group, &request.member_id)
                .await?;
            if let Some(believed) = request.generation {
                if believed != membership.generation {
                    return Err(stale_generation(&request.group, membership.generation));
                }
            }
            let empty = |membership: crate::broker::Membership| GroupPollResult {
                generation: membership.generation,
                assignments: membership.assignments,
                messages: Vec::new(),
            };
            if membership.assignments.is_empty() {
                // Nothing to read in this generation: wait for a rebalance (or the deadline).
                let mut changes = self.cluster().groups().changes();
                let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
                if Instant::now() >= deadline || round >= MAX_POLL_ROUNDS {
                    return Ok(empty(membership));
                }
                continue;
            }
            let reads = self
                .read_assigned(&request, &membership.assignments, deadline)
                .await?;
            let (messages, moves) = deliver(reads, request.max_messages);
            if moves.is_empty() {
                return Ok(empty(membership));
            }
            let command = GroupCommand::Advance {
                group: request.group.clone(),
                member_id: request.member_id.clone(),
                generation: membership.generation,
                moves,
                commit: request.auto_commit,
                now_ms: now_ms(),
            };
            match self.cluster().propose_group(command).await? {
                GroupOutcome::Done => {
                    return Ok(GroupPollResult {
                        generation: membership.generation,
                        assignments: membership.assignments,
                        messages,
                    })
                }
                // A rebalance or another poll came between the read and the advance: these
                // messages are not delivered; read again from the positions as they are now.
                GroupOutcome::StaleGeneration { current } if request.generation.is_some() => {
                    return Err(stale_generation(&request.group, current))
                }
                GroupOutcome::StaleGeneration { .. }
                | GroupOutcome::NotAssigned(_)
                | GroupOutcome::PositionMoved { .. }
                    if round < MAX_POLL_ROUNDS && Instant::now() < deadline => {}
                GroupOutcome::StaleGeneration { .. }
                | GroupOutcome::NotAssigned(_)
                | GroupOutcome::PositionMoved { .. } => return Ok(empty(membership)),
                other => return Err(refusal(&request.group, &request.member_id, other)),
            }
        }
    }

    /// Reads every assigned partition from the member's position: first without waiting, and
    /// when none has anything, a long poll on all of them that ends with the first to get a
    /// message (or at the deadline). Each partition gets an even share of `max_messages`, so
    /// a busy partition cannot starve the others.
    async fn read_assigned(
        &self,
        request: &GroupPoll,
        assignments: &[TopicPartition],
        deadline: Instant,
    ) -> BrokerResult<Vec<PartitionRead>> {
        let share = request.max_messages.div_ceil(assignments.len()).max(1);
        let (starts, reset) = self.cluster().groups().read(|groups| {
            let group = groups.get(&request.group);
            let starts: Vec<Option<u64>> = assignments
                .iter()
                .map(|partition| group.and_then(|group| group.position(partition)))
                .collect();
            (
                starts,
                group.map(|group| group.offset_reset).unwrap_or_default(),
            )
        });
        let mut reads = Vec::with_capacity(assignments.len());
        let mut immediate: FuturesUnordered<_> = assignments
            .iter()
            .zip(&starts)
            .map(|(partition, start)| {
                self.read_from(partition.clone(), *start, reset, share, Duration::ZERO)
            })
            .collect();
        while let Some(read) = immediate.next().await {
            reads.push(read?);
        }
        drop(immediate);
        let remaining = deadline.saturating_duration_since(Instant::now());
        if reads.iter().any(|read| !read.result.messages.is_empty()) || remaining.is_zero() {
            return Ok(reads);
        }
        // Every read was empty, so each ended where it started: long-poll from there. A start
        // the reset policy chose stays chosen (with `latest`, choosing again could skip what
        // arrived meanwhile); the compare-and-set still names the position read from first.
        let mut waiting: FuturesUnordered<_> = reads
            .iter()
            .map(|first| {
                let known_from = first.known_from;
                let read = self.read_from(
                    first.partition.clone(),
                    Some(first.result.next_offset),
                    reset,
                    share,
                    remaining,
                );
                async move { read.await.map(|read| PartitionRead { known_from, ..read }) }
            })
            .collect();
        while let Some(read) = waiting.next().await {
            let read = read?;
            if !read.result.messages.is_empty() {
                // The first partition with news answers; the other long polls are dropped.
                let partition = read.partition.clone();
                drop(waiting);
                reads.retain(|earlier| earlier.partition != partition);
                reads.push(read);
                return Ok(reads);
            }
        }
        Ok(reads)
    }

    /// One partition from `start`, or from where the reset policy says when the group has no
    /// position there or its position fell off the log (retention removed it).
    async fn read_from(
        &self,
        partition: TopicPartition,
        start: Option<u64>,
        reset: OffsetReset,
        max_messages: usize,
        wait: Duration,
    ) -> BrokerResult<PartitionRead> {
        let reset_spec = match reset {
            OffsetReset::Earliest => OffsetSpec::Earliest,
            OffsetReset::Latest => OffsetSpec::Latest,
        };
        let fetch = |offset| FetchRequest {
            topic: partition.topic.clone(),
            partition: partition.partition,
            offset,
            max_messages,
            max_wait: wait,
        };
        let (known_from, result) = match start {
            Some(offset) => match self.fetch(fetch(OffsetSpec::At(offset))).await {
                Ok(result) => (Some(offset), result),
                Err(BrokerError::OffsetOutOfRange { .. }) => {
                    // The start moves: the compare-and-set still names the old position.
                    (Some(offset), self.fetch(fetch(reset_spec)).await?)
                }
                Err(error) => return Err(error),
            },
            None => (None, self.fetch(fetch(reset_spec)).await?),
        };
        Ok(PartitionRead {
            partition,
            known_from,
            result,
        })
    }
}

/// The messages to answer, interleaved across partitions (so a client that stops early has
/// not favoured one), and the position moves that deliver them: past the last message
/// answered of each partition, or past the batches read when all of them were answered
/// (which skips compaction's gaps); and for a partition where the reset policy chose the
/// start, that start even without messages, so the next poll does not choose again (with
/// `latest` it would skip what arrived in between).
fn deliver(
    reads: Vec<PartitionRead>,
    max_messages: usize,
) -> (Vec<GroupMessage>, Vec<PositionMove>) {
    let mut queues: Vec<std::vec::IntoIter<crate::broker::ConsumedMessage>> = Vec::new();
    let mut taken = vec![0usize; reads.len()];
    let mut messages = Vec::new();
    let mut metas = Vec::with_capacity(reads.len());
    for read in reads {
        metas.push((
            read.partition,
            read.known_from,
            read.result.next_offset,
            read.result.topic,
            read.result.messages.len(),
            read.result.messages.first().map(|message| message.offset),
        ));
        queues.push(read.result.messages.into_iter());
    }
    'rounds: loop {
        let mut any = false;
        for (index, queue) in queues.iter_mut().enumerate() {
            if messages.len() >= max_messages {
                break 'rounds;
            }
            if let Some(message) = queue.next() {
                taken[index] += 1;
                messages.push((index, message));
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    let mut last_taken: Vec<Option<u64>> = vec![None; metas.len()];
    for (index, message) in &messages {
        last_taken[*index] = Some(message.offset);
    }
    let mut moves = Vec::new();
    for (index, (partition, known_from, next_offset, _, read_count, first_offset)) in
        metas.iter().enumerate()
    {
        let to = match last_taken[index] {
            _ if taken[index] == *read_count => *next_offset,
            Some(offset) => offset + 1,
            // Nothing of this partition fit: stay, or pin where the reset policy started.
            None => known_from.or(*first_offset).unwrap_or(*next_offset),
        };
        if known_from.is_none() || *known_from != Some(to) {
            moves.push(PositionMove {
                partition: partition.clone(),
                from: known_from.unwrap_or(0),
                to,
            });
        }
    }
    let messages = messages
        .into_iter()
        .map(|(index, message)| GroupMessage {
            topic: metas[index].3.clone(),
            message,
        })
        .collect();
    (messages, moves)
}
