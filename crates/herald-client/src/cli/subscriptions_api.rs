//! Subscription calls of the HTTP client: settings (`PUT/GET/DELETE /v1/subscriptions/...`)
//! and delivery (pull, ack, nack), for `herald subscriptions`, `herald pull` and the queue
//! benchmark.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::client::Api;

/// One delivery of a pull answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Pulled {
    pub ack_id: String,
    pub delivery_attempt: u32,
    /// The message as `herald consume` prints it (topic, partition, offset, key, value, ...).
    pub message: Value,
}

#[derive(Debug, Deserialize)]
struct PullAnswer {
    messages: Vec<Pulled>,
}

/// Which ack ids a settle (ack or nack) applied, and which had expired.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SettleAnswer {
    #[serde(default, alias = "acked", alias = "nacked")]
    pub done: Vec<String>,
    #[serde(default)]
    pub expired: Vec<String>,
}

impl Api {
    /// `PUT /v1/subscriptions/{sub}`: creates it (or changes its settings); answers the
    /// subscription.
    pub async fn put_subscription(&self, name: &str, body: &Value) -> anyhow::Result<Value> {
        self.send_json(
            self.http()
                .put(self.url(&["v1", "subscriptions", name]))
                .json(body),
        )
        .await
    }

    /// `GET /v1/subscriptions/{sub}`: settings and counts.
    pub async fn get_subscription(&self, name: &str) -> anyhow::Result<Value> {
        self.send_json(self.http().get(self.url(&["v1", "subscriptions", name])))
            .await
    }

    /// `GET /v1/subscriptions`: every subscription's settings.
    pub async fn list_subscriptions(&self) -> anyhow::Result<Vec<Value>> {
        #[derive(Deserialize)]
        struct List {
            subscriptions: Vec<Value>,
        }
        let list: List = self
            .send_json(self.http().get(self.url(&["v1", "subscriptions"])))
            .await?;
        Ok(list.subscriptions)
    }

    /// `DELETE /v1/subscriptions/{sub}`.
    pub async fn delete_subscription(&self, name: &str) -> anyhow::Result<()> {
        self.send(self.http().delete(self.url(&["v1", "subscriptions", name])))
            .await?;
        Ok(())
    }

    /// `POST /v1/subscriptions/{sub}/pull`.
    pub async fn pull(
        &self,
        name: &str,
        max_messages: u32,
        max_wait_ms: u64,
    ) -> anyhow::Result<Vec<Pulled>> {
        let body = json!({"max_messages": max_messages, "max_wait_ms": max_wait_ms});
        // A long poll legitimately takes `max_wait_ms`; give the server that plus slack.
        let timeout = Duration::from_millis(max_wait_ms) + Duration::from_secs(30);
        let answer: PullAnswer = self
            .send_json(
                self.http()
                    .post(self.url(&["v1", "subscriptions", name, "pull"]))
                    .timeout(timeout)
                    .json(&body),
            )
            .await?;
        Ok(answer.messages)
    }

    /// `POST /v1/subscriptions/{sub}/ack`.
    pub async fn ack(&self, name: &str, ack_ids: &[&str]) -> anyhow::Result<SettleAnswer> {
        self.send_json(
            self.http()
                .post(self.url(&["v1", "subscriptions", name, "ack"]))
                .json(&json!({ "ack_ids": ack_ids })),
        )
        .await
    }

    /// `POST /v1/subscriptions/{sub}/nack` with `delay_ms` (the retry policy's backoff
    /// without).
    pub async fn nack(
        &self,
        name: &str,
        ack_ids: &[&str],
        delay_ms: Option<u64>,
    ) -> anyhow::Result<SettleAnswer> {
        let mut body = json!({ "ack_ids": ack_ids });
        if let Some(delay_ms) = delay_ms {
            body["delay_ms"] = json!(delay_ms);
        }
        self.send_json(
            self.http()
                .post(self.url(&["v1", "subscriptions", name, "nack"]))
                .json(&body),
        )
        .await
    }
}
