//! Requests to a fixture's nodes, with a bearer token, spread over the nodes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{array, int, UNAVAILABLE_DEADLINE};
use crate::common::Server;

/// Requests through the fixture's nodes, taking turns, with a bearer token.
pub(super) struct Api<'a> {
    pub(super) nodes: &'a [Server],
    turn: std::sync::atomic::AtomicUsize,
}

impl<'a> Api<'a> {
    pub(super) fn new(nodes: &'a [Server]) -> Api<'a> {
        Api {
            nodes,
            turn: Default::default(),
        }
    }

    /// The next node in turn.
    pub(super) fn node(&self) -> &'a Server {
        let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.nodes[turn % self.nodes.len()]
    }

    /// Sends a request, tried again while it answers 503 (which did nothing); answers the
    /// status and the body as JSON (`null` when empty).
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let deadline = Instant::now() + UNAVAILABLE_DEADLINE;
        loop {
            let node = self.node();
            let mut request = node.http_client().request(method.clone(), node.url(path));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let response = request
                .send()
                .await
                .unwrap_or_else(|err| node.fail(&format!("{method} {path}: {err}")));
            let (status, answer) = node.json(response).await;
            if status == StatusCode::SERVICE_UNAVAILABLE && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            return (status, answer);
        }
    }

    pub(super) async fn get(&self, path: &str, token: &str) -> Value {
        self.expect(StatusCode::OK, Method::GET, path, token, None)
            .await
    }

    pub(super) async fn post(&self, path: &str, token: &str, body: &Value) -> Value {
        self.expect(StatusCode::OK, Method::POST, path, token, Some(body))
            .await
    }

    pub(super) async fn expect(
        &self,
        status: StatusCode,
        method: Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> Value {
        let (got, answer) = self
            .send(method.clone(), path, Some(token), body, &[])
            .await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        answer
    }

    /// Every message of a partition from its log start, paging on `next_offset` (compaction
    /// leaves pages without messages that still move on).
    pub(super) async fn read_partition(
        &self,
        token: &str,
        topic: &str,
        partition: u64,
    ) -> (Vec<Value>, Value) {
        let mut messages = Vec::new();
        let mut offset = "earliest".to_string();
        loop {
            let path = format!(
                "/v1/topics/{topic}/partitions/{partition}/messages?offset={offset}&max_messages=1000"
            );
            let page = self.get(&path, token).await;
            let next = int(&page["next_offset"]);
            let done = next >= int(&page["high_watermark"]) || offset == next.to_string();
            messages.extend(array(&page["messages"]).iter().cloned());
            offset = next.to_string();
            if done {
                return (messages, page);
            }
        }
    }
}

/// Tokens of the fixture's clients, by client id.
pub(super) type Tokens = BTreeMap<String, String>;
