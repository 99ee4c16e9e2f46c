//! The metrics an operator's dashboard and alerts read (`deploy/grafana/`,
//! `deploy/prometheus/alerts.yml`), checked as numbers after a known workload: messages and
//! bytes in and out per partition, consumer-group lag in messages and in seconds, raft
//! progress per group, storage gauges; and on a 3-node cluster, exactly one leader per raft
//! group and the leader's view of its followers.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::{now_ms, poll, Server};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_known_workload_shows_in_the_per_partition_counters_lag_raft_and_storage_gauges() {
    let server = Server::start().await;
    server.create_topic("orders", 2).await;
    server.wait_for_leaders("orders").await;
    // Five messages on partition 0 (an hour old, by their timestamps), three on partition 1.
    let hour_ago = now_ms() - 3_600_000;
    let first: Vec<_> = (0..5)
        .map(|n| json!({"partition": 0, "value": format!("p0-{n}"), "timestamp": hour_ago + n}))
        .collect();
    server
        .produce_ok("orders", &json!({"messages": first}))
        .await;
    let second: Vec<_> = (0..3)
        .map(|n| json!({"partition": 1, "value": format!("p1-{n}")}))
        .collect();
    server
        .produce_ok("orders", &json!({"messages": second}))
        .await;
    let (_, read) = server.fetch("orders", 0, "offset=0&max_messages=100").await;
    assert_eq!(read["messages"].as_array().map(Vec::len), Some(5), "{read}");

    // A group that consumed two messages of partition 0 and none of partition 1.
    let member = server
        .join_group("billing", &json!({"topics": ["orders"]}))
        .await;
    let (status, answer) = server
        .commit(
            "billing",
            &json!({
                "member_id": member.id,
                "generation": member.generation,
                "offsets": [
                    {"topic": "orders", "partition": 0, "offset": 2},
                    {"topic": "orders", "partition": 1, "offset": 3},
                ],
            }),
        )
        .await;
    assert!(status.is_success(), "commit: {status}: {answer}");

    let p0 = [("topic", "orders"), ("partition", "0")];
    let p1 = [("topic", "orders"), ("partition", "1")];
    assert_eq!(
        server.metric("herald_produced_messages_total", &p0).await,
        Some(5.0)
    );
    assert_eq!(
        server.metric("herald_produced_messages_total", &p1).await,
        Some(3.0)
    );
    // Values are JSON text: "p0-0" is 6 bytes with its quotes.
    assert_eq!(
        server.metric("herald_produced_bytes_total", &p0).await,
        Some(30.0)
    );
    assert_eq!(
        server.metric("herald_produced_bytes_total", &p1).await,
        Some(18.0)
    );
    assert_eq!(
        server.metric("herald_consumed_messages_total", &p0).await,
        Some(5.0)
    );
    assert_eq!(
        server.metric("herald_consumed_bytes_total", &p0).await,
        Some(30.0)
    );
    assert!(
        server
            .metric("herald_produce_duration_seconds_count", &[("acks", "all")])
            .await
            >= Some(2.0)
    );

    let billing_p0 = [
        ("group", "billing"),
        ("topic", "orders"),
        ("partition", "0"),
    ];
    let billing_p1 = [
        ("group", "billing"),
        ("topic", "orders"),
        ("partition", "1"),
    ];
    assert_eq!(
        server
            .metric("herald_group_partition_lag", &billing_p0)
            .await,
        Some(3.0)
    );
    assert_eq!(
        server
            .metric("herald_group_partition_lag", &billing_p1)
            .await,
        Some(0.0)
    );
    // The oldest unconsumed message (offset 2) was stamped an hour ago.
    let age = server
        .metric("herald_group_lag_seconds", &billing_p0)
        .await
        .expect("lag in seconds on partition 0");
    assert!((3_600.0..3_700.0).contains(&age), "lag seconds {age}");
    assert_eq!(
        server.metric("herald_group_lag_seconds", &billing_p1).await,
        Some(0.0)
    );

    let orders_0 = [("raft_group", "orders/0")];
    assert_eq!(
        server
            .metric(
                "herald_raft_role",
                &[("raft_group", "orders/0"), ("role", "leader")]
            )
            .await,
        Some(1.0)
    );
    assert_eq!(
        server
            .metric(
                "herald_raft_role",
                &[("raft_group", "metadata"), ("role", "leader")]
            )
            .await,
        Some(1.0)
    );
    assert!(server.metric("herald_raft_term", &orders_0).await >= Some(1.0));
    let committed = server.metric("herald_raft_commit_index", &orders_0).await;
    let applied = server.metric("herald_raft_applied_index", &orders_0).await;
    // The membership entry, then the one batch produced to the partition.
    assert!(committed >= Some(2.0), "commit index {committed:?}");
    assert_eq!(applied, committed);

    let written = server.metric("herald_storage_memtable_bytes", &[]).await;
    assert!(written > Some(0.0), "memtable bytes {written:?}");
    let total = server.metric("herald_storage_disk_total_bytes", &[]).await;
    let free = server.metric("herald_storage_disk_free_bytes", &[]).await;
    assert!(
        total > Some(0.0) && free <= total,
        "disk {free:?} of {total:?}"
    );
    assert_eq!(
        server.metric("herald_storage_write_stopped", &[]).await,
        Some(0.0)
    );
    assert!(server
        .metric("herald_storage_pending_compaction_bytes", &[])
        .await
        .is_some());
}

#[tokio::test]
async fn each_raft_group_has_one_leader_and_it_sees_its_followers() {
    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "replicated", 1, 3).await;
    let leader = cluster.stable_leader("replicated", 0).await;
    let body = json!({"messages": [{"value": 1}, {"value": 2}]});
    cluster.node(leader).produce_ok("replicated", &body).await;

    let group = [("raft_group", "replicated/0"), ("role", "leader")];
    let roles = poll(DEADLINE, Duration::from_millis(100), || async {
        let mut leaders = BTreeMap::new();
        for id in cluster.ids() {
            let value = cluster.node(id).metric("herald_raft_role", &group).await;
            leaders.insert(id, value);
        }
        let count = leaders
            .values()
            .filter(|value| **value == Some(1.0))
            .count();
        if count == 1 && leaders.values().all(Option::is_some) {
            Ok(leaders)
        } else {
            Err(format!("leader role per node: {leaders:?}"))
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
    assert_eq!(roles[&leader], Some(1.0), "{roles:?}");

    // The leader reports both followers, caught up once replication settles.
    let leader_node = cluster.node(leader);
    for follower in cluster.others_than(leader) {
        let follower = follower.to_string();
        let labels = [
            ("raft_group", "replicated/0"),
            ("follower", follower.as_str()),
        ];
        poll(DEADLINE, Duration::from_millis(100), || async {
            match leader_node
                .metric("herald_raft_follower_lag_entries", &labels)
                .await
            {
                Some(0.0) => Ok(()),
                other => Err(format!("follower {follower} lag {other:?}")),
            }
        })
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
    }
    // Followers agree with the leader on the term and have applied what it committed.
    let term = leader_node
        .metric("herald_raft_term", &[("raft_group", "replicated/0")])
        .await;
    for follower in cluster.others_than(leader) {
        let node = cluster.node(follower);
        assert_eq!(
            node.metric("herald_raft_term", &[("raft_group", "replicated/0")])
                .await,
            term
        );
        assert_eq!(
            node.metric(
                "herald_raft_role",
                &[("raft_group", "replicated/0"), ("role", "follower")]
            )
            .await,
            Some(1.0)
        );
    }
}
