//! The serving side: [`serve`] accepts connections on the `--raft-addr` listener and runs the
//! node's [`RpcHandler`] for every request that arrives on them.
//!
//! Limits are per connection, and a connection's lane (from the handshake) picks them: a
//! request takes a permit before it runs and returns it once its answer is queued or it is
//! cancelled. The client keeps within the limit it was told in the handshake, so the reader
//! normally never waits and cancels are read at once. A peer that sends more anyway finds the
//! connection no longer read until a permit frees, and TCP flow control slows it down, instead
//! of this node queueing unbounded work.
//!
//! A cancel aborts its request's handler (the future is dropped, which drops whatever the
//! handler waited on) and frees its permit at once; a connection that ends aborts every
//! handler still running for it.
//!
//! A handler runs under `catch_unwind`: a bug in one service's handler answers that request with
//! an error and leaves the connection, and every other raft group using it, alone.
//!
//! The hello is checked before anything else is read: for this node, proving the cluster
//! secret when one is configured (`hello_auth`), naming the node its certificate names under
//! mutual TLS, and from a member of the cluster (`PeerFilter`). A refusal is answered, logged
//! and counted (`HANDSHAKES_REFUSED_TOTAL`). A connection whose node leaves the cluster is
//! closed at its next request.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{AbortHandle, JoinSet};

use super::frame::{
    write_frame, Frame, FrameKind, FrameReader, Hello, HelloAck, HelloError,
    HANDSHAKE_MAX_FRAME_BYTES, HEADER_BYTES,
};
use super::hello_auth::Challenge;
use super::tls::{certifies_node, node_name, split_plain, RpcRead, RpcWrite};
use super::{
    writer, ConnectionGauge, Lane, PeerAdmission, RpcHandler, RpcLimits, ServiceId,
    CANCELLED_TOTAL, HANDSHAKES_REFUSED_TOTAL,
};
use rustls::pki_types::CertificateDer;

/// A client that connected must say hello within this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// On shutdown, requests already running get this long to answer before they are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// On close, queued answers get this long to reach a peer that may have stopped reading.
const WRITER_DRAIN: Duration = Duration::from_secs(1);
/// After a failed accept (out of file descriptors, typically), before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// How often an open connection's node is checked again for membership (at a request).
const MEMBERSHIP_RECHECK: Duration = Duration::from_secs(1);

/// Accepts connections on `listener` until `shutdown` resolves. `node_id` is this node's id: a
/// client that expected a different node is refused in the handshake.
///
/// On shutdown it stops accepting, stops reading every connection, gives running requests a
/// short grace to answer, flushes, and returns once every connection is closed.
pub async fn serve(
    listener: TcpListener,
    node_id: u64,
    handler: Arc<dyn RpcHandler>,
    limits: RpcLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let accepted = Arc::new(AtomicUsize::new(0));
    serve_counting(listener, node_id, handler, limits, shutdown, accepted).await;
}

/// [`serve`], counting accepted connections in `accepted`.
pub(super) async fn serve_counting(
    listener: TcpListener,
    node_id: u64,
    handler: Arc<dyn RpcHandler>,
    limits: RpcLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    accepted: Arc<AtomicUsize>,
) {
    let context = Arc::new(ServerContext {
        node_id,
        handler,
        limits,
    });
    let (stop_sender, stop) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            incoming = listener.accept() => match incoming {
                Ok((stream, remote)) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%remote, "rpc connection accepted");
                    connections.spawn(serve_connection(stream, remote, context.clone(), stop.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting an rpc connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            Some(finished) = connections.join_next(), if !connections.is_empty() => {
                log_connection_task(finished);
            }
        }
    }
    drop(listener);
    let _ = stop_sender.send(true);
    while let Some(finished) = connections.join_next().await {
        log_connection_task(finished);
    }
}

fn log_connection_task(finished: Result<(), tokio::task::JoinError>) {
    if let Err(error) = finished {
        if error.is_panic() {
            tracing::error!(%error, "an rpc connection task panicked");
        }
    }
}

struct ServerContext {
    node_id: u64,
    handler: Arc<dyn RpcHandler>,
    limits: RpcLimits,
}

/// Why a connection's read loop ended.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    Shutdown,
    /// The peer closed, broke the protocol, or the writer failed.
    Peer,
}

async fn serve_connection(
    stream: TcpStream,
    remote: SocketAddr,
    context: Arc<ServerContext>,
    mut stop: watch::Receiver<bool>,
) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%remote, %error, "could not set TCP_NODELAY");
    }
    let greeting = async {
        let (read_half, mut write_half, certificate) = match &context.limits.tls {
            Some(tls) => {
                let (read, write, certificate) = tls.accept(stream).await.map_err(|error| {
                    Refusal::new(Refused::Tls, format!("TLS handshake: {error}"))
                })?;
                (read, write, Some(certificate))
            }
            None => {
                let (read, write) = split_plain(stream);
                (read, write, None)
            }
        };
        let mut reader = FrameReader::new(read_half, HANDSHAKE_MAX_FRAME_BYTES);
        let hello = handshake(&mut reader, &mut write_half, &context, certificate.as_ref()).await?;
        Ok::<_, Refusal>((reader, write_half, hello))
    };
    let (mut reader, write_half, Hello { from, lane, .. }) = tokio::select! {
        () = stopped(&mut stop) => return,
        outcome = tokio::time::timeout(HANDSHAKE_TIMEOUT, greeting) => match outcome {
            Ok(Ok(hello)) => hello,
            Ok(Err(refusal)) => {
                refusal.record(remote);
                return;
            }
            Err(_elapsed) => {
                Refusal::new(Refused::Timeout, format!("no hello within {HANDSHAKE_TIMEOUT:?}"))
                    .record(remote);
                return;
            }
        },
    };
    let _gauge = ConnectionGauge::open("in", lane);
    tracing::debug!(%remote, from, lane = lane.label(), "rpc peer connected");
    reader.set_max_frame_bytes(context.limits.frame_limit());

    let (outgoing, queue) = mpsc::channel(writer::QUEUE_FRAMES);
    let mut writing = tokio::spawn(async move {
        if let Err(error) = writer::run(write_half, queue).await {
            tracing::debug!(%remote, %error, "rpc answer write failed");
        }
    });
    let permits = Arc::new(Semaphore::new(max_concurrent(&context.limits, lane)));
    let running = Arc::new(Running::default());
    let mut requests = JoinSet::new();
    let mut membership_checked = Instant::now();
    let ending = loop {
        let frame = tokio::select! {
            () = stopped(&mut stop) => break Ending::Shutdown,
            () = outgoing.closed() => break Ending::Peer,
            frame = reader.read_frame() => frame,
        };
        match frame {
            Ok(Some(frame))
                if frame.kind == FrameKind::Request
                    && membership_checked.elapsed() >= MEMBERSHIP_RECHECK
                    && !still_member(&context, from, remote, &mut membership_checked) =>
            {
                break Ending::Peer;
            }
            Ok(Some(frame)) if frame.kind == FrameKind::Request => {
                // Only a client that ignores the announced limit waits here, unread.
                let permit = tokio::select! {
                    () = stopped(&mut stop) => break Ending::Shutdown,
                    () = outgoing.closed() => break Ending::Peer,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_closed) => break Ending::Peer,
                    },
                };
                let request_id = frame.request_id;
                let mut entries = running.entries.lock();
                if entries.contains_key(&request_id) {
                    tracing::warn!(%remote, from, request_id, "rpc peer reused a running request id; closing the connection");
                    break Ending::Peer;
                }
                let request = Request { from, frame };
                let task =
                    requests.spawn(request.run(context.clone(), outgoing.clone(), running.clone()));
                entries.insert(request_id, (task, permit));
            }
            Ok(Some(frame)) if frame.kind == FrameKind::Cancel => {
                if running.cancel(frame.request_id) {
                    metrics::counter!(CANCELLED_TOTAL, "lane" => lane.label()).increment(1);
                    tracing::debug!(%remote, from, request_id = frame.request_id, "rpc request cancelled");
                }
            }
            Ok(Some(frame)) => {
                tracing::warn!(%remote, from, kind = ?frame.kind, "rpc peer sent an unexpected frame");
                break Ending::Peer;
            }
            Ok(None) => break Ending::Peer,
            Err(error) => {
                if error.is_protocol_violation() {
                    tracing::warn!(%remote, from, %error, "rpc protocol error; closing the connection");
                } else {
                    tracing::debug!(%remote, from, %error, "rpc connection ended");
                }
                break Ending::Peer;
            }
        }
        while requests.try_join_next().is_some() {}
    };
    if ending == Ending::Shutdown {
        let drain = async { while requests.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, drain).await;
    }
    // Dropping the set aborts requests still running; their answers could not be delivered.
    drop(requests);
    running.entries.lock().clear();
    drop(outgoing);
    if tokio::time::timeout(WRITER_DRAIN, &mut writing)
        .await
        .is_err()
    {
        writing.abort();
    }
    tracing::debug!(%remote, from, "rpc connection closed");
}

/// The concurrent requests a connection of `lane` runs, at least 1 and at most what the
/// handshake can announce.
fn max_concurrent(limits: &RpcLimits, lane: Lane) -> usize {
    limits
        .lane(lane)
        .max_concurrent_requests_per_connection
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize))
}

/// The requests of one connection that are running, by request id: the handle that aborts
/// each and the permit it holds.
#[derive(Default)]
struct Running {
    entries: Mutex<HashMap<u64, (AbortHandle, OwnedSemaphorePermit)>>,
}

impl Running {
    /// Aborts the request and frees its permit now; false if it is not running (any more).
    fn cancel(&self, request_id: u64) -> bool {
        let entry = self.entries.lock().remove(&request_id);
        match entry {
            Some((task, permit)) => {
                task.abort();
                drop(permit);
                true
            }
            None => false,
        }
    }

    /// A request's own end: its answer is queued, so its permit is free.
    fn finish(&self, request_id: u64) {
        let entry = self.entries.lock().remove(&request_id);
        drop(entry);
    }
}

/// Resolves once shutdown is signalled (or the server is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Whether node `from` may keep its connection (checked again at most once a second).
fn still_member(
    context: &ServerContext,
    from: u64,
    remote: SocketAddr,
    checked: &mut Instant,
) -> bool {
    *checked = Instant::now();
    let Some(peers) = &context.limits.peers else {
        return true;
    };
    if peers.admission(from) != PeerAdmission::NotMember {
        return true;
    }
    Refusal::new(
        Refused::NotAMember,
        format!("node {from} is no longer a member of this cluster: closing its connection"),
    )
    .record(remote);
    false
}

/// Why a connection was refused, as `HANDSHAKES_REFUSED_TOTAL` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Malformed,
    Version,
    Tls,
    WrongNode,
    BadSecret,
    NotAMember,
    Starting,
    Timeout,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::Malformed => "malformed",
            Refused::Version => "version",
            Refused::Tls => "tls",
            Refused::WrongNode => "wrong_node",
            Refused::BadSecret => "bad_secret",
            Refused::NotAMember => "not_a_member",
            Refused::Starting => "starting",
            Refused::Timeout => "timeout",
        }
    }
}

/// A refused connection: why, and what the peer is told.
#[derive(Debug)]
struct Refusal {
    why: Refused,
    detail: String,
}

impl Refusal {
    fn new(why: Refused, detail: impl Into<String>) -> Refusal {
        Refusal {
            why,
            detail: detail.into(),
        }
    }

    /// Logs and counts the refusal. A node that is starting refuses its peers for a moment:
    /// that is only worth a debug line.
    fn record(&self, remote: SocketAddr) {
        metrics::counter!(HANDSHAKES_REFUSED_TOTAL, "reason" => self.why.label()).increment(1);
        if self.why == Refused::Starting {
            tracing::debug!(%remote, reason = self.why.label(), detail = %self.detail, "rpc handshake refused");
        } else {
            tracing::warn!(%remote, reason = self.why.label(), detail = %self.detail, "rpc handshake refused");
        }
    }
}

/// Reads the next handshake frame; a closed connection or a broken frame is a refusal.
async fn read_handshake_frame(reader: &mut FrameReader<RpcRead>) -> Result<Frame, Refusal> {
    reader
        .read_frame()
        .await
        .map_err(|error| Refusal::new(Refused::Malformed, error.to_string()))?
        .ok_or_else(|| Refusal::new(Refused::Malformed, "the peer closed during the handshake"))
}

/// Reads the client's hello, checks it (and the proof of the cluster secret that follows it
/// when one is configured), and acknowledges it with the lane's limit; a refusal is answered
/// with its reason before it is returned.
async fn handshake(
    reader: &mut FrameReader<RpcRead>,
    writer: &mut RpcWrite,
    context: &ServerContext,
    certificate: Option<&CertificateDer<'static>>,
) -> Result<Hello, Refusal> {
    match check_hello(reader, writer, context, certificate).await {
        Ok(hello) => {
            let ack = HelloAck {
                node_id: context.node_id,
                max_concurrent_requests: u32::try_from(max_concurrent(&context.limits, hello.lane))
                    .unwrap_or(u32::MAX),
            };
            write_frame(writer, &ack.into_frame())
                .await
                .map_err(|error| {
                    Refusal::new(
                        Refused::Malformed,
                        format!("sending the hello-ack: {error}"),
                    )
                })?;
            Ok(hello)
        }
        Err(refusal) => {
            let refused = Frame::new(
                FrameKind::HelloRefused,
                0,
                0,
                Bytes::from(refusal.detail.clone()),
            );
            let _ = write_frame(writer, &refused).await;
            let _ = writer.shutdown().await;
            Err(refusal)
        }
    }
}

/// The checks of [`handshake`], in order: a hello of this protocol for this node, the proof of
/// the cluster secret, the certificate naming the hello's node, and its membership.
async fn check_hello(
    reader: &mut FrameReader<RpcRead>,
    writer: &mut RpcWrite,
    context: &ServerContext,
    certificate: Option<&CertificateDer<'static>>,
) -> Result<Hello, Refusal> {
    let node_id = context.node_id;
    let frame = read_handshake_frame(reader).await?;
    if frame.kind != FrameKind::Hello {
        return Err(Refusal::new(
            Refused::Malformed,
            format!("expected a hello, got a {:?} frame", frame.kind),
        ));
    }
    let hello =
        Hello::decode(&frame.body, context.limits.protocol).map_err(|error| match error {
            HelloError::Malformed(reason) => Refusal::new(Refused::Malformed, reason),
            HelloError::Version(reason) => Refusal::new(Refused::Version, reason),
        })?;
    if hello.to != node_id {
        return Err(Refusal::new(
            Refused::WrongNode,
            format!("this is node {node_id}, not node {}", hello.to),
        ));
    }
    if let Some(key) = &context.limits.hello_key {
        let challenge = Challenge::new(key, &frame.body)
            .map_err(|reason| Refusal::new(Refused::Malformed, reason))?;
        let challenge_frame =
            Frame::new(FrameKind::Challenge, 0, 0, Bytes::from(challenge.encode()));
        write_frame(writer, &challenge_frame)
            .await
            .map_err(|error| {
                Refusal::new(
                    Refused::Malformed,
                    format!("sending the challenge: {error}"),
                )
            })?;
        let proof = read_handshake_frame(reader).await?;
        if proof.kind != FrameKind::Proof {
            return Err(Refusal::new(
                Refused::BadSecret,
                format!(
                    "expected a proof of the cluster secret, got a {:?} frame",
                    proof.kind
                ),
            ));
        }
        if !challenge.proves_client(key, &frame.body, &proof.body) {
            return Err(Refusal::new(
                Refused::BadSecret,
                format!(
                    "the peer (claiming to be node {}) did not prove this cluster's secret",
                    hello.from
                ),
            ));
        }
    }
    if certificate.is_some_and(|certificate| !certifies_node(certificate, hello.from)) {
        return Err(Refusal::new(
            Refused::WrongNode,
            format!(
                "the client's certificate does not name node {} ({})",
                hello.from,
                node_name(hello.from)
            ),
        ));
    }
    match context
        .limits
        .peers
        .as_ref()
        .map_or(PeerAdmission::Member, |peers| peers.admission(hello.from))
    {
        PeerAdmission::Member => Ok(hello),
        PeerAdmission::NotMember => Err(Refusal::new(
            Refused::NotAMember,
            format!("node {} is not a member of this cluster", hello.from),
        )),
        PeerAdmission::Unknown => Err(Refusal::new(
            Refused::Starting,
            format!("node {node_id} is starting and does not know its cluster yet"),
        )),
    }
}

/// One request being served; its permit is in [`Running`] until its answer is queued.
struct Request {
    from: u64,
    frame: Frame,
}

impl Request {
    async fn run(
        self,
        context: Arc<ServerContext>,
        outgoing: mpsc::Sender<Frame>,
        running: Arc<Running>,
    ) {
        let Request { from, frame } = self;
        let Frame {
            request_id,
            service,
            body,
            ..
        } = frame;
        let handler = context.handler.clone();
        // The handler is called inside the future so a panic while building it is caught too.
        let outcome = AssertUnwindSafe(async move { handler.handle(from, service, body).await })
            .catch_unwind()
            .await;
        let answer = match outcome {
            Ok(Ok(body)) => Frame::new(FrameKind::AnswerOk, request_id, service, body),
            Ok(Err(message)) => error_answer(request_id, service, message),
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(from, service, %message, "an rpc handler panicked");
                error_answer(
                    request_id,
                    service,
                    format!("the handler panicked: {message}"),
                )
            }
        };
        let answer = fit(answer, context.limits.frame_limit());
        let _ = outgoing.send(answer).await;
        running.finish(request_id);
    }
}

fn error_answer(request_id: u64, service: ServiceId, message: String) -> Frame {
    Frame::new(
        FrameKind::AnswerError,
        request_id,
        service,
        Bytes::from(message),
    )
}

/// An answer too large to send becomes an error answer saying so (cut to the limit if need be).
fn fit(answer: Frame, max: usize) -> Frame {
    let size = answer.encoded_len();
    if size <= max {
        return answer;
    }
    tracing::warn!(
        service = answer.service,
        size,
        max,
        "rpc answer exceeds the frame limit"
    );
    let message = if answer.kind == FrameKind::AnswerOk {
        format!("the answer of {size} bytes exceeds the frame limit of {max} bytes")
    } else {
        String::from_utf8_lossy(&answer.body).into_owned()
    };
    let mut body = Bytes::from(message);
    body.truncate(max.saturating_sub(HEADER_BYTES));
    Frame::new(
        FrameKind::AnswerError,
        answer.request_id,
        answer.service,
        body,
    )
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message.to_string()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "unknown panic payload".to_string()
    }
}
