//! `herald bench ws`: the WebSocket transport's figures (issue 13).
//!
//! - `latency`: single-message HTTP produces (acks=all) at `--rate`/s through `--produce-server`
//!   (default `--server`), delivered to one WebSocket subscriber on `--server`: p50/p99/p99.9
//!   from each message's scheduled send time to its arrival (same machine, same clock).
//! - `publish`: `--publish-frames` batches of `--batch` messages of `--publish-size` bytes
//!   (1 KB x 1000 by default) as WebSocket `publish` frames, then the same batches as HTTP
//!   produces, over the same number of connections; the ratio of the two.
//! - `idle`: `--idle` subscribed sockets that receive nothing: the node's RSS before and after
//!   (`--pid`, read from `/proc`) per connection, and its CPU over `--idle-seconds`.
//! - `fanout`: `--fanout-subscribers` sockets on one partition, `--fanout-messages` produced:
//!   messages delivered per second in all.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::produce::ensure_topic;
use super::queue_memory::rss_kb;
use super::ws_client::ws_url;
use super::ws_measure::{self, cpu_seconds};
use crate::cli::client::Api;

/// What `--only` may name.
const MEASUREMENTS: [&str; 4] = ["latency", "publish", "idle", "fanout"];

/// Options of `herald bench ws`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchWsArgs {
    /// The measurements to run, comma-separated: latency, publish, idle, fanout.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "latency,publish,idle,fanout"
    )]
    pub only: Vec<String>,
    /// Where the latency and fan-out messages are produced (default: --server, the node the
    /// sockets are on).
    #[arg(long)]
    pub produce_server: Option<String>,
    /// Topic prefix; `<prefix>`, `<prefix>-publish` and `<prefix>-fanout` are created if missing.
    #[arg(long, default_value = "bench-ws")]
    pub topic: String,
    /// Replication factor of the topics when they have to be created.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: u16,
    /// Produce rate (messages/s) of the latency measurement.
    #[arg(long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// Messages of the latency measurement.
    #[arg(long, default_value_t = 50_000)]
    pub latency_messages: u64,
    /// Concurrent HTTP producers of the latency measurement.
    #[arg(long, default_value_t = 64)]
    pub producers: usize,
    /// Batches (frames or requests) of the publish measurement, each way.
    #[arg(long, default_value_t = 200)]
    pub publish_frames: u64,
    /// Messages per batch of the publish measurement.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Value size in bytes of the publish measurement (1000 x 1000 B fits the default 1 MiB
    /// `ws.max_frame_bytes` with its JSON).
    #[arg(long, default_value_t = 1000)]
    pub publish_size: usize,
    /// Connections (sockets, or HTTP connections) of the publish measurement.
    #[arg(long, default_value_t = 4)]
    pub publish_connections: usize,
    /// Idle subscribed sockets (mind `ws.max_connections`, `max_connections` and `ulimit -n`).
    #[arg(long, default_value_t = 10_000)]
    pub idle: usize,
    /// How long the node's CPU is watched with the idle sockets open.
    #[arg(long, default_value_t = 10)]
    pub idle_seconds: u64,
    /// Subscribers of the fan-out measurement, all on partition 0.
    #[arg(long, default_value_t = 1000)]
    pub fanout_subscribers: usize,
    /// Messages of the fan-out measurement (100 B each).
    #[arg(long, default_value_t = 10_000)]
    pub fanout_messages: u64,
    /// The node's process id (`--server`'s), for its memory and CPU from /proc.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The figures of a `bench ws` run; also its `--json` form. A measurement not run is null.
#[derive(Debug, Clone, Serialize)]
pub struct WsReport {
    pub params: Value,
    pub latency: Option<Value>,
    pub publish: Option<Value>,
    pub idle: Option<Value>,
    pub fanout: Option<Value>,
}

impl WsReport {
    pub fn render_text(&self) -> String {
        let mut text = format!("bench ws: {}\n", self.params);
        for (name, figures) in [
            ("latency", &self.latency),
            ("publish", &self.publish),
            ("idle", &self.idle),
            ("fanout", &self.fanout),
        ] {
            if let Some(figures) = figures {
                text += &format!("  {name:<8} {figures}\n");
            }
        }
        text
    }
}

/// Runs `herald bench ws`.
pub async fn run(server: &str, args: BenchWsArgs) -> anyhow::Result<WsReport> {
    if let Some(unknown) = args
        .only
        .iter()
        .find(|only| !MEASUREMENTS.contains(&only.as_str()))
    {
        anyhow::bail!("--only: unknown measurement `{unknown}` (one of {MEASUREMENTS:?})");
    }
    let api = Api::new(server)?;
    let producer = Api::new(args.produce_server.as_deref().unwrap_or(server))?;
    let url = ws_url(server)?;
    let wants = |name: &str| args.only.iter().any(|only| only == name);
    let fanout_topic = format!("{}-fanout", args.topic);
    let publish_topic = format!("{}-publish", args.topic);
    let mut report = WsReport {
        params: json!({
            "server": server,
            "produce_server": args.produce_server.as_deref().unwrap_or(server),
            "rate": args.rate,
            "latency_messages": args.latency_messages,
            "publish": format!("{} x {} x {} B", args.publish_frames, args.batch, args.publish_size),
            "idle": args.idle,
            "fanout": format!("{} subscribers x {} messages", args.fanout_subscribers, args.fanout_messages),
        }),
        latency: None,
        publish: None,
        idle: None,
        fanout: None,
    };
    if wants("latency") {
        ensure_topic(&api, &args.topic, 1, args.replication_factor).await?;
        let figures = ws_measure::latency(
            &producer,
            &url,
            &args.topic,
            args.rate,
            args.latency_messages,
            args.producers,
            100,
        )
        .await?;
        let ms = |q: f64| figures.histogram.value_at_quantile(q) as f64 / 1000.0;
        report.latency = Some(json!({
            "p50_ms": ms(0.5), "p99_ms": ms(0.99), "p999_ms": ms(0.999),
            "max_ms": figures.histogram.max() as f64 / 1000.0,
            "received": figures.received, "produce_errors": figures.produce_errors,
            "achieved_rate": figures.received as f64 / figures.seconds.max(1e-9),
        }));
    }
    if wants("publish") {
        ensure_topic(&api, &publish_topic, 1, args.replication_factor).await?;
        let (frames, batch, size, connections) = (
            args.publish_frames,
            args.batch,
            args.publish_size,
            args.publish_connections,
        );
        let ws =
            ws_measure::publish_ws(&url, &publish_topic, frames, batch, size, connections).await?;
        let http = ws_measure::publish_http(&api, &publish_topic, frames, batch, size, connections)
            .await?;
        report.publish = Some(json!({
            "ws_messages_per_sec": ws.messages_per_sec,
            "http_messages_per_sec": http.messages_per_sec,
            "ws_mb_per_sec": ws.messages_per_sec * size as f64 / 1e6,
            "ratio_ws_to_http": ws.messages_per_sec / http.messages_per_sec.max(1e-9),
            "failed_batches": ws.failed_batches + http.failed_batches,
        }));
    }
    if wants("idle") {
        ensure_topic(&api, &args.topic, 1, args.replication_factor).await?;
        let rss_before_kb = args.pid.map(rss_kb).transpose()?;
        let sockets = ws_measure::open_subscribers(&url, &args.topic, None, args.idle).await?;
        let readers = ws_measure::keep_reading(sockets);
        // Let the node settle (allocations of the last sockets, the first pings) before it is
        // measured idle.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss_after_kb = args.pid.map(rss_kb).transpose()?;
        let cpu_before = args.pid.map(cpu_seconds).transpose()?;
        tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
        let cpu_after = args.pid.map(cpu_seconds).transpose()?;
        let open = readers.len();
        drop(readers);
        let per_connection_kb = match (rss_before_kb, rss_after_kb) {
            (Some(before), Some(after)) => {
                Some((after as f64 - before as f64) / args.idle.max(1) as f64)
            }
            _ => None,
        };
        let cpu_percent = match (cpu_before, cpu_after) {
            (Some(before), Some(after)) => {
                Some(100.0 * (after - before) / args.idle_seconds.max(1) as f64)
            }
            _ => None,
        };
        report.idle = Some(json!({
            "connections": open,
            "rss_before_kb": rss_before_kb, "rss_after_kb": rss_after_kb,
            "kb_per_connection": per_connection_kb, "cpu_percent": cpu_percent,
        }));
    }
    if wants("fanout") {
        ensure_topic(&api, &fanout_topic, 1, args.replication_factor).await?;
        let figures = ws_measure::fan_out(
            &producer,
            &url,
            &fanout_topic,
            args.fanout_subscribers,
            args.fanout_messages,
            100,
        )
        .await?;
        report.fanout = Some(json!({
            "delivered": figures.delivered, "missing": figures.missing,
            "seconds": figures.seconds,
            "delivered_per_sec": figures.delivered as f64 / figures.seconds.max(1e-9),
        }));
    }
    Ok(report)
}
