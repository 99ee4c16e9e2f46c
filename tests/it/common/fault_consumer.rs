//! A consumer group member for tests that inject faults: it polls, "processes" (records) what it
//! got, commits what it processed, and polls again, going round the nodes whenever one fails to
//! answer (killed, paused, cut off), and joins again when its session is gone. Unlike the
//! `groups` helpers it never fails the test on a transport error or a 5xx: under faults those
//! are expected; what it saw is recorded in a [`ConsumerLog`] for the checker.
//!
//! It works with polls that answer a `cursor` and with polls that do not: when an answer has a
//! `cursor`, the next poll passes it (also the retry of a poll whose answer was lost); when it
//! has none, the next poll names none and starts where the group's member position is.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

/// How long one request may take: a paused node never answers.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The member's session: long enough to outlive one fault, short enough to come back.
const SESSION_TIMEOUT_MS: u64 = 10_000;

/// What the member saw.
#[derive(Debug, Default)]
pub struct ConsumerLog {
    /// Every message delivered, in delivery order: (partition, offset, value).
    pub delivered: Vec<(u32, u64, Value)>,
    /// Per partition, the highest offset a commit was confirmed (204) for.
    pub committed: BTreeMap<u32, u64>,
    /// Answers whose messages of one partition were not in ascending offset order.
    pub disorder: Vec<String>,
    pub joins: usize,
    pub polls: usize,
    /// Requests that failed (transport error, 5xx, timeout).
    pub failures: usize,
    /// Commits refused with a 409 (a rebalance came between poll and commit).
    pub refused_commits: usize,
}

/// One member of `group` reading `topic` through the nodes at `base_urls`.
pub struct FaultConsumer {
    client: reqwest::Client,
    base_urls: Vec<String>,
    next_node: usize,
    group: String,
    topic: String,
    member: Option<String>,
    cursor: Option<Value>,
    pub log: ConsumerLog,
}

/// How one request went.
enum Answer {
    Status(StatusCode, Value),
    /// No answer, or a 5xx: try another node.
    Failed,
}

impl FaultConsumer {
    pub fn new(base_urls: Vec<String>, group: &str, topic: &str) -> FaultConsumer {
        assert!(!base_urls.is_empty());
        FaultConsumer {
            client: herald_client::cli::http_client::builder()
                .no_proxy()
                .timeout(CALL_TIMEOUT)
                .build()
                .expect("build the HTTP client"),
            base_urls,
            next_node: 0,
            group: group.to_string(),
            topic: topic.to_string(),
            member: None,
            cursor: None,
            log: ConsumerLog::default(),
        }
    }

    /// POST `path` with `body` to the current node; moves to the next node when it fails.
    async fn post(&mut self, path: &str, body: &Value) -> Answer {
        let url = format!("{}{path}", self.base_urls[self.next_node]);
        let answer = match self.client.post(&url).json(body).send().await {
            Ok(response) => {
                let status = response.status();
                match response.text().await {
                    Ok(text) if !status.is_server_error() => {
                        Answer::Status(status, serde_json::from_str(&text).unwrap_or(Value::Null))
                    }
                    _ => Answer::Failed,
                }
            }
            Err(_) => Answer::Failed,
        };
        if matches!(answer, Answer::Failed) {
            self.log.failures += 1;
            self.next_node = (self.next_node + 1) % self.base_urls.len();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answer
    }

    /// One round: join when the member has no session, else poll, record and commit.
    pub async fn step(&mut self) {
        let Some(member) = self.member.clone() else {
            self.join().await;
            return;
        };
        let mut body = json!({"max_messages": 200, "max_wait_ms": 300});
        if let Some(cursor) = &self.cursor {
            body["cursor"] = cursor.clone();
        }
        let path = format!("/v1/groups/{}/members/{member}/poll", self.group);
        let answer = match self.post(&path, &body).await {
            Answer::Status(StatusCode::OK, answer) => answer,
            Answer::Status(StatusCode::NOT_FOUND, _) => return self.lose_session(),
            Answer::Status(status, answer) if status.is_client_error() => {
                // E.g. a cursor the group no longer accepts: start over from the positions.
                eprintln!("fault consumer: poll answered {status}: {answer}");
                self.cursor = None;
                return;
            }
            _ => return,
        };
        self.log.polls += 1;
        self.cursor = answer.get("cursor").filter(|c| !c.is_null()).cloned();
        let generation = answer["generation"].as_u64().unwrap_or_default();
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        // Process: record in order, and note where each partition got to.
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        for message in &messages {
            let partition = message["partition"].as_u64().unwrap_or(u64::MAX) as u32;
            let offset = message["offset"].as_u64().unwrap_or(u64::MAX);
            if let Some(&after) = next.get(&partition) {
                if offset < after {
                    self.log.disorder.push(format!(
                        "partition {partition}: offset {offset} after {} in one answer",
                        after - 1
                    ));
                }
            }
            next.insert(partition, offset + 1);
            self.log
                .delivered
                .push((partition, offset, message["value"].clone()));
        }
        if next.is_empty() {
            return;
        }
        let commit = json!({
            "member_id": member,
            "generation": generation,
            "offsets": next.iter().map(|(partition, offset)| {
                json!({"topic": self.topic, "partition": partition, "offset": offset})
            }).collect::<Vec<_>>(),
        });
        let path = format!("/v1/groups/{}/offsets", self.group);
        match self.post(&path, &commit).await {
            Answer::Status(StatusCode::NO_CONTENT | StatusCode::OK, _) => {
                for (partition, offset) in next {
                    let committed = self.log.committed.entry(partition).or_default();
                    *committed = (*committed).max(offset);
                }
            }
            Answer::Status(StatusCode::NOT_FOUND, _) => self.lose_session(),
            Answer::Status(StatusCode::CONFLICT, _) => self.log.refused_commits += 1,
            Answer::Status(status, answer) => {
                panic!("fault consumer: commit {commit} answered {status}: {answer}")
            }
            // Not committed, or committed without our knowing: the next commit covers it.
            Answer::Failed => {}
        }
    }

    async fn join(&mut self) {
        let body = json!({"topics": [self.topic], "session_timeout_ms": SESSION_TIMEOUT_MS});
        let path = format!("/v1/groups/{}/members", self.group);
        match self.post(&path, &body).await {
            Answer::Status(StatusCode::OK, answer) => {
                self.member = answer["member_id"].as_str().map(str::to_string);
                self.cursor = None;
                self.log.joins += 1;
            }
            Answer::Status(status, answer) => {
                panic!("fault consumer: join answered {status}: {answer}")
            }
            Answer::Failed => {}
        }
    }

    /// The session expired (e.g. every node it tried was down for longer): join again.
    fn lose_session(&mut self) {
        self.member = None;
        self.cursor = None;
    }
}
