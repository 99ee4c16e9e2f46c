//! Reading from a cluster without panicking on the way: GETs through any node that answer
//! `Err` on a transport failure or an unexpected status (nodes may be down or electing), the
//! cluster/topic/partition views the waits poll, and reading a partition's whole log back as
//! [`Stored`] messages.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use super::cluster::{TestCluster, ELECTION_DEADLINE};
use super::FetchAnswer;

/// One stored message as read back: offset, key, value (parsed JSON) and headers.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub offset: u64,
    pub key: Option<String>,
    pub value: Value,
    pub headers: Option<serde_json::Map<String, Value>>,
}

impl TestCluster {
    /// `GET path` on node `via` as (status, JSON or Null); `Err` on a transport failure.
    pub async fn try_get(&self, via: u64, path: &str) -> Result<(StatusCode, Value), String> {
        let url = self.node(via).url(path);
        let response = self
            .probe
            .get(&url)
            .send()
            .await
            .map_err(|err| format!("GET {url}: {err}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| format!("GET {url}: {status}, body lost: {err}"))?;
        if text.is_empty() {
            return Ok((status, Value::Null));
        }
        let body = serde_json::from_str(&text)
            .map_err(|err| format!("GET {url}: {status}, not JSON ({err}): {text}"))?;
        Ok((status, body))
    }

    /// `GET path` on node `via` when it answers 200, else `Err` with what it answered.
    pub async fn get_ok(&self, via: u64, path: &str) -> Result<Value, String> {
        match self.try_get(via, path).await? {
            (StatusCode::OK, body) => Ok(body),
            (status, body) => Err(format!("GET {path} on node {via}: {status}: {body}")),
        }
    }

    /// `GET /v1/cluster` on node `via`, 200 or `Err`.
    pub async fn cluster_view(&self, via: u64) -> Result<Value, String> {
        self.get_ok(via, "/v1/cluster").await
    }

    /// `GET /v1/topics/{topic}` on node `via`, 200 or `Err`.
    pub async fn topic_view(&self, via: u64, topic: &str) -> Result<Value, String> {
        self.get_ok(via, &format!("/v1/topics/{topic}")).await
    }

    /// Partition `partition` of `GET /v1/topics/{topic}` on node `via`.
    pub async fn partition_view(
        &self,
        via: u64,
        topic: &str,
        partition: u32,
    ) -> Result<Value, String> {
        let topic_view = self.topic_view(via, topic).await?;
        partition_of(&topic_view, partition)
    }

    /// Every message of a partition read through node `via`, from `earliest` to the high
    /// watermark. Failed pages (e.g. 503 during an election) are retried for a while.
    pub async fn read_partition(&self, via: u64, topic: &str, partition: u32) -> Vec<Stored> {
        let deadline = Instant::now() + ELECTION_DEADLINE;
        let mut stored = Vec::new();
        let mut offset = "earliest".to_string();
        loop {
            let path = format!(
                "/v1/topics/{topic}/partitions/{partition}/messages?offset={offset}&max_messages=1000"
            );
            let page = match self.get_page(via, &path).await {
                Ok(page) => page,
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(err) => self.fail(&format!(
                    "reading {topic}/{partition} via node {via}: {err}"
                )),
            };
            // Compaction leaves gaps: a page may hold no message and still move on.
            let stuck = page.messages.is_empty() && offset == page.next_offset.to_string();
            let done = stuck || page.next_offset >= page.high_watermark;
            offset = page.next_offset.to_string();
            for message in page.messages {
                let value = serde_json::from_str(message.value_text()).unwrap_or_else(|err| {
                    self.fail(&format!(
                        "{topic}/{partition}@{}: value is not JSON ({err})",
                        message.offset
                    ))
                });
                stored.push(Stored {
                    offset: message.offset,
                    key: message.key,
                    value,
                    headers: message.headers,
                });
            }
            if done {
                return stored;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "reading {topic}/{partition} via node {via} did not finish"
                ));
            }
        }
    }

    async fn get_page(&self, via: u64, path: &str) -> Result<FetchAnswer, String> {
        let body = self.get_ok(via, path).await?;
        serde_json::from_value(body.clone())
            .map_err(|err| format!("GET {path} on node {via}: bad answer ({err}): {body}"))
    }
}

/// The entry of `partition` in a topic answer.
pub fn partition_of(topic: &Value, partition: u32) -> Result<Value, String> {
    topic["partitions"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["partition"] == partition))
        .cloned()
        .ok_or_else(|| format!("no partition {partition} in {topic}"))
}

/// A JSON array of node ids, sorted.
pub fn sorted_ids(value: &Value) -> Vec<u64> {
    let mut ids: Vec<u64> = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array of node ids: {value}"))
        .iter()
        .map(|v| v.as_u64().unwrap_or_else(|| panic!("not a node id: {v}")))
        .collect();
    ids.sort_unstable();
    ids
}
