//! A rolling restart (issue 32): the three nodes of a cluster stopped gracefully (SIGTERM) and
//! started again one after the other, under acks=all producers, a consumer group member that
//! polls and commits and a queue subscription's puller that pulls and acks, fails no request
//! and loses nothing, because each node hands the leadership of its groups to an in-sync replica
//! before it stops taking requests.
//!
//! The clients behave as clients behind a load balancer do: they send to the nodes the test has
//! in rotation, and the test takes a node out of rotation before it stops it (as a load balancer
//! does when `/readyz` fails or a deployment drains it), then puts it back once it is ready and
//! in sync again. Every request is sent once; any answer but the expected one is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::book::{batch, Book};
use crate::common::cluster::{
    create_replicated, produce_client, produce_once, Attempt, TestCluster,
};

const TOPIC: &str = "rolling";
const GROUP: &str = "rolling-readers";
const SUBSCRIPTION: &str = "rolling-queue";
const PARTITIONS: u32 = 3;
/// Messages per produce request.
const BATCH: usize = 5;
/// Each client's most requests: bounds the load loops whatever the roll takes.
const MAX_REQUESTS: usize = 20_000;
/// How many times the three nodes are rolled: `HERALD_ROLLS` (`benches/rolling-restart.sh`
/// rolls more), else once.
fn rolls() -> usize {
    std::env::var("HERALD_ROLLS")
        .ok()
        .and_then(|rolls| rolls.parse().ok())
        .unwrap_or(1)
}
/// How many produce requests acknowledged count as the load running.
const LOAD_STEP: usize = 30;
/// How long the readers get, once the producers stopped, to read everything.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);

/// The nodes in rotation (a load balancer's view): clients pick among them, round robin.
#[derive(Clone)]
struct Rotation {
    nodes: Arc<Mutex<BTreeSet<u64>>>,
    base_urls: Arc<BTreeMap<u64, String>>,
}

impl Rotation {
    fn pick(&self, turn: &mut usize) -> (u64, String) {
        let nodes: Vec<u64> = self.nodes.lock().unwrap().iter().copied().collect();
        *turn += 1;
        let node = nodes[*turn % nodes.len()];
        (node, self.base_urls[&node].clone())
    }
}

/// Whether a reader has read enough to stop.
type Done = Arc<dyn Fn(&ReaderLog) -> bool + Send + Sync>;
/// (partition, offset) of every message acknowledged, once the producers stopped.
type Acknowledged = Arc<Mutex<Option<BTreeSet<(u32, u64)>>>>;

/// What a reader (the group member or the puller) saw.
#[derive(Default)]
struct ReaderLog {
    /// (partition, offset) of every message delivered.
    delivered: BTreeSet<(u32, u64)>,
    requests: usize,
    failures: Vec<String>,
    longest: Duration,
}

impl ReaderLog {
    /// POSTs `body` through a node in rotation; the answer when its status is `expected`,
    /// else records the failure.
    async fn post(
        &mut self,
        client: &reqwest::Client,
        rotation: &Rotation,
        turn: &mut usize,
        path: &str,
        body: &Value,
        expected: StatusCode,
    ) -> Option<Value> {
        let (node, base) = rotation.pick(turn);
        self.requests += 1;
        let sent_at = Instant::now();
        let outcome = match client.post(format!("{base}{path}")).json(body).send().await {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                if status == expected {
                    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
                } else {
                    Err(format!("{status}: {text}"))
                }
            }
            Err(error) => Err(error.to_string()),
        };
        let took = sent_at.elapsed();
        self.longest = self.longest.max(took);
        match outcome {
            Ok(answer) => Some(answer),
            Err(error) => {
                self.failures.push(format!(
                    "POST {path} via node {node} after {took:?}: {error}"
                ));
                None
            }
        }
    }

    fn record<'a>(&mut self, located: impl Iterator<Item = &'a Value>) {
        for message in located {
            if let (Some(partition), Some(offset)) =
                (message["partition"].as_u64(), message["offset"].as_u64())
            {
                self.delivered.insert((partition as u32, offset));
            }
        }
    }
}

/// A consumer group member: joins, then polls and commits what it got until `done`.
async fn group_reader(rotation: Rotation, done: Done) -> ReaderLog {
    let client = produce_client();
    let mut log = ReaderLog::default();
    let mut turn = 0;
    let joined = log
        .post(
            &client,
            &rotation,
            &mut turn,
            &format!("/v1/groups/{GROUP}/members"),
            &json!({"topics": [TOPIC], "session_timeout_ms": 30_000}),
            StatusCode::OK,
        )
        .await
        .unwrap_or_else(|| panic!("the group member could not join: {:?}", log.failures));
    let member = joined["member_id"].as_str().expect("member_id").to_string();
    let mut cursor = Value::Null;
    while !done(&log) && log.requests < MAX_REQUESTS {
        let mut body = json!({"max_messages": 500, "max_wait_ms": 200});
        if !cursor.is_null() {
            body["cursor"] = cursor.clone();
        }
        let path = format!("/v1/groups/{GROUP}/members/{member}/poll");
        let Some(answer) = log
            .post(&client, &rotation, &mut turn, &path, &body, StatusCode::OK)
            .await
        else {
            continue;
        };
        cursor = answer["cursor"].clone();
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        log.record(messages.iter());
        let mut next: BTreeMap<u64, u64> = BTreeMap::new();
        for message in &messages {
            if let (Some(partition), Some(offset)) =
                (message["partition"].as_u64(), message["offset"].as_u64())
            {
                next.insert(partition, offset + 1);
            }
        }
        if next.is_empty() {
            continue;
        }
        let commit = json!({
            "member_id": member,
            "generation": answer["generation"],
            "offsets": next.iter().map(|(partition, offset)| {
                json!({"topic": TOPIC, "partition": partition, "offset": offset})
            }).collect::<Vec<_>>(),
        });
        let path = format!("/v1/groups/{GROUP}/offsets");
        log.post(
            &client,
            &rotation,
            &mut turn,
            &path,
            &commit,
            StatusCode::NO_CONTENT,
        )
        .await;
    }
    log
}

/// A queue subscription's puller: pulls and acks until `done`.
async fn queue_puller(rotation: Rotation, done: Done) -> ReaderLog {
    let client = produce_client();
    let mut log = ReaderLog::default();
    let mut turn = 1;
    while !done(&log) && log.requests < MAX_REQUESTS {
        let path = format!("/v1/subscriptions/{SUBSCRIPTION}/pull");
        let body = json!({"max_messages": 500, "max_wait_ms": 200});
        let Some(answer) = log
            .post(&client, &rotation, &mut turn, &path, &body, StatusCode::OK)
            .await
        else {
            continue;
        };
        let deliveries = answer["messages"].as_array().cloned().unwrap_or_default();
        log.record(deliveries.iter().map(|delivery| &delivery["message"]));
        let ack_ids: Vec<&str> = deliveries
            .iter()
            .filter_map(|delivery| delivery["ack_id"].as_str())
            .collect();
        if ack_ids.is_empty() {
            continue;
        }
        let path = format!("/v1/subscriptions/{SUBSCRIPTION}/ack");
        let body = json!({ "ack_ids": ack_ids });
        if let Some(answer) = log
            .post(&client, &rotation, &mut turn, &path, &body, StatusCode::OK)
            .await
        {
            let acked = answer["acked"].as_array().map(Vec::len).unwrap_or_default();
            if acked != ack_ids.len() {
                log.failures.push(format!(
                    "acked {acked} of {} ack ids: {answer}",
                    ack_ids.len()
                ));
            }
        }
    }
    log
}

/// What one producer saw.
#[derive(Default)]
struct ProducerLog {
    book: Book,
    requests: usize,
    failures: Vec<String>,
    longest: Duration,
}

/// Produces batches of unique ids to `partition` through the nodes in rotation until `stop`.
async fn producer(
    rotation: Rotation,
    partition: u32,
    stop: Arc<AtomicBool>,
    acknowledged_requests: Arc<AtomicUsize>,
) -> ProducerLog {
    let client = produce_client();
    let mut log = ProducerLog::default();
    let mut turn = partition as usize;
    while !stop.load(Ordering::Relaxed) && log.requests < MAX_REQUESTS {
        let (via, base) = rotation.pick(&mut turn);
        let url = format!("{base}/v1/topics/{TOPIC}/messages?acks=all");
        let ids: Vec<String> = (0..BATCH)
            .map(|i| format!("p{partition}-r{}-{i}", log.requests))
            .collect();
        log.book.sent.extend(ids.iter().cloned());
        log.requests += 1;
        let sent_at = Instant::now();
        let attempt = produce_once(&client, &url, &batch(&ids, partition)).await;
        log.longest = log.longest.max(sent_at.elapsed());
        match attempt {
            Attempt::Acknowledged(offsets) => {
                log.book.acknowledge(&ids, &offsets, partition, false);
                acknowledged_requests.fetch_add(1, Ordering::Relaxed);
            }
            Attempt::Retryable(line) | Attempt::Fatal(line) => {
                log.book.unacknowledged.extend(ids);
                log.failures
                    .push(format!("node {via} after {:?}: {line}", sent_at.elapsed()));
            }
        }
    }
    log
}

/// Waits (bounded) until the producers got `LOAD_STEP` more requests acknowledged.
async fn load_runs(acknowledged_requests: &AtomicUsize) {
    let target = acknowledged_requests.load(Ordering::Relaxed) + LOAD_STEP;
    crate::common::poll(DRAIN_DEADLINE, Duration::from_millis(20), || async {
        let now = acknowledged_requests.load(Ordering::Relaxed);
        if now >= target {
            Ok(())
        } else {
            Err(format!("{now} of {target} produce requests acknowledged"))
        }
    })
    .await
    .unwrap_or_else(|seen| panic!("the producers make no progress: {seen}"));
}

#[tokio::test]
async fn a_rolling_restart_under_load_fails_no_request_and_loses_nothing() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, TOPIC, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(TOPIC, partition, 3).await;
    }
    let created = cluster
        .node(1)
        .http_client()
        .put(
            cluster
                .node(1)
                .url(&format!("/v1/subscriptions/{SUBSCRIPTION}")),
        )
        .json(&json!({"topic": TOPIC, "ack_deadline_ms": 60_000, "start": "earliest"}))
        .send()
        .await
        .expect("create the subscription");
    assert_eq!(created.status(), StatusCode::CREATED);

    let rotation = Rotation {
        nodes: Arc::new(Mutex::new((1..=3).collect())),
        base_urls: Arc::new((1..=3).map(|id| (id, cluster.node(id).url(""))).collect()),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged_requests = Arc::new(AtomicUsize::new(0));
    // The readers go on until the producers stopped and they have read all that was
    // acknowledged.
    let acknowledged: Acknowledged = Arc::new(Mutex::new(None));
    let done: Done = {
        let acknowledged = acknowledged.clone();
        Arc::new(move |log: &ReaderLog| {
            acknowledged
                .lock()
                .unwrap()
                .as_ref()
                .is_some_and(|all| all.is_subset(&log.delivered))
        })
    };
    let reader = tokio::spawn(group_reader(rotation.clone(), done.clone()));
    let puller = tokio::spawn(queue_puller(rotation.clone(), done));
    let producers: Vec<_> = (0..PARTITIONS)
        .map(|partition| {
            tokio::spawn(producer(
                rotation.clone(),
                partition,
                stop.clone(),
                acknowledged_requests.clone(),
            ))
        })
        .collect();

    // Roll the nodes once the load runs.
    load_runs(&acknowledged_requests).await;
    let roll_started = Instant::now();
    // Per stop, in order: the node and whether it moved some leadership.
    let mut handed_off = Vec::new();
    let rolls = rolls();
    for id in (0..rolls).flat_map(|_| 1..=3) {
        rotation.nodes.lock().unwrap().remove(&id);
        // Requests already sent to it finish; its clients' next ones go elsewhere.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = cluster.stop(id).await;
        assert!(status.success(), "node {id} exited with {status}");
        let log = cluster.node(id).logs().last().cloned().unwrap_or_default();
        handed_off.push((id, log.contains("handed off leadership before stopping")));
        assert!(
            !log.contains("leadership not handed off"),
            "node {id} kept some leadership:\n{}",
            cluster.node(id).log_tail()
        );
        cluster.restart(id).await;
        for partition in 0..PARTITIONS {
            cluster.wait_until_in_sync(TOPIC, partition, 3).await;
        }
        rotation.nodes.lock().unwrap().insert(id);
    }
    let roll = roll_started.elapsed();
    // Load after the last node is back, too.
    load_runs(&acknowledged_requests).await;
    stop.store(true, Ordering::Relaxed);

    let mut failures = Vec::new();
    let mut requests = 0;
    let mut longest = Duration::ZERO;
    let mut all_acknowledged = BTreeSet::new();
    for (partition, producer) in (0..PARTITIONS).zip(producers) {
        let log = producer.await.expect("a producer panicked");
        requests += log.requests;
        longest = longest.max(log.longest);
        failures.extend(log.failures);
        // Nothing acknowledged is lost, moved or stored twice.
        let stored = cluster.read_partition(1, TOPIC, partition).await;
        log.book.check(&stored);
        all_acknowledged.extend(log.book.acked.values().map(|offset| (partition, *offset)));
    }
    let produce_requests = requests;
    *acknowledged.lock().unwrap() = Some(all_acknowledged.clone());
    let mut readers = Vec::new();
    for (name, task) in [("group member", reader), ("queue puller", puller)] {
        let log = tokio::time::timeout(DRAIN_DEADLINE, task)
            .await
            .unwrap_or_else(|_| {
                panic!("the {name} did not read everything within {DRAIN_DEADLINE:?}")
            })
            .expect("a reader panicked");
        let missing = all_acknowledged.difference(&log.delivered).count();
        assert_eq!(
            missing, 0,
            "the {name} never got {missing} acknowledged messages"
        );
        requests += log.requests;
        longest = longest.max(log.longest);
        failures.extend(log.failures.iter().map(|line| format!("{name}: {line}")));
        readers.push(format!("{name}: {} requests", log.requests));
    }
    eprintln!(
        "rolling restart of 3 nodes ({rolls} times) in {roll:?}: {produce_requests} produce requests \
         ({} messages acknowledged), {readers:?}; {} of {requests} requests failed, longest \
         {longest:?}; handed off: {handed_off:?}",
        all_acknowledged.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {requests} requests failed during the roll:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Whichever nodes led the groups when their turn came (elections under load decide that),
    // the stops moved leadership and none kept any (asserted at each stop).
    assert!(
        handed_off.iter().any(|(_, moved)| *moved),
        "no stopping node handed off any leadership: {handed_off:?}"
    );
}
