//! The steps consumer-group tests share: a topic with leaders, messages `{"id": i}` spread over
//! its partitions, polls that must succeed, polling and committing until enough came, and the
//! committed offsets a group shows. Every group test consumes ids so it can tell what was lost
//! or delivered twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{Polled, Server};

/// How long [`consume`] waits for every message it wants.
pub const CONSUME_DEADLINE: Duration = Duration::from_secs(60);

/// Creates `topic` with `partitions` and waits until each has a leader.
pub async fn topic_with(server: &Server, topic: &str, partitions: u32) {
    server.create_topic(topic, partitions).await;
    server.wait_for_leaders(topic).await;
}

/// Produces `{"id": i}` for every id, message i to partition `i % partitions`.
pub async fn produce_ids(server: &Server, topic: &str, partitions: u32, ids: std::ops::Range<u64>) {
    let messages: Vec<Value> = ids
        .map(|id| json!({"partition": id % u64::from(partitions), "value": {"id": id}}))
        .collect();
    server
        .produce_ok(topic, &json!({ "messages": messages }))
        .await;
}

/// The id of a message [`produce_ids`] produced, from its value's JSON text.
pub fn id_of(value: &str) -> u64 {
    let parsed: Value = serde_json::from_str(value).expect("a JSON value");
    parsed["id"].as_u64().expect("an id")
}

/// A join body for the `orders` topic with a session timeout.
pub fn join_body(session_ms: u64) -> Value {
    json!({"topics": ["orders"], "session_timeout_ms": session_ms})
}

/// A poll that must succeed; fails the test with the answer otherwise.
pub async fn poll_ok(server: &Server, group: &str, member: &str, body: Value) -> Polled {
    server
        .poll_group(group, member, &body)
        .await
        .unwrap_or_else(|(status, answer)| server.fail(&format!("poll: {status}: {answer}")))
}

/// Polls (continuing from each answer's cursor, and committing after each poll) until `want`
/// messages came or [`CONSUME_DEADLINE`] passed; answers the ids in delivery order.
pub async fn consume(server: &Server, group: &str, member: &str, want: usize) -> Vec<u64> {
    let mut ids = Vec::new();
    let deadline = Instant::now() + CONSUME_DEADLINE;
    let mut cursor = Value::Null;
    while ids.len() < want && Instant::now() < deadline {
        let polled = poll_ok(
            server,
            group,
            member,
            json!({"max_messages": 100, "max_wait_ms": 200, "cursor": cursor}),
        )
        .await;
        cursor = json!(polled.cursor);
        if polled.messages.is_empty() {
            continue;
        }
        ids.extend(polled.messages.iter().map(|message| id_of(&message.value)));
        let (status, answer) = server.commit(group, &polled.commit_body(member)).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "commit: {answer}");
    }
    ids
}

/// Committed offsets per partition, as `GET /v1/groups/{group}` shows them.
pub async fn committed_offsets(server: &Server, group: &str) -> BTreeMap<u64, u64> {
    let described = server.describe_group(group).await;
    described["offsets"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|offset| Some((offset["partition"].as_u64()?, offset["committed"].as_u64()?)))
        .collect()
}

/// A commit body for the `orders` topic: the next offset to read per partition.
pub fn commit_body(member: &str, generation: u64, next: &BTreeMap<u32, u64>) -> Value {
    let offsets: Vec<Value> = next
        .iter()
        .map(|(partition, offset)| json!({"topic": "orders", "partition": partition, "offset": offset}))
        .collect();
    json!({"member_id": member, "generation": generation, "offsets": offsets})
}
