//! What an operator sees of a subscription, black box on one node: the age of its oldest
//! message not done in `GET /v1/subscriptions/{sub}`, and the per-partition gauges in
//! `/metrics` (backlog, in flight, delayed, dead-lettered, oldest unacked age), which follow
//! pulls, nacks and acks and disappear with the subscription.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

async fn post_ok(server: &Server, path: &str, body: Value) -> Value {
    let (status, answer) = server.json(server.post_json(path, &body).await).await;
    if status != StatusCode::OK {
        server.fail(&format!("POST {path}: {status}: {answer}"));
    }
    answer
}

async fn describe(server: &Server) -> Value {
    let (status, answer) = server
        .json(server.get("/v1/subscriptions/workers").await)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

async fn gauge(server: &Server, name: &str, partition: u32) -> Option<f64> {
    let partition = partition.to_string();
    server
        .metric(
            name,
            &[
                ("subscription", "workers"),
                ("topic", "jobs"),
                ("partition", &partition),
            ],
        )
        .await
}

/// Every subscription gauge of `partition`: backlog, in flight, delayed, dead-lettered, age.
async fn gauges(server: &Server, partition: u32) -> [Option<f64>; 5] {
    [
        gauge(server, "herald_subscription_backlog_messages", partition).await,
        gauge(server, "herald_subscription_in_flight_messages", partition).await,
        gauge(server, "herald_subscription_delayed_messages", partition).await,
        gauge(
            server,
            "herald_subscription_dead_lettered_messages",
            partition,
        )
        .await,
        gauge(
            server,
            "herald_subscription_oldest_unacked_age_seconds",
            partition,
        )
        .await,
    ]
}

#[tokio::test]
async fn oldest_unacked_age_and_gauges_follow_pulls_and_acks() {
    let server = Server::start().await;
    server.create_topic("jobs", 2).await;
    server.wait_for_leaders("jobs").await;
    let (status, answer) = server
        .json(
            server
                .http_client()
                .put(server.url("/v1/subscriptions/workers"))
                .json(&json!({"topic": "jobs", "retry_policy": {"min_backoff_ms": 60000}}))
                .send()
                .await
                .expect("PUT subscription"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    // Nothing yet: age 0, gauges all 0.
    let described = describe(&server).await;
    assert_eq!(described["oldest_unacked_age_seconds"], json!(0.0));
    assert_eq!(gauges(&server, 0).await, [Some(0.0); 5]);

    // Partition 0: 4 messages, the first two stamped 2 and 1 minutes ago. Partition 1: one
    // message stamped now.
    let now = now_ms();
    let messages = json!({"messages": [
        {"partition": 0, "value": {"id": 0}, "timestamp": now - 120_000},
        {"partition": 0, "value": {"id": 1}, "timestamp": now - 60_000},
        {"partition": 0, "value": {"id": 2}},
        {"partition": 0, "value": {"id": 3}},
        {"partition": 1, "value": {"id": 4}},
    ]});
    server.produce_ok("jobs", &messages).await;
    let age = describe(&server).await["oldest_unacked_age_seconds"]
        .as_f64()
        .expect("an age");
    assert!((120.0..180.0).contains(&age), "age {age}");
    let [backlog, in_flight, delayed, dead, age_0] = gauges(&server, 0).await;
    assert_eq!(
        [backlog, in_flight, delayed, dead],
        [Some(4.0), Some(0.0), Some(0.0), Some(0.0)]
    );
    let age_0 = age_0.expect("an age gauge");
    assert!((120.0..180.0).contains(&age_0), "age {age_0}");
    let age_1 = gauges(&server, 1).await[4].expect("an age gauge");
    assert!((0.0..60.0).contains(&age_1), "age {age_1}");

    // Pull everything; ack the oldest (offset 0 of partition 0), nack offset 1 (delayed).
    // Pulls spread over the partitions; a few rounds (each a long poll) get all five.
    let mut pulled = Vec::new();
    for _ in 0..20 {
        let answer = post_ok(
            &server,
            "/v1/subscriptions/workers/pull",
            json!({"max_messages": 10, "max_wait_ms": 1000}),
        )
        .await;
        pulled.extend(answer["messages"].as_array().cloned().unwrap_or_default());
        if pulled.len() >= 5 {
            break;
        }
    }
    assert_eq!(pulled.len(), 5, "{pulled:?}");
    let ack_of = |id: u64| -> String {
        pulled
            .iter()
            .find(|m| m["message"]["value"]["id"] == id)
            .and_then(|m| m["ack_id"].as_str())
            .expect("pulled")
            .to_string()
    };
    let answer = post_ok(
        &server,
        "/v1/subscriptions/workers/ack",
        json!({"ack_ids": [ack_of(0)]}),
    )
    .await;
    assert_eq!(answer["acked"].as_array().map(Vec::len), Some(1));
    let answer = post_ok(
        &server,
        "/v1/subscriptions/workers/nack",
        json!({"ack_ids": [ack_of(1)], "delay_ms": 600000}),
    )
    .await;
    assert_eq!(answer["nacked"].as_array().map(Vec::len), Some(1));

    // Partition 0: offsets 1 (delayed), 2, 3 (in flight) not done; the oldest is a minute old.
    let [backlog, in_flight, delayed, dead, age] = gauges(&server, 0).await;
    assert_eq!(
        [backlog, in_flight, delayed, dead],
        [Some(3.0), Some(2.0), Some(1.0), Some(0.0)]
    );
    let age = age.expect("an age");
    assert!((60.0..120.0).contains(&age), "age {age}");
    let described = describe(&server).await;
    assert_eq!(
        (
            &described["backlog"],
            &described["in_flight"],
            &described["delayed"]
        ),
        (&json!(4), &json!(3), &json!(1)),
        "{described}"
    );
    let age = described["oldest_unacked_age_seconds"]
        .as_f64()
        .expect("an age");
    assert!((60.0..120.0).contains(&age), "age {age}");

    // Ack the rest of what is leased: only the nacked one is left, still a minute old.
    let rest: Vec<String> = [2, 3, 4].into_iter().map(ack_of).collect();
    let answer = post_ok(
        &server,
        "/v1/subscriptions/workers/ack",
        json!({ "ack_ids": rest }),
    )
    .await;
    assert_eq!(
        answer["acked"].as_array().map(Vec::len),
        Some(3),
        "{answer}"
    );
    assert_eq!(gauges(&server, 1).await, [Some(0.0); 5]);
    let [backlog, in_flight, delayed, _, _] = gauges(&server, 0).await;
    assert_eq!(
        [backlog, in_flight, delayed],
        [Some(1.0), Some(0.0), Some(1.0)]
    );

    // A deleted subscription is no longer reported.
    assert_eq!(
        server.delete("/v1/subscriptions/workers").await.status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(gauges(&server, 0).await, [None; 5]);
    assert_eq!(gauges(&server, 1).await, [None; 5]);
}
