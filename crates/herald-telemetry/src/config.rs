//! `[telemetry]`: the log format and the export of spans over OTLP (`docs/operations.md` §
//! Logs and traces).

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
    /// Where spans are exported, over OTLP/HTTP with protobuf bodies: the collector's base URL
    /// (`http://collector:4318`, which sends to `/v1/traces`) or a full URL with its own path.
    /// Unset (the default), nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// The share of traces a node starts that it records and exports, 0.0 to 1.0 (default 1.0,
    /// every one). A request whose `traceparent` says its trace is sampled (or not) is
    /// recorded (or not) whatever this says, so one trace is never half exported.
    pub otlp_sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log_format: LogFormat::Auto,
            otlp_endpoint: None,
            otlp_sample_ratio: 1.0,
        }
    }
}

impl TelemetryConfig {
    /// Checks the section; the error says which field is wrong and why (the node's
    /// configuration reports it as an invalid configuration).
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.otlp_sample_ratio) {
            return Err(format!(
                "telemetry.otlp_sample_ratio must be 0.0 to 1.0, not {}",
                self.otlp_sample_ratio
            ));
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            let parsed = reqwest::Url::parse(endpoint);
            let http = matches!(&parsed, Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host());
            if !http {
                return Err(format!(
                    "telemetry.otlp_endpoint must be an http:// or https:// URL, not {endpoint:?}"
                ));
            }
        }
        Ok(())
    }

    /// The URL spans are posted to: the endpoint as given when it names a path, else its
    /// `/v1/traces` (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read by every OpenTelemetry SDK).
    pub fn otlp_traces_url(&self) -> Option<String> {
        let endpoint = self.otlp_endpoint.as_deref()?;
        let url = reqwest::Url::parse(endpoint).ok()?;
        if url.path().trim_end_matches('/').is_empty() {
            Some(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        } else {
            Some(endpoint.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_endpoint(endpoint: &str) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: Some(endpoint.to_string()),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn a_base_url_sends_to_v1_traces_and_a_full_one_as_given() {
        for (endpoint, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            (
                "https://otel.example/custom/traces",
                "https://otel.example/custom/traces",
            ),
        ] {
            let config = with_endpoint(endpoint);
            assert!(config.validate().is_ok());
            assert_eq!(config.otlp_traces_url().as_deref(), Some(url));
        }
        assert_eq!(TelemetryConfig::default().otlp_traces_url(), None);
    }

    #[test]
    fn a_bad_endpoint_or_ratio_is_refused() {
        for endpoint in ["127.0.0.1:4318", "grpc://x:4317", "http://bad host/"] {
            assert!(with_endpoint(endpoint).validate().is_err(), "{endpoint}");
        }
        for ratio in [-0.1, 1.5, f64::NAN] {
            let config = TelemetryConfig {
                otlp_sample_ratio: ratio,
                ..TelemetryConfig::default()
            };
            assert!(config.validate().is_err(), "{ratio}");
        }
    }
}
