//! The client listener with a connection limit, and TLS (`tls.rs`) when configured.
//!
//! Every open connection costs a file descriptor, socket buffers and a task; without a bound, a
//! client that opens connections and never closes them exhausts the node's descriptors, and then
//! raft's own connections fail too. Past `max_connections`, a new connection is still accepted
//! (so the client is told, not left in the kernel's backlog), answered one
//! `503 overloaded` problem with `Retry-After` and `Connection: close`, and closed; the
//! connections already open are not disturbed. How long an admitted connection may keep its
//! place without sending requests is `connections`' business.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::api::problem::ApiError;
use crate::api::server::tls::TlsAcceptor;
use crate::api::server::write_stall::WriteStall;
use crate::broker::ErrorCode;

/// Gauge of open client connections.
pub const OPEN_CONNECTIONS: &str = "herald_http_connections";
/// Counter of connections refused because the node was at `max_connections`.
pub const REFUSED_CONNECTIONS_TOTAL: &str = "herald_http_connections_refused_total";

/// How long a refused connection's request may take to arrive before the answer is sent anyway.
const REFUSAL_READ_WAIT: Duration = Duration::from_millis(200);
/// How long writing the refusal may take before the connection is dropped.
const REFUSAL_WRITE_WAIT: Duration = Duration::from_secs(1);

/// A TCP listener that admits at most `max_connections` open connections at once, through TLS
/// when it is configured.
pub struct LimitedListener {
    admission: Admission,
    tls: Option<TlsGate>,
}

/// The TCP listener and its limit.
struct Admission {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    max_connections: usize,
}

/// Connections in their TLS handshakes (each in its own task) come back through a channel.
struct TlsGate {
    acceptor: TlsAcceptor,
    ready_sender: mpsc::Sender<(ClientStream, SocketAddr)>,
    ready: mpsc::Receiver<(ClientStream, SocketAddr)>,
}

/// Handshaken connections waiting for the server to take them; handshakes past it wait.
const READY_CONNECTIONS: usize = 256;

impl LimitedListener {
    pub fn new(
        inner: TcpListener,
        max_connections: usize,
        tls: Option<TlsAcceptor>,
    ) -> LimitedListener {
        let max_connections = max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let tls = tls.map(|acceptor| {
            let (ready_sender, ready) = mpsc::channel(READY_CONNECTIONS);
            TlsGate {
                acceptor,
                ready_sender,
                ready,
            }
        });
        LimitedListener {
            admission: Admission {
                inner,
                permits: Arc::new(Semaphore::new(max_connections)),
                max_connections,
            },
            tls,
        }
    }
}

impl Admission {
    /// The next admitted TCP connection (under the limit; those over it are answered 503).
    async fn admit(&mut self) -> (CountedStream, SocketAddr) {
        loop {
            let (stream, remote) = axum::serve::Listener::accept(&mut self.inner).await;
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%remote, %error, "could not set TCP_NODELAY");
            }
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    metrics::gauge!(OPEN_CONNECTIONS).increment(1.0);
                    return (
                        CountedStream {
                            stream,
                            _permit: permit,
                            stall: Arc::new(WriteStall::default()),
                        },
                        remote,
                    );
                }
                Err(_) => {
                    metrics::counter!(REFUSED_CONNECTIONS_TOTAL).increment(1);
                    tracing::debug!(%remote, "connection refused: at max_connections");
                    tokio::spawn(refuse(stream, self.max_connections));
                }
            }
        }
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = ClientStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let Some(gate) = self.tls.as_mut() else {
            let (stream, remote) = self.admission.admit().await;
            return (ClientStream::Plain(stream), remote);
        };
        loop {
            tokio::select! {
                Some(ready) = gate.ready.recv() => return ready,
                (stream, remote) = self.admission.admit() => {
                    let acceptor = gate.acceptor.clone();
                    let ready = gate.ready_sender.clone();
                    tokio::spawn(async move {
                        if let Some(stream) = acceptor.accept(stream).await {
                            let _ = ready.send((stream, remote)).await;
                        }
                    });
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.admission.inner.local_addr()
    }
}

/// Answers a connection over the limit with one 503 and closes it. The request is read first
/// (briefly), so the client sees the answer rather than a reset.
async fn refuse(mut stream: TcpStream, max_connections: usize) {
    let mut request = [0u8; 4096];
    let _ = tokio::time::timeout(REFUSAL_READ_WAIT, stream.read(&mut request)).await;
    let problem = ApiError::new(
        ErrorCode::Overloaded,
        format!("the node has its maximum of {max_connections} open connections; retry later or on another node"),
    )
    .problem();
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {}\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        crate::api::problem::PROBLEM_JSON,
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(REFUSAL_WRITE_WAIT, write).await;
}

/// An admitted connection: holds its place under the limit until it closes.
pub struct CountedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Whether writes wait for the client (it reads nothing), and since when.
    stall: Arc<WriteStall>,
}

impl CountedStream {
    /// Reads the first bytes without taking them (to tell TLS from plaintext).
    pub async fn peek(&self, buffer: &mut [u8]) -> io::Result<usize> {
        self.stream.peek(buffer).await
    }
}

/// A client connection as the HTTP server sees it: plain, or TLS over it.
pub enum ClientStream {
    Plain(CountedStream),
    Tls(Box<tokio_rustls::server::TlsStream<CountedStream>>),
}

impl ClientStream {
    /// The connection's write state, for its timer.
    pub fn write_stall(&self) -> Arc<WriteStall> {
        match self {
            ClientStream::Plain(stream) => stream.stall.clone(),
            ClientStream::Tls(stream) => stream.get_ref().0.stall.clone(),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_read(context, buffer),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(context, buffer),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_write(context, buffer),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(context, buffer),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_flush(context),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_shutdown(context),
            ClientStream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(context),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(stream) => Pin::new(stream).poll_write_vectored(context, buffers),
            ClientStream::Tls(stream) => {
                Pin::new(stream.as_mut()).poll_write_vectored(context, buffers)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientStream::Plain(stream) => stream.is_write_vectored(),
            ClientStream::Tls(stream) => stream.is_write_vectored(),
        }
    }
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        metrics::gauge!(OPEN_CONNECTIONS).decrement(1.0);
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(context, buffer)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(context, buffer);
        self.stall.record(&poll);
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(context);
        self.stall.record(&poll);
        poll
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(context, buffers);
        self.stall.record(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use axum::Router;

    async fn request_on(stream: &mut TcpStream) -> String {
        stream
            .write_all(b"GET /hello HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .expect("write the request");
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        // Read until the head and a body of known length are in (or the peer closes).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let read = tokio::time::timeout_at(deadline, stream.read(&mut buffer))
                .await
                .expect("an answer within 5 s")
                .expect("read");
            answer.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&answer);
            if read == 0
                || (text.contains("\r\n\r\n") && text.ends_with("}"))
                || text.ends_with("hi")
            {
                return text.into_owned();
            }
        }
    }

    #[tokio::test]
    async fn connections_past_the_limit_get_one_503_and_open_ones_keep_working() {
        let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = inner.local_addr().expect("address");
        let listener = LimitedListener::new(inner, 2, None);
        let app = Router::new().route("/hello", get(|| async { "hi" }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let mut first = TcpStream::connect(address).await.expect("connect 1");
        let mut second = TcpStream::connect(address).await.expect("connect 2");
        assert!(request_on(&mut first).await.starts_with("HTTP/1.1 200"));
        assert!(request_on(&mut second).await.starts_with("HTTP/1.1 200"));

        let mut third = TcpStream::connect(address).await.expect("connect 3");
        let refused = request_on(&mut third).await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(refused.contains("retry-after: 1"), "{refused}");
        assert!(refused.contains("\"code\":\"overloaded\""), "{refused}");

        // The admitted connections are undisturbed, and a closed one frees its place.
        assert!(request_on(&mut first).await.starts_with("HTTP/1.1 200"));
        drop(second);
        let mut fourth = None;
        for _ in 0..100 {
            let mut stream = TcpStream::connect(address).await.expect("connect 4");
            if request_on(&mut stream).await.starts_with("HTTP/1.1 200") {
                fourth = Some(stream);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(fourth.is_some(), "a closed connection's place is reused");
        server.abort();
    }
}
