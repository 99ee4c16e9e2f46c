//! `herald bench produce`: how fast a server takes messages.
//!
//! The request bodies are built before the clock starts and reused (as cheap `Bytes` clones), so
//! the generator's own cost is a memcpy into the socket, not JSON encoding; several distinct bodies
//! rotate so a server cannot get lucky with one repeated payload. Each worker owns one HTTP/1.1
//! keep-alive connection (its own client and pool) and sends its next request when the previous
//! one is answered, optionally held back by the shared `--rate` pacer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use reqwest::{Method, Url};
use serde_json::json;

use super::budget::Budget;
use super::pacer::Pacer;
use super::stats::{Report, WorkerStats};
use crate::cli::client::{Acks, Api, CreateTopic, ProblemError};

/// How many different bodies rotate through the requests.
const DISTINCT_BODIES: usize = 4;
/// The most bodies built to cover `--keys`: keys beyond `MAX_KEYED_BODIES * --batch-size` are
/// not sent.
const MAX_KEYED_BODIES: u64 = 256;

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
    /// Concurrent workers, each with its own HTTP connection.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
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
    /// Cap on requests per second across all workers (latency is then measured from each
    /// request's scheduled time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Give messages keys, cycling through this many distinct ones (`k0`, `k1`, ...): what a
    /// compacted topic needs (0: no keys; not with --raw).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// How the values travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// `{"messages":[{"value":"<text>"},...]}`.
    JsonString,
    /// `{"messages":[{"value_b64":"<base64>"},...]}`.
    JsonBase64,
    /// The raw value as an `application/octet-stream` body.
    Raw,
}

impl BodyMode {
    fn name(self) -> &'static str {
        match self {
            BodyMode::JsonString => "json",
            BodyMode::JsonBase64 => "json-b64",
            BodyMode::Raw => "raw",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            BodyMode::Raw => "application/octet-stream",
            _ => "application/json",
        }
    }
}

/// A deterministic pseudo-random generator (xorshift64*): payloads differ between bodies without
/// a dependency on `rand`.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// `size` bytes of value: letters and digits for JSON strings (no escaping, so the value really
/// is `size` bytes), arbitrary bytes otherwise.
pub fn payload(size: usize, seed: u64, mode: BodyMode) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut random = XorShift::new(seed);
    (0..size)
        .map(|_| {
            let n = random.next();
            match mode {
                BodyMode::JsonString => ALPHABET[(n % ALPHABET.len() as u64) as usize],
                _ => (n >> 56) as u8,
            }
        })
        .collect()
}

/// Message keys of a run: message `n` of the run's bodies gets key `k{(first + n) % distinct}`.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    pub first: u64,
    pub distinct: u64,
}

/// One request body carrying `count` messages of `size` bytes.
pub fn request_body(count: u64, size: usize, seed: u64, mode: BodyMode) -> Bytes {
    keyed_request_body(count, size, seed, mode, None)
}

/// Like [`request_body`], with keys.
pub fn keyed_request_body(
    count: u64,
    size: usize,
    seed: u64,
    mode: BodyMode,
    keys: Option<Keys>,
) -> Bytes {
    if mode == BodyMode::Raw {
        return Bytes::from(payload(size, seed, mode));
    }
    let (field, encoded_len) = match mode {
        BodyMode::JsonBase64 => ("value_b64", size.div_ceil(3) * 4),
        _ => ("value", size),
    };
    let mut body = String::with_capacity(16 + count as usize * (encoded_len + field.len() + 8));
    body.push_str(r#"{"messages":["#);
    for i in 0..count {
        if i > 0 {
            body.push(',');
        }
        let value = payload(size, seed.wrapping_mul(1_000_003).wrapping_add(i), mode);
        body.push('{');
        if let Some(keys) = keys {
            body.push_str(&format!(
                r#""key":"k{}","#,
                (keys.first + i) % keys.distinct.max(1)
            ));
        }
        body.push('"');
        body.push_str(field);
        body.push_str(r#"":""#);
        match mode {
            BodyMode::JsonBase64 => {
                base64::engine::general_purpose::STANDARD.encode_string(&value, &mut body)
            }
            // Letters and digits only: valid UTF-8 and nothing to escape.
            _ => body.push_str(&String::from_utf8_lossy(&value)),
        }
        body.push_str(r#""}"#);
    }
    body.push_str("]}");
    Bytes::from(body)
}

/// The prebuilt bodies of a run: full batches, plus the one smaller batch at the end when
/// `--messages` is not a multiple of the batch size.
#[derive(Debug)]
pub struct Bodies {
    pub full: Vec<Bytes>,
    pub per_request: u64,
    pub remainder: Option<Bytes>,
}

impl Bodies {
    /// With `keys`, enough distinct bodies that every key is sent (up to [`MAX_KEYED_BODIES`]).
    pub fn build(total: u64, per_request: u64, size: usize, mode: BodyMode, keys: u64) -> Self {
        let distinct = if keys == 0 {
            DISTINCT_BODIES as u64
        } else {
            keys.div_ceil(per_request)
                .clamp(DISTINCT_BODIES as u64, MAX_KEYED_BODIES)
        };
        let keys_of = |body: u64| {
            (keys > 0).then_some(Keys {
                first: body * per_request,
                distinct: keys,
            })
        };
        let full = (0..distinct)
            .map(|body| keyed_request_body(per_request, size, body + 1, mode, keys_of(body)))
            .collect();
        let rest = total % per_request;
        let remainder =
            (rest > 0).then(|| keyed_request_body(rest, size, 99, mode, keys_of(distinct)));
        Bodies {
            full,
            per_request,
            remainder,
        }
    }

    /// The body for a request of `count` messages (the `turn`-th of its worker).
    pub fn get(&self, count: u64, turn: usize) -> Bytes {
        match &self.remainder {
            Some(rest) if count != self.per_request => rest.clone(),
            _ => self.full[turn % self.full.len()].clone(),
        }
    }
}

/// Everything the workers share.
struct Shared {
    url: Url,
    mode: BodyMode,
    bodies: Bodies,
    budget: Budget,
    pacer: Option<Pacer>,
    message_size: u64,
    abort: AtomicBool,
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
        turn += 1;
        let started = match &shared.pacer {
            Some(pacer) => pacer.wait().await,
            None => Instant::now(),
        };
        let sent = api
            .http()
            .post(shared.url.clone())
            .header(reqwest::header::CONTENT_TYPE, shared.mode.content_type())
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                stats.record_error(format!("POST {}: {error}", shared.url.path()));
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
            Ok(_) if status.is_success() => {
                stats.record_success(count, count * shared.message_size, started.elapsed());
            }
            Ok(answer) => {
                let text = String::from_utf8_lossy(&answer);
                let path = shared.url.path().to_string();
                stats.record_error(
                    ProblemError::from_parts(Method::POST, path, status, &text).to_string(),
                );
            }
            Err(error) => stats.record_error(format!(
                "POST {}: reading the answer: {error}",
                shared.url.path()
            )),
        }
    }
    stats
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
        replication_factor,
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

/// Runs `herald bench produce`.
pub async fn run(server: &str, args: BenchProduceArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(
        args.raw || args.batch_size > 0,
        "--batch-size must be at least 1"
    );
    let mode = match (args.raw, args.bytes) {
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
    let mut apis = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        apis.push(Api::new(server)?);
    }
    futures::future::join_all(apis.iter().map(warm_up)).await;
    anyhow::ensure!(
        !(args.raw && args.keys > 0),
        "--keys needs JSON bodies (not --raw)"
    );
    let bodies = Bodies::build(
        args.messages,
        per_request,
        args.message_size,
        mode,
        args.keys,
    );
    let params = json!({
        "topic": args.topic,
        "partitions": partitions,
        "message_size": args.message_size,
        "batch_size": per_request,
        "connections": args.connections,
        "acks": args.acks.as_str(),
        "mode": mode.name(),
        "rate": rate,
        "keys": args.keys,
    });

    // Everything is ready: the clock and the pacer's schedule start now.
    let started = Instant::now();
    let shared = Arc::new(Shared {
        url: admin.produce_url(&args.topic, args.acks),
        mode,
        bodies,
        budget: Budget::new(args.messages),
        pacer: rate.and_then(|rate| Pacer::starting_at(rate, started)),
        message_size: args.message_size as u64,
        abort: AtomicBool::new(false),
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
    use serde_json::Value;

    #[test]
    fn json_string_bodies_have_exact_sizes() {
        let body = request_body(3, 100, 1, BodyMode::JsonString);
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        let messages = parsed["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        for message in messages {
            assert_eq!(message["value"].as_str().unwrap().len(), 100);
        }
        assert_ne!(messages[0], messages[1], "values differ");
    }

    #[test]
    fn keyed_bodies_send_every_key() {
        let bodies = Bodies::build(100_000, 100, 10, BodyMode::JsonString, 1000);
        assert_eq!(bodies.full.len(), 10);
        let mut keys = std::collections::BTreeSet::new();
        for body in &bodies.full {
            let parsed: Value = serde_json::from_slice(body).unwrap();
            for message in parsed["messages"].as_array().unwrap() {
                keys.insert(message["key"].as_str().unwrap().to_string());
                assert_eq!(message["value"].as_str().unwrap().len(), 10);
            }
        }
        assert_eq!(keys.len(), 1000);
        assert!(keys.contains("k0") && keys.contains("k999"));
    }

    #[test]
    fn base64_bodies_decode_to_the_size() {
        let body = request_body(2, 1000, 1, BodyMode::JsonBase64);
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        let encoded = parsed["messages"][1]["value_b64"].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(decoded.len(), 1000);
    }

    #[test]
    fn raw_bodies_are_the_value() {
        assert_eq!(request_body(1, 64, 1, BodyMode::Raw).len(), 64);
    }

    #[test]
    fn bodies_cover_the_remainder() {
        let bodies = Bodies::build(2500, 1000, 10, BodyMode::JsonString, 0);
        assert_eq!(bodies.full.len(), DISTINCT_BODIES);
        let count = |body: Bytes| {
            let parsed: Value = serde_json::from_slice(&body).unwrap();
            parsed["messages"].as_array().unwrap().len()
        };
        assert_eq!(count(bodies.get(1000, 5)), 1000);
        assert_eq!(count(bodies.get(500, 0)), 500);
        assert!(Bodies::build(2000, 1000, 10, BodyMode::Raw, 0)
            .remainder
            .is_none());
    }
}
