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

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{AbortHandle, JoinSet};

use super::frame::{
    write_frame, Frame, FrameKind, FrameReader, Hello, HelloAck, HANDSHAKE_MAX_FRAME_BYTES,
    HEADER_BYTES,
};
use super::tls::{certifies_node, node_name, split_plain, RpcRead, RpcWrite};
use super::{writer, ConnectionGauge, Lane, RpcHandler, RpcLimits, ServiceId, CANCELLED_TOTAL};
use rustls::pki_types::CertificateDer;

/// A client that connected must say hello within this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// On shutdown, requests already running get this long to answer before they are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// On close, queued answers get this long to reach a peer that may have stopped reading.
const WRITER_DRAIN: Duration = Duration::from_secs(1);
/// After a failed accept (out of file descriptors, typically), before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

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
                let (read, write, certificate) = tls
                    .accept(stream)
                    .await
                    .map_err(|error| format!("TLS handshake: {error}"))?;
                (read, write, Some(certificate))
            }
            None => {
                let (read, write) = split_plain(stream);
                (read, write, None)
            }
        };
        let mut reader = FrameReader::new(read_half, HANDSHAKE_MAX_FRAME_BYTES);
        let hello = handshake(&mut reader, &mut write_half, &context, certificate.as_ref()).await?;
        Ok::<_, String>((reader, write_half, hello))
    };
    let (mut reader, write_half, Hello { from, lane, .. }) = tokio::select! {
        () = stopped(&mut stop) => return,
        outcome = tokio::time::timeout(HANDSHAKE_TIMEOUT, greeting) => match outcome {
            Ok(Ok(hello)) => hello,
            Ok(Err(problem)) => {
                tracing::warn!(%remote, %problem, "rpc handshake failed");
                return;
            }
            Err(_elapsed) => {
                tracing::warn!(%remote, "rpc handshake timed out");
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
    let ending = loop {
        let frame = tokio::select! {
            () = stopped(&mut stop) => break Ending::Shutdown,
            () = outgoing.closed() => break Ending::Peer,
            frame = reader.read_frame() => frame,
        };
        match frame {
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

/// Reads the client's hello and acknowledges it with the lane's limit, or refuses it with a
/// reason; returns the hello.
async fn handshake(
    reader: &mut FrameReader<RpcRead>,
    writer: &mut RpcWrite,
    context: &ServerContext,
    certificate: Option<&CertificateDer<'static>>,
) -> Result<Hello, String> {
    let node_id = context.node_id;
    let frame = reader
        .read_frame()
        .await
        .map_err(|error| error.to_string())?
        .ok_or_else(|| "the peer closed before saying hello".to_string())?;
    if frame.kind != FrameKind::Hello {
        return Err(format!("expected a hello, got a {:?} frame", frame.kind));
    }
    let refusal = match Hello::decode(&frame.body) {
        Ok(hello)
            if certificate.is_some_and(|certificate| !certifies_node(certificate, hello.from)) =>
        {
            format!(
                "the client's certificate does not name node {} ({})",
                hello.from,
                node_name(hello.from)
            )
        }
        Ok(hello) if hello.to == node_id => {
            let ack = HelloAck {
                node_id,
                max_concurrent_requests: u32::try_from(max_concurrent(&context.limits, hello.lane))
                    .unwrap_or(u32::MAX),
            };
            write_frame(writer, &ack.into_frame())
                .await
                .map_err(|error| format!("sending the hello-ack: {error}"))?;
            return Ok(hello);
        }
        Ok(hello) => format!("this is node {node_id}, not node {}", hello.to),
        Err(reason) => reason,
    };
    let refused = Frame::new(FrameKind::HelloRefused, 0, 0, Bytes::from(refusal.clone()));
    let _ = write_frame(writer, &refused).await;
    let _ = writer.shutdown().await;
    Err(format!("refused: {refusal}"))
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
