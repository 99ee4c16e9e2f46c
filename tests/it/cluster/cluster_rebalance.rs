//! Balance: a node that joins gets its share of replicas and preferred leaderships, moved a
//! few partitions at a time while producers keep writing; a dry run moves nothing; no
//! acknowledged message is lost or moved and no produce fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::book::{batch, Book};
use crate::common::cluster::{
    create_replicated, messages_url, produce_client, produce_once, Attempt, TestCluster,
};
use crate::common::poll;

const PARTITIONS: u32 = 6;
/// How long moving every partition may take (each copy catches up, then the old replica goes).
const BALANCE_DEADLINE: Duration = Duration::from_secs(120);

/// Each node's replicas of `topic`, as node `via` describes it.
async fn replicas_per_node(cluster: &TestCluster, via: u64, topic: &str) -> BTreeMap<u64, usize> {
    let described = cluster
        .topic_view(via, topic)
        .await
        .unwrap_or_else(|error| cluster.fail(&error));
    let mut counts = BTreeMap::new();
    for partition in described["partitions"].as_array().expect("partitions") {
        for node in partition["replicas"].as_array().expect("replicas") {
            *counts.entry(node.as_u64().expect("id")).or_insert(0) += 1;
        }
    }
    counts
}

async fn plan(cluster: &TestCluster, via: u64) -> Value {
    let node = cluster.node(via);
    let (status, plan) = node.json(node.get("/v1/cluster/rebalance").await).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    plan
}

/// Waits until the plan is empty, nothing copies, and every partition's group is its replicas
/// (in sync).
async fn wait_until_balanced(cluster: &TestCluster, via: u64, topic: &str) {
    poll(BALANCE_DEADLINE, Duration::from_millis(500), || async {
        let plan = plan(cluster, via).await;
        let left = plan["moves"].as_array().map_or(0, Vec::len);
        if left > 0 || plan["moving"] != 0 {
            return Err(format!("not balanced: {plan}"));
        }
        let described = cluster.topic_view(via, topic).await?;
        for partition in described["partitions"].as_array().into_iter().flatten() {
            let replicas: BTreeSet<u64> = partition["replicas"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .collect();
            let in_sync: BTreeSet<u64> = partition["in_sync"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .collect();
            if replicas != in_sync {
                return Err(format!("not in sync: {partition}"));
            }
        }
        Ok(())
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("never balanced: {seen}")));
}

/// Produces one-message batches round the partitions through node 1 until `stop`, counting
/// every answer that was not an acknowledgement.
async fn produce_until(
    url: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (BTreeMap<u32, Book>, Vec<String>) {
    let client = produce_client();
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    let mut failures = Vec::new();
    // Bounded: a request every few ms for at most the balance deadline.
    for request in 0..20_000u32 {
        if *stop.borrow_and_update() {
            break;
        }
        let partition = request % PARTITIONS;
        let ids = vec![format!("load-{request}")];
        let book = books.entry(partition).or_default();
        book.sent.extend(ids.iter().cloned());
        match produce_once(&client, &url, &batch(&ids, partition)).await {
            Attempt::Acknowledged(offsets) => book.acknowledge(&ids, &offsets, partition, false),
            Attempt::Retryable(line) | Attempt::Fatal(line) => {
                book.unacknowledged.extend(ids);
                failures.push(line);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (books, failures)
}

async fn check_books(cluster: &TestCluster, topic: &str, books: &BTreeMap<u32, Book>) -> usize {
    let mut acknowledged = 0;
    for (partition, book) in books {
        let stored = cluster.read_partition(1, topic, *partition).await;
        book.check(&stored);
        acknowledged += book.acked.len();
    }
    acknowledged
}

#[tokio::test]
async fn a_joined_node_gets_its_share_by_itself_under_load_without_failed_requests() {
    let mut cluster = TestCluster::start_with(3, &["--rebalance-settle-ms", "1000"]).await;
    let topic = "shared";
    create_replicated(&cluster, 1, topic, PARTITIONS, 2).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 2).await;
    }
    assert!(plan(&cluster, 1).await["moves"]
        .as_array()
        .is_some_and(Vec::is_empty));

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(produce_until(messages_url(&cluster, 1, topic), stopped));

    let joined = cluster.start_joining_node().await;
    let node1 = cluster.node(1);
    let (status, added) = node1
        .json(
            node1
                .post_json("/v1/cluster/nodes", &cluster.add_request(joined))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    cluster.finish_adding(joined).await;

    // Twelve replicas over four nodes: three each (the planner spreads each topic too).
    wait_until_balanced(&cluster, 1, topic).await;
    let counts = replicas_per_node(&cluster, 1, topic).await;
    assert_eq!(
        counts,
        BTreeMap::from([(1, 3), (2, 3), (3, 3), (joined, 3)]),
        "replicas per node"
    );
    stop.send(true).expect("the load runs");
    let (books, failures) = load.await.expect("the load task");
    assert!(
        failures.is_empty(),
        "failed produces during the rebalance: {failures:#?}"
    );
    let acknowledged = check_books(&cluster, topic, &books).await;
    assert!(
        acknowledged > 50,
        "too little load to mean anything: {acknowledged}"
    );
}

#[tokio::test]
async fn a_dry_run_moves_nothing_and_the_cli_carries_out_the_plan() {
    let mut cluster = TestCluster::start_with(2, &["--rebalance-auto", "false"]).await;
    let topic = "lopsided";
    create_replicated(&cluster, 1, topic, PARTITIONS, 2).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 2).await;
    }
    let joined = cluster.start_joining_node().await;
    let node1 = cluster.node(1);
    let response = node1
        .post_json("/v1/cluster/nodes", &cluster.add_request(joined))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    cluster.finish_adding(joined).await;

    // The dry run: node 3 would get four of the twelve replicas and two leaderships.
    let dry = plan(&cluster, 2).await;
    assert_eq!(dry["started"], false, "{dry}");
    let share = dry["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["node_id"] == joined))
        .cloned()
        .unwrap_or_else(|| cluster.fail(&format!("no share for node 3: {dry}")));
    assert_eq!(share["replicas_before"], 0, "{dry}");
    assert_eq!(share["replicas_after"], 4, "{dry}");
    assert_eq!(share["leaders_after"], 2, "{dry}");
    let copies = dry["moves"].as_array().map_or(0, |moves| {
        moves.iter().filter(|m| m["copies_data"] == true).count()
    });
    assert_eq!(copies, 4, "{dry}");
    // Nothing moves by itself with automatic rebalancing off.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let counts = replicas_per_node(&cluster, 1, topic).await;
    assert_eq!(
        counts.get(&joined),
        None,
        "moved without being asked: {counts:?}"
    );

    let server = cluster.node(2).url("");
    let printed = crate::common::process::run(
        cluster.node(2),
        "herald cluster rebalance --wait",
        std::path::Path::new(env!("CARGO_BIN_EXE_herald")),
        [
            "cluster",
            "--server",
            server.as_str(),
            "rebalance",
            "--wait",
            "--timeout-secs",
            "120",
        ],
        &std::env::temp_dir(),
        &[],
        BALANCE_DEADLINE,
    )
    .await
    .stdout;
    assert!(printed.starts_with("rebalancing:\n"), "{printed}");
    assert!(printed.contains("(copy)"), "{printed}");
    assert!(printed.trim_end().ends_with("balanced"), "{printed}");

    wait_until_balanced(&cluster, 1, topic).await;
    let counts = replicas_per_node(&cluster, 1, topic).await;
    assert_eq!(counts, BTreeMap::from([(1, 4), (2, 4), (joined, 4)]));
    // A second rebalance has nothing to do.
    let node1 = cluster.node(1);
    let (status, again) = node1
        .json(
            node1
                .post_json("/v1/cluster/rebalance", &serde_json::json!({}))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["moves"], serde_json::json!([]), "{again}");
}
