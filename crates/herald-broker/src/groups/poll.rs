//! Group polls: messages from the member's partitions, continuing from the position the
//! client names.
//!
//! A poll never moves a position the client has not confirmed (see `cursor`): it starts each
//! assigned partition at the cursor's position when the cursor speaks for it (the member has
//! owned the partition without a break since the cursor's generation) and is past the
//! committed offset, else at the committed offset, else where the group's reset policy says.
//! A lost answer is therefore delivered again, never skipped. A poll writes nothing, except
//! - where the reset policy chose the start: recorded as the committed offset, once, so the
//!   next cursor-less poll does not choose again (with `latest` it would skip what arrived in
//!   between); also when retention removed the committed offset, which moves forward;
//! - with `auto_commit`: what it answers, committed before answering (at-most-once).
//!
//! Both are compare-and-set on the committed offsets the poll read, so two polls of one
//! member that race do not both record or both auto-commit: the loser reads again.

use crate::GroupService;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::super::fetch::{MAX_FETCH_MESSAGES, MAX_WAIT};
use super::super::topics::now_ms;
use super::cursor::PollCursor;
use super::poll_reads::{deliver, PartitionPlan, PollPlan};
use super::refusal::{refusal, stale_generation};
use crate::{BrokerError, BrokerResult, GroupMessage, GroupPoll, GroupPollResult, Membership};
use herald_domain::groups::{GroupCommand, GroupOutcome, OffsetSwap, TopicPartition};

/// How many times one poll reads again after losing its compare-and-commit to a concurrent
/// poll or a rebalance, before it answers empty.
const MAX_POLL_ROUNDS: usize = 5;

/// How long a poll waits for this node's copy of the group to reach the generation the
/// coordinator answered, before it does without the cursor (which needs that copy to know
/// since when the member owns each partition).
const VIEW_CATCH_UP: Duration = Duration::from_secs(1);

impl GroupService {
    pub async fn poll_group(&self, request: GroupPoll) -> BrokerResult<GroupPollResult> {
        if request.max_messages == 0 || request.max_messages > MAX_FETCH_MESSAGES {
            return Err(BrokerError::InvalidRequest(format!(
                "max_messages must be between 1 and {MAX_FETCH_MESSAGES}"
            )));
        }
        let cursor = match &request.cursor {
            Some(text) => PollCursor::decode(
                text,
                &request.group,
                &request.member_id,
                self.core.options.groups.max_cursor_bytes,
            )?,
            None => None,
        };
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
            if membership.assignments.is_empty() {
                // Nothing to read in this generation: wait for a rebalance (or the deadline).
                let mut changes = self.core.cluster().groups().changes();
                let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
                if Instant::now() >= deadline || round >= MAX_POLL_ROUNDS {
                    return Ok(self.answer(&request, membership, Vec::new(), BTreeMap::new()));
                }
                continue;
            }
            let plan = self
                .plan_poll(&request.group, &membership, cursor.as_ref())
                .await;
            if let Some(answer) = self
                .poll_once(&request, &membership, &plan, deadline)
                .await?
            {
                return Ok(answer);
            }
            // A rebalance or another poll came between the read and the compare-and-commit:
            // these messages are not delivered; read again from the offsets as they are now.
            if round >= MAX_POLL_ROUNDS || Instant::now() >= deadline {
                let positions = plan
                    .partitions
                    .iter()
                    .filter_map(|partition| {
                        Some((partition.partition.clone(), partition.resume_at()?))
                    })
                    .collect();
                return Ok(self.answer(&request, membership, Vec::new(), positions));
            }
        }
    }

    /// Where each assigned partition starts, from the cursor and this node's copy of the
    /// group. The cursor speaks for a partition only if the member owned it without a break
    /// since the cursor's answer: one that went away and came back starts at the committed
    /// offset, as a partition that changes owner does.
    async fn plan_poll(
        &self,
        group: &str,
        membership: &Membership,
        cursor: Option<&PollCursor>,
    ) -> PollPlan {
        let cursor = match cursor {
            Some(cursor)
                if self
                    .local_generation_reaches(group, membership.generation)
                    .await =>
            {
                Some(cursor)
            }
            _ => None,
        };
        self.core.cluster().groups().read(|groups| {
            let state = groups.get(group);
            let partitions = membership
                .assignments
                .iter()
                .map(|partition| {
                    let committed = state.and_then(|state| state.committed(partition));
                    let cursor = cursor
                        .filter(|cursor| {
                            state
                                .and_then(|state| state.owned_since(partition))
                                .is_some_and(|since| since <= cursor.generation)
                        })
                        .and_then(|cursor| cursor.positions.get(partition).copied())
                        .filter(|position| committed.is_none_or(|committed| *position > committed));
                    PartitionPlan {
                        partition: partition.clone(),
                        committed,
                        cursor,
                    }
                })
                .collect();
            PollPlan {
                reset: state.map(|state| state.offset_reset).unwrap_or_default(),
                partitions,
            }
        })
    }

    /// Whether this node has applied the group at `generation` or later, waiting briefly.
    async fn local_generation_reaches(&self, group: &str, generation: u64) -> bool {
        let groups = self.core.cluster().groups();
        let mut changes = groups.changes();
        let deadline = Instant::now() + VIEW_CATCH_UP;
        loop {
            let local = groups.read(|groups| groups.get(group).map(|group| group.generation));
            if local.is_some_and(|local| local >= generation) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    /// One round: read, long-poll if nothing is there, compare-and-commit what must be
    /// recorded. None when a compare-and-commit lost (the caller reads again).
    async fn poll_once(
        &self,
        request: &GroupPoll,
        membership: &Membership,
        plan: &PollPlan,
        deadline: Instant,
    ) -> BrokerResult<Option<GroupPollResult>> {
        let mut reads = self.read_planned(plan, request.max_messages).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let found = reads.iter().any(|read| !read.result.messages.is_empty());
        if !found && !remaining.is_zero() {
            // Record the reset policy's starts before waiting: a client that gives up on the
            // long poll must not have the policy choose again (and skip what came meanwhile).
            let swaps: Vec<OffsetSwap> = reads
                .iter()
                .filter(|read| read.reset)
                .map(|read| OffsetSwap {
                    partition: read.partition.clone(),
                    expected: read.committed,
                    offset: read.start,
                })
                .collect();
            if !self
                .compare_and_commit(request, membership.generation, swaps)
                .await?
            {
                return Ok(None);
            }
            for read in &mut reads {
                if std::mem::take(&mut read.reset) {
                    read.committed = Some(read.start);
                }
            }
            if let Some(news) = self
                .long_poll(&reads, request.max_messages, remaining)
                .await?
            {
                reads.retain(|read| read.partition != news.partition);
                reads.push(news);
            }
        }
        let (messages, deliveries) = deliver(reads, request.max_messages, self.poll_budget());
        let swaps = deliveries
            .iter()
            .filter_map(|delivery| delivery.swap(request.auto_commit))
            .collect();
        if !self
            .compare_and_commit(request, membership.generation, swaps)
            .await?
        {
            return Ok(None);
        }
        // Partitions the budget left unread continue where they would have started.
        let mut positions: BTreeMap<TopicPartition, u64> = plan
            .partitions
            .iter()
            .filter_map(|partition| Some((partition.partition.clone(), partition.resume_at()?)))
            .collect();
        for delivery in deliveries {
            positions.insert(delivery.partition, delivery.next);
        }
        Ok(Some(self.answer(
            request,
            membership.clone(),
            messages,
            positions,
        )))
    }

    /// Proposes `swaps` (nothing to do when empty); false when an offset changed since the
    /// poll read it, or the group rebalanced (unless the poll named its generation).
    async fn compare_and_commit(
        &self,
        request: &GroupPoll,
        generation: u64,
        swaps: Vec<OffsetSwap>,
    ) -> BrokerResult<bool> {
        if swaps.is_empty() {
            return Ok(true);
        }
        let command = GroupCommand::CompareAndCommit {
            group: request.group.clone(),
            member_id: request.member_id.clone(),
            generation,
            offsets: swaps,
            now_ms: now_ms(),
        };
        match self.core.cluster().groups().propose(command).await? {
            GroupOutcome::Committed { .. } => Ok(true),
            GroupOutcome::StaleGeneration { current } if request.generation.is_some() => {
                Err(stale_generation(&request.group, current))
            }
            GroupOutcome::StaleGeneration { .. }
            | GroupOutcome::NotAssigned(_)
            | GroupOutcome::OffsetMoved { .. } => Ok(false),
            other => Err(refusal(&request.group, &request.member_id, other)),
        }
    }

    fn answer(
        &self,
        request: &GroupPoll,
        membership: Membership,
        messages: Vec<GroupMessage>,
        positions: BTreeMap<TopicPartition, u64>,
    ) -> GroupPollResult {
        let cursor = PollCursor {
            generation: membership.generation,
            positions,
        };
        let committed = |partition: &TopicPartition| {
            self.core.cluster().groups().read(|groups| {
                groups
                    .get(&request.group)
                    .and_then(|group| group.committed(partition))
            })
        };
        GroupPollResult {
            cursor: cursor.encode(
                &request.group,
                &request.member_id,
                self.core.options.groups.max_cursor_bytes,
                committed,
            ),
            generation: membership.generation,
            assignments: membership.assignments,
            messages,
        }
    }
}
