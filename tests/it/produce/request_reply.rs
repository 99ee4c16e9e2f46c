//! Request/reply over HTTP against the real binary: a request is published to a topic with
//! `herald-reply-to` and `herald-correlation-id`, a responder reads it like any message and
//! posts its reply (to any node), and the requester's call answers with it; timeouts answer 504
//! and free the request's entry, late and duplicate replies 404, bad input 400 changing nothing.

use std::time::Duration;

use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::poll;
use crate::common::Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Sends a request from a task of its own, so the test can answer it meanwhile.
fn spawn_request(
    server: &Server,
    topic: &str,
    query: &str,
    body: Value,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let client = server.http_client().clone();
    let url = server.url(&format!("/v1/topics/{topic}/requests?{query}"));
    tokio::spawn(async move {
        let response = client
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("send the request");
        let status = response.status();
        let body = response.json::<Value>().await.expect("a JSON answer");
        (status, body)
    })
}

/// Reads the request at `offset` through `server` (a long poll, as a responder would); answers
/// the message and its reply-to and correlation-id headers.
async fn read_request(
    server: &Server,
    topic: &str,
    partition: u32,
    offset: u64,
) -> (Value, String, String) {
    let (status, answer) = server
        .fetch(
            topic,
            partition,
            &format!("offset={offset}&max_messages=1&max_wait_ms=20000"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let message = answer["messages"][0].clone();
    let header = |name: &str| {
        message["headers"][name]
            .as_str()
            .unwrap_or_else(|| panic!("the request has no {name} header: {message}"))
            .to_string()
    };
    let (reply_to, correlation_id) = (header("herald-reply-to"), header("herald-correlation-id"));
    (message, reply_to, correlation_id)
}

async fn post_reply(server: &Server, body: &Value) -> reqwest::Response {
    server.post_json("/v1/replies", body).await
}

async fn waiting_requests(server: &Server) -> f64 {
    server
        .metric("herald_requests_waiting", &[])
        .await
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_request_gets_its_reply_through_the_same_node_and_a_second_reply_is_404() {
    let server = Server::start().await;
    server.create_topic("rpc", 1).await;

    let requester = spawn_request(
        &server,
        "rpc",
        "timeout_ms=30000",
        json!({"key": "user-7", "value": {"question": 42}, "headers": {"trace": "t-1"}}),
    );
    let (message, reply_to, correlation_id) = read_request(&server, "rpc", 0, 0).await;
    // The request is an ordinary message: key, value and headers as sent, plus the two added.
    assert_eq!(message["key"], "user-7", "{message}");
    assert_eq!(message["value"], json!({"question": 42}), "{message}");
    assert_eq!(message["headers"]["trace"], "t-1", "{message}");
    assert!(reply_to.starts_with("1."), "{reply_to}");

    let reply = json!({
        "reply_to": reply_to, "correlation_id": correlation_id,
        "value": {"answer": "forty-two"}, "headers": {"status": "ok"},
    });
    assert_eq!(
        post_reply(&server, &reply).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, answer) = requester.await.expect("the requester task");
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["value"], json!({"answer": "forty-two"}), "{answer}");
    assert_eq!(answer["headers"], json!({"status": "ok"}), "{answer}");
    assert_eq!(answer["correlation_id"], correlation_id.as_str());
    assert_eq!(
        (answer["partition"].clone(), answer["offset"].clone()),
        (json!(0), json!(0))
    );

    // The first reply won; a second one finds nobody waiting, and nothing is left waiting.
    let late = post_reply(&server, &reply).await;
    server
        .expect_problem(late, StatusCode::NOT_FOUND, "no_waiting_request")
        .await;
    assert_eq!(waiting_requests(&server).await, 0.0);
    assert_eq!(
        server.metric("herald_replies_delivered_total", &[]).await,
        Some(1.0)
    );
    assert_eq!(
        server.metric("herald_replies_late_total", &[]).await,
        Some(1.0)
    );

    // Bytes travel as bytes both ways.
    let requester = spawn_request(&server, "rpc", "", json!({"value_b64": "AAEC"}));
    let (message, reply_to, correlation_id) = read_request(&server, "rpc", 0, 1).await;
    assert_eq!(message["value_b64"], "AAEC", "{message}");
    let reply =
        json!({"reply_to": reply_to, "correlation_id": correlation_id, "value_b64": "/wA="});
    assert_eq!(
        post_reply(&server, &reply).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, answer) = requester.await.expect("the requester task");
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["value_b64"], "/wA=", "{answer}");
    assert!(answer.get("value").is_none(), "{answer}");
}

#[tokio::test]
async fn a_reply_posted_to_another_node_reaches_the_requester() {
    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "rpc", 1, 3).await;
    let (requester_node, responder_node) = (cluster.node(1), cluster.node(2));

    for round in 0..3u64 {
        let requester = spawn_request(
            requester_node,
            "rpc",
            "timeout_ms=30000",
            json!({"value": {"round": round}}),
        );
        // The responder reads the request with a normal fetch on its own node.
        let (message, reply_to, correlation_id) =
            read_request(responder_node, "rpc", 0, round).await;
        assert_eq!(message["value"], json!({"round": round}), "{message}");
        assert!(reply_to.starts_with("1."), "{reply_to}");
        let reply = json!({
            "reply_to": reply_to, "correlation_id": correlation_id,
            "value": {"done": round},
        });
        let response = post_reply(responder_node, &reply).await;
        assert_eq!(
            response.status(),
            StatusCode::NO_CONTENT,
            "{}",
            response.text().await.unwrap_or_default()
        );
        let (status, answer) = requester.await.expect("the requester task");
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["value"], json!({"done": round}), "{answer}");

        // Forwarded or not, the first reply won: node 3 is told nobody waits.
        let again = post_reply(cluster.node(3), &reply).await;
        cluster
            .node(3)
            .expect_problem(again, StatusCode::NOT_FOUND, "no_waiting_request")
            .await;
    }
    assert_eq!(waiting_requests(requester_node).await, 0.0);
}

#[tokio::test]
async fn a_request_without_reply_times_out_with_504_frees_its_entry_and_a_late_reply_is_404() {
    let server = Server::start().await;
    server.create_topic("rpc", 1).await;

    let requester = spawn_request(&server, "rpc", "timeout_ms=500", json!({"value": 1}));
    let (_, reply_to, correlation_id) = read_request(&server, "rpc", 0, 0).await;
    let (status, answer) = requester.await.expect("the requester task");
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{answer}");
    assert_eq!(answer["code"], "timeout", "{answer}");
    assert_eq!(waiting_requests(&server).await, 0.0);

    let late = post_reply(
        &server,
        &json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": "late"}),
    )
    .await;
    server
        .expect_problem(late, StatusCode::NOT_FOUND, "no_waiting_request")
        .await;
    // A well-formed reply for a request that never existed: the same answer.
    let unknown = post_reply(
        &server,
        &json!({"reply_to": reply_to, "correlation_id": "0".repeat(32), "value": 1}),
    )
    .await;
    server
        .expect_problem(unknown, StatusCode::NOT_FOUND, "no_waiting_request")
        .await;
    // A node that is not in the cluster has nobody waiting either.
    let elsewhere = post_reply(
        &server,
        &json!({"reply_to": "77.00000000000000ab", "correlation_id": correlation_id, "value": 1}),
    )
    .await;
    server
        .expect_problem(elsewhere, StatusCode::NOT_FOUND, "no_waiting_request")
        .await;
}

#[tokio::test]
async fn bad_requests_and_replies_are_400_and_change_nothing() {
    let server = Server::start().await;
    server.create_topic("rpc", 1).await;

    for query in [
        "timeout_ms=0",
        "timeout_ms=60001",
        "timeout_ms=soon",
        "timeout_ms=-1",
    ] {
        let response = server
            .post_json(
                &format!("/v1/topics/rpc/requests?{query}"),
                &json!({"value": 1}),
            )
            .await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    for body in [
        json!({"value": 1, "value_b64": "AA=="}),
        json!({}),
        json!({"value": 1, "headers": {"herald-correlation-id": "mine"}}),
        json!({"value": 1, "headers": {"Herald-Reply-To": "1.00000000000000ab"}}),
        json!({"value": 1, "unknown": true}),
    ] {
        let response = server.post_json("/v1/topics/rpc/requests", &body).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    // Nothing was published, nothing waits.
    let (_, answer) = server.fetch("rpc", 0, "offset=0").await;
    assert_eq!(answer["high_watermark"], 0, "{answer}");
    assert_eq!(waiting_requests(&server).await, 0.0);

    // A real request waits while bad replies are refused; then the good one is delivered.
    let requester = spawn_request(&server, "rpc", "timeout_ms=30000", json!({"value": 1}));
    let (_, reply_to, correlation_id) = read_request(&server, "rpc", 0, 0).await;
    for body in [
        json!({"reply_to": reply_to, "value": 1}),
        json!({"correlation_id": correlation_id, "value": 1}),
        json!({"reply_to": "node-1", "correlation_id": correlation_id, "value": 1}),
        json!({"reply_to": "1.00000000000000AB", "correlation_id": correlation_id, "value": 1}),
        json!({"reply_to": reply_to, "correlation_id": "abc", "value": 1}),
        json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": 1, "value_b64": "AA=="}),
        json!({"reply_to": reply_to, "correlation_id": correlation_id}),
        json!({"reply_to": reply_to, "correlation_id": correlation_id, "value_b64": "%%"}),
    ] {
        let response = post_reply(&server, &body).await;
        server
            .expect_problem(response, StatusCode::BAD_REQUEST, "invalid_request")
            .await;
    }
    assert_eq!(waiting_requests(&server).await, 1.0);
    let good = json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": "ok"});
    assert_eq!(
        post_reply(&server, &good).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, answer) = requester.await.expect("the requester task");
    assert_eq!(
        (status, answer["value"].clone()),
        (StatusCode::OK, json!("ok"))
    );
}

#[tokio::test]
async fn past_max_waiting_requests_a_request_is_503_and_publishes_nothing() {
    let server = Server::start_with(&["--max-waiting-requests", "1"]).await;
    server.create_topic("rpc", 1).await;

    let first = spawn_request(&server, "rpc", "timeout_ms=20000", json!({"value": 1}));
    poll(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async {
            let waiting = waiting_requests(&server).await;
            if waiting == 1.0 {
                Ok(())
            } else {
                Err(format!("{waiting} requests waiting"))
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&seen));
    let response = server
        .post_json(
            "/v1/topics/rpc/requests?timeout_ms=1000",
            &json!({"value": 2}),
        )
        .await;
    assert!(response.headers().contains_key("retry-after"));
    server
        .expect_problem(response, StatusCode::SERVICE_UNAVAILABLE, "overloaded")
        .await;
    // The first request's publish may still be under way: wait for it, then nothing after it.
    let (_, reply_to, correlation_id) = read_request(&server, "rpc", 0, 0).await;
    let (_, answer) = server.fetch("rpc", 0, "offset=1").await;
    assert_eq!(
        answer["high_watermark"], 1,
        "only the first request was published: {answer}"
    );

    let reply = json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": 1});
    assert_eq!(
        post_reply(&server, &reply).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(first.await.expect("the first request").0, StatusCode::OK);
}

#[tokio::test]
async fn a_reply_over_the_topic_limit_is_413_and_the_request_still_waits() {
    let server = Server::start().await;
    server
        .create_topic_with(&json!({"name": "small", "config": {"max_message_bytes": 200}}))
        .await;
    let requester = spawn_request(&server, "small", "timeout_ms=30000", json!({"value": 1}));
    let (_, reply_to, correlation_id) = read_request(&server, "small", 0, 0).await;
    let big =
        json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": "x".repeat(500)});
    let response = post_reply(&server, &big).await;
    server
        .expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "message_too_large")
        .await;
    let fits = json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": "fits"});
    assert_eq!(
        post_reply(&server, &fits).await.status(),
        StatusCode::NO_CONTENT
    );
    let (status, answer) = requester.await.expect("the requester task");
    assert_eq!(
        (status, answer["value"].clone()),
        (StatusCode::OK, json!("fits"))
    );
}

#[tokio::test]
async fn a_reply_for_a_requester_node_that_restarted_reaches_nobody() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "rpc", 1, 3).await;
    let requester = spawn_request(
        cluster.node(1),
        "rpc",
        "timeout_ms=30000",
        json!({"value": "lost"}),
    );
    let (_, reply_to, correlation_id) = read_request(cluster.node(2), "rpc", 0, 0).await;
    cluster.kill(1);
    // Its client saw the connection drop; the wait died with the process.
    requester.abort();
    let reply = json!({"reply_to": reply_to, "correlation_id": correlation_id, "value": "late"});

    // While node 1 is down the reply cannot be delivered: 503 (not sent) or 504 (unknown).
    let response = post_reply(cluster.node(2), &reply).await;
    assert!(
        matches!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
        ),
        "{:?}: {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );

    // Restarted, node 1 is a new process: the old reply_to names nobody there.
    cluster.restart(1).await;
    let node2 = cluster.node(2);
    poll(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let response = post_reply(node2, &reply).await;
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            match status {
                StatusCode::NOT_FOUND if body.contains("no_waiting_request") => Ok(()),
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => {
                    Err(format!("{status}: {body}"))
                }
                other => panic!("a reply to a restarted node answered {other}: {body}"),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| cluster.fail(&seen));
}
