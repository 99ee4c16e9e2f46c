//! A queue subscription read as a push stream while nodes fail: over a WebSocket
//! (`{"op":"subscribe","subscription"}`, acked with `ack` frames) or as server-sent events
//! (`GET /v1/subscriptions/{sub}/events`, acked with `POST /v1/subscriptions/{sub}/ack` through
//! the stream's node). It acks every lease at once and records when each arrived and when its
//! ack was sent and confirmed. When its connection ends (the node killed, paused, or the
//! stream ended) it connects to the next node and leases on: the leases the old stream held
//! come back when that node nacks them or their deadline passes.
//!
//! The client is the subscription's only consumer, and reads one connection at a time, each
//! opened after the last was abandoned. So a delivery that arrives after an ack of the same
//! message was confirmed was leased after the ack (a frame is delivered in the order it was
//! leased on its connection, and a later connection leases later): [`check`] counts those,
//! and messages confirmed acked twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::fault_streams::{call_client, position, Read, SseConn, Transport, WsConn};

/// The most leases the stream holds un-acked (WebSocket credit, SSE `max_in_flight`).
const WINDOW: u64 = 100;
/// Acks of an event stream are sent in batches of this many, or this long after the first.
const ACK_BATCH: usize = 50;
const ACK_DELAY: Duration = Duration::from_millis(100);
/// Connections at most (a bound on the loop; a run makes a few dozen).
const MAX_CONNECTIONS: usize = 10_000;

/// One lease delivered to the client.
#[derive(Debug, Clone)]
pub struct Lease {
    pub position: (u32, u64),
    pub value: Value,
    /// Which connection (0, 1, ...) delivered it.
    #[expect(dead_code, reason = "shown in failure messages (Debug)")]
    pub connection: usize,
    pub received: Instant,
    pub ack_sent: Option<Instant>,
    pub ack_confirmed: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct QueueStreamLog {
    pub leases: Vec<Lease>,
    /// Connections that delivered a stream (reconnects are one fewer).
    pub connections: usize,
    /// Attempts to connect that failed (node down, 503, no answer).
    pub failed_connects: usize,
    /// Acks without an answer, or answered with an error (outcome unknown).
    pub ack_failures: usize,
    /// Ack ids answered `expired` (the lease had moved on: it comes again).
    pub expired: usize,
    /// Why each connection ended, counted.
    pub ended: BTreeMap<String, usize>,
}

/// What the checker found in one queue stream's log.
#[derive(Debug, Default)]
pub struct QueueStreamVerdict {
    pub deliveries: usize,
    pub redeliveries: usize,
    pub acked_twice: Vec<(u32, u64)>,
    pub delivered_after_ack: Vec<(u32, u64)>,
}

struct Client {
    transport: Transport,
    urls: Vec<String>,
    subscription: String,
    http: reqwest::Client,
    log: QueueStreamLog,
    /// Ack id -> index in `log.leases`.
    by_ack_id: HashMap<String, usize>,
}

/// Starts a client of `subscription` over `transport`, first on node `urls[first]`, until
/// `stop`.
pub fn spawn(
    transport: Transport,
    urls: Vec<String>,
    first: usize,
    subscription: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<QueueStreamLog> {
    let mut client = Client {
        transport,
        urls,
        subscription: subscription.to_string(),
        http: call_client(),
        log: QueueStreamLog::default(),
        by_ack_id: HashMap::new(),
    };
    tokio::spawn(async move {
        let mut last_event_id = None;
        for node in first..first + MAX_CONNECTIONS {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let base = client.urls[node % client.urls.len()].clone();
            let ended = match client.transport {
                Transport::WebSocket => client.websocket(&base, &stop).await,
                Transport::Sse => client.events(&base, &mut last_event_id, &stop).await,
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

/// A short name for why a connection ended, for the counts.
fn kind(why: &str) -> String {
    why.split(':')
        .next()
        .unwrap_or(why)
        .chars()
        .take(40)
        .collect()
}

impl Client {
    fn record(&mut self, message: &Value) -> Option<String> {
        let (position, ack_id) = (position(message)?, message["ack_id"].as_str()?);
        self.by_ack_id
            .insert(ack_id.to_string(), self.log.leases.len());
        self.log.leases.push(Lease {
            position,
            value: message["value"].clone(),
            connection: self.log.connections - 1,
            received: Instant::now(),
            ack_sent: None,
            ack_confirmed: None,
        });
        Some(ack_id.to_string())
    }

    fn sent(&mut self, ack_ids: &[String]) {
        let now = Instant::now();
        for ack_id in ack_ids {
            if let Some(&index) = self.by_ack_id.get(ack_id) {
                self.log.leases[index].ack_sent = Some(now);
            }
        }
    }

    fn answered(&mut self, answer: &Value) {
        let now = Instant::now();
        for ack_id in answer["acked"].as_array().into_iter().flatten() {
            let index = ack_id.as_str().and_then(|id| self.by_ack_id.get(id));
            if let Some(&index) = index {
                self.log.leases[index].ack_confirmed = Some(now);
            }
        }
        self.log.expired += answer["expired"].as_array().map_or(0, Vec::len);
    }

    /// One WebSocket connection: `Err` when it never subscribed, else why it ended.
    async fn websocket(&mut self, base: &str, stop: &AtomicBool) -> Result<String, String> {
        let mut socket = WsConn::connect(base).await?;
        let subscribe = json!({"op": "subscribe", "id": "q", "subscription": self.subscription,
                               "credit": WINDOW});
        let answer = socket.request(&subscribe).await?;
        if answer["op"] != "ok" {
            return Err(format!("subscribe answered {answer}"));
        }
        self.log.connections += 1;
        // Each ack frame gets one answer (`acked` or an `error`); an error frame beyond them
        // is the subscription's end.
        let mut acks_in_flight = 0usize;
        while !stop.load(Ordering::SeqCst) {
            let frame = match socket.next().await {
                Read::Item(frame) => frame,
                Read::Quiet => continue,
                Read::Ended(why) => return Ok(kind(&why)),
            };
            match frame["op"].as_str() {
                Some("messages") => {
                    let messages = frame["messages"].as_array().cloned().unwrap_or_default();
                    let ack_ids: Vec<String> =
                        messages.iter().filter_map(|m| self.record(m)).collect();
                    self.sent(&ack_ids);
                    let ack = json!({"op": "ack", "id": "q", "ack_ids": ack_ids});
                    if let Err(why) = socket.send(&ack).await {
                        self.log.ack_failures += 1;
                        return Ok(kind(&why));
                    }
                    acks_in_flight += 1;
                }
                Some("acked") => {
                    acks_in_flight = acks_in_flight.saturating_sub(1);
                    self.answered(&frame);
                }
                Some("error") if acks_in_flight > 0 => {
                    acks_in_flight -= 1;
                    self.log.ack_failures += 1;
                }
                _ => return Ok(kind(&format!("frame {}", frame["op"]))),
            }
        }
        Ok("stopped".into())
    }

    /// One event stream: `Err` when it never opened, else why it ended.
    async fn events(
        &mut self,
        base: &str,
        last_event_id: &mut Option<String>,
        stop: &AtomicBool,
    ) -> Result<String, String> {
        let url = format!(
            "{base}/v1/subscriptions/{}/events?max_in_flight={WINDOW}",
            self.subscription
        );
        // Queue streams do not resume by id (a lease's id is its ack id), but a browser's
        // `EventSource` sends the last one anyway: the node must take it.
        let mut stream = SseConn::open(&url, last_event_id.as_deref()).await?;
        self.log.connections += 1;
        let mut pending: Vec<String> = Vec::new();
        let mut first_pending = Instant::now();
        let ended = loop {
            if stop.load(Ordering::SeqCst) {
                break "stopped".to_string();
            }
            match stream.next().await {
                Read::Item(event) if event.event == "message" => {
                    *last_event_id = event.id.clone();
                    let message: Value = serde_json::from_str(&event.data).unwrap_or_default();
                    if let Some(ack_id) = self.record(&message) {
                        if pending.is_empty() {
                            first_pending = Instant::now();
                        }
                        pending.push(ack_id);
                    }
                }
                Read::Item(event) => break kind(&format!("event {}", event.event)),
                Read::Quiet => {}
                Read::Ended(why) => break kind(&why),
            }
            if pending.len() >= ACK_BATCH
                || (!pending.is_empty() && first_pending.elapsed() >= ACK_DELAY)
            {
                let ack_ids = std::mem::take(&mut pending);
                self.ack_over_rest(base, ack_ids).await;
            }
        };
        if !pending.is_empty() {
            // What was processed is acked before the stream is dropped (its leases would come
            // again otherwise).
            self.ack_over_rest(base, pending).await;
        }
        Ok(ended)
    }

    async fn ack_over_rest(&mut self, base: &str, ack_ids: Vec<String>) {
        self.sent(&ack_ids);
        let url = format!("{base}/v1/subscriptions/{}/ack", self.subscription);
        let answer = match self
            .http
            .post(&url)
            .json(&json!({ "ack_ids": ack_ids }))
            .send()
            .await
        {
            Ok(response) if response.status() == StatusCode::OK => {
                response.json::<Value>().await.ok()
            }
            _ => None,
        };
        match answer {
            Some(answer) => self.answered(&answer),
            None => self.log.ack_failures += 1,
        }
    }
}

/// Checks one queue stream's log (see the module doc).
pub fn check(log: &QueueStreamLog) -> QueueStreamVerdict {
    let mut by_position: BTreeMap<(u32, u64), Vec<&Lease>> = BTreeMap::new();
    for lease in &log.leases {
        by_position.entry(lease.position).or_default().push(lease);
    }
    let mut verdict = QueueStreamVerdict::default();
    for (position, leases) in by_position {
        verdict.deliveries += leases.len();
        verdict.redeliveries += leases.len() - 1;
        let confirmed: Vec<Instant> = leases.iter().filter_map(|l| l.ack_confirmed).collect();
        if confirmed.len() > 1 {
            verdict.acked_twice.push(position);
        }
        if let Some(first) = confirmed.iter().min() {
            if leases.iter().any(|lease| lease.received > *first) {
                verdict.delivered_after_ack.push(position);
            }
        }
    }
    verdict
}
