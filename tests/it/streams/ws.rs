//! The WebSocket transport (`GET /v1/ws`, subprotocol `herald.v1`) against the real binary:
//! publish, subscribe with credit, resume tokens, slow readers, bad frames and shutdown.

use std::time::Duration;

use crate::common::ws::{
    assert_quiet, batch, connect, connect_eventually, next_close, next_frame, receive, send,
    subscribe, values, ws_request,
};
use crate::common::{poll, Server};
use futures::SinkExt;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

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
    // The position after the message: the next offset to read.
    assert_eq!(first[2]["resume"], "0:3");
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

    // The last message's token is what a client keeps: it covers every partition.
    let token = seen.last().expect("messages")["resume"]
        .as_str()
        .expect("token")
        .to_string();
    let before: Vec<i64> = values(&seen);
    for partition in 0..2u32 {
        let base = i64::from(partition) * 100;
        server
            .produce_ok("resumed", &batch(base + 5..base + 8, Some(partition)))
            .await;
    }

    let mut second = connect(&server).await;
    subscribe(
        &mut second,
        json!({"op": "subscribe", "id": "r2", "topic": "resumed", "from": token}),
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
async fn a_client_that_stops_reading_is_closed_1008_after_the_stall_timeout_and_others_keep_working(
) {
    let server = Server::start_with(&[
        "--ws-max-frame-bytes",
        "4096",
        "--ws-max-outbound-bytes",
        "65536",
        "--client-stall-timeout-ms",
        "2000",
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
            // More data until the node gives up on the client (after the stall timeout).
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
    // Closed for reading nothing, not for the queue's size: the queue is backpressure.
    assert!(
        server
            .metric(
                "herald_http_stalled_connections_total",
                &[("transport", "ws")]
            )
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
