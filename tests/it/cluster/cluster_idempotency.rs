//! Idempotent producing across a leader failover, black box, on three real nodes (replication
//! factor 3): a request with an `Idempotency-Key`, and one with producer fields, are acknowledged
//! through one node; the partition's leader is SIGKILLed; the identical request retried through
//! another node after the new leader is elected answers the same offsets, and every message is
//! in the log exactly once. Also after the killed node is back.
//!
//! The harness (`common::cluster`) runs one cluster at a time, so these tests run one after the
//! other.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::{create_replicated, produce_client, Stored, TestCluster};
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// How long a retry may keep failing (503 during the election, 504 at a dying leader).
const RETRY_DEADLINE: Duration = Duration::from_secs(60);

/// How one attempt failed: the status, if an answer came, and what was seen.
type Failure = (Option<StatusCode>, String);

/// One produce through node `via` with an optional `Idempotency-Key`: `Ok` with the answer on
/// 200, `Err` with what came back otherwise.
async fn produce_via(
    cluster: &TestCluster,
    via: u64,
    topic: &str,
    key: Option<&str>,
    body: &Value,
) -> Result<Value, Failure> {
    let url = cluster
        .node(via)
        .url(&format!("/v1/topics/{topic}/messages?acks=all"));
    let mut request = produce_client()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request
        .send()
        .await
        .map_err(|err| (None, format!("POST {url}: {err}")))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if status != StatusCode::OK {
        return Err((Some(status), format!("POST {url}: {status}: {text}")));
    }
    serde_json::from_str(&text).map_err(|err| {
        (
            Some(status),
            format!("POST {url}: not JSON ({err}): {text}"),
        )
    })
}

/// The first attempt, which must be acknowledged.
async fn produce_ok(
    cluster: &TestCluster,
    via: u64,
    topic: &str,
    key: Option<&str>,
    body: &Value,
) -> Value {
    produce_via(cluster, via, topic, key, body)
        .await
        .unwrap_or_else(|(_, seen)| cluster.fail(&seen))
}

/// Retries the identical request through `via` until it is acknowledged (503 and 504 are
/// expected during the election); a 4xx fails at once: a retry must never be refused.
async fn retry_until_acknowledged(
    cluster: &TestCluster,
    via: u64,
    topic: &str,
    key: Option<&str>,
    body: &Value,
) -> Value {
    let answer = poll(RETRY_DEADLINE, Duration::from_millis(200), || async {
        match produce_via(cluster, via, topic, key, body).await {
            Ok(answer) => Ok(Ok(answer)),
            Err((Some(status), seen)) if status.is_client_error() => Ok(Err(seen)),
            Err((_, seen)) => Err(seen),
        }
    })
    .await
    .unwrap_or_else(|seen| {
        cluster.fail(&format!(
            "the retry through node {via} was not acknowledged within {RETRY_DEADLINE:?}; last: {seen}"
        ))
    });
    answer.unwrap_or_else(|refused| cluster.fail(&format!("the retry was refused: {refused}")))
}

/// How many times each value is in the log.
fn counts(stored: &[Stored]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for message in stored {
        *counts.entry(message.value.to_string()).or_insert(0) += 1;
    }
    counts
}

#[tokio::test]
async fn idempotent_retries_after_a_leader_failover_write_once() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "idem-failover";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let followers = cluster.others_than(leader);
    let (first_via, retry_via) = (followers[0], followers[1]);

    // Through a follower, so the appends are forwarded to the leader with their claims.
    let keyed = json!({"messages": [
        {"key": "k1", "value": "keyed-1"},
        {"value": "keyed-2"},
        {"key": "k3", "value": "keyed-3"},
    ]});
    let keyed_first = produce_ok(&cluster, first_via, topic, Some("failover-1"), &keyed).await;
    let (status, producer) = {
        let node = cluster.node(first_via);
        let response = node
            .post_json("/v1/producers", &json!({"name": "failover-worker"}))
            .await;
        node.json(response).await
    };
    assert_eq!(status, StatusCode::OK, "{producer}");
    let produced = json!({
        "messages": [{"value": "seq-0"}, {"value": "seq-1"}],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "sequence": 0,
    });
    let produced_first = produce_ok(&cluster, first_via, topic, None, &produced).await;

    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader_change(topic, 0, leader).await;
    assert_ne!(new_leader, leader);

    let keyed_retry =
        retry_until_acknowledged(&cluster, retry_via, topic, Some("failover-1"), &keyed).await;
    assert_eq!(
        keyed_retry["offsets"], keyed_first["offsets"],
        "{keyed_retry}"
    );
    assert_eq!(keyed_retry["duplicate"], true, "{keyed_retry}");
    let produced_retry =
        retry_until_acknowledged(&cluster, retry_via, topic, None, &produced).await;
    assert_eq!(
        produced_retry["offsets"], produced_first["offsets"],
        "{produced_retry}"
    );
    assert_eq!(produced_retry["duplicate"], true, "{produced_retry}");
    // The producer goes on where it was, with the new leader.
    let next = json!({
        "messages": [{"value": "seq-2"}],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "sequence": 2,
    });
    let next_answer = retry_until_acknowledged(&cluster, retry_via, topic, None, &next).await;
    assert!(next_answer.get("duplicate").is_none(), "{next_answer}");

    let expected: BTreeMap<String, usize> =
        ["keyed-1", "keyed-2", "keyed-3", "seq-0", "seq-1", "seq-2"]
            .iter()
            .map(|value| (format!("\"{value}\""), 1))
            .collect();
    let stored = cluster.read_partition(retry_via, topic, 0).await;
    assert_eq!(
        counts(&stored),
        expected,
        "each message exactly once: {stored:?}"
    );

    // The killed node comes back and catches up; the window is the same there.
    cluster.restart(leader).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let keyed_again =
        retry_until_acknowledged(&cluster, leader, topic, Some("failover-1"), &keyed).await;
    assert_eq!(keyed_again["offsets"], keyed_first["offsets"]);
    assert_eq!(keyed_again["duplicate"], true);
    let produced_again = retry_until_acknowledged(&cluster, leader, topic, None, &produced).await;
    assert_eq!(produced_again["offsets"], produced_first["offsets"]);
    assert_eq!(produced_again["duplicate"], true);
    // Leadership may move back to the restarted node (its preferred replica): the retries
    // must still be duplicates when it leads.
    let leader_now = cluster.stable_leader(topic, 0).await;
    let keyed_at_leader =
        retry_until_acknowledged(&cluster, leader_now, topic, Some("failover-1"), &keyed).await;
    assert_eq!(keyed_at_leader["offsets"], keyed_first["offsets"]);
    assert_eq!(keyed_at_leader["duplicate"], true);
    let stored = cluster.read_partition(leader, topic, 0).await;
    assert_eq!(
        counts(&stored),
        expected,
        "each message exactly once: {stored:?}"
    );
}
