//! The exactly-once consume-transform-produce recipe of `docs/consumer-groups.md`, black box:
//! a worker reads an input topic as a group member and writes one output per input with an
//! idempotent producer whose sequence is the input offset; it is killed at random points many
//! times (its in-flight requests dropped mid-way, as a crashed process's would be), and the
//! output ends with each input's output exactly once.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

const PARTITIONS: u32 = 3;
const INPUTS: u64 = 300;
const KILLS: usize = 15;
const DEADLINE: Duration = Duration::from_secs(90);

/// A small deterministic generator (xorshift), seeded from the clock and printed, so a failing
/// run can be repeated with `EXACTLY_ONCE_SEED`.
struct Random(u64);

impl Random {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Why a worker incarnation stopped on its own.
#[derive(Debug)]
enum Stop {
    /// A newer incarnation took the producer name: this one is a zombie.
    Fenced,
    /// Something to retry from scratch (e.g. the member expired while it was slow).
    Restart(String),
}

async fn post(client: &reqwest::Client, url: String, body: &Value) -> (StatusCode, Value) {
    match client.post(url).json(body).send().await {
        Ok(response) => {
            let status = response.status();
            let body = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
        Err(error) => (StatusCode::BAD_GATEWAY, json!(error.to_string())),
    }
}

/// One incarnation of the worker, following the recipe:
/// 1. take the producer name (same id, a new epoch: older incarnations are fenced);
/// 2. join the group;
/// 3. poll; for each input partition's messages, produce their outputs to the same output
///    partition with `sequence` = the first input's offset (one output per input, so the
///    sequences are the input offsets); a duplicate is acknowledged without a write, and an
///    `out_of_order_sequence` naming a later expected sequence means the outputs before it
///    exist already: skip those inputs;
/// 4. commit the inputs after their outputs are acknowledged.
async fn worker(base: String, rounds_seed: u64) -> Stop {
    let client = common::client();
    let mut random = Random(rounds_seed | 1);
    let (status, producer) = post(
        &client,
        format!("{base}/v1/producers"),
        &json!({"name": "etl-worker"}),
    )
    .await;
    if status != StatusCode::OK {
        return Stop::Restart(format!("producer: {status} {producer}"));
    }
    let (status, member) = post(
        &client,
        format!("{base}/v1/groups/etl/members"),
        &json!({"topics": ["input"], "session_timeout_ms": 1000}),
    )
    .await;
    if status != StatusCode::OK {
        return Stop::Restart(format!("join: {status} {member}"));
    }
    let member_id = member["member_id"].as_str().unwrap_or_default().to_string();
    loop {
        let max_messages = 1 + random.next(15);
        let (status, polled) = post(
            &client,
            format!("{base}/v1/groups/etl/members/{member_id}/poll"),
            &json!({"max_messages": max_messages, "max_wait_ms": 200}),
        )
        .await;
        if status != StatusCode::OK {
            return Stop::Restart(format!("poll: {status} {polled}"));
        }
        let mut by_partition: BTreeMap<u64, Vec<(u64, i64)>> = BTreeMap::new();
        for message in polled["messages"].as_array().cloned().unwrap_or_default() {
            by_partition
                .entry(message["partition"].as_u64().unwrap())
                .or_default()
                .push((
                    message["offset"].as_u64().unwrap(),
                    message["value"]["n"].as_i64().unwrap(),
                ));
        }
        let mut commits = Vec::new();
        for (partition, mut inputs) in by_partition {
            let next = inputs.last().map(|(offset, _)| offset + 1).unwrap();
            while let Some(&(first, _)) = inputs.first() {
                let outputs: Vec<Value> = inputs
                    .iter()
                    .map(|(offset, n)| {
                        json!({"partition": partition, "value": {
                            "input_partition": partition, "input_offset": offset, "doubled": n * 2}})
                    })
                    .collect();
                let (status, answer) = post(
                    &client,
                    format!("{base}/v1/topics/output/messages"),
                    &json!({"producer_id": producer["producer_id"],
                            "producer_epoch": producer["producer_epoch"],
                            "sequence": first, "messages": outputs}),
                )
                .await;
                match (status, answer["code"].as_str()) {
                    (StatusCode::OK, _) => break,
                    (StatusCode::CONFLICT, Some("producer_fenced")) => return Stop::Fenced,
                    (StatusCode::CONFLICT, Some("out_of_order_sequence")) => {
                        let expected = answer["expected_sequence"]
                            .as_u64()
                            .unwrap_or_else(|| panic!("no expected_sequence: {answer}"));
                        assert!(
                            expected > first,
                            "a gap: outputs before input {first} of partition {partition} are missing ({answer})"
                        );
                        inputs.retain(|(offset, _)| *offset >= expected);
                    }
                    _ => return Stop::Restart(format!("produce: {status} {answer}")),
                }
            }
            commits.push(json!({"topic": "input", "partition": partition, "offset": next}));
        }
        if commits.is_empty() {
            continue;
        }
        let (status, answer) = post(
            &client,
            format!("{base}/v1/groups/etl/offsets"),
            &json!({"member_id": member_id, "generation": polled["generation"], "offsets": commits}),
        )
        .await;
        // A commit that meets a rebalance is refused: the inputs come again and their outputs
        // are recognised as duplicates.
        if status == StatusCode::NOT_FOUND {
            return Stop::Restart(format!("commit: {status} {answer}"));
        }
    }
}

/// How many outputs the output topic holds (its high watermarks summed).
async fn outputs_written(server: &Server) -> u64 {
    let described = server.describe("output").await;
    described["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|partition| partition["high_watermark"].as_u64().unwrap_or(0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_random_points_writes_each_output_exactly_once() {
    let seed = std::env::var("EXACTLY_ONCE_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos() as u64)
                .unwrap_or(7)
        });
    eprintln!("EXACTLY_ONCE_SEED={seed}");
    let mut random = Random(seed | 1);

    let server = Server::start().await;
    for topic in ["input", "output"] {
        server.create_topic(topic, PARTITIONS).await;
        server.wait_for_leaders(topic).await;
    }
    let inputs: Vec<Value> = (0..INPUTS)
        .map(|n| json!({"partition": n % u64::from(PARTITIONS), "value": {"n": n}}))
        .collect();
    server
        .produce_ok("input", &json!({ "messages": inputs }))
        .await;

    // Kill the worker at random points, many times: mid-poll, mid-produce, between produce and
    // commit, mid-commit.
    let mut fenced_or_restarted = Vec::new();
    for _ in 0..KILLS {
        let incarnation = tokio::spawn(worker(server.url(""), random.next(u64::MAX)));
        tokio::time::sleep(Duration::from_millis(50 + random.next(500))).await;
        incarnation.abort();
        if let Ok(stop) = incarnation.await {
            match &stop {
                Stop::Fenced => eprintln!("an incarnation was fenced"),
                Stop::Restart(reason) => eprintln!("an incarnation stopped: {reason}"),
            }
            fenced_or_restarted.push(stop);
        }
    }
    // Then let one incarnation finish the work.
    let deadline = Instant::now() + DEADLINE;
    let mut last = tokio::spawn(worker(server.url(""), random.next(u64::MAX)));
    while outputs_written(&server).await < INPUTS {
        assert!(
            Instant::now() < deadline,
            "only {} of {INPUTS} outputs after {DEADLINE:?} (stops: {fenced_or_restarted:?})",
            outputs_written(&server).await
        );
        if last.is_finished() {
            // It stopped on its own (e.g. its member expired while the group settled): the
            // recipe is to start again.
            last = tokio::spawn(worker(server.url(""), random.next(u64::MAX)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last.abort();

    let mut seen = BTreeSet::new();
    for partition in 0..PARTITIONS {
        for message in server.read_all("output", partition).await {
            let value: Value = serde_json::from_str(message.value_text()).expect("JSON output");
            let input = (
                value["input_partition"].as_u64().unwrap(),
                value["input_offset"].as_u64().unwrap(),
            );
            assert_eq!(
                input.0,
                u64::from(partition),
                "outputs stay in their partition"
            );
            assert!(
                seen.insert(input),
                "output of input {input:?} written twice"
            );
        }
    }
    assert_eq!(seen.len() as u64, INPUTS, "every input has its output");
    let duplicates = server
        .metric("herald_produce_duplicates_total", &[("topic", "output")])
        .await
        .unwrap_or(0.0);
    eprintln!("{KILLS} kills; the output partitions recognised {duplicates} duplicate requests");
}
