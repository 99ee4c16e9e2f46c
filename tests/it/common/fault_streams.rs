//! Push-stream connections for tests that inject faults: a WebSocket (`GET /v1/ws`,
//! `herald.v1`) and a server-sent event stream that never panic on the way. A node that is
//! killed ends the connection; one that is paused (SIGSTOP) keeps its socket open and says
//! nothing, so every read has a silence deadline: the nodes of these tests ping their sockets
//! and send `: keepalive` comments every second, and a connection silent for [`SILENCE`] is
//! abandoned, as a client with a read timeout abandons it. The stream clients
//! (`fault_stream_queue`, `fault_stream_group`) then connect to the next node and resume.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use super::sse::{take_event, SseEvent};
use super::ws::Socket;

/// A connection silent for this long is abandoned (its node pings or sends a keepalive every
/// second while it runs).
pub const SILENCE: Duration = Duration::from_secs(2);
/// How long opening a connection (the handshake, or the event stream's headers) may take; a
/// paused node accepts the TCP connection and never answers. A group stream joins the group
/// before its headers, through an election if one is under way.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(6);
/// How long one read waits before the client looks at its pending acks, commits and stop flag.
pub const SLICE: Duration = Duration::from_millis(100);
/// How long a frame may take to be sent.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// The two push transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    WebSocket,
    Sse,
}

/// What one read gave.
pub enum Read<T> {
    Item(T),
    /// Nothing within the slice; the connection is not silent for long yet.
    Quiet,
    /// The connection is over (closed, failed, or silent past [`SILENCE`]).
    Ended(String),
}

/// An HTTP client for the acks and commits of event streams: every call has a deadline.
pub fn call_client() -> reqwest::Client {
    herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(3))
        .build()
        .expect("build the HTTP client")
}

/// A WebSocket to one node.
pub struct WsConn {
    socket: Socket,
    last_heard: Instant,
}

impl WsConn {
    /// Opens `GET /v1/ws` on the node at `base_url` (`http://ip:port`).
    pub async fn connect(base_url: &str) -> Result<WsConn, String> {
        let url = format!("{}/v1/ws", base_url.replacen("http://", "ws://", 1));
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|error| format!("{url}: {error}"))?;
        request.headers_mut().insert(
            "sec-websocket-protocol",
            HeaderValue::from_static("herald.v1"),
        );
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(request)).await
        {
            Ok(Ok((socket, _))) => Ok(WsConn {
                socket,
                last_heard: Instant::now(),
            }),
            Ok(Err(error)) => Err(format!("{url}: {error}")),
            Err(_) => Err(format!("{url}: no handshake within {CONNECT_TIMEOUT:?}")),
        }
    }

    pub async fn send(&mut self, frame: &Value) -> Result<(), String> {
        match tokio::time::timeout(
            SEND_TIMEOUT,
            self.socket.send(Message::text(frame.to_string())),
        )
        .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("send: {error}")),
            Err(_) => Err(format!("send: not sent within {SEND_TIMEOUT:?}")),
        }
    }

    /// The next text frame as JSON, within a slice.
    pub async fn next(&mut self) -> Read<Value> {
        match tokio::time::timeout(SLICE, self.socket.next()).await {
            Err(_) if self.last_heard.elapsed() > SILENCE => {
                Read::Ended(format!("silent for {SILENCE:?}"))
            }
            Err(_) => Read::Quiet,
            Ok(None) => Read::Ended("closed".into()),
            Ok(Some(Err(error))) => Read::Ended(format!("read: {error}")),
            Ok(Some(Ok(message))) => {
                self.last_heard = Instant::now();
                match message {
                    Message::Text(text) => match serde_json::from_str(text.as_str()) {
                        Ok(frame) => Read::Item(frame),
                        Err(error) => Read::Ended(format!("a frame that is not JSON: {error}")),
                    },
                    Message::Close(frame) => Read::Ended(format!("close frame {frame:?}")),
                    _ => Read::Quiet,
                }
            }
        }
    }

    /// Sends `frame` and reads until its answer (`ok` or `error`), skipping nothing else: the
    /// answer to a `subscribe` is the first frame of its subscription.
    pub async fn request(&mut self, frame: &Value) -> Result<Value, String> {
        self.send(frame).await?;
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        while Instant::now() < deadline {
            match self.next().await {
                Read::Item(answer) => return Ok(answer),
                Read::Quiet => {}
                Read::Ended(why) => return Err(why),
            }
        }
        Err(format!("no answer to {frame} within {CONNECT_TIMEOUT:?}"))
    }
}

/// A server-sent event stream from one node, parsed as `EventSource` parses it.
pub struct SseConn {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    last_heard: Instant,
}

impl SseConn {
    /// `GET url` as an event stream, with `Last-Event-ID` when given (as `EventSource` sends
    /// the last id it saw on a reconnect). Anything but a 200 is an `Err`.
    pub async fn open(url: &str, last_event_id: Option<&str>) -> Result<SseConn, String> {
        let mut request = super::sse::stream_client().get(url);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = match tokio::time::timeout(CONNECT_TIMEOUT, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(format!("GET {url}: {error}")),
            Err(_) => return Err(format!("GET {url}: no answer within {CONNECT_TIMEOUT:?}")),
        };
        let status = response.status();
        if status != StatusCode::OK {
            let body = tokio::time::timeout(SEND_TIMEOUT, response.text())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            return Err(format!("GET {url}: {status}: {body}"));
        }
        Ok(SseConn {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
            last_heard: Instant::now(),
        })
    }

    /// The next event (comments dropped), within a slice.
    pub async fn next(&mut self) -> Read<SseEvent> {
        if let Some(event) = take_event(&mut self.buffer) {
            return Read::Item(event);
        }
        match tokio::time::timeout(SLICE, self.body.next()).await {
            Err(_) if self.last_heard.elapsed() > SILENCE => {
                Read::Ended(format!("silent for {SILENCE:?}"))
            }
            Err(_) => Read::Quiet,
            Ok(None) => Read::Ended("the stream ended".into()),
            Ok(Some(Err(error))) => Read::Ended(format!("read: {error}")),
            Ok(Some(Ok(bytes))) => {
                self.last_heard = Instant::now();
                self.buffer.push_str(&String::from_utf8_lossy(&bytes));
                match take_event(&mut self.buffer) {
                    Some(event) => Read::Item(event),
                    None => Read::Quiet,
                }
            }
        }
    }
}

/// `(partition, offset)` of a delivered message (a frame's or an event's JSON).
pub fn position(message: &Value) -> Option<(u32, u64)> {
    Some((
        u32::try_from(message["partition"].as_u64()?).ok()?,
        message["offset"].as_u64()?,
    ))
}
