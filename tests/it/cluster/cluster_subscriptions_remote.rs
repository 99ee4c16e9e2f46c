//! A pull through a node without a replica of the subscription's partition, black box on 3
//! nodes with RF 1: it waits on the partition's leader (a forwarded wait) rather than asking
//! again and again, so a message produced during its wait comes back in that pull, and a
//! nacked message (after its delay) and an expired lease (after its deadline) come back through
//! that node in a waiting pull. An idle pull there does not keep proposing leases.

use std::time::{Duration, Instant};

use crate::common::cluster::{create_replicated, sorted_ids, TestCluster, CLUSTER_DEADLINE};
use crate::common::poll;
use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The longest a test pull waits; each must answer well before it.
const PULL_WAIT_MS: u64 = 15_000;
const ACK_DEADLINE_MS: u64 = 1_000;
const NACK_DELAY_MS: u64 = 1_500;

async fn post_ok(node: &Server, path: &str, body: Value) -> Value {
    let (status, answer) = node.json(node.post_json(path, &body).await).await;
    if status != StatusCode::OK {
        node.fail(&format!("POST {path}: {status}: {answer}"));
    }
    answer
}

/// One pull through `node` waiting up to `wait_ms`: its messages and how long it took.
async fn pull(node: &Server, wait_ms: u64) -> (Vec<Value>, Duration) {
    let started = Instant::now();
    let answer = post_ok(
        node,
        "/v1/subscriptions/workers/pull",
        json!({"max_messages": 10, "max_wait_ms": wait_ms}),
    )
    .await;
    let messages = answer["messages"].as_array().cloned().unwrap_or_default();
    (messages, started.elapsed())
}

#[tokio::test]
async fn a_pull_without_a_local_replica_waits_on_the_leader() {
    let cluster = TestCluster::start(3).await;
    let topic = create_replicated(&cluster, 1, "jobs", 1, 1).await;
    let holder = sorted_ids(&topic["partitions"][0]["replicas"])[0];
    cluster.stable_leader("jobs", 0).await;
    let via = cluster.others_than(holder)[0];
    let (node, leader) = (cluster.node(via), cluster.node(holder));
    let response = node
        .http_client()
        .put(node.url("/v1/subscriptions/workers"))
        .json(&json!({"topic": "jobs", "ack_deadline_ms": ACK_DEADLINE_MS,
                      "retry_policy": {"min_backoff_ms": 0, "max_backoff_ms": 0}}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(response.status(), StatusCode::CREATED);
    // The first lease sets the subscription's start on the partition.
    assert!(pull(node, 0).await.0.is_empty());

    // A pull through `via` waits; once its wait is on the leader (a forwarded request in
    // flight there), a message is produced, and the pull answers with it.
    let waiting = tokio::spawn({
        let url = node.url("/v1/subscriptions/workers/pull");
        let client = node.http_client().clone();
        async move {
            let started = Instant::now();
            let answer: Value = client
                .post(url)
                .json(&json!({"max_messages": 10, "max_wait_ms": PULL_WAIT_MS}))
                .send()
                .await
                .expect("pull")
                .json()
                .await
                .expect("JSON");
            (answer, started.elapsed())
        }
    });
    poll(CLUSTER_DEADLINE, Duration::from_millis(20), || async {
        match leader
            .metric("herald_forwarded_requests_in_flight", &[])
            .await
        {
            Some(waiting) if waiting >= 1.0 => Ok(()),
            seen => Err(format!(
                "forwarded requests in flight on the leader: {seen:?}"
            )),
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
    let produced_at = Instant::now();
    leader
        .produce_ok("jobs", &json!({"messages": [{"value": {"id": 1}}]}))
        .await;
    let (answer, took) = waiting.await.expect("the waiting pull");
    let messages = answer["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(messages.len(), 1, "{answer}");
    assert_eq!(messages[0]["delivery_attempt"], 1);
    assert!(
        took < Duration::from_millis(PULL_WAIT_MS / 2),
        "the pull answered only after {took:?} ({:?} after the produce)",
        produced_at.elapsed()
    );

    // Nacked with a delay: a waiting pull through `via` gets it again once the delay is over.
    let ack_id = messages[0]["ack_id"]
        .as_str()
        .expect("an ack id")
        .to_string();
    let answer = post_ok(
        node,
        "/v1/subscriptions/workers/nack",
        json!({"ack_ids": [ack_id], "delay_ms": NACK_DELAY_MS}),
    )
    .await;
    assert_eq!(
        answer["nacked"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    let nacked_at = Instant::now();
    // Its counts and age through `via` come from the leader (a forwarded QueueStats).
    let (status, described) = node.json(node.get("/v1/subscriptions/workers").await).await;
    assert_eq!(status, StatusCode::OK, "{described}");
    assert_eq!(
        (
            &described["backlog"],
            &described["delayed"],
            &described["in_flight"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "{described}"
    );
    let age = described["oldest_unacked_age_seconds"]
        .as_f64()
        .expect("an age");
    assert!((0.0..60.0).contains(&age), "{described}");
    let (messages, took) = pull(node, PULL_WAIT_MS).await;
    assert_eq!(messages.len(), 1, "the nacked message did not come back");
    assert_eq!(messages[0]["delivery_attempt"], 2);
    assert!(
        nacked_at.elapsed() >= Duration::from_millis(NACK_DELAY_MS - 100),
        "back before its delay"
    );
    assert!(
        took < Duration::from_millis(PULL_WAIT_MS / 2),
        "took {took:?}"
    );

    // Not acked: after the deadline a waiting pull through `via` gets it again, attempt 3.
    let (messages, took) = pull(node, PULL_WAIT_MS).await;
    assert_eq!(messages.len(), 1, "the expired lease did not come back");
    assert_eq!(messages[0]["delivery_attempt"], 3);
    assert!(
        took < Duration::from_millis(PULL_WAIT_MS / 2),
        "took {took:?}"
    );
    let ack_id = messages[0]["ack_id"].as_str().expect("an ack id");
    let answer = post_ok(
        node,
        "/v1/subscriptions/workers/ack",
        json!({ "ack_ids": [ack_id] }),
    )
    .await;
    assert_eq!(
        answer["acked"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );

    // Acked: a pull waits its whole time and gets nothing. It waits on the leader instead of
    // asking for a lease again and again: the leader's raft log grows by the lease at its start
    // and the one at its deadline, not by one every few hundred milliseconds (asking every
    // 250 ms made it 7 leases here).
    let appended = || async {
        leader
            .metric("herald_raft_log_appended_bytes_total", &[])
            .await
            .unwrap_or(0.0)
    };
    let before = appended().await;
    assert!(pull(node, 0).await.0.is_empty());
    let one_lease = appended().await - before;
    assert!(
        one_lease > 0.0,
        "a lease appended nothing to the leader's log"
    );
    let before = appended().await;
    let (messages, took) = pull(node, 1_500).await;
    assert!(messages.is_empty(), "{messages:?}");
    assert!(took >= Duration::from_millis(1_400), "took {took:?}");
    let idle = appended().await - before;
    assert!(
        idle <= 4.0 * one_lease,
        "an idle pull appended {idle} bytes to the leader's log (one lease: {one_lease})"
    );

    // The gauges are the leader's alone: `via` has no series of the subscription.
    let series = [("subscription", "workers"), ("partition", "0")];
    assert_eq!(
        leader
            .metric("herald_subscription_backlog_messages", &series)
            .await,
        Some(0.0)
    );
    assert_eq!(
        node.metric("herald_subscription_backlog_messages", &series)
            .await,
        None
    );
}
