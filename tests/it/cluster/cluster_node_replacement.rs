//! Replacing a lost node (docs/operations.md, "Replacing a lost node"), black box: a node of
//! three is killed and never comes back (its disk is gone); a new node with a new id joins, the
//! lost one is drained although it is down, and every replica it held is rebuilt on the new node
//! from the survivors, with every acknowledged message at its offset, readable through the new
//! node, and writes going on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::book::{produce_ids, Book};
use crate::common::cluster::{
    create_replicated, messages_url, produce_client, sorted_ids, Stored, TestCluster,
    ELECTION_DEADLINE,
};
use crate::common::poll;
use reqwest::StatusCode;

const TOPIC: &str = "replaced";
const PARTITIONS: u32 = 3;
/// How long the replicas of the lost node may take to move to the new one.
const REBUILD_DEADLINE: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_lost_node_is_replaced_by_a_new_id_that_rebuilds_its_replicas_from_the_survivors() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 2, TOPIC, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(TOPIC, partition, 3).await;
    }
    let client = produce_client();
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    let urls = vec![messages_url(&cluster, 2, TOPIC)];
    for round in 0..4 {
        for partition in 0..PARTITIONS {
            let ids: Vec<String> = (0..5)
                .map(|i| format!("before-{round}-{partition}-{i}"))
                .collect();
            let book = books.entry(partition).or_default();
            produce_ids(&client, book, &urls, partition, ids).await;
        }
    }
    let mut before: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let stored = cluster.read_partition(2, TOPIC, partition).await;
        books[&partition].check(&stored);
        assert_eq!(stored.len(), 20, "{TOPIC}/{partition}");
        before.insert(partition, stored);
    }

    // Node 1's disk is gone: it is killed and never started again.
    cluster.kill(1);

    // The replacement: a new node with a new id, started with --join and added.
    let new_id = cluster.start_joining_node().await;
    assert_eq!(new_id, 4);
    let add = cluster.add_request(new_id);
    let node2 = cluster.node(2);
    poll(ELECTION_DEADLINE, Duration::from_millis(250), || async {
        let (status, body) = node2
            .json(node2.post_json("/v1/cluster/nodes", &add).await)
            .await;
        match status {
            StatusCode::CREATED | StatusCode::OK => Ok(()),
            StatusCode::SERVICE_UNAVAILABLE => Err(format!("{status}: {body}")),
            _ => panic!("adding node 4: {status}: {body}"),
        }
    })
    .await
    .unwrap_or_else(|last| panic!("adding node 4: {last}"));

    // The lost node is drained although it is down: its replicas move to node 4.
    let (status, draining) = poll(ELECTION_DEADLINE, Duration::from_millis(250), || async {
        let (status, body) = node2.json(node2.delete("/v1/cluster/nodes/1").await).await;
        match status {
            StatusCode::ACCEPTED => Ok((status, body)),
            // Until node 4 counts as a node that takes replicas.
            StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE => {
                Err(format!("{status}: {body}"))
            }
            _ => panic!("draining node 1: {status}: {body}"),
        }
    })
    .await
    .unwrap_or_else(|last| panic!("draining the lost node 1: {last}"));
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(draining["id"], 1, "{draining}");

    let expected: Vec<u64> = vec![2, 3, 4];
    poll(REBUILD_DEADLINE, Duration::from_millis(250), || async {
        let (view, described) = match (
            cluster.cluster_view(2).await,
            cluster.topic_view(2, TOPIC).await,
        ) {
            (Ok(view), Ok(described)) => (view, described),
            (view, described) => return Err(format!("{view:?}\n{described:?}")),
        };
        let ids: BTreeSet<u64> = view["nodes"]
            .as_array()
            .map(|nodes| {
                nodes
                    .iter()
                    .filter_map(|node| node["id"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        let rebuilt = described["partitions"]
            .as_array()
            .is_some_and(|partitions| {
                partitions.iter().all(|partition| {
                    sorted_ids(&partition["replicas"]) == expected
                        && sorted_ids(&partition["in_sync"]) == expected
                })
            });
        if rebuilt && ids == BTreeSet::from([2, 3, 4]) {
            Ok(())
        } else {
            Err(format!("{view}\n{described}"))
        }
    })
    .await
    .unwrap_or_else(|last| panic!("node 1's replicas were not rebuilt on node 4: {last}"));
    cluster.mark_removed(1);

    // Everything acknowledged is there, at its offset, through the new node too.
    for partition in 0..PARTITIONS {
        for via in [2, 3, 4] {
            let stored = cluster.read_partition(via, TOPIC, partition).await;
            assert_eq!(
                stored, before[&partition],
                "{TOPIC}/{partition} via node {via} after the replacement"
            );
        }
    }
    // And writes go on, through the new node.
    let urls = vec![messages_url(&cluster, 4, TOPIC)];
    for partition in 0..PARTITIONS {
        let ids: Vec<String> = (0..5).map(|i| format!("after-{partition}-{i}")).collect();
        let book = books.get_mut(&partition).expect("a book");
        produce_ids(&client, book, &urls, partition, ids).await;
    }
    for partition in 0..PARTITIONS {
        let stored = cluster.read_partition(4, TOPIC, partition).await;
        books[&partition].check(&stored);
        assert_eq!(stored.len(), 25, "{TOPIC}/{partition}: {stored:?}");
    }
}
