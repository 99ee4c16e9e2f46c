//! Clustering, black box: three (then four) real nodes on loopback. Replication and reads from
//! any node, leader failover under load (SIGKILL) and a paused leader (SIGSTOP) without losing,
//! moving or duplicating acknowledged messages, metadata leader failover, adding a node and
//! draining one.
//!
//! The harness (`common::cluster`) runs one cluster at a time, so these tests run one after the
//! other. Every message a test sends carries a unique id, so the log can be checked exactly.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{
    partition_of, produce_client, produce_once, produce_retrying, sorted_ids, Attempt, Stored,
    TestCluster, CATCH_UP_DEADLINE, ELECTION_DEADLINE,
};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// How long a produce may keep failing (e.g. across an election) before the test gives up.
const PRODUCE_DEADLINE: Duration = Duration::from_secs(60);

fn messages_url(cluster: &TestCluster, via: u64, topic: &str) -> String {
    cluster
        .node(via)
        .url(&format!("/v1/topics/{topic}/messages?acks=all"))
}

/// Creates a topic through node `via`; asserts 201 and the replication factor.
async fn create_replicated(
    cluster: &TestCluster,
    via: u64,
    name: &str,
    partitions: u32,
    replication_factor: u16,
) -> Value {
    let topic = cluster
        .node(via)
        .create_topic_with(&json!({
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
        }))
        .await;
    assert_eq!(topic["replication_factor"], replication_factor, "{topic}");
    assert_eq!(
        topic["partitions"].as_array().map(Vec::len),
        Some(partitions as usize),
        "{topic}"
    );
    topic
}

/// Asserts that a partition's replicas are `rf` distinct nodes among `nodes`.
fn assert_placement(partition: &Value, rf: usize, nodes: &[u64]) {
    let replicas = sorted_ids(&partition["replicas"]);
    let mut distinct = replicas.clone();
    distinct.dedup();
    assert_eq!(replicas.len(), rf, "replica count: {partition}");
    assert_eq!(distinct.len(), rf, "replicas are not distinct: {partition}");
    for id in &replicas {
        assert!(
            nodes.contains(id),
            "replica {id} is not one of {nodes:?}: {partition}"
        );
    }
}

/// A message as it should read back: offset, key, value, headers (`{}` when none).
type Expected = (u64, Option<String>, Value, Value);

/// `(offset, value)` pairs of stored messages.
fn offsets_and_values(stored: &[Stored]) -> Vec<(u64, Value)> {
    stored.iter().map(|m| (m.offset, m.value.clone())).collect()
}

/// What a test sent and what was acknowledged, by message id, on one partition.
#[derive(Default, Debug)]
struct Book {
    /// Every id ever sent.
    sent: HashSet<String>,
    /// id -> acknowledged offset.
    acked: BTreeMap<String, u64>,
    /// Acknowledged ids that were sent more than once (a retry after an unknown outcome): they
    /// may be stored twice.
    maybe_duplicated: HashSet<String>,
    /// Ids sent once and never acknowledged: stored at most once.
    unacknowledged: HashSet<String>,
}

impl Book {
    /// Records a produce of `ids` (in request order) that ended in `offsets` on `partition`.
    fn acknowledge(
        &mut self,
        ids: &[String],
        offsets: &[(u32, u64)],
        partition: u32,
        retried: bool,
    ) {
        assert_eq!(ids.len(), offsets.len(), "one offset per message");
        for (id, &(p, offset)) in ids.iter().zip(offsets) {
            assert_eq!(p, partition, "{id} acknowledged on another partition");
            assert!(
                self.acked.insert(id.clone(), offset).is_none(),
                "{id} acknowledged twice"
            );
            if retried {
                self.maybe_duplicated.insert(id.clone());
            }
        }
    }

    /// Checks a partition's whole content against the book: offsets from 0 without holes,
    /// nothing that was not sent, every acknowledged id at its acknowledged offset, no id stored
    /// twice unless it was retried after an unknown outcome, unacknowledged ids at most once.
    fn check(&self, stored: &[Stored]) {
        let mut seen: HashMap<&str, Vec<u64>> = HashMap::new();
        for (i, message) in stored.iter().enumerate() {
            assert_eq!(
                message.offset, i as u64,
                "offsets have a hole or disorder at {i}"
            );
            let id = message.value["id"]
                .as_str()
                .unwrap_or_else(|| panic!("stored message without an id: {message:?}"));
            assert!(
                self.sent.contains(id),
                "stored {id} was never sent: {message:?}"
            );
            seen.entry(id).or_default().push(message.offset);
        }
        for (id, &offset) in &self.acked {
            let stored_at = stored.get(offset as usize).unwrap_or_else(|| {
                panic!(
                    "acknowledged {id}@{offset} is lost (log has {} messages)",
                    stored.len()
                )
            });
            assert_eq!(
                stored_at.value["id"],
                id.as_str(),
                "offset {offset} was acknowledged for {id} but holds {:?}",
                stored_at.value
            );
            let copies = &seen[id.as_str()];
            if !self.maybe_duplicated.contains(id) {
                assert_eq!(
                    copies.len(),
                    1,
                    "{id} was sent once and is stored at offsets {copies:?}"
                );
            }
        }
        for id in &self.unacknowledged {
            if let Some(copies) = seen.get(id.as_str()) {
                assert_eq!(
                    copies.len(),
                    1,
                    "{id} was sent once and is stored at {copies:?}"
                );
            }
        }
    }
}

/// A batch of messages with unique ids for partition `partition`.
fn batch(ids: &[String], partition: u32) -> Value {
    let messages: Vec<Value> = ids
        .iter()
        .map(|id| json!({"partition": partition, "key": id, "value": {"id": id}}))
        .collect();
    json!({ "messages": messages })
}

/// Produces messages with these ids to `partition` through `urls` (retrying), into `book`.
async fn produce_ids(
    client: &reqwest::Client,
    book: &mut Book,
    urls: &[String],
    partition: u32,
    ids: Vec<String>,
) {
    book.sent.extend(ids.iter().cloned());
    let produced = produce_retrying(client, urls, &batch(&ids, partition), PRODUCE_DEADLINE)
        .await
        .unwrap_or_else(|err| panic!("producing {ids:?}: {err}"));
    book.acknowledge(
        &ids,
        &produced.offsets,
        partition,
        !produced.failures.is_empty(),
    );
}

/// Produces batches of unique ids to partition 0 through `urls` (retrying), into `book`.
async fn produce_batches(
    book: &mut Book,
    urls: &[String],
    prefix: &str,
    requests: usize,
    size: usize,
) {
    let client = produce_client();
    for r in 0..requests {
        let ids: Vec<String> = (0..size).map(|m| format!("{prefix}-{r}-{m}")).collect();
        produce_ids(&client, book, urls, 0, ids).await;
    }
}

#[tokio::test]
async fn three_nodes_replicate_and_serve_reads_from_any_node() {
    let cluster = TestCluster::start(3).await;

    // Every node describes the same cluster: 3 nodes up at the given addresses, one id, one
    // metadata leader.
    let deadline = Instant::now() + ELECTION_DEADLINE;
    loop {
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
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the nodes do not agree on a non-empty cluster_id ({cluster_ids:?}) and a metadata leader ({leaders:?}): {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

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
    let deadline = Instant::now() + ELECTION_DEADLINE;
    loop {
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
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leader_of {got:?} does not match the partitions' leaders {want:?}: {view} {described}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A replication factor above the node count is refused and creates nothing.
    let node2 = cluster.node(2);
    let response = node2
        .post_json(
            "/v1/topics",
            &json!({"name": "too-wide", "partitions": 1, "replication_factor": 4}),
        )
        .await;
    node2
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    let response = cluster.node(1).get("/v1/topics/too-wide").await;
    cluster
        .node(1)
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
}

/// What one producer of the failover test saw.
#[derive(Debug, Default)]
struct ProducerLog {
    /// (id, offset) in the order acknowledged.
    acked: Vec<(String, u64)>,
    maybe_duplicated: Vec<String>,
    failures: Vec<String>,
}

#[tokio::test]
async fn leader_failover_loses_no_acknowledged_message() {
    const PRODUCERS: usize = 3;
    const REQUESTS: usize = 250;
    const SIZE: usize = 5;
    const KILL_AFTER: usize = 150; // acknowledged requests, of PRODUCERS * REQUESTS

    let mut cluster = TestCluster::start(3).await;
    let topic = "failover";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let survivors: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|&id| id != leader)
        .collect();
    let urls: Vec<String> = survivors
        .iter()
        .map(|&id| messages_url(&cluster, id, topic))
        .collect();

    let progress = Arc::new(AtomicUsize::new(0));
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        // Each producer starts on its own survivor and moves to the other after a failure.
        let mut urls = urls.clone();
        let shift = p % urls.len();
        urls.rotate_left(shift);
        let progress = progress.clone();
        producers.push(tokio::spawn(async move {
            let client = produce_client();
            let mut log = ProducerLog::default();
            for r in 0..REQUESTS {
                let ids: Vec<String> = (0..SIZE).map(|m| format!("p{p}-{r}-{m}")).collect();
                let produced = produce_retrying(&client, &urls, &batch(&ids, 0), PRODUCE_DEADLINE)
                    .await
                    .unwrap_or_else(|err| panic!("producer {p} request {r}: {err}"));
                assert_eq!(produced.offsets.len(), SIZE, "{produced:?}");
                if !produced.failures.is_empty() {
                    log.maybe_duplicated.extend(ids.iter().cloned());
                    log.failures.extend(produced.failures);
                }
                for (id, (partition, offset)) in ids.into_iter().zip(produced.offsets) {
                    assert_eq!(partition, 0);
                    log.acked.push((id, offset));
                }
                progress.fetch_add(1, Ordering::SeqCst);
            }
            log
        }));
    }

    // Kill the leader once some requests were acknowledged, while the producers are sending.
    let deadline = Instant::now() + Duration::from_secs(60);
    while progress.load(Ordering::SeqCst) < KILL_AFTER {
        assert!(
            Instant::now() < deadline,
            "only {} requests acknowledged before the kill deadline",
            progress.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for producer in &producers {
        assert!(
            !producer.is_finished(),
            "a producer finished before the kill"
        );
    }
    let at_kill = progress.load(Ordering::SeqCst);
    cluster.kill(leader);
    let killed_at = Instant::now();

    let mut logs = Vec::new();
    for producer in producers {
        logs.push(
            tokio::time::timeout(Duration::from_secs(240), producer)
                .await
                .expect("the producers did not finish")
                .expect("a producer panicked"),
        );
    }
    eprintln!(
        "killed leader {leader} after {at_kill} acknowledged requests; producers done {:?} later; \
         {} requests retried",
        killed_at.elapsed(),
        logs.iter()
            .map(|l| l.maybe_duplicated.len() / SIZE)
            .sum::<usize>()
    );
    let new_leader = cluster.wait_for_leader_change(topic, 0, leader).await;
    assert!(survivors.contains(&new_leader));

    let mut book = Book::default();
    for log in &logs {
        for (id, offset) in &log.acked {
            book.sent.insert(id.clone());
            assert!(book.acked.insert(id.clone(), *offset).is_none());
        }
        book.maybe_duplicated
            .extend(log.maybe_duplicated.iter().cloned());
    }
    assert_eq!(book.acked.len(), PRODUCERS * REQUESTS * SIZE);

    let stored = cluster.read_partition(survivors[0], topic, 0).await;
    book.check(&stored);
    // Per producer, acknowledged messages are in the log in the order they were acknowledged.
    for (p, log) in logs.iter().enumerate() {
        for pair in log.acked.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "producer {p}: {} acknowledged at {} before {} at {}",
                pair[0].0,
                pair[0].1,
                pair[1].0,
                pair[1].1
            );
        }
    }
    let other_read = cluster.read_partition(survivors[1], topic, 0).await;
    assert_eq!(other_read, stored, "the survivors read differently");

    // The killed node comes back, catches up and is in sync again, with the same high
    // watermark as the survivors.
    cluster.restart(leader).await;
    let total = stored.len() as u64;
    for via in [survivors[0], leader] {
        let view = cluster
            .wait_for_partition(via, topic, 0, CATCH_UP_DEADLINE, |p| {
                p["in_sync"].as_array().map(Vec::len) == Some(3) && p["high_watermark"] == total
            })
            .await;
        assert_eq!(sorted_ids(&view["in_sync"]), vec![1, 2, 3], "{view}");
    }
    let through_restarted = cluster.read_partition(leader, topic, 0).await;
    assert_eq!(
        offsets_and_values(&through_restarted),
        offsets_and_values(&stored)
    );
}

#[tokio::test]
async fn paused_leader_steps_down_without_losing_or_duplicating() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "paused";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let old = cluster.stable_leader(topic, 0).await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let old_url = messages_url(&cluster, old, topic);
    let other_urls: Vec<String> = others
        .iter()
        .map(|&id| messages_url(&cluster, id, topic))
        .collect();

    let mut book = Book::default();
    produce_batches(&mut book, std::slice::from_ref(&old_url), "before", 10, 3).await;

    // Freeze the leader; the others elect a new one and take writes.
    assert_eq!(
        cluster.leader_of(topic, 0).await,
        old,
        "the leader moved before the pause"
    );
    cluster.pause(old);
    let paused_at = Instant::now();
    let new = cluster.wait_for_leader_change(topic, 0, old).await;
    eprintln!(
        "node {old} paused; node {new} leads after {:?}",
        paused_at.elapsed()
    );
    assert!(others.contains(&new));
    produce_batches(&mut book, &other_urls, "during", 10, 3).await;

    // Requests reach the frozen old leader (the kernel accepts them) and are served the moment
    // it continues, while it may still believe it leads: each either succeeds at true offsets
    // or fails, and is sent once only.
    let mut stale = Vec::new();
    for k in 0..4 {
        let ids: Vec<String> = (0..2).map(|m| format!("stale-{k}-{m}")).collect();
        book.sent.extend(ids.iter().cloned());
        let url = old_url.clone();
        stale.push(tokio::spawn(async move {
            let outcome = produce_once(&produce_client(), &url, &batch(&ids, 0)).await;
            (ids, outcome)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.resume(old);
    for request in stale {
        let (ids, outcome) = request.await.expect("a stale request panicked");
        match outcome {
            Attempt::Acknowledged(offsets) => book.acknowledge(&ids, &offsets, 0, false),
            Attempt::Retryable(why) => {
                eprintln!("request to the resumed old leader failed: {why}");
                book.unacknowledged.extend(ids);
            }
            Attempt::Fatal(why) => panic!("request to the resumed old leader: {why}"),
        }
    }

    // The old leader's node serves produces again (by forwarding, or as leader once elected).
    produce_batches(&mut book, std::slice::from_ref(&old_url), "after", 10, 3).await;

    let mut reads = Vec::new();
    for via in 1..=3 {
        let stored = cluster.read_partition(via, topic, 0).await;
        book.check(&stored);
        reads.push(stored);
    }
    assert_eq!(reads[0], reads[1], "nodes 1 and 2 read differently");
    assert_eq!(reads[0], reads[2], "nodes 1 and 3 read differently");
    assert!(book.acked.len() >= 90, "{} acknowledged", book.acked.len());
}

#[tokio::test]
async fn metadata_leader_failover_allows_topic_creation() {
    let mut cluster = TestCluster::start(3).await;
    let old = cluster.metadata_leader().await;
    cluster.kill(old);
    let survivors: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let via = survivors[0];

    // The survivors elect a new metadata leader and report the killed node down.
    let deadline = Instant::now() + ELECTION_DEADLINE;
    loop {
        let view = cluster.cluster_view(via).await;
        let settled = view.as_ref().is_ok_and(|view| {
            let leader = view["metadata_leader"].as_u64();
            let down = view["nodes"]
                .as_array()
                .and_then(|nodes| nodes.iter().find(|n| n["id"] == old))
                .is_some_and(|n| n["status"] == "down");
            leader.is_some_and(|l| survivors.contains(&l)) && down
        });
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no new metadata leader or node {old} not down within {ELECTION_DEADLINE:?}: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Topic creation through a survivor succeeds (after 503s while the metadata group elects).
    let topic = "born-after-failover";
    let body = json!({"name": topic, "partitions": 2, "replication_factor": 2});
    let client = produce_client();
    let deadline = Instant::now() + ELECTION_DEADLINE;
    let mut unknown_outcome = false;
    let created = loop {
        let attempt = client
            .post(cluster.node(via).url("/v1/topics"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        let last = match attempt {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if status == StatusCode::CREATED {
                    break answer;
                }
                if status == StatusCode::CONFLICT
                    && answer["code"] == "topic_exists"
                    && unknown_outcome
                {
                    break cluster
                        .topic_view(via, topic)
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                }
                if status != StatusCode::SERVICE_UNAVAILABLE
                    && status != StatusCode::GATEWAY_TIMEOUT
                {
                    panic!("creating {topic} via node {via}: {status}: {text}");
                }
                unknown_outcome |= status == StatusCode::GATEWAY_TIMEOUT;
                format!("{status}: {text}")
            }
            Err(err) => {
                unknown_outcome = true;
                err.to_string()
            }
        };
        assert!(
            Instant::now() < deadline,
            "creating {topic} via node {via} still fails: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(created["replication_factor"], 2, "{created}");
    for partition in 0..2 {
        let view = partition_of(&created, partition).unwrap_or_else(|e| panic!("{e}"));
        assert_placement(&view, 2, &[1, 2, 3]);
    }

    // The new topic takes writes and reads through both survivors.
    let produce_urls: Vec<String> = vec![messages_url(&cluster, via, topic)];
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    for partition in 0..2u32 {
        let ids: Vec<String> = (0..5).map(|i| format!("new-{partition}-{i}")).collect();
        let book = books.entry(partition).or_default();
        produce_ids(&client, book, &produce_urls, partition, ids).await;
    }
    let mut reads: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for partition in 0..2u32 {
        let mut first: Option<Vec<Stored>> = None;
        for &reader in &survivors {
            let stored = cluster.read_partition(reader, topic, partition).await;
            books[&partition].check(&stored);
            if let Some(first) = &first {
                assert_eq!(
                    first, &stored,
                    "{topic}/{partition}: survivors read differently"
                );
            }
            first.get_or_insert(stored);
        }
        reads.insert(partition, first.unwrap());
    }

    // The restarted node learns about the topic and serves it.
    cluster.restart(old).await;
    let deadline = Instant::now() + CATCH_UP_DEADLINE;
    let described = loop {
        match cluster.topic_view(old, topic).await {
            Ok(view) => break view,
            Err(err) => assert!(
                Instant::now() < deadline,
                "restarted node {old} does not know {topic}: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let survivor_view = cluster
        .topic_view(via, topic)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for partition in 0..2 {
        let a = partition_of(&described, partition).unwrap();
        let b = partition_of(&survivor_view, partition).unwrap();
        assert_eq!(
            sorted_ids(&a["replicas"]),
            sorted_ids(&b["replicas"]),
            "{described} vs {survivor_view}"
        );
    }
    let listed = cluster
        .get_ok(old, "/v1/topics")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        listed["topics"]
            .as_array()
            .is_some_and(|topics| topics.iter().any(|t| t["name"] == topic)),
        "restarted node {old} does not list {topic}: {listed}"
    );
    for partition in 0..2u32 {
        let stored = cluster.read_partition(old, topic, partition).await;
        assert_eq!(
            stored, reads[&partition],
            "{topic}/{partition} via node {old}"
        );
    }
    let everyone: BTreeSet<u64> = (1..=3).collect();
    cluster.wait_for_members(&everyone, CATCH_UP_DEADLINE).await;
}

#[tokio::test]
async fn adding_a_node_and_draining_one_moves_replicas_without_loss() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "moving";
    create_replicated(&cluster, 2, topic, 3, 3).await;
    for partition in 0..3 {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
    let client = produce_client();
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    let urls = vec![messages_url(&cluster, 2, topic)];
    for round in 0..4 {
        for partition in 0..3u32 {
            let ids: Vec<String> = (0..5)
                .map(|i| format!("before-{round}-{partition}-{i}"))
                .collect();
            let book = books.entry(partition).or_default();
            produce_ids(&client, book, &urls, partition, ids).await;
        }
    }
    // What every partition holds before the membership changes.
    let mut before: BTreeMap<u32, Vec<Stored>> = BTreeMap::new();
    for partition in 0..3u32 {
        let stored = cluster.read_partition(2, topic, partition).await;
        books[&partition].check(&stored);
        assert_eq!(stored.len(), 20, "{topic}/{partition}");
        before.insert(partition, stored);
    }

    // With 3 nodes and replication factor 3, no node can be drained.
    let node2 = cluster.node(2);
    let response = node2.delete("/v1/cluster/nodes/1").await;
    node2
        .expect_problem(response, StatusCode::CONFLICT, "cannot_drain")
        .await;
    let response = node2.delete("/v1/cluster/nodes/99").await;
    node2
        .expect_problem(response, StatusCode::NOT_FOUND, "node_not_found")
        .await;

    // Node 4 starts with --join: alive, not ready until it is added.
    let four = cluster.start_joining_node().await;
    assert_eq!(four, 4);
    let (status, body) = cluster
        .try_get(4, "/readyz")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a joining node is ready: {body}"
    );

    let add = cluster.add_request(4);
    let node3 = cluster.node(3);
    let deadline = Instant::now() + ELECTION_DEADLINE;
    let added = loop {
        let (status, body) = node3
            .json(node3.post_json("/v1/cluster/nodes", &add).await)
            .await;
        if status == StatusCode::CREATED {
            break body;
        }
        assert!(
            status == StatusCode::SERVICE_UNAVAILABLE && Instant::now() < deadline,
            "adding node 4: {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(added["id"], 4, "{added}");
    assert_eq!(added["http_addr"], cluster.node(4).http_addr(), "{added}");
    assert_eq!(added["raft_addr"], cluster.node(4).raft_addr(), "{added}");
    // Adding it again with the same addresses is fine; with other addresses it is a conflict.
    let (status, again) = node3
        .json(node3.post_json("/v1/cluster/nodes", &add).await)
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], 4, "{again}");
    let other = json!({"node_id": 4, "http_addr": "127.0.0.1:1", "raft_addr": "127.0.0.1:2"});
    let response = node3.post_json("/v1/cluster/nodes", &other).await;
    node3
        .expect_problem(response, StatusCode::CONFLICT, "node_exists")
        .await;
    cluster.finish_adding(4).await;

    // Drain node 1 through node 2.
    let node2 = cluster.node(2);
    let (status, draining) = node2.json(node2.delete("/v1/cluster/nodes/1").await).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{draining}");
    assert_eq!(draining["id"], 1, "{draining}");
    assert_eq!(draining["status"], "draining", "{draining}");

    // A topic created while node 1 drains is not placed on it.
    let fresh = create_replicated(&cluster, 2, "after-drain", 3, 3).await;
    for partition in 0..3 {
        let view = partition_of(&fresh, partition).unwrap();
        assert_eq!(sorted_ids(&view["replicas"]), vec![2, 3, 4], "{fresh}");
    }

    // Node 1 leaves the cluster; its replicas move to node 4.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (view, described) = match (
            cluster.cluster_view(2).await,
            cluster.topic_view(2, topic).await,
        ) {
            (Ok(view), Ok(described)) => (view, described),
            (view, described) => {
                assert!(
                    Instant::now() < deadline,
                    "node 1 was not drained within 90 s: {view:?}\n{described:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        let nodes = view["nodes"].as_array().unwrap_or_else(|| panic!("{view}"));
        if let Some(one) = nodes.iter().find(|n| n["id"] == 1) {
            assert_ne!(
                one["status"], "up",
                "node 1 is up again after the drain began: {view}"
            );
        }
        let ids: BTreeSet<u64> = nodes.iter().filter_map(|n| n["id"].as_u64()).collect();
        let moved = described["partitions"].as_array().unwrap().iter().all(|p| {
            sorted_ids(&p["replicas"]) == vec![2, 3, 4]
                && p["in_sync"].as_array().is_some_and(|s| {
                    let mut s: Vec<u64> = s.iter().filter_map(Value::as_u64).collect();
                    s.sort_unstable();
                    s == vec![2, 3, 4]
                })
                && p["leader"].as_u64().is_some_and(|l| (2..=4).contains(&l))
        });
        if moved && ids == BTreeSet::from([2, 3, 4]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 1 was not drained within 90 s: {view}\n{described}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    cluster.mark_removed(1);
    let remaining: BTreeSet<u64> = BTreeSet::from([2, 3, 4]);
    cluster
        .wait_for_members(&remaining, CATCH_UP_DEADLINE)
        .await;

    // Everything acknowledged before is there, at the same offsets, through every node.
    for partition in 0..3u32 {
        for via in [2, 3, 4] {
            let stored = cluster.read_partition(via, topic, partition).await;
            assert_eq!(
                stored, before[&partition],
                "{topic}/{partition} via node {via} after the drain"
            );
        }
    }

    // More writes (through the new node) land after them and read back.
    let urls = vec![messages_url(&cluster, 4, topic)];
    for partition in 0..3u32 {
        let ids: Vec<String> = (0..5).map(|i| format!("after-{partition}-{i}")).collect();
        let book = books.get_mut(&partition).unwrap();
        produce_ids(&client, book, &urls, partition, ids).await;
    }
    for partition in 0..3u32 {
        let stored = cluster.read_partition(3, topic, partition).await;
        books[&partition].check(&stored);
        assert_eq!(stored[..20], before[&partition][..], "{topic}/{partition}");
        assert!(
            stored.len() >= 25,
            "{topic}/{partition}: {} messages",
            stored.len()
        );
    }

    // Three nodes are left for replication factor 3: none of them can be drained.
    let node3 = cluster.node(3);
    let response = node3.delete("/v1/cluster/nodes/2").await;
    node3
        .expect_problem(response, StatusCode::CONFLICT, "cannot_drain")
        .await;
}
