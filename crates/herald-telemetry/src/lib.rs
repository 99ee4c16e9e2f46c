//! Process-wide telemetry: the tracing subscriber (logs, and spans exported over OTLP), W3C
//! trace context and the Prometheus metrics recorder.
//!
//! Both are global and installed once; the functions are safe to call again (tests, embedded
//! nodes), answering the already-installed state.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

pub mod config;
pub mod handles;
mod logs;
pub mod otlp;
pub mod trace_context;

pub use logs::init_logging;

/// Buckets of every `*_seconds` histogram: 100 µs to 60 s, covering fast fetches through long polls.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// What is logged when `RUST_LOG` is not set: Herald's own lines from `info` up, openraft's
/// from `warn` up. openraft logs every vote, election and shutdown step at `info`, and its
/// startup lines print whole state structs, once per raft group: a node with many partitions
/// would log thousands of them. `RUST_LOG=info` brings them back.
pub const DEFAULT_LOG_FILTER: &str = "info,openraft=warn";

/// How often histograms are drained and idle state is pruned.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs a text `fmt` subscriber filtered by `RUST_LOG` (default [`DEFAULT_LOG_FILTER`]), for tests and
/// tools; `herald serve` uses [`init_logging`] with its configuration. Does nothing if a
/// global subscriber is already set.
pub fn init_tracing() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    // Colours only on a terminal: logs redirected to a file or a collector stay plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .try_init();
}

/// Installs the Prometheus recorder as the global `metrics` recorder, once, and answers its
/// handle (the same one on every call). Also starts the thread that runs the recorder's upkeep.
pub fn init_metrics() -> anyhow::Result<PrometheusHandle> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    static INSTALL: Mutex<()> = Mutex::new(());

    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let _guard = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), SECONDS_BUCKETS)
        .context("configuring histogram buckets")?
        .install_recorder()
        .context("installing the Prometheus metrics recorder")?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".to_string())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_INTERVAL);
            upkeep.run_upkeep();
        })
        .context("starting the metrics upkeep thread")?;
    handles::recorder_installed();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_idempotent() {
        init_tracing();
        init_tracing();
        let first = init_metrics().expect("install");
        let second = init_metrics().expect("again");
        metrics::counter!("herald_telemetry_test_total").increment(1);
        metrics::histogram!("herald_telemetry_test_seconds").record(0.003);
        for handle in [first, second] {
            let text = handle.render();
            assert!(text.contains("herald_telemetry_test_total 1"), "{text}");
            assert!(
                text.contains("herald_telemetry_test_seconds_bucket"),
                "{text}"
            );
        }
    }
}
