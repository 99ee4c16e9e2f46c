//! Retention on a replicated partition, black box, three real nodes: the leader decides what
//! expired and replicates the decision, so every replica moves its log start to the same
//! offset (read from each node's own `herald_replica_log_start_offset` gauge), and reads below
//! it answer 416 through any node. A follower that was down while the prefix it needed was
//! purged catches up from the leader's snapshot.

use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::{now_ms, poll};
use reqwest::StatusCode;
use serde_json::{json, Value};

const RETENTION_DEADLINE: Duration = Duration::from_secs(30);

/// A per-replica gauge of `topic`/0 on node `via` (its own view), from its metrics.
async fn local_gauge(cluster: &TestCluster, via: u64, gauge: &str, topic: &str) -> Option<u64> {
    cluster.node(via).partition_gauge(gauge, topic, 0).await
}

async fn local_log_start(cluster: &TestCluster, via: u64, topic: &str) -> Option<u64> {
    local_gauge(cluster, via, "herald_replica_log_start_offset", topic).await
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

    // Nothing expires under the default retention (7 days): once every node publishes its
    // replica's gauges (once a second), and a few retention checks later, all still start at 0.
    for id in cluster.ids() {
        let published = poll(RETENTION_DEADLINE, Duration::from_millis(100), || async {
            local_log_start(&cluster, id, topic)
                .await
                .ok_or_else(|| "no gauge".to_string())
        })
        .await;
        if published.is_err() {
            cluster.fail(&format!(
                "node {id} never published its replica's log start"
            ));
        }
    }
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
    let trimmed = poll(RETENTION_DEADLINE, Duration::from_millis(200), || async {
        let mut starts = Vec::new();
        for id in cluster.ids() {
            starts.push(local_log_start(&cluster, id, topic).await);
        }
        if starts.iter().all(|start| *start == Some(15)) {
            Ok(())
        } else {
            Err(format!("{starts:?}"))
        }
    })
    .await;
    if let Err(starts) = trimmed {
        cluster.fail(&format!("replica log starts: {starts}, expected 15 on all"));
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

#[tokio::test]
async fn a_follower_behind_a_purged_prefix_catches_up_by_snapshot() {
    let mut cluster = TestCluster::start_with(3, &["--retention-check-interval-ms", "200"]).await;
    let topic = "snapshot-catch-up";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let behind = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower");
    let via = cluster
        .ids()
        .into_iter()
        .find(|&id| id != behind)
        .expect("a live node");

    // The follower misses old batches that retention then removes, raft log included.
    cluster.kill(behind);
    let old = now_ms() - 3_600_000;
    for batch in 0..4 {
        let messages: Vec<Value> = (0..5)
            .map(|i| json!({"partition": 0, "value": format!("old-{batch}-{i}"), "timestamp": old}))
            .collect();
        cluster
            .node(via)
            .produce_ok(topic, &json!({ "messages": messages }))
            .await;
    }
    // A snapshot is the newest checkpoint before the first retained batch: once the leader
    // has one past the old batches (its purge checks take one about once a second), it can
    // purge everything before the batch that stays.
    if let Err(seen) = cluster
        .node(leader)
        .wait_for_checkpoint(topic, 0, 20, RETENTION_DEADLINE)
        .await
    {
        cluster.fail(&format!(
            "node {leader} took no checkpoint past the old batches: {seen}"
        ));
    }
    cluster
        .node(via)
        .produce_ok(
            topic,
            &json!({"messages": [{"partition": 0, "value": "fresh"}]}),
        )
        .await;
    let response = cluster
        .node(via)
        .patch_json(
            &format!("/v1/topics/{topic}"),
            &json!({"config": {"retention_ms": 60000}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    // The leader trimmed, and purged its raft log below the kept batch.
    let purged = poll(RETENTION_DEADLINE, Duration::from_millis(200), || async {
        match local_gauge(&cluster, leader, "herald_replica_purged_offset", topic).await {
            Some(20) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    if let Err(seen) = purged {
        cluster.fail(&format!(
            "the leader never purged its log below offset 20 (purged offset {seen})"
        ));
    }

    // Back, it can only catch up from a snapshot (the checkpoint before offset 20), then
    // replays the entries after it: it is in sync again, at the leader's high watermark, and
    // its log starts where the partition's does.
    cluster.restart(behind).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let caught_up = poll(RETENTION_DEADLINE, Duration::from_millis(200), || async {
        let high = local_gauge(&cluster, behind, "herald_replica_high_watermark", topic).await;
        let start = local_log_start(&cluster, behind, topic).await;
        if high == Some(21) && start == Some(20) {
            Ok(())
        } else {
            Err(format!("high watermark {high:?}, log start {start:?}"))
        }
    })
    .await;
    if let Err(seen) = caught_up {
        cluster.fail(&format!("node {behind} after restart: {seen}"));
    }
    let installs = cluster
        .node(behind)
        .metric("herald_raft_snapshot_installs_total", &[])
        .await;
    assert!(
        installs.is_some_and(|installs| installs >= 1.0),
        "node {behind} caught up without a snapshot: {installs:?}"
    );
    // The partition keeps working through every node, the returned one included.
    let offsets = cluster
        .node(behind)
        .produce_ok(
            topic,
            &json!({"messages": [{"partition": 0, "value": "after"}]}),
        )
        .await;
    assert_eq!(offsets, vec![(0, 21)]);
    let (status, page) = cluster
        .node(behind)
        .fetch(topic, 0, "offset=earliest")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["messages"][0]["offset"], 20, "{page}");
    assert_eq!(page["messages"][1]["value"], "after", "{page}");
}
