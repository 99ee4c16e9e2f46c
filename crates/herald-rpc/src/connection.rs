//! One dialled connection to a peer on one lane: the handshake, then a writer task (see
//! `writer`) and a reader task that routes answers by request id to the calls waiting for them.
//!
//! A call first takes one of the connection's slots, as many as the server announced it runs at
//! once, so the server never has to stop reading this connection and a cancel reaches it
//! promptly. Calls register in the pending map before their request is queued and deregister
//! when they end, answered or not. A call that ends unanswered after its request was queued
//! (dropped on its timeout, or its caller went away) queues a cancel before it gives its slot
//! back, so the server aborts the handler instead of running it for nobody. When the
//! connection breaks, every pending call learns it at once (`ConnectionLost`: its request was
//! queued, so it may have been delivered) and the peer's slot is emptied, so the next call
//! dials again.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;

use super::client::Peer;
use super::frame::{
    cancel, write_frame, Frame, FrameKind, FrameReader, Hello, HelloAck, HANDSHAKE_MAX_FRAME_BYTES,
};
use super::hello_auth::{self, Challenge};
use super::tls::{split_plain, RpcRead, RpcWrite};
use super::{operation_tag, writer, ConnectionGauge, Lane, RpcError, RpcLimits, ServiceId};

/// Dials, says hello, and starts the connection's reader and writer tasks; the error is why
/// not. A server that refuses the hello's version (a node of another release) is dialled
/// again with the newest version both speak (see `frame`).
pub(super) async fn establish(
    own_id: u64,
    peer: &Arc<Peer>,
    lane: Lane,
    address: &str,
    limits: &RpcLimits,
) -> Result<Arc<Connection>, String> {
    let mut version = limits.protocol.newest;
    let (mut reader, write_half, ack) = loop {
        let hello = Hello {
            version,
            from: own_id,
            to: peer.node(),
            lane,
            nonce: hello_auth::nonce()?,
        };
        let attempt =
            tokio::time::timeout(limits.connect_timeout, handshake(hello, address, limits)).await;
        match attempt {
            Ok(Ok(connected)) => break connected,
            Ok(Err(HandshakeFailure::Refused(reason))) => {
                match limits.protocol.retry_after(version, &reason) {
                    Some(older) => {
                        tracing::debug!(
                            node = peer.node(),
                            offered = version,
                            older,
                            "a peer refused the hello version; dialling again with an older one"
                        );
                        version = older;
                    }
                    None => return Err(format!("{address} refused the handshake: {reason}")),
                }
            }
            Ok(Err(HandshakeFailure::Other(reason))) => return Err(reason),
            Err(_elapsed) => {
                return Err(format!(
                    "no handshake with {address} within {:?}",
                    limits.connect_timeout
                ))
            }
        }
    };
    reader.set_max_frame_bytes(limits.frame_limit());
    peer.last_answer().record();
    // The smaller of what this node would send and what the server runs at once.
    let slots = limits
        .lane(lane)
        .max_concurrent_requests_per_connection
        .min(ack.max_concurrent_requests as usize)
        .clamp(1, Semaphore::MAX_PERMITS);
    Ok(Connection::start(peer, lane, slots, reader, write_half))
}

/// Why a handshake failed: the server refused the hello (and said why), or anything else.
enum HandshakeFailure {
    Refused(String),
    Other(String),
}

impl From<String> for HandshakeFailure {
    fn from(reason: String) -> Self {
        HandshakeFailure::Other(reason)
    }
}

async fn handshake(
    hello: Hello,
    address: &str,
    limits: &RpcLimits,
) -> Result<(FrameReader<RpcRead>, RpcWrite, HelloAck), HandshakeFailure> {
    let node = hello.to;
    let stream = dial(address, limits.source_ip)
        .await
        .map_err(|error| format!("connect to {address}: {error}"))?;
    stream
        .set_nodelay(true)
        .map_err(|error| format!("set TCP_NODELAY on {address}: {error}"))?;
    let (read_half, mut write_half) = match &limits.tls {
        Some(tls) => tls
            .connect(stream, node)
            .await
            .map_err(|error| format!("TLS with node {node} at {address}: {error}"))?,
        None => split_plain(stream),
    };
    let hello_frame = hello.into_frame();
    write_frame(&mut write_half, &hello_frame)
        .await
        .map_err(|error| format!("send hello to {address}: {error}"))?;
    let mut reader = FrameReader::new(read_half, HANDSHAKE_MAX_FRAME_BYTES);
    let mut reply = read_reply(&mut reader, address).await?;
    if reply.kind == FrameKind::Challenge {
        let challenge = Challenge::decode(&reply.body)?;
        // Without a key, an empty proof: the server refuses it and says why.
        let proof = match &limits.hello_key {
            Some(key) if !challenge.proves_server(key, &hello_frame.body) => {
                return Err(HandshakeFailure::Other(format!(
                    "{address} (node {node}) does not know this cluster's secret: a node of another \
                     cluster, or its cluster secret differs from this node's"
                )));
            }
            Some(key) => challenge.client_proof(key, &hello_frame.body).to_vec(),
            None => Vec::new(),
        };
        let proof = Frame::new(FrameKind::Proof, 0, 0, Bytes::from(proof));
        write_frame(&mut write_half, &proof)
            .await
            .map_err(|error| format!("send the proof to {address}: {error}"))?;
        reply = read_reply(&mut reader, address).await?;
    } else if reply.kind == FrameKind::HelloAck && limits.hello_key.is_some() {
        return Err(HandshakeFailure::Other(format!(
            "{address} (node {node}) accepted the hello without asking for the cluster secret: \
             its internal RPC is configured unlike this node's (mutual TLS on one side only?)"
        )));
    }
    match reply.kind {
        FrameKind::HelloAck => {
            let ack = HelloAck::decode(&reply.body)?;
            if ack.node_id != node {
                return Err(HandshakeFailure::Other(format!(
                    "{address} is node {}, not node {node}",
                    ack.node_id
                )));
            }
            Ok((reader, write_half, ack))
        }
        FrameKind::HelloRefused => Err(HandshakeFailure::Refused(
            String::from_utf8_lossy(&reply.body).into_owned(),
        )),
        other => Err(HandshakeFailure::Other(format!(
            "{address} answered the hello with a {other:?} frame"
        ))),
    }
}

/// The server's next handshake frame.
async fn read_reply(reader: &mut FrameReader<RpcRead>, address: &str) -> Result<Frame, String> {
    reader
        .read_frame()
        .await
        .map_err(|error| format!("handshake with {address}: {error}"))?
        .ok_or_else(|| format!("{address} closed the connection during the handshake"))
}

/// Connects to `address`, from `source_ip` (any port) when given and of the same family as the
/// peer's address; else from what the kernel picks. Each address `address` resolves to is
/// tried in turn, like `TcpStream::connect`.
async fn dial(address: &str, source_ip: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(source_ip) = source_ip else {
        return TcpStream::connect(address).await;
    };
    let mut last_error = None;
    for target in tokio::net::lookup_host(address).await? {
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if source_ip.is_ipv4() == target.is_ipv4() {
            socket.bind(SocketAddr::new(source_ip, 0))?;
        }
        match socket.connect(target).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{address} resolves to no address"),
        )
    }))
}

/// One open connection. Callers hold it while they send; dropping the last holder (the peer's
/// slot and every caller) closes it.
pub(super) struct Connection {
    outgoing: mpsc::Sender<Frame>,
    shared: Arc<ConnectionShared>,
}

/// The part of a connection its reader and writer tasks share with callers.
struct ConnectionShared {
    node: u64,
    lane: Lane,
    /// One per call outstanding, as many as the server runs at once; closed with the
    /// connection, so callers waiting for one learn it.
    slots: Arc<Semaphore>,
    next_request_id: AtomicU64,
    closed: AtomicBool,
    pending: Mutex<PendingCalls>,
    tasks: Mutex<Vec<AbortHandle>>,
    /// To clear the peer's slot when the connection breaks.
    peer: Weak<Peer>,
    _gauge: ConnectionGauge,
}

struct PendingCalls {
    /// Set once, when the connection closes; no call is registered after that.
    closed_because: Option<String>,
    calls: HashMap<u64, oneshot::Sender<Result<Bytes, RpcError>>>,
}

impl Connection {
    fn start(
        peer: &Arc<Peer>,
        lane: Lane,
        slots: usize,
        reader: FrameReader<RpcRead>,
        write_half: RpcWrite,
    ) -> Arc<Connection> {
        let (outgoing, queue) = mpsc::channel(writer::QUEUE_FRAMES);
        let shared = Arc::new(ConnectionShared {
            node: peer.node(),
            lane,
            slots: Arc::new(Semaphore::new(slots)),
            next_request_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            pending: Mutex::new(PendingCalls {
                closed_because: None,
                calls: HashMap::new(),
            }),
            tasks: Mutex::new(Vec::new()),
            peer: Arc::downgrade(peer),
            _gauge: ConnectionGauge::open("out", lane),
        });
        let reading = tokio::spawn(read_answers(
            shared.clone(),
            reader,
            peer.last_answer().clone(),
        ));
        let writing = tokio::spawn({
            let shared = shared.clone();
            async move {
                let reason = match writer::run(write_half, queue).await {
                    Ok(()) => "the connection was released".to_string(),
                    Err(error) => format!("write failed: {error}"),
                };
                shared.close(&reason, true);
            }
        });
        {
            let mut tasks = shared.tasks.lock();
            tasks.extend([reading.abort_handle(), writing.abort_handle()]);
            // A close that ran before the handles were here could not abort them.
            if shared.is_closed() {
                tasks.drain(..).for_each(|task| task.abort());
            }
        }
        Arc::new(Connection { outgoing, shared })
    }

    pub(super) fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Closes the connection; its pending calls get `ConnectionLost` with `reason`.
    pub(super) fn close(&self, reason: &str) {
        self.shared.close(reason, false);
    }

    /// Calls waiting for an answer on this connection.
    #[cfg(test)]
    pub(super) fn pending_calls(&self) -> usize {
        self.shared.pending.lock().calls.len()
    }

    /// Takes a slot, registers a call and queues its request. The error (the connection
    /// closed first) means the request was certainly not sent.
    pub(super) async fn send(&self, service: ServiceId, body: Bytes) -> Result<Waiting, String> {
        let slot = self
            .shared
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_closed| self.closed_reason())?;
        let request_id = self.shared.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (answer_sender, answer) = oneshot::channel();
        {
            let mut pending = self.shared.pending.lock();
            if let Some(reason) = &pending.closed_because {
                return Err(reason.clone());
            }
            pending.calls.insert(request_id, answer_sender);
        }
        let mut registration = Registration {
            shared: self.shared.clone(),
            request_id,
            service,
            outgoing: self.outgoing.clone(),
            queued: false,
            slot: Some(slot),
        };
        let frame = Frame::new(FrameKind::Request, request_id, service, body);
        if self.outgoing.send(frame).await.is_err() {
            return Err("the connection's writer stopped".to_string());
        }
        registration.queued = true;
        Ok(Waiting {
            node: self.shared.node,
            answer,
            _registration: registration,
        })
    }

    fn closed_reason(&self) -> String {
        self.shared
            .pending
            .lock()
            .closed_because
            .clone()
            .unwrap_or_else(|| "the connection closed".to_string())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.close("the connection was released", false);
    }
}

impl ConnectionShared {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Fails every pending call with `ConnectionLost` and stops the tasks; `clear_slot` also
    /// empties the peer's slot if it still holds this connection, so the next call reconnects.
    /// Runs once; later calls do nothing.
    fn close(&self, reason: &str, clear_slot: bool) {
        let calls = {
            let mut pending = self.pending.lock();
            if pending.closed_because.is_some() {
                return;
            }
            pending.closed_because = Some(reason.to_string());
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut pending.calls)
        };
        self.slots.close();
        tracing::debug!(node = self.node, lane = self.lane.label(), %reason, "rpc connection closed");
        for (_, caller) in calls {
            let _ = caller.send(Err(RpcError::ConnectionLost {
                node: self.node,
                reason: reason.to_string(),
            }));
        }
        self.tasks.lock().drain(..).for_each(|task| task.abort());
        if !clear_slot {
            return;
        }
        if let Some(peer) = self.peer.upgrade() {
            peer.release(self.lane, |connection| {
                std::ptr::eq(Arc::as_ptr(&connection.shared), self)
            });
        }
    }

    fn complete(&self, request_id: u64, answer: Result<Bytes, RpcError>) {
        let caller = self.pending.lock().calls.remove(&request_id);
        match caller {
            Some(caller) => {
                let _ = caller.send(answer);
            }
            None => tracing::debug!(
                node = self.node,
                request_id,
                "rpc answer for a call that already gave up"
            ),
        }
    }
}

/// Routes answers to their callers until the connection ends, then closes it.
async fn read_answers(
    shared: Arc<ConnectionShared>,
    mut reader: FrameReader<RpcRead>,
    last_answer: Arc<LastAnswer>,
) {
    let reason = loop {
        let frame = match reader.read_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break "the peer closed the connection".to_string(),
            Err(error) => {
                if error.is_protocol_violation() {
                    tracing::warn!(node = shared.node, %error, "rpc protocol error from a peer");
                }
                break error.to_string();
            }
        };
        let answer = match frame.kind {
            FrameKind::AnswerOk => Ok(frame.body),
            FrameKind::AnswerError => {
                let message = String::from_utf8_lossy(&frame.body).into_owned();
                Err(match operation_tag::unknown_operation_tag(&message) {
                    Some(tag) => RpcError::UnknownOperation {
                        node: shared.node,
                        tag,
                    },
                    None => RpcError::Remote(message),
                })
            }
            other => {
                tracing::warn!(node = shared.node, kind = ?other, "rpc peer sent an unexpected frame");
                break format!("protocol error: unexpected {other:?} frame");
            }
        };
        last_answer.record();
        shared.complete(frame.request_id, answer);
    };
    shared.close(&reason, true);
}

/// Removes the call's pending entry when the call ends, whether answered or dropped, so
/// abandoned calls leave nothing behind; cancels an unanswered request on the server, then
/// gives the call's slot back.
struct Registration {
    shared: Arc<ConnectionShared>,
    request_id: u64,
    service: ServiceId,
    outgoing: mpsc::Sender<Frame>,
    /// Whether the request frame was queued (a call dropped before that sent nothing).
    queued: bool,
    /// Given back once the cancel (if any) is queued: the server reads the cancel before any
    /// request that takes the slot next, so it never runs more than it announced.
    slot: Option<OwnedSemaphorePermit>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let unanswered = self
            .shared
            .pending
            .lock()
            .calls
            .remove(&self.request_id)
            .is_some();
        if !unanswered || !self.queued || self.shared.is_closed() {
            return;
        }
        let frame = cancel(self.request_id, self.service);
        match self.outgoing.try_send(frame) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            // The writer's queue is full (a burst): queue it from a task, which keeps the slot
            // until then. Bounded by the calls outstanding, which hold slots.
            Err(TrySendError::Full(frame)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let outgoing = self.outgoing.clone();
                    let slot = self.slot.take();
                    runtime.spawn(async move {
                        let _ = outgoing.send(frame).await;
                        drop(slot);
                    });
                }
            }
        }
    }
}

pub(super) struct Waiting {
    node: u64,
    answer: oneshot::Receiver<Result<Bytes, RpcError>>,
    _registration: Registration,
}

impl Waiting {
    pub(super) async fn answer(self) -> Result<Bytes, RpcError> {
        match self.answer.await {
            Ok(answer) => answer,
            Err(_dropped) => Err(RpcError::ConnectionLost {
                node: self.node,
                reason: "the connection closed".to_string(),
            }),
        }
    }
}

/// When a peer last answered, as nanoseconds after `base` plus one (zero: never), so the
/// reader can record it without a lock.
pub(super) struct LastAnswer {
    base: Instant,
    nanos_plus_one: AtomicU64,
}

impl LastAnswer {
    pub(super) fn new() -> LastAnswer {
        LastAnswer {
            base: Instant::now(),
            nanos_plus_one: AtomicU64::new(0),
        }
    }

    fn record(&self) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.nanos_plus_one
            .fetch_max(nanos.saturating_add(1), Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> Option<Instant> {
        match self.nanos_plus_one.load(Ordering::Relaxed) {
            0 => None,
            nanos_plus_one => Some(self.base + Duration::from_nanos(nanos_plus_one - 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::dial;

    /// The peer sees the connection come from the source address, which is what lets a test
    /// (or an operator's packet filter) cut the link between two nodes sharing one host.
    #[tokio::test]
    async fn a_dial_comes_from_the_source_ip_when_one_is_given() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 53));

        let _from_source = dial(&address, Some(source)).await.unwrap();
        let (_, seen) = listener.accept().await.unwrap();
        assert_eq!(seen.ip(), source);

        let _from_any = dial(&address, None).await.unwrap();
        let (_, seen) = listener.accept().await.unwrap();
        assert_eq!(seen.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
}
