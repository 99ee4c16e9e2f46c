//! Delayed messages do not block ready ones (issue 29, item 6), black box on one node: a pull
//! that does not wait gets the ready messages sitting behind delayed ones at once, and one
//! message due in ten minutes at the head of a partition does not stall it after more than
//! the 10,000-entry window of later offsets was read.

use std::collections::BTreeSet;

use crate::common::now_ms;
use crate::common::queues::{ack_ids, describe, post_ok, pull, subscribe, topics};
use crate::common::Server;
use serde_json::{json, Value};

const TEN_MINUTES_MS: i64 = 600_000;

/// Produces `count` messages, `value` its index from `first`, delayed to `deliver_at` if given.
async fn produce(server: &Server, first: u64, count: u64, deliver_at: Option<i64>) {
    for chunk in (first..first + count).collect::<Vec<_>>().chunks(1_000) {
        let messages: Vec<Value> = chunk
            .iter()
            .map(|n| match deliver_at {
                Some(at) => json!({"value": n, "deliver_at": at}),
                None => json!({"value": n}),
            })
            .collect();
        server
            .produce_ok("jobs", &json!({ "messages": messages }))
            .await;
    }
}

fn values(pulled: &[Value]) -> Vec<u64> {
    pulled
        .iter()
        .map(|m| m["message"]["value"].as_u64().expect("a value"))
        .collect()
}

#[tokio::test]
async fn a_pull_that_does_not_wait_gets_the_ready_messages_behind_delayed_ones() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    subscribe(&server, "workers", json!({"topic": "jobs"})).await;
    produce(&server, 0, 300, Some(now_ms() + TEN_MINUTES_MS)).await;
    produce(&server, 300, 100, None).await;

    // Every pull answers ready messages: none empty while some are left.
    let mut got = Vec::new();
    for _ in 0..10 {
        let pulled = pull(&server, "workers", 10, 0).await;
        assert_eq!(pulled.len(), 10, "after {} messages: {pulled:?}", got.len());
        got.extend(values(&pulled));
        post_ok(
            &server,
            "workers",
            "ack",
            json!({"ack_ids": ack_ids(&pulled)}),
        )
        .await;
    }
    assert_eq!(got, (300..400).collect::<Vec<_>>());
    assert!(pull(&server, "workers", 10, 0).await.is_empty());
    let counts = describe(&server, "workers").await;
    assert_eq!(counts["delayed"], 300, "{counts}");
    assert_eq!(counts["backlog"], 300, "{counts}");
}

#[tokio::test]
async fn one_message_due_later_does_not_stall_the_partition_past_the_window() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    subscribe(&server, "workers", json!({"topic": "jobs"})).await;
    const LATER: u64 = 10_100;
    produce(&server, 0, 1, Some(now_ms() + TEN_MINUTES_MS)).await;
    produce(&server, 1, LATER, None).await;

    let mut got = BTreeSet::new();
    for _ in 0..200 {
        if got.len() as u64 == LATER {
            break;
        }
        let pulled = pull(&server, "workers", 1_000, 0).await;
        assert!(
            !pulled.is_empty(),
            "stuck after {} of {LATER}: {}",
            got.len(),
            describe(&server, "workers").await
        );
        got.extend(values(&pulled));
        post_ok(
            &server,
            "workers",
            "ack",
            json!({"ack_ids": ack_ids(&pulled)}),
        )
        .await;
    }
    assert_eq!(got, (1..=LATER).collect::<BTreeSet<_>>());
    let counts = describe(&server, "workers").await;
    assert_eq!(
        (counts["backlog"].clone(), counts["delayed"].clone()),
        (json!(1), json!(1)),
        "{counts}"
    );
}
