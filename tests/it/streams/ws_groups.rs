//! Consumer group and queue subscriptions over WebSocket (`GET /v1/ws`) against the real
//! binary: a socket as a group member (assignments, rebalances, commits, leaving on close)
//! and a socket leasing from a queue subscription (credit as a window of un-acked leases,
//! ack, nack, expiry).

use crate::common;

use std::collections::BTreeSet;

use crate::common::queues::{self, topics};
use crate::common::ws::{assert_quiet, connect, next_frame, send, subscribe};
use crate::common::ws_streams::{positions, GroupView};
use crate::common::Server;
use serde_json::{json, Value};

/// Produces `count` messages to each of `partitions` partitions of `topic`.
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

fn group_subscribe(id: &str) -> Value {
    json!({"op": "subscribe", "id": id, "group": "workers", "topics": ["shared"],
           "session_timeout_ms": 30000})
}

#[tokio::test]
async fn a_group_over_websocket_shares_partitions_and_the_survivor_takes_over_from_committed_offsets(
) {
    let server = Server::start().await;
    topics(&server, &[("shared", 4)]).await;

    let mut first = connect(&server).await;
    subscribe(&mut first, group_subscribe("a")).await;
    let mut a = GroupView::default();
    a.read_until(&mut first, "a", |view| view.assignments.len() == 4)
        .await;

    let mut second = connect(&server).await;
    subscribe(&mut second, group_subscribe("b")).await;
    let mut b = GroupView::default();
    b.read_until(&mut second, "b", |view| view.generation > 0)
        .await;
    assert_eq!(b.assignments.len(), 2, "{b:?}");
    // The first member hears of the rebalance and keeps the other half.
    let generation = b.generation;
    a.read_until(&mut first, "a", |view| view.generation == generation)
        .await;
    assert!(a.assignments.is_disjoint(&b.assignments), "{a:?} {b:?}");
    assert_eq!(a.assignments.len(), 2);

    fill(&server, "shared", 4, 10).await;
    a.read_until(&mut first, "a", |view| view.messages.len() == 20)
        .await;
    b.read_until(&mut second, "b", |view| view.messages.len() == 20)
        .await;
    for (view, other) in [(&a, &b), (&b, &a)] {
        let read: BTreeSet<u32> = positions(&view.messages).iter().map(|p| p.0).collect();
        assert_eq!(read, view.assignments, "only its own partitions");
        assert!(read.is_disjoint(&other.assignments));
    }
    // Each message names the offset that commits it.
    let sample = &a.messages[0];
    assert_eq!(sample["commit"]["partition"], sample["partition"]);
    assert_eq!(
        sample["commit"]["offset"].as_u64(),
        sample["offset"].as_u64().map(|o| o + 1)
    );

    // The first member commits half of each of its partitions, the second all of its own.
    let half: Vec<Value> = a
        .assignments
        .iter()
        .map(|p| json!({"topic": "shared", "partition": p, "offset": 5}))
        .collect();
    send(
        &mut first,
        json!({"op": "commit", "id": "a", "offsets": half}),
    )
    .await;
    assert_eq!(next_frame(&mut first).await, json!({"op": "ok", "id": "a"}));
    let all: Vec<Value> = b
        .assignments
        .iter()
        .map(|p| json!({"topic": "shared", "partition": p, "offset": 10}))
        .collect();
    send(
        &mut second,
        json!({"op": "commit", "id": "b", "offsets": all}),
    )
    .await;
    assert_eq!(
        next_frame(&mut second).await,
        json!({"op": "ok", "id": "b"})
    );
    // A commit of a partition the member does not own is refused; the socket stays open.
    let foreign = b.assignments.iter().next().copied().expect("a partition");
    send(
        &mut first,
        json!({"op": "commit", "id": "a",
               "offsets": [{"topic": "shared", "partition": foreign, "offset": 1}]}),
    )
    .await;
    let refused = next_frame(&mut first).await;
    assert_eq!(refused["op"], "error", "{refused}");
    assert_eq!(refused["id"], "a");
    assert!(refused["error"]["code"].is_string(), "{refused}");
    assert!(server.committed("workers", "shared", foreign).await == Some(10));

    // The first member goes: the second takes all four partitions at once (within the frame
    // deadline, shorter than the 30 s session: the session is not waited for) and gets what
    // was not committed, and only that.
    first.close(None).await.expect("close");
    let seen = b.messages.len();
    b.read_until(&mut second, "b", |view| view.assignments.len() == 4)
        .await;
    b.read_until(&mut second, "b", |view| view.messages.len() >= seen + 10)
        .await;
    let expected: Vec<(u32, u64)> = a
        .assignments
        .iter()
        .flat_map(|p| (5..10).map(move |offset| (*p, offset)))
        .collect();
    assert_eq!(positions(&b.messages[seen..]), expected);
    assert_quiet(&mut second).await;

    let described = server.describe_group("workers").await;
    assert_eq!(described["members"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn group_subscribe_refusals_are_error_frames_and_the_socket_stays_open() {
    let server = Server::start().await;
    topics(&server, &[("shared", 1)]).await;
    let mut socket = connect(&server).await;
    for (frame, code) in [
        (
            json!({"op": "subscribe", "id": "x", "group": "g", "topics": ["missing"]}),
            "topic_not_found",
        ),
        (
            json!({"op": "subscribe", "id": "x", "group": "g", "topics": []}),
            "invalid_request",
        ),
        (
            json!({"op": "subscribe", "id": "x", "group": "g", "topics": ["shared"], "session_timeout_ms": 1}),
            "invalid_request",
        ),
        (
            json!({"op": "subscribe", "id": "x", "subscription": "nope"}),
            "subscription_not_found",
        ),
        (
            json!({"op": "subscribe", "id": "x", "group": "g", "subscription": "s"}),
            "invalid_request",
        ),
        (
            json!({"op": "commit", "id": "x", "offsets": []}),
            "not_found",
        ),
        (json!({"op": "ack", "id": "x", "ack_ids": []}), "not_found"),
    ] {
        send(&mut socket, frame.clone()).await;
        let answer = next_frame(&mut socket).await;
        assert_eq!(answer["op"], "error", "{frame} -> {answer}");
        assert_eq!(answer["error"]["code"], code, "{frame} -> {answer}");
    }
    // Still serving: a group subscription works, and ack on it is refused for its kind.
    subscribe(&mut socket, group_subscribe("g")).await;
    let assignment = next_frame(&mut socket).await;
    assert_eq!(assignment["op"], "assignment", "{assignment}");
    send(
        &mut socket,
        json!({"op": "ack", "id": "g", "ack_ids": ["1.0.0.1.0"]}),
    )
    .await;
    let answer = next_frame(&mut socket).await;
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
}

fn lease(frame: &Value) -> (String, u32, i64) {
    (
        frame["ack_id"].as_str().expect("ack_id").to_string(),
        frame["delivery_attempt"].as_u64().expect("attempt") as u32,
        frame["value"]["n"].as_i64().expect("n"),
    )
}

/// The next `messages` frame of subscription `id`, as leases.
async fn leases(socket: &mut common::ws::Socket, id: &str) -> Vec<(String, u32, i64)> {
    let frame = next_frame(socket).await;
    assert_eq!(frame["op"], "messages", "{frame}");
    assert_eq!(frame["id"], id);
    frame["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(lease)
        .collect()
}

#[tokio::test]
async fn a_queue_subscription_over_websocket_keeps_credit_leases_in_flight() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    queues::subscribe(
        &server,
        "work",
        json!({"topic": "jobs", "ack_deadline_ms": 1500, "start": "earliest",
               "retry_policy": {"min_backoff_ms": 0, "max_backoff_ms": 0}}),
    )
    .await;
    fill(&server, "jobs", 1, 3).await;

    let mut socket = connect(&server).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "q", "subscription": "work", "credit": 2}),
    )
    .await;
    let mut held = Vec::new();
    while held.len() < 2 {
        held.extend(leases(&mut socket, "q").await);
    }
    assert_eq!(
        held.iter().map(|l| (l.1, l.2)).collect::<Vec<_>>(),
        [(1, 0), (1, 1)]
    );
    // Two un-acked leases: the third message waits.
    assert_quiet(&mut socket).await;

    send(
        &mut socket,
        json!({"op": "ack", "id": "q", "ack_ids": [held[0].0]}),
    )
    .await;
    let acked = next_frame(&mut socket).await;
    assert_eq!(
        acked,
        json!({"op": "acked", "id": "q", "acked": [held[0].0], "expired": []})
    );
    let third = leases(&mut socket, "q").await;
    assert_eq!(
        third.iter().map(|l| (l.1, l.2)).collect::<Vec<_>>(),
        [(1, 2)]
    );

    // A nack frees the place and the message comes again, as its second attempt.
    send(
        &mut socket,
        json!({"op": "nack", "id": "q", "ack_ids": [held[1].0], "delay_ms": 0}),
    )
    .await;
    let nacked = next_frame(&mut socket).await;
    assert_eq!(nacked["op"], "nacked", "{nacked}");
    assert_eq!(nacked["nacked"], json!([held[1].0]));
    let again = leases(&mut socket, "q").await;
    assert_eq!(
        again.iter().map(|l| (l.1, l.2)).collect::<Vec<_>>(),
        [(2, 1)]
    );

    // Not acked within the deadline: the lease expires, its place comes back, the message is
    // delivered again, and the late ack is answered `expired`.
    let mut redelivered = Vec::new();
    for _ in 0..100 {
        if redelivered.iter().any(|l: &(String, u32, i64)| l.2 == 2) {
            break;
        }
        redelivered.extend(leases(&mut socket, "q").await);
    }
    assert!(
        redelivered.iter().all(|l| l.1 >= 2),
        "only redeliveries are left: {redelivered:?}"
    );
    send(
        &mut socket,
        json!({"op": "ack", "id": "q", "ack_ids": [third[0].0]}),
    )
    .await;
    let late = answer(&mut socket, "acked", &mut redelivered).await;
    assert_eq!(late["expired"], json!([third[0].0]), "{late}");

    // Extend keeps a lease; a bad extend is an error frame.
    let current = redelivered.last().expect("a lease").0.clone();
    send(
        &mut socket,
        json!({"op": "extend", "id": "q", "ack_ids": [current], "ack_deadline_ms": 60000}),
    )
    .await;
    let extended = answer(&mut socket, "extended", &mut redelivered).await;
    assert_eq!(extended["extended"], json!([current]));
    send(
        &mut socket,
        json!({"op": "extend", "id": "q", "ack_ids": [current]}),
    )
    .await;
    let refused = answer(&mut socket, "error", &mut redelivered).await;
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
}

/// The next frame with `op` (leases delivered meanwhile are added to `leased`).
async fn answer(
    socket: &mut common::ws::Socket,
    op: &str,
    leased: &mut Vec<(String, u32, i64)>,
) -> Value {
    for _ in 0..100 {
        let frame = next_frame(socket).await;
        if frame["op"] == op {
            return frame;
        }
        assert_eq!(frame["op"], "messages", "{frame}");
        leased.extend(
            frame["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .map(lease),
        );
    }
    panic!("no {op} frame in 100 frames")
}

#[tokio::test]
async fn closing_a_queue_socket_nacks_its_leases_and_a_member_without_credit_hears_of_rebalances() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("shared", 2)]).await;
    queues::subscribe(
        &server,
        "work",
        json!({"topic": "jobs", "ack_deadline_ms": 600000, "start": "earliest",
               "retry_policy": {"min_backoff_ms": 0, "max_backoff_ms": 0}}),
    )
    .await;
    fill(&server, "jobs", 1, 1).await;
    let mut socket = connect(&server).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "q", "subscription": "work", "credit": 1}),
    )
    .await;
    let held = leases(&mut socket, "q").await;
    assert_eq!(
        held.iter().map(|l| (l.1, l.2)).collect::<Vec<_>>(),
        [(1, 0)]
    );
    socket.close(None).await.expect("close");
    // Its lease had ten minutes to go: only the nack on close makes it deliverable now.
    let again = common::poll(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        || async {
            let pulled = queues::pull(&server, "work", 10, 0).await;
            match pulled.first() {
                Some(message) => Ok(message.clone()),
                None => Err("nothing to pull yet".to_string()),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    assert_eq!(again["delivery_attempt"], 2, "{again}");

    // A member that used up its credit still gets the new assignment when another joins.
    fill(&server, "shared", 2, 1).await;
    let mut first = connect(&server).await;
    subscribe(
        &mut first,
        json!({"op": "subscribe", "id": "a", "group": "workers", "topics": ["shared"],
               "session_timeout_ms": 30000, "credit": 2}),
    )
    .await;
    let mut a = GroupView::default();
    a.read_until(&mut first, "a", |view| view.messages.len() == 2)
        .await;
    let mut second = connect(&server).await;
    subscribe(&mut second, group_subscribe("b")).await;
    let generation = a.generation;
    a.read_until(&mut first, "a", |view| view.generation > generation)
        .await;
    assert_eq!(a.assignments.len(), 1, "{a:?}");
}
