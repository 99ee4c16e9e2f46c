//! A consumer group member that lives as long as a stream (a WebSocket subscription, a
//! server-sent event stream) instead of a client's loop of REST calls.
//!
//! It is a member like any other: it joins, heartbeats, polls and commits through the same
//! `GroupService` methods the REST handlers call (`join_group`, `group_heartbeat`, `poll_group`,
//! `commit_offsets`, `leave_group`); it only keeps the poll cursor and the generation for the
//! stream, and leaves the group when dropped, so the partitions go to the other members at
//! once instead of after the session timeout.
//!
//! Positions come from the poll: the first poll of a partition starts at the group's committed
//! offset, later ones continue after what the stream delivered (the cursor), and a partition
//! gained in a rebalance starts at its committed offset again. Messages read for a generation
//! that has been replaced before they are handed over are dropped and read again in the new
//! generation, so a stream does not deliver from a partition it lost.
//!
//! A stream outlives its membership: when the group no longer knows the member (its session
//! expired while a failover kept the stream from heartbeating), the stream joins again with
//! the same request, announces the new assignment and starts its partitions at the group's
//! committed offsets, so nothing is skipped (what was delivered and not committed comes
//! again, as for any member that lost its partitions).

use crate::GroupService;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::super::fetch::{MAX_FETCH_MESSAGES, MAX_WAIT};
use crate::{
    BrokerError, BrokerResult, CommitOffsets, ErrorCode, GroupMessage, GroupPoll, JoinGroup,
    Membership, StoredOffset,
};
use herald_domain::groups::TopicPartition;

/// The shortest and longest wait between two heartbeats (a third of the session timeout).
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);
const MAX_HEARTBEAT: Duration = Duration::from_secs(5);

/// Streaming members that joined again after their group forgot them (a session that expired
/// during a failover).
pub const MEMBER_REJOINS_TOTAL: &str = "herald_group_stream_rejoins_total";

/// The group does not know the member any more: its session expired, or it was removed.
fn forgotten(error: &BrokerError) -> bool {
    matches!(
        error,
        BrokerError::NotFound {
            code: ErrorCode::UnknownMember,
            ..
        }
    )
}

/// What the stream hands over next.
#[derive(Debug)]
pub enum MemberEvent {
    /// The member's partitions changed (its first assignment, or a rebalance).
    Assignment(Membership),
    /// Messages of the member's partitions in the current generation, in offset order within
    /// each partition.
    Messages(Vec<GroupMessage>),
}

/// A member of a group driven by a stream; leaves the group when dropped.
pub struct MemberStream {
    groups: GroupService,
    group: String,
    /// How it joined: the same request joins again if the group forgets the member.
    join: JoinGroup,
    membership: Membership,
    /// The last assignment handed over; a different one is announced before any message.
    announced: Option<u64>,
    cursor: Option<String>,
    /// Messages (auto-committed) read together with a new assignment, handed over after it.
    pending: Vec<GroupMessage>,
    /// The membership as commits from other tasks see it.
    shared: Arc<RwLock<Membership>>,
    auto_commit: bool,
    heartbeat: Duration,
    left: bool,
}

impl GroupService {
    /// Joins `request.group` as a streaming member.
    pub async fn join_stream(
        &self,
        request: JoinGroup,
        auto_commit: bool,
    ) -> BrokerResult<MemberStream> {
        let group = request.group.clone();
        let session = request
            .session_timeout
            .unwrap_or(self.core.options.groups.default_session_timeout);
        let membership = self.join_group(request.clone()).await?;
        Ok(MemberStream {
            groups: self.clone(),
            group,
            join: request,
            shared: Arc::new(RwLock::new(membership.clone())),
            membership,
            announced: None,
            cursor: None,
            pending: Vec::new(),
            auto_commit,
            heartbeat: (session / 3).clamp(MIN_HEARTBEAT, MAX_HEARTBEAT),
            left: false,
        })
    }

    /// Resolves once this node's copy of the group is past `generation`.
    async fn group_generation_passes(&self, group: &str, generation: u64) {
        let mut changes = self.core.cluster().groups().changes();
        loop {
            if self
                .local_group_generation(group)
                .is_some_and(|local| local > generation)
            {
                return;
            }
            if changes.changed().await.is_err() {
                // The node is stopping: nothing more will change.
                std::future::pending::<()>().await;
            }
        }
    }

    /// This node's copy of the group's generation (it may lag the coordinator's briefly).
    fn local_group_generation(&self, group: &str) -> Option<u64> {
        self.core
            .cluster()
            .groups()
            .read(|groups| groups.get(group).map(|group| group.generation))
    }
}

impl MemberStream {
    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// How often the stream must call [`MemberStream::next`] or
    /// [`MemberStream::heartbeat`] to keep its session.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat
    }

    /// The next event: a new assignment, or up to `max_messages` messages (waiting up to the
    /// heartbeat interval for one; an empty batch when none came). A member the group forgot
    /// joins again (see the module's doc).
    pub async fn next(&mut self, max_messages: usize) -> BrokerResult<MemberEvent> {
        match self.poll_next(max_messages).await {
            Err(error) if forgotten(&error) => self.rejoin().await,
            answer => answer,
        }
    }

    async fn poll_next(&mut self, max_messages: usize) -> BrokerResult<MemberEvent> {
        if let Some(event) = self.announce() {
            return Ok(event);
        }
        if !self.pending.is_empty() {
            return Ok(MemberEvent::Messages(std::mem::take(&mut self.pending)));
        }
        // What this node knew when the poll began: only a later rebalance cuts it short (the
        // poll's own heartbeat learns of one that came before).
        let seen = self
            .groups
            .local_group_generation(&self.group)
            .unwrap_or(0)
            .max(self.membership.generation);
        let poll = self.groups.poll_group(GroupPoll {
            group: self.group.clone(),
            member_id: self.membership.member_id.clone(),
            generation: None,
            max_messages: max_messages.clamp(1, MAX_FETCH_MESSAGES),
            max_wait: self.heartbeat.min(MAX_WAIT),
            auto_commit: self.auto_commit,
            cursor: self.cursor.clone(),
        });
        let answer = if self.auto_commit {
            // Not cut short: it may have committed what it answers.
            poll.await?
        } else {
            // A rebalance applied here ends the long poll at once, so the new assignment is
            // announced without waiting for the poll's deadline. The poll commits nothing
            // then but a reset start, which is compare-and-set: safe to drop.
            tokio::select! {
                answer = poll => answer?,
                () = self.groups.group_generation_passes(&self.group, seen) => {
                    return self.learn_rebalance().await;
                }
            }
        };
        let replaced = self
            .groups
            .local_group_generation(&self.group)
            .is_some_and(|local| local > answer.generation);
        if replaced && !self.auto_commit {
            // Read for a generation already replaced: not handed over, and the cursor stays,
            // so the next poll reads them again from what this member still owns.
            return self.learn_rebalance().await;
        }
        if answer.generation != self.membership.generation {
            self.set_membership(Membership {
                member_id: self.membership.member_id.clone(),
                generation: answer.generation,
                assignments: answer.assignments,
            });
            if self.auto_commit {
                // Committed already: handed over right after the assignment.
                self.cursor = Some(answer.cursor);
                self.pending = answer.messages;
            }
            // Without auto-commit the cursor stays: partitions kept continue after what was
            // delivered, partitions gained start at their committed offsets.
            if let Some(event) = self.announce() {
                return Ok(event);
            }
            return Ok(MemberEvent::Messages(std::mem::take(&mut self.pending)));
        }
        self.cursor = Some(answer.cursor);
        Ok(MemberEvent::Messages(answer.messages))
    }

    /// Resolves once this node applies a rebalance of the group past the member's generation
    /// (for a stream that waits without polling, to call [`MemberStream::heartbeat`] then).
    pub async fn rebalanced(&self) {
        self.groups
            .group_generation_passes(&self.group, self.membership.generation)
            .await
    }

    /// After a rebalance applied here: the new assignment at once, from a heartbeat (an
    /// empty batch if the coordinator has not answered it yet). The cursor stays.
    async fn learn_rebalance(&mut self) -> BrokerResult<MemberEvent> {
        Ok(self
            .heartbeat()
            .await?
            .unwrap_or(MemberEvent::Messages(Vec::new())))
    }

    /// Keeps the session alive while the stream has no credit to poll; answers the new
    /// assignment if the group rebalanced.
    pub async fn heartbeat(&mut self) -> BrokerResult<Option<MemberEvent>> {
        let membership = match self
            .groups
            .group_heartbeat(&self.group, &self.membership.member_id)
            .await
        {
            Ok(membership) => membership,
            Err(error) if forgotten(&error) => return self.rejoin().await.map(Some),
            Err(error) => return Err(error),
        };
        self.set_membership(membership);
        Ok(self.announce())
    }

    /// Joins again after the group forgot the member: a new member id, the partitions the
    /// group gives it now, each from its committed offset (the cursor is dropped). Announced
    /// as a new assignment.
    async fn rejoin(&mut self) -> BrokerResult<MemberEvent> {
        let membership = self.groups.join_group(self.join.clone()).await?;
        metrics::counter!(MEMBER_REJOINS_TOTAL).increment(1);
        tracing::info!(
            group = self.group,
            old = self.membership.member_id,
            new = membership.member_id,
            "a streaming member the group forgot joined again"
        );
        self.cursor = None;
        self.pending.clear();
        self.announced = None;
        self.set_membership(membership);
        Ok(self.announce().unwrap_or(MemberEvent::Messages(Vec::new())))
    }

    /// A handle that commits for this member from another task.
    pub fn handle(&self) -> MemberHandle {
        MemberHandle {
            groups: self.groups.clone(),
            group: self.group.clone(),
            membership: self.shared.clone(),
        }
    }

    fn set_membership(&mut self, membership: Membership) {
        if let Ok(mut shared) = self.shared.write() {
            *shared = membership.clone();
        }
        self.membership = membership;
    }

    /// Leaves the group now (dropping the stream does it in the background).
    pub async fn leave(mut self) -> BrokerResult<()> {
        self.left = true;
        self.groups
            .leave_group(&self.group, &self.membership.member_id)
            .await
    }

    fn announce(&mut self) -> Option<MemberEvent> {
        if self.announced == Some(self.membership.generation) {
            return None;
        }
        self.announced = Some(self.membership.generation);
        Some(MemberEvent::Assignment(self.membership.clone()))
    }
}

/// Commits for a streaming member, with its current generation.
#[derive(Clone)]
pub struct MemberHandle {
    groups: GroupService,
    group: String,
    membership: Arc<RwLock<Membership>>,
}

impl MemberHandle {
    /// Commits offsets (each the next offset to read) with the member's current generation:
    /// a partition it no longer owns is refused as a REST commit is.
    pub async fn commit(
        &self,
        offsets: Vec<(TopicPartition, u64)>,
    ) -> BrokerResult<Vec<StoredOffset>> {
        let (member_id, generation) = match self.membership.read() {
            Ok(membership) => (membership.member_id.clone(), membership.generation),
            Err(_) => {
                return Err(crate::BrokerError::Internal(
                    "a streaming member's state was poisoned".into(),
                ))
            }
        };
        self.groups
            .commit_offsets(CommitOffsets {
                group: self.group.clone(),
                member_id,
                generation,
                offsets,
            })
            .await
    }
}

impl Drop for MemberStream {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        let groups = self.groups.clone();
        let group = std::mem::take(&mut self.group);
        let member_id = std::mem::take(&mut self.membership.member_id);
        // Dropped inside the runtime (a stream's task or body); leaving is one proposal.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = groups.leave_group(&group, &member_id).await {
                    tracing::debug!(group, member_id, %error, "a streaming member could not leave; its session will time out");
                }
            });
        }
    }
}
