//! A partition whose quorum is gone, black box on three real nodes: what its leader holds for
//! it is bounded (`--max-queued-bytes-per-partition`), a produce past the bound answers 503
//! `overloaded` with `Retry-After` at once, and messages still queued when their produce timed
//! out are answered "not written" and never written, also once the quorum is back.
//!
//! The harness (`common::cluster`) runs one cluster at a time.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::cluster::{create_replicated, messages_url, produce_client, TestCluster};
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The bound of every node in this test: four 16 KB messages fit besides a small one.
const BOUND: usize = 65_536;
/// The produce timeout of every node in this test.
/// Long enough that a loaded machine queues the four big requests before the first one expires.
const PRODUCE_TIMEOUT_MS: u64 = 6_000;
/// A value of 16,000 bytes: 16,006 as stored (framing), four of them 64,024.
const BIG: usize = 16_000;
/// "At once": well below the produce timeout a queued request would wait.
const AT_ONCE: Duration = Duration::from_millis(1_500);

async fn post(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> (StatusCode, Option<String>, Value) {
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|err| panic!("POST {url}: {err}"));
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let body = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, body)
}

/// The bytes of messages node `id` holds for its partitions, queued or being replicated.
async fn held(cluster: &TestCluster, id: u64) -> f64 {
    cluster
        .node(id)
        .metric("herald_produce_queued_bytes", &[])
        .await
        .unwrap_or(0.0)
}

/// Waits (at most 10 s) until the bytes node `id` holds satisfy `wanted`; fails with `what`.
async fn until_held(cluster: &TestCluster, id: u64, what: &str, wanted: impl Fn(f64) -> bool) {
    let outcome = poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let bytes = held(cluster, id).await;
            if wanted(bytes) {
                Ok(())
            } else {
                Err(format!("{what}: the leader holds {bytes} bytes"))
            }
        },
    )
    .await;
    if let Err(seen) = outcome {
        cluster.fail(&seen);
    }
}

fn message(value: String) -> Value {
    json!({"messages": [{"partition": 0, "value": value}]})
}

#[tokio::test]
async fn a_partition_without_quorum_holds_a_bounded_queue_and_expired_messages_are_never_written() {
    let bound = BOUND.to_string();
    let timeout = PRODUCE_TIMEOUT_MS.to_string();
    // One entry in flight per partition, so that every request after the first one waits in
    // the queue rather than in raft: what is checked here is the queue's bound and expiry (the
    // appender's unit tests check the bound with several entries in flight).
    let mut cluster = TestCluster::start_with(
        3,
        &[
            "--max-queued-bytes-per-partition",
            &bound,
            "--produce-timeout-ms",
            &timeout,
            "--max-in-flight-appends-per-partition",
            "1",
        ],
    )
    .await;
    let topic = "held";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let url = messages_url(&cluster, leader, topic);
    let client = produce_client();
    let (status, _, body) = post(&client, &url, &message("before".into())).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Both followers freeze. Within the leader's lease the next batch is still proposed, and
    // waits for a quorum that does not come: everything after it queues on the leader.
    for follower in cluster.others_than(leader) {
        cluster.pause(follower);
    }
    let proposed = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { post(&client, &url, &message("proposed".into())).await })
    };
    until_held(
        &cluster,
        leader,
        "the first batch was never held",
        |bytes| bytes > 0.0,
    )
    .await;
    let first = held(&cluster, leader).await;

    // Four big messages fit under the bound, one request each, queued behind the first batch.
    let mut queued = Vec::new();
    for index in 0..4 {
        let (client, url) = (client.clone(), url.clone());
        let value = format!("{index}").repeat(BIG);
        queued.push(tokio::spawn(async move {
            post(&client, &url, &message(value)).await
        }));
        let expected = first + ((index + 1) * (BIG + 6)) as f64;
        let what = format!("request {index} was never queued");
        until_held(&cluster, leader, &what, |bytes| bytes >= expected).await;
    }

    // A fifth does not fit: refused at once, with Retry-After, nothing written.
    let started = Instant::now();
    let (status, retry_after, body) = post(&client, &url, &message("x".repeat(BIG))).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "overloaded", "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
    assert!(took < AT_ONCE, "overloaded took {took:?}: it must not wait");

    // The queued ones wait until their produce timeout, then are answered "not written".
    for handle in queued {
        let (status, _, body) = tokio::time::timeout(Duration::from_secs(30), handle)
            .await
            .expect("a queued request is answered")
            .expect("the produce task");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["code"], "unavailable", "{body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("never will be"), "{body}");
    }
    // The proposed one's outcome is unknown: 504.
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(30), proposed)
        .await
        .expect("the proposed request is answered")
        .expect("the produce task");
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(body["code"], "timeout", "{body}");

    // The quorum returns: the expired messages are never written. The proposed batch is
    // written, unless the returning followers elected a leader without it (its outcome was
    // unknown, and either is right).
    for follower in cluster.others_than(leader) {
        cluster.resume(follower);
    }
    let urls: Vec<String> = cluster
        .ids()
        .into_iter()
        .map(|id| messages_url(&cluster, id, topic))
        .collect();
    common::cluster::produce_retrying(
        &client,
        &urls,
        &message("after".into()),
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|error| panic!("produce after the quorum returned: {error}"));
    let now_leading = cluster.leader_of(topic, 0).await;
    let stored = cluster.read_partition(now_leading, topic, 0).await;
    let values: Vec<&str> = stored
        .iter()
        .map(|message| message.value.as_str().unwrap_or_default())
        .collect();
    let expected: &[&[&str]] = &[&["before", "proposed", "after"], &["before", "after"]];
    assert!(
        expected.contains(&values.as_slice()),
        "stored {} messages: {:?}",
        values.len(),
        values
            .iter()
            .map(|value| &value[..value.len().min(12)])
            .collect::<Vec<_>>()
    );
    let what = "the leader still holds bytes once all is answered";
    until_held(&cluster, leader, what, |bytes| bytes == 0.0).await;
}
