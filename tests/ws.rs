//! The WebSocket transport (`GET /v1/ws`, subprotocol `herald.v1`) against the real binary:
//! publish, subscribe with credit, resume tokens, slow readers, bad frames and shutdown.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{poll, Server};
use futures::{SinkExt, StreamExt};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long one expected frame may take to arrive.
const FRAME_DEADLINE: Duration = Duration::from_secs(20);
/// How long a test watches for frames that must not come (credit withheld).
const QUIET_WINDOW: Duration = Duration::from_millis(700);

fn ws_request(
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

async fn connect(server: &Server) -> Socket {
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
async fn connect_eventually(server: &Server) -> Socket {
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

async fn send(socket: &mut Socket, frame: Value) {
    socket
        .send(Message::text(frame.to_string()))
        .await
        .expect("send a frame");
}

/// The next text frame as JSON (pings skipped); fails on a close or after the deadline.
async fn next_frame(socket: &mut Socket) -> Value {
    let deadline = tokio::time::Instant::now() + FRAME_DEADLINE;
    loop {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("a frame within the deadline")
            .expect("the socket is open")
            .expect("a readable frame");
        match message {
            Message::Text(text) => return serde_json::from_str(text.as_str()).expect("JSON"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

/// Reads until the close frame; answers its code and reason. Other frames are skipped.
async fn next_close(socket: &mut Socket) -> (u16, String) {
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
async fn receive(socket: &mut Socket, id: &str, count: usize) -> Vec<Value> {
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
async fn assert_quiet(socket: &mut Socket) {
    let deadline = tokio::time::Instant::now() + QUIET_WINDOW;
    loop {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Err(_) => return,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(other) => panic!("expected nothing, got {other:?}"),
        }
    }
}

fn values(messages: &[Value]) -> Vec<i64> {
    messages
        .iter()
        .map(|m| m["value"]["n"].as_i64().expect("n"))
        .collect()
}

fn batch(range: std::ops::Range<i64>, partition: Option<u32>) -> Value {
    let messages: Vec<Value> = range
        .map(|n| match partition {
            Some(p) => json!({"value": {"n": n}, "partition": p}),
            None => json!({"value": {"n": n}}),
        })
        .collect();
    json!({"messages": messages})
}

async fn subscribe(socket: &mut Socket, frame: Value) {
    let id = frame["id"].clone();
    send(socket, frame).await;
    let answer = next_frame(socket).await;
    assert_eq!(answer, json!({"op": "ok", "id": id}));
}

#[tokio::test]
async fn published_messages_are_read_over_http_and_subscribers_get_them_in_order() {
    let server = Server::start().await;
    server.create_topic("live", 1).await;
    let mut socket = connect(&server).await;

    send(
        &mut socket,
        json!({"op": "publish", "id": "p1", "topic": "live",
               "messages": [{"value": {"n": 0}}, {"value": {"n": 1}, "key": "k"}, {"value": {"n": 2}}]}),
    )
    .await;
    let published = next_frame(&mut socket).await;
    assert_eq!(published["op"], "published", "{published}");
    assert_eq!(published["id"], "p1");
    let offsets: Vec<u64> = published["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| o["offset"].as_u64().expect("an offset"))
        .collect();
    assert_eq!(offsets, vec![0, 1, 2]);

    let read = server.read_all("live", 0).await;
    assert_eq!(read.len(), 3);
    assert_eq!(read[1].key.as_deref(), Some("k"));

    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "s", "topic": "live", "from": "earliest"}),
    )
    .await;
    let first = receive(&mut socket, "s", 3).await;
    assert_eq!(values(&first), vec![0, 1, 2]);
    assert_eq!(first[2]["resume"], "0:2");
    assert_eq!(first[2]["offset"], 2);

    // Produced over HTTP after subscribing: pushed as they are written.
    server.produce_ok("live", &batch(3..5, None)).await;
    let later = receive(&mut socket, "s", 2).await;
    assert_eq!(values(&later), vec![3, 4]);

    // A bad publish is refused the same way as over HTTP, and the socket stays open.
    send(
        &mut socket,
        json!({"op": "publish", "id": "p2", "topic": "live", "messages": []}),
    )
    .await;
    let refused = next_frame(&mut socket).await;
    assert_eq!(refused["op"], "error", "{refused}");
    assert_eq!(refused["id"], "p2");
    assert_eq!(refused["error"]["code"], "invalid_request");
    assert_eq!(refused["error"]["status"], 400);

    // Closed by the client: the node lets go of the socket.
    socket.close(None).await.expect("close");
    let released = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            match server.metric("herald_ws_connections", &[]).await {
                Some(0.0) => Ok(()),
                other => Err(format!("open sockets: {other:?}")),
            }
        },
    )
    .await;
    released.unwrap_or_else(|seen| server.fail(&seen));
}

#[tokio::test]
async fn credit_limits_what_is_delivered_until_more_is_granted() {
    let server = Server::start().await;
    server.create_topic("credited", 1).await;
    server.produce_ok("credited", &batch(0..12, None)).await;
    let mut socket = connect(&server).await;

    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "c", "topic": "credited", "from": "earliest", "credit": 5}),
    )
    .await;
    let first = receive(&mut socket, "c", 5).await;
    assert_eq!(values(&first), vec![0, 1, 2, 3, 4]);
    assert_quiet(&mut socket).await;

    send(
        &mut socket,
        json!({"op": "credit", "id": "c", "messages": 3}),
    )
    .await;
    let more = receive(&mut socket, "c", 3).await;
    assert_eq!(values(&more), vec![5, 6, 7]);
    assert_quiet(&mut socket).await;

    // Unsubscribed: granted credit delivers nothing more.
    send(&mut socket, json!({"op": "unsubscribe", "id": "c"})).await;
    assert_eq!(
        next_frame(&mut socket).await,
        json!({"op": "ok", "id": "c"})
    );
    send(
        &mut socket,
        json!({"op": "credit", "id": "c", "messages": 3}),
    )
    .await;
    let refused = next_frame(&mut socket).await;
    assert_eq!(refused["op"], "error");
    assert_eq!(refused["error"]["code"], "not_found");
}

#[tokio::test]
async fn resume_tokens_continue_exactly_after_a_reconnect() {
    let server = Server::start().await;
    server.create_topic("resumed", 2).await;
    for partition in 0..2u32 {
        let base = i64::from(partition) * 100;
        server
            .produce_ok("resumed", &batch(base..base + 5, Some(partition)))
            .await;
    }
    let mut first = connect(&server).await;
    subscribe(
        &mut first,
        json!({"op": "subscribe", "id": "r", "topic": "resumed", "from": "earliest", "credit": 6}),
    )
    .await;
    let seen = receive(&mut first, "r", 6).await;
    first.close(None).await.expect("close");

    // The last token per partition is what a client keeps.
    let mut last: BTreeMap<u32, String> = BTreeMap::new();
    let mut before: Vec<i64> = Vec::new();
    for message in &seen {
        let partition = message["partition"].as_u64().expect("partition") as u32;
        last.insert(
            partition,
            message["resume"].as_str().expect("token").to_string(),
        );
        before.push(message["value"]["n"].as_i64().expect("n"));
    }
    for partition in 0..2u32 {
        let base = i64::from(partition) * 100;
        server
            .produce_ok("resumed", &batch(base + 5..base + 8, Some(partition)))
            .await;
    }

    let mut second = connect(&server).await;
    let tokens: Vec<String> = last.values().cloned().collect();
    subscribe(
        &mut second,
        json!({"op": "subscribe", "id": "r2", "topic": "resumed", "from": tokens}),
    )
    .await;
    // 16 messages in all, 6 seen before.
    let after = receive(&mut second, "r2", 10).await;
    let mut all: Vec<i64> = before.into_iter().chain(values(&after)).collect();
    all.sort_unstable();
    let expected: Vec<i64> = (0..8).chain(100..108).collect();
    assert_eq!(all, expected, "nothing missed, nothing repeated");
    // Within a partition, in offset order.
    for partition in 0..2u64 {
        let offsets: Vec<u64> = after
            .iter()
            .filter(|m| m["partition"] == partition)
            .map(|m| m["offset"].as_u64().expect("offset"))
            .collect();
        assert!(offsets.windows(2).all(|w| w[1] == w[0] + 1), "{offsets:?}");
    }
    assert_quiet(&mut second).await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_closed_1008_and_others_keep_working() {
    let server = Server::start_with(&[
        "--ws-max-frame-bytes",
        "4096",
        "--ws-max-outbound-bytes",
        "65536",
    ])
    .await;
    server.create_topic("firehose", 1).await;
    let value = "x".repeat(1000);
    let messages: Vec<Value> = (0..500).map(|_| json!({"value": value})).collect();
    let body = json!({"messages": messages});

    // A client with a small receive window that never reads after subscribing.
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("a small receive buffer");
    let stream = socket
        .connect(server.http_addr().parse().expect("an address"))
        .await
        .expect("connect");
    let (mut stalled, _) = tokio_tungstenite::client_async(
        ws_request(&server, Some("herald.v1")),
        MaybeTlsStream::Plain(stream),
    )
    .await
    .expect("handshake");
    subscribe(
        &mut stalled,
        json!({"op": "subscribe", "id": "all", "topic": "firehose", "from": "earliest", "credit": 1_000_000}),
    )
    .await;

    let closed = poll(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let closed = server
                .metric("herald_ws_closed_total", &[("code", "1008")])
                .await
                .unwrap_or(0.0);
            if closed >= 1.0 {
                return Ok(closed);
            }
            // More data until the node gives up on the client (8 MB at most).
            let produced = server
                .metric(
                    "herald_ws_frames_total",
                    &[("direction", "out"), ("op", "messages")],
                )
                .await
                .unwrap_or(0.0);
            server.produce_ok("firehose", &body).await;
            Err(format!("not closed yet; {produced} messages frames sent"))
        },
    )
    .await;
    if let Err(seen) = closed {
        server.fail(&format!("the stalled client was not cut off: {seen}"));
    }
    assert!(
        server
            .metric("herald_ws_outbound_overflows_total", &[])
            .await
            .unwrap_or(0.0)
            >= 1.0
    );

    // Another socket is served as before.
    let mut other = connect(&server).await;
    send(
        &mut other,
        json!({"op": "publish", "id": "p", "topic": "firehose", "messages": [{"value": 1}]}),
    )
    .await;
    assert_eq!(next_frame(&mut other).await["op"], "published");
    drop(stalled);
}

#[tokio::test]
async fn bad_frames_get_errors_or_a_close_and_the_node_serves_other_sockets() {
    let server =
        Server::start_with(&["--ws-max-frame-bytes", "4096", "--ws-max-connections", "3"]).await;
    server.create_topic("solid", 1).await;

    // Handshakes: without the subprotocol, 400 problem+json.
    match tokio_tungstenite::connect_async(ws_request(&server, None)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 400);
        }
        other => panic!(
            "expected a 400 handshake, got {:?}",
            other.map(|(_, r)| r.status())
        ),
    }
    let plain = server.get("/v1/ws").await;
    assert_eq!(plain.status(), 400);
    assert_eq!(
        plain.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/problem+json"[..])
    );

    let mut socket = connect(&server).await;
    send(&mut socket, json!({"op": "dance", "id": "u"})).await;
    let unknown = next_frame(&mut socket).await;
    assert_eq!(unknown["op"], "error");
    assert_eq!(unknown["id"], "u");
    assert_eq!(unknown["error"]["code"], "invalid_request");

    send(&mut socket, json!({"op": "subscribe", "id": "m"})).await;
    let missing_field = next_frame(&mut socket).await;
    assert_eq!(missing_field["id"], "m");
    assert_eq!(missing_field["error"]["code"], "invalid_request");

    send(
        &mut socket,
        json!({"op": "subscribe", "id": "t", "topic": "nope"}),
    )
    .await;
    let missing_topic = next_frame(&mut socket).await;
    assert_eq!(missing_topic["id"], "t");
    assert_eq!(missing_topic["error"]["code"], "topic_not_found");
    assert_eq!(missing_topic["error"]["status"], 404);

    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "d", "topic": "solid"}),
    )
    .await;
    send(
        &mut socket,
        json!({"op": "subscribe", "id": "d", "topic": "solid"}),
    )
    .await;
    let duplicate = next_frame(&mut socket).await;
    assert_eq!(duplicate["id"], "d");
    assert_eq!(duplicate["error"]["code"], "invalid_request");

    // Still subscribed after the refusals.
    server.produce_ok("solid", &batch(0..1, None)).await;
    assert_eq!(values(&receive(&mut socket, "d", 1).await), vec![0]);

    // Not JSON at all: 1007.
    socket.send(Message::text("{not json")).await.expect("send");
    let (code, reason) = next_close(&mut socket).await;
    assert_eq!(code, 1007, "{reason}");
    assert!(reason.contains("not JSON"), "{reason}");

    // Over the frame limit: 1009.
    let mut big = connect(&server).await;
    let oversize = json!({"op": "publish", "id": "big", "topic": "solid",
                          "messages": [{"value": "y".repeat(8192)}]});
    let _ = big.send(Message::text(oversize.to_string())).await;
    let (code, reason) = next_close(&mut big).await;
    assert_eq!(code, 1009, "{reason}");

    // The connection limit: 503 at the handshake while 3 sockets are open (the closed ones
    // leave it once their close handshake ends).
    drop(socket);
    drop(big);
    let held = [
        connect_eventually(&server).await,
        connect_eventually(&server).await,
        connect_eventually(&server).await,
    ];
    let over = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            match tokio_tungstenite::connect_async(ws_request(&server, Some("herald.v1"))).await {
                Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Ok(response.status()),
                Err(error) => Err(format!("{error}")),
                Ok(_) => Err("a fourth socket was accepted".to_string()),
            }
        },
    )
    .await;
    assert_eq!(over.expect("a refused handshake"), 503);
    drop(held);

    // Other sockets are served.
    let mut fresh = connect_eventually(&server).await;
    send(
        &mut fresh,
        json!({"op": "publish", "id": "ok", "topic": "solid", "messages": [{"value": 2}]}),
    )
    .await;
    let published = next_frame(&mut fresh).await;
    assert_eq!(published["op"], "published", "{published}");
    assert_eq!(published["offsets"][0]["offset"], 1);
}

#[tokio::test]
async fn a_silent_peer_is_closed_after_the_idle_timeout() {
    let server = Server::start_with(&[
        "--ws-ping-interval-ms",
        "100",
        "--ws-idle-timeout-ms",
        "400",
    ])
    .await;
    // Not reading means not answering pings either.
    let mut socket = connect(&server).await;
    let closed = poll(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            match server
                .metric("herald_ws_closed_total", &[("code", "1001")])
                .await
            {
                Some(count) if count >= 1.0 => Ok(()),
                other => Err(format!("closed 1001: {other:?}")),
            }
        },
    )
    .await;
    closed.expect("the silent socket is closed");
    let (code, reason) = next_close(&mut socket).await;
    assert_eq!(code, 1001);
    assert!(reason.contains("idle"), "{reason}");
}

#[tokio::test]
async fn shutdown_sends_every_socket_a_going_away_close() {
    let mut server = Server::start().await;
    server.create_topic("bye", 1).await;
    let mut socket = connect(&server).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "s", "topic": "bye"}),
    )
    .await;

    let pid = server.pid().expect("a running server");
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).expect("SIGTERM");
    let (code, reason) = next_close(&mut socket).await;
    assert_eq!(code, 1001);
    assert_eq!(reason, "server shutting down");
    let status = server.stop().await;
    assert!(status.success(), "{status:?}");
}
