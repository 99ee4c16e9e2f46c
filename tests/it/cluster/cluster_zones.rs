//! Zones on six nodes in three zones (two per zone, laid out so that the founding metadata
//! voters 1, 2 and 3 are not spread): every partition's three replicas land in three zones,
//! the metadata group's votes move until they span the zones, `GET /v1/cluster` shows each
//! node's zone, and losing both nodes of one zone leaves every partition a leader and loses
//! nothing acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::cluster::{create_replicated, sorted_ids, TestCluster, CLUSTER_DEADLINE};
use crate::common::poll;

const PARTITIONS: u32 = 6;

fn zone_of(node: u64) -> &'static str {
    match node {
        1 | 2 => "zone-a",
        3 | 4 => "zone-b",
        _ => "zone-c",
    }
}

/// Waits until `GET /v1/cluster` through node 1 shows every node's zone.
async fn wait_for_zones(cluster: &TestCluster) {
    poll(CLUSTER_DEADLINE, Duration::from_millis(200), || async {
        let (_, view) = cluster
            .node(1)
            .json(cluster.node(1).get("/v1/cluster").await)
            .await;
        let zones: BTreeMap<u64, String> = view["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|node| Some((node["id"].as_u64()?, node["zone"].as_str()?.to_string())))
            .collect();
        let expected: BTreeMap<u64, String> =
            (1..=6).map(|id| (id, zone_of(id).to_string())).collect();
        if zones == expected {
            Ok(())
        } else {
            Err(format!("{view}"))
        }
    })
    .await
    .unwrap_or_else(|view| cluster.fail(&format!("zones not shown: {view}")));
}

/// Waits until node `id` votes in the metadata group (a follower or the leader there, not a
/// learner).
async fn wait_for_metadata_vote(cluster: &TestCluster, id: u64) {
    let server = cluster.node(id);
    poll(CLUSTER_DEADLINE, Duration::from_millis(250), || async {
        let learner = server
            .metric(
                "herald_raft_role",
                &[("raft_group", "metadata"), ("role", "learner")],
            )
            .await;
        if learner == Some(0.0) {
            Ok(())
        } else {
            Err(format!("learner gauge {learner:?}"))
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("node {id} never got a metadata vote: {seen}")));
}

#[tokio::test]
async fn replicas_span_zones_and_a_lost_zone_loses_nothing() {
    let env: Vec<(u64, &str, &str)> = (1..=6).map(|id| (id, "HERALD_ZONE", zone_of(id))).collect();
    let mut cluster = TestCluster::start_with_env(6, &[], &env).await;
    wait_for_zones(&cluster).await;
    // Founders 1 and 2 share zone-a: a vote moves to zone-c (node 5).
    wait_for_metadata_vote(&cluster, 5).await;

    let topic = "zoned";
    let created = create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    let mut leaders_per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for partition in created["partitions"].as_array().expect("partitions") {
        let replicas = sorted_ids(&partition["replicas"]);
        let zones: BTreeSet<&str> = replicas.iter().map(|id| zone_of(*id)).collect();
        assert_eq!(zones.len(), 3, "replicas in three zones: {partition}");
        let preferred = partition["replicas"][0]
            .as_u64()
            .expect("a preferred leader");
        *leaders_per_zone.entry(zone_of(preferred)).or_default() += 1;
    }
    assert_eq!(
        leaders_per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "preferred leaders spread over zones: {leaders_per_zone:?}"
    );
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
        cluster
            .produce_id(
                &cluster.ids(),
                topic,
                partition,
                &format!("before-{partition}"),
            )
            .await;
    }

    // Zone a goes: both its nodes.
    cluster.kill(1);
    cluster.kill(2);
    let survivors = cluster.live_ids();
    for partition in 0..PARTITIONS {
        cluster
            .produce_id(&survivors, topic, partition, &format!("after-{partition}"))
            .await;
        let stored = cluster.stored_keys(survivors[0], topic, partition).await;
        assert_eq!(
            stored,
            [format!("before-{partition}"), format!("after-{partition}")],
            "partition {partition}"
        );
    }
    // The metadata group kept its quorum: a topic can still be created.
    create_replicated(&cluster, survivors[0], "after-zone-loss", 2, 3).await;
}
