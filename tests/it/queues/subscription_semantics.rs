//! Queue subscription semantics on one node, black box: per-key ordering with concurrent
//! pullers, per-message `deliver_at` and `expires_at`, nack to the dead-letter topic, seek by
//! offset and by timestamp, and the refusals of bad input (which change nothing).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::now_ms;
use crate::common::poll;
use crate::common::queues::{ack_ids, describe, post, post_ok, pull, subscribe, topics};
use crate::common::Server;
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(60);

fn offset_of(message: &Value) -> u64 {
    message["message"]["offset"].as_u64().expect("an offset")
}

/// Waits for `count` messages in partition 0 of `topic`; answers them.
async fn wait_for_messages(server: &Server, topic: &str, count: usize) -> Vec<Value> {
    poll(DEADLINE, Duration::from_millis(50), || async {
        let (status, read) = server.fetch(topic, 0, "offset=0").await;
        let messages = read["messages"].as_array().cloned().unwrap_or_default();
        match status == StatusCode::OK && messages.len() >= count {
            true => Ok(messages),
            false => Err(format!("{status}: {read}")),
        }
    })
    .await
    .unwrap_or_else(|seen| server.fail(&format!("waiting for {count} in {topic}: {seen}")))
}

#[tokio::test]
async fn per_key_ordering_holds_with_concurrent_pullers() {
    const KEYS: u64 = 4;
    const PER_KEY: u64 = 25;
    let server = Arc::new(Server::start().await);
    topics(&server, &[("jobs", 2)]).await;
    subscribe(
        &server,
        "workers",
        json!({"topic": "jobs", "ordering": "key", "ack_deadline_ms": 30000}),
    )
    .await;
    assert_eq!(describe(&server, "workers").await["ordering"], "key");
    let messages: Vec<Value> = (0..PER_KEY)
        .flat_map(|seq| {
            (0..KEYS).map(
                move |key| json!({"key": format!("k{key}"), "value": {"key": key, "seq": seq}}),
            )
        })
        .collect();
    server
        .produce_ok("jobs", &json!({ "messages": messages }))
        .await;

    // Per key: which seq comes next, and whether one is held now.
    let next: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let held: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let done = Arc::new(Mutex::new(0u64));
    let mut pullers = Vec::new();
    for _ in 0..3 {
        let (server, next, held, done) = (server.clone(), next.clone(), held.clone(), done.clone());
        pullers.push(tokio::spawn(async move {
            let deadline = Instant::now() + DEADLINE;
            while *done.lock() < KEYS * PER_KEY && Instant::now() < deadline {
                let pulled = pull(&server, "workers", 10, 200).await;
                let mut keys = Vec::new();
                {
                    let (mut next, mut held) = (next.lock(), held.lock());
                    for message in &pulled {
                        let value = &message["message"]["value"];
                        let key = value["key"].as_u64().expect("a key");
                        let seq = value["seq"].as_u64().expect("a seq");
                        assert!(held.insert(key), "two of key {key} in flight");
                        let expected = next.entry(key).or_default();
                        assert_eq!(seq, *expected, "key {key} out of order");
                        *expected += 1;
                        keys.push(key);
                    }
                }
                if pulled.is_empty() {
                    continue;
                }
                // Let the others pull while these are held.
                tokio::time::sleep(Duration::from_millis(20)).await;
                // Released before the ack is sent: the server may hand out the next one as
                // soon as the ack is applied.
                for key in &keys {
                    held.lock().remove(key);
                }
                let answer = post_ok(
                    &server,
                    "workers",
                    "ack",
                    json!({"ack_ids": ack_ids(&pulled)}),
                )
                .await;
                assert_eq!(answer["expired"], json!([]), "{answer}");
                *done.lock() += pulled.len() as u64;
            }
        }));
    }
    for puller in pullers {
        puller.await.expect("a puller");
    }
    assert_eq!(*done.lock(), KEYS * PER_KEY, "not everything was acked");
    let next = next.lock().clone();
    assert!(next.values().all(|seq| *seq == PER_KEY), "{next:?}");
    let counts = describe(&server, "workers").await;
    assert_eq!(counts["backlog"], 0, "{counts}");
}

#[tokio::test]
async fn deliver_at_holds_a_message_until_its_time() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    subscribe(&server, "workers", json!({"topic": "jobs"})).await;
    let deliver_at = now_ms() + 2_500;
    server
        .produce_ok(
            "jobs",
            &json!({"messages": [{"value": "later", "deliver_at": deliver_at}, {"value": "now"}]}),
        )
        .await;
    let first = pull(&server, "workers", 10, 0).await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["message"]["value"], "now");
    let counts = describe(&server, "workers").await;
    assert_eq!(counts["delayed"], 1, "{counts}");
    post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&first)}),
    )
    .await;
    // A plain read sees it at once, with its header.
    let (_, read) = server.fetch("jobs", 0, "offset=0").await;
    assert_eq!(
        read["messages"][0]["headers"]["herald-deliver-at"],
        deliver_at.to_string()
    );
    // A pull waits for it: a long poll wakes when it is due, not before.
    let mut later = Vec::new();
    for _ in 0..10 {
        later = pull(&server, "workers", 10, 1_000).await;
        if !later.is_empty() {
            break;
        }
    }
    let received = now_ms();
    assert_eq!(later.len(), 1, "never delivered");
    assert_eq!(later[0]["message"]["value"], "later");
    assert!(
        received >= deliver_at,
        "delivered {}ms early",
        deliver_at - received
    );
    assert!(received < deliver_at + 2_000, "delivered late: {received}");
}

#[tokio::test]
async fn expired_and_dead_letter_nacked_messages_land_in_the_dead_letter_topic() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1), ("jobs-dlq", 1)]).await;
    subscribe(
        &server,
        "workers",
        json!({"topic": "jobs", "dead_letter_policy": {"topic": "jobs-dlq", "max_delivery_attempts": 5}}),
    )
    .await;
    subscribe(&server, "plain", json!({"topic": "jobs"})).await;
    let past = now_ms() - 1_000;
    server
        .produce_ok(
            "jobs",
            &json!({"messages": [
                {"key": "k", "value": {"id": 0}, "headers": {"trace": "t0"}, "expires_at": past},
                {"key": "k", "value": {"id": 1}, "headers": {"trace": "t1"}},
            ]}),
        )
        .await;
    let pulled = pull(&server, "workers", 10, 1_000).await;
    assert_eq!(pulled.len(), 1, "{pulled:?}");
    assert_eq!(pulled[0]["message"]["value"], json!({"id": 1}));
    // Without a dead-letter policy the expired message is dropped: done, never delivered.
    let plain = pull(&server, "plain", 10, 1_000).await;
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(plain[0]["message"]["value"], json!({"id": 1}));

    let dead = wait_for_messages(&server, "jobs-dlq", 1).await;
    let headers = &dead[0]["headers"];
    assert_eq!(dead[0]["key"], "k");
    assert_eq!(dead[0]["value"], json!({"id": 0}));
    assert_eq!(headers["trace"], "t0");
    assert_eq!(headers["herald-expires-at"], past.to_string());
    assert_eq!(headers["herald-dlq-reason"], "expired");
    assert_eq!(headers["herald-dlq-source-topic"], "jobs");
    assert_eq!(headers["herald-dlq-source-partition"], "0");
    assert_eq!(headers["herald-dlq-source-offset"], "0");
    assert_eq!(headers["herald-dlq-attempts"], "0");
    assert_eq!(headers["herald-dlq-subscription"], "workers");

    // Rejected: straight to the dead-letter topic, never delivered again.
    let answer = post_ok(
        &server,
        "workers",
        "nack",
        json!({"ack_ids": ack_ids(&pulled), "dead_letter": true}),
    )
    .await;
    assert_eq!(answer["nacked"], json!(ack_ids(&pulled)));
    let dead = wait_for_messages(&server, "jobs-dlq", 2).await;
    let headers = &dead[1]["headers"];
    assert_eq!(dead[1]["value"], json!({"id": 1}));
    assert_eq!(headers["trace"], "t1");
    assert_eq!(headers["herald-dlq-reason"], "nacked");
    assert_eq!(headers["herald-dlq-source-offset"], "1");
    assert_eq!(headers["herald-dlq-attempts"], "1");
    assert_eq!(headers["herald-dlq-subscription"], "workers");
    let acked = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&pulled)}),
    )
    .await;
    assert_eq!(acked["expired"], json!(ack_ids(&pulled)));
    assert!(pull(&server, "workers", 10, 500).await.is_empty());
    let counts = describe(&server, "workers").await;
    assert_eq!(counts["dead_lettered"], 2, "{counts}");
    assert_eq!(counts["backlog"], 0, "{counts}");
}

#[tokio::test]
async fn seek_by_offset_and_by_timestamp_delivers_again_from_there() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    subscribe(&server, "workers", json!({"topic": "jobs"})).await;
    let base = now_ms() - 100_000;
    let messages: Vec<Value> = (0..10)
        .map(|i| json!({"value": {"id": i}, "timestamp": base + i * 1_000}))
        .collect();
    server
        .produce_ok("jobs", &json!({ "messages": messages }))
        .await;
    let first = pull(&server, "workers", 10, 1_000).await;
    assert_eq!(first.len(), 10);
    post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&first[..5])}),
    )
    .await;

    let sought = post_ok(&server, "workers", "seek", json!({"offset": 3})).await;
    assert_eq!(
        sought,
        json!({"partitions": [{"partition": 0, "offset": 3}]})
    );
    // The leases from before the seek are gone: their acks are expired.
    let late = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&first[7..8])}),
    )
    .await;
    assert_eq!(late["expired"], json!(ack_ids(&first[7..8])));
    let again = pull(&server, "workers", 10, 1_000).await;
    let offsets: Vec<u64> = again.iter().map(offset_of).collect();
    assert_eq!(offsets, (3..10).collect::<Vec<_>>());
    assert!(again.iter().all(|m| m["delivery_attempt"] == 1));

    let sought = post_ok(
        &server,
        "workers",
        "seek",
        json!({"timestamp": base + 5_500}),
    )
    .await;
    assert_eq!(sought["partitions"][0]["offset"], 6);
    let offsets: Vec<u64> = pull(&server, "workers", 10, 1_000)
        .await
        .iter()
        .map(offset_of)
        .collect();
    assert_eq!(offsets, (6..10).collect::<Vec<_>>());

    let sought = post_ok(
        &server,
        "workers",
        "seek",
        json!({"partition": 0, "offset": 9}),
    )
    .await;
    assert_eq!(sought["partitions"], json!([{"partition": 0, "offset": 9}]));
    let counts = describe(&server, "workers").await;
    assert_eq!(counts["backlog"], 1, "{counts}");
    assert_eq!(counts["in_flight"], 0, "{counts}");
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start().await;
    topics(&server, &[("jobs", 1)]).await;
    // An unknown ordering creates nothing.
    let response = server
        .http_client()
        .put(server.url("/v1/subscriptions/workers"))
        .json(&json!({"topic": "jobs", "ordering": "fifo"}))
        .send()
        .await
        .expect("PUT");
    server
        .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
        .await;
    server
        .expect_problem(
            server.get("/v1/subscriptions/workers").await,
            StatusCode::NOT_FOUND,
            "subscription_not_found",
        )
        .await;
    subscribe(&server, "workers", json!({"topic": "jobs"})).await;

    for message in [
        json!({"value": 1, "deliver_at": -1}),
        json!({"value": 1, "deliver_at": 1.5}),
        json!({"value": 1, "expires_at": "soon"}),
        json!({"value": 1, "expires_at": -5}),
        json!({"value": 1, "headers": {"herald-deliver-at": "soon"}}),
        json!({"value": 1, "headers": {"herald-expires-at": "-1"}}),
    ] {
        let response = server
            .post_json(
                "/v1/topics/jobs/messages",
                &json!({ "messages": [message] }),
            )
            .await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    assert_eq!(server.high_watermarks("jobs").await, [0], "nothing written");

    server
        .produce_ok("jobs", &json!({"messages": [{"value": 1}]}))
        .await;
    let held = pull(&server, "workers", 1, 1_000).await;
    assert_eq!(held.len(), 1);
    for (action, body) in [
        ("seek", json!({})),
        ("seek", json!({"offset": 0, "timestamp": 0})),
        ("seek", json!({"partition": 0, "timestamp": 0})),
        ("seek", json!({"partition": 1, "offset": 0})),
        ("seek", json!({"offset": -1})),
        (
            "nack",
            json!({"ack_ids": ack_ids(&held), "dead_letter": true}),
        ),
        (
            "nack",
            json!({"ack_ids": ack_ids(&held), "dead_letter": "yes"}),
        ),
    ] {
        let (status, answer) = post(&server, "workers", action, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{action} {body}: {answer}");
        assert_eq!(answer["code"], "invalid_request", "{answer}");
    }
    let (status, answer) = post(&server, "missing", "seek", json!({"offset": 0})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(answer["code"], "subscription_not_found");
    // The lease is untouched: still ours to ack.
    let acked = post_ok(
        &server,
        "workers",
        "ack",
        json!({"ack_ids": ack_ids(&held)}),
    )
    .await;
    assert_eq!(acked["acked"], json!(ack_ids(&held)));
}
