//! WebSocket clients (`GET /v1/ws`, subprotocol `herald.v1`): connect, send frames, read
//! frames, subscriptions and close frames, each wait with a deadline.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{poll, Server};

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long one expected frame may take to arrive.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(20);
/// How long a test watches for frames that must not come (credit withheld).
pub const QUIET_WINDOW: Duration = Duration::from_millis(700);

pub fn ws_request(
    server: &Server,
    protocol: Option<&str>,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut request = format!("ws://{}/v1/ws", server.http_addr())
        .into_client_request()
        .expect("a WebSocket request");
    if let Some(protocol) = protocol {
        request.headers_mut().insert(
            "sec-websocket-protocol",
            protocol.parse().expect("a header value"),
        );
    }
    request
}

pub async fn connect(server: &Server) -> Socket {
    let attempt = tokio::time::timeout(
        FRAME_DEADLINE,
        tokio_tungstenite::connect_async(ws_request(server, Some("herald.v1"))),
    )
    .await;
    let (socket, response) = match attempt {
        Ok(Ok(connected)) => connected,
        Ok(Err(error)) => server.fail(&format!("WebSocket handshake failed: {error}")),
        Err(_) => server.fail("WebSocket handshake timed out"),
    };
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .map(|v| v.as_bytes()),
        Some(&b"herald.v1"[..])
    );
    socket
}

/// Connects once a place under the connection limit is free.
pub async fn connect_eventually(server: &Server) -> Socket {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            match tokio_tungstenite::connect_async(ws_request(server, Some("herald.v1"))).await {
                Ok((socket, _)) => Ok(socket),
                Err(error) => Err(format!("{error}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&format!("no WebSocket within 10 s: {seen}")))
}

pub async fn send(socket: &mut Socket, frame: Value) {
    socket
        .send(Message::text(frame.to_string()))
        .await
        .expect("send a frame");
}

/// The next text or binary frame (pings and pongs skipped); fails on a close or after the
/// deadline.
pub async fn next_data_frame(socket: &mut Socket) -> Message {
    let deadline = tokio::time::Instant::now() + FRAME_DEADLINE;
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("a frame within the deadline")
            .expect("the socket is open")
            .expect("a readable frame");
        match message {
            Message::Ping(_) | Message::Pong(_) => continue,
            other => return other,
        }
    }
}

/// The next text frame as JSON (pings skipped); fails on a close or after the deadline.
pub async fn next_frame(socket: &mut Socket) -> Value {
    match next_data_frame(socket).await {
        Message::Text(text) => serde_json::from_str(text.as_str()).expect("JSON"),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

/// Reads until the close frame; answers its code and reason. Other frames are skipped.
pub async fn next_close(socket: &mut Socket) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + FRAME_DEADLINE;
    for _ in 0..100_000 {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("a close frame within the deadline");
        match message {
            Some(Ok(Message::Close(Some(frame)))) => {
                return (u16::from(frame.code), frame.reason.to_string())
            }
            Some(Ok(Message::Close(None))) => panic!("a close frame without a code"),
            Some(Ok(_)) => continue,
            Some(Err(error)) => panic!("the socket failed before its close frame: {error}"),
            None => panic!("the socket ended without a close frame"),
        }
    }
    panic!("no close frame in 100000 frames")
}

/// Reads `messages` frames of subscription `id` until `count` messages came.
pub async fn receive(socket: &mut Socket, id: &str, count: usize) -> Vec<Value> {
    let mut received = Vec::new();
    while received.len() < count {
        let frame = next_frame(socket).await;
        assert_eq!(frame["op"], "messages", "unexpected frame {frame}");
        assert_eq!(frame["id"], id);
        received.extend(
            frame["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .cloned(),
        );
    }
    assert_eq!(received.len(), count, "more messages than expected");
    received
}

/// Asserts no text frame arrives within the quiet window.
pub async fn assert_quiet(socket: &mut Socket) {
    let deadline = tokio::time::Instant::now() + QUIET_WINDOW;
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Err(_) => return,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(other) => panic!("expected nothing, got {other:?}"),
        }
    }
}

pub fn values(messages: &[Value]) -> Vec<i64> {
    messages
        .iter()
        .map(|m| m["value"]["n"].as_i64().expect("n"))
        .collect()
}

pub fn batch(range: std::ops::Range<i64>, partition: Option<u32>) -> Value {
    let messages: Vec<Value> = range
        .map(|n| match partition {
            Some(p) => json!({"value": {"n": n}, "partition": p}),
            None => json!({"value": {"n": n}}),
        })
        .collect();
    json!({"messages": messages})
}

pub async fn subscribe(socket: &mut Socket, frame: Value) {
    let id = frame["id"].clone();
    send(socket, frame).await;
    let answer = next_frame(socket).await;
    assert_eq!(answer, json!({"op": "ok", "id": id}));
}
