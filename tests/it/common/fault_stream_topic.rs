//! A topic read as a push stream while nodes fail, resumed by its token: as server-sent
//! events (`GET /v1/topics/{topic}/events?from=earliest`, reconnecting with `Last-Event-ID` set
//! to the last event's id, as `EventSource` does) or over a WebSocket
//! (`{"op":"subscribe","topic","from"}`, resubscribing with `from` set to the last message's
//! `resume` token). A token holds every partition's next offset, so the stream promises each
//! message exactly once, in offset order per partition, across any number of reconnects to any
//! node: [`check`] holds it to that against the stored log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::cluster::Stored;
use super::fault_streams::{position, Read, SseConn, Transport, WsConn};

const CREDIT: u64 = 1000;
const MAX_CONNECTIONS: usize = 10_000;

#[derive(Debug, Default)]
pub struct TopicStreamLog {
    /// Every message delivered, in order: (partition, offset, value).
    pub delivered: Vec<(u32, u64, Value)>,
    pub connections: usize,
    pub failed_connects: usize,
    /// Connections opened with a resume token.
    pub resumed: usize,
    pub ended: BTreeMap<String, usize>,
    progress: Progress,
}

/// Per partition, the highest offset delivered + 1: for waiting until a stream has read to
/// the end.
pub type Progress = Arc<Mutex<BTreeMap<u32, u64>>>;

/// Starts a reader of `topic` over `transport`, first on node `urls[first]`, until `stop`.
pub fn spawn(
    transport: Transport,
    urls: Vec<String>,
    first: usize,
    topic: &str,
    stop: Arc<AtomicBool>,
) -> (tokio::task::JoinHandle<TopicStreamLog>, Progress) {
    let topic = topic.to_string();
    let progress = Progress::default();
    let shared = progress.clone();
    let handle = tokio::spawn(async move {
        let mut log = TopicStreamLog {
            progress: shared,
            ..TopicStreamLog::default()
        };
        let mut token: Option<String> = None;
        for node in first..first + MAX_CONNECTIONS {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let base = &urls[node % urls.len()];
            let resumed = token.is_some();
            let ended = match transport {
                Transport::Sse => events(base, &topic, &mut token, &mut log, &stop).await,
                Transport::WebSocket => websocket(base, &topic, &mut token, &mut log, &stop).await,
            };
            match ended {
                Ok(why) => {
                    log.resumed += usize::from(resumed);
                    *log.ended.entry(kind(&why)).or_default() += 1;
                }
                Err(_) => {
                    log.failed_connects += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        log
    });
    (handle, progress)
}

fn kind(why: &str) -> String {
    why.split(':')
        .next()
        .unwrap_or(why)
        .chars()
        .take(40)
        .collect()
}

fn record(log: &mut TopicStreamLog, message: &Value) {
    if let Some((partition, offset)) = position(message) {
        log.delivered
            .push((partition, offset, message["value"].clone()));
        if let Ok(mut progress) = log.progress.lock() {
            let seen = progress.entry(partition).or_default();
            *seen = (*seen).max(offset + 1);
        }
    }
}

/// One event stream: `Err` when it never opened, else why it ended.
async fn events(
    base: &str,
    topic: &str,
    token: &mut Option<String>,
    log: &mut TopicStreamLog,
    stop: &AtomicBool,
) -> Result<String, String> {
    let url = format!("{base}/v1/topics/{topic}/events?from=earliest");
    let mut stream = SseConn::open(&url, token.as_deref()).await?;
    log.connections += 1;
    while !stop.load(Ordering::SeqCst) {
        match stream.next().await {
            Read::Item(event) if event.event == "message" => {
                let message: Value = serde_json::from_str(&event.data).unwrap_or_default();
                record(log, &message);
                if event.id.is_some() {
                    *token = event.id;
                }
            }
            Read::Item(event) => return Ok(format!("event {}", event.event)),
            Read::Quiet => {}
            Read::Ended(why) => return Ok(why),
        }
    }
    Ok("stopped".into())
}

/// One WebSocket subscription: `Err` when it never subscribed, else why it ended.
async fn websocket(
    base: &str,
    topic: &str,
    token: &mut Option<String>,
    log: &mut TopicStreamLog,
    stop: &AtomicBool,
) -> Result<String, String> {
    let mut socket = WsConn::connect(base).await?;
    let from = token.clone().unwrap_or_else(|| "earliest".into());
    let subscribe =
        json!({"op": "subscribe", "id": "t", "topic": topic, "from": from, "credit": CREDIT});
    let answer = socket.request(&subscribe).await?;
    if answer["op"] != "ok" {
        return Err(format!("subscribe answered {answer}"));
    }
    log.connections += 1;
    while !stop.load(Ordering::SeqCst) {
        let frame = match socket.next().await {
            Read::Item(frame) => frame,
            Read::Quiet => continue,
            Read::Ended(why) => return Ok(why),
        };
        if frame["op"] != "messages" {
            return Ok(format!("frame {}", frame["op"]));
        }
        let messages = frame["messages"].as_array().cloned().unwrap_or_default();
        for message in &messages {
            record(log, message);
            if let Some(resume) = message["resume"].as_str() {
                *token = Some(resume.to_string());
            }
        }
        let credit = json!({"op": "credit", "id": "t", "messages": messages.len()});
        socket.send(&credit).await?;
    }
    Ok("stopped".into())
}

/// Where the stream's deliveries differ from the stored log: per partition, the delivered
/// offsets must be exactly the stored ones, in order, once each, with the stored values.
/// Answers one line per partition that differs (empty when exact).
pub fn check(log: &TopicStreamLog, stored: &BTreeMap<u32, Vec<Stored>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (partition, messages) in stored {
        let delivered: Vec<(u64, &Value)> = log
            .delivered
            .iter()
            .filter(|(p, _, _)| p == partition)
            .map(|(_, offset, value)| (*offset, value))
            .collect();
        let expected: Vec<(u64, &Value)> = messages.iter().map(|m| (m.offset, &m.value)).collect();
        if delivered != expected {
            let at = delivered
                .iter()
                .zip(&expected)
                .position(|(d, e)| d != e)
                .unwrap_or(delivered.len().min(expected.len()));
            problems.push(format!(
                "partition {partition}: {} delivered, {} stored; first difference at #{at}: \
                 delivered {:?}, stored {:?}",
                delivered.len(),
                expected.len(),
                delivered.get(at).map(|(o, _)| o),
                expected.get(at).map(|(o, _)| o),
            ));
        }
    }
    let partitions: Vec<u32> = stored.keys().copied().collect();
    let strays = log
        .delivered
        .iter()
        .filter(|(p, _, _)| !partitions.contains(p))
        .count();
    if strays > 0 {
        problems.push(format!("{strays} messages of partitions not stored"));
    }
    problems
}
