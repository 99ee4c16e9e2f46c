//! Nodes of two releases in one cluster, black box: node 3 starts claiming the wire version of
//! the release before wire versions (`HERALD_TEST_MAX_WIRE_VERSION=0`, a test-only knob). The
//! cluster serves produce and reads through every node, `GET /v1/cluster` shows each node's
//! version and a cluster version held at 0; once node 3 restarts without the knob (it is
//! "upgraded"), the metadata leader raises the cluster version to this release's, and every
//! node shows it. What needs every node upgraded (the schema registry's changes) is refused
//! until then, and works after.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::common::book::{produce_ids, Book};
use crate::common::cluster::{
    create_replicated, messages_url, produce_client, TestCluster, CATCH_UP_DEADLINE,
    CLUSTER_DEADLINE,
};
use crate::common::poll;
use herald::app::TEST_MAX_WIRE_VERSION_ENV;
use herald::domain::WIRE_VERSION;

const TOPIC: &str = "mixed";
const PARTITIONS: u32 = 3;

/// The cluster version and each node's wire version, as node `via` shows them.
struct Versions {
    cluster: u64,
    nodes: BTreeMap<u64, Option<u64>>,
}

async fn versions(cluster: &TestCluster, via: u64) -> Result<Versions, String> {
    let view = cluster.cluster_view(via).await?;
    let cluster_version = view["cluster_version"]
        .as_u64()
        .ok_or_else(|| format!("no cluster_version in {view}"))?;
    let nodes = view["nodes"]
        .as_array()
        .ok_or_else(|| format!("no nodes in {view}"))?
        .iter()
        .map(|node: &Value| {
            (
                node["id"].as_u64().unwrap_or(0),
                node["wire_version"].as_u64(),
            )
        })
        .collect();
    Ok(Versions {
        cluster: cluster_version,
        nodes,
    })
}

/// Waits until every node shows `cluster` as the cluster version and `nodes` as the nodes'
/// wire versions.
async fn wait_for_versions(cluster: &TestCluster, cluster_version: u64, nodes: &[(u64, u64)]) {
    let expected: BTreeMap<u64, Option<u64>> = nodes
        .iter()
        .map(|(node, version)| (*node, Some(*version)))
        .collect();
    for via in cluster.ids() {
        let seen = poll(CLUSTER_DEADLINE, Duration::from_millis(200), || async {
            let seen = versions(cluster, via).await?;
            if seen.cluster == cluster_version && seen.nodes == expected {
                Ok(())
            } else {
                Err(format!(
                    "cluster version {} and nodes {:?}",
                    seen.cluster, seen.nodes
                ))
            }
        })
        .await;
        if let Err(seen) = seen {
            cluster.fail(&format!(
                "node {via} never showed cluster version {cluster_version} and nodes \
                 {expected:?}; last: {seen}"
            ));
        }
    }
}

/// Produces a batch through every node to every partition, then reads every partition back
/// through every node and checks it against what was acknowledged.
async fn serve_through_every_node(
    cluster: &TestCluster,
    books: &mut BTreeMap<u32, Book>,
    round: &str,
) {
    let client = produce_client();
    for via in cluster.ids() {
        let urls = vec![messages_url(cluster, via, TOPIC)];
        for partition in 0..PARTITIONS {
            let ids: Vec<String> = (0..3)
                .map(|i| format!("{round}-via-{via}-{partition}-{i}"))
                .collect();
            produce_ids(
                &client,
                books.entry(partition).or_default(),
                &urls,
                partition,
                ids,
            )
            .await;
        }
    }
    for via in cluster.ids() {
        for partition in 0..PARTITIONS {
            let stored = cluster.read_partition(via, TOPIC, partition).await;
            books[&partition].check(&stored);
            assert_eq!(
                stored.len(),
                books[&partition].acked.len(),
                "{TOPIC}/{partition} read through node {via}"
            );
        }
    }
}

#[tokio::test]
async fn a_node_of_an_older_release_holds_the_cluster_version_until_it_is_upgraded() {
    let current = u64::from(WIRE_VERSION.get());
    let mut cluster =
        TestCluster::start_with_env(3, &[], &[(3, TEST_MAX_WIRE_VERSION_ENV, "0")]).await;
    wait_for_versions(&cluster, 0, &[(1, current), (2, current), (3, 0)]).await;

    create_replicated(&cluster, 1, TOPIC, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(TOPIC, partition, 3).await;
    }
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    serve_through_every_node(&cluster, &mut books, "mixed").await;
    // Many pings and metadata ticks later, the older node still holds the cluster back.
    for via in cluster.ids() {
        let seen = versions(&cluster, via)
            .await
            .unwrap_or_else(|error| cluster.fail(&error));
        assert_eq!(seen.cluster, 0, "node {via} shows a raised cluster version");
    }
    // What needs every node upgraded waits for the cluster version: the schema registry's
    // changes are refused (503, nothing registered) while node 3 is of the older release.
    let registry = cluster.node(1);
    let refused = registry
        .post_json(
            "/schema-registry/subjects/mixed-value/versions",
            &serde_json::json!({"schema": "\"string\""}),
        )
        .await;
    assert_eq!(refused.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        registry
            .get("/schema-registry/subjects")
            .await
            .text()
            .await
            .unwrap_or_default(),
        "[]"
    );

    // Node 3 is upgraded: it restarts on its data without the knob.
    cluster.stop(3).await;
    cluster.node_mut(3).remove_env(TEST_MAX_WIRE_VERSION_ENV);
    cluster.restart(3).await;
    wait_for_versions(
        &cluster,
        current,
        &[(1, current), (2, current), (3, current)],
    )
    .await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(TOPIC, partition, 3).await;
    }
    serve_through_every_node(&cluster, &mut books, "upgraded").await;
    let registered = cluster
        .node(3)
        .post_json(
            "/schema-registry/subjects/mixed-value/versions",
            &serde_json::json!({"schema": "\"string\""}),
        )
        .await;
    assert!(
        registered.status().is_success(),
        "{:?}",
        registered.text().await
    );

    // Never lowered: node 3 restarts again, and while it is away the version stays.
    cluster.stop(3).await;
    let seen = versions(&cluster, 1)
        .await
        .unwrap_or_else(|error| cluster.fail(&error));
    assert_eq!(seen.cluster, current);
    cluster.restart(3).await;
    let rejoined = poll(CATCH_UP_DEADLINE, Duration::from_millis(200), || async {
        let seen = versions(&cluster, 3).await?;
        (seen.cluster == current)
            .then_some(())
            .ok_or_else(|| format!("cluster version {}", seen.cluster))
    })
    .await;
    if let Err(seen) = rejoined {
        cluster.fail(&format!("node 3 came back with {seen}"));
    }
}
