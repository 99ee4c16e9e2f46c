//! A slow reader is slowed, not dropped (issue 29, item 7): a WebSocket subscriber whose credit
//! is far larger than `ws.max_outbound_bytes` and that reads a frame every few milliseconds
//! gets every message without a 1008; a client that reads nothing at all is closed after
//! `client_stall_timeout_ms`, over WebSocket and over server-sent events, and counted in
//! `herald_http_stalled_connections_total`.

use crate::common;

use std::time::Duration;

use crate::common::poll;
use crate::common::ws::{connect, subscribe, Socket, FRAME_DEADLINE};
use crate::common::Server;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const MESSAGES: u64 = 20_000;
const STALL_MS: u64 = 2_000;

async fn node() -> Server {
    Server::start_with(&[
        "--ws-max-frame-bytes",
        "16384",
        "--ws-max-outbound-bytes",
        "65536",
        "--client-stall-timeout-ms",
        &STALL_MS.to_string(),
    ])
    .await
}

/// Fills topic `feed` (one partition) with `MESSAGES` messages of about `size` bytes.
async fn fill(server: &Server, size: usize) {
    server.create_topic("feed", 1).await;
    server.wait_for_leaders("feed").await;
    let pad = "x".repeat(size);
    for first in (0..MESSAGES).step_by(1_000) {
        let messages: Vec<Value> = (first..first + 1_000)
            .map(|n| json!({"value": {"n": n, "pad": pad}}))
            .collect();
        server
            .produce_ok("feed", &json!({ "messages": messages }))
            .await;
    }
}

/// The next data frame, or the close frame's code.
async fn next(socket: &mut Socket) -> Result<Value, u16> {
    loop {
        let message = tokio::time::timeout(FRAME_DEADLINE, socket.next())
            .await
            .expect("a frame within the deadline");
        match message {
            Some(Ok(Message::Text(text))) => {
                return Ok(serde_json::from_str(text.as_str()).expect("JSON"))
            }
            Some(Ok(Message::Close(frame))) => {
                return Err(frame.map_or(1005, |frame| u16::from(frame.code)))
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(1006),
        }
    }
}

#[tokio::test]
async fn a_slow_reader_with_credit_past_the_outbound_limit_gets_every_message() {
    let server = node().await;
    fill(&server, 100).await;
    let mut socket = connect(&server).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "s", "topic": "feed", "from": "earliest",
               "credit": 1_000_000}),
    )
    .await;
    let mut expected = 0u64;
    while expected < MESSAGES {
        let frame = match next(&mut socket).await {
            Ok(frame) => frame,
            Err(code) => server.fail(&format!("closed with {code} after {expected} messages")),
        };
        assert_eq!(frame["op"], "messages", "{frame}");
        for message in frame["messages"].as_array().expect("messages") {
            assert_eq!(message["value"]["n"], expected, "in order, none skipped");
            expected += 1;
        }
        // Slower than the node sends: its queue fills, and it waits for us.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(
        server
            .metric("herald_ws_outbound_overflows_total", &[])
            .await
            .unwrap_or(0.0),
        0.0
    );
    let waits = server
        .metric("herald_ws_backpressure_waits_total", &[])
        .await
        .unwrap_or(0.0);
    assert!(waits > 0.0, "the subscription never waited for the client");
}

#[tokio::test]
async fn a_websocket_client_that_reads_nothing_is_closed_after_the_stall_timeout() {
    let server = node().await;
    fill(&server, 1_000).await;
    let mut socket = connect(&server).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "s", "topic": "feed", "from": "earliest",
               "credit": 1_000_000}),
    )
    .await;
    // Read nothing: the node's queue and the socket buffers fill, and nothing drains them.
    let stalled = poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            match server
                .metric(
                    "herald_http_stalled_connections_total",
                    &[("transport", "ws")],
                )
                .await
            {
                Some(count) if count >= 1.0 => Ok(()),
                other => Err(format!("not counted yet: {other:?}")),
            }
        },
    )
    .await;
    stalled.unwrap_or_else(|seen| server.fail(&seen));
    // Draining now finds the end of the socket (its close frame, if it got out).
    let mut frames = 0;
    let code = loop {
        match next(&mut socket).await {
            Ok(_) => frames += 1,
            Err(code) => break code,
        }
        assert!(frames < 100_000, "the socket never ended");
    };
    assert!(code == 1008 || code == 1006, "closed with {code}");
}

#[tokio::test]
async fn an_event_stream_that_is_not_read_is_dropped_after_the_stall_timeout() {
    let server = node().await;
    fill(&server, 1_000).await;
    let response = common::sse::stream_client()
        .get(server.url("/v1/topics/feed/events?from=earliest"))
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(response.status(), 200);
    // The response is held and never read.
    let stalled = poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            match server
                .metric(
                    "herald_http_stalled_connections_total",
                    &[("transport", "http")],
                )
                .await
            {
                Some(count) if count >= 1.0 => Ok(()),
                other => Err(format!("not counted yet: {other:?}")),
            }
        },
    )
    .await;
    stalled.unwrap_or_else(|seen| server.fail(&seen));
    drop(response);
    // The node's stream slot is free again.
    poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            match server.metric("herald_sse_streams", &[]).await {
                Some(open) if open < 0.5 => Ok(()),
                other => Err(format!("streams still open: {other:?}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
}
