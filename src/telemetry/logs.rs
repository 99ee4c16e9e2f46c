//! The process's tracing subscriber: log lines, as text or as JSON lines that carry the
//! current span's fields (a request's `request_id` and `trace_id`).

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, TelemetryConfig};

/// Installs the global subscriber per `config`: `RUST_LOG` filters (default `info`), lines in
/// the configured format. Does nothing if a global subscriber is already set (tests, embedded
/// nodes).
pub fn init_logging(config: &TelemetryConfig) {
    let json = match config.log_format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stdout().is_terminal(),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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
    let _ = tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .try_init();
}
