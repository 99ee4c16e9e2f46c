//! Coalesced heartbeats: the empty AppendEntries that the leaders of a node's active groups
//! send a peer node go out together, one RPC carrying every group's, instead of one RPC per
//! group. A node leading thousands of active partitions otherwise sends each peer thousands of
//! tiny messages a second (two per group per heartbeat interval with three replicas), each
//! with its own frame, task and wake-up on both sides.
//!
//! A heartbeat waits at most [`LINGER`] for others to the same peer (nothing next to the
//! election timeout), then the batch goes as one [`RaftMessage::Heartbeats`]; the receiver
//! hands each to its group and answers each group's own result, in order. Only empty appends
//! that begin a stream are coalesced (a heartbeat is a stream of one): pipelined appends keep
//! their order on their own (`stream_append`). A peer of a release that does not know the
//! batch (it answers unknown operation) is sent heartbeats one by one from then on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::errors::{NetworkError, RPCError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use herald_domain::RaftGroupId;
use herald_rpc::{Lane, RpcClient, RpcError};

use super::codec;
use super::network::{
    transport_error, unreachable, Envelope, RaftMessage, RaftReply, RaftServiceError, RAFT_SERVICE,
};
use super::types::TypeConfig;

/// How long a heartbeat waits for others to the same peer.
pub const LINGER: Duration = Duration::from_millis(2);

/// Counter of heartbeat batches sent (`herald_raft_heartbeats_coalesced_total` divided by it
/// is the mean batch size).
pub const HEARTBEAT_BATCHES_TOTAL: &str = "herald_raft_heartbeat_batches_total";
/// Counter of heartbeats sent in batches.
pub const HEARTBEATS_COALESCED_TOTAL: &str = "herald_raft_heartbeats_coalesced_total";

type Answer = Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>>;

struct Pending {
    group: RaftGroupId,
    request: AppendEntriesRequest<TypeConfig>,
    timeout: Duration,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct PeerQueue {
    pending: Vec<Pending>,
    /// A flush task runs for this peer.
    flushing: bool,
}

/// The node's heartbeat batches, one queue per peer node; every group's network shares it.
pub struct HeartbeatCoalescer {
    rpc: RpcClient,
    queues: Mutex<HashMap<u64, PeerQueue>>,
    /// Peers that answered a batch with unknown operation (an older release).
    one_by_one: Mutex<HashSet<u64>>,
}

impl HeartbeatCoalescer {
    pub fn new(rpc: RpcClient) -> Arc<HeartbeatCoalescer> {
        Arc::new(HeartbeatCoalescer {
            rpc,
            queues: Mutex::new(HashMap::new()),
            one_by_one: Mutex::new(HashSet::new()),
        })
    }

    /// Whether heartbeats to `target` go in batches.
    pub(crate) fn batches_to(&self, target: u64) -> bool {
        !self.one_by_one.lock().contains(&target)
    }

    /// Sends `request` (an empty AppendEntries of `group`) to `target` in the next batch and
    /// waits for its answer, at most `timeout`.
    pub(crate) async fn heartbeat(
        self: &Arc<Self>,
        target: u64,
        group: RaftGroupId,
        request: AppendEntriesRequest<TypeConfig>,
        timeout: Duration,
    ) -> Answer {
        let (answer, answered) = oneshot::channel();
        let start_flush = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(target).or_default();
            queue.pending.push(Pending {
                group,
                request,
                timeout,
                answer,
            });
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start_flush {
            tokio::spawn(self.clone().flush(target));
        }
        match tokio::time::timeout(timeout + LINGER, answered).await {
            Ok(Ok(answer)) => answer,
            _ => Err(network_error(format!(
                "no answer to a heartbeat from node {target} in {timeout:?}"
            ))),
        }
    }

    /// Sends what queued for `target` every [`LINGER`] until nothing does.
    async fn flush(self: Arc<Self>, target: u64) {
        loop {
            tokio::time::sleep(LINGER).await;
            let batch = {
                let mut queues = self.queues.lock();
                let queue = queues.entry(target).or_default();
                if queue.pending.is_empty() {
                    queue.flushing = false;
                    return;
                }
                std::mem::take(&mut queue.pending)
            };
            // In its own task: a slow peer holds up its answers, not the next batch.
            tokio::spawn(self.clone().send(target, batch));
        }
    }

    async fn send(self: Arc<Self>, target: u64, batch: Vec<Pending>) {
        let timeout = batch
            .iter()
            .map(|pending| pending.timeout)
            .min()
            .unwrap_or(LINGER);
        let group = batch[0].group;
        let mut answers = Vec::with_capacity(batch.len());
        let mut items = Vec::with_capacity(batch.len());
        for pending in batch {
            items.push((pending.group, pending.request));
            answers.push(pending.answer);
        }
        metrics::counter!(HEARTBEAT_BATCHES_TOTAL).increment(1);
        metrics::counter!(HEARTBEATS_COALESCED_TOTAL).increment(items.len() as u64);
        let envelope = Envelope {
            group,
            message: RaftMessage::Heartbeats(items),
        };
        let results = match self.call(target, &envelope, timeout).await {
            Ok(results) if results.len() == answers.len() => results,
            Ok(results) => {
                let error = format!(
                    "node {target} answered {} of {} heartbeats",
                    results.len(),
                    answers.len()
                );
                answers
                    .iter()
                    .map(|_| Err(network_error(error.clone())))
                    .collect()
            }
            Err(error) => {
                if matches!(error, RpcError::UnknownOperation { .. }) {
                    tracing::info!(
                        target,
                        "peer does not take heartbeat batches: sending them one by one"
                    );
                    self.one_by_one.lock().insert(target);
                }
                answers
                    .iter()
                    .map(|_| Err(transport_error(error.clone())))
                    .collect()
            }
        };
        for (answer, result) in answers.into_iter().zip(results) {
            let _ = answer.send(result);
        }
    }

    async fn call(
        &self,
        target: u64,
        envelope: &Envelope,
        timeout: Duration,
    ) -> Result<Vec<Answer>, RpcError> {
        let body = codec::encode(envelope).map_err(|error| RpcError::Remote(error.to_string()))?;
        let answer = self
            .rpc
            .call(
                target,
                Lane::Control,
                RAFT_SERVICE,
                Bytes::from(body),
                timeout,
            )
            .await?;
        let reply: Result<RaftReply, RaftServiceError> =
            codec::decode(&answer).map_err(|error| RpcError::Remote(error.to_string()))?;
        let results = match reply {
            Ok(RaftReply::Heartbeats(results)) => results,
            Ok(_) => return Err(RpcError::Remote("unexpected answer to heartbeats".into())),
            Err(error) => return Err(RpcError::Remote(error.to_string())),
        };
        Ok(results
            .into_iter()
            .map(|result| match result {
                Ok(response) => Ok(response),
                Err(error @ RaftServiceError::UnknownGroup(_)) => Err(unreachable(&error)),
                Err(error) => Err(RPCError::Network(NetworkError::new(&error))),
            })
            .collect())
    }
}

fn network_error(message: String) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(message)))
}
