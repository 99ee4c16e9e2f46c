//! Per-client quotas against the real binary: a client over its requests per second or its
//! produce bytes per second gets 429 `quota_exceeded` with `Retry-After`, while another client
//! goes on unhindered; a client named in `[quotas.clients]` gets its own limits.
//!
//! Who a client is lives in one helper, [`client_as`]: anonymous clients are told apart by
//! their source address (127.0.0.1 and 127.0.0.2), which is what quotas key them by when
//! authentication is off. With authentication on a client is its token's subject: the last test
//! has two OAuth2 clients on one address, one over its own `[quotas.clients.<id>]` limit.

use crate::common;

use std::net::IpAddr;
use std::time::Duration;

use crate::common::{Server, PROBLEM_JSON, REQUEST_TIMEOUT};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The two clients of every test, by the id `[quotas.clients]` knows them by.
const FIRST: &str = "127.0.0.1";
const SECOND: &str = "127.0.0.2";

/// An HTTP client that the node sees as client `id`.
async fn client_as(_server: &Server, id: &str) -> reqwest::Client {
    let address: IpAddr = id.parse().expect("an anonymous client's id is its address");
    common::http::client_builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .local_address(address)
        .build()
        .expect("build the HTTP client")
}

/// A node with `quotas` as its `[quotas]` section.
async fn node_with_quotas(quotas: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("herald.toml");
    std::fs::write(&path, format!("[quotas]\n{quotas}\n")).expect("write the config");
    let server = Server::start_with(&["--config", path.to_str().expect("a UTF-8 path")]).await;
    (server, dir)
}

/// Checks a 429 `quota_exceeded` naming `setting`, with a whole `Retry-After` of at least 1.
async fn expect_quota_exceeded(response: reqwest::Response, setting: &str) -> u64 {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("a Retry-After header in whole seconds");
    assert!(retry_after >= 1, "Retry-After {retry_after}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(content_type.starts_with(PROBLEM_JSON), "{content_type}");
    let body: Value = response.json().await.expect("a problem body");
    assert_eq!(body["code"], "quota_exceeded", "{body}");
    assert_eq!(body["status"], 429, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(setting),
        "the detail names the quota: {detail}"
    );
    retry_after
}

#[tokio::test]
async fn a_client_over_its_requests_per_second_gets_429_and_another_is_unaffected() {
    let (server, _config) = node_with_quotas("requests_per_sec = 5").await;
    let (first, second) = (
        client_as(&server, FIRST).await,
        client_as(&server, SECOND).await,
    );
    let topics = server.url("/v1/topics");
    // A burst of 5, refilled at 5 a second: far fewer than 100 requests in a row pass.
    let mut refused = None;
    for _ in 0..100 {
        let response = first.get(&topics).send().await.expect("GET /v1/topics");
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(response);
            break;
        }
        assert_eq!(response.status(), StatusCode::OK);
    }
    let refused = refused.expect("the first client is refused within 100 requests");
    let retry_after = expect_quota_exceeded(refused, "requests_per_sec").await;
    assert_eq!(retry_after, 1, "a request comes back every 200 ms");
    // The other client has its own bucket: its requests pass while the first is refused.
    for _ in 0..4 {
        let response = second.get(&topics).send().await.expect("GET /v1/topics");
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(
        first.get(&topics).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the first client is still over its quota"
    );
    // After Retry-After, the first client is served again.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(
        first.get(&topics).send().await.unwrap().status(),
        StatusCode::OK
    );
    // The node's health is never throttled.
    assert_eq!(
        first
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("herald_quota_throttled_total{kind=\"requests\"}")),
        "{metrics}"
    );
}

/// A produce body of `value_bytes` bytes of value.
fn message_of(value_bytes: usize) -> Value {
    json!({ "messages": [ { "value": "x".repeat(value_bytes) } ] })
}

#[tokio::test]
async fn produce_bytes_are_limited_per_client_and_an_override_lifts_them() {
    let (server, _config) = node_with_quotas(&format!(
        "produce_bytes_per_sec = 4096\n[quotas.clients.\"{SECOND}\"]\nproduce_bytes_per_sec = 10000000\n"
    ))
    .await;
    server.create_topic("metered", 1).await;
    let (first, second) = (
        client_as(&server, FIRST).await,
        client_as(&server, SECOND).await,
    );
    let messages = server.url("/v1/topics/metered/messages");
    let body = message_of(3000).to_string();
    let produce = |client: &reqwest::Client| {
        client
            .post(&messages)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };
    assert_eq!(produce(&first).await.unwrap().status(), StatusCode::OK);
    // 3 KB taken from a 4 KB burst refilling at 4 KB/s: the next 3 KB must wait.
    let refused = produce(&first).await.unwrap();
    expect_quota_exceeded(refused, "produce_bytes_per_sec").await;
    // The second client's override: ten of the same bodies in a row pass.
    for _ in 0..10 {
        assert_eq!(produce(&second).await.unwrap().status(), StatusCode::OK);
    }
    // Nothing of the refused request was written: one message from the first client, ten
    // from the second.
    let (_, fetched) = server
        .json(
            server
                .get("/v1/topics/metered/partitions/0/messages?offset=earliest&max_messages=100")
                .await,
        )
        .await;
    assert_eq!(fetched["messages"].as_array().map(Vec::len), Some(11));
}

/// A body without `Content-Length` (chunked) is held to the produce byte quota like one with
/// it: twenty sent at once, each over half the burst, do not all pass because none of them
/// declared its size up front. Each refused one answers 429 and writes nothing.
#[tokio::test]
async fn concurrent_chunked_bodies_are_held_to_the_produce_bytes_quota() {
    let (server, _config) = node_with_quotas("produce_bytes_per_sec = 4096").await;
    server.create_topic("chunked", 1).await;
    let first = client_as(&server, FIRST).await;
    let messages = server.url("/v1/topics/chunked/messages");
    let body = message_of(3000).to_string().into_bytes();
    let sends = (0..20).map(|_| {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            body.chunks(1000).map(|chunk| Ok(chunk.to_vec())).collect();
        first
            .post(&messages)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            .send()
    });
    let started = std::time::Instant::now();
    let answers = futures::future::join_all(sends).await;
    let elapsed = started.elapsed().as_secs_f64();
    let mut accepted = 0;
    let mut refused = None;
    for answer in answers {
        let answer = answer.expect("an answer");
        match answer.status() {
            StatusCode::OK => accepted += 1,
            StatusCode::TOO_MANY_REQUESTS => refused = Some(answer),
            other => panic!("unexpected {other}: {}", answer.text().await.unwrap()),
        }
    }
    // What may pass: the 4 KB burst, one chunk taken while the bucket was not yet in debt (at
    // most a body), and what the bucket refilled while the requests ran.
    let passable = (4096.0 + body.len() as f64 + 4096.0 * elapsed) / body.len() as f64;
    assert!(
        accepted as f64 <= passable && accepted < 20,
        "{accepted} of 20 chunked bodies of {} bytes passed a 4 KB/s quota in {elapsed:.2} s",
        body.len()
    );
    expect_quota_exceeded(refused.expect("a refusal"), "produce_bytes_per_sec").await;
    // Read as the other client: the first is in debt until its bucket refills.
    let second = client_as(&server, SECOND).await;
    let (_, fetched) = server
        .json(
            second
                .get(server.url(
                    "/v1/topics/chunked/partitions/0/messages?offset=earliest&max_messages=100",
                ))
                .send()
                .await
                .unwrap(),
        )
        .await;
    assert_eq!(
        fetched["messages"].as_array().map(Vec::len),
        Some(accepted),
        "only accepted bodies are written"
    );
}

/// `count` messages of `value_bytes` bytes each, produced by the node's own client.
async fn produce_sized(server: &Server, topic: &str, count: usize, value_bytes: usize) {
    let messages: Vec<Value> = (0..count)
        .map(|_| json!({ "value": "y".repeat(value_bytes) }))
        .collect();
    let response = server
        .post_json(
            &format!("/v1/topics/{topic}/messages"),
            &json!({ "messages": messages }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_websocket_publish_over_quota_is_refused_and_the_socket_stays_open() {
    let (server, _config) = node_with_quotas("produce_bytes_per_sec = 2000").await;
    server.create_topic("ws-metered", 1).await;
    let mut socket = common::ws::connect(&server).await;
    let publish = |id: &str, value_bytes: usize| {
        json!({"op": "publish", "id": id, "topic": "ws-metered",
               "messages": [{"value": "z".repeat(value_bytes)}]})
    };
    common::ws::send(&mut socket, publish("big-1", 1500)).await;
    let answer = common::ws::next_frame(&mut socket).await;
    assert_eq!(answer["op"], "published", "{answer}");
    common::ws::send(&mut socket, publish("big-2", 1500)).await;
    let answer = common::ws::next_frame(&mut socket).await;
    assert_eq!(answer["op"], "error", "{answer}");
    assert_eq!(answer["id"], "big-2");
    assert_eq!(answer["error"]["code"], "quota_exceeded", "{answer}");
    assert_eq!(answer["error"]["status"], 429, "{answer}");
    // The socket is still open and a publish within the quota goes through.
    common::ws::send(&mut socket, publish("small", 10)).await;
    let answer = common::ws::next_frame(&mut socket).await;
    assert_eq!(answer["op"], "published", "{answer}");
}

/// What the consume quota tests send: 12 messages of about 1 KB to a client allowed 4 KB/s, so
/// that past its 4 KB burst the rest takes about two seconds.
const THROTTLED_MESSAGES: usize = 12;
const THROTTLED_VALUE_BYTES: usize = 1000;
/// Well under the ~2.3 s the quota makes it take, and far over what it takes unthrottled.
const THROTTLED_AT_LEAST: Duration = Duration::from_millis(1500);

#[tokio::test]
async fn websocket_deliveries_over_the_consume_quota_are_delayed_not_dropped() {
    let (server, _config) = node_with_quotas(&format!(
        "[quotas.clients.\"{FIRST}\"]\nconsume_bytes_per_sec = 4000\n"
    ))
    .await;
    server.create_topic("ws-paced", 1).await;
    // Produced from the second address, which has no quota, so the first starts with a full
    // bucket.
    let producer = client_as(&server, SECOND).await;
    let messages: Vec<Value> = (0..THROTTLED_MESSAGES)
        .map(|_| json!({ "value": "w".repeat(THROTTLED_VALUE_BYTES) }))
        .collect();
    let response = producer
        .post(server.url("/v1/topics/ws-paced/messages"))
        .json(&json!({ "messages": messages }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut socket = common::ws::connect(&server).await;
    let started = std::time::Instant::now();
    // One message per frame, so each delivery waits for the one before to be paid for.
    common::ws::subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "paced", "topic": "ws-paced", "from": "earliest", "credit": 1}),
    )
    .await;
    for _ in 0..THROTTLED_MESSAGES {
        common::ws::receive(&mut socket, "paced", 1).await;
        common::ws::send(
            &mut socket,
            json!({"op": "credit", "id": "paced", "messages": 1}),
        )
        .await;
    }
    let took = started.elapsed();
    assert!(
        took >= THROTTLED_AT_LEAST,
        "{THROTTLED_MESSAGES} deliveries took {took:?}"
    );
}

#[tokio::test]
async fn server_sent_events_over_the_consume_quota_are_delayed_not_dropped() {
    let (server, _config) = node_with_quotas(&format!(
        "[quotas.clients.\"{FIRST}\"]\nconsume_bytes_per_sec = 4000\n"
    ))
    .await;
    server.create_topic("sse-paced", 1).await;
    // The node's own client is the first address: what it produces first costs it a little.
    produce_sized(
        &server,
        "sse-paced",
        THROTTLED_MESSAGES,
        THROTTLED_VALUE_BYTES,
    )
    .await;
    let started = std::time::Instant::now();
    let mut events = common::sse::open(
        &server.base_url(),
        "/v1/topics/sse-paced/events?from=earliest",
        None,
    )
    .await;
    let received = events.messages(THROTTLED_MESSAGES).await;
    assert_eq!(received.len(), THROTTLED_MESSAGES);
    let took = started.elapsed();
    assert!(
        took >= THROTTLED_AT_LEAST,
        "{THROTTLED_MESSAGES} events took {took:?}"
    );
}

/// With authentication on, a client is its token's subject: two OAuth2 clients on the same
/// address have their own buckets, and `[quotas.clients.<client_id>]` gives one its own limit.
#[tokio::test]
async fn with_authentication_quotas_follow_the_oauth2_client_not_the_address() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("herald.toml");
    std::fs::write(
        &path,
        "[quotas]\nrequests_per_sec = 1000\n[quotas.clients.billing]\nrequests_per_sec = 5\n",
    )
    .expect("write the config");
    let mut server = Server::start_with(&["--config", path.to_str().expect("a UTF-8 path")]).await;
    let mut secrets = Vec::new();
    for id in ["billing", "analytics"] {
        let (status, body) = server
            .json(
                server
                    .post_json(
                        "/v1/auth/clients",
                        &json!({"client_id": id, "roles": ["viewer"]}),
                    )
                    .await,
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        secrets.push(body["client_secret"].as_str().unwrap().to_string());
    }
    server.set_extra_args(vec![
        "--config".into(),
        path.to_str().unwrap().into(),
        "--auth".into(),
    ]);
    server.restart().await;
    let mut tokens = Vec::new();
    for (id, secret) in ["billing", "analytics"].iter().zip(&secrets) {
        let (status, body) = server
            .json(
                server
                    .http_client()
                    .post(server.url("/oauth/token"))
                    .basic_auth(id, Some(secret))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body("grant_type=client_credentials")
                    .send()
                    .await
                    .expect("POST /oauth/token"),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        tokens.push(body["access_token"].as_str().unwrap().to_string());
    }
    let topics = server.url("/v1/topics");
    let get = |token: &str| {
        server
            .http_client()
            .get(&topics)
            .bearer_auth(token.to_string())
            .send()
    };
    let mut refused = None;
    for _ in 0..100 {
        let response = get(&tokens[0]).await.expect("GET /v1/topics");
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(response);
            break;
        }
        assert_eq!(response.status(), StatusCode::OK);
    }
    let refused = refused.expect("billing is refused within 100 requests");
    let retry_after = expect_quota_exceeded(refused, "requests_per_sec").await;
    assert!(retry_after >= 1);
    // analytics, from the same address, is served: 20 requests in a row, far above billing's 5.
    for _ in 0..20 {
        let response = get(&tokens[1]).await.expect("GET /v1/topics");
        assert_eq!(response.status(), StatusCode::OK);
    }
}
