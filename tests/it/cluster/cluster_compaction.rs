//! Log compaction on a replicated partition, black box, three real nodes: the leader plans
//! passes and every replica runs them on its own copy. A follower killed in the middle of a
//! pass resumes it after a restart and ends with the same bytes as its peers (each node's own
//! gauges), and whichever replica leads serves exactly the latest value of every key.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::TestCluster;
use crate::common::poll;
use serde_json::{json, Value};

const TOPIC: &str = "replicated-changelog";
const DEADLINE: Duration = Duration::from_secs(90);
const KEYS: usize = 200;

/// A per-replica compaction gauge of the topic's partition on node `via`.
async fn gauge(cluster: &TestCluster, via: u64, name: &str) -> Option<u64> {
    cluster.node(via).partition_gauge(name, TOPIC, 0).await
}

/// Every message read through node `via`, as key -> (offset, value); `None` while some key
/// still appears more than once (not compacted yet).
async fn latest_through(cluster: &TestCluster, via: u64) -> Option<BTreeMap<String, (u64, Value)>> {
    let mut by_key = BTreeMap::new();
    for message in cluster.read_partition(via, TOPIC, 0).await {
        let key = message.key.clone().expect("keyed");
        if by_key
            .insert(key, (message.offset, message.value))
            .is_some()
        {
            return None;
        }
    }
    Some(by_key)
}

#[tokio::test]
async fn a_replica_killed_mid_pass_ends_like_its_peers() {
    let mut cluster = TestCluster::start_with(
        3,
        &[
            "--retention-check-interval-ms",
            "200",
            // Slow passes, so that one is under way when the follower is killed.
            "--cleaner-io-max-bytes-per-sec",
            "262144",
        ],
    )
    .await;
    let created = cluster
        .node(1)
        .create_topic_with(&json!({
            "name": TOPIC,
            "partitions": 1,
            "replication_factor": 3,
            "config": {"cleanup_policy": "compact"}
        }))
        .await;
    assert_eq!(created["config"]["cleanup_policy"], "compact", "{created}");
    cluster.wait_until_in_sync(TOPIC, 0, 3).await;
    let leader = cluster.stable_leader(TOPIC, 0).await;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower");

    // Ten versions of 200 keys, about 2 MB, then a tail message.
    let padding = "p".repeat(1000);
    let mut expected: BTreeMap<String, (u64, Value)> = BTreeMap::new();
    for round in 0..10 {
        let messages: Vec<Value> = (0..KEYS)
            .map(|key| json!({"key": format!("k{key:03}"), "value": {"round": round, "pad": padding}}))
            .collect();
        let offsets = cluster
            .node(leader)
            .produce_ok(TOPIC, &json!({ "messages": messages }))
            .await;
        for (message, (_, offset)) in messages.iter().zip(offsets) {
            let key = message["key"].as_str().expect("key").to_string();
            expected.insert(key, (offset, message["value"].clone()));
        }
    }
    let tail = cluster
        .node(leader)
        .produce_ok(
            TOPIC,
            &json!({"messages": [{"key": "tail", "value": "end"}]}),
        )
        .await;
    expected.insert("tail".into(), (tail[0].1, json!("end")));

    // Kill the follower while it has a planned pass it has not finished.
    let under_way = poll(DEADLINE, Duration::from_millis(50), || async {
        let planned = gauge(&cluster, follower, "herald_compaction_planned_passes").await;
        let done = gauge(&cluster, follower, "herald_compaction_last_pass").await;
        match (planned, done) {
            (Some(planned), Some(done)) if planned > done => Ok(()),
            _ => Err(format!("planned {planned:?}, done {done:?}")),
        }
    })
    .await;
    if let Err(seen) = under_way {
        cluster.fail(&format!(
            "node {follower} never had a pass under way: {seen}"
        ));
    }
    cluster.kill(follower);
    cluster.restart(follower).await;

    // The leader ends with exactly the latest value of every key...
    let compacted = poll(DEADLINE, Duration::from_millis(200), || async {
        match latest_through(&cluster, follower).await {
            Some(latest) if latest == expected => Ok(()),
            Some(latest) => Err(format!("{} keys, not the latest values", latest.len())),
            None => Err("some key still appears twice".to_string()),
        }
    })
    .await;
    if let Err(seen) = compacted {
        cluster.fail(&format!("the partition was never compacted: {seen}"));
    }
    // ... and every replica finishes every planned pass, keeping byte for byte the same.
    let converged = poll(DEADLINE, Duration::from_millis(200), || async {
        let mut views = Vec::new();
        for id in cluster.ids() {
            views.push((
                gauge(&cluster, id, "herald_compaction_planned_passes").await,
                gauge(&cluster, id, "herald_compaction_last_pass").await,
                gauge(&cluster, id, "herald_compaction_keys_kept").await,
                gauge(&cluster, id, "herald_compaction_bytes_kept").await,
            ));
        }
        let settled = views.iter().all(|view| {
            *view == views[0] && view.0.is_some() && view.0 == view.1 && view.2 == Some(KEYS as u64)
        });
        if settled {
            Ok(())
        } else {
            Err(format!("(planned, done, keys, bytes) per node: {views:?}"))
        }
    })
    .await;
    if let Err(seen) = converged {
        cluster.fail(&format!("replicas did not converge: {seen}"));
    }

    // Exactly the latest value of every key, whichever replica leads.
    let leader = cluster.stable_leader(TOPIC, 0).await;
    cluster.kill(leader);
    let survivor = cluster
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a survivor");
    let new_leader = cluster.wait_for_leader_change(TOPIC, 0, leader).await;
    assert_ne!(new_leader, leader);
    assert_eq!(latest_through(&cluster, survivor).await, Some(expected));
}
