//! Topics on a single node: creating one (asserting 201), describing it, waiting until every
//! partition has elected this node as its leader, and reading the high watermarks that tests
//! compare before and after an operation that must not write.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::{poll, Server};

/// How long partitions of a new topic get to elect their leaders.
pub const LEADER_DEADLINE: Duration = Duration::from_secs(60);

impl Server {
    /// `POST /v1/topics` with `{"name","partitions"}`; asserts 201 and returns the topic.
    pub async fn create_topic(&self, name: &str, partitions: u32) -> Value {
        self.create_topic_with(&serde_json::json!({"name": name, "partitions": partitions}))
            .await
    }

    /// `POST /v1/topics` with any body; asserts 201 and returns the topic.
    pub async fn create_topic_with(&self, body: &Value) -> Value {
        let response = self.post_json("/v1/topics", body).await;
        let (status, topic) = self.json(response).await;
        if status != StatusCode::CREATED {
            self.fail(&format!(
                "create topic {body}: expected 201, got {status}: {topic}"
            ));
        }
        topic
    }

    /// `GET /v1/topics/{topic}`; asserts 200.
    pub async fn describe(&self, topic: &str) -> Value {
        let (status, body) = self
            .json(self.get(&format!("/v1/topics/{topic}")).await)
            .await;
        if status != StatusCode::OK {
            self.fail(&format!(
                "describe {topic}: expected 200, got {status}: {body}"
            ));
        }
        body
    }

    /// Waits until every partition of `topic` reports this node (1) as its leader.
    pub async fn wait_for_leaders(&self, topic: &str) {
        let led = poll(LEADER_DEADLINE, Duration::from_millis(100), || async {
            let described = self.describe(topic).await;
            let partitions = described["partitions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !partitions.is_empty() && partitions.iter().all(|p| p["leader"] == 1) {
                Ok(())
            } else {
                Err(described.to_string())
            }
        })
        .await;
        if let Err(described) = led {
            self.fail(&format!(
                "{topic}: not every partition had a leader within {LEADER_DEADLINE:?}: {described}"
            ));
        }
    }

    /// The high watermark of every partition of a topic, by partition.
    pub async fn high_watermarks(&self, topic: &str) -> Vec<u64> {
        let described = self.describe(topic).await;
        let mut partitions: Vec<(u64, u64)> = described["partitions"]
            .as_array()
            .unwrap_or_else(|| self.fail(&format!("no partitions array: {described}")))
            .iter()
            .map(|p| {
                (
                    p["partition"].as_u64().expect("partition"),
                    p["high_watermark"].as_u64().expect("high_watermark"),
                )
            })
            .collect();
        partitions.sort();
        partitions.into_iter().map(|(_, hw)| hw).collect()
    }
}
