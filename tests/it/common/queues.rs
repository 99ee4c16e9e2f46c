//! Queue subscriptions through one node: create topics and subscriptions, pull, post an action
//! (`ack`, `nack`, `extend`, `seek`), describe; failures end the test with the node's log.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::Server;

/// Creates each `(topic, partitions)` and waits for its partition leaders.
pub async fn topics(server: &Server, names: &[(&str, u32)]) {
    for (name, partitions) in names {
        server.create_topic(name, *partitions).await;
        server.wait_for_leaders(name).await;
    }
}

/// `PUT /v1/subscriptions/{name}`, expected to create it (201); answers the subscription.
pub async fn subscribe(server: &Server, name: &str, body: Value) -> Value {
    let response = server
        .http_client()
        .put(server.url(&format!("/v1/subscriptions/{name}")))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|err| server.fail(&format!("PUT subscription {name}: {err}")));
    let (status, answer) = server.json(response).await;
    if status != StatusCode::CREATED {
        server.fail(&format!("PUT subscription {name}: {status}: {answer}"));
    }
    answer
}

/// `POST /v1/subscriptions/{name}/{action}`: the status and the body, whatever they are.
pub async fn post(server: &Server, name: &str, action: &str, body: Value) -> (StatusCode, Value) {
    let path = format!("/v1/subscriptions/{name}/{action}");
    server.json(server.post_json(&path, &body).await).await
}

/// Like [`post`], expecting 200.
pub async fn post_ok(server: &Server, name: &str, action: &str, body: Value) -> Value {
    let (status, answer) = post(server, name, action, body).await;
    if status != StatusCode::OK {
        server.fail(&format!("{action} {name}: {status}: {answer}"));
    }
    answer
}

/// One pull; answers its messages (each with `ack_id`, `delivery_attempt`, `message`).
pub async fn pull(server: &Server, name: &str, max: u32, wait_ms: u64) -> Vec<Value> {
    let body = json!({"max_messages": max, "max_wait_ms": wait_ms});
    let answer = post_ok(server, name, "pull", body).await;
    answer["messages"].as_array().expect("messages").clone()
}

/// `GET /v1/subscriptions/{name}`: settings and counts.
pub async fn describe(server: &Server, name: &str) -> Value {
    let path = format!("/v1/subscriptions/{name}");
    let (status, answer) = server.json(server.get(&path).await).await;
    if status != StatusCode::OK {
        server.fail(&format!("GET subscription {name}: {status}: {answer}"));
    }
    answer
}

/// The ack ids of pulled messages, in order.
pub fn ack_ids(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["ack_id"].as_str().expect("an ack id").to_string())
        .collect()
}
