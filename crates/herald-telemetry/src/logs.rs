//! The process's tracing subscriber: log lines, as text or as JSON lines that carry the
//! current span's fields (a request's `request_id` and `trace_id`), and, when configured, the
//! export of spans over OTLP ([`super::otlp`]).

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::otlp::{self, TracerGuard};
use crate::config::{LogFormat, TelemetryConfig};

/// Installs the global subscriber per `config`: `RUST_LOG` filters (default
/// [`super::DEFAULT_LOG_FILTER`]) the lines,
/// written in the configured format; spans go to the OTLP endpoint if one is set, and the
/// answered guard keeps that export running (drop it last, to flush it). Does nothing if a
/// global subscriber is already set (tests, embedded nodes).
pub fn init_logging(config: &TelemetryConfig, node_id: u64) -> anyhow::Result<Option<TracerGuard>> {
    let json = match config.log_format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stdout().is_terminal(),
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(super::DEFAULT_LOG_FILTER));
    let lines = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stdout().is_terminal())
            .boxed()
    };
    let (export, guard) = match otlp::export_layer(config, node_id)? {
        Some((layer, guard)) => (Some(layer), Some(guard)),
        None => (None, None),
    };
    let installed = tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(export)
        .try_init();
    if installed.is_err() {
        return Ok(None);
    }
    Ok(guard)
}
