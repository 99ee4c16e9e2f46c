//! `herald bench queue`: queue throughput of one subscription (pull + ack, messages/s) with
//! `--pullers` concurrent pullers spread over the given nodes, ack latency, and in the same run
//! the baseline: reading the same partitions by offset (`bench consume`'s reader), the same
//! message count, the same concurrency. The ratio of the two is what a queue costs over the log
//! (a lease and an ack are replicated writes; a read is not).
//!
//! The topic is filled once (not timed) up to `--messages`; each run recreates the
//! subscription (start `earliest`), so every run pulls the same messages. `--memory` measures
//! the server's memory instead (see [`super::queue_memory`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use super::budget::Budget;
use super::consume::{assign, worker as read_worker};
use super::produce::{ensure_topic, warm_up};
use super::stats::{Latency, Report, WorkerStats};
use crate::cli::client::{Acks, Api, ProblemError};

/// How long one pull waits on the server when nothing is deliverable (others hold the rest).
const PULL_WAIT_MS: u64 = 200;
/// A puller stops after this many empty pulls in a row (the queue is drained, or stuck).
const MAX_EMPTY_PULLS: u32 = 25;
/// Messages per produce request while filling the topic.
const FILL_BATCH: u64 = 1_000;
/// Concurrent produce requests while filling the topic.
const FILL_CONNECTIONS: usize = 4;

/// Options of `herald bench queue`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchQueueArgs {
    /// Topic to fill and read; created if missing.
    #[arg(long, default_value = "bench-queue")]
    pub topic: String,
    /// Subscription to (re)create for the run.
    #[arg(long, default_value = "bench-queue")]
    pub subscription: String,
    /// Partitions of the topic when it has to be created.
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// Replication factor of the topic when it has to be created.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: u16,
    /// Messages in the run (the topic is filled up to this many first).
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    /// Size of each message's value in bytes.
    #[arg(long, default_value_t = 100)]
    pub message_size: usize,
    /// Concurrent pullers (and readers for the baseline), each with its own connection.
    #[arg(long, default_value_t = 4)]
    pub pullers: usize,
    /// Messages per pull (and per read for the baseline).
    #[arg(long, default_value_t = 100)]
    pub max_messages: u32,
    /// More nodes to spread the pullers (and readers) over, besides --server, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Measure memory instead: fill the topic, then pull without acking until nothing more is
    /// leased, reporting the node's RSS (of --pid) before and after.
    #[arg(long)]
    pub memory: bool,
    /// The node's process id, for --memory (its /proc/PID/status is read).
    #[arg(long)]
    pub pid: Option<u32>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One side of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub messages: u64,
    pub seconds: f64,
    pub messages_per_sec: f64,
    /// Per request: a pull (queue) or a read (baseline).
    pub latency_ms: Latency,
    pub errors: u64,
    pub error_samples: Vec<String>,
}

impl Side {
    fn new(stats: &WorkerStats, elapsed: Duration) -> Self {
        let report = Report::new("queue", Value::Null, stats, elapsed);
        Side {
            messages: report.messages,
            seconds: report.seconds,
            messages_per_sec: report.messages_per_sec,
            latency_ms: report.latency_ms,
            errors: report.errors,
            error_samples: report.error_samples,
        }
    }
}

/// The figures of a `bench queue` run; also its `--json` form.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    pub params: Value,
    /// Pull + ack: `messages` acked, over the time from the first pull to the last ack.
    pub queue: Side,
    /// Latency of the ack requests.
    pub ack_latency_ms: Latency,
    /// Reads by offset of the same partitions.
    pub baseline: Side,
    /// queue messages/s over baseline messages/s.
    pub ratio: f64,
}

impl QueueReport {
    pub fn render_text(&self) -> String {
        let side = |name: &str, side: &Side| {
            format!(
                "  {name:<9} {:>9} msgs  {:>8.3} s  {:>10.0} msg/s  request p50 {:.3} ms  p99 {:.3} ms  errors {}\n",
                side.messages,
                side.seconds,
                side.messages_per_sec,
                side.latency_ms.p50,
                side.latency_ms.p99,
                side.errors
            )
        };
        let mut out = format!("bench queue: {}\n", self.params);
        out.push_str(&side("pull+ack", &self.queue));
        out.push_str(&format!(
            "  ack latency ms  p50 {:.3}  p99 {:.3}  max {:.3}\n",
            self.ack_latency_ms.p50, self.ack_latency_ms.p99, self.ack_latency_ms.max
        ));
        out.push_str(&side("by offset", &self.baseline));
        out.push_str(&format!(
            "  ratio     {:.3}   (pull+ack over reads by offset)\n",
            self.ratio
        ));
        for sample in self
            .queue
            .error_samples
            .iter()
            .chain(&self.baseline.error_samples)
        {
            out.push_str(&format!("    e.g. {sample}\n"));
        }
        out
    }
}

/// The node URLs the pullers are spread over: --server first.
pub(super) fn node_urls(server: &str, nodes: &[String]) -> Vec<String> {
    std::iter::once(server.to_string())
        .chain(nodes.iter().filter(|n| !n.is_empty()).cloned())
        .collect()
}

/// Produces messages until the topic holds at least `messages` (not timed); answers how many
/// it holds.
pub(super) async fn fill(
    api: &Api,
    topic: &str,
    messages: u64,
    message_size: usize,
) -> anyhow::Result<u64> {
    let info = api.get_topic(topic).await?;
    let partitions = info.partitions.len().max(1) as u64;
    let held: u64 = info
        .partitions
        .iter()
        .map(|p| p.high_watermark.saturating_sub(p.log_start_offset))
        .sum();
    if held >= messages {
        return Ok(held);
    }
    let missing = messages - held;
    eprintln!("filling `{topic}` with {missing} message(s)");
    let value = "x".repeat(message_size);
    let budget = Arc::new(Budget::new(missing));
    let mut fillers = Vec::new();
    for _ in 0..FILL_CONNECTIONS {
        let (api, budget, topic, value) = (
            api.clone(),
            budget.clone(),
            topic.to_string(),
            value.clone(),
        );
        fillers.push(tokio::spawn(async move {
            let mut turn = 0u64;
            loop {
                let count = budget.take(FILL_BATCH);
                if count == 0 {
                    return anyhow::Ok(());
                }
                // Spread evenly: each batch goes to one partition, in turn.
                turn += 1;
                let partition = (turn + count) % partitions;
                let batch: Vec<Value> = (0..count)
                    .map(|_| json!({"partition": partition, "value": value}))
                    .collect();
                api.produce(&topic, Acks::All, &json!({ "messages": batch }))
                    .await?;
            }
        }));
    }
    for filler in fillers {
        filler.await??;
    }
    Ok(messages)
}

/// Deletes the subscription if it exists and creates it again, reading from the start.
pub(super) async fn fresh_subscription(api: &Api, name: &str, topic: &str) -> anyhow::Result<()> {
    if let Err(error) = api.delete_subscription(name).await {
        match error.downcast_ref::<ProblemError>() {
            Some(problem) if problem.code() == "subscription_not_found" => {}
            _ => return Err(error),
        }
    }
    api.put_subscription(
        name,
        &json!({"topic": topic, "start": "earliest", "ack_deadline_ms": 60000}),
    )
    .await?;
    Ok(())
}

/// What one puller measured: pulls (messages acked, pull latency) and acks.
struct PullerStats {
    pulls: WorkerStats,
    acks: WorkerStats,
}

/// One puller: pull, ack, until the run's messages are acked or the queue stays empty.
async fn puller(
    api: Api,
    subscription: Arc<str>,
    max_messages: u32,
    target: u64,
    acked: Arc<AtomicU64>,
) -> PullerStats {
    let mut stats = PullerStats {
        pulls: WorkerStats::new(),
        acks: WorkerStats::new(),
    };
    let mut empty = 0;
    while acked.load(Ordering::Relaxed) < target && empty < MAX_EMPTY_PULLS {
        let started = Instant::now();
        let pulled = match api.pull(&subscription, max_messages, PULL_WAIT_MS).await {
            Ok(pulled) => pulled,
            Err(error) => {
                stats.pulls.record_error(format!("{error:#}"));
                empty += 1;
                continue;
            }
        };
        let pull_latency = started.elapsed();
        if pulled.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        let ids: Vec<&str> = pulled.iter().map(|p| p.ack_id.as_str()).collect();
        let started = Instant::now();
        match api.ack(&subscription, &ids).await {
            Ok(answer) => {
                let done = answer.done.len() as u64;
                stats.acks.record_success(done, 0, started.elapsed());
                stats.pulls.record_success(done, 0, pull_latency);
                acked.fetch_add(done, Ordering::Relaxed);
                if !answer.expired.is_empty() {
                    stats
                        .acks
                        .record_error(format!("{} ack(s) expired", answer.expired.len()));
                }
            }
            Err(error) => stats.acks.record_error(format!("{error:#}")),
        }
    }
    stats
}

/// Runs `herald bench queue`.
pub async fn run(server: &str, args: BenchQueueArgs) -> anyhow::Result<QueueReport> {
    anyhow::ensure!(args.pullers > 0, "--pullers must be at least 1");
    anyhow::ensure!(
        (1..=1000).contains(&args.max_messages),
        "--max-messages must be between 1 and 1000"
    );
    let urls = node_urls(server, &args.nodes);
    let admin = Api::new(server)?;
    let partitions = ensure_topic(
        &admin,
        &args.topic,
        args.partitions,
        args.replication_factor,
    )
    .await? as u32;
    fill(&admin, &args.topic, args.messages, args.message_size).await?;
    let params = json!({
        "topic": args.topic,
        "partitions": partitions,
        "messages": args.messages,
        "message_size": args.message_size,
        "pullers": args.pullers,
        "max_messages": args.max_messages,
        "nodes": urls.len(),
    });

    // Baseline first: reads by offset, the same concurrency over the same nodes.
    let all: Vec<u32> = (0..partitions).collect();
    let assignment = assign(&all, args.pullers);
    let mut readers = Vec::new();
    for (index, _) in assignment.iter().enumerate() {
        let api = Api::new(&urls[index % urls.len()])?;
        warm_up(&api).await;
        readers.push(api);
    }
    let budget = Arc::new(Budget::new(args.messages));
    let topic: Arc<str> = Arc::from(args.topic.as_str());
    let started = Instant::now();
    let handles: Vec<_> = readers
        .into_iter()
        .zip(assignment)
        .map(|(api, mine)| {
            tokio::spawn(read_worker(
                api,
                topic.clone(),
                mine,
                args.max_messages,
                budget.clone(),
                false,
            ))
        })
        .collect();
    let mut read = WorkerStats::new();
    for handle in handles {
        read.merge(&handle.await?)?;
    }
    let baseline = Side::new(&read, started.elapsed());

    // The queue.
    fresh_subscription(&admin, &args.subscription, &args.topic).await?;
    let mut pullers = Vec::new();
    for index in 0..args.pullers {
        let api = Api::new(&urls[index % urls.len()])?;
        warm_up(&api).await;
        pullers.push(api);
    }
    let acked = Arc::new(AtomicU64::new(0));
    let subscription: Arc<str> = Arc::from(args.subscription.as_str());
    let started = Instant::now();
    let handles: Vec<_> = pullers
        .into_iter()
        .map(|api| {
            tokio::spawn(puller(
                api,
                subscription.clone(),
                args.max_messages,
                args.messages,
                acked.clone(),
            ))
        })
        .collect();
    let (mut pulls, mut acks) = (WorkerStats::new(), WorkerStats::new());
    for handle in handles {
        let stats = handle.await?;
        pulls.merge(&stats.pulls)?;
        acks.merge(&stats.acks)?;
    }
    let elapsed = started.elapsed();
    let mut queue = Side::new(&pulls, elapsed);
    queue.errors += acks.errors;
    queue
        .error_samples
        .extend(acks.error_samples.iter().cloned());
    let ack_latency_ms = Report::new("queue", Value::Null, &acks, elapsed).latency_ms;
    let ratio = if baseline.messages_per_sec > 0.0 {
        queue.messages_per_sec / baseline.messages_per_sec
    } else {
        0.0
    };
    Ok(QueueReport {
        params,
        queue,
        ack_latency_ms,
        baseline,
        ratio,
    })
}
