//! The calling side: [`RpcClient`].
//!
//! One persistent connection per peer node carries every concurrent call to it. A node runs
//! hundreds of raft groups whose heartbeats and appends all go to the same few peers; one
//! multiplexed connection per peer keeps that to one socket, one handshake and coalesced writes
//! (see `writer`), instead of a connection or a pool per group. Answers come back in any order
//! and are matched to their calls by request id.
//!
//! A failed connect puts the peer's lane in a short backoff during which calls fail at once with
//! `Unreachable`: when a node dies, every group on every other node notices at about the same
//! time, and without it each would dial the dead node and wait out the connect timeout. Only
//! one connect runs per peer at a time, in its own task; concurrent callers wait for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::connection::{establish, Connection, LastAnswer};
use super::frame::HEADER_BYTES;
use super::{Lane, RpcError, RpcLimits, ServiceId, CALLS_TOTAL};

/// Calls other nodes. Cheap to clone (Arc inside). One persistent TCP connection per peer node
/// and lane, multiplexing every concurrent call of the lane (many raft groups share one).
#[derive(Clone)]
pub struct RpcClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    node_id: u64,
    limits: RpcLimits,
    peers: Mutex<HashMap<u64, Arc<Peer>>>,
}

/// Everything the client knows about one peer node. Locks: `peers`, then a peer's `state`;
/// a connection is never dropped or closed while `state` is held (closing takes it).
pub(super) struct Peer {
    node: u64,
    /// Per lane, by [`Lane::index`].
    budgets: [Budget; 2],
    state: Mutex<PeerState>,
    last_answer: Arc<LastAnswer>,
}

/// Bytes of request bodies in flight to a peer on one lane.
struct Budget {
    /// Permits are bytes.
    bytes: Arc<Semaphore>,
    capacity: usize,
}

struct PeerState {
    address: String,
    /// Bumped whenever the address changes or the peer is forgotten, so a connect that was
    /// started for an older address does not install its connection.
    epoch: u64,
    /// Per lane, by [`Lane::index`].
    links: [Link; 2],
}

type ConnectAttempt = Shared<BoxFuture<'static, Result<Arc<Connection>, RpcError>>>;

enum Link {
    Idle,
    Connecting(ConnectAttempt),
    Connected(Arc<Connection>),
    Backoff { until: Instant, reason: String },
}

impl RpcClient {
    pub fn new(node_id: u64, limits: RpcLimits) -> RpcClient {
        RpcClient {
            inner: Arc::new(ClientInner {
                node_id,
                limits,
                peers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// This node's id, sent in every handshake.
    pub fn node_id(&self) -> u64 {
        self.inner.node_id
    }

    /// Where `node` listens (host:port). Changing it closes an existing connection to the old
    /// address (its pending calls get `ConnectionLost`) and ends any backoff.
    pub fn set_address(&self, node: u64, address: &str) {
        let previous = {
            let mut peers = self.inner.peers.lock();
            let peer = peers
                .entry(node)
                .or_insert_with(|| Arc::new(Peer::new(node, address, &self.inner.limits)));
            let mut state = peer.state.lock();
            if state.address == address {
                return;
            }
            state.address = address.to_string();
            state.epoch += 1;
            std::mem::replace(&mut state.links, [Link::Idle, Link::Idle])
        };
        previous
            .into_iter()
            .for_each(|link| close_link(link, "the node's address changed"));
    }

    pub fn address(&self, node: u64) -> Option<String> {
        let peer = self.inner.peers.lock().get(&node).cloned()?;
        let address = peer.state.lock().address.clone();
        Some(address)
    }

    /// Drops the node's address and connection (its pending calls get `ConnectionLost`).
    pub fn forget(&self, node: u64) {
        let Some(peer) = self.inner.peers.lock().remove(&node) else {
            return;
        };
        let previous = {
            let mut state = peer.state.lock();
            state.epoch += 1;
            std::mem::replace(&mut state.links, [Link::Idle, Link::Idle])
        };
        previous
            .into_iter()
            .for_each(|link| close_link(link, "the node was forgotten"));
    }

    /// Sends one request on `lane` and waits for its answer, at most `timeout` in total
    /// (connect, room in the lane's in-flight budget, a slot on its connection, send, answer).
    ///
    /// Dropping the returned future before it completes (the caller went away) cancels the
    /// request: the peer aborts its handler. A timeout does the same.
    pub async fn call(
        &self,
        node: u64,
        lane: Lane,
        service: ServiceId,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, RpcError> {
        let call = self.inner.call(node, lane, service, body);
        let outcome = match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(RpcError::Timeout { node }),
        };
        let label = match &outcome {
            Ok(_) => "ok",
            Err(error) => error.outcome_label(),
        };
        metrics::counter!(
            CALLS_TOTAL,
            "service" => service.to_string(),
            "lane" => lane.label(),
            "outcome" => label
        )
        .increment(1);
        outcome
    }

    /// When `node` last answered anything (liveness for status pages); None if never.
    pub fn last_answer(&self, node: u64) -> Option<Instant> {
        let peer = self.inner.peers.lock().get(&node).cloned()?;
        peer.last_answer.get()
    }

    /// Whether the control lane's connection to `node` is open right now (for status pages
    /// and tests): the one raft and the cluster's own requests use.
    pub fn is_connected(&self, node: u64) -> bool {
        self.is_connected_on(node, Lane::Control)
    }

    /// Whether the connection to `node` on `lane` is open right now.
    pub fn is_connected_on(&self, node: u64, lane: Lane) -> bool {
        let Some(peer) = self.inner.peers.lock().get(&node).cloned() else {
            return false;
        };
        let state = peer.state.lock();
        matches!(&state.links[lane.index()], Link::Connected(connection) if !connection.is_closed())
    }

    /// Calls to `node` waiting for an answer on its current connections, all lanes.
    #[cfg(test)]
    pub(super) fn pending_calls(&self, node: u64) -> usize {
        let Some(peer) = self.inner.peers.lock().get(&node).cloned() else {
            return 0;
        };
        let state = peer.state.lock();
        state
            .links
            .iter()
            .map(|link| match link {
                Link::Connected(connection) => connection.pending_calls(),
                _ => 0,
            })
            .sum()
    }
}

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RpcClient")
            .field("node_id", &self.inner.node_id)
            .finish_non_exhaustive()
    }
}

impl ClientInner {
    async fn call(
        &self,
        node: u64,
        lane: Lane,
        service: ServiceId,
        body: Bytes,
    ) -> Result<Bytes, RpcError> {
        let max = self.limits.frame_limit();
        let size = HEADER_BYTES + body.len();
        if size > max {
            return Err(RpcError::TooLarge { size, max });
        }
        let peer = self
            .peers
            .lock()
            .get(&node)
            .cloned()
            .ok_or(RpcError::NoAddress(node))?;
        // Held until the answer arrives or the call is dropped on its timeout.
        let _budget = peer.reserve(lane, body.len()).await?;
        let connection = self.connection(&peer, lane).await?;
        let waiting = match connection.send(service, body.clone()).await {
            Ok(waiting) => waiting,
            // The connection closed between lookup and send, so nothing went out on it: one
            // attempt on a fresh connection.
            Err(_closed) => self
                .connection(&peer, lane)
                .await?
                .send(service, body)
                .await
                .map_err(|reason| RpcError::Unreachable { node, reason })?,
        };
        waiting.answer().await
    }

    /// The peer's open connection on `lane`, connecting (or joining the running connect) if
    /// needed.
    async fn connection(&self, peer: &Arc<Peer>, lane: Lane) -> Result<Arc<Connection>, RpcError> {
        let (attempt, previous) = {
            let mut state = peer.state.lock();
            let state = &mut *state;
            let link = &mut state.links[lane.index()];
            match &*link {
                Link::Connected(connection) if !connection.is_closed() => {
                    return Ok(connection.clone())
                }
                Link::Connecting(attempt) => (attempt.clone(), None),
                Link::Backoff { until, reason } if Instant::now() < *until => {
                    return Err(RpcError::Unreachable {
                        node: peer.node,
                        reason: format!("not retrying yet after a failed connect: {reason}"),
                    });
                }
                _ => {
                    let attempt =
                        self.start_connect(peer, lane, state.address.clone(), state.epoch);
                    let previous = std::mem::replace(link, Link::Connecting(attempt.clone()));
                    (attempt, Some(previous))
                }
            }
        };
        drop(previous);
        attempt.await
    }

    /// Connects in a task of its own, so a caller giving up on its timeout does not cancel the
    /// connect others are waiting for; the task records the outcome in the peer's state.
    fn start_connect(
        &self,
        peer: &Arc<Peer>,
        lane: Lane,
        address: String,
        epoch: u64,
    ) -> ConnectAttempt {
        let peer = peer.clone();
        let node = peer.node;
        let own_id = self.node_id;
        let limits = self.limits.clone();
        let task = tokio::spawn(async move {
            let outcome = establish(own_id, &peer, lane, &address, &limits).await;
            let lane_label = lane.label();
            match &outcome {
                Ok(_) => {
                    tracing::debug!(node, %address, lane = lane_label, "rpc connection established")
                }
                Err(reason) => {
                    tracing::debug!(node, %address, lane = lane_label, %reason, "rpc connect failed")
                }
            }
            let previous = {
                let mut state = peer.state.lock();
                (state.epoch == epoch).then(|| {
                    let link = match &outcome {
                        Ok(connection) => Link::Connected(connection.clone()),
                        Err(reason) => Link::Backoff {
                            until: Instant::now() + limits.reconnect_backoff,
                            reason: reason.clone(),
                        },
                    };
                    std::mem::replace(&mut state.links[lane.index()], link)
                })
            };
            if previous.is_none() {
                let reason = "the node's address changed while connecting".to_string();
                if let Ok(connection) = &outcome {
                    connection.close(&reason);
                }
                return Err(RpcError::Unreachable { node, reason });
            }
            outcome.map_err(|reason| RpcError::Unreachable { node, reason })
        });
        async move {
            task.await.unwrap_or_else(|error| {
                Err(RpcError::Unreachable {
                    node,
                    reason: format!("the connect task failed: {error}"),
                })
            })
        }
        .boxed()
        .shared()
    }
}

fn close_link(link: Link, reason: &str) {
    if let Link::Connected(connection) = link {
        connection.close(reason);
    }
}

impl Peer {
    fn new(node: u64, address: &str, limits: &RpcLimits) -> Peer {
        let budget = |lane: Lane| {
            let capacity = limits
                .lane(lane)
                .max_in_flight_bytes_per_peer
                .clamp(1, Semaphore::MAX_PERMITS)
                .min(u32::MAX as usize);
            Budget {
                bytes: Arc::new(Semaphore::new(capacity)),
                capacity,
            }
        };
        Peer {
            node,
            budgets: Lane::ALL.map(budget),
            state: Mutex::new(PeerState {
                address: address.to_string(),
                epoch: 0,
                links: [Link::Idle, Link::Idle],
            }),
            last_answer: Arc::new(LastAnswer::new()),
        }
    }

    pub(super) fn node(&self) -> u64 {
        self.node
    }

    pub(super) fn last_answer(&self) -> &Arc<LastAnswer> {
        &self.last_answer
    }

    /// Empties the lane's slot if it holds the connection `is_it` picks (a connection that
    /// broke), so the next call dials again.
    pub(super) fn release(&self, lane: Lane, is_it: impl Fn(&Connection) -> bool) {
        let previous = {
            let mut state = self.state.lock();
            let link = &mut state.links[lane.index()];
            let holds_it = matches!(&*link, Link::Connected(connection) if is_it(connection));
            holds_it.then(|| std::mem::replace(link, Link::Idle))
        };
        // Dropped outside the lock: dropping a connection closes it.
        drop(previous);
    }

    /// Room for a body in the in-flight budget. A body larger than the whole budget takes all
    /// of it, so it waits for everything else and then travels alone.
    async fn reserve(&self, lane: Lane, body_len: usize) -> Result<OwnedSemaphorePermit, RpcError> {
        let budget = &self.budgets[lane.index()];
        let permits = u32::try_from(body_len.min(budget.capacity)).unwrap_or(u32::MAX);
        budget
            .bytes
            .clone()
            .acquire_many_owned(permits)
            .await
            .map_err(|_closed| RpcError::Unreachable {
                node: self.node,
                reason: "the in-flight budget is closed".to_string(),
            })
    }
}
