//! Push streams ride out a leader's death (issue 29, item 4): on a three-node cluster, a
//! WebSocket queue stream and a server-sent event group stream on a node that survives keep
//! delivering when the partition's leader is SIGKILLed. Nothing is skipped: the queue stream
//! leases and acks every message, never delivering one after its ack was confirmed, and the
//! group stream delivers every message.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::cluster::{
    create_replicated, messages_url, produce_client, produce_retrying, TestCluster,
};
use crate::common::sse::EventStream;
use crate::common::ws::{batch, connect, next_frame, send, subscribe, Socket};
use crate::common::{poll, queues};
use serde_json::{json, Value};
use tokio::time::Instant;

const BEFORE_KILL: i64 = 200;
const TOTAL: i64 = 400;
const PRODUCE_DEADLINE: Duration = Duration::from_secs(60);
/// How long the streams may take to deliver everything after the kill.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(90);

/// What a WebSocket queue stream delivered and got acked.
#[derive(Default)]
struct QueueBook {
    /// Ack id -> message value.
    leased: BTreeMap<String, i64>,
    delivered: BTreeSet<i64>,
    acked: BTreeSet<i64>,
    /// Deliveries of a message after one of its acks was confirmed.
    after_ack: Vec<i64>,
}

impl QueueBook {
    /// Takes one frame of the queue stream; acks every lease of a `messages` frame at once.
    async fn take(&mut self, socket: &mut Socket, frame: Value) {
        match frame["op"].as_str() {
            Some("messages") => {
                let mut ack_ids = Vec::new();
                for lease in frame["messages"].as_array().expect("messages") {
                    let n = lease["value"]["n"].as_i64().expect("n");
                    let ack_id = lease["ack_id"].as_str().expect("ack_id").to_string();
                    if self.acked.contains(&n) {
                        self.after_ack.push(n);
                    }
                    self.delivered.insert(n);
                    self.leased.insert(ack_id.clone(), n);
                    ack_ids.push(ack_id);
                }
                send(socket, json!({"op": "ack", "id": "q", "ack_ids": ack_ids})).await;
            }
            Some("acked") => {
                for ack_id in frame["acked"].as_array().expect("acked") {
                    let ack_id = ack_id.as_str().expect("an ack id");
                    self.acked.insert(self.leased[ack_id]);
                }
            }
            // An ack the dying leader could not confirm: the lease comes back after its
            // deadline, and is acked then.
            Some("error") => {}
            _ => panic!("unexpected frame on the queue stream: {frame}"),
        }
    }

    /// Reads until every message below `until` is acked, within the deadline.
    async fn read_until(&mut self, socket: &mut Socket, until: i64, deadline: Instant) {
        while (0..until).any(|n| !self.acked.contains(&n)) {
            assert!(
                Instant::now() < deadline,
                "the queue stream stalled: acked {} of {until}, delivered {}",
                self.acked.len(),
                self.delivered.len()
            );
            let frame = next_frame(socket).await;
            self.take(socket, frame).await;
        }
    }
}

/// Reads the group stream until every message below `until` came; answers how many
/// assignments it announced meanwhile.
async fn read_group(
    events: &mut EventStream,
    seen: &mut BTreeSet<i64>,
    until: i64,
    deadline: Instant,
) -> usize {
    let mut assignments = 0;
    while (0..until).any(|n| !seen.contains(&n)) {
        assert!(
            Instant::now() < deadline,
            "the group stream stalled: {} of {until}",
            seen.len()
        );
        let event = events.next().await.expect("the group stream goes on");
        match event.event.as_str() {
            "assignment" => assignments += 1,
            "message" => {
                seen.insert(event.message()["value"]["n"].as_i64().expect("n"));
            }
            other => panic!("unexpected event {other}: {}", event.data),
        }
    }
    assignments
}

#[tokio::test]
async fn queue_and_group_streams_keep_delivering_across_a_leader_kill() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "feed", 1, 3).await;
    let leader = cluster.stable_leader("feed", 0).await;
    let others = cluster.others_than(leader);
    let via = others[0];
    let node = cluster.node(via);
    queues::subscribe(
        node,
        "work",
        json!({"topic": "feed", "ack_deadline_ms": 10000, "start": "earliest",
               "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 500}}),
    )
    .await;

    let mut socket = connect(node).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "q", "subscription": "work", "credit": 50}),
    )
    .await;
    let mut events = common::sse::open(
        &node.base_url(),
        "/v1/groups/watchers/events?topics=feed&session_timeout_ms=6000",
        None,
    )
    .await;

    let client = produce_client();
    let urls: Vec<String> = others
        .iter()
        .map(|id| messages_url(&cluster, *id, "feed"))
        .collect();
    produce_retrying(
        &client,
        &urls,
        &batch(0..BEFORE_KILL, Some(0)),
        PRODUCE_DEADLINE,
    )
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));

    let deadline = Instant::now() + DELIVERY_DEADLINE;
    let mut book = QueueBook::default();
    book.read_until(&mut socket, BEFORE_KILL, deadline).await;
    let mut seen = BTreeSet::new();
    read_group(&mut events, &mut seen, BEFORE_KILL, deadline).await;

    cluster.kill(leader);
    for chunk in (BEFORE_KILL..TOTAL).step_by(50) {
        produce_retrying(
            &client,
            &urls,
            &batch(chunk..chunk + 50, Some(0)),
            PRODUCE_DEADLINE,
        )
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
    }
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    book.read_until(&mut socket, TOTAL, deadline).await;
    read_group(&mut events, &mut seen, TOTAL, deadline).await;

    assert!(
        book.after_ack.is_empty(),
        "delivered after their ack was confirmed: {:?}",
        book.after_ack
    );
    assert_eq!(book.delivered.len() as i64, TOTAL);
    assert_eq!(seen.len() as i64, TOTAL);

    // Every lease was settled in the end: nothing is left held or waiting.
    let survivor = cluster.node(via);
    poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let described = queues::describe(survivor, "work").await;
            match described["backlog"].as_u64() {
                Some(0) => Ok(()),
                _ => Err(format!("backlog left: {described}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
}
