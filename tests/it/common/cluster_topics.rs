//! Replicated topics in a cluster: creating one through a given node (asserting its replication
//! factor and partition count) and checking where a partition's replicas were placed.

use serde_json::{json, Value};

use super::cluster::{sorted_ids, TestCluster};

/// Creates a topic through node `via`; asserts 201 and the replication factor.
pub async fn create_replicated(
    cluster: &TestCluster,
    via: u64,
    name: &str,
    partitions: u32,
    replication_factor: u16,
) -> Value {
    let topic = cluster
        .node(via)
        .create_topic_with(&json!({
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
        }))
        .await;
    assert_eq!(topic["replication_factor"], replication_factor, "{topic}");
    assert_eq!(
        topic["partitions"].as_array().map(Vec::len),
        Some(partitions as usize),
        "{topic}"
    );
    topic
}

/// Asserts that a partition's replicas are `rf` distinct nodes among `nodes`.
pub fn assert_placement(partition: &Value, rf: usize, nodes: &[u64]) {
    let replicas = sorted_ids(&partition["replicas"]);
    let mut distinct = replicas.clone();
    distinct.dedup();
    assert_eq!(replicas.len(), rf, "replica count: {partition}");
    assert_eq!(distinct.len(), rf, "replicas are not distinct: {partition}");
    for id in &replicas {
        assert!(
            nodes.contains(id),
            "replica {id} is not one of {nodes:?}: {partition}"
        );
    }
}
