//! Queue subscriptions on one node, black box: settings (create, change, list, describe,
//! delete, refusals).

mod common;

use common::Server;
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

async fn topics(server: &Server, names: &[(&str, u32)]) {
    for (name, partitions) in names {
        server.create_topic(name, *partitions).await;
        server.wait_for_leaders(name).await;
    }
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
