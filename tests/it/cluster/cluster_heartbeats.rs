//! Coalesced heartbeats on three nodes with quiescence off (every group stays active): the
//! leaders' heartbeats to each peer travel in batches, and the batches keep every group's
//! leader in place: no follower times out and starts an election.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster};

const PARTITIONS: u32 = 12;

#[tokio::test]
async fn heartbeats_travel_in_batches_and_keep_every_leader() {
    let mut cluster = TestCluster::start_with(3, &["--quiesce-after-ms", "0"]).await;
    let topic = "beating";
    create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
    let mut leaders = BTreeMap::new();
    for partition in 0..PARTITIONS {
        leaders.insert(partition, cluster.stable_leader(topic, partition).await);
    }
    let mut before = BTreeMap::new();
    for node in cluster.ids() {
        before.insert(
            node,
            (
                cluster
                    .node(node)
                    .metric_total("herald_raft_heartbeat_batches_total")
                    .await,
                cluster
                    .node(node)
                    .metric_total("herald_raft_vote_requests_total")
                    .await,
            ),
        );
    }
    // Four election timeouts: a follower whose heartbeats were lost would have campaigned.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for node in cluster.ids() {
        let batches = cluster
            .node(node)
            .metric_total("herald_raft_heartbeat_batches_total")
            .await;
        let votes = cluster
            .node(node)
            .metric_total("herald_raft_vote_requests_total")
            .await;
        let (batches_before, votes_before) = before[&node];
        // Every node leads some group (preferred leaders are spread), which heartbeats its two
        // followers every 500 ms.
        assert!(
            batches - batches_before >= 12.0,
            "node {node} sent {} heartbeat batches in 6 s",
            batches - batches_before
        );
        assert_eq!(votes, votes_before, "node {node} campaigned");
    }
    for partition in 0..PARTITIONS {
        assert_eq!(
            cluster.leader_of(topic, partition).await,
            leaders[&partition],
            "{topic}/{partition} changed leader"
        );
        cluster
            .produce_id(&[1, 2, 3], topic, partition, &format!("beat-{partition}"))
            .await;
    }
    cluster.restart(2).await;
    // A restarted follower is heartbeated in batches again: it learns every leader.
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
}
