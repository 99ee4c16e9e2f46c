//! Consumer groups on a cluster, black box: members served by different nodes, committed
//! offsets visible through every node, and group state surviving the death of the node that
//! coordinated it (the metadata leader) and a restart of every node; polls through random
//! nodes whose answers are dropped at random lose nothing; a commit through a node without
//! the partition is checked against the partition's leader.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster, CLUSTER_DEADLINE};
use crate::common::{poll, Member, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

const EVERY: Duration = Duration::from_millis(200);
const MESSAGES: u64 = 120;

fn id_of(value: &str) -> u64 {
    serde_json::from_str::<Value>(value).expect("JSON")["id"]
        .as_u64()
        .expect("an id")
}

/// The committed offsets `GET /v1/groups/g` shows, per (topic, partition).
async fn committed_via(node: &Server) -> Vec<(String, u64, Value)> {
    let described = node.describe_group("g").await;
    described["offsets"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|offset| {
            (
                offset["topic"].as_str().unwrap_or_default().to_string(),
                offset["partition"].as_u64().unwrap_or_default(),
                offset["committed"].clone(),
            )
        })
        .collect()
}

/// Waits until every live node shows the same committed offsets; answers them.
async fn agreed_offsets(cluster: &TestCluster) -> Vec<(String, u64, Value)> {
    poll(CLUSTER_DEADLINE, EVERY, || async {
        let mut views = Vec::new();
        for id in cluster.live_ids() {
            views.push(committed_via(cluster.node(id)).await);
        }
        if views.windows(2).all(|pair| pair[0] == pair[1]) {
            Ok(views.remove(0))
        } else {
            Err(format!("nodes disagree: {views:?}"))
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen))
}

/// Polls through `via` and commits through `commit_via`; answers the ids processed.
async fn poll_and_commit(via: &Server, commit_via: &Server, member: &str) -> Vec<u64> {
    let polled = match via
        .poll_group(
            "g",
            member,
            &json!({"max_messages": 30, "max_wait_ms": 200}),
        )
        .await
    {
        Ok(polled) => polled,
        Err((status, body)) => via.fail(&format!("poll: {status}: {body}")),
    };
    if polled.messages.is_empty() {
        return Vec::new();
    }
    let (status, body) = commit_via.commit("g", &polled.commit_body(member)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "commit: {body}");
    polled
        .messages
        .iter()
        .map(|message| id_of(&message.value))
        .collect()
}

#[tokio::test]
async fn group_state_survives_its_coordinators_death_and_a_full_restart() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "orders", 6, 3).await;
    for partition in 0..6 {
        cluster.leader_of("orders", partition).await;
    }
    let messages: Vec<Value> = (0..MESSAGES)
        .map(|id| json!({"partition": id % 6, "value": {"id": id}}))
        .collect();
    cluster
        .node(1)
        .produce_ok("orders", &json!({ "messages": messages }))
        .await;

    // Members join through different nodes and see one consistent group.
    let join = json!({"topics": ["orders"], "session_timeout_ms": 20_000});
    let first = cluster.node(1).join_group("g", &join).await;
    let second = cluster.node(2).join_group("g", &join).await;
    let first: Member = cluster
        .node(3)
        .heartbeat("g", &first.id)
        .await
        .expect("alive");
    assert_eq!((first.generation, second.generation), (2, 2));
    let owned: BTreeSet<_> = first.assignments.union(&second.assignments).collect();
    assert_eq!(owned.len(), 6);
    assert_eq!(first.assignments.len(), 3);

    // Polls and commits go through any node.
    let mut seen = BTreeSet::new();
    seen.extend(poll_and_commit(cluster.node(3), cluster.node(1), &first.id).await);
    seen.extend(poll_and_commit(cluster.node(2), cluster.node(3), &second.id).await);
    assert!(!seen.is_empty());
    let stale = json!({"member_id": first.id, "generation": 1,
                       "offsets": [{"topic": "orders", "partition": first.assignments.iter().next().unwrap().1, "offset": 1}]});
    let (status, problem) = cluster.node(2).commit("g", &stale).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["code"], "stale_generation");
    let before = agreed_offsets(&cluster).await;
    assert!(before.iter().any(|(_, _, committed)| committed.is_u64()));

    // The metadata leader kept the group's liveness and proposed its changes: kill it.
    let coordinator = cluster.metadata_leader().await;
    cluster.kill(coordinator);
    let survivors = cluster.others_than(coordinator);
    assert_eq!(agreed_offsets(&cluster).await, before, "offsets survive");
    for (member, via) in [(&first, survivors[0]), (&second, survivors[1])] {
        let alive = poll(CLUSTER_DEADLINE, EVERY, || async {
            cluster
                .node(via)
                .heartbeat("g", &member.id)
                .await
                .map_err(|refused| format!("{refused:?}"))
        })
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
        assert_eq!(
            alive.generation, 2,
            "no member was lost with the coordinator"
        );
        assert_eq!(alive.assignments, member.assignments);
    }

    // Consumption goes on from the committed offsets through the survivors.
    let deadline = std::time::Instant::now() + CLUSTER_DEADLINE;
    while (seen.len() as u64) < MESSAGES {
        if std::time::Instant::now() >= deadline {
            cluster.fail(&format!("{} of {MESSAGES} messages seen", seen.len()));
        }
        let (one, other) = (cluster.node(survivors[0]), cluster.node(survivors[1]));
        seen.extend(poll_and_commit(one, other, &first.id).await);
        seen.extend(poll_and_commit(other, one, &second.id).await);
    }

    // Every node back, then every node restarted at once: the offsets are still there.
    cluster.restart(coordinator).await;
    let finished = agreed_offsets(&cluster).await;
    for (_, _, committed) in &finished {
        assert_eq!(
            committed,
            &json!(MESSAGES / 6),
            "all committed: {finished:?}"
        );
    }
    cluster.restart_all(&[1, 2, 3]).await;
    assert_eq!(agreed_offsets(&cluster).await, finished);
    let described = cluster.node(coordinator).describe_group("g").await;
    for offset in described["offsets"].as_array().expect("offsets") {
        assert_eq!(offset["lag"], 0, "{described}");
    }
}

#[tokio::test]
async fn a_commit_through_a_node_without_the_partition_is_checked_against_its_leader() {
    let cluster = TestCluster::start(3).await;
    // One replica per partition: the other nodes know its end only from the leader's reports.
    create_replicated(&cluster, 1, "orders", 1, 1).await;
    let leader = cluster.leader_of("orders", 0).await;
    let via = cluster.others_than(leader)[0];
    let member = cluster
        .node(leader)
        .join_group(
            "g",
            &json!({"topics": ["orders"], "session_timeout_ms": 20_000}),
        )
        .await;
    let commit = |offset: u64| {
        json!({"member_id": member.id, "generation": member.generation,
               "offsets": [{"topic": "orders", "partition": 0, "offset": offset}]})
    };
    for round in 1..=3u64 {
        let messages: Vec<Value> = (0..20)
            .map(|id| json!({"partition": 0, "value": {"id": id}}))
            .collect();
        cluster
            .node(leader)
            .produce_ok("orders", &json!({ "messages": messages }))
            .await;
        // Right after the produce, `via` has not heard of the new end: it asks the leader.
        let end = round * 20;
        let (status, problem) = cluster.node(via).commit("g", &commit(end + 1)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{problem}");
        assert_eq!(problem["code"], "offset_out_of_range");
        assert_eq!(
            problem["high_watermark"], end,
            "the leader's end: {problem}"
        );
        let (status, _, stored) = cluster.node(via).commit_returning("g", &commit(end)).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a commit at the leader's end: {stored}"
        );
        assert_eq!(stored["offsets"][0]["committed"], end, "{stored}");
    }
}

#[tokio::test]
async fn polls_through_random_nodes_with_answers_dropped_at_random_lose_nothing() {
    const ROUNDS: usize = 150;
    let seed = std::env::var("HERALD_TEST_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| common::now_ms() as u64 | 1);
    eprintln!("seed {seed} (HERALD_TEST_SEED={seed} replays it)");
    // xorshift64*, as in consumer_group_delivery.rs.
    let mut state = seed;
    let mut below = |bound: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    };
    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "orders", 3, 3).await;
    for partition in 0..3 {
        cluster.leader_of("orders", partition).await;
    }
    let member = cluster
        .node(1)
        .join_group(
            "g",
            &json!({"topics": ["orders"], "session_timeout_ms": 60_000}),
        )
        .await;
    let ids = cluster.ids();
    let client = common::client();
    let (mut produced, mut cursor, mut seen) = (0u64, Value::Null, BTreeSet::new());
    let mut uncommitted: BTreeMap<u64, u64> = BTreeMap::new();
    let mut committed_before: Vec<(String, u64, Value)> = Vec::new();
    for round in 0..ROUNDS {
        if round % 10 == 0 && produced < MESSAGES {
            let messages: Vec<Value> = (produced..produced + 15)
                .map(|id| json!({"partition": id % 3, "value": {"id": id}}))
                .collect();
            cluster
                .node(ids[below(3) as usize])
                .produce_ok("orders", &json!({ "messages": messages }))
                .await;
            produced += 15;
        }
        let via = cluster.node(ids[below(3) as usize]);
        let body = json!({"max_messages": 1 + below(10), "max_wait_ms": 50, "cursor": cursor});
        let url = via.url(&format!("/v1/groups/g/members/{}/poll", member.id));
        match below(10) {
            // Given up before the answer, or answered and lost.
            0..=2 => {
                let timeout = Duration::from_millis(1 + below(40));
                let _ = client.post(&url).timeout(timeout).json(&body).send().await;
            }
            3..=4 => {
                let _ = via.poll_group("g", &member.id, &body).await;
            }
            _ => {
                let polled = via
                    .poll_group("g", &member.id, &body)
                    .await
                    .unwrap_or_else(|refused| via.fail(&format!("seed {seed}: poll: {refused:?}")));
                cursor = json!(polled.cursor);
                for message in &polled.messages {
                    seen.insert(id_of(&message.value));
                    let next = uncommitted.entry(u64::from(message.partition)).or_default();
                    *next = (*next).max(message.offset + 1);
                }
                if !uncommitted.is_empty() && below(3) == 0 {
                    let offsets: Vec<Value> = uncommitted
                        .iter()
                        .map(|(partition, offset)| json!({"topic": "orders", "partition": partition, "offset": offset}))
                        .collect();
                    let body = json!({"member_id": member.id, "generation": polled.generation, "offsets": offsets});
                    let committer = cluster.node(ids[below(3) as usize]);
                    let (status, answer) = committer.commit("g", &body).await;
                    assert_eq!(
                        status,
                        StatusCode::NO_CONTENT,
                        "seed {seed}: commit: {answer}"
                    );
                    uncommitted.clear();
                }
            }
        }
        if round % 25 == 0 {
            // One node's applied view only moves forward: read the offsets there.
            let now = committed_via(cluster.node(1)).await;
            for ((_, partition, before), (_, _, after)) in committed_before.iter().zip(&now) {
                assert!(
                    after.as_u64().unwrap_or(0) >= before.as_u64().unwrap_or(0),
                    "seed {seed}: partition {partition}'s committed offset went back: {before} -> {after}"
                );
            }
            committed_before = now;
        }
    }
    let deadline = std::time::Instant::now() + CLUSTER_DEADLINE;
    while (seen.len() as u64) < produced && std::time::Instant::now() < deadline {
        let via = cluster.node(ids[below(3) as usize]);
        let body = json!({"max_messages": 100, "max_wait_ms": 100, "cursor": cursor});
        if let Ok(polled) = via.poll_group("g", &member.id, &body).await {
            cursor = json!(polled.cursor);
            seen.extend(polled.messages.iter().map(|message| id_of(&message.value)));
        }
    }
    let missing: Vec<u64> = (0..produced).filter(|id| !seen.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: {} of {produced} messages never reached the group: {missing:?}",
        missing.len()
    );
}
