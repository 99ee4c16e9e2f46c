//! The fault schedule's queue part: a topic with size retention (one partition, RF 3), a
//! producer, two queue pullers acking through the nodes (`common::fault_queue`), and the fault
//! issue 29 found: the partition's preferred replica down until retention moved the log start
//! past everything it had, so the leader purged the raft log it would replay and it returns
//! through a snapshot, then gets its leadership back.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{hold, CommittedWatch, Faults};
use crate::common::cluster::{create_replicated, messages_url, produce_once, Attempt, TestCluster};
use crate::common::fault_queue::{self, QueueLog, QueueVerdict};
use serde_json::{json, Value};

const TOPIC: &str = "fault-queue";
const SUBSCRIPTION: &str = "fault-pullers";
/// About 9 s of what the producer writes.
const RETENTION_BYTES: u64 = 200_000;
const ACK_DEADLINE: Duration = Duration::from_millis(5_000);
const PULLERS: usize = 2;
/// How long the pullers get to ack everything retained once the faults are over.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);
/// How long the preferred replica stays down at most, waiting for retention to pass it.
const DOWN_AT_MOST: Duration = Duration::from_secs(25);

pub struct QueuePhase {
    stop_producer: Arc<AtomicBool>,
    producer: tokio::task::JoinHandle<()>,
    produced: Arc<AtomicUsize>,
    stop_pullers: Arc<AtomicBool>,
    pullers: Vec<tokio::task::JoinHandle<QueueLog>>,
}

/// What the queue part found, for the closing line.
pub struct QueueReport {
    pub produced: usize,
    pub stored: usize,
    pub log_start: u64,
    /// Acknowledged writes trimmed by retention before any puller got them.
    pub trimmed_undelivered: usize,
    /// Retained messages no puller got.
    pub retained_undelivered: Vec<u64>,
    pub backlog: Option<u64>,
    pub pulls: usize,
    pub failures: usize,
    pub verdict: QueueVerdict,
}

impl fmt::Display for QueueReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} produce requests acknowledged, {} messages stored from offset {}, {} deliveries \
             ({} redeliveries) in {} pulls ({} failed calls), acked twice {}, delivered after \
             a confirmed ack {}, double holds {}, {} trimmed before delivery, {} retained \
             never delivered, final backlog {:?}",
            self.produced,
            self.stored,
            self.log_start,
            self.verdict.deliveries,
            self.verdict.redeliveries,
            self.pulls,
            self.failures,
            self.verdict.acked_twice.len(),
            self.verdict.delivered_after_ack.len(),
            self.verdict.double_holds.len(),
            self.trimmed_undelivered,
            self.retained_undelivered.len(),
            self.backlog,
        )
    }
}

impl QueueReport {
    pub fn assert_clean(&self) {
        let verdict = &self.verdict;
        assert!(
            verdict.acked_twice.is_empty(),
            "acked twice: {:?}",
            verdict.acked_twice
        );
        assert!(
            verdict.delivered_after_ack.is_empty(),
            "delivered after a confirmed ack: {:?}",
            verdict.delivered_after_ack
        );
        assert!(
            verdict.double_holds.is_empty(),
            "held by two pullers at once: {:?}",
            verdict.double_holds
        );
        assert!(
            self.retained_undelivered.is_empty(),
            "retained messages never delivered: {:?}",
            self.retained_undelivered
        );
        assert_eq!(self.backlog, Some(0), "the subscription's final backlog");
    }
}

/// The snapshot installs node `id` counted since it started (0 when it is down).
pub async fn installs(cluster: &TestCluster, id: u64) -> usize {
    cluster
        .node(id)
        .metric("herald_raft_snapshot_installs_total", &[])
        .await
        .unwrap_or(0.0) as usize
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
        let padding = "q".repeat(200);
        let mut node = 0;
        let mut request = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let messages: Vec<Value> = (0..10)
                .map(|m| json!({"partition": 0, "value": {"q": request * 10 + m, "pad": padding}}))
                .collect();
            // Not idempotent: a retry may store a batch twice; every stored copy is a message
            // the pullers must get.
            match produce_once(
                &client,
                &urls[node % urls.len()],
                &json!({ "messages": messages }),
            )
            .await
            {
                Attempt::Acknowledged(_) => {
                    produced.fetch_add(1, Ordering::SeqCst);
                    request += 1;
                }
                _ => node += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

impl QueuePhase {
    pub async fn start(cluster: &TestCluster, base_urls: Vec<String>) -> QueuePhase {
        create_replicated(cluster, 1, TOPIC, 1, 3).await;
        cluster.wait_until_in_sync(TOPIC, 0, 3).await;
        let node = cluster.node(1);
        let response = node
            .patch_json(
                &format!("/v1/topics/{TOPIC}"),
                &json!({"config": {"retention_bytes": RETENTION_BYTES}}),
            )
            .await;
        assert!(response.status().is_success(), "retention_bytes");
        crate::common::queues::subscribe(
            node,
            SUBSCRIPTION,
            json!({"topic": TOPIC, "ack_deadline_ms": ACK_DEADLINE.as_millis() as u64,
                   "retry_policy": {"min_backoff_ms": 100, "max_backoff_ms": 500}}),
        )
        .await;
        let urls: Vec<String> = cluster
            .ids()
            .into_iter()
            .map(|id| messages_url(cluster, id, TOPIC))
            .collect();
        let (stop_producer, produced) = (Arc::new(AtomicBool::new(false)), Arc::default());
        let producer = spawn_producer(urls, stop_producer.clone(), Arc::clone(&produced));
        let stop_pullers = Arc::new(AtomicBool::new(false));
        let pullers =
            fault_queue::spawn_pullers(PULLERS, base_urls, SUBSCRIPTION, stop_pullers.clone());
        QueuePhase {
            stop_producer,
            producer,
            produced,
            stop_pullers,
            pullers,
        }
    }

    /// The partition's extent as node `via` reports it (its leader's view).
    async fn extent(cluster: &TestCluster, via: u64) -> Option<(u64, u64)> {
        let view = cluster.partition_view(via, TOPIC, 0).await.ok()?;
        Some((
            view["log_start_offset"].as_u64()?,
            view["high_watermark"].as_u64()?,
        ))
    }

    /// Kills the partition's preferred replica until the log start passed its high watermark
    /// (and a few purge checks more), then restarts it. Answers how long it was down.
    pub async fn kill_past_retention(
        &self,
        cluster: &mut TestCluster,
        faults: &mut Faults,
        watch: &mut CommittedWatch,
        group: &str,
    ) -> Duration {
        let view = cluster
            .partition_view(cluster.ids()[0], TOPIC, 0)
            .await
            .unwrap_or_else(|error| cluster.fail(&error));
        let preferred = view["replicas"][0].as_u64().unwrap_or(1);
        let high = view["high_watermark"].as_u64().unwrap_or(0);
        faults.snapshot_installs += installs(cluster, preferred).await;
        let killed = Instant::now();
        cluster.kill(preferred);
        watch.restarted(preferred);
        let via = cluster.others_than(preferred)[0];
        while killed.elapsed() < DOWN_AT_MOST {
            hold(cluster, watch, group, Duration::from_millis(500)).await;
            if Self::extent(cluster, via)
                .await
                .is_some_and(|(start, _)| start > high)
            {
                // Past it: a few more purge checks, so the leader's raft log goes too.
                hold(cluster, watch, group, Duration::from_secs(3)).await;
                break;
            }
        }
        let down = killed.elapsed();
        cluster.restart(preferred).await;
        faults.kills += 1;
        faults.kills_past_retention += 1;
        down
    }

    /// Stops the producer, lets the pullers ack every retained message, stops them and checks.
    pub async fn finish(self, cluster: &TestCluster) -> QueueReport {
        self.stop_producer.store(true, Ordering::SeqCst);
        let _ = self.producer.await;
        let deadline = Instant::now() + DRAIN_DEADLINE;
        let mut backlog = None;
        while Instant::now() < deadline {
            let via = cluster.live_ids()[0];
            if let Ok(answer) = cluster
                .get_ok(via, &format!("/v1/subscriptions/{SUBSCRIPTION}"))
                .await
            {
                backlog = answer["backlog"].as_u64();
                if backlog == Some(0) && answer["in_flight"].as_u64() == Some(0) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.stop_pullers.store(true, Ordering::SeqCst);
        let mut logs = Vec::new();
        for puller in self.pullers {
            logs.push(puller.await.expect("a puller panicked"));
        }
        let verdict = fault_queue::check(&logs, ACK_DEADLINE);
        let via = cluster.live_ids()[0];
        let stored = cluster.read_partition(via, TOPIC, 0).await;
        let log_start = Self::extent(cluster, via)
            .await
            .map_or(0, |(start, _)| start);
        let delivered: std::collections::BTreeSet<u64> = logs
            .iter()
            .flat_map(|log| log.deliveries.iter().map(|delivery| delivery.offset))
            .collect();
        let retained_undelivered = stored
            .iter()
            .map(|message| message.offset)
            .filter(|offset| !delivered.contains(offset))
            .collect();
        let trimmed_undelivered = (0..log_start)
            .filter(|offset| !delivered.contains(offset))
            .count();
        QueueReport {
            produced: self.produced.load(Ordering::SeqCst),
            stored: stored.len(),
            log_start,
            trimmed_undelivered,
            retained_undelivered,
            backlog,
            pulls: logs.iter().map(|log| log.pulls).sum(),
            failures: logs.iter().map(|log| log.failures).sum(),
            verdict,
        }
    }
}
