//! Messages on a single node: produce and fetch helpers, reading a whole partition back, the
//! offset-for-timestamp lookup, and the parsed shapes of the answers ([`FetchAnswer`],
//! [`RawMessage`] with each value kept as the exact text the server sent, produce offsets).

use std::time::Instant;

use reqwest::{Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Server, REQUEST_TIMEOUT};

impl Server {
    /// `POST /v1/topics/{topic}/messages` with a JSON body (acks default).
    pub async fn produce_json(&self, topic: &str, body: &Value) -> (StatusCode, Value) {
        let response = self
            .post_json(&format!("/v1/topics/{topic}/messages"), body)
            .await;
        self.json(response).await
    }

    /// Produces and asserts 200; returns the `(partition, offset)` of each message in order.
    pub async fn produce_ok(&self, topic: &str, body: &Value) -> Vec<(u32, u64)> {
        let (status, answer) = self.produce_json(topic, body).await;
        if status != StatusCode::OK {
            self.fail(&format!(
                "produce to {topic}: expected 200, got {status}: {answer}"
            ));
        }
        parse_offsets(&answer)
    }

    /// `GET /v1/topics/{topic}/partitions/{partition}/messages?{query}` as (status, JSON).
    pub async fn fetch(&self, topic: &str, partition: u32, query: &str) -> (StatusCode, Value) {
        let response = self.fetch_response(topic, partition, query).await;
        self.json(response).await
    }

    pub async fn fetch_response(&self, topic: &str, partition: u32, query: &str) -> Response {
        self.get(&format!(
            "/v1/topics/{topic}/partitions/{partition}/messages?{query}"
        ))
        .await
    }

    /// Fetches with values kept as the exact text the server sent.
    pub async fn fetch_raw(&self, topic: &str, partition: u32, query: &str) -> FetchAnswer {
        let response = self.fetch_response(topic, partition, query).await;
        let status = response.status();
        let text = response.text().await.expect("read the fetch answer");
        if status != StatusCode::OK {
            self.fail(&format!(
                "fetch {topic}/{partition}?{query}: {status}: {text}"
            ));
        }
        serde_json::from_str(&text).unwrap_or_else(|err| {
            self.fail(&format!("fetch answer does not parse ({err}): {text}"))
        })
    }

    /// Every message of a partition from `earliest` up to the high watermark, paging with
    /// `next_offset`.
    pub async fn read_all(&self, topic: &str, partition: u32) -> Vec<RawMessage> {
        let mut messages = Vec::new();
        let mut offset = "earliest".to_string();
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let answer = self
                .fetch_raw(
                    topic,
                    partition,
                    &format!("offset={offset}&max_messages=1000"),
                )
                .await;
            // Compaction leaves gaps: a page may hold no message and still move on.
            let stuck = answer.messages.is_empty() && offset == answer.next_offset.to_string();
            let done = stuck || answer.next_offset >= answer.high_watermark;
            offset = answer.next_offset.to_string();
            messages.extend(answer.messages);
            if done {
                return messages;
            }
            if Instant::now() >= deadline {
                self.fail(&format!("reading {topic}/{partition} did not finish"));
            }
        }
    }

    /// `GET .../offsets?timestamp=T` → offset.
    pub async fn offset_for_timestamp(&self, topic: &str, partition: u32, timestamp: i64) -> u64 {
        let path =
            format!("/v1/topics/{topic}/partitions/{partition}/offsets?timestamp={timestamp}");
        let (status, body) = self.json(self.get(&path).await).await;
        if status != StatusCode::OK {
            self.fail(&format!("GET {path}: {status}: {body}"));
        }
        body["offset"]
            .as_u64()
            .unwrap_or_else(|| self.fail(&format!("GET {path}: no numeric offset: {body}")))
    }
}

/// The `offsets` of a produce answer as `(partition, offset)`; panics on `null` offsets.
pub fn parse_offsets(answer: &Value) -> Vec<(u32, u64)> {
    answer["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("no offsets array in {answer}"))
        .iter()
        .map(|o| {
            (
                o["partition"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("bad partition in {answer}")) as u32,
                o["offset"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("bad offset in {answer}")),
            )
        })
        .collect()
}

/// A fetch answer, with each message's `value` kept as the exact JSON text sent by the server.
#[derive(Debug, Deserialize)]
pub struct FetchAnswer {
    pub messages: Vec<RawMessage>,
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

#[derive(Debug, Deserialize)]
pub struct RawMessage {
    #[serde(default)]
    pub topic: Option<String>,
    pub partition: u32,
    pub offset: u64,
    pub timestamp: i64,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub key_b64: Option<String>,
    #[serde(default)]
    pub value: Option<Box<RawValue>>,
    #[serde(default)]
    pub value_b64: Option<String>,
    #[serde(default)]
    pub headers: Option<serde_json::Map<String, Value>>,
}

impl RawMessage {
    /// The JSON text of `value`, exactly as the server sent it (`null` for a tombstone, which
    /// serde reads as an absent `value`).
    pub fn value_text(&self) -> &str {
        match (self.value.as_deref(), &self.value_b64) {
            (Some(raw), _) => raw.get(),
            (None, None) => "null",
            (None, Some(_)) => panic!("message has no JSON value: {self:?}"),
        }
    }

    /// The bytes of `value_b64`.
    pub fn value_bytes(&self) -> Vec<u8> {
        use base64::Engine;
        let text = self
            .value_b64
            .as_deref()
            .unwrap_or_else(|| panic!("message has no value_b64: {self:?}"));
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_else(|err| panic!("value_b64 {text:?} is not base64: {err}"))
    }
}

pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The current time in ms since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
