//! HTTP/2 without TLS (h2c with prior knowledge) on the client port: one connection carries
//! many requests at once, each answered as it would be over HTTP/1.1.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{b64, poll, Server};
use reqwest::{StatusCode, Version};
use serde_json::Value;

/// Concurrent single-message produces sent at once over the one connection.
const CONCURRENT_PRODUCES: usize = 200;

/// A client that speaks HTTP/2 from its first byte, as gRPC-style clients and
/// `herald bench produce --http2` do.
fn h2c_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(30))
        .no_proxy()
        .build()
        .expect("an HTTP/2 client")
}

/// The node allows two client connections: the test helper's HTTP/1.1 one and the HTTP/2 one.
/// A client that opened a second connection for its concurrent requests would be refused, so
/// every request answered proves they shared one.
#[tokio::test]
async fn h2c_multiplexes_concurrent_produces_and_reads_on_one_connection() {
    let server = Server::start_with(&["--max-connections", "2"]).await;
    server.create_topic("h2", 1).await;
    let client = h2c_client();
    let produce_url = server.url("/v1/topics/h2/messages");

    // The first request opens the connection. A connection of the helper's start-up polls may
    // not have been released yet: retried until the node has room, within a deadline.
    let first = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let sent = client
                .post(&produce_url)
                .header("content-type", "application/octet-stream")
                .body("first")
                .send()
                .await;
            match sent {
                Ok(response) if response.status() == StatusCode::OK => Ok(response),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
    .unwrap_or_else(|other| panic!("the first HTTP/2 request never succeeded: {other}"));
    assert_eq!(first.version(), Version::HTTP_2);

    let sends = (0..CONCURRENT_PRODUCES).map(|index| {
        client
            .post(&produce_url)
            .header("content-type", "application/octet-stream")
            .body(format!("message-{index}"))
            .send()
    });
    let mut offsets = BTreeSet::new();
    for (index, sent) in futures::future::join_all(sends)
        .await
        .into_iter()
        .enumerate()
    {
        let response = sent.unwrap_or_else(|error| panic!("request {index}: {error}"));
        assert_eq!(response.version(), Version::HTTP_2, "request {index}");
        let status = response.status();
        let answer: Value = response.json().await.expect("a JSON answer");
        assert_eq!(status, StatusCode::OK, "request {index}: {answer}");
        let offset = answer["offsets"][0]["offset"]
            .as_u64()
            .unwrap_or_else(|| panic!("no offset in {answer}"));
        assert!(offsets.insert(offset), "offset {offset} given twice");
    }
    // Every request got its own offset, after the first message's.
    let expected: BTreeSet<u64> = (1..=CONCURRENT_PRODUCES as u64).collect();
    assert_eq!(offsets, expected);

    // Read back over the same connection: every message, each value once.
    let response = client
        .get(server.url("/v1/topics/h2/partitions/0/messages?offset=0&max_messages=1000"))
        .send()
        .await
        .expect("the read");
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.expect("a JSON answer");
    // Octet-stream values are bytes: they come back as `value_b64`.
    let values: BTreeSet<String> = answer["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages in {answer}"))
        .iter()
        .map(|message| match &message["value_b64"] {
            Value::String(encoded) => encoded.clone(),
            other => panic!("value_b64 {other} is not the bytes produced"),
        })
        .collect();
    let mut expected: BTreeSet<String> = (0..CONCURRENT_PRODUCES)
        .map(|index| b64(format!("message-{index}").as_bytes()))
        .collect();
    expected.insert(b64(b"first"));
    assert_eq!(values, expected);
}

/// A problem comes back over HTTP/2 as over HTTP/1.1: status, problem+json, stable code.
#[tokio::test]
async fn h2c_answers_problems_like_http1() {
    let server = Server::start().await;
    let response = h2c_client()
        .post(server.url("/v1/topics/missing/messages"))
        .header("content-type", "application/json")
        .body(r#"{"messages":[{"value":"x"}]}"#)
        .send()
        .await
        .expect("the request");
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: Value = response.json().await.expect("a problem");
    assert_eq!(problem["code"], "topic_not_found");
}
