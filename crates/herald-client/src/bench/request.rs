//! `herald bench request`: request/reply round trips per second and their latency, with
//! `--requesters` concurrent requesters against a responder loop that reads the requests
//! (long polls, one per partition) and posts each reply. The responder can talk to another
//! node (`--responder-server`), so replies cross the cluster's internal RPC.
//!
//! Latency is one whole round trip as the requester sees it: publish (acks=all), the responder's
//! read, its reply, and the answer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use super::produce::{ensure_topic, warm_up};
use super::stats::{Report, WorkerStats};
use crate::cli::client::{Api, OffsetSpec};

/// Options of `herald bench request`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchRequestArgs {
    /// Topic the requests go to; created if missing.
    #[arg(long, default_value = "bench-requests")]
    pub topic: String,
    /// Partitions of the topic when it has to be created (one responder reader each).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Replication factor of the topic when it has to be created.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: u16,
    /// Concurrent requesters, each with its own connection, one request at a time.
    #[arg(long, default_value_t = 16)]
    pub requesters: usize,
    /// Total round trips.
    #[arg(long, default_value_t = 10_000)]
    pub requests: u64,
    /// Size of each request's and reply's value in bytes.
    #[arg(long, default_value_t = 100)]
    pub message_size: usize,
    /// Each request's timeout_ms.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// The node the responder reads from and replies to (default: --server).
    #[arg(long)]
    pub responder_server: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Reads one partition's requests from its current end and replies to each, until `stop`.
async fn respond(api: Api, topic: String, partition: u32, stop: Arc<AtomicBool>) -> u64 {
    let mut offset = match api.fetch(&topic, partition, OffsetSpec::Latest, 1, 0).await {
        Ok(answer) => answer.next_offset,
        Err(error) => {
            eprintln!("responder for partition {partition}: {error:#}");
            return 0;
        }
    };
    let mut replied = 0;
    let replies_url = api.url(&["v1", "replies"]);
    while !stop.load(Ordering::Relaxed) {
        let url = api.fetch_url(&topic, partition, OffsetSpec::At(offset), 1000, 200);
        let answer: Value = match api.send_json(api.http().get(url)).await {
            Ok(answer) => answer,
            Err(error) => {
                eprintln!("responder for partition {partition}: {error:#}");
                // Not a wait for a condition: a pause so a failing server is not hammered.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        offset = answer["next_offset"].as_u64().unwrap_or(offset);
        let replies = answer["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|message| {
                let body = json!({
                    "reply_to": message["headers"]["herald-reply-to"],
                    "correlation_id": message["headers"]["herald-correlation-id"],
                    "value": message["value"],
                });
                let request = api.http().post(replies_url.clone()).json(&body);
                let api = &api;
                async move { api.authorized(request).await.send().await }
            });
        for reply in futures::future::join_all(replies).await {
            if matches!(reply, Ok(ref response) if response.status().is_success()) {
                replied += 1;
            }
        }
    }
    replied
}

/// One requester: sends requests one after the other until the run has sent enough.
async fn requester(
    api: Api,
    args: Arc<BenchRequestArgs>,
    body: Arc<Value>,
    sent: Arc<AtomicU64>,
) -> WorkerStats {
    let mut stats = WorkerStats::new();
    let mut url = api.url(&["v1", "topics", &args.topic, "requests"]);
    url.query_pairs_mut()
        .append_pair("timeout_ms", &args.timeout_ms.to_string());
    while sent.fetch_add(1, Ordering::Relaxed) < args.requests {
        let started = Instant::now();
        let request = api.http().post(url.clone()).json(&*body);
        match api.authorized(request).await.send().await {
            Ok(response) if response.status().is_success() => {
                let _ = response.bytes().await;
                stats.record_success(1, args.message_size as u64, started.elapsed());
            }
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                stats.record_error(format!("HTTP {status}: {text}"));
            }
            Err(error) => stats.record_error(error.to_string()),
        }
    }
    stats
}

/// Runs `herald bench request`.
pub async fn run(server: &str, args: BenchRequestArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.requesters > 0, "--requesters must be at least 1");
    let admin = Api::new(server)?;
    let partitions = ensure_topic(
        &admin,
        &args.topic,
        args.partitions,
        args.replication_factor,
    )
    .await? as u32;
    let responder_server = args.responder_server.clone().unwrap_or(server.to_string());
    let stop = Arc::new(AtomicBool::new(false));
    let mut responders = Vec::new();
    for partition in 0..partitions {
        let api = Api::new(&responder_server)?;
        warm_up(&api).await;
        responders.push(tokio::spawn(respond(
            api,
            args.topic.clone(),
            partition,
            Arc::clone(&stop),
        )));
    }
    let mut apis = Vec::with_capacity(args.requesters);
    for _ in 0..args.requesters {
        apis.push(Api::new(server)?);
    }
    futures::future::join_all(apis.iter().map(warm_up)).await;
    let params = json!({
        "topic": args.topic,
        "partitions": partitions,
        "requesters": args.requesters,
        "message_size": args.message_size,
        "responder_server": responder_server,
    });
    let body = Arc::new(json!({"value": "x".repeat(args.message_size)}));
    let args = Arc::new(args);
    let sent = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = apis
        .into_iter()
        .map(|api| {
            tokio::spawn(requester(
                api,
                Arc::clone(&args),
                Arc::clone(&body),
                Arc::clone(&sent),
            ))
        })
        .collect();
    let mut total = WorkerStats::new();
    for handle in handles {
        let stats = handle
            .await
            .map_err(|error| anyhow::anyhow!("a requester failed: {error}"))?;
        total.merge(&stats)?;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for responder in responders {
        let _ = responder.await;
    }
    Ok(Report::new("request", params, &total, elapsed))
}
