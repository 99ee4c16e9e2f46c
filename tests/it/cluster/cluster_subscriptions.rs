//! Subscriptions on 3 nodes with RF 3, black box: pullers through different nodes while the
//! leader of a partition is SIGKILLed: every message is acked, none is acked twice (two live
//! leases of one message at once would allow that), and nothing acked is delivered again.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::common::cluster::{create_replicated, TestCluster, CLUSTER_DEADLINE};
use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

const MESSAGES: u64 = 600;

async fn post(node: &Server, path: &str, body: Value) -> Option<Value> {
    let response = node
        .http_client()
        .post(node.url(path))
        .json(&body)
        .send()
        .await
        .ok()?;
    if response.status() != StatusCode::OK {
        return None;
    }
    response.json().await.ok()
}

#[derive(Default)]
struct Book {
    /// Successful acks per message id.
    acked: BTreeMap<u64, usize>,
    /// Deliveries of an id after one of its acks succeeded.
    after_ack: Vec<u64>,
}

/// One round: each live node serves one pull, whose messages are acked through the next node.
async fn round(cluster: &TestCluster, book: &mut Book) {
    let live = cluster.live_ids();
    for (index, via) in live.iter().enumerate() {
        let node = cluster.node(*via);
        let Some(pulled) = post(
            node,
            "/v1/subscriptions/workers/pull",
            json!({"max_messages": 40, "max_wait_ms": 300}),
        )
        .await
        else {
            continue;
        };
        let messages = pulled["messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        let ids: Vec<u64> = messages
            .iter()
            .map(|m| m["message"]["value"]["id"].as_u64().expect("an id"))
            .collect();
        for id in &ids {
            if book.acked.contains_key(id) {
                book.after_ack.push(*id);
            }
        }
        let ack_ids: Vec<&str> = messages
            .iter()
            .map(|m| m["ack_id"].as_str().expect("an ack id"))
            .collect();
        let acker = cluster.node(live[(index + 1) % live.len()]);
        let Some(answer) = post(
            acker,
            "/v1/subscriptions/workers/ack",
            json!({"ack_ids": ack_ids}),
        )
        .await
        else {
            // Outcome unknown: those not acked come back after the deadline.
            continue;
        };
        let acked: Vec<&str> = answer["acked"]
            .as_array()
            .expect("acked")
            .iter()
            .map(|id| id.as_str().expect("an ack id"))
            .collect();
        for (id, ack_id) in ids.iter().zip(&ack_ids) {
            if acked.contains(ack_id) {
                *book.acked.entry(*id).or_default() += 1;
            }
        }
    }
}

#[tokio::test]
async fn pullers_through_every_node_lose_nothing_when_a_partition_leader_dies() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "jobs", 3, 3).await;
    let leader = cluster.stable_leader("jobs", 0).await;
    let via = cluster.others_than(leader)[0];
    let node = cluster.node(via);
    let response = node
        .http_client()
        .put(node.url("/v1/subscriptions/workers"))
        .json(&json!({"topic": "jobs", "ack_deadline_ms": 2000,
                      "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 500}}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(response.status(), StatusCode::CREATED);
    let messages: Vec<Value> = (0..MESSAGES)
        .map(|id| json!({"partition": (id % 3) as u32, "value": {"id": id}}))
        .collect();
    node.produce_ok("jobs", &json!({ "messages": messages }))
        .await;

    let mut book = Book::default();
    let deadline = Instant::now() + CLUSTER_DEADLINE * 2;
    for _ in 0..1_000 {
        if book.acked.len() as u64 >= MESSAGES / 3 || Instant::now() > deadline {
            break;
        }
        round(&cluster, &mut book).await;
    }
    assert!(
        book.acked.len() as u64 >= MESSAGES / 3,
        "too few acked before the kill"
    );
    cluster.kill(leader);
    for _ in 0..10_000 {
        if book.acked.len() as u64 >= MESSAGES || Instant::now() > deadline {
            break;
        }
        round(&cluster, &mut book).await;
    }
    let missing: Vec<u64> = (0..MESSAGES)
        .filter(|id| !book.acked.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "never acked: {missing:?}");
    let twice: Vec<(&u64, &usize)> = book.acked.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "acked twice: {twice:?}");
    assert!(
        book.after_ack.is_empty(),
        "delivered again after an ack: {:?}",
        book.after_ack
    );
}
