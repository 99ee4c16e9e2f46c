//! The fault schedule's push streams (issue 29, item 9): a topic of their own (two partitions,
//! RF 3) with a producer, and six stream clients on it, one per kind of stream, spread over
//! the nodes, each resuming on another node whenever its connection ends:
//!
//! - a WebSocket queue subscription and a queue subscription as server-sent events (each on a
//!   subscription of its own, acking every lease: `common::fault_stream_queue`);
//! - a WebSocket consumer group subscription and a group member as server-sent events (each
//!   the only member of a group of its own, committing what it processed:
//!   `common::fault_stream_group`);
//! - the topic itself as server-sent events and over a WebSocket, resumed with the last
//!   event's id as `Last-Event-ID` and with the last message's `resume` token as `from`
//!   (`common::fault_stream_topic`).
//!
//! Its checker, once the faults are over and every stream drained: each queue stream was
//! delivered every stored message, confirmed no ack twice, was delivered nothing after its ack
//! was confirmed, and its subscription has nothing left (backlog and in flight 0); each group
//! stream was delivered every stored message (the same value as stored), skipped nothing past
//! what it had seen, and its group committed every partition's end; each topic stream was
//! delivered exactly the stored log: every message once, in offset order per partition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::stream_report::{GroupStreamReport, QueueStreamReport, StreamReport, TopicStreamReport};
use crate::common::cluster::Stored;
use crate::common::cluster::{create_replicated, messages_url, produce_once, Attempt, TestCluster};
use crate::common::fault_stream_group::{self, GroupStreamLog};
use crate::common::fault_stream_queue::{self, QueueStreamLog};
use crate::common::fault_stream_topic::{self, Progress, TopicStreamLog};
use crate::common::fault_streams::Transport;
use serde_json::{json, Value};

const TOPIC: &str = "fault-streams";
const PARTITIONS: u32 = 2;
const WS_QUEUE: &str = "streams-ws-queue";
const SSE_QUEUE: &str = "streams-sse-queue";
const WS_GROUP: &str = "streams-ws-group";
const SSE_GROUP: &str = "streams-sse-group";
/// A lease held by a stream on a paused node comes back after this.
const ACK_DEADLINE_MS: u64 = 5_000;
/// How long the streams get to settle everything once the faults and the producer stopped.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

pub struct StreamPhase {
    stop_producer: Arc<AtomicBool>,
    producer: tokio::task::JoinHandle<()>,
    produced: Arc<AtomicUsize>,
    stop_clients: Arc<AtomicBool>,
    queues: Vec<(&'static str, tokio::task::JoinHandle<QueueStreamLog>)>,
    groups: Vec<(&'static str, tokio::task::JoinHandle<GroupStreamLog>)>,
    topics: Vec<(
        &'static str,
        tokio::task::JoinHandle<TopicStreamLog>,
        Progress,
    )>,
}

fn spawn_producer(
    urls: Vec<String>,
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = herald_client::cli::http_client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("build the HTTP client");
        let (mut node, mut request) = (0, 0u64);
        while !stop.load(Ordering::SeqCst) {
            let messages: Vec<Value> = (0..10u32)
                .map(|m| {
                    let s = request * 10 + u64::from(m);
                    json!({"partition": m % PARTITIONS, "value": {"s": s}})
                })
                .collect();
            // Not idempotent: a retry may store a batch twice; the streams must deliver every
            // stored copy (the checker goes by position).
            let body = json!({ "messages": messages });
            match produce_once(&client, &urls[node % urls.len()], &body).await {
                Attempt::Acknowledged(_) => {
                    produced.fetch_add(messages.len(), Ordering::SeqCst);
                    request += 1;
                }
                _ => node += 1,
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    })
}

impl StreamPhase {
    pub async fn start(cluster: &TestCluster, base_urls: Vec<String>) -> StreamPhase {
        create_replicated(cluster, 1, TOPIC, PARTITIONS, 3).await;
        for partition in 0..PARTITIONS {
            cluster.wait_until_in_sync(TOPIC, partition, 3).await;
        }
        for subscription in [WS_QUEUE, SSE_QUEUE] {
            crate::common::queues::subscribe(
                cluster.node(1),
                subscription,
                json!({"topic": TOPIC, "ack_deadline_ms": ACK_DEADLINE_MS, "start": "earliest",
                       "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 500}}),
            )
            .await;
        }
        let urls = cluster
            .ids()
            .into_iter()
            .map(|id| messages_url(cluster, id, TOPIC))
            .collect();
        let (stop_producer, produced) = (Arc::new(AtomicBool::new(false)), Arc::default());
        let producer = spawn_producer(urls, stop_producer.clone(), Arc::clone(&produced));
        let stop_clients = Arc::new(AtomicBool::new(false));
        // Spread over the nodes: (name, transport, the node it connects to first, its
        // subscription or group).
        let stop = &stop_clients;
        let queues = [
            ("ws queue", Transport::WebSocket, 0, WS_QUEUE),
            ("sse queue", Transport::Sse, 1, SSE_QUEUE),
        ]
        .map(|(name, transport, first, subscription)| {
            let urls = base_urls.clone();
            let client =
                fault_stream_queue::spawn(transport, urls, first, subscription, stop.clone());
            (name, client)
        });
        let groups = [
            ("ws group", Transport::WebSocket, 2, WS_GROUP),
            ("sse group", Transport::Sse, 0, SSE_GROUP),
        ]
        .map(|(name, transport, first, group)| {
            let urls = base_urls.clone();
            let client =
                fault_stream_group::spawn(transport, urls, first, group, TOPIC, stop.clone());
            (name, client)
        });
        let topics = [
            ("sse topic", Transport::Sse, 1),
            ("ws topic", Transport::WebSocket, 2),
        ]
        .map(|(name, transport, first)| {
            let urls = base_urls.clone();
            let (client, progress) =
                fault_stream_topic::spawn(transport, urls, first, TOPIC, stop.clone());
            (name, client, progress)
        });
        StreamPhase {
            stop_producer,
            producer,
            produced,
            stop_clients,
            queues: queues.into(),
            groups: groups.into(),
            topics: topics.into(),
        }
    }

    /// Stops the producer, lets every stream settle what the topic holds, stops them and
    /// checks what they saw.
    pub async fn finish(self, cluster: &TestCluster) -> StreamReport {
        self.stop_producer.store(true, Ordering::SeqCst);
        let _ = self.producer.await;
        // Done when both subscriptions have nothing left and both groups committed the ends
        // of the partitions (the highest high watermark any node shows), twice in a row with
        // the same ends: a produce the producer gave up on may still land.
        let started = Instant::now();
        let mut left = BTreeMap::new();
        let mut committed = BTreeMap::new();
        let mut done_at: Option<BTreeMap<u32, u64>> = None;
        while started.elapsed() < DRAIN_DEADLINE {
            let via = cluster.live_ids()[0];
            for subscription in [WS_QUEUE, SSE_QUEUE] {
                let path = format!("/v1/subscriptions/{subscription}");
                if let Ok(answer) = cluster.get_ok(via, &path).await {
                    let counts = (answer["backlog"].as_u64(), answer["in_flight"].as_u64());
                    if let (Some(backlog), Some(in_flight)) = counts {
                        left.insert(subscription, (backlog, in_flight));
                    }
                }
            }
            for group in [WS_GROUP, SSE_GROUP] {
                if let Ok(view) = cluster.get_ok(via, &format!("/v1/groups/{group}")).await {
                    committed.insert(group, committed_offsets(&view));
                }
            }
            let ends = ends(cluster).await;
            let queues_done = [WS_QUEUE, SSE_QUEUE]
                .iter()
                .all(|s| left.get(s) == Some(&(0, 0)));
            let groups_done = [WS_GROUP, SSE_GROUP]
                .iter()
                .all(|g| committed.get(g) == Some(&ends));
            let topics_done = self.topics.iter().all(|(_, _, progress)| {
                let progress = progress.lock().map(|p| p.clone()).unwrap_or_default();
                ends.iter()
                    .all(|(p, end)| progress.get(p).copied().unwrap_or(0) >= *end)
            });
            if queues_done && groups_done && topics_done {
                if done_at.as_ref() == Some(&ends) {
                    break;
                }
                done_at = Some(ends);
            } else {
                done_at = None;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let drained_in = started.elapsed();
        self.stop_clients.store(true, Ordering::SeqCst);
        let via = cluster.live_ids()[0];
        let mut stored = BTreeMap::new();
        let mut high_watermarks = BTreeMap::new();
        for partition in 0..PARTITIONS {
            let messages = cluster.read_partition(via, TOPIC, partition).await;
            high_watermarks.insert(partition, messages.last().map_or(0, |m| m.offset + 1));
            stored.insert(partition, messages);
        }
        let mut queues = Vec::new();
        for ((name, client), subscription) in self.queues.into_iter().zip([WS_QUEUE, SSE_QUEUE]) {
            let log = stopped(name, client).await;
            let delivered: BTreeSet<(u32, u64)> = log.leases.iter().map(|l| l.position).collect();
            let altered = log
                .leases
                .iter()
                .filter(|l| altered(&stored, l.position, &l.value))
                .map(|l| l.position)
                .collect();
            queues.push(QueueStreamReport {
                name,
                altered,
                verdict: fault_stream_queue::check(&log),
                undelivered: missing(&stored, &delivered),
                left: left.get(subscription).copied(),
                log,
            });
        }
        let mut groups = Vec::new();
        for ((name, client), group) in self.groups.into_iter().zip([WS_GROUP, SSE_GROUP]) {
            let log = stopped(name, client).await;
            let delivered: BTreeSet<(u32, u64)> =
                log.delivered.iter().map(|(p, o, _, _)| (*p, *o)).collect();
            let altered = log
                .delivered
                .iter()
                .filter(|(p, o, value, _)| altered(&stored, (*p, *o), value))
                .map(|(p, o, _, _)| (*p, *o))
                .collect();
            groups.push(GroupStreamReport {
                name,
                undelivered: missing(&stored, &delivered),
                altered,
                committed: committed.get(group).cloned().unwrap_or_default(),
                log,
            });
        }
        let mut topics = Vec::new();
        for (name, client, _) in self.topics {
            let log = stopped(name, client).await;
            let problems = fault_stream_topic::check(&log, &stored);
            topics.push(TopicStreamReport {
                name,
                log,
                problems,
            });
        }
        StreamReport {
            topics,
            produced: self.produced.load(Ordering::SeqCst),
            high_watermarks,
            queues,
            groups,
            drained_in,
        }
    }
}

async fn stopped<T>(name: &str, client: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), client)
        .await
        .unwrap_or_else(|_| panic!("the {name} stream did not stop"))
        .unwrap_or_else(|_| panic!("the {name} stream panicked"))
}

/// Per partition, the highest high watermark a live node shows.
async fn ends(cluster: &TestCluster) -> BTreeMap<u32, u64> {
    let mut ends = BTreeMap::new();
    for via in cluster.live_ids() {
        let Ok(view) = cluster.topic_view(via, TOPIC).await else {
            continue;
        };
        for partition in view["partitions"].as_array().into_iter().flatten() {
            let (Some(p), Some(high)) = (
                partition["partition"].as_u64(),
                partition["high_watermark"].as_u64(),
            ) else {
                continue;
            };
            let end = ends.entry(p as u32).or_default();
            *end = high.max(*end);
        }
    }
    ends
}

fn committed_offsets(view: &Value) -> BTreeMap<u32, u64> {
    view["offsets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| Some((o["partition"].as_u64()? as u32, o["committed"].as_u64()?)))
        .collect()
}

/// Whether `value`, delivered as `(partition, offset)`, is not what the log holds there.
fn altered(
    stored: &BTreeMap<u32, Vec<Stored>>,
    (partition, offset): (u32, u64),
    value: &Value,
) -> bool {
    let at = stored.get(&partition).and_then(|messages| {
        let first = messages.first()?.offset;
        messages
            .get(usize::try_from(offset.checked_sub(first)?).ok()?)
            .filter(|m| m.offset == offset)
    });
    at.map(|m| &m.value) != Some(value)
}

fn missing(
    stored: &BTreeMap<u32, Vec<Stored>>,
    delivered: &BTreeSet<(u32, u64)>,
) -> Vec<(u32, u64)> {
    stored
        .iter()
        .flat_map(|(p, messages)| messages.iter().map(move |m| (*p, m.offset)))
        .filter(|position| !delivered.contains(position))
        .collect()
}
