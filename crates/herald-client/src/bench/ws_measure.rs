//! The four measurements of `herald bench ws`: produce-to-delivery latency at a rate, publish
//! throughput over WebSocket against HTTP, idle subscribers' memory and CPU, and fan-out of one
//! partition to many subscribers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::pacer::Pacer;
use super::ws_client::{self, delivered, next_frame, Socket};
use crate::cli::client::{Acks, Api};

/// How long a subscriber waits for the next frame before the run counts the rest as lost.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Sockets opened at once when setting up many subscribers.
const CONNECT_CONCURRENCY: usize = 200;

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as u64)
        .unwrap_or(0)
}

/// Latencies from the produce slot to delivery, in microseconds, and what was lost.
pub struct LatencyFigures {
    pub histogram: Histogram<u64>,
    pub received: u64,
    pub produce_errors: u64,
    pub seconds: f64,
}

/// Produces `messages` single-message requests (acks=all) through `producer` at `rate`/s from
/// `producers` connections, each carrying its scheduled send time; one subscriber on `server`
/// measures when each arrives. Latency counts from the schedule, so a stalled node's queueing
/// is in it.
pub async fn latency(
    producer: &Api,
    subscriber_url: &str,
    topic: &str,
    rate: f64,
    messages: u64,
    producers: usize,
    pad: usize,
) -> anyhow::Result<LatencyFigures> {
    let mut socket = ws_client::subscriber(subscriber_url, topic, None, "latest").await?;
    let pacer = Arc::new(Pacer::new(rate).ok_or_else(|| anyhow::anyhow!("--rate must be > 0"))?);
    let base_us = unix_micros();
    let base = Instant::now();
    let claimed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let padding = "x".repeat(pad);
    let mut producing = JoinSet::new();
    for _ in 0..producers.max(1) {
        let (api, pacer, claimed, errors) = (
            producer.clone(),
            pacer.clone(),
            claimed.clone(),
            errors.clone(),
        );
        let (url, padding) = (api.produce_url(topic, Acks::All), padding.clone());
        producing.spawn(async move {
            while claimed.fetch_add(1, Ordering::Relaxed) < messages {
                let slot = pacer.wait().await;
                let sent_us = base_us + slot.saturating_duration_since(base).as_micros() as u64;
                let body = json!({"messages": [{"value": {"t": sent_us, "pad": padding}}]});
                let request = api.http().post(url.clone()).json(&body);
                match api.authorized(request).await.send().await {
                    Ok(response) if response.status().is_success() => {
                        let _ = response.bytes().await;
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    let started = Instant::now();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let mut received = 0u64;
    let expected = messages;
    while received + errors.load(Ordering::Relaxed) < expected {
        let Ok(frame) = next_frame(&mut socket, DELIVERY_TIMEOUT).await else {
            break;
        };
        let now_us = unix_micros();
        for message in delivered(&frame) {
            if let Some(sent_us) = message["value"]["t"].as_u64() {
                histogram.saturating_record(now_us.saturating_sub(sent_us).max(1));
                received += 1;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    while producing.join_next().await.is_some() {}
    Ok(LatencyFigures {
        histogram,
        received,
        produce_errors: errors.load(Ordering::Relaxed),
        seconds,
    })
}

/// Messages per second of `frames` batches sent by `connections` senders, each one batch at a
/// time; and how many batches failed.
pub struct Throughput {
    pub messages_per_sec: f64,
    pub failed_batches: u64,
}

/// Publishes `frames` batches of `batch` messages of `size` bytes over `connections` sockets,
/// each waiting for its `published` answer before the next.
pub async fn publish_ws(
    url: &str,
    topic: &str,
    frames: u64,
    batch: usize,
    size: usize,
    connections: usize,
) -> anyhow::Result<Throughput> {
    let messages: Vec<Value> = (0..batch)
        .map(|_| json!({"value": "x".repeat(size)}))
        .collect();
    let frame = Arc::new(
        json!({"op": "publish", "id": "p", "topic": topic, "messages": messages}).to_string(),
    );
    let mut sockets = Vec::new();
    for _ in 0..connections.max(1) {
        sockets.push(ws_client::connect(url).await?);
    }
    let claimed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut senders = JoinSet::new();
    for mut socket in sockets {
        let (frame, claimed) = (frame.clone(), claimed.clone());
        senders.spawn(async move {
            let (mut sent, mut failed) = (0u64, 0u64);
            while claimed.fetch_add(1, Ordering::Relaxed) < frames {
                match ws_client::publish(&mut socket, &frame).await {
                    Ok(true) => sent += 1,
                    _ => failed += 1,
                }
            }
            (sent, failed)
        });
    }
    throughput(senders, started, batch).await
}

/// Adds up the senders' (sent, failed) batch counts into messages per second since `started`.
async fn throughput(
    mut senders: JoinSet<(u64, u64)>,
    started: Instant,
    batch: usize,
) -> anyhow::Result<Throughput> {
    let (mut sent, mut failed) = (0, 0);
    while let Some(done) = senders.join_next().await {
        let (s, f) = done?;
        sent += s;
        failed += f;
    }
    Ok(Throughput {
        messages_per_sec: (sent * batch as u64) as f64 / started.elapsed().as_secs_f64(),
        failed_batches: failed,
    })
}

/// The same batches as [`publish_ws`] over HTTP (`POST /v1/topics/{topic}/messages`, acks=all).
pub async fn publish_http(
    api: &Api,
    topic: &str,
    frames: u64,
    batch: usize,
    size: usize,
    connections: usize,
) -> anyhow::Result<Throughput> {
    let messages: Vec<Value> = (0..batch)
        .map(|_| json!({"value": "x".repeat(size)}))
        .collect();
    let body = bytes::Bytes::from(json!({ "messages": messages }).to_string());
    let url = api.produce_url(topic, Acks::All);
    let claimed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut senders = JoinSet::new();
    for _ in 0..connections.max(1) {
        let (api, body, url, claimed) = (api.clone(), body.clone(), url.clone(), claimed.clone());
        senders.spawn(async move {
            let (mut sent, mut failed) = (0u64, 0u64);
            while claimed.fetch_add(1, Ordering::Relaxed) < frames {
                let request = api
                    .http()
                    .post(url.clone())
                    .header("content-type", "application/json")
                    .body(body.clone());
                match api.authorized(request).await.send().await {
                    Ok(response) if response.status().is_success() => {
                        let _ = response.bytes().await;
                        sent += 1;
                    }
                    _ => failed += 1,
                }
            }
            (sent, failed)
        });
    }
    throughput(senders, started, batch).await
}

/// Opens `count` subscribed sockets, `CONNECT_CONCURRENCY` at a time.
pub async fn open_subscribers(
    url: &str,
    topic: &str,
    partition: Option<u32>,
    count: usize,
) -> anyhow::Result<Vec<Socket>> {
    let url = url.to_string();
    let topic = topic.to_string();
    let results: Vec<anyhow::Result<Socket>> = futures::stream::iter(0..count)
        .map(|_| {
            let (url, topic) = (url.clone(), topic.clone());
            async move { ws_client::subscriber(&url, &topic, partition, "latest").await }
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Keeps idle sockets read (so pings are answered) until the returned set is dropped.
pub fn keep_reading(sockets: Vec<Socket>) -> JoinSet<()> {
    let mut readers = JoinSet::new();
    for mut socket in sockets {
        readers.spawn(async move { while let Some(Ok(_)) = socket.next().await {} });
    }
    readers
}

/// CPU time (user + system) of process `pid` so far, from `/proc/PID/stat` (in clock ticks of
/// 1/100 s, Linux's fixed `USER_HZ`).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .map_err(|error| anyhow::anyhow!("reading {path}: {error}"))?;
    parse_cpu_seconds(&stat).ok_or_else(|| anyhow::anyhow!("unreadable {path}"))
}

fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Delivered messages per second of a fan-out, and how many deliveries were missing.
pub struct FanOut {
    pub delivered: u64,
    pub missing: u64,
    pub seconds: f64,
}

/// `subscribers` sockets on partition 0 of `topic`; `messages` produced through `producer` in
/// batches of 100; the clock runs from the first produce until every subscriber has them all.
pub async fn fan_out(
    producer: &Api,
    url: &str,
    topic: &str,
    subscribers: usize,
    messages: u64,
    size: usize,
) -> anyhow::Result<FanOut> {
    let sockets = open_subscribers(url, topic, Some(0), subscribers).await?;
    let mut readers = JoinSet::new();
    for mut socket in sockets {
        readers.spawn(async move {
            let mut got = 0u64;
            while got < messages {
                match next_frame(&mut socket, DELIVERY_TIMEOUT).await {
                    Ok(frame) => got += delivered(&frame).len() as u64,
                    Err(_) => break,
                }
            }
            (got, Instant::now())
        });
    }
    let started = Instant::now();
    let value = "x".repeat(size);
    let mut produced = 0u64;
    while produced < messages {
        let count = (messages - produced).min(100);
        let batch: Vec<Value> = (0..count)
            .map(|_| json!({"value": value, "partition": 0}))
            .collect();
        producer
            .produce(topic, Acks::All, &json!({ "messages": batch }))
            .await?;
        produced += count;
    }
    let (mut delivered_total, mut last) = (0u64, started);
    while let Some(done) = readers.join_next().await {
        let (got, at) = done?;
        delivered_total += got.min(messages);
        last = last.max(at);
    }
    Ok(FanOut {
        delivered: delivered_total,
        missing: subscribers as u64 * messages - delivered_total,
        seconds: last.duration_since(started).as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_from_the_stat_line() {
        let stat = "42 (her ald) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 1 1";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert!(cpu_seconds(std::process::id()).is_ok());
        assert_eq!(
            ws_client::ws_url("http://127.0.0.1:8080").unwrap(),
            "ws://127.0.0.1:8080/v1/ws"
        );
    }
}
