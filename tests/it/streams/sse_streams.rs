//! Server-sent event streams of a consumer group member (`GET /v1/groups/{group}/events`) and
//! of a queue subscription (`GET /v1/subscriptions/{sub}/events`) against the real binary.

use std::time::Duration;

use crate::common::queues::{self, topics};
use crate::common::sse::{open, SseEvent};
use crate::common::{poll, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn fill(server: &Server, topic: &str, partitions: u32, count: u64) {
    for partition in 0..partitions {
        let messages: Vec<Value> = (0..count)
            .map(|i| json!({"value": {"n": i}, "partition": partition}))
            .collect();
        server
            .produce_ok(topic, &json!({"messages": messages}))
            .await;
    }
}

fn position(event: &SseEvent) -> (u64, u64) {
    let message = event.message();
    (
        message["partition"].as_u64().expect("partition"),
        message["offset"].as_u64().expect("offset"),
    )
}

#[tokio::test]
async fn a_group_member_stream_delivers_from_committed_offsets_and_leaves_on_disconnect() {
    // Keepalive comments every second: a disconnect is noticed at the next write.
    let server = Server::start_with(&["--sse-keepalive-ms", "1000"]).await;
    topics(&server, &[("orders", 2)]).await;
    fill(&server, "orders", 2, 5).await;
    let path = "/v1/groups/readers/events?topics=orders&session_timeout_ms=30000";

    let mut stream = open(&server.base_url(), path, None).await;
    let assignment = stream.next().await.expect("an assignment");
    assert_eq!(assignment.event, "assignment", "{assignment:?}");
    let membership = assignment.message();
    assert_eq!(membership["assignments"].as_array().map(Vec::len), Some(2));
    let mut events = stream.messages(10).await;
    events.sort_by_key(position);
    let first = &events[0];
    assert_eq!(first.id.as_deref(), Some("orders/0/1"));
    assert_eq!(
        first.message()["commit"],
        json!({"topic": "orders", "partition": 0, "offset": 1})
    );

    // Committed over REST with the stream's member id and generation.
    let (status, body) = server
        .commit(
            "readers",
            &json!({"member_id": membership["member_id"], "generation": membership["generation"],
                    "offsets": [{"topic": "orders", "partition": 0, "offset": 5},
                                {"topic": "orders", "partition": 1, "offset": 3}]}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    // Disconnecting leaves the group at once (not after the 30 s session).
    drop(stream);
    let left = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let described = server.describe_group("readers").await;
            match described["members"].as_array().map(Vec::len) {
                Some(0) => Ok(()),
                other => Err(format!("{other:?} members")),
            }
        },
    )
    .await;
    assert!(left.is_ok(), "{left:?}");

    // The next member starts at the committed offsets: only what was not committed.
    let mut again = open(&server.base_url(), path, None).await;
    let assignment = again.next().await.expect("an assignment");
    assert_eq!(assignment.event, "assignment");
    let mut events = again.messages(2).await;
    events.sort_by_key(position);
    assert_eq!(
        events.iter().map(position).collect::<Vec<_>>(),
        [(1, 3), (1, 4)]
    );
}

#[tokio::test]
async fn a_subscription_stream_holds_at_most_max_in_flight_leases() {
    let server = Server::start_with(&["--sse-keepalive-ms", "1000"]).await;
    topics(&server, &[("jobs", 1)]).await;
    queues::subscribe(
        &server,
        "work",
        json!({"topic": "jobs", "start": "earliest", "ack_deadline_ms": 60000,
               "retry_policy": {"min_backoff_ms": 0, "max_backoff_ms": 0}}),
    )
    .await;
    fill(&server, "jobs", 1, 4).await;

    let mut stream = open(
        &server.base_url(),
        "/v1/subscriptions/work/events?max_in_flight=2",
        None,
    )
    .await;
    let leased = stream.messages(2).await;
    let ids: Vec<String> = leased
        .iter()
        .map(|event| event.id.clone().expect("an id"))
        .collect();
    for (event, n) in leased.iter().zip([0, 1]) {
        let data = event.message();
        assert_eq!(data["ack_id"].as_str(), event.id.as_deref());
        assert_eq!(data["delivery_attempt"], 1);
        assert_eq!(data["value"]["n"], n);
    }
    // Two leases held: nothing more until one is settled.
    stream.keepalive().await;

    let acked = queues::post_ok(&server, "work", "ack", json!({"ack_ids": [ids[0]]})).await;
    assert_eq!(acked["acked"], json!([ids[0]]));
    let third = stream.messages(1).await;
    assert_eq!(third[0].message()["value"]["n"], 2);

    // The other REST settles free a place too: a nack, and the message comes again.
    queues::post_ok(
        &server,
        "work",
        "nack",
        json!({"ack_ids": [ids[1]], "delay_ms": 0}),
    )
    .await;
    let next = stream.messages(1).await;
    let data = next[0].message();
    assert!(
        (data["value"]["n"] == 1 && data["delivery_attempt"] == 2) || data["value"]["n"] == 3,
        "{data}"
    );

    // Bad input is refused before the stream starts.
    for (path, status) in [
        ("/v1/subscriptions/nope/events", StatusCode::NOT_FOUND),
        (
            "/v1/subscriptions/work/events?max_in_flight=0",
            StatusCode::BAD_REQUEST,
        ),
        ("/v1/groups/g/events?topics=missing", StatusCode::NOT_FOUND),
        ("/v1/groups/g/events?topics=", StatusCode::BAD_REQUEST),
    ] {
        let (got, body) = server.json(server.get(path).await).await;
        assert_eq!(got, status, "{path}: {body}");
    }
}
