//! Queue subscriptions on one node, black box: settings (create, change, list, describe,
//! delete, refusals); competing pullers each get distinct messages, acked exactly once;
//! two subscriptions on one topic each get every message (fan-out);
//! redelivery after the deadline with the attempt counting up, late acks `expired`, nacks with
//! a delay, extensions; dead letters with their headers; bad ack ids.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::queues::{ack_ids, describe, post, post_ok, pull, topics};
use crate::common::Server;
use parking_lot::Mutex;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

async fn put(server: &Server, name: &str, body: &Value) -> Response {
    let path = format!("/v1/subscriptions/{name}");
    server
        .http_client()
        .put(server.url(&path))
        .json(body)
        .send()
        .await
        .unwrap_or_else(|err| server.fail(&format!("PUT {path}: {err}")))
}

async fn put_ok(server: &Server, name: &str, body: &Value, status: StatusCode) -> Value {
    let (got, answer) = server.json(put(server, name, body).await).await;
    if got != status {
        server.fail(&format!(
            "PUT {name}: expected {status}, got {got}: {answer}"
        ));
    }
    answer
}

#[tokio::test]
async fn subscriptions_are_created_changed_listed_and_deleted() {
    let server = Server::start().await;
    topics(&server, &[("orders", 2), ("orders-dlq", 1)]).await;
    let body = json!({
        "topic": "orders",
        "ack_deadline_ms": 5000,
        "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 2000},
        "dead_letter_policy": {"topic": "orders-dlq", "max_delivery_attempts": 3},
    });
    let created = put_ok(&server, "workers", &body, StatusCode::CREATED).await;
    assert_eq!(created["topic"], "orders");
    assert_eq!(created["start"], "earliest");
    assert_eq!(created["dead_letter_policy"]["max_delivery_attempts"], 3);
    // The same settings again: 200, unchanged.
    let again = put_ok(&server, "workers", &body, StatusCode::OK).await;
    assert_eq!(again["created_at_ms"], created["created_at_ms"]);
    // New settings: 200 with them.
    let mut changed = body.clone();
    changed["ack_deadline_ms"] = json!(9000);
    let updated = put_ok(&server, "workers", &changed, StatusCode::OK).await;
    assert_eq!(updated["ack_deadline_ms"], 9000);
    // Defaults.
    let minimal = put_ok(
        &server,
        "audit",
        &json!({"topic": "orders", "start": "latest"}),
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(minimal["ack_deadline_ms"], 30000);
    assert_eq!(minimal["retry_policy"]["min_backoff_ms"], 1000);
    assert_eq!(minimal["retry_policy"]["max_backoff_ms"], 60000);
    assert!(minimal.get("dead_letter_policy").is_none());

    let (status, described) = server
        .json(server.get("/v1/subscriptions/workers").await)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(described["ack_deadline_ms"], 9000);
    let (_, listed) = server.json(server.get("/v1/subscriptions").await).await;
    let names: Vec<&str> = listed["subscriptions"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|sub| sub["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["audit", "workers"]);

    assert_eq!(
        server.delete("/v1/subscriptions/workers").await.status(),
        StatusCode::NO_CONTENT
    );
    server
        .expect_problem(
            server.get("/v1/subscriptions/workers").await,
            StatusCode::NOT_FOUND,
            "subscription_not_found",
        )
        .await;
    server
        .expect_problem(
            server.delete("/v1/subscriptions/workers").await,
            StatusCode::NOT_FOUND,
            "subscription_not_found",
        )
        .await;
    // Deleting the topic takes its subscriptions with it.
    assert_eq!(
        server.delete("/v1/topics/orders").await.status(),
        StatusCode::NO_CONTENT
    );
    server
        .expect_problem(
            server.get("/v1/subscriptions/audit").await,
            StatusCode::NOT_FOUND,
            "subscription_not_found",
        )
        .await;
}

#[tokio::test]
async fn bad_subscription_settings_are_refused_and_change_nothing() {
    let server = Server::start().await;
    topics(&server, &[("orders", 1), ("other", 1)]).await;
    let refusals = [
        (
            json!({"topic": "orders", "dead_letter_policy": {"topic": "orders", "max_delivery_attempts": 3}}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "ack_deadline_ms": 10}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "ack_deadline_ms": 600001}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "retry_policy": {"min_backoff_ms": 5000, "max_backoff_ms": 10}}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "retry_policy": {"min_backoff_ms": -1}}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "dead_letter_policy": {"topic": "other", "max_delivery_attempts": 0}}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "start": "middle"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "orders", "surprise": 1}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "bad name"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            json!({"topic": "missing"}),
            StatusCode::NOT_FOUND,
            "topic_not_found",
        ),
        (
            json!({"topic": "orders", "dead_letter_policy": {"topic": "missing", "max_delivery_attempts": 3}}),
            StatusCode::NOT_FOUND,
            "topic_not_found",
        ),
    ];
    for (body, status, code) in refusals {
        let response = put(&server, "workers", &body).await;
        server.expect_problem(response, status, code).await;
    }
    server
        .expect_problem(
            server.get("/v1/subscriptions/workers").await,
            StatusCode::NOT_FOUND,
            "subscription_not_found",
        )
        .await;
    server
        .expect_problem(
            put(&server, "bad%20name", &json!({"topic": "orders"})).await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        )
        .await;
    // The topic and start are fixed at creation.
    put_ok(
        &server,
        "workers",
        &json!({"topic": "orders"}),
        StatusCode::CREATED,
    )
    .await;
    for body in [
        json!({"topic": "other"}),
        json!({"topic": "orders", "start": "latest"}),
    ] {
        server
            .expect_problem(
                put(&server, "workers", &body).await,
                StatusCode::CONFLICT,
                "subscription_conflict",
            )
            .await;
    }
    let (_, described) = server
        .json(server.get("/v1/subscriptions/workers").await)
        .await;
    assert_eq!(described["topic"], "orders");
    assert_eq!(described["start"], "earliest");
}

const DEADLINE: Duration = Duration::from_secs(60);

fn id_of(message: &Value) -> u64 {
    message["message"]["value"]["id"].as_u64().expect("an id")
}

async fn produce_ids(server: &Server, topic: &str, partitions: u32, ids: std::ops::Range<u64>) {
    let messages: Vec<Value> = ids
        .map(|id| json!({"partition": (id % u64::from(partitions)) as u32, "value": {"id": id}}))
        .collect();
    for chunk in messages.chunks(500) {
        server
            .produce_ok(topic, &json!({ "messages": chunk }))
            .await;
    }
}

#[tokio::test]
async fn competing_pullers_each_get_distinct_messages_acked_exactly_once() {
    const COUNT: u64 = 3_000;
    let server = Arc::new(Server::start().await);
    topics(&server, &[("jobs", 4)]).await;
    put_ok(
        &server,
        "workers",
        &json!({"topic": "jobs"}),
        StatusCode::CREATED,
    )
    .await;
    produce_ids(&server, "jobs", 4, 0..COUNT).await;
    let acked: Arc<Mutex<BTreeMap<u64, usize>>> = Arc::default();
    let delivered: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let mut pullers = Vec::new();
    for puller in 0..4u64 {
        let (server, acked, delivered) = (server.clone(), acked.clone(), delivered.clone());
        pullers.push(tokio::spawn(async move {
            let deadline = Instant::now() + DEADLINE;
            while acked.lock().len() < COUNT as usize && Instant::now() < deadline {
                let messages = pull(&server, "workers", 50, 200).await;
                if messages.is_empty() {
                    continue;
                }
                for message in &messages {
                    assert_eq!(message["delivery_attempt"], 1, "redelivered: {message}");
                    delivered.lock().push((id_of(message), puller));
                }
                let answer = post_ok(
                    &server,
                    "workers",
                    "ack",
                    json!({"ack_ids": ack_ids(&messages)}),
                )
                .await;
                assert_eq!(answer["expired"], json!([]), "an ack expired: {answer}");
                assert_eq!(answer["acked"].as_array().unwrap().len(), messages.len());
                let mut acked = acked.lock();
                for message in &messages {
                    *acked.entry(id_of(message)).or_default() += 1;
                }
            }
        }));
    }
    for puller in pullers {
        puller.await.expect("a puller");
    }
    let acked = acked.lock().clone();
    assert_eq!(acked.len() as u64, COUNT, "not every message was acked");
    assert!(
        acked.values().all(|count| *count == 1),
        "a message was acked twice"
    );
    let delivered = delivered.lock().clone();
    assert_eq!(
        delivered.len() as u64,
        COUNT,
        "a message was delivered twice"
    );
    let pullers: BTreeSet<u64> = delivered.iter().map(|(_, puller)| *puller).collect();
    assert!(pullers.len() > 1, "one puller got everything");
    // Nothing comes back.
    assert!(pull(&server, "workers", 100, 500).await.is_empty());
    let counts = describe(&server, "workers").await;
    assert_eq!(
        (counts["backlog"].clone(), counts["in_flight"].clone()),
        (json!(0), json!(0)),
        "{counts}"
    );
}

/// Pub/sub fan-out: every subscription of a topic gets every message, and one subscription's
/// acks and leases do not touch the other's.
#[tokio::test]
async fn two_subscriptions_on_one_topic_each_get_every_message() {
    const COUNT: u64 = 300;
    let server = Server::start().await;
    topics(&server, &[("events", 3)]).await;
    for name in ["billing", "audit"] {
        put_ok(
            &server,
            name,
            &json!({"topic": "events"}),
            StatusCode::CREATED,
        )
        .await;
    }
    produce_ids(&server, "events", 3, 0..COUNT).await;
    // `billing` takes everything and acks it; `audit` then still finds every message, first
    // delivery, and holds them without acking.
    let mut seen: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for name in ["billing", "audit"] {
        let deadline = Instant::now() + DEADLINE;
        while seen.get(name).map_or(0, BTreeSet::len) < COUNT as usize {
            assert!(
                Instant::now() < deadline,
                "{name} did not get every message"
            );
            let messages = pull(&server, name, 100, 200).await;
            for message in &messages {
                assert_eq!(message["delivery_attempt"], 1, "{name}: {message}");
                assert!(
                    seen.entry(name).or_default().insert(id_of(message)),
                    "{name} got a message twice: {message}"
                );
            }
            if name == "billing" && !messages.is_empty() {
                post_ok(&server, name, "ack", json!({"ack_ids": ack_ids(&messages)})).await;
            }
        }
    }
    let all: BTreeSet<u64> = (0..COUNT).collect();
    assert_eq!(seen["billing"], all);
    assert_eq!(seen["audit"], all);
    let billing = describe(&server, "billing").await;
    let audit = describe(&server, "audit").await;
    assert_eq!(
        (billing["backlog"].clone(), billing["in_flight"].clone()),
        (json!(0), json!(0)),
        "{billing}"
    );
    assert_eq!(audit["in_flight"], json!(COUNT), "{audit}");
}

#[tokio::test]
async fn unacked_messages_come_back_and_late_acks_are_expired() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    put_ok(
        &server,
        "workers",
        &json!({"topic": "jobs", "ack_deadline_ms": 500,
                "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 200}}),
        StatusCode::CREATED,
    )
    .await;
    produce_ids(&server, "jobs", 1, 0..1).await;
    let first = pull(&server, "workers", 10, 0).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["delivery_attempt"], 1);
    let counts = describe(&server, "workers").await;
    assert_eq!(
        (counts["backlog"].as_u64(), counts["in_flight"].as_u64()),
        (Some(1), Some(1))
    );
    // Not acked: after the deadline and the backoff it comes back, to a waiting pull.
    let started = Instant::now();
    let second = pull(&server, "workers", 10, 10_000).await;
    assert_eq!(second.len(), 1, "not redelivered");
    assert_eq!(second[0]["delivery_attempt"], 2);
    assert_eq!(id_of(&second[0]), 0);
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    // The first holder's ack is late: expired, and the new holder's lease stands.
    let late = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&first)}),
    )
    .await;
    assert_eq!(late["acked"], json!([]));
    assert_eq!(late["expired"], json!(ack_ids(&first)));
    // A nack with a delay: back no sooner.
    let nacked = post_ok(
        &server,
        "workers",
        "nack",
        json!({"ack_ids": ack_ids(&second), "delay_ms": 300}),
    )
    .await;
    assert_eq!(nacked["nacked"], json!(ack_ids(&second)));
    let started = Instant::now();
    let third = pull(&server, "workers", 10, 10_000).await;
    assert_eq!(third.len(), 1);
    assert_eq!(third[0]["delivery_attempt"], 3);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    // Extended, it stays with its holder past the first deadline.
    let extended = post_ok(
        &server,
        "workers",
        "extend",
        json!({"ack_ids": ack_ids(&third), "ack_deadline_ms": 5000}),
    )
    .await;
    assert_eq!(extended["extended"], json!(ack_ids(&third)));
    assert!(pull(&server, "workers", 10, 1_500).await.is_empty());
    let acked = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&third)}),
    )
    .await;
    assert_eq!(acked["acked"], json!(ack_ids(&third)));
    // Acked: never again.
    assert!(pull(&server, "workers", 10, 1_000).await.is_empty());
}

#[tokio::test]
async fn messages_past_their_attempts_go_to_the_dead_letter_topic_with_their_headers() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    put_ok(
        &server,
        "workers",
        &json!({"topic": "jobs", "retry_policy": {"min_backoff_ms": 0, "max_backoff_ms": 0},
                "dead_letter_policy": {"topic": "jobs-dlq", "max_delivery_attempts": 2}}),
        StatusCode::CREATED,
    )
    .await;
    server
        .produce_ok(
            "jobs",
            &json!({"messages": [{"key": "k1", "value": {"id": 1}, "headers": {"trace": "t1"}}]}),
        )
        .await;
    for attempt in 1..=2 {
        let messages = pull(&server, "workers", 10, 5_000).await;
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0]["delivery_attempt"], attempt);
        post_ok(
            &server,
            "workers",
            "nack",
            json!({"ack_ids": ack_ids(&messages), "delay_ms": 0}),
        )
        .await;
    }
    // The third pull dead-letters it instead of delivering it.
    assert!(pull(&server, "workers", 10, 500).await.is_empty());
    let (status, read) = server.fetch("jobs-dlq", 0, "offset=0").await;
    assert_eq!(status, StatusCode::OK);
    let messages = read["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{read}");
    let dead = &messages[0];
    assert_eq!(dead["key"], "k1");
    assert_eq!(dead["value"], json!({"id": 1}));
    let headers = &dead["headers"];
    assert_eq!(headers["trace"], "t1");
    assert_eq!(headers["herald-dlq-reason"], "max_attempts");
    assert_eq!(headers["herald-dlq-source-topic"], "jobs");
    assert_eq!(headers["herald-dlq-source-partition"], "0");
    assert_eq!(headers["herald-dlq-source-offset"], "0");
    assert_eq!(headers["herald-dlq-attempts"], "2");
    assert_eq!(headers["herald-dlq-subscription"], "workers");
    // It left the subscription.
    assert!(pull(&server, "workers", 10, 500).await.is_empty());
    let counts = describe(&server, "workers").await;
    assert_eq!(counts["dead_lettered"], 1, "{counts}");
    assert_eq!(counts["backlog"], 0, "{counts}");
}

#[tokio::test]
async fn bad_ack_ids_and_limits_are_refused_and_change_nothing() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    put_ok(
        &server,
        "workers",
        &json!({"topic": "jobs"}),
        StatusCode::CREATED,
    )
    .await;
    put_ok(
        &server,
        "audit",
        &json!({"topic": "jobs"}),
        StatusCode::CREATED,
    )
    .await;
    produce_ids(&server, "jobs", 1, 0..1).await;
    let held = pull(&server, "workers", 1, 0).await;
    let other = pull(&server, "audit", 1, 0).await;
    assert_eq!(
        (held.len(), other.len()),
        (1, 1),
        "each subscription gets every message"
    );
    let ours = ack_ids(&held)[0].clone();
    let theirs = ack_ids(&other)[0].clone();
    for (action, body) in [
        ("ack", json!({"ack_ids": ["nonsense"]})),
        ("ack", json!({"ack_ids": [ours.clone(), "1.2.3"]})),
        ("ack", json!({"ack_ids": [ours.clone(), theirs.clone()]})),
        ("ack", json!({"ack_ids": []})),
        ("nack", json!({"ack_ids": [ours.clone()], "delay_ms": -1})),
        (
            "nack",
            json!({"ack_ids": [ours.clone()], "delay_ms": 86400001}),
        ),
        (
            "extend",
            json!({"ack_ids": [ours.clone()], "ack_deadline_ms": 5}),
        ),
        ("pull", json!({"max_messages": 0})),
        ("pull", json!({"max_messages": 1, "max_wait_ms": 60001})),
    ] {
        let (status, answer) = post(&server, "workers", action, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{action} {body}: {answer}");
        assert_eq!(answer["code"], "invalid_request");
    }
    let (status, answer) = post(&server, "missing", "pull", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(answer["code"], "subscription_not_found");
    // Nothing was acked or nacked: the lease is still ours.
    let acked = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": [ours.clone()]}),
    )
    .await;
    assert_eq!(acked["acked"], json!([ours]));
}

#[tokio::test]
async fn delivery_state_survives_a_restart() {
    let mut server = Server::start().await;
    topics(&server, &[("jobs", 2)]).await;
    put_ok(
        &server,
        "workers",
        &json!({"topic": "jobs", "ack_deadline_ms": 1000,
                "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 100}}),
        StatusCode::CREATED,
    )
    .await;
    produce_ids(&server, "jobs", 2, 0..20).await;
    let mut pulled = Vec::new();
    for _ in 0..10 {
        if pulled.len() >= 20 {
            break;
        }
        pulled.extend(pull(&server, "workers", 20, 1_000).await);
    }
    assert_eq!(pulled.len(), 20);
    let (acked, unacked): (Vec<Value>, Vec<Value>) = pulled
        .into_iter()
        .partition(|message| id_of(message) % 2 == 0);
    let answer = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&acked)}),
    )
    .await;
    assert_eq!(answer["acked"].as_array().map(Vec::len), Some(10));
    server.restart().await;
    server.wait_for_leaders("jobs").await;
    // Only the unacked come back, each once, on their second attempt.
    let mut again = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while again.len() < unacked.len() && Instant::now() < deadline {
        let messages = pull(&server, "workers", 20, 2_000).await;
        post_ok(
            &server,
            "workers",
            "ack",
            json!({"ack_ids": ack_ids(&messages)}),
        )
        .await;
        again.extend(messages);
    }
    let mut ids: Vec<u64> = again.iter().map(id_of).collect();
    ids.sort_unstable();
    let expected: Vec<u64> = unacked
        .iter()
        .map(id_of)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(ids, expected);
    assert!(again.iter().all(|message| message["delivery_attempt"] == 2));
    assert!(pull(&server, "workers", 20, 1_500).await.is_empty());
}
