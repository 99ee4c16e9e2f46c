//! Serving the client listener's connections (HTTP/1.1 and HTTP/2, detected, or chosen by ALPN
//! over TLS) with hyper, within time bounds a connection must keep.
//!
//! Every open connection holds one of `max_connections` (`listener`). Without time bounds a
//! client that sends an unfinished request head, or nothing at all (after its TLS handshake
//! too), held its place for good: 20 of them locked every other client out of a node with
//! `--max-connections 20`, `/healthz` included. So:
//! - **request heads**: a connection gets `header_read_timeout` to deliver a request's head,
//!   counted from when it waits for one: from its start (or the end of its TLS handshake) until
//!   its first request, and on HTTP/1.1 after each answer (hyper's header read timeout, which
//!   therefore also ends an idle HTTP/1.1 keep-alive connection);
//! - **idle connections**: one with no request in flight for `idle_timeout` is closed, HTTP/2
//!   with a GOAWAY (HTTP/1.1 ones are closed by the head timeout first when it is shorter);
//! - **vanished peers**: HTTP/2 connections are pinged every `http2_keepalive`, and closed when
//!   a ping is not answered within as long;
//! - **stalled readers**: a connection whose answer (an event stream, a large read) cannot be
//!   written because the client reads nothing for `client_stall` is dropped, counted in
//!   [`STALLED_CONNECTIONS_TOTAL`]. Until then a slow reader is only backpressure: an event
//!   stream is not read further while its events cannot be written (`write_stall`).
//!
//! A request in flight (a long poll, an event stream, a response still being sent) keeps its
//! connection open: those have their own bounds (`request_timeout_ms`, stream limits), and a
//! WebSocket has its own idle timeout. Connections closed by these bounds are counted in
//! [`CONNECTIONS_CLOSED_TOTAL`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, Response};
use axum::Router;
use bytes::Bytes;
use futures::future::BoxFuture;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::server::listener::{ClientStream, LimitedListener};

/// Counter of client connections the node closed for their timing, by `reason`:
/// `header_timeout` (no complete request head in time), `idle_timeout` (no request for
/// `idle_timeout_ms`), `keepalive_timeout` (an HTTP/2 ping not answered).
pub const CONNECTIONS_CLOSED_TOTAL: &str = "herald_http_connections_closed_total";

/// Counter of client connections closed because the client read nothing for
/// `client_stall_timeout_ms` while an answer or frames waited for it, by `transport` (`http`:
/// an event stream or any answer; `ws`: a WebSocket).
pub const STALLED_CONNECTIONS_TOTAL: &str = "herald_http_stalled_connections_total";

/// How long a connection closed for its timing gets to say goodbye (an HTTP/2 GOAWAY) before
/// it is dropped. Nothing is in flight on it by then.
const GOODBYE: Duration = Duration::from_secs(1);

/// The time bounds of client connections (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    pub header_read: Duration,
    pub idle: Duration,
    pub http2_keepalive: Duration,
    /// A connection whose writes wait this long for a client that reads nothing is dropped.
    pub client_stall: Duration,
}

/// Serves `listener`'s connections with `router` until `shutdown` resolves; then stops
/// accepting, asks every connection to finish what it is doing (HTTP/2 GOAWAY, HTTP/1.1 closed
/// after its answer), and returns once all are closed. The caller bounds that wait.
pub async fn serve(
    mut listener: LimitedListener,
    router: Router,
    timeouts: ConnectionTimeouts,
    shutdown: impl Future<Output = ()> + Send,
) {
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            (stream, remote) = axum::serve::Listener::accept(&mut listener) => {
                let connection = Connection {
                    router: router.clone(),
                    remote,
                    timeouts,
                    closing: closed.clone(),
                };
                connections.spawn(connection.serve(stream));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
}

/// What a connection is doing, as its requests and its timer see it.
struct Activity {
    /// Requests whose answer is not completely sent yet.
    in_flight: AtomicUsize,
    /// Whether any request came: until then the head timeout runs from the start.
    requested: AtomicBool,
    /// A request switched protocols (a WebSocket over HTTP/2): the socket bounds itself.
    upgraded: AtomicBool,
    /// When the last request in flight ended (or the connection started).
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn new(now: Instant) -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            requested: AtomicBool::new(false),
            upgraded: AtomicBool::new(false),
            idle_since: Mutex::new(now),
        }
    }

    /// Whether the connection has to go now, and why.
    fn verdict(
        &self,
        started: Instant,
        now: Instant,
        timeouts: &ConnectionTimeouts,
    ) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Acquire) > 0 || self.upgraded.load(Ordering::Acquire) {
            return None;
        }
        if !self.requested.load(Ordering::Acquire) {
            return (now.duration_since(started) >= timeouts.header_read)
                .then_some("header_timeout");
        }
        let idle_since = *self.idle_since.lock();
        (now.duration_since(idle_since) >= timeouts.idle).then_some("idle_timeout")
    }
}

/// A request in flight on its connection, until its answer's body ends (or is dropped).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.requested.store(true, Ordering::Release);
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut idle_since = self.0.idle_since.lock();
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            *idle_since = Instant::now();
        }
    }
}

/// A response body that keeps its request in flight until it is sent (or dropped).
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The service of one connection: the router, with the client's address in every request's
/// extensions (as `ConnectInfo`), and the connection's activity kept.
#[derive(Clone)]
struct ConnectionService {
    router: Router,
    remote: SocketAddr,
    activity: Arc<Activity>,
}

impl tower::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        // An HTTP/2 extended CONNECT (RFC 8441) is a WebSocket: it lives on past its answer.
        if request.method() == Method::CONNECT {
            self.activity.upgraded.store(true, Ordering::Release);
        }
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(self.remote));
        let answer = tower::ServiceExt::oneshot(self.router.clone(), request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(TrackedBody {
                    inner: body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

struct Connection {
    router: Router,
    remote: SocketAddr,
    timeouts: ConnectionTimeouts,
    closing: watch::Receiver<bool>,
}

impl Connection {
    async fn serve(mut self, stream: ClientStream) {
        let started = Instant::now();
        let stall = stream.write_stall();
        let activity = Arc::new(Activity::new(started));
        let service = ConnectionService {
            router: self.router.clone(),
            remote: self.remote,
            activity: activity.clone(),
        };
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.timeouts.header_read)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(self.timeouts.http2_keepalive)
            .keep_alive_timeout(self.timeouts.http2_keepalive)
            // WebSockets over HTTP/2 (RFC 8441).
            .enable_connect_protocol();
        let connection = builder.serve_connection_with_upgrades(
            TokioIo::new(stream),
            TowerToHyperService::new(service),
        );
        let mut connection = std::pin::pin!(connection);
        // Checked a few times per bound, so a connection goes at most a quarter late.
        let period = (self
            .timeouts
            .header_read
            .min(self.timeouts.idle)
            .min(self.timeouts.client_stall)
            / 4)
        .clamp(Duration::from_millis(25), Duration::from_secs(1));
        let mut ticks = tokio::time::interval_at(started + period, period);
        let mut closed_because: Option<&'static str> = None;
        let mut drop_at: Option<Instant> = None;
        let mut shutting_down = false;
        loop {
            tokio::select! {
                outcome = connection.as_mut() => {
                    if let Err(error) = outcome {
                        if closed_because.is_none() {
                            closed_because = timed_out(error.as_ref());
                        }
                        tracing::debug!(remote = %self.remote, %error, "client connection ended");
                    }
                    break;
                }
                changed = self.closing.changed(), if !shutting_down => {
                    shutting_down = true;
                    if changed.is_ok() {
                        connection.as_mut().graceful_shutdown();
                    }
                }
                _ = ticks.tick() => {
                    let now = Instant::now();
                    if drop_at.is_some_and(|at| now >= at) {
                        break;
                    }
                    if stall
                        .blocked_for(now)
                        .is_some_and(|blocked| blocked >= self.timeouts.client_stall)
                    {
                        // Nothing can be written to it, a goodbye neither: dropped at once.
                        metrics::counter!(STALLED_CONNECTIONS_TOTAL, "transport" => "http")
                            .increment(1);
                        tracing::debug!(remote = %self.remote, "client connection dropped: it reads nothing");
                        break;
                    }
                    if closed_because.is_none() {
                        if let Some(reason) = activity.verdict(started, now, &self.timeouts) {
                            closed_because = Some(reason);
                            drop_at = Some(now + GOODBYE);
                            connection.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
        }
        if let Some(reason) = closed_because {
            metrics::counter!(CONNECTIONS_CLOSED_TOTAL, "reason" => reason).increment(1);
            tracing::debug!(remote = %self.remote, reason, "client connection closed for its timing");
        }
    }
}

/// The reason of a connection hyper ended for its timing: its head timer (HTTP/1.1, the only
/// timeout hyper's server counts as one) or an unanswered keep-alive ping (HTTP/2).
fn timed_out(error: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<&'static str> {
    let hyper_error = error.downcast_ref::<hyper::Error>()?;
    if hyper_error.is_timeout() {
        return Some("header_timeout");
    }
    // hyper says so only in the cause's text.
    let mut source = std::error::Error::source(hyper_error);
    while let Some(cause) = source {
        if cause.to_string() == "keep-alive timed out" {
            return Some("keepalive_timeout");
        }
        source = cause.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const TIMEOUTS: ConnectionTimeouts = ConnectionTimeouts {
        header_read: Duration::from_millis(300),
        idle: Duration::from_millis(600),
        http2_keepalive: Duration::from_secs(20),
        client_stall: Duration::from_secs(30),
    };

    async fn start(app: Router) -> (SocketAddr, watch::Sender<bool>) {
        let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = inner.local_addr().expect("address");
        let listener = LimitedListener::new(inner, 8, None);
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(listener, app, TIMEOUTS, async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|stop| *stop).await;
        }));
        (address, stop)
    }

    /// Reads until the server closes; the bytes read and how long it took.
    async fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, Duration) {
        let started = Instant::now();
        let mut all = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
                .await
                .expect("closed within 5 s")
                .unwrap_or(0);
            if read == 0 {
                return (all, started.elapsed());
            }
            all.extend_from_slice(&buffer[..read]);
        }
    }

    #[tokio::test]
    async fn handlers_see_the_client_address() {
        let app = Router::new().route(
            "/hello",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { format!("hi {peer}") }),
        );
        let (address, _stop) = start(app).await;
        let mut stream = TcpStream::connect(address).await.expect("connect");
        let local = stream.local_addr().expect("local address");
        stream
            .write_all(b"GET /hello HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
            .await
            .expect("write the request");
        let (answer, _) = read_to_close(&mut stream).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&format!("hi {local}")), "{answer}");
    }

    #[tokio::test]
    async fn silent_slow_and_idle_connections_are_closed_in_time() {
        let app = Router::new().route("/hello", get(|| async { "hi" }));
        let (address, _stop) = start(app).await;
        let opened = Instant::now();
        let mut silent = TcpStream::connect(address).await.unwrap();
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET /hello HTTP/1.1\r\nhost: te")
            .await
            .unwrap();
        let mut idle = TcpStream::connect(address).await.unwrap();
        idle.write_all(b"GET /hello HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        for stream in [&mut silent, &mut slow] {
            let (read, _) = read_to_close(stream).await;
            assert!(
                read.is_empty() || read.starts_with(b"HTTP/1.1 408"),
                "{read:?}"
            );
        }
        let (read, _) = read_to_close(&mut idle).await;
        assert!(read.starts_with(b"HTTP/1.1 200"), "{read:?}");
        // All closed after the head timeout, well before anyone's patience runs out.
        let took = opened.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_long_answer_keeps_its_connection_past_the_timeouts() {
        let app = Router::new().route(
            "/slow",
            get(|| async {
                let chunks = futures::stream::unfold(0, |sent| async move {
                    if sent == 4 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Some((Ok::<_, Infallible>(Bytes::from_static(b"tick\n")), sent + 1))
                });
                Body::from_stream(chunks)
            }),
        );
        let (address, _stop) = start(app).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        // 1.2 s of answer, twice the idle timeout: all of it arrives.
        let (read, _) = read_to_close(&mut stream).await;
        let text = String::from_utf8_lossy(&read);
        assert_eq!(text.matches("tick").count(), 4, "{text}");
    }
}
