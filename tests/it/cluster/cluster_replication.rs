//! Clustering, black box: three real nodes on loopback. Replication of keyed and explicitly
//! placed messages, reads of the same log through any node, the cluster view, and a restart of
//! the whole cluster that keeps every node's data and the cluster's identity.
//!
//! The harness (`common::cluster`) runs one cluster at a time, so these tests run one after the
//! other.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::common::book::{produce_ids, Book};
use crate::common::cluster::{
    assert_placement, create_replicated, messages_url, produce_client, sorted_ids, Stored,
    TestCluster, CATCH_UP_DEADLINE, CLUSTER_DEADLINE, ELECTION_DEADLINE,
};
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A message as it should read back: offset, key, value, headers (`{}` when none).
type Expected = (u64, Option<String>, Value, Value);

#[tokio::test]
async fn three_nodes_replicate_and_serve_reads_from_any_node() {
    let cluster = TestCluster::start(3).await;

    // Every node describes the same cluster: 3 nodes up at the given addresses, one id, one
    // metadata leader.
    poll(ELECTION_DEADLINE, Duration::from_millis(100), || async {
        let mut views = Vec::new();
        for id in 1..=3 {
            views.push(
                cluster
                    .cluster_view(id)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        for (i, view) in views.iter().enumerate() {
            let nodes = view["nodes"].as_array().unwrap_or_else(|| panic!("{view}"));
            let mut listed: Vec<(u64, String, String, String)> = nodes
                .iter()
                .map(|n| {
                    (
                        n["id"].as_u64().unwrap_or_else(|| panic!("{view}")),
                        n["http_addr"].as_str().unwrap_or_default().to_string(),
                        n["raft_addr"].as_str().unwrap_or_default().to_string(),
                        n["status"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            listed.sort();
            let expected: Vec<(u64, String, String, String)> = (1..=3)
                .map(|id| {
                    let node = cluster.node(id);
                    (id, node.http_addr(), node.raft_addr(), "up".to_string())
                })
                .collect();
            assert_eq!(
                listed,
                expected,
                "GET /v1/cluster on node {}: {view}",
                i + 1
            );
        }
        // One cluster id (a non-empty string) and one metadata leader, the same on every node.
        let cluster_ids: BTreeSet<String> = views
            .iter()
            .map(|v| v["cluster_id"].as_str().unwrap_or_default().to_string())
            .collect();
        let leaders: BTreeSet<String> = views
            .iter()
            .map(|v| v["metadata_leader"].to_string())
            .collect();
        let same_id = cluster_ids.len() == 1 && !cluster_ids.contains("");
        if same_id && leaders.len() == 1 && views[0]["metadata_leader"].is_u64() {
            let leader = views[0]["metadata_leader"].as_u64().unwrap();
            assert!((1..=3).contains(&leader), "metadata leader {leader}");
            return Ok(());
        }
        Err(format!(
            "the nodes do not agree on a non-empty cluster_id ({cluster_ids:?}) and a metadata leader ({leaders:?}): {views:?}"
        ))
    })
    .await
    .unwrap_or_else(|seen| panic!("{seen}"));

    let topic = "replicated";
    create_replicated(&cluster, 1, topic, 3, 3).await;
    for partition in 0..3 {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }

    // Keyed messages (partition chosen by the key) and messages for explicit partitions, all
    // through node 1.
    let node1 = cluster.node(1);
    let mut expected: BTreeMap<u32, Vec<Expected>> = BTreeMap::new();
    let mut partition_of_key: HashMap<String, u32> = HashMap::new();
    for request in 0..3 {
        let messages: Vec<Value> = (0..10)
            .map(|i| {
                let n = request * 10 + i;
                json!({"key": format!("user-{}", n % 7), "value": {"n": n, "kind": "keyed"}})
            })
            .collect();
        let offsets = node1
            .produce_ok(topic, &json!({ "messages": messages }))
            .await;
        assert_eq!(offsets.len(), messages.len());
        for ((partition, offset), message) in offsets.into_iter().zip(&messages) {
            let key = message["key"].as_str().unwrap().to_string();
            let first = *partition_of_key.entry(key.clone()).or_insert(partition);
            assert_eq!(
                first, partition,
                "key {key} went to partitions {first} and {partition}"
            );
            expected.entry(partition).or_default().push((
                offset,
                Some(key),
                message["value"].clone(),
                json!({}),
            ));
        }
    }
    for partition in 0..3u32 {
        let messages: Vec<Value> = (0..5)
            .map(|i| {
                json!({
                    "partition": partition,
                    "value": {"partition": partition, "i": i, "kind": "explicit"},
                    "headers": {"trace": format!("t-{partition}-{i}")}
                })
            })
            .collect();
        let offsets = node1
            .produce_ok(topic, &json!({ "messages": messages }))
            .await;
        for ((p, offset), message) in offsets.into_iter().zip(&messages) {
            assert_eq!(p, partition, "explicit partition not honoured");
            expected.entry(partition).or_default().push((
                offset,
                None,
                message["value"].clone(),
                message["headers"].clone(),
            ));
        }
    }

    // Every partition reads the same, with exactly what was acknowledged, through every node.
    for partition in 0..3u32 {
        let mut want = expected.get(&partition).cloned().unwrap_or_default();
        want.sort_by_key(|m| m.0);
        let offsets: Vec<u64> = want.iter().map(|m| m.0).collect();
        assert_eq!(
            offsets,
            (0..want.len() as u64).collect::<Vec<_>>(),
            "acknowledged offsets of partition {partition} are not 0..n"
        );
        let mut reads = Vec::new();
        for via in [2, 3, 1] {
            let stored = cluster.read_partition(via, topic, partition).await;
            let got: Vec<Expected> = stored
                .iter()
                .map(|m| {
                    (
                        m.offset,
                        m.key.clone(),
                        m.value.clone(),
                        // No headers and empty headers are the same thing.
                        Value::Object(m.headers.clone().unwrap_or_default()),
                    )
                })
                .collect();
            assert_eq!(got, want, "partition {partition} read through node {via}");
            reads.push(stored);
        }
        assert_eq!(
            reads[0], reads[1],
            "nodes 2 and 3 read partition {partition} differently"
        );
    }

    // Node 3 describes 3 distinct replicas per partition, all in sync, and the high watermarks.
    for partition in 0..3u32 {
        let count = expected.get(&partition).map(Vec::len).unwrap_or(0) as u64;
        let view = cluster
            .wait_for_partition(3, topic, partition, CATCH_UP_DEADLINE, |p| {
                p["in_sync"].as_array().map(Vec::len) == Some(3) && p["high_watermark"] == count
            })
            .await;
        assert_placement(&view, 3, &[1, 2, 3]);
        assert_eq!(sorted_ids(&view["in_sync"]), vec![1, 2, 3], "{view}");
        let leader = view["leader"]
            .as_u64()
            .unwrap_or_else(|| panic!("no leader: {view}"));
        assert!(sorted_ids(&view["replicas"]).contains(&leader), "{view}");
        assert_eq!(view["log_start_offset"], 0, "{view}");
    }

    // `leader_of` in the cluster view names exactly the partitions each node leads.
    poll(ELECTION_DEADLINE, Duration::from_millis(200), || async {
        let described = cluster
            .topic_view(2, topic)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let view = cluster
            .cluster_view(2)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut want: BTreeMap<u64, BTreeSet<u32>> =
            (1..=3).map(|id| (id, BTreeSet::new())).collect();
        for p in described["partitions"].as_array().unwrap() {
            if let Some(leader) = p["leader"].as_u64() {
                want.entry(leader)
                    .or_default()
                    .insert(p["partition"].as_u64().unwrap() as u32);
            }
        }
        let mut got: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
        for node in view["nodes"].as_array().unwrap() {
            let led = node["leader_of"].as_array().unwrap_or_else(|| {
                panic!("leader_of is not a list of {{topic, partition}}: {view}")
            });
            let entry = got.entry(node["id"].as_u64().unwrap()).or_default();
            for item in led.iter().filter(|item| item["topic"] == topic) {
                entry.insert(item["partition"].as_u64().unwrap() as u32);
            }
        }
        if got == want {
            return Ok(());
        }
        Err(format!(
            "leader_of {got:?} does not match the partitions' leaders {want:?}: {view} {described}"
        ))
    })
    .await
    .unwrap_or_else(|seen| panic!("{seen}"));

    // A replication factor above the node count is refused (a conflict with the cluster as it
    // is now: a fourth node would make it possible) and creates nothing.
    let node2 = cluster.node(2);
    let response = node2
        .post_json(
            "/v1/topics",
            &json!({"name": "too-wide", "partitions": 1, "replication_factor": 4}),
        )
        .await;
    node2
        .expect_problem(response, StatusCode::CONFLICT, "not_enough_nodes")
        .await;
    let response = cluster.node(1).get("/v1/topics/too-wide").await;
    cluster
        .node(1)
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;

    // A topic created without a replication factor gets the cluster's default (3), capped at
    // the three nodes: every partition on three distinct nodes. Its retry (no factor named)
    // answers the same topic, not a conflict.
    let body = json!({"name": "defaulted", "partitions": 2});
    let created = node2.create_topic_with(&body).await;
    assert_eq!(created["replication_factor"], 3, "{created}");
    for partition in created["partitions"].as_array().expect("partitions") {
        let replicas: BTreeSet<u64> = partition["replicas"]
            .as_array()
            .unwrap_or_else(|| panic!("{created}"))
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(replicas, BTreeSet::from([1, 2, 3]), "{created}");
    }
    let retried = cluster.node(3).post_json("/v1/topics", &body).await;
    assert_eq!(retried.status(), StatusCode::OK, "a retried create");
}

/// `cluster_id` as each live node reports it in `GET /v1/cluster`. The metadata leader proposes
/// the id after its election and a follower applies it a heartbeat later, so a node may report
/// none for a moment: wait (bounded) until every live node reports one.
async fn cluster_ids(cluster: &TestCluster) -> BTreeMap<u64, String> {
    poll(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
        let mut ids = BTreeMap::new();
        let mut missing = None;
        for via in cluster.live_ids() {
            let view = cluster
                .cluster_view(via)
                .await
                .unwrap_or_else(|e| cluster.fail(&e));
            match view["cluster_id"].as_str().filter(|id| !id.is_empty()) {
                Some(id) => {
                    ids.insert(via, id.to_string());
                }
                None => missing = Some(format!("node {via}: no cluster_id: {view}")),
            }
        }
        match missing {
            None => Ok(ids),
            Some(why) => Err(why),
        }
    })
    .await
    .unwrap_or_else(|why| cluster.fail(&format!("after {CLUSTER_DEADLINE:?}: {why}")))
}

#[tokio::test]
async fn whole_cluster_restart_keeps_data() {
    const PARTITIONS: u32 = 2;
    let mut cluster = TestCluster::start(3).await;
    let topic = "kept";
    create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }

    // Messages to every partition through every node.
    let client = produce_client();
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    for via in 1..=3 {
        let urls = vec![messages_url(&cluster, via, topic)];
        for partition in 0..PARTITIONS {
            let ids: Vec<String> = (0..5)
                .map(|i| format!("before-{via}-{partition}-{i}"))
                .collect();
            let book = books.entry(partition).or_default();
            produce_ids(&client, book, &urls, partition, ids).await;
        }
    }
    let ids_before = cluster_ids(&cluster).await;
    let cluster_id = ids_before[&1].clone();
    assert!(
        ids_before.values().all(|id| *id == cluster_id),
        "the nodes report different cluster ids: {ids_before:?}"
    );
    // What every partition holds, once every replica has all of it.
    let mut before: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let stored = cluster.read_partition(1, topic, partition).await;
        books[&partition].check(&stored);
        let count = stored.len() as u64;
        cluster
            .wait_for_partition(1, topic, partition, CATCH_UP_DEADLINE, |p| {
                p["in_sync"].as_array().map(Vec::len) == Some(3) && p["high_watermark"] == count
            })
            .await;
        before.insert(partition, stored);
    }

    // Every node stops (SIGTERM), one after the other, and exits cleanly.
    for id in 1..=3 {
        let status = cluster.stop(id).await;
        assert!(
            status.success(),
            "node {id}: SIGTERM should exit cleanly, got {status}"
        );
    }
    assert!(cluster.live_ids().is_empty());

    // All three start again with their own flags only (no --initial-cluster) and re-form the
    // cluster: every node ready and listing the three up, with a metadata leader.
    let restarted_at = Instant::now();
    cluster.restart_all(&[1, 2, 3]).await;
    let everyone: BTreeSet<u64> = (1..=3).collect();
    cluster.wait_for_members(&everyone, CLUSTER_DEADLINE).await;
    let leader = cluster.metadata_leader().await;
    eprintln!(
        "the cluster re-formed {:?} after the restart; metadata leader {leader}",
        restarted_at.elapsed()
    );
    let ids_after = cluster_ids(&cluster).await;
    let same_id: BTreeMap<u64, String> = (1..=3).map(|id| (id, cluster_id.clone())).collect();
    assert_eq!(
        ids_after, same_id,
        "the cluster id changed across the restart (it was {cluster_id})"
    );

    // Everything is there at the same offsets, through every node.
    for partition in 0..PARTITIONS {
        for via in [2, 3, 1] {
            let stored = cluster.read_partition(via, topic, partition).await;
            assert_eq!(
                stored, before[&partition],
                "{topic}/{partition} via node {via} after the restart"
            );
        }
    }

    // New messages go after them, through every node.
    for via in 1..=3 {
        let urls = vec![messages_url(&cluster, via, topic)];
        for partition in 0..PARTITIONS {
            let ids: Vec<String> = (0..5)
                .map(|i| format!("after-{via}-{partition}-{i}"))
                .collect();
            let book = books.get_mut(&partition).unwrap();
            produce_ids(&client, book, &urls, partition, ids).await;
        }
    }
    for partition in 0..PARTITIONS {
        let old = &before[&partition];
        for via in 1..=3 {
            let stored = cluster.read_partition(via, topic, partition).await;
            books[&partition].check(&stored);
            assert_eq!(
                stored[..old.len()],
                old[..],
                "{topic}/{partition} via node {via}"
            );
            assert!(
                stored.len() >= old.len() + 15,
                "{topic}/{partition} via node {via}: {} messages",
                stored.len()
            );
        }
    }
}
