//! Every bad request is a 4xx `application/problem+json` with a stable `code`, and writes
//! nothing: the high watermarks are the same afterwards.

use crate::common::{b64, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A topic with a little data in it, so "nothing written" is checked against non-zero marks.
async fn seeded(server: &Server, name: &str, partitions: u32) -> Vec<u64> {
    server.create_topic(name, partitions).await;
    let messages: Vec<Value> = (0..partitions)
        .map(|p| json!({"value": {"seed": p}, "partition": p}))
        .collect();
    server
        .produce_ok(name, &json!({ "messages": messages }))
        .await;
    let marks = server.high_watermarks(name).await;
    assert_eq!(marks, vec![1; partitions as usize]);
    marks
}

#[tokio::test]
async fn bad_produce_bodies_write_nothing() {
    let server = Server::start().await;
    let marks = seeded(&server, "strict", 3).await;
    let path = "/v1/topics/strict/messages";

    let bad_json_texts = [
        "",
        "{",
        "{\"messages\":[",
        "{\"messages\":[{\"value\":1}],}",
        "not json at all",
        "{\"messages\":[{\"value\":01}]}",
        "{\"messages\":[{\"value\":1}]} trailing",
        "{\"messages\":[{\"value\":NaN}]}",
    ];
    for text in bad_json_texts {
        let response = server.post_raw(path, "application/json", text).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }

    let bad_bodies = [
        // Wrong shapes and field types.
        json!(null),
        json!([]),
        json!({}),
        json!({"messages": "x"}),
        json!({"messages": {"value": 1}}),
        json!({"messages": [1]}),
        json!({"messages": [{"value": 1, "key": 5}]}),
        json!({"messages": [{"value": 1, "key": {"a": 1}}]}),
        json!({"messages": [{"value": 1, "partition": "zero"}]}),
        json!({"messages": [{"value": 1, "partition": -1}]}),
        json!({"messages": [{"value": 1, "partition": 1.5}]}),
        json!({"messages": [{"value": 1, "timestamp": "yesterday"}]}),
        json!({"messages": [{"value": 1, "timestamp": 1.5}]}),
        json!({"messages": [{"value": 1, "headers": ["a", "b"]}]}),
        json!({"messages": [{"value": 1, "headers": {"a": 1}}]}),
        json!({"messages": [{"value_b64": 17}]}),
        json!({"messages": [{"value": 1, "key_b64": "%%%"}]}),
        json!({"messages": [{"value": 1, "key": "a", "key_b64": "YQ=="}]}),
        // Empty batch.
        json!({"messages": []}),
        // Value and value_b64 both, or neither.
        json!({"messages": [{"value": 1, "value_b64": "AQ=="}]}),
        json!({"messages": [{"key": "k"}]}),
        json!({"messages": [{}]}),
        // Bad base64.
        json!({"messages": [{"value_b64": "not base64!"}]}),
        json!({"messages": [{"value_b64": "A"}]}),
        // One bad message spoils the whole batch: the good ones are not written either.
        json!({"messages": [{"value": "good", "partition": 0}, {"value_b64": "@@@@", "partition": 1}]}),
        json!({"messages": [{"value": "good", "partition": 0}, {"partition": 1}]}),
    ];
    for body in bad_bodies {
        let response = server.post_json(path, &body).await;
        let problem = server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
        assert!(
            !problem["detail"].as_str().unwrap().is_empty(),
            "{body}: {problem}"
        );
    }

    // Bad query parameters.
    for query in ["acks=most", "acks=everyone"] {
        let response = server
            .post_json(
                &format!("{path}?{query}"),
                &json!({"messages": [{"value": 1}]}),
            )
            .await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    for query in ["partition=x", "partition=-1"] {
        let response = server
            .post_raw(
                &format!("{path}?{query}"),
                "application/octet-stream",
                b"v".to_vec(),
            )
            .await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }

    assert_eq!(
        server.high_watermarks("strict").await,
        marks,
        "a refused request wrote something"
    );
}

#[tokio::test]
async fn unknown_topics_and_partitions() {
    let server = Server::start().await;
    let marks = seeded(&server, "known", 2).await;

    let response = server
        .post_json(
            "/v1/topics/unknown/messages",
            &json!({"messages": [{"value": 1}]}),
        )
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
    let response = server
        .post_raw(
            "/v1/topics/unknown/messages",
            "application/octet-stream",
            b"x".to_vec(),
        )
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
    for path in [
        "/v1/topics/unknown",
        "/v1/topics/unknown/partitions/0/messages?offset=earliest",
        "/v1/topics/unknown/partitions/0/offsets?timestamp=0",
    ] {
        let response = server.get(path).await;
        server
            .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
            .await;
    }
    let response = server.delete("/v1/topics/unknown").await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;
    // The unknown topic was not created on the side.
    let response = server.get("/v1/topics/unknown").await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "topic_not_found")
        .await;

    // Partitions that do not exist.
    for path in [
        "/v1/topics/known/partitions/2/messages?offset=earliest",
        "/v1/topics/known/partitions/99/messages?offset=0",
        "/v1/topics/known/partitions/2/offsets?timestamp=0",
    ] {
        let response = server.get(path).await;
        server
            .expect_problem(response, StatusCode::NOT_FOUND, "partition_not_found")
            .await;
    }
    let response = server
        .post_json(
            "/v1/topics/known/messages",
            &json!({"messages": [{"value": 1, "partition": 0}, {"value": 2, "partition": 2}]}),
        )
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "partition_not_found")
        .await;
    let response = server
        .post_raw(
            "/v1/topics/known/messages?partition=7",
            "application/octet-stream",
            b"x".to_vec(),
        )
        .await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "partition_not_found")
        .await;

    // A partition that is not a number is bad input, whatever the router makes of it.
    let response = server
        .get("/v1/topics/known/partitions/zero/messages?offset=0")
        .await;
    assert!(response.status().is_client_error(), "{}", response.status());

    // Unknown paths are problems too.
    let response = server.get("/v1/no-such-thing").await;
    server
        .expect_problem(response, StatusCode::NOT_FOUND, "not_found")
        .await;

    assert_eq!(server.high_watermarks("known").await, marks);
}

#[tokio::test]
async fn bad_fetch_queries() {
    let server = Server::start().await;
    seeded(&server, "reads", 1).await;
    let base = "/v1/topics/reads/partitions/0";

    for query in [
        "offset=-1",
        "offset=abc",
        "offset=1.5",
        "offset=",
        "offset=earliest&max_messages=abc",
        "offset=earliest&max_messages=-1",
        "offset=earliest&max_wait_ms=soon",
        "offset=earliest&max_wait_ms=-5",
    ] {
        let response = server.get(&format!("{base}/messages?{query}")).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    for query in ["timestamp=abc", "timestamp=", "timestamp=1.5"] {
        let response = server.get(&format!("{base}/offsets?{query}")).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    // Nothing was changed by any of it.
    assert_eq!(server.high_watermarks("reads").await, vec![1]);
}

#[tokio::test]
async fn bad_topic_names_in_paths() {
    let server = Server::start().await;
    let long = "n".repeat(250);
    for name in ["bad%20name", "bad!name", "%C3%BC", long.as_str()] {
        let response = server
            .post_json(
                &format!("/v1/topics/{name}/messages"),
                &json!({"messages": [{"value": 1}]}),
            )
            .await;
        let status = response.status();
        assert!(
            status == StatusCode::BAD_REQUEST || status == StatusCode::NOT_FOUND,
            "{name}: {status}"
        );
        let code = if status == StatusCode::BAD_REQUEST {
            "invalid_request"
        } else {
            "topic_not_found"
        };
        server.expect_problem(response, status, code).await;
    }
    let (_, list) = server.json(server.get("/v1/topics").await).await;
    assert_eq!(list["topics"], json!([]));
}

#[tokio::test]
async fn message_larger_than_the_topic_allows() {
    let server = Server::start().await;
    server
        .create_topic_with(
            &json!({"name": "small", "partitions": 2, "config": {"max_message_bytes": 1024}}),
        )
        .await;
    let marks = server.high_watermarks("small").await;

    let big = "x".repeat(2000);
    let bodies = [
        json!({"messages": [{"value": big}]}),
        json!({"messages": [{"value_b64": b64(&[7u8; 2000])}]}),
        // One big message refuses the whole batch.
        json!({"messages": [{"value": "fine", "partition": 0}, {"value": big, "partition": 1}]}),
    ];
    for body in bodies {
        let response = server.post_json("/v1/topics/small/messages", &body).await;
        server
            .expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "message_too_large")
            .await;
    }
    let response = server
        .post_raw(
            "/v1/topics/small/messages",
            "application/octet-stream",
            vec![1u8; 2000],
        )
        .await;
    server
        .expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "message_too_large")
        .await;
    assert_eq!(server.high_watermarks("small").await, marks);

    // Under the limit is fine.
    let offsets = server
        .produce_ok(
            "small",
            &json!({"messages": [{"value": "y".repeat(500), "partition": 0}]}),
        )
        .await;
    assert_eq!(offsets, vec![(0, 0)]);
}

#[tokio::test]
async fn request_body_over_the_limit() {
    let server = Server::start_with(&["--max-body-bytes", "65536"]).await;
    server.create_topic("limited", 1).await;

    // 100 KB of messages, each small enough for the topic: the body itself is too large.
    let messages: Vec<Value> = (0..100)
        .map(|_| json!({"value": "z".repeat(1000)}))
        .collect();
    let body = json!({ "messages": messages }).to_string();
    assert!(body.len() > 65536);
    let response = server
        .post_raw("/v1/topics/limited/messages", "application/json", body)
        .await;
    server
        .expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        .await;

    let response = server
        .post_raw(
            "/v1/topics/limited/messages",
            "application/octet-stream",
            vec![0u8; 100_000],
        )
        .await;
    server
        .expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        .await;
    assert_eq!(server.high_watermarks("limited").await, vec![0]);

    // Below the limit works.
    let messages: Vec<Value> = (0..30)
        .map(|_| json!({"value": "z".repeat(1000)}))
        .collect();
    let offsets = server
        .produce_ok("limited", &json!({ "messages": messages }))
        .await;
    assert_eq!(offsets.len(), 30);
    assert_eq!(server.high_watermarks("limited").await, vec![30]);
}

#[tokio::test]
async fn compacted_topics_refuse_messages_without_a_key() {
    let server = Server::start().await;
    for (name, policy) in [("changelog", "compact"), ("both", "compact,delete")] {
        server
            .create_topic_with(
                &json!({"name": name, "partitions": 1, "config": {"cleanup_policy": policy}}),
            )
            .await;
        // One keyless message among keyed ones refuses the whole request.
        let response = server
            .post_json(
                &format!("/v1/topics/{name}/messages"),
                &json!({"messages": [{"key": "a", "value": 1}, {"value": 2}]}),
            )
            .await;
        let problem = server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
        assert!(
            problem["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("needs a key"),
            "{problem}"
        );
        assert_eq!(
            server.high_watermarks(name).await,
            vec![0],
            "nothing written"
        );
        // Keyed messages are accepted.
        let offsets = server
            .produce_ok(name, &json!({"messages": [{"key": "a", "value": 1}]}))
            .await;
        assert_eq!(offsets, vec![(0, 0)]);
    }
}
