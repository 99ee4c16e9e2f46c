//! Retention on a replicated partition, black box, three real nodes: the leader decides what
//! expired and replicates the decision, so every replica moves its log start to the same
//! offset (read from each node's own `herald_replica_log_start_offset` gauge), and reads below
//! it answer 416 through any node.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{create_replicated, TestCluster};
use common::now_ms;
use reqwest::StatusCode;
use serde_json::{json, Value};

const RETENTION_DEADLINE: Duration = Duration::from_secs(30);

/// This node's own log start of `topic`/0, from its metrics.
async fn local_log_start(cluster: &TestCluster, via: u64, topic: &str) -> Option<u64> {
    let text = cluster
        .node(via)
        .get("/metrics")
        .await
        .text()
        .await
        .unwrap_or_default();
    let (topic_label, partition_label) = (format!("topic=\"{topic}\""), "partition=\"0\"");
    text.lines()
        .find(|line| {
            line.starts_with("herald_replica_log_start_offset{")
                && line.contains(&topic_label)
                && line.contains(partition_label)
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse::<f64>().ok())
        .map(|value| value as u64)
}

#[tokio::test]
async fn every_replica_moves_its_log_start_to_the_same_offset() {
    let cluster = TestCluster::start_with(3, &["--retention-check-interval-ms", "200"]).await;
    let topic = "replicated-retention";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let node = cluster.node(1);
    let old = now_ms() - 3_600_000;
    for batch in 0..3 {
        let messages: Vec<Value> = (0..5)
            .map(|i| json!({"partition": 0, "value": format!("old-{batch}-{i}"), "timestamp": old}))
            .collect();
        node.produce_ok(topic, &json!({ "messages": messages }))
            .await;
    }
    node.produce_ok(
        topic,
        &json!({"messages": [{"partition": 0, "value": "fresh"}]}),
    )
    .await;

    // Nothing expires under the default retention (7 days) ...
    tokio::time::sleep(Duration::from_millis(800)).await;
    for id in cluster.ids() {
        assert_eq!(
            local_log_start(&cluster, id, topic).await,
            Some(0),
            "node {id}"
        );
    }
    // ... and with an hour-old cutoff the three old batches go, on every replica.
    let response = node
        .patch_json(
            &format!("/v1/topics/{topic}"),
            &json!({"config": {"retention_ms": 60000}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let deadline = Instant::now() + RETENTION_DEADLINE;
    loop {
        let mut starts = Vec::new();
        for id in cluster.ids() {
            starts.push(local_log_start(&cluster, id, topic).await);
        }
        if starts.iter().all(|start| *start == Some(15)) {
            break;
        }
        if Instant::now() >= deadline {
            cluster.fail(&format!(
                "replica log starts: {starts:?}, expected 15 on all"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in cluster.ids() {
        let (status, problem) = cluster.node(id).fetch(topic, 0, "offset=0").await;
        assert_eq!(
            status,
            StatusCode::RANGE_NOT_SATISFIABLE,
            "node {id}: {problem}"
        );
        assert_eq!(problem["log_start_offset"], 15, "node {id}: {problem}");
        let (status, page) = cluster.node(id).fetch(topic, 0, "offset=earliest").await;
        assert_eq!(status, StatusCode::OK, "node {id}: {page}");
        assert_eq!(page["messages"][0]["offset"], 15, "node {id}: {page}");
        assert_eq!(page["messages"][0]["value"], "fresh", "node {id}: {page}");
    }
}
