//! `decode=json` on the streams that deliver to consumers: a consumer group member's and a
//! queue subscription's server-sent events, and group and queue subscriptions over WebSocket.
//! Each hands the Avro values back as JSON with their schema, and a value that does not decode
//! (an unknown schema id) keeps its bytes with `decode_error`, without ending the stream. And
//! `herald consume --decode`, by requests and with `--follow` (over WebSocket).

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{avro_long, framed};
use crate::common::{b64, queues, sse, ws, Server};

/// Registers the schema, creates topic `typed` and writes three values: `{"id": 1}`, one
/// framed with an id no schema has, `{"id": 3}`. Answers the schema id.
async fn typed_topic(server: &Server) -> u64 {
    let schema =
        json!({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]});
    let (status, registered) = server
        .json(
            server
                .post_json(
                    "/schema-registry/subjects/typed-value/versions",
                    &json!({"schema": schema.to_string()}),
                )
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{registered}");
    let id = registered["id"].as_u64().expect("an id");
    server.create_topic("typed", 1).await;
    server.wait_for_leaders("typed").await;
    let values = [
        framed(id as u32, &avro_long(1)),
        framed(999_999, &avro_long(2)),
        framed(id as u32, &avro_long(3)),
    ];
    let messages: Vec<Value> = values
        .iter()
        .map(|value| json!({"value_b64": b64(value)}))
        .collect();
    let response = server
        .post_json("/v1/topics/typed/messages", &json!({"messages": messages}))
        .await;
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );
    id
}

/// The three messages as delivered decoded: two values as JSON with their schema, the
/// undecodable one as bytes with its reason.
fn assert_decoded(messages: &[Value], id: u64) {
    assert_eq!(messages.len(), 3, "{messages:?}");
    for (message, expected) in [(&messages[0], 1), (&messages[2], 3)] {
        assert_eq!(message["value"], json!({"id": expected}), "{message}");
        assert_eq!(message["value_schema"]["id"], id, "{message}");
        assert_eq!(
            message["value_schema"]["subject"], "typed-value",
            "{message}"
        );
        assert!(message.get("decode_error").is_none(), "{message}");
    }
    let undecodable = &messages[1];
    assert!(undecodable["value_b64"].is_string(), "{undecodable}");
    assert!(
        undecodable["decode_error"]
            .as_str()
            .is_some_and(|reason| reason.contains("999999")),
        "{undecodable}"
    );
}

#[tokio::test]
async fn group_and_queue_streams_deliver_values_decoded_when_asked() {
    let server = Server::start().await;
    let id = typed_topic(&server).await;

    // A consumer group member as server-sent events.
    let mut events = sse::open(
        &server.base_url(),
        "/v1/groups/sse-readers/events?topics=typed&decode=json",
        None,
    )
    .await;
    let first = events.next().await.expect("an assignment");
    assert_eq!(first.event, "assignment", "{first:?}");
    let delivered: Vec<Value> = events
        .messages(3)
        .await
        .iter()
        .map(sse::SseEvent::message)
        .collect();
    assert_decoded(&delivered, id);
    assert_eq!(delivered[2]["commit"]["offset"], 3, "{:?}", delivered[2]);
    drop(events);

    // A queue subscription as server-sent events.
    queues::subscribe(&server, "typed-sse", json!({"topic": "typed"})).await;
    let mut leases = sse::open(
        &server.base_url(),
        "/v1/subscriptions/typed-sse/events?decode=json",
        None,
    )
    .await;
    let mut delivered: Vec<Value> = leases
        .messages(3)
        .await
        .iter()
        .map(sse::SseEvent::message)
        .collect();
    delivered.sort_by_key(|lease| lease["offset"].as_u64());
    assert!(delivered.iter().all(|lease| lease["ack_id"].is_string()));
    assert_decoded(&delivered, id);
    drop(leases);

    // Over WebSocket: a group subscription and a queue subscription on one socket.
    queues::subscribe(&server, "typed-ws", json!({"topic": "typed"})).await;
    let mut socket = ws::connect(&server).await;
    ws::subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "members", "group": "ws-readers", "topics": ["typed"],
               "decode": "json"}),
    )
    .await;
    let mut group = crate::common::ws_streams::GroupView::default();
    group
        .read_until(&mut socket, "members", |view| view.messages.len() >= 3)
        .await;
    assert_decoded(&group.messages, id);
    ws::send(&mut socket, json!({"op": "unsubscribe", "id": "members"})).await;
    // The `ok` of the unsubscribe (messages already on their way are read past).
    loop {
        let frame = ws::next_frame(&mut socket).await;
        if frame["op"] == "ok" {
            break;
        }
    }
    ws::subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "work", "subscription": "typed-ws", "decode": "json"}),
    )
    .await;
    let mut delivered = ws::receive(&mut socket, "work", 3).await;
    delivered.sort_by_key(|lease| lease["offset"].as_u64());
    assert_decoded(&delivered, id);

    // Without `decode`, the same stream hands the bytes over as stored.
    let mut plain = ws::connect(&server).await;
    ws::subscribe(
        &mut plain,
        json!({"op": "subscribe", "id": "raw", "group": "raw-readers", "topics": ["typed"]}),
    )
    .await;
    let mut raw = crate::common::ws_streams::GroupView::default();
    raw.read_until(&mut plain, "raw", |view| !view.messages.is_empty())
        .await;
    assert!(
        raw.messages[0]["value_b64"].is_string(),
        "{:?}",
        raw.messages
    );
    assert!(raw.messages[0].get("value_schema").is_none());
}

#[tokio::test]
async fn herald_consume_decodes_with_and_without_follow() {
    let server = Server::start().await;
    let id = typed_topic(&server).await;
    for follow in [false, true] {
        let mut args = vec![
            "consume", "typed", "--decode", "--from", "earliest", "--count", "3",
        ];
        if follow {
            args.push("--follow");
        }
        let output = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
                .args(&args)
                .arg("--server")
                .arg(server.base_url())
                .env_remove("HERALD_SERVER")
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("herald consume ends in time")
        .expect("run herald consume");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let messages: Vec<Value> = stdout
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert_decoded(&messages, id);
    }
}
