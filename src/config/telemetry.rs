//! `[telemetry]`: the log format (`docs/operations.md` § Logs and traces).

use serde::Deserialize;

/// How log lines are written to stdout.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// JSON lines when stdout is not a terminal (a file, a pipe, a collector), text on one.
    #[default]
    Auto,
    /// Human-readable text.
    Text,
    /// One JSON object per line, with the current span's fields (the request's `trace_id`).
    Json,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `auto`, `text` or `json`.
    pub log_format: LogFormat,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log_format: LogFormat::Auto,
        }
    }
}
