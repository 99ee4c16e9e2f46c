//! A consumer group member read as a push stream while nodes fail: over a WebSocket
//! (`{"op":"subscribe","group","topics"}`, committed with `commit` frames, credit granted back
//! as messages are processed) or as server-sent events (`GET /v1/groups/{group}/events`,
//! committed with `POST /v1/groups/{group}/offsets` through the stream's node, naming the
//! last assignment's member and generation). It is the group's only client: it records every
//! message, and commits, a few times a second, the next offset after the last one it processed
//! in each partition it is assigned. When its connection ends it connects to the next node and
//! joins again; the new member starts at the group's committed offsets (the stale member of
//! the old connection holds its partitions until it leaves or its session runs out).
//!
//! Only this client commits, and only offsets it was delivered up to, so the group's committed
//! offset of a partition is never past the end of what the client has seen: a delivery past
//! that end (`offset > the highest delivered + 1`) skipped messages. [`GroupStreamLog::gaps`]
//! lists those.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::fault_streams::{call_client, position, Read, SseConn, Transport, WsConn};

/// The member's session: a dead connection's member leaves the group within it.
pub const SESSION_TIMEOUT_MS: u64 = 5_000;
/// The WebSocket subscription's credit, granted back as messages are processed.
const CREDIT: u64 = 500;
/// How often the client commits what it processed.
const COMMIT_EVERY: Duration = Duration::from_millis(200);
const MAX_CONNECTIONS: usize = 10_000;

#[derive(Debug, Default)]
pub struct GroupStreamLog {
    /// Every message delivered, in order: (partition, offset, value, connection).
    pub delivered: Vec<(u32, u64, Value, usize)>,
    /// Deliveries past the end of what the client had seen (see the module doc).
    pub gaps: Vec<String>,
    /// `assignment` frames or events received, and the distinct members they named.
    pub assignments: usize,
    pub members: BTreeSet<String>,
    pub connections: usize,
    pub failed_connects: usize,
    /// Commits confirmed, refused (a rebalance: stale generation, a partition moved), and
    /// without an answer.
    pub commits: usize,
    pub commits_refused: usize,
    pub commit_failures: usize,
    pub ended: BTreeMap<String, usize>,
}

struct Client {
    transport: Transport,
    urls: Vec<String>,
    group: String,
    topic: String,
    http: reqwest::Client,
    log: GroupStreamLog,
    /// Per partition, the highest offset delivered + 1.
    seen_up_to: BTreeMap<u32, u64>,
    /// Per partition, the highest offset a commit was confirmed for.
    committed: BTreeMap<u32, u64>,
    /// The current connection's member, generation and partitions.
    member: Option<(String, u64)>,
    assigned: BTreeSet<u32>,
}

/// Starts a member of `group` reading `topic` over `transport`, first on node `urls[first]`,
/// until `stop`.
pub fn spawn(
    transport: Transport,
    urls: Vec<String>,
    first: usize,
    group: &str,
    topic: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<GroupStreamLog> {
    let mut client = Client {
        transport,
        urls,
        group: group.to_string(),
        topic: topic.to_string(),
        http: call_client(),
        log: GroupStreamLog::default(),
        seen_up_to: BTreeMap::new(),
        committed: BTreeMap::new(),
        member: None,
        assigned: BTreeSet::new(),
    };
    tokio::spawn(async move {
        for node in first..first + MAX_CONNECTIONS {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let base = client.urls[node % client.urls.len()].clone();
            client.member = None;
            client.assigned.clear();
            let ended = match client.transport {
                Transport::WebSocket => client.websocket(&base, &stop).await,
                Transport::Sse => client.events(&base, &stop).await,
            };
            match ended {
                Ok(why) => *client.log.ended.entry(why).or_default() += 1,
                Err(_) => {
                    client.log.failed_connects += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        client.log
    })
}

fn kind(why: &str) -> String {
    why.split(':')
        .next()
        .unwrap_or(why)
        .chars()
        .take(40)
        .collect()
}

impl Client {
    fn assignment(&mut self, assignment: &Value) {
        self.log.assignments += 1;
        let member = assignment["member_id"].as_str().unwrap_or_default();
        self.log.members.insert(member.to_string());
        self.member = Some((
            member.to_string(),
            assignment["generation"].as_u64().unwrap_or_default(),
        ));
        self.assigned = assignment["assignments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["partition"].as_u64())
            .map(|p| p as u32)
            .collect();
    }

    fn record(&mut self, message: &Value) {
        let Some((partition, offset)) = position(message) else {
            self.log
                .gaps
                .push(format!("a message without a position: {message}"));
            return;
        };
        let seen = self.seen_up_to.entry(partition).or_default();
        if offset > *seen {
            self.log.gaps.push(format!(
                "partition {partition}: offset {offset} delivered, the client had seen up to {seen}"
            ));
        }
        *seen = (*seen).max(offset + 1);
        let connection = self.log.connections - 1;
        self.log
            .delivered
            .push((partition, offset, message["value"].clone(), connection));
    }

    /// What to commit now: every assigned partition processed past its confirmed commit.
    fn due(&self) -> BTreeMap<u32, u64> {
        self.assigned
            .iter()
            .filter_map(|p| {
                let seen = self.seen_up_to.get(p).copied()?;
                (seen > self.committed.get(p).copied().unwrap_or(0)).then_some((*p, seen))
            })
            .collect()
    }

    fn confirmed(&mut self, offsets: &BTreeMap<u32, u64>) {
        self.log.commits += 1;
        for (partition, offset) in offsets {
            let committed = self.committed.entry(*partition).or_default();
            *committed = (*committed).max(*offset);
        }
    }

    fn offsets_json(&self, offsets: &BTreeMap<u32, u64>) -> Vec<Value> {
        offsets
            .iter()
            .map(|(p, o)| json!({"topic": self.topic, "partition": p, "offset": o}))
            .collect()
    }

    /// One WebSocket connection: `Err` when it never subscribed, else why it ended.
    async fn websocket(&mut self, base: &str, stop: &AtomicBool) -> Result<String, String> {
        let mut socket = WsConn::connect(base).await?;
        let subscribe = json!({"op": "subscribe", "id": "g", "group": self.group,
                               "topics": [self.topic], "session_timeout_ms": SESSION_TIMEOUT_MS,
                               "auto_offset_reset": "earliest", "credit": CREDIT});
        let answer = socket.request(&subscribe).await?;
        if answer["op"] != "ok" {
            return Err(format!("subscribe answered {answer}"));
        }
        self.log.connections += 1;
        // One commit at a time: its answer is the next `ok` or `error` frame; an error frame
        // with no commit in flight is the subscription's end.
        let mut in_flight: Option<BTreeMap<u32, u64>> = None;
        let mut last_commit = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            match socket.next().await {
                Read::Item(frame) => match frame["op"].as_str() {
                    Some("assignment") => self.assignment(&frame),
                    Some("messages") => {
                        let messages = frame["messages"].as_array().cloned().unwrap_or_default();
                        for message in &messages {
                            self.record(message);
                        }
                        let credit = json!({"op": "credit", "id": "g",
                                            "messages": messages.len()});
                        if let Err(why) = socket.send(&credit).await {
                            return Ok(kind(&why));
                        }
                    }
                    Some("ok") if in_flight.is_some() => {
                        let offsets = in_flight.take().unwrap_or_default();
                        self.confirmed(&offsets);
                    }
                    Some("error") if in_flight.is_some() => {
                        in_flight = None;
                        self.log.commits_refused += 1;
                    }
                    _ => return Ok(kind(&format!("frame {}", frame["op"]))),
                },
                Read::Quiet => {}
                Read::Ended(why) => {
                    if in_flight.is_some() {
                        self.log.commit_failures += 1;
                    }
                    return Ok(kind(&why));
                }
            }
            if in_flight.is_none() && last_commit.elapsed() >= COMMIT_EVERY {
                last_commit = Instant::now();
                let due = self.due();
                if !due.is_empty() {
                    let commit = json!({"op": "commit", "id": "g",
                                        "offsets": self.offsets_json(&due)});
                    if let Err(why) = socket.send(&commit).await {
                        self.log.commit_failures += 1;
                        return Ok(kind(&why));
                    }
                    in_flight = Some(due);
                }
            }
        }
        Ok("stopped".into())
    }

    /// One event stream: `Err` when it never opened, else why it ended.
    async fn events(&mut self, base: &str, stop: &AtomicBool) -> Result<String, String> {
        let url = format!(
            "{base}/v1/groups/{}/events?topics={}&session_timeout_ms={SESSION_TIMEOUT_MS}\
             &auto_offset_reset=earliest",
            self.group, self.topic
        );
        // `Last-Event-ID` is not used by group streams (a member starts at the committed
        // offsets), so the client sends none.
        let mut stream = SseConn::open(&url, None).await?;
        self.log.connections += 1;
        let mut last_commit = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            match stream.next().await {
                Read::Item(event) => {
                    let data: Value = serde_json::from_str(&event.data).unwrap_or_default();
                    match event.event.as_str() {
                        "assignment" => self.assignment(&data),
                        "message" => self.record(&data),
                        other => return Ok(kind(&format!("event {other}"))),
                    }
                }
                Read::Quiet => {}
                Read::Ended(why) => return Ok(kind(&why)),
            }
            if last_commit.elapsed() >= COMMIT_EVERY {
                last_commit = Instant::now();
                self.commit_over_rest(base).await;
            }
        }
        Ok("stopped".into())
    }

    async fn commit_over_rest(&mut self, base: &str) {
        let (Some((member, generation)), due) = (self.member.clone(), self.due()) else {
            return;
        };
        if due.is_empty() {
            return;
        }
        let body = json!({"member_id": member, "generation": generation,
                          "offsets": self.offsets_json(&due)});
        let url = format!("{base}/v1/groups/{}/offsets", self.group);
        match self.http.post(&url).json(&body).send().await {
            Ok(response) if response.status().is_success() => self.confirmed(&due),
            Ok(response) if response.status().is_client_error() => {
                self.log.commits_refused += 1;
                if response.status() != StatusCode::CONFLICT
                    && response.status() != StatusCode::NOT_FOUND
                {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    eprintln!(
                        "group stream {}: commit {body}: {status}: {text}",
                        self.group
                    );
                }
            }
            _ => self.log.commit_failures += 1,
        }
    }
}
