//! The audit log of a three-node cluster: each node records the requests it serves into the
//! one replicated `__audit` topic (three replicas), and any node reads them all back.
//!
//! The harness (`common::cluster`) runs one cluster at a time.

use crate::common;

use std::time::Duration;

use crate::common::cluster::TestCluster;
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn every_node_records_into_one_replicated_audit_topic_that_any_node_reads() {
    let cluster = TestCluster::start(3).await;
    let client = common::client();

    let create = client
        .post(cluster.node(2).url("/v1/topics"))
        .header("x-request-id", "on-node-2")
        .json(&json!({"name": "orders", "replication_factor": 3}))
        .send()
        .await
        .expect("create on node 2");
    assert_eq!(create.status(), StatusCode::CREATED);
    let delete = client
        .delete(cluster.node(3).url("/v1/auth/clients/nobody"))
        .header("x-request-id", "on-node-3")
        .send()
        .await
        .expect("delete on node 3");
    assert_eq!(delete.status(), StatusCode::NOT_FOUND);

    for reader in [1, 2, 3] {
        let server = cluster.node(reader);
        let seen = poll(
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async {
                let (status, page) = server.json(server.get("/v1/audit").await).await;
                let events = page["events"].as_array().cloned().unwrap_or_default();
                let by_id = |id: &str| {
                    events
                        .iter()
                        .find(|event| event["request_id"] == id)
                        .cloned()
                };
                match (status, by_id("on-node-2"), by_id("on-node-3")) {
                    (StatusCode::OK, Some(created), Some(deleted)) => Ok((created, deleted)),
                    _ => Err(format!("node {reader} answered {status}: {page}")),
                }
            },
        )
        .await;
        let (created, deleted): (Value, Value) = seen.unwrap_or_else(|seen| server.fail(&seen));
        assert_eq!(created["node_id"], 2, "{created}");
        assert_eq!(created["action"], "create topic");
        assert_eq!(created["resource"], "topic:orders");
        assert_eq!(deleted["node_id"], 3, "{deleted}");
        assert_eq!(deleted["action"], "delete client");
        assert_eq!(deleted["resource"], "client:nobody");
        assert_eq!(deleted["status"], 404);
        assert_eq!(deleted["allowed"], true);
    }

    // Three replicas: every node holds one (the topic itself is not reachable through topic
    // routes, not even to describe it; each node's metrics name the replicas it holds).
    for id in [1, 2, 3] {
        let node = cluster.node(id);
        poll(
            Duration::from_secs(20),
            Duration::from_millis(200),
            || async {
                let metrics = node.get("/metrics").await.text().await.unwrap_or_default();
                let replicas: Vec<&str> = metrics
                    .lines()
                    .filter(|line| {
                        line.starts_with("herald_replica_high_watermark{")
                            && line.contains("topic=\"__audit\"")
                    })
                    .collect();
                match replicas.as_slice() {
                    [one] if one.contains("partition=\"0\"") => Ok(()),
                    other => Err(format!("node {id} holds these __audit replicas: {other:?}")),
                }
            },
        )
        .await
        .unwrap_or_else(|seen| cluster.node(1).fail(&seen));
    }
    assert_eq!(
        cluster.node(1).get("/v1/topics/__audit").await.status(),
        StatusCode::BAD_REQUEST
    );
}
