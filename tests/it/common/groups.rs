//! Consumer groups through one node: join, heartbeat, poll, commit, leave and describe, with
//! the answers parsed into [`Member`] and [`Polled`] (whose `cursor` the next poll sends).

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::Server;

/// A member as its join or heartbeat answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub generation: u64,
    /// `(topic, partition)`, sorted.
    pub assignments: BTreeSet<(String, u32)>,
}

/// One message a poll delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// The value as JSON text.
    pub value: String,
}

#[derive(Debug, Clone)]
pub struct Polled {
    pub generation: u64,
    pub messages: Vec<Delivered>,
    /// Where the next poll continues: send it as the next poll's `cursor`.
    pub cursor: Option<String>,
}

impl Polled {
    /// The poll body `body` with this answer's cursor added.
    pub fn next_poll(&self, mut body: Value) -> Value {
        body["cursor"] = json!(self.cursor);
        body
    }

    /// The offsets to commit after processing these messages: per partition, past the last.
    pub fn commit_body(&self, member: &str) -> Value {
        let mut next: std::collections::BTreeMap<(String, u32), u64> = Default::default();
        for message in &self.messages {
            let entry = next
                .entry((message.topic.clone(), message.partition))
                .or_default();
            *entry = (*entry).max(message.offset + 1);
        }
        json!({
            "member_id": member,
            "generation": self.generation,
            "offsets": next.iter().map(|((topic, partition), offset)| {
                json!({"topic": topic, "partition": partition, "offset": offset})
            }).collect::<Vec<_>>(),
        })
    }
}

pub fn parse_assignments(value: &Value) -> BTreeSet<(String, u32)> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| {
                    (
                        item["topic"].as_str().unwrap_or_default().to_string(),
                        item["partition"].as_u64().unwrap_or(u64::MAX) as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A poll answer's messages, generation and cursor.
pub fn parse_polled(answer: &Value) -> Polled {
    let messages = answer["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|message| Delivered {
            topic: message["topic"].as_str().unwrap_or_default().to_string(),
            partition: message["partition"].as_u64().unwrap_or_default() as u32,
            offset: message["offset"].as_u64().unwrap_or_default(),
            value: message["value"].to_string(),
        })
        .collect();
    Polled {
        generation: answer["generation"].as_u64().unwrap_or_default(),
        messages,
        cursor: answer["cursor"].as_str().map(String::from),
    }
}

fn parse_member(body: &Value) -> Member {
    Member {
        id: body["member_id"].as_str().unwrap_or_default().to_string(),
        generation: body["generation"].as_u64().unwrap_or_default(),
        assignments: parse_assignments(&body["assignments"]),
    }
}

impl Server {
    /// `POST /v1/groups/{group}/members`; asserts 200.
    pub async fn join_group(&self, group: &str, body: &Value) -> Member {
        let response = self
            .post_json(&format!("/v1/groups/{group}/members"), body)
            .await;
        let (status, answer) = self.json(response).await;
        if status != StatusCode::OK {
            self.fail(&format!("join {group} {body}: {status}: {answer}"));
        }
        parse_member(&answer)
    }

    /// Heartbeat: the member's view, or the status of a refusal.
    pub async fn heartbeat(
        &self,
        group: &str,
        member: &str,
    ) -> Result<Member, (StatusCode, Value)> {
        let response = self
            .post_json(
                &format!("/v1/groups/{group}/members/{member}/heartbeat"),
                &json!({}),
            )
            .await;
        let (status, answer) = self.json(response).await;
        if status == StatusCode::OK {
            Ok(parse_member(&answer))
        } else {
            Err((status, answer))
        }
    }

    /// Polls: the messages, or the status of a refusal.
    pub async fn poll_group(
        &self,
        group: &str,
        member: &str,
        body: &Value,
    ) -> Result<Polled, (StatusCode, Value)> {
        let response = self
            .post_json(&format!("/v1/groups/{group}/members/{member}/poll"), body)
            .await;
        let (status, answer) = self.json(response).await;
        if status != StatusCode::OK {
            return Err((status, answer));
        }
        Ok(parse_polled(&answer))
    }

    /// `POST /v1/groups/{group}/offsets`: the status (204 when committed) and the body.
    pub async fn commit(&self, group: &str, body: &Value) -> (StatusCode, Value) {
        let response = self
            .post_json(&format!("/v1/groups/{group}/offsets"), body)
            .await;
        self.json(response).await
    }

    /// A commit with `Prefer: return=representation`: the status (200 when committed), the
    /// `Preference-Applied` header and the body.
    pub async fn commit_returning(
        &self,
        group: &str,
        body: &Value,
    ) -> (StatusCode, Option<String>, Value) {
        let response = self
            .http_client()
            .post(self.url(&format!("/v1/groups/{group}/offsets")))
            .header("prefer", "return=representation")
            .json(body)
            .send()
            .await
            .unwrap_or_else(|error| self.fail(&format!("commit: {error}")));
        let applied = response
            .headers()
            .get("preference-applied")
            .and_then(|value| value.to_str().ok())
            .map(String::from);
        let (status, body) = self.json(response).await;
        (status, applied, body)
    }

    /// `GET /v1/groups/{group}`; asserts 200.
    pub async fn describe_group(&self, group: &str) -> Value {
        let (status, body) = self
            .json(self.get(&format!("/v1/groups/{group}")).await)
            .await;
        if status != StatusCode::OK {
            self.fail(&format!("describe group {group}: {status}: {body}"));
        }
        body
    }

    /// The committed offset of one partition as `GET /v1/groups/{group}` shows it.
    pub async fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<u64> {
        let described = self.describe_group(group).await;
        described["offsets"]
            .as_array()
            .and_then(|offsets| {
                offsets
                    .iter()
                    .find(|offset| offset["topic"] == topic && offset["partition"] == partition)
            })
            .and_then(|offset| offset["committed"].as_u64())
    }
}
