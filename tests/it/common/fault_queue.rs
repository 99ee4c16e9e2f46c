//! Queue pullers for tests that inject faults: each pulls through the nodes in turn and acks
//! what it got at once, recording when each delivery arrived and when each ack was sent and
//! confirmed. Under faults, transport errors and 5xx are expected (the next node is tried); the
//! checker then proves from the records, conservatively (only what the timings make certain):
//!
//! - no message is confirmed acked twice;
//! - none is delivered by a pull sent after its ack was confirmed;
//! - none is held by two pullers at once: a lease is certainly held from its delivery until the
//!   earlier of its ack being sent and its deadline counted from the pull's sending (the server
//!   counts from later), and no second delivery may arrive inside that.
//!
//! Messages are named by offset (one partition).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// One delivery of one offset to one puller.
#[derive(Debug, Clone)]
pub struct Delivery {
    #[expect(
        dead_code,
        reason = "shown in failure messages (Debug): which puller held it"
    )]
    pub puller: usize,
    pub offset: u64,
    pub pull_sent: Instant,
    pub received: Instant,
    /// When the ack of this delivery was sent, and when it was confirmed (in `acked`).
    pub ack_sent: Option<Instant>,
    pub ack_confirmed: Option<Instant>,
}

#[derive(Debug, Default)]
pub struct QueueLog {
    pub deliveries: Vec<Delivery>,
    pub pulls: usize,
    pub failures: usize,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct QueueVerdict {
    pub deliveries: usize,
    /// Deliveries of an offset delivered before.
    pub redeliveries: usize,
    pub acked_twice: Vec<u64>,
    pub delivered_after_ack: Vec<u64>,
    pub double_holds: Vec<u64>,
}

/// Starts `pullers` pullers of `subscription` until `stop`; `ack_deadline` is the
/// subscription's.
pub fn spawn_pullers(
    pullers: usize,
    base_urls: Vec<String>,
    subscription: &str,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<QueueLog>> {
    (0..pullers)
        .map(|puller| {
            let (urls, stop) = (base_urls.clone(), stop.clone());
            let subscription = subscription.to_string();
            tokio::spawn(async move { pull_loop(puller, urls, &subscription, stop).await })
        })
        .collect()
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Option<Value> {
    let response = client.post(url).json(body).send().await.ok()?;
    if response.status() != StatusCode::OK {
        return None;
    }
    response.json().await.ok()
}

async fn pull_loop(
    puller: usize,
    urls: Vec<String>,
    subscription: &str,
    stop: Arc<AtomicBool>,
) -> QueueLog {
    let client = herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(CALL_TIMEOUT)
        .build()
        .expect("build the HTTP client");
    let mut log = QueueLog::default();
    let mut node = puller;
    while !stop.load(Ordering::SeqCst) {
        let base = &urls[node % urls.len()];
        let pull_sent = Instant::now();
        let Some(answer) = post(
            &client,
            &format!("{base}/v1/subscriptions/{subscription}/pull"),
            &json!({"max_messages": 50, "max_wait_ms": 300}),
        )
        .await
        else {
            log.failures += 1;
            node += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        log.pulls += 1;
        let received = Instant::now();
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        let first = log.deliveries.len();
        let mut ack_ids = Vec::new();
        for message in &messages {
            let (Some(offset), Some(ack_id)) = (
                message["message"]["offset"].as_u64(),
                message["ack_id"].as_str(),
            ) else {
                continue;
            };
            ack_ids.push(ack_id.to_string());
            log.deliveries.push(Delivery {
                puller,
                offset,
                pull_sent,
                received,
                ack_sent: None,
                ack_confirmed: None,
            });
        }
        // Ack through the next node, as a client that moved would.
        let acker = &urls[(node + 1) % urls.len()];
        let ack_sent = Instant::now();
        for delivery in &mut log.deliveries[first..] {
            delivery.ack_sent = Some(ack_sent);
        }
        let answer = post(
            &client,
            &format!("{acker}/v1/subscriptions/{subscription}/ack"),
            &json!({ "ack_ids": ack_ids }),
        )
        .await;
        let Some(answer) = answer else {
            // Outcome unknown: a lease not acked comes back after its deadline.
            log.failures += 1;
            node += 1;
            continue;
        };
        let confirmed_at = Instant::now();
        let confirmed: Vec<&str> = answer["acked"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (delivery, ack_id) in log.deliveries[first..].iter_mut().zip(&ack_ids) {
            if confirmed.contains(&ack_id.as_str()) {
                delivery.ack_confirmed = Some(confirmed_at);
            }
        }
    }
    log
}

/// Checks every puller's records together (see the module doc).
pub fn check(logs: &[QueueLog], ack_deadline: Duration) -> QueueVerdict {
    let mut by_offset: BTreeMap<u64, Vec<&Delivery>> = BTreeMap::new();
    for delivery in logs.iter().flat_map(|log| &log.deliveries) {
        by_offset.entry(delivery.offset).or_default().push(delivery);
    }
    let mut verdict = QueueVerdict::default();
    for (offset, mut deliveries) in by_offset {
        deliveries.sort_by_key(|delivery| delivery.received);
        verdict.deliveries += deliveries.len();
        verdict.redeliveries += deliveries.len() - 1;
        if deliveries
            .iter()
            .filter(|delivery| delivery.ack_confirmed.is_some())
            .count()
            > 1
        {
            verdict.acked_twice.push(offset);
        }
        let first_confirmed = deliveries
            .iter()
            .filter_map(|delivery| delivery.ack_confirmed)
            .min();
        if let Some(confirmed) = first_confirmed {
            if deliveries
                .iter()
                .any(|delivery| delivery.pull_sent > confirmed)
            {
                verdict.delivered_after_ack.push(offset);
            }
        }
        for pair in deliveries.windows(2) {
            let (held, next) = (pair[0], pair[1]);
            let expires = held.pull_sent + ack_deadline;
            let released = held.ack_sent.map_or(expires, |sent| sent.min(expires));
            if next.received < released && next.pull_sent >= held.received {
                verdict.double_holds.push(offset);
            }
        }
    }
    verdict
}
