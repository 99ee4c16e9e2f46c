//! Redrive on 3 nodes with RF 3, black box: the job is started through a node that does not
//! lead the metadata, runs on the one that does, and when that node is SIGKILLed in the middle
//! the new metadata leader resumes it from the replicated checkpoint: every dead letter is in
//! the source topic exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster, CLUSTER_DEADLINE};
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

const MESSAGES: u64 = 1_000;

async fn redrive_status(cluster: &TestCluster, via: u64) -> Result<Value, String> {
    let (status, body) = cluster
        .try_get(via, "/v1/subscriptions/workers/redrive")
        .await?;
    if status != StatusCode::OK {
        return Err(format!("GET redrive via {via}: {status}: {body}"));
    }
    Ok(body)
}

#[tokio::test]
async fn a_redrive_moves_to_the_new_metadata_leader_and_republishes_nothing_twice() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "jobs", 1, 3).await;
    create_replicated(&cluster, 1, "jobs-dlq", 2, 3).await;
    cluster.stable_leader("jobs", 0).await;
    cluster.stable_leader("jobs-dlq", 0).await;
    cluster.stable_leader("jobs-dlq", 1).await;
    let leader = cluster.metadata_leader().await;
    let via = cluster.others_than(leader)[0];
    let node = cluster.node(via);
    let response = node
        .http_client()
        .put(node.url("/v1/subscriptions/workers"))
        .json(&json!({"topic": "jobs",
                      "dead_letter_policy": {"topic": "jobs-dlq", "max_delivery_attempts": 1}}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(response.status(), StatusCode::CREATED);
    // Dead letters as the subscription writes them, produced directly.
    let messages: Vec<Value> = (0..MESSAGES)
        .map(|id| {
            json!({
                "partition": (id % 2) as u32,
                "key": format!("k{id}"),
                "value": {"id": id},
                "headers": {
                    "herald-dlq-reason": "max_attempts",
                    "herald-dlq-source-topic": "jobs",
                    "herald-dlq-source-partition": "0",
                    "herald-dlq-source-offset": id.to_string(),
                    "herald-dlq-attempts": "1",
                    "herald-dlq-subscription": "workers",
                },
            })
        })
        .collect();
    node.produce_ok("jobs-dlq", &json!({ "messages": messages }))
        .await;

    let (status, job) = node
        .json(
            node.post_json(
                "/v1/subscriptions/workers/redrive",
                &json!({"max_per_second": 500}),
            )
            .await,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let midway = poll(CLUSTER_DEADLINE, Duration::from_millis(5), || async {
        let job = redrive_status(&cluster, via).await?;
        let redriven = job["redriven"].as_u64().unwrap_or(0);
        if redriven >= MESSAGES / 4 {
            Ok(redriven)
        } else {
            Err(format!("not far enough yet: {job}"))
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
    cluster.kill(leader);
    assert!(midway < MESSAGES, "finished before the kill");

    let done = poll(CLUSTER_DEADLINE, Duration::from_millis(50), || async {
        let job = redrive_status(&cluster, via).await?;
        match job["state"].as_str() {
            Some("done") => Ok(job),
            Some("running") => Err(format!("still running: {job}")),
            _ => Err(format!("ended otherwise: {job}")),
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
    assert_eq!(done["redriven"], MESSAGES, "{done}");
    assert_ne!(cluster.metadata_leader().await, leader);

    let mut ids: BTreeMap<u64, usize> = BTreeMap::new();
    for stored in cluster.read_partition(via, "jobs", 0).await {
        *ids.entry(stored.value["id"].as_u64().expect("an id"))
            .or_insert(0) += 1;
    }
    let expected: BTreeMap<u64, usize> = (0..MESSAGES).map(|id| (id, 1)).collect();
    assert_eq!(ids, expected, "every dead letter once in the topic");
}
