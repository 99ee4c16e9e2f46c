//! Issue 12's queue test at scale, black box on one node: 10,000 messages over 4 partitions,
//! 4 concurrent pullers on one subscription, each message acked once. Every message is acked
//! exactly once, no two pullers ever hold the same message at once (the test tracks who holds
//! what between pull and ack), and nothing comes back after the ack deadline.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Server;
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{json, Value};

const COUNT: u64 = 10_000;
const PARTITIONS: u32 = 4;
const PULLERS: u64 = 4;
const ACK_DEADLINE_MS: u64 = 5_000;
const MIN_BACKOFF_MS: u64 = 100;
/// The whole run, in debug on a shared machine, takes well under this.
const DEADLINE: Duration = Duration::from_secs(120);

async fn post_ok(server: &Server, path: &str, body: Value) -> Value {
    let (status, answer) = server.json(server.post_json(path, &body).await).await;
    if status != StatusCode::OK {
        server.fail(&format!("POST {path}: {status}: {answer}"));
    }
    answer
}

fn id_of(message: &Value) -> u64 {
    message["message"]["value"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no id in {message}"))
}

#[derive(Default)]
struct Ledger {
    /// Which puller holds each message now (between its pull and its ack).
    holders: HashMap<u64, u64>,
    acks: BTreeMap<u64, u32>,
    /// Messages each puller got.
    per_puller: BTreeMap<u64, u64>,
    overlaps: Vec<String>,
}

#[tokio::test]
async fn ten_thousand_messages_by_four_pullers_are_each_acked_exactly_once() {
    let server = Arc::new(Server::start().await);
    server.create_topic("jobs", PARTITIONS).await;
    server.wait_for_leaders("jobs").await;
    let (status, answer) = server
        .json(
            server
                .http_client()
                .put(server.url("/v1/subscriptions/workers"))
                .json(&json!({
                    "topic": "jobs",
                    "ack_deadline_ms": ACK_DEADLINE_MS,
                    "retry_policy": {"min_backoff_ms": MIN_BACKOFF_MS, "max_backoff_ms": MIN_BACKOFF_MS},
                }))
                .send()
                .await
                .expect("PUT subscription"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let messages: Vec<Value> = (0..COUNT)
        .map(|id| json!({"partition": (id % u64::from(PARTITIONS)) as u32, "value": {"id": id}}))
        .collect();
    for chunk in messages.chunks(1_000) {
        server
            .produce_ok("jobs", &json!({ "messages": chunk }))
            .await;
    }

    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let deadline = Instant::now() + DEADLINE;
    let mut pullers = Vec::new();
    for puller in 0..PULLERS {
        let (server, ledger) = (server.clone(), ledger.clone());
        pullers.push(tokio::spawn(async move {
            let mut last_lease = Instant::now();
            while ledger.lock().acks.len() < COUNT as usize && Instant::now() < deadline {
                let answer = post_ok(
                    &server,
                    "/v1/subscriptions/workers/pull",
                    json!({"max_messages": 100, "max_wait_ms": 200}),
                )
                .await;
                let pulled = answer["messages"].as_array().expect("messages").clone();
                if pulled.is_empty() {
                    continue;
                }
                last_lease = Instant::now();
                {
                    let mut ledger = ledger.lock();
                    for message in &pulled {
                        let id = id_of(message);
                        if let Some(other) = ledger.holders.insert(id, puller) {
                            ledger.overlaps.push(format!(
                                "message {id} leased to puller {puller} while puller {other} held it"
                            ));
                        }
                        *ledger.per_puller.entry(puller).or_default() += 1;
                    }
                }
                let ack_ids: Vec<&str> = pulled
                    .iter()
                    .map(|m| m["ack_id"].as_str().expect("an ack id"))
                    .collect();
                let answer = post_ok(
                    &server,
                    "/v1/subscriptions/workers/ack",
                    json!({ "ack_ids": ack_ids }),
                )
                .await;
                assert_eq!(answer["expired"], json!([]), "an ack expired: {answer}");
                assert_eq!(
                    answer["acked"].as_array().map(Vec::len),
                    Some(pulled.len()),
                    "{answer}"
                );
                let mut ledger = ledger.lock();
                for message in &pulled {
                    let id = id_of(message);
                    ledger.holders.remove(&id);
                    *ledger.acks.entry(id).or_default() += 1;
                }
            }
            last_lease
        }));
    }
    let mut last_lease = Instant::now();
    for puller in pullers {
        last_lease = last_lease.max(puller.await.expect("a puller"));
    }
    let ledger = std::mem::take(&mut *ledger.lock());
    assert!(ledger.overlaps.is_empty(), "{:?}", &ledger.overlaps[..]);
    assert_eq!(
        ledger.acks.len() as u64,
        COUNT,
        "not every message was acked in time"
    );
    let twice: Vec<_> = ledger.acks.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "acked more than once: {twice:?}");
    assert!(
        ledger.per_puller.len() as u64 == PULLERS,
        "a puller got nothing: {:?}",
        ledger.per_puller
    );
    assert_eq!(ledger.per_puller.values().sum::<u64>(), COUNT);

    // Nothing comes back: a pull waiting until past the last lease's deadline and its retry
    // backoff (an unacked message would be due then) gets nothing.
    let due = last_lease + Duration::from_millis(ACK_DEADLINE_MS + MIN_BACKOFF_MS + 500);
    let wait_ms = due.saturating_duration_since(Instant::now()).as_millis() as u64;
    let answer = post_ok(
        &server,
        "/v1/subscriptions/workers/pull",
        json!({"max_messages": 100, "max_wait_ms": wait_ms.max(1)}),
    )
    .await;
    assert_eq!(answer["messages"], json!([]), "a message came back");
    let (_, described) = server
        .json(server.get("/v1/subscriptions/workers").await)
        .await;
    assert_eq!(
        (
            &described["backlog"],
            &described["in_flight"],
            &described["delayed"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{described}"
    );
}
