//! Cluster membership, black box: a fourth node joins a three-node cluster and one of the
//! original nodes is drained; its replicas move to the new node without losing or moving any
//! acknowledged message, and drains that would leave too few nodes are refused.
//!
//! The harness (`common::cluster`) runs one cluster at a time. Every message a test sends
//! carries a unique id, so the log can be checked exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::book::{produce_ids, Book};
use crate::common::cluster::{
    create_replicated, messages_url, partition_of, produce_client, sorted_ids, Stored, TestCluster,
    CATCH_UP_DEADLINE, ELECTION_DEADLINE,
};
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn adding_a_node_and_draining_one_moves_replicas_without_loss() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "moving";
    create_replicated(&cluster, 2, topic, 3, 3).await;
    for partition in 0..3 {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
    let client = produce_client();
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    let urls = vec![messages_url(&cluster, 2, topic)];
    for round in 0..4 {
        for partition in 0..3u32 {
            let ids: Vec<String> = (0..5)
                .map(|i| format!("before-{round}-{partition}-{i}"))
                .collect();
            let book = books.entry(partition).or_default();
            produce_ids(&client, book, &urls, partition, ids).await;
        }
    }
    // What every partition holds before the membership changes.
    let mut before: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for partition in 0..3u32 {
        let stored = cluster.read_partition(2, topic, partition).await;
        books[&partition].check(&stored);
        assert_eq!(stored.len(), 20, "{topic}/{partition}");
        before.insert(partition, stored);
    }

    // With 3 nodes and replication factor 3, no node can be drained.
    let node2 = cluster.node(2);
    let response = node2.delete("/v1/cluster/nodes/1").await;
    node2
        .expect_problem(response, StatusCode::CONFLICT, "cannot_drain")
        .await;
    let response = node2.delete("/v1/cluster/nodes/99").await;
    node2
        .expect_problem(response, StatusCode::NOT_FOUND, "node_not_found")
        .await;

    // Node 4 starts with --join: alive, not ready until it is added.
    let four = cluster.start_joining_node().await;
    assert_eq!(four, 4);
    let (status, body) = cluster
        .try_get(4, "/readyz")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a joining node is ready: {body}"
    );

    let add = cluster.add_request(4);
    let node3 = cluster.node(3);
    let added = poll(ELECTION_DEADLINE, Duration::from_millis(250), || async {
        let (status, body) = node3
            .json(node3.post_json("/v1/cluster/nodes", &add).await)
            .await;
        if status == StatusCode::CREATED {
            return Ok(body);
        }
        assert!(
            status == StatusCode::SERVICE_UNAVAILABLE,
            "adding node 4: {status}: {body}"
        );
        Err(format!("{status}: {body}"))
    })
    .await
    .unwrap_or_else(|last| panic!("adding node 4: {last}"));
    assert_eq!(added["id"], 4, "{added}");
    assert_eq!(added["http_addr"], cluster.node(4).http_addr(), "{added}");
    assert_eq!(added["raft_addr"], cluster.node(4).raft_addr(), "{added}");
    // Adding it again with the same addresses is fine; with other addresses it is a conflict.
    let (status, again) = node3
        .json(node3.post_json("/v1/cluster/nodes", &add).await)
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], 4, "{again}");
    let other = json!({"node_id": 4, "http_addr": "127.0.0.1:1", "raft_addr": "127.0.0.1:2"});
    let response = node3.post_json("/v1/cluster/nodes", &other).await;
    node3
        .expect_problem(response, StatusCode::CONFLICT, "node_exists")
        .await;
    cluster.finish_adding(4).await;

    // Drain node 1 through node 2.
    let node2 = cluster.node(2);
    let (status, draining) = node2.json(node2.delete("/v1/cluster/nodes/1").await).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{draining}");
    assert_eq!(draining["id"], 1, "{draining}");
    assert_eq!(draining["status"], "draining", "{draining}");

    // A topic created while node 1 drains is not placed on it.
    let fresh = create_replicated(&cluster, 2, "after-drain", 3, 3).await;
    for partition in 0..3 {
        let view = partition_of(&fresh, partition).unwrap();
        assert_eq!(sorted_ids(&view["replicas"]), vec![2, 3, 4], "{fresh}");
    }

    // Node 1 leaves the cluster; its replicas move to node 4.
    poll(
        Duration::from_secs(90),
        Duration::from_millis(250),
        || async {
            let (view, described) = match (
                cluster.cluster_view(2).await,
                cluster.topic_view(2, topic).await,
            ) {
                (Ok(view), Ok(described)) => (view, described),
                (view, described) => return Err(format!("{view:?}\n{described:?}")),
            };
            let nodes = view["nodes"].as_array().unwrap_or_else(|| panic!("{view}"));
            if let Some(one) = nodes.iter().find(|n| n["id"] == 1) {
                assert_ne!(
                    one["status"], "up",
                    "node 1 is up again after the drain began: {view}"
                );
            }
            let ids: BTreeSet<u64> = nodes.iter().filter_map(|n| n["id"].as_u64()).collect();
            let moved = described["partitions"].as_array().unwrap().iter().all(|p| {
                sorted_ids(&p["replicas"]) == vec![2, 3, 4]
                    && p["in_sync"].as_array().is_some_and(|s| {
                        let mut s: Vec<u64> = s.iter().filter_map(Value::as_u64).collect();
                        s.sort_unstable();
                        s == vec![2, 3, 4]
                    })
                    && p["leader"].as_u64().is_some_and(|l| (2..=4).contains(&l))
            });
            if moved && ids == BTreeSet::from([2, 3, 4]) {
                return Ok(());
            }
            Err(format!("{view}\n{described}"))
        },
    )
    .await
    .unwrap_or_else(|last| panic!("node 1 was not drained within 90 s: {last}"));
    cluster.mark_removed(1);
    let remaining: BTreeSet<u64> = BTreeSet::from([2, 3, 4]);
    cluster
        .wait_for_members(&remaining, CATCH_UP_DEADLINE)
        .await;

    // Everything acknowledged before is there, at the same offsets, through every node.
    for partition in 0..3u32 {
        for via in [2, 3, 4] {
            let stored = cluster.read_partition(via, topic, partition).await;
            assert_eq!(
                stored, before[&partition],
                "{topic}/{partition} via node {via} after the drain"
            );
        }
    }

    // More writes (through the new node) land after them and read back.
    let urls = vec![messages_url(&cluster, 4, topic)];
    for partition in 0..3u32 {
        let ids: Vec<String> = (0..5).map(|i| format!("after-{partition}-{i}")).collect();
        let book = books.get_mut(&partition).unwrap();
        produce_ids(&client, book, &urls, partition, ids).await;
    }
    for partition in 0..3u32 {
        let stored = cluster.read_partition(3, topic, partition).await;
        books[&partition].check(&stored);
        assert_eq!(stored[..20], before[&partition][..], "{topic}/{partition}");
        assert!(
            stored.len() >= 25,
            "{topic}/{partition}: {} messages",
            stored.len()
        );
    }

    // Three nodes are left for replication factor 3: none of them can be drained.
    let node3 = cluster.node(3);
    let response = node3.delete("/v1/cluster/nodes/2").await;
    node3
        .expect_problem(response, StatusCode::CONFLICT, "cannot_drain")
        .await;
}

/// A founder beyond the metadata group's voters (three by default) starts without metadata
/// state, like a joining node; it must still become a member without an operator adding it.
#[tokio::test]
async fn a_fourth_founding_node_registers_itself_and_takes_replicas() {
    // The harness waits until every node lists all four with a metadata leader.
    let cluster = TestCluster::start(4).await;
    let topic = "four";
    let created = create_replicated(&cluster, 1, topic, 4, 3).await;
    let replicas_of_4 = created["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|partition| {
            partition["replicas"]
                .as_array()
                .is_some_and(|replicas| replicas.contains(&json!(4)))
        })
        .count();
    assert!(replicas_of_4 >= 1, "node 4 holds no replica: {created}");
    // Node 4 follows the metadata: it knows the topic and serves its partitions.
    for partition in 0..4 {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
    let response = cluster.node(4).get(&format!("/v1/topics/{topic}")).await;
    assert_eq!(response.status(), StatusCode::OK);
}
