//! `herald bench sink` (hidden): an HTTP server that takes produce requests and does nothing with
//! them, answering as a produce would. `herald bench produce` against it measures what the load
//! generator, the loopback and the HTTP exchange can do on this machine with no broker behind
//! them: the ceiling a real node's figures are compared with (`make bench`).
//!
//! It answers just what `bench produce` asks: `GET /healthz` and `/readyz`, `GET /v1/topics/{topic}` (a topic of
//! `--partitions` partitions, each led by node 1), `POST /v1/topics` and
//! `POST /v1/topics/{topic}/messages`. A produce answer lists one offset per message, as a real
//! one does; the messages are counted (a JSON body's `"value` keys, or one per raw body), never
//! parsed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

/// Options of `herald bench sink`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchSinkArgs {
    /// Where to listen (loopback by default: the sink has no authentication).
    #[arg(long, default_value = "127.0.0.1:18090")]
    pub listen: SocketAddr,
    /// Partitions the sink's topics claim to have.
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// The largest request body taken, in bytes (a node's `max_body_bytes`).
    #[arg(long, default_value_t = 16 << 20)]
    pub max_body_bytes: usize,
}

struct Sink {
    partitions: u32,
    /// The next offset of every message, shared by all partitions: offsets only need to look
    /// like a produce's answer.
    next_offset: AtomicU64,
}

/// Runs the sink until the process is stopped.
pub async fn run(args: BenchSinkArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.partitions > 0, "--partitions must be at least 1");
    let sink = Arc::new(Sink {
        partitions: args.partitions,
        next_offset: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/v1/topics", post(create_topic))
        .route("/v1/topics/{topic}", get(topic))
        .route("/v1/topics/{topic}/messages", post(produce))
        // Stands in for an OTLP collector too (`--otlp-endpoint` at the sink), so the cost of
        // exporting spans is measured without a collector's own work.
        .route("/v1/traces", post(|| async { "" }))
        .layer(axum::extract::DefaultBodyLimit::max(args.max_body_bytes))
        .with_state(sink);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("bench sink listening on http://{}", listener.local_addr()?);
    // TCP_NODELAY as a node's client port has it: without it a small HTTP/2 answer waits
    // for the client's delayed ACK (about 40 ms), and the ceiling would not be one.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, app).await?;
    Ok(())
}

fn topic_json(sink: &Sink, name: &str) -> serde_json::Value {
    let partitions: Vec<_> = (0..sink.partitions)
        .map(|partition| {
            json!({"partition": partition, "leader": 1, "replicas": [1], "in_sync": [1],
                   "log_start_offset": 0, "high_watermark": 0})
        })
        .collect();
    json!({"name": name, "partitions": partitions, "replication_factor": 1, "config": {}})
}

async fn topic(State(sink): State<Arc<Sink>>, Path(name): Path<String>) -> impl IntoResponse {
    axum::Json(topic_json(&sink, &name))
}

async fn create_topic(State(sink): State<Arc<Sink>>, body: Bytes) -> impl IntoResponse {
    let name = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|spec| {
            spec.get("name")
                .and_then(|name| name.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    (StatusCode::CREATED, axum::Json(topic_json(&sink, &name)))
}

/// How many messages a produce body carries, without parsing it.
fn count_messages(headers: &HeaderMap, body: &[u8]) -> u64 {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !json {
        return 1;
    }
    let needle = b"\"value";
    body.windows(needle.len())
        .filter(|window| window == needle)
        .count() as u64
}

async fn produce(
    State(sink): State<Arc<Sink>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let count = count_messages(&headers, &body).max(1);
    let first = sink.next_offset.fetch_add(count, Ordering::Relaxed);
    let mut answer = String::with_capacity(16 + count as usize * 32);
    answer.push_str("{\"offsets\":[");
    for n in 0..count {
        if n > 0 {
            answer.push(',');
        }
        let partition = (first + n) % u64::from(sink.partitions);
        answer.push_str(&format!(
            "{{\"partition\":{partition},\"offset\":{}}}",
            first + n
        ));
    }
    answer.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_counted_without_parsing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        let body = br#"{"messages":[{"value":"a"},{"value_b64":"Yg=="},{"key":"k","value":"c"}]}"#;
        assert_eq!(count_messages(&headers, body), 3);
        headers.insert(
            header::CONTENT_TYPE,
            "application/octet-stream".parse().unwrap(),
        );
        assert_eq!(count_messages(&headers, b"\"value\"\"value\""), 1);
    }
}
