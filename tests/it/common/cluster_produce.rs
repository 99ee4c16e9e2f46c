//! Producing to a cluster while nodes fail: one attempt classified as acknowledged, retryable
//! (the messages may or may not be stored) or fatal, and a retry loop that goes round the nodes
//! until an attempt is acknowledged. What was sent and acknowledged is kept by `book`.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use super::cluster::TestCluster;

/// The timeout of one produce attempt by the retrying helpers.
pub const PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client for produce attempts made while nodes fail.
pub fn produce_client() -> reqwest::Client {
    herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(PRODUCE_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

/// A produce that finally succeeded: the offsets of its acknowledged attempt and what went
/// wrong with the attempts before it.
#[derive(Clone, Debug)]
pub struct Produced {
    pub offsets: Vec<(u32, u64)>,
    /// One line per failed attempt (status and body, or the transport error). Non-empty means
    /// the messages were sent more than once and an earlier attempt's outcome is unknown.
    pub failures: Vec<String>,
}

/// How one produce attempt went.
#[derive(Clone, Debug)]
pub enum Attempt {
    Acknowledged(Vec<(u32, u64)>),
    /// A failure after which the messages may or may not be stored (5xx, timeout, connection
    /// error, 409 `not_leader`, 429): retrying is right, and may store them twice.
    Retryable(String),
    /// Any other answer: a bug of the server or of the test.
    Fatal(String),
}

/// One produce attempt of a JSON body at `url`.
pub async fn produce_once(client: &reqwest::Client, url: &str, body: &Value) -> Attempt {
    let response = match client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
    {
        Ok(response) => response,
        Err(err) => return Attempt::Retryable(format!("POST {url}: {err}")),
    };
    let status = response.status();
    let text = match response.text().await {
        Ok(text) => text,
        Err(err) => return Attempt::Retryable(format!("POST {url}: {status}, body lost: {err}")),
    };
    if status == StatusCode::OK {
        let answer: Value = match serde_json::from_str(&text) {
            Ok(answer) => answer,
            Err(err) => {
                return Attempt::Fatal(format!("POST {url}: 200 but not JSON ({err}): {text}"))
            }
        };
        return Attempt::Acknowledged(super::parse_offsets(&answer));
    }
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    let retryable = status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::CONFLICT && code == "not_leader");
    let line = format!("POST {url}: {status}: {text}");
    if retryable {
        Attempt::Retryable(line)
    } else {
        Attempt::Fatal(line)
    }
}

/// Produces `body` until one attempt is acknowledged, going round `urls` (one node after the
/// other) after each failure, for at most `within`. `Err` on a non-retryable answer or when
/// time is up.
pub async fn produce_retrying(
    client: &reqwest::Client,
    urls: &[String],
    body: &Value,
    within: Duration,
) -> Result<Produced, String> {
    assert!(!urls.is_empty());
    let deadline = Instant::now() + within;
    let mut failures = Vec::new();
    let mut next = 0;
    loop {
        let url = &urls[next % urls.len()];
        next += 1;
        match produce_once(client, url, body).await {
            Attempt::Acknowledged(offsets) => return Ok(Produced { offsets, failures }),
            Attempt::Fatal(line) => {
                return Err(format!(
                    "{line}\n(after {} failed attempts: {failures:#?})",
                    failures.len()
                ))
            }
            Attempt::Retryable(line) => failures.push(line),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not acknowledged within {within:?}; attempts: {failures:#?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The produce URL (`acks=all`) of `topic` on node `via`.
pub fn messages_url(cluster: &TestCluster, via: u64, topic: &str) -> String {
    cluster
        .node(via)
        .url(&format!("/v1/topics/{topic}/messages?acks=all"))
}

impl TestCluster {
    /// Produces one message, key and id `id`, to `partition` through any of `via` (retrying
    /// round them); fails the test when an attempt before the acknowledged one failed (its
    /// message may then be stored twice).
    pub async fn produce_id(&self, via: &[u64], topic: &str, partition: u32, id: &str) {
        let urls: Vec<String> = via
            .iter()
            .map(|&node| super::cluster::messages_url(self, node, topic))
            .collect();
        let produced = produce_retrying(
            &produce_client(),
            &urls,
            &super::book::batch(&[id.to_string()], partition),
            super::book::PRODUCE_DEADLINE,
        )
        .await
        .unwrap_or_else(|error| self.fail(&format!("produce {id}: {error}")));
        assert!(produced.failures.is_empty(), "{produced:?}");
    }

    /// The keys stored in `partition`, in offset order, read through `via`.
    pub async fn stored_keys(&self, via: u64, topic: &str, partition: u32) -> Vec<String> {
        self.node(via)
            .read_all(topic, partition)
            .await
            .into_iter()
            .map(|message| message.key.unwrap_or_default())
            .collect()
    }
}
