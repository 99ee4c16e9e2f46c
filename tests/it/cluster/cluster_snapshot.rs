//! Issue 29, black box, three real nodes: a replica that was down while retention moved the
//! partition's log start past everything it had, and the leader purged the raft log it would
//! have replayed, comes back through a snapshot. It must hold the whole retained range (reads
//! at the log start answer 200 through every node, its own log start is the partition's),
//! carry the same subscription state (stats answer, same backlog), and once it leads again
//! and dies, the next leader neither redelivers what was acked through it nor hands its
//! held leases to a second puller. A consumer group's committed offset is the same through every
//! node, and a member continues from it through the restored leader.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::{poll, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

const TOPIC: &str = "snap-retained";
const SUBSCRIPTION: &str = "sr";
const GROUP: &str = "snap-group";
const DEADLINE: Duration = Duration::from_secs(40);
/// 100 messages of about 230 bytes per produce (one batch, one raft entry each).
const BATCH: u64 = 100;
/// Holds about 13 of those batches.
const RETENTION_BYTES: u64 = 300_000;
/// Leases held across the failover: far longer than the test.
const HELD_MS: u64 = 600_000;

/// Batch `b` carries timestamp `base + b` seconds, so the time index has one entry per
/// batch; the base is a few minutes before the test (well within time retention).
fn timestamp_of(batch: u64) -> i64 {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| common::now_ms() - 300_000) + batch as i64 * 1_000
}

fn messages(batch: u64) -> Value {
    let padding = "x".repeat(200);
    let messages: Vec<Value> = (batch * BATCH..(batch + 1) * BATCH)
        .map(|id| {
            json!({"partition": 0, "value": {"id": id, "pad": padding},
                   "timestamp": timestamp_of(batch)})
        })
        .collect();
    json!({ "messages": messages })
}

async fn produce(node: &Server, batches: std::ops::Range<u64>) {
    for batch in batches {
        node.produce_ok(TOPIC, &messages(batch)).await;
    }
}

async fn gauge(cluster: &TestCluster, id: u64, name: &str) -> Option<u64> {
    cluster.node(id).partition_gauge(name, TOPIC, 0).await
}

/// Waits until every node in `ids` reports the same log start, past `past`, and the high
/// watermark `high`, unchanged for a few retention checks (a trim may still be coming);
/// answers it.
async fn settled_log_start(cluster: &TestCluster, ids: &[u64], past: u64, high: u64) -> u64 {
    const STABLE: Duration = Duration::from_millis(3_000);
    let mut since: Option<(u64, std::time::Instant)> = None;
    let until = std::time::Instant::now() + DEADLINE;
    loop {
        let mut extents = Vec::new();
        for &id in ids {
            extents.push((
                gauge(cluster, id, "herald_replica_log_start_offset").await,
                gauge(cluster, id, "herald_replica_high_watermark").await,
            ));
        }
        let agreed = match extents.first() {
            Some((Some(start), Some(end)))
                if *start > past
                    && *end == high
                    && extents.iter().all(|extent| *extent == extents[0]) =>
            {
                Some(*start)
            }
            _ => None,
        };
        since = match (agreed, since) {
            (Some(start), Some((same, at))) if start == same => {
                if at.elapsed() >= STABLE {
                    return start;
                }
                Some((same, at))
            }
            (Some(start), _) => Some((start, std::time::Instant::now())),
            (None, _) => None,
        };
        if std::time::Instant::now() >= until {
            cluster.fail(&format!(
                "replicas never agreed: (log start, high watermark) per node: {extents:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Pulls through `node` until `count` messages are leased (or nothing more comes); answers
/// (message id, ack id) pairs.
async fn lease(node: &Server, count: usize) -> Vec<(u64, String)> {
    let mut leased = Vec::new();
    let mut empty = 0;
    while leased.len() < count && empty < 5 {
        let max = (count - leased.len()).min(500) as u32;
        let body = json!({"max_messages": max, "max_wait_ms": 300});
        let path = format!("/v1/subscriptions/{SUBSCRIPTION}/pull");
        let (status, answer) = node.json(node.post_json(&path, &body).await).await;
        if status != StatusCode::OK {
            empty += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let pulled = answer["messages"].as_array().cloned().unwrap_or_default();
        if pulled.is_empty() {
            empty += 1;
        }
        for message in pulled {
            let id = message["message"]["value"]["id"].as_u64().expect("an id");
            let ack_id = message["ack_id"].as_str().expect("an ack id").to_string();
            leased.push((id, ack_id));
        }
    }
    leased
}

async fn ack(node: &Server, leases: &[(u64, String)]) -> BTreeSet<u64> {
    let ack_ids: Vec<&str> = leases.iter().map(|(_, ack_id)| ack_id.as_str()).collect();
    let path = format!("/v1/subscriptions/{SUBSCRIPTION}/ack");
    let (status, answer) = node
        .json(node.post_json(&path, &json!({ "ack_ids": ack_ids })).await)
        .await;
    if status != StatusCode::OK {
        node.fail(&format!("ack: {status}: {answer}"));
    }
    let confirmed: BTreeSet<&str> = answer["acked"]
        .as_array()
        .expect("acked")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    leases
        .iter()
        .filter(|(_, ack_id)| confirmed.contains(ack_id.as_str()))
        .map(|(id, _)| *id)
        .collect()
}

/// The subscription's counts through `id`: 200, or the test fails (issue 29: 500).
async fn backlog(cluster: &TestCluster, id: u64) -> u64 {
    let path = format!("/v1/subscriptions/{SUBSCRIPTION}");
    let answer = poll(DEADLINE, Duration::from_millis(200), || async {
        match cluster.try_get(id, &path).await {
            Ok((StatusCode::OK, answer)) => Ok(answer),
            Ok((status, answer)) => Err(format!("{status}: {answer}")),
            Err(error) => Err(error),
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("GET {path} through node {id}: {seen}")));
    answer["backlog"]
        .as_u64()
        .unwrap_or_else(|| cluster.fail(&format!("no backlog: {answer}")))
}

#[tokio::test]
async fn a_replica_restored_by_snapshot_holds_the_retained_log_and_the_queue_state() {
    let mut cluster = TestCluster::start_with(3, &["--retention-check-interval-ms", "1000"]).await;
    create_replicated(&cluster, 1, TOPIC, 1, 3).await;
    let preferred = cluster.stable_leader(TOPIC, 0).await;
    let via = cluster.others_than(preferred)[0];
    let others = cluster.others_than(preferred);
    let node = cluster.node(via);
    let response = node
        .patch_json(
            &format!("/v1/topics/{TOPIC}"),
            &json!({"config": {"retention_bytes": RETENTION_BYTES}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    common::queues::subscribe(
        node,
        SUBSCRIPTION,
        json!({"topic": TOPIC, "ack_deadline_ms": HELD_MS}),
    )
    .await;

    // 3,000 messages; retention keeps the newest ~1,300 on every replica.
    produce(node, 0..30).await;
    let first_start = settled_log_start(&cluster, &cluster.ids(), 0, 3_000).await;
    // A subscription holds 200 leases and acked 100 of them.
    let early = lease(node, 200).await;
    let early_acked = ack(node, &early[..100]).await;
    assert_eq!(early_acked.len(), 100, "the first acks");

    // The preferred replica dies; 4,000 more messages move the log start past all it had.
    // The leader checkpoints its state between the two halves, so it can purge its raft log
    // past everything the dead replica holds.
    cluster.kill(preferred);
    let node = cluster.node(via);
    produce(node, 30..50).await;
    // Whichever of the two leads now sends the snapshot: both must have a checkpoint there.
    for id in others.iter().copied() {
        if let Err(seen) = cluster
            .node(id)
            .wait_for_checkpoint(TOPIC, 0, 50 * BATCH, DEADLINE)
            .await
        {
            cluster.fail(&format!(
                "node {id} took no checkpoint between the halves: {seen}"
            ));
        }
    }
    let node = cluster.node(via);
    produce(node, 50..70).await;
    let start = settled_log_start(&cluster, &others, 3_000, 7_000).await;
    assert!(start > first_start);
    let backlog_before = backlog(&cluster, via).await;
    // A consumer group reads 100 retained messages and commits past them.
    let node = cluster.node(via);
    let member = node.join_group(GROUP, &json!({"topics": [TOPIC]})).await;
    let polled = node
        .poll_group(
            GROUP,
            &member.id,
            &json!({"max_messages": 100, "max_wait_ms": 2000}),
        )
        .await
        .unwrap_or_else(|refused| node.fail(&format!("group poll: {refused:?}")));
    assert_eq!(polled.messages.first().map(|m| m.offset), Some(start));
    let (status, answer) = node.commit(GROUP, &polled.commit_body(&member.id)).await;
    assert!(status.is_success(), "commit: {status}: {answer}");
    let committed = start + polled.messages.len() as u64;
    let response = node
        .delete(&format!("/v1/groups/{GROUP}/members/{}", member.id))
        .await;
    assert!(response.status().is_success(), "leaving the group");

    // Back: it catches up (a snapshot, then replay), and takes its leadership back once it
    // holds everything.
    cluster.restart(preferred).await;
    let restored = settled_log_start(&cluster, &cluster.ids(), 3_000, 7_000).await;
    assert_eq!(restored, start, "the restored replica's log start");
    let installs = cluster
        .node(preferred)
        .metric("herald_raft_snapshot_installs_total", &[])
        .await
        .unwrap_or(0.0);
    assert!(
        installs >= 1.0,
        "node {preferred} should have caught up through a snapshot"
    );
    let led = poll(
        Duration::from_secs(30),
        Duration::from_millis(250),
        || async {
            match cluster.partition_view(via, TOPIC, 0).await {
                Ok(view) if view["leader"].as_u64() == Some(preferred) => Ok(()),
                Ok(view) => Err(view.to_string()),
                Err(error) => Err(error),
            }
        },
    )
    .await;
    if let Err(seen) = led {
        cluster.fail(&format!(
            "leadership never went back to node {preferred}: {seen}"
        ));
    }

    // Every node reads the retained start, finds the same offsets by time (the restored
    // leader's time index), and the subscription's counts are the same.
    for id in cluster.ids() {
        let node = cluster.node(id);
        for batch in [start / BATCH, 65, 69] {
            let found = node
                .offset_for_timestamp(TOPIC, 0, timestamp_of(batch))
                .await;
            assert_eq!(found, batch * BATCH, "node {id}: batch {batch} by time");
        }
    }
    for id in cluster.ids() {
        let (status, page) = cluster
            .node(id)
            .fetch(TOPIC, 0, &format!("offset={start}"))
            .await;
        assert_eq!(status, StatusCode::OK, "node {id}: {page}");
        assert_eq!(page["messages"][0]["offset"], start, "node {id}: {page}");
    }
    for id in cluster.ids() {
        assert_eq!(
            backlog(&cluster, id).await,
            backlog_before,
            "through node {id}"
        );
        assert_eq!(
            cluster.node(id).committed(GROUP, TOPIC, 0).await,
            Some(committed),
            "the group's committed offset through node {id}"
        );
    }
    // A new member continues from the committed offset, through the restored leader.
    let node = cluster.node(preferred);
    let member = node.join_group(GROUP, &json!({"topics": [TOPIC]})).await;
    let poll_body = json!({"max_messages": 10, "max_wait_ms": 1000});
    let polled = poll(DEADLINE, Duration::from_millis(200), || async {
        match node.poll_group(GROUP, &member.id, &poll_body).await {
            Ok(polled) if !polled.messages.is_empty() => Ok(polled),
            other => Err(format!("{other:?}")),
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("group poll through node {preferred}: {seen}")));
    assert_eq!(
        polled.messages[0].offset, committed,
        "where the group continues"
    );

    // Through the restored leader, puller A holds 300 leases and acks 100 of them.
    let node = cluster.node(preferred);
    let held = lease(node, 300).await;
    assert_eq!(held.len(), 300, "leases through the restored leader");
    let acked = ack(node, &held[..100]).await;
    assert_eq!(acked.len(), 100, "acks through the restored leader");
    let held: BTreeSet<u64> = held[100..].iter().map(|(id, _)| *id).collect();

    // It dies again: puller B, through the next leader, gets everything else, and nothing
    // acked or held.
    cluster.kill(preferred);
    cluster.wait_for_leader_change(TOPIC, 0, preferred).await;
    let node = cluster.node(via);
    let mut delivered = BTreeSet::new();
    let expected = (7_000 - start) as usize - 300;
    let until = std::time::Instant::now() + DEADLINE;
    while delivered.len() < expected && std::time::Instant::now() < until {
        for (id, _) in lease(node, 500).await {
            delivered.insert(id);
        }
    }
    let again: Vec<&u64> = delivered.intersection(&acked).collect();
    assert!(again.is_empty(), "acked, then delivered again: {again:?}");
    let twice: Vec<&u64> = delivered.intersection(&held).collect();
    assert!(twice.is_empty(), "held by puller A, leased to B: {twice:?}");
    let early: Vec<&u64> = delivered.iter().filter(|id| **id < start).collect();
    assert!(early.is_empty(), "trimmed messages delivered: {early:?}");
    assert_eq!(delivered.len(), expected, "puller B's deliveries");
}
