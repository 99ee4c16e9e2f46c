//! The raft network of a node: every group's AppendEntries, Vote, PreVote, snapshot and
//! TransferLeader calls travel over the node's internal RPC (`rpc::RpcClient`), on its control
//! lane: one multiplexed connection per peer node that forwarded client requests never share,
//! so heartbeats arrive on time however busy clients keep the node. A message names its group, so hundreds of groups share
//! those connections instead of opening one each.
//!
//! The receiving side is [`RaftService`]: it finds the group in the node's [`GroupRegistry`]
//! and hands the message to its `Raft`.
//!
//! AppendEntries to a follower are pipelined: several in flight per (group, follower), handed
//! to the follower's raft in order (see [`super::stream_append`]).
//!
//! Versions: a raft message is an [`Envelope`] in postcard, its kind the [`RaftMessage`]
//! variant. The encoding of every variant (and of every reply) is frozen, with golden bytes in
//! `migrations/wire/` (`wire_fixtures`); a change is a new variant at the end, sent only to a
//! node whose wire version knows it. A receiver that finds a variant it does not know answers
//! `herald_rpc`'s unknown operation (the variant's number as the tag), so a newer sender can
//! tell an older node from a failure.

use super::catch_up_throttle::{CatchUpThrottle, CATCH_UP_LAG_ENTRIES};
use herald_domain::RaftGroupId;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use bytes::Bytes;
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::rt::watch::WatchReceiver;
use openraft::{OptionalSend, RaftNetworkV2};
use serde::{Deserialize, Serialize};

use super::codec;
use super::group::{GroupContext, RaftTiming};
use super::heartbeats::HeartbeatCoalescer;
use super::leader_liveness::LeaderLiveness;
use super::registry::{GroupRegistry, PartitionRaft, RegisteredGroup};
use super::replication_backoff::replication_backoff;
use super::stream_append::{pipeline, SendAppend, Sequencer, StreamPosition};
use super::types::{NodeAddr, Snapshot, SnapshotMeta, TypeConfig, Vote};
use herald_rpc::operation_tag::unknown_operation;
use herald_rpc::{Lane, RpcClient, RpcError, ServiceId};

/// The RPC service id raft messages travel under.
pub const RAFT_SERVICE: ServiceId = 1;

/// Counter of vote requests this node sent as a candidate, labelled `kind` = `pre_vote` or
/// `vote`: it only grows while some group looks for a leader, so a steady value means no
/// election started (what tests watch to prove heartbeats keep arriving).
pub const VOTE_REQUESTS_TOTAL: &str = "herald_raft_vote_requests_total";
/// Raft messages from peers for a group that did not run here when they came, by whether it
/// started within the grace (`started`) or the message was refused (`refused`).
pub const ABSENT_GROUP_MESSAGES_TOTAL: &str = "herald_raft_absent_group_messages_total";
/// Counter of partition replicas whose election timer ran out while their leader was alive
/// and that went quiet to wait for it instead of campaigning (see `leader_liveness`).
pub const CAMPAIGNS_WITHHELD_TOTAL: &str = "herald_raft_campaigns_withheld_total";

/// How long an AppendEntries carrying entries may take: up to 16 MiB plus the follower's
/// fsync. Heartbeats (no entries) use openraft's own, much shorter, time-to-live.
const APPEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a snapshot transfer and install may take.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(30);

/// One raft message for one group.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub(crate) group: RaftGroupId,
    pub(crate) message: RaftMessage,
}

/// How many variants [`RaftMessage`] has: a message whose variant number is at or past it is
/// of a newer release (checked against the derive by the golden fixtures' test).
pub(crate) const RAFT_MESSAGE_VARIANTS: u32 = 7;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum RaftMessage {
    Append(AppendEntriesRequest<TypeConfig>),
    /// One AppendEntries of a pipelined stream: handed to raft after the one before it.
    StreamAppend {
        position: StreamPosition,
        request: AppendEntriesRequest<TypeConfig>,
    },
    Vote(VoteRequest<TypeConfig>),
    PreVote(VoteRequest<TypeConfig>),
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        data: Vec<u8>,
    },
    TransferLeader(TransferLeaderRequest<TypeConfig>),
    /// Many groups' heartbeats (empty AppendEntries) to one node (wire version 3 on; see
    /// `heartbeats`). The envelope's group is the first item's, and means nothing.
    Heartbeats(Vec<(RaftGroupId, AppendEntriesRequest<TypeConfig>)>),
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum RaftReply {
    Append(AppendEntriesResponse<TypeConfig>),
    Vote(VoteResponse<TypeConfig>),
    Snapshot(SnapshotResponse<TypeConfig>),
    TransferLeader(TransferLeaderResponse<TypeConfig>),
    /// Each heartbeat's answer, in the order of the batch.
    Heartbeats(Vec<Result<AppendEntriesResponse<TypeConfig>, RaftServiceError>>),
}

/// Why the receiving node could not hand a message to its group.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub(crate) enum RaftServiceError {
    /// The group does not run on the receiver (not started yet, or removed from it).
    #[error("group {0} does not run on this node")]
    UnknownGroup(RaftGroupId),
    #[error("{0}")]
    Failed(String),
}

/// Creates the per-(group, peer) clients openraft asks for; all share the node's RPC client.
#[derive(Clone)]
pub struct NetworkFactory {
    rpc: RpcClient,
    group: RaftGroupId,
    catch_up: Arc<CatchUpThrottle>,
    heartbeats: Arc<HeartbeatCoalescer>,
    registry: Arc<GroupRegistry>,
    leader_liveness: Arc<LeaderLiveness>,
}

impl NetworkFactory {
    pub(crate) fn new(context: &GroupContext, group: RaftGroupId) -> Self {
        NetworkFactory {
            rpc: context.rpc.clone(),
            group,
            catch_up: context.catch_up.clone(),
            heartbeats: context.heartbeats.clone(),
            registry: context.registry.clone(),
            leader_liveness: context.leader_liveness.clone(),
        }
    }
}

#[derive(Clone)]
pub struct PeerClient {
    rpc: RpcClient,
    target: u64,
    group: RaftGroupId,
    catch_up: Arc<CatchUpThrottle>,
    heartbeats: Arc<HeartbeatCoalescer>,
    registry: Arc<GroupRegistry>,
    leader_liveness: Arc<LeaderLiveness>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &NodeAddr) -> Self::Network {
        // Memberships carry raft addresses; the cluster layer also feeds addresses from the
        // metadata, which win when both exist.
        if self.rpc.address(target).is_none() && !node.raft_addr.is_empty() {
            self.rpc.set_address(target, &node.raft_addr);
        }
        PeerClient {
            rpc: self.rpc.clone(),
            target,
            group: self.group,
            catch_up: self.catch_up.clone(),
            heartbeats: self.heartbeats.clone(),
            registry: self.registry.clone(),
            leader_liveness: self.leader_liveness.clone(),
        }
    }
}

/// Unreachable makes openraft back off from the peer at once; other failures only after a run.
pub(crate) fn unreachable(error: &(impl std::error::Error + 'static)) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(error))
}

pub(crate) fn transport_error(error: RpcError) -> RPCError<TypeConfig> {
    match error {
        // A peer that does not know the message (an older release) is as good as unreachable
        // for it: nothing was done.
        RpcError::NoAddress(_)
        | RpcError::Unreachable { .. }
        | RpcError::TooLarge { .. }
        | RpcError::UnknownOperation { .. } => unreachable(&error),
        other => RPCError::Network(NetworkError::new(&other)),
    }
}

impl PeerClient {
    /// On a partition replica about to campaign whose leader is alive (see
    /// `leader_liveness`): goes quiet instead, to wait for the leader's next message, and
    /// answers the pre-vote refused on this replica's own behalf (its own vote and log: openraft
    /// learns nothing from it, and logs no failure). None: the campaign goes on.
    fn stand_down_for_live_leader(
        &self,
        request: &VoteRequest<TypeConfig>,
    ) -> Option<VoteResponse<TypeConfig>> {
        let Some(RegisteredGroup::Partition(raft, quiescence)) = self.registry.get(self.group)
        else {
            return None;
        };
        let (leader, vote) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            (metrics.current_leader?, metrics.vote)
        };
        if !self.leader_liveness.is_alive(self.group, leader) {
            return None;
        }
        if quiescence.stand_down(&raft) {
            metrics::counter!(CAMPAIGNS_WITHHELD_TOTAL).increment(1);
            tracing::debug!(
                group = self.group.get(),
                leader,
                "election timeout with the leader alive: waiting quiet for it instead of campaigning"
            );
        }
        Some(VoteResponse::new(vote, request.last_log_id, false))
    }

    async fn send(
        &self,
        message: RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, RPCError<TypeConfig>> {
        let message = match message {
            RaftMessage::Append(request)
                if request.entries.is_empty() && self.heartbeats.batches_to(self.target) =>
            {
                return self
                    .heartbeats
                    .heartbeat(self.target, self.group, request, timeout)
                    .await
                    .map(RaftReply::Append);
            }
            message => message,
        };
        let catching_up = match &message {
            RaftMessage::Append(request) | RaftMessage::StreamAppend { request, .. } => {
                is_catch_up(request)
            }
            _ => false,
        };
        let envelope = Envelope {
            group: self.group,
            message,
        };
        let body = codec::encode(&envelope).map_err(|error| unreachable(&error))?;
        if catching_up {
            self.catch_up.acquire(body.len()).await;
        }
        let answer = self
            .rpc
            .call(
                self.target,
                Lane::Control,
                RAFT_SERVICE,
                Bytes::from(body),
                timeout,
            )
            .await
            .map_err(transport_error)?;
        let reply: Result<RaftReply, RaftServiceError> =
            codec::decode(&answer).map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        match reply {
            Ok(reply) => Ok(reply),
            Err(error @ RaftServiceError::UnknownGroup(_)) => Err(unreachable(&error)),
            Err(error) => Err(RPCError::Network(NetworkError::new(&error))),
        }
    }
}

/// Entries a follower far behind the commit point is sent (see [`CatchUpThrottle`]).
fn is_catch_up(request: &AppendEntriesRequest<TypeConfig>) -> bool {
    let (Some(last), Some(commit)) = (request.entries.last(), request.leader_commit.as_ref())
    else {
        return false;
    };
    commit.index.saturating_sub(last.log_id.index) > CATCH_UP_LAG_ENTRIES
}

/// How long an AppendEntries may take (see [`APPEND_TIMEOUT`]).
fn append_timeout(request: &AppendEntriesRequest<TypeConfig>, option: &RPCOption) -> Duration {
    if request.entries.is_empty() {
        option.soft_ttl()
    } else {
        option.soft_ttl().max(APPEND_TIMEOUT)
    }
}

impl SendAppend for (PeerClient, RPCOption) {
    fn send_append(
        &self,
        position: StreamPosition,
        request: AppendEntriesRequest<TypeConfig>,
    ) -> std::pin::Pin<
        Box<
            dyn Future<Output = Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>>>
                + Send,
        >,
    > {
        let (client, option) = self.clone();
        Box::pin(async move {
            // A pipelined request may wait behind the ones before it, however small it is.
            let timeout = if position.seq == 0 {
                append_timeout(&request, &option)
            } else {
                option.soft_ttl().max(APPEND_TIMEOUT)
            };
            let message = if position.seq == 0 {
                RaftMessage::Append(request)
            } else {
                RaftMessage::StreamAppend { position, request }
            };
            match client.send(message, timeout).await? {
                RaftReply::Append(response) => Ok(response),
                _ => Err(unexpected("append")),
            }
        })
    }
}

fn unexpected(what: &str) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(format!(
        "unexpected answer to {what}"
    ))))
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let timeout = append_timeout(&rpc, &option);
        match self.send(RaftMessage::Append(rpc), timeout).await? {
            RaftReply::Append(response) => Ok(response),
            _ => Err(unexpected("append")),
        }
    }

    /// Several AppendEntries in flight, answered in order (see [`super::stream_append`]).
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>>
            + OptionalSend
            + Unpin
            + 'static,
    {
        let answers = pipeline((self.clone(), option), input);
        Box::pin(async move {
            let answers: BoxStream<'s, _> = Box::pin(answers);
            Ok(answers)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        metrics::counter!(VOTE_REQUESTS_TOTAL, "kind" => "vote").increment(1);
        match self.send(RaftMessage::Vote(rpc), option.soft_ttl()).await? {
            RaftReply::Vote(response) => Ok(response),
            _ => Err(unexpected("vote")),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        if let Some(refused) = self.stand_down_for_live_leader(&rpc) {
            return Ok(refused);
        }
        metrics::counter!(VOTE_REQUESTS_TOTAL, "kind" => "pre_vote").increment(1);
        match self
            .send(RaftMessage::PreVote(rpc), option.soft_ttl())
            .await?
        {
            RaftReply::Vote(response) => Ok(response),
            _ => Err(unexpected("pre-vote")),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        // Herald's snapshots are the small state-machine state (the data stays in the log), so
        // one message carries the whole snapshot.
        let message = RaftMessage::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        let timeout = option.soft_ttl().max(SNAPSHOT_TIMEOUT);
        let reply = tokio::select! {
            reply = self.send(message, timeout) => reply,
            closed = cancel => {
                return Err(StreamingError::Closed(closed));
            }
        };
        match reply {
            Ok(RaftReply::Snapshot(response)) => Ok(response),
            Ok(_) => Err(StreamingError::Network(NetworkError::new(
                &std::io::Error::other("unexpected answer to a snapshot"),
            ))),
            Err(RPCError::Unreachable(error)) => Err(StreamingError::Unreachable(error)),
            Err(RPCError::Network(error)) => Err(StreamingError::Network(error)),
            Err(other) => Err(StreamingError::Network(NetworkError::new(&other))),
        }
    }

    async fn transfer_leader(
        &mut self,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self
            .send(RaftMessage::TransferLeader(request), option.soft_ttl())
            .await?
        {
            RaftReply::TransferLeader(response) => Ok(response),
            _ => Err(unexpected("transfer-leader")),
        }
    }

    /// Doubling waits to an unreachable follower (see [`super::replication_backoff`]).
    fn backoff(&self) -> Option<Backoff> {
        Some(replication_backoff(self.group, self.target))
    }
}

/// The receiving side: hands raft messages from peers to this node's groups.
#[derive(Clone)]
pub struct RaftService {
    registry: Arc<GroupRegistry>,
    sequencer: Arc<Sequencer>,
    /// How long a message for a group that does not run here waits for it to start before it
    /// is refused (see [`RaftService::start_grace`]).
    start_grace: Duration,
    /// One permit per message waiting for its group, [`MAX_WAITING_FOR_START`] in all.
    waiting: Arc<Semaphore>,
}

/// How many messages may wait for their group to start at once. Each holds one of its
/// connection's request permits while it waits; past this many (a restart of thousands of
/// groups, or a peer still talking to replicas deleted here) the rest are refused at once, as
/// before the grace existed.
const MAX_WAITING_FOR_START: usize = 1024;

impl RaftService {
    pub fn new(registry: Arc<GroupRegistry>, timing: RaftTiming) -> Self {
        RaftService {
            registry,
            sequencer: Arc::default(),
            start_grace: Self::start_grace(timing),
            waiting: Arc::new(Semaphore::new(MAX_WAITING_FOR_START)),
        }
    }

    /// Half the shortest election timeout. A new partition's preferred leader campaigns as soon
    /// as its own node applied the topic's creation, often before its peers did; refused, it
    /// would wait out an election timeout while the others' timers run, and the three then
    /// compete. Held this long, the vote is answered once the peer's replica starts, still
    /// inside the candidate's vote timeout (openraft gives a vote the shortest election
    /// timeout, and the transport three quarters of that).
    fn start_grace(timing: RaftTiming) -> Duration {
        Duration::from_millis(timing.election_timeout_min_ms / 2)
    }

    /// Serves one message from node `from`; the answer is an encoded
    /// `Result<RaftReply, RaftServiceError>`, so the sender can tell "no such group here" from
    /// a transport failure.
    pub async fn handle(&self, from: u64, body: Bytes) -> Result<Bytes, String> {
        let envelope: Envelope =
            codec::decode(&body).map_err(|error| match unknown_message_kind(&body) {
                Some(kind) => unknown_operation(kind),
                None => error.to_string(),
            })?;
        let group_id = envelope.group;
        let group = match &envelope.message {
            // Each item of a batch is its own group's; a missing one is answered alone.
            RaftMessage::Heartbeats(_) => None,
            _ => self.group_or_wait(group_id).await,
        };
        let reply = match (group, envelope.message) {
            (_, RaftMessage::Heartbeats(items)) => {
                Ok(RaftReply::Heartbeats(self.heartbeats(items).await))
            }
            (None, _) => Err(RaftServiceError::UnknownGroup(group_id)),
            (Some(group), RaftMessage::StreamAppend { position, request }) => {
                self.sequencer
                    .forget_groups(|group| self.registry.get(group).is_some());
                self.sequencer
                    .in_turn(
                        from,
                        group_id,
                        position,
                        APPEND_TIMEOUT,
                        dispatch(group, RaftMessage::Append(request)),
                    )
                    .await
                    .unwrap_or_else(|out_of_turn| Err(failed(out_of_turn)))
            }
            (Some(group), message) => dispatch(group, message).await,
        };
        codec::encode(&reply)
            .map(Bytes::from)
            .map_err(|error| error.to_string())
    }
}

impl RaftService {
    /// The group, when it runs here or starts within the grace.
    async fn group_or_wait(&self, group_id: RaftGroupId) -> Option<RegisteredGroup> {
        if let Some(group) = self.registry.get(group_id) {
            return Some(group);
        }
        // Held until the wait ends, or the request is abandoned with it.
        let started = match self.waiting.try_acquire() {
            Ok(_waiting) => {
                self.registry
                    .wait_for(group_id, Instant::now() + self.start_grace)
                    .await
            }
            Err(_) => None,
        };
        let outcome = if started.is_some() {
            "started"
        } else {
            "refused"
        };
        metrics::counter!(ABSENT_GROUP_MESSAGES_TOTAL, "outcome" => outcome).increment(1);
        started
    }

    /// Hands each heartbeat of a batch to its group, all at once; each group's answer or why it
    /// could not take it, in the batch's order.
    async fn heartbeats(
        &self,
        items: Vec<(RaftGroupId, AppendEntriesRequest<TypeConfig>)>,
    ) -> Vec<Result<AppendEntriesResponse<TypeConfig>, RaftServiceError>> {
        let handed = items.into_iter().map(|(group_id, request)| async move {
            let Some(group) = self.registry.get(group_id) else {
                return Err(RaftServiceError::UnknownGroup(group_id));
            };
            match dispatch(group, RaftMessage::Append(request)).await? {
                RaftReply::Append(response) => Ok(response),
                _ => Err(failed("unexpected answer to a heartbeat")),
            }
        });
        futures::future::join_all(handed).await
    }
}

/// The variant number of a message this release does not know (a newer node's), if that is
/// why `body` does not decode.
pub(crate) fn unknown_message_kind(body: &[u8]) -> Option<u16> {
    let (_group, rest) = postcard::take_from_bytes::<RaftGroupId>(body).ok()?;
    let (variant, _) = postcard::take_from_bytes::<u32>(rest).ok()?;
    if variant < RAFT_MESSAGE_VARIANTS {
        return None;
    }
    Some(u16::try_from(variant).unwrap_or(u16::MAX))
}

fn failed(error: impl std::fmt::Display) -> RaftServiceError {
    RaftServiceError::Failed(error.to_string())
}

/// Whether `message` is an append from a leader whose vote is older than the one `raft` holds.
fn is_stale_append(raft: &PartitionRaft, message: &RaftMessage) -> bool {
    use openraft::rt::watch::WatchReceiver;
    let vote = match message {
        RaftMessage::Append(request) | RaftMessage::StreamAppend { request, .. } => &request.vote,
        _ => return false,
    };
    *vote < raft.metrics().borrow_watched().vote
}

/// The vote `raft` holds now.
fn current_vote(raft: &PartitionRaft) -> openraft::alias::VoteOf<TypeConfig> {
    use openraft::rt::watch::WatchReceiver;
    raft.metrics().borrow_watched().vote
}

async fn dispatch(
    group: RegisteredGroup,
    message: RaftMessage,
) -> Result<RaftReply, RaftServiceError> {
    macro_rules! on_raft {
        ($raft:expr) => {{
            let raft = $raft;
            match message {
                RaftMessage::Append(request) => raft
                    .append_entries(request)
                    .await
                    .map(RaftReply::Append)
                    .map_err(failed),
                RaftMessage::StreamAppend { request, .. } => raft
                    .append_entries(request)
                    .await
                    .map(RaftReply::Append)
                    .map_err(failed),
                RaftMessage::Vote(request) => raft
                    .vote(request)
                    .await
                    .map(RaftReply::Vote)
                    .map_err(failed),
                RaftMessage::PreVote(request) => raft
                    .pre_vote(request)
                    .await
                    .map(RaftReply::Vote)
                    .map_err(failed),
                RaftMessage::Snapshot { vote, meta, data } => raft
                    .install_full_snapshot(
                        vote,
                        Snapshot {
                            meta,
                            snapshot: data,
                        },
                    )
                    .await
                    .map(RaftReply::Snapshot)
                    .map_err(failed),
                RaftMessage::TransferLeader(request) => raft
                    .handle_transfer_leader(request)
                    .await
                    .map(RaftReply::TransferLeader)
                    .map_err(failed),
                // Split up by `RaftService::heartbeats` before it reaches a group.
                RaftMessage::Heartbeats(_) => Err(failed("a heartbeat batch inside a batch")),
            }
        }};
    }
    match group {
        RegisteredGroup::Metadata(raft) => on_raft!(raft),
        RegisteredGroup::Partition(raft, quiescence) => {
            // What a leader sends a quiet group (its first heartbeat after a write, a snapshot,
            // a transfer) wakes it first: the group is active again. Not an append from a
            // leader of old (a node back from a stop, see `engine::quiescence`), answered with
            // the newer vote. And a vote or pre-vote wakes it only if it granted it (its vote
            // changed, which restarts its election timer): a woken follower of a quiet leader
            // would find its timer long run out and campaign, and one candidate's refused
            // ballots would set off the elections of every follower they reached.
            let is_ballot = matches!(message, RaftMessage::Vote(_) | RaftMessage::PreVote(_));
            if !is_ballot && !is_stale_append(&raft, &message) {
                quiescence.wake(&raft);
            }
            let vote_before = is_ballot.then(|| current_vote(&raft));
            let reply = on_raft!(&raft);
            if vote_before.is_some_and(|before| before != current_vote(&raft)) {
                quiescence.wake(&raft);
            }
            reply
        }
    }
}
