//! `herald bench produce`: how fast a server takes messages.
//!
//! The request bodies are built before the clock starts and reused (as cheap `Bytes` clones), so
//! the generator's own cost is a memcpy into the socket, not JSON encoding; several distinct bodies
//! rotate so a server cannot get lucky with one repeated payload. Each worker owns one HTTP/1.1
//! keep-alive connection (its own client and pool), or with `--http2` shares an HTTP/2
//! connection with other workers, and sends its next request when the previous one is
//! answered, optionally held back by the shared `--rate` pacer. A 207 answer (some partitions
//! wrote their messages, others did not) counts its written messages and one error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode, Url};
use serde_json::json;

use super::budget::Budget;
use super::pacer::Pacer;
use super::stats::{Report, WorkerStats};
use crate::cli::client::{Acks, Api, CreateTopic, HttpProtocol, ProblemError, ProduceResponse};

pub use super::produce_bodies::{
    keyed_request_body, payload, request_body, Bodies, BodyMode, Keys,
};

/// After this many transport failures in a row (server down, refused connections) a worker stops
/// the whole run rather than burn through the message budget in errors.
const MAX_CONSECUTIVE_TRANSPORT_ERRORS: u32 = 20;

/// How long to wait for a newly created topic's partitions to have leaders.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Options of `herald bench produce`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchProduceArgs {
    /// Topic to produce to; created if missing.
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Partitions of the topic when it has to be created.
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// Replication factor of the topic when it has to be created.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: u16,
    /// Size of each message's value in bytes.
    #[arg(long, default_value_t = 100)]
    pub message_size: usize,
    /// Messages per request (ignored with --raw, which sends one per request).
    #[arg(long, default_value_t = 1000)]
    pub batch_size: u64,
    /// Concurrent workers, each with its own HTTP connection (with --http2: each one request
    /// at a time, multiplexed over --http2-connections connections).
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Speak HTTP/2 (h2c with prior knowledge on `http://`, h2 by ALPN on `https://`), the
    /// workers' requests multiplexed as streams over --http2-connections connections.
    #[arg(long)]
    pub http2: bool,
    /// With --http2: how many HTTP/2 connections the workers share (worker i uses connection
    /// i mod this).
    #[arg(long, default_value_t = 1, requires = "http2")]
    pub http2_connections: usize,
    /// Total messages to send.
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    /// Acknowledgement level.
    #[arg(long, value_enum, default_value_t = Acks::All)]
    pub acks: Acks,
    /// Send values as value_b64 (random bytes) instead of JSON strings.
    #[arg(long)]
    pub bytes: bool,
    /// One message per application/octet-stream POST (the body is the value).
    #[arg(long)]
    pub raw: bool,
    /// Send each request as one batch in the stored layout (`application/vnd.herald.batch`,
    /// docs/binary-batches.md) to one partition, the partitions taken in turn.
    #[arg(long, conflicts_with_all = ["raw", "bytes"])]
    pub binary: bool,
    /// Cap on requests per second across all workers (latency is then measured from each
    /// request's scheduled time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Give messages keys, cycling through this many distinct ones (`k0`, `k1`, ...): what a
    /// compacted topic needs (0: no keys; not with --raw).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
    /// List every request slower than this many milliseconds with when it started (ms into
    /// the run; at most 1000), to line latency spikes up against the node's log.
    #[arg(long)]
    pub slow_ms: Option<f64>,
    /// Take the values from this file, one base64-encoded value per line, in turn (e.g.
    /// records in the Confluent wire format for a topic with a `value_subject`); with
    /// --binary or as `value_b64`. Overrides --message-size.
    #[arg(long, conflicts_with_all = ["raw", "keys"])]
    pub values_file: Option<std::path::PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Everything the workers share.
struct Shared {
    /// The URLs requests go to, taken in turn (one per partition for batches).
    urls: Vec<Url>,
    mode: BodyMode,
    bodies: Bodies,
    budget: Budget,
    pacer: Option<Pacer>,
    message_size: u64,
    abort: AtomicBool,
    /// When the run started, and the latency from which a request is listed as slow.
    run_started: Instant,
    slow_threshold: Option<Duration>,
}

impl Shared {
    /// Records a successful request of `count` messages that started at `started`.
    fn record(&self, stats: &mut WorkerStats, count: u64, started: Instant) {
        let latency = started.elapsed();
        stats.record_success(count, count * self.message_size, latency);
        if self
            .slow_threshold
            .is_some_and(|threshold| latency >= threshold)
        {
            stats.record_slow(started.saturating_duration_since(self.run_started), latency);
        }
    }
}

/// One worker: sends until the budget is spent, on its own connection.
async fn worker(api: Api, shared: Arc<Shared>, index: usize) -> WorkerStats {
    let mut stats = WorkerStats::new();
    let mut consecutive_transport_errors = 0u32;
    let mut turn = index; // workers start on different bodies
    while !shared.abort.load(Ordering::Relaxed) {
        let count = shared.budget.take(shared.bodies.per_request);
        if count == 0 {
            break;
        }
        let body = shared.bodies.get(count, turn);
        let url = &shared.urls[turn % shared.urls.len()];
        turn += 1;
        let started = match &shared.pacer {
            Some(pacer) => pacer.wait().await,
            None => Instant::now(),
        };
        let request = api
            .http()
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, shared.mode.content_type())
            .body(body);
        let sent = api.authorized(request).await.send().await;
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                stats.record_error(format!("POST {}: {error}", url.path()));
                consecutive_transport_errors += 1;
                if consecutive_transport_errors >= MAX_CONSECUTIVE_TRANSPORT_ERRORS {
                    shared.abort.store(true, Ordering::Relaxed);
                }
                continue;
            }
        };
        consecutive_transport_errors = 0;
        let status = response.status();
        // Read the whole answer: that is when the request is done, and it frees the connection.
        match response.bytes().await {
            Ok(answer) if status == StatusCode::MULTI_STATUS => {
                // Partly written: the written messages count, the rest is one failed request.
                let (unwritten, sample) = unwritten(&answer);
                let unwritten = unwritten.min(count);
                let written = count - unwritten;
                shared.record(&mut stats, written, started);
                stats.record_error(format!(
                    "POST {}: 207, {unwritten} of {count} message(s) not written: {sample}",
                    url.path()
                ));
            }
            Ok(_) if status.is_success() => {
                shared.record(&mut stats, count, started);
            }
            Ok(answer) => {
                let text = String::from_utf8_lossy(&answer);
                let path = url.path().to_string();
                stats.record_error(
                    ProblemError::from_parts(Method::POST, path, status, &text).to_string(),
                );
            }
            Err(error) => {
                stats.record_error(format!("POST {}: reading the answer: {error}", url.path()))
            }
        }
    }
    stats
}

/// How many messages of a 207 answer were not written, and the first one's error; an answer
/// that cannot be read counts as nothing written (`u64::MAX`).
fn unwritten(answer: &[u8]) -> (u64, String) {
    match serde_json::from_slice::<ProduceResponse>(answer) {
        Ok(response) => {
            let mut failed = response
                .offsets
                .iter()
                .filter_map(|entry| entry.error_text());
            let sample = failed.next().unwrap_or_default();
            (1 + failed.count() as u64, sample)
        }
        Err(error) => (u64::MAX, format!("unreadable answer: {error}")),
    }
}

/// Makes sure the topic exists (creating it with the given partitions) and returns its partition
/// count, once every partition has a leader.
pub async fn ensure_topic(
    api: &Api,
    topic: &str,
    partitions: u32,
    replication_factor: u16,
) -> anyhow::Result<usize> {
    match api.get_topic(topic).await {
        Ok(info) => return Ok(info.partitions.len()),
        Err(error) => match error.downcast_ref::<ProblemError>() {
            Some(problem) if problem.status == reqwest::StatusCode::NOT_FOUND => {}
            _ => return Err(error),
        },
    }
    let spec = CreateTopic {
        name: topic.to_string(),
        partitions,
        replication_factor: Some(replication_factor),
        config: serde_json::Map::new(),
    };
    match api.create_topic(&spec).await {
        Ok(_) => eprintln!("created topic `{topic}` with {partitions} partition(s)"),
        Err(error) => match error.downcast_ref::<ProblemError>() {
            Some(problem) if problem.code() == "topic_exists" => {}
            _ => return Err(error),
        },
    }
    let deadline = Instant::now() + TOPIC_READY_TIMEOUT;
    loop {
        let info = api.get_topic(topic).await?;
        let led = info
            .partitions
            .iter()
            .all(|p| p.leader.as_ref().is_some_and(|l| !l.is_null()));
        if led || Instant::now() >= deadline {
            return Ok(info.partitions.len());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a worker's connection before the clock starts, so the run measures requests, not TCP
/// handshakes. A failure here is left for the run itself to report.
pub async fn warm_up(api: &Api) {
    if let Ok(response) = api.http().get(api.url(&["healthz"])).send().await {
        let _ = response.bytes().await;
    }
}

/// One client per worker, connected before the clock starts: over HTTP/1.1 each its own
/// connection; over HTTP/2 clones of `--http2-connections` clients, so the workers of one
/// share its connection.
async fn worker_apis(server: &str, args: &BenchProduceArgs) -> anyhow::Result<Vec<Api>> {
    let mut apis = Vec::with_capacity(args.connections);
    if args.http2 {
        anyhow::ensure!(
            args.http2_connections > 0,
            "--http2-connections must be at least 1"
        );
        let mut connections = Vec::with_capacity(args.http2_connections);
        for _ in 0..args.http2_connections.min(args.connections) {
            connections.push(Api::with_protocol(server, HttpProtocol::Http2)?);
        }
        futures::future::join_all(connections.iter().map(warm_up)).await;
        for index in 0..args.connections {
            apis.push(connections[index % connections.len()].clone());
        }
    } else {
        for _ in 0..args.connections {
            apis.push(Api::new(server)?);
        }
        futures::future::join_all(apis.iter().map(warm_up)).await;
    }
    Ok(apis)
}

/// The values of `--values-file`: one base64 value per non-empty line.
fn read_values(path: &std::path::Path) -> anyhow::Result<Vec<Vec<u8>>> {
    use anyhow::Context;
    use base64::Engine;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read {}", path.display()))?;
    let values = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .enumerate()
        .map(|(index, line)| {
            base64::engine::general_purpose::STANDARD
                .decode(line)
                .with_context(|| format!("{} line {}: not base64", path.display(), index + 1))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!values.is_empty(), "{} holds no values", path.display());
    Ok(values)
}

/// Runs `herald bench produce`.
pub async fn run(server: &str, args: BenchProduceArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(
        args.raw || args.batch_size > 0,
        "--batch-size must be at least 1"
    );
    let mode = match (args.raw, args.bytes) {
        _ if args.binary => BodyMode::Batch,
        (true, _) => BodyMode::Raw,
        (false, true) => BodyMode::JsonBase64,
        (false, false) => BodyMode::JsonString,
    };
    let per_request = if args.raw { 1 } else { args.batch_size };
    let admin = Api::new(server)?;
    let partitions = ensure_topic(
        &admin,
        &args.topic,
        args.partitions,
        args.replication_factor,
    )
    .await?;

    let rate = match args.rate {
        Some(rate) if !(rate.is_finite() && rate > 0.0) => {
            anyhow::bail!("--rate must be a positive number of requests per second")
        }
        other => other,
    };
    let apis = worker_apis(server, &args).await?;
    anyhow::ensure!(
        !(args.raw && args.keys > 0),
        "--keys needs JSON bodies (not --raw)"
    );
    let (bodies, message_size) = match &args.values_file {
        Some(path) => {
            let values = read_values(path)?;
            let size = values.iter().map(Vec::len).sum::<usize>() / values.len();
            let mode = if mode == BodyMode::Batch {
                mode
            } else {
                BodyMode::JsonBase64
            };
            (
                Bodies::of_values(args.messages, per_request, &values, mode),
                size,
            )
        }
        None => (
            Bodies::build(
                args.messages,
                per_request,
                args.message_size,
                mode,
                args.keys,
            ),
            args.message_size,
        ),
    };
    let mut params = json!({
        "topic": args.topic,
        "partitions": partitions,
        "message_size": message_size,
        "batch_size": per_request,
        "connections": args.connections,
        "http": if args.http2 { "2" } else { "1.1" },
        "acks": args.acks.as_str(),
        "mode": mode.name(),
        "rate": rate,
        "keys": args.keys,
    });
    if args.http2 {
        params["http2_connections"] = json!(args.http2_connections.min(args.connections));
    }

    // Everything is ready: the clock and the pacer's schedule start now.
    let started = Instant::now();
    if args.slow_ms.is_some() {
        // The slow requests' `at_ms` count from here; the wall clock lines them up with a
        // node's log.
        params["started_unix_ms"] = json!(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_millis() as u64)
            .unwrap_or(0));
    }
    let shared = Arc::new(Shared {
        urls: match mode {
            BodyMode::Batch => (0..partitions as u32)
                .map(|partition| admin.produce_batch_url(&args.topic, partition, args.acks))
                .collect(),
            _ => vec![admin.produce_url(&args.topic, args.acks)],
        },
        mode,
        bodies,
        budget: Budget::new(args.messages),
        pacer: rate.and_then(|rate| Pacer::starting_at(rate, started)),
        message_size: message_size as u64,
        abort: AtomicBool::new(false),
        run_started: started,
        slow_threshold: match args.slow_ms {
            Some(ms) if ms.is_finite() && ms >= 0.0 => Some(Duration::from_secs_f64(ms / 1000.0)),
            Some(ms) => anyhow::bail!("--slow-ms must be a number of milliseconds >= 0, got {ms}"),
            None => None,
        },
    });
    let handles: Vec<_> = apis
        .into_iter()
        .enumerate()
        .map(|(index, api)| tokio::spawn(worker(api, Arc::clone(&shared), index)))
        .collect();
    let mut total = WorkerStats::new();
    for handle in handles {
        let stats = handle
            .await
            .map_err(|error| anyhow::anyhow!("a bench worker failed: {error}"))?;
        total.merge(&stats)?;
    }
    let elapsed = started.elapsed();
    if shared.abort.load(Ordering::Relaxed) {
        eprintln!("warning: stopped early after {MAX_CONSECUTIVE_TRANSPORT_ERRORS} connection failures in a row");
    }
    Ok(Report::new("produce", params, &total, elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_answer_counts_its_unwritten_messages() {
        let answer = json!({"offsets": [
            {"partition": 0, "offset": 4},
            {"partition": 1, "offset": null, "error": {"code": "overloaded", "detail": "full"}},
            {"partition": 1, "offset": null, "error": {"code": "overloaded", "detail": "full"}},
        ]});
        let (count, sample) = unwritten(answer.to_string().as_bytes());
        assert_eq!(count, 2);
        assert_eq!(sample, "overloaded: full");
        assert_eq!(unwritten(b"not json").0, u64::MAX);
    }
}
