//! Measurements of a benchmark run and the report made from them.
//!
//! Every worker records into its own [`WorkerStats`] (no shared counters on the hot path); the
//! run merges them at the end into one [`Report`], printed as text or, with `--json`, as one JSON
//! object so scripts can take medians over several runs.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The highest latency the histogram tracks exactly: one hour, in microseconds. Slower requests
/// are clamped to it rather than lost.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// How many error messages a worker keeps as examples; the rest are only counted.
const ERROR_SAMPLES: usize = 5;

/// How many slow requests a run lists (`--slow-ms`); the rest are only in the percentiles.
const MAX_SLOW_REQUESTS: usize = 1000;

/// A request slower than the run's `--slow-ms`: when it started, counted from the start of the
/// run, and how long it took. Lined up against a node's log (flushes, elections), the start
/// times say what a latency spike coincided with.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct SlowRequest {
    pub at_ms: f64,
    pub latency_ms: f64,
}

/// What one worker measured.
#[derive(Debug, Clone)]
pub struct WorkerStats {
    /// Messages in successful (2xx) requests.
    pub messages: u64,
    /// Value bytes of those messages.
    pub value_bytes: u64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests: non-2xx answers and transport errors.
    pub errors: u64,
    /// Latency of successful requests, in microseconds.
    pub latency_us: Histogram<u64>,
    /// The first few error messages, to tell the user what went wrong.
    pub error_samples: Vec<String>,
    /// Requests over the run's `--slow-ms`, at most [`MAX_SLOW_REQUESTS`].
    pub slow: Vec<SlowRequest>,
}

impl Default for WorkerStats {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerStats {
    pub fn new() -> Self {
        WorkerStats {
            messages: 0,
            value_bytes: 0,
            requests: 0,
            errors: 0,
            // 1 µs to one hour at 3 significant digits: constant, valid bounds.
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("constant histogram bounds are valid"),
            error_samples: Vec::new(),
            slow: Vec::new(),
        }
    }

    /// Records a successful request carrying `messages` messages of `value_bytes` bytes in all.
    pub fn record_success(&mut self, messages: u64, value_bytes: u64, latency: Duration) {
        self.messages += messages;
        self.value_bytes += value_bytes;
        self.requests += 1;
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us
            .saturating_record(micros.clamp(1, MAX_LATENCY_US));
    }

    /// Lists a slow request that started `at` into the run and took `latency`.
    pub fn record_slow(&mut self, at: Duration, latency: Duration) {
        if self.slow.len() < MAX_SLOW_REQUESTS {
            self.slow.push(SlowRequest {
                at_ms: at.as_secs_f64() * 1000.0,
                latency_ms: latency.as_secs_f64() * 1000.0,
            });
        }
    }

    /// Records a failed request; keeps the message if there are few examples so far.
    pub fn record_error(&mut self, message: impl Into<String>) {
        self.errors += 1;
        if self.error_samples.len() < ERROR_SAMPLES {
            self.error_samples.push(message.into());
        }
    }

    /// Adds another worker's figures to these.
    pub fn merge(&mut self, other: &WorkerStats) -> anyhow::Result<()> {
        self.messages += other.messages;
        self.value_bytes += other.value_bytes;
        self.requests += other.requests;
        self.errors += other.errors;
        self.latency_us
            .add(&other.latency_us)
            .map_err(|error| anyhow::anyhow!("could not merge latency histograms: {error:?}"))?;
        for sample in &other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample.clone());
            }
        }
        let room = MAX_SLOW_REQUESTS.saturating_sub(self.slow.len());
        self.slow.extend(other.slow.iter().take(room));
        Ok(())
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The figures of one run; also its `--json` form.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `produce` or `consume`.
    pub bench: &'static str,
    /// The options of the run, so a JSON line is self-describing.
    pub params: serde_json::Value,
    pub messages: u64,
    pub seconds: f64,
    pub messages_per_sec: f64,
    /// Value bytes per second, in MB (10^6 bytes).
    pub mb_per_sec: f64,
    pub requests: u64,
    pub requests_per_sec: f64,
    pub latency_ms: Latency,
    pub errors: u64,
    pub error_samples: Vec<String>,
    /// Requests over `--slow-ms`, in the order they started (absent without the option).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slow_requests: Vec<SlowRequest>,
}

/// Microseconds to milliseconds.
fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// `count / seconds`, 0 for an empty run rather than NaN or infinity.
fn per_second(count: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count / seconds
    } else {
        0.0
    }
}

impl Report {
    pub fn new(
        bench: &'static str,
        params: serde_json::Value,
        stats: &WorkerStats,
        elapsed: Duration,
    ) -> Self {
        let seconds = elapsed.as_secs_f64();
        let histogram = &stats.latency_us;
        Report {
            bench,
            params,
            messages: stats.messages,
            seconds,
            messages_per_sec: per_second(stats.messages as f64, seconds),
            mb_per_sec: per_second(stats.value_bytes as f64 / 1e6, seconds),
            requests: stats.requests,
            requests_per_sec: per_second(stats.requests as f64, seconds),
            latency_ms: Latency {
                p50: ms(histogram.value_at_quantile(0.5)),
                p99: ms(histogram.value_at_quantile(0.99)),
                p999: ms(histogram.value_at_quantile(0.999)),
                max: ms(histogram.max()),
            },
            errors: stats.errors,
            error_samples: stats.error_samples.clone(),
            slow_requests: {
                let mut slow = stats.slow.clone();
                slow.sort_by(|one, other| one.at_ms.total_cmp(&other.at_ms));
                slow
            },
        }
    }

    /// The human-readable report.
    pub fn render_text(&self) -> String {
        let mut out = format!("bench {}: {}\n", self.bench, render_params(&self.params));
        out.push_str(&format!("  messages      {}\n", self.messages));
        out.push_str(&format!("  seconds       {:.3}\n", self.seconds));
        out.push_str(&format!("  messages/s    {:.0}\n", self.messages_per_sec));
        out.push_str(&format!(
            "  MB/s          {:.2}   (value bytes, 1 MB = 10^6 B)\n",
            self.mb_per_sec
        ));
        out.push_str(&format!("  requests      {}\n", self.requests));
        out.push_str(&format!("  requests/s    {:.1}\n", self.requests_per_sec));
        let l = &self.latency_ms;
        out.push_str(&format!(
            "  latency ms    p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n",
            l.p50, l.p99, l.p999, l.max
        ));
        out.push_str(&format!("  errors        {}\n", self.errors));
        for sample in &self.error_samples {
            out.push_str(&format!("    e.g. {sample}\n"));
        }
        if !self.slow_requests.is_empty() {
            out.push_str(&format!(
                "  slow requests {} (started at ms into the run: took ms)\n",
                self.slow_requests.len()
            ));
            for slow in &self.slow_requests {
                out.push_str(&format!("    {:.1}: {:.3}\n", slow.at_ms, slow.latency_ms));
            }
        }
        out
    }
}

/// `key=value` pairs of a JSON object, in its order, for the report's first line.
fn render_params(params: &serde_json::Value) -> String {
    match params.as_object() {
        Some(map) => map
            .iter()
            .filter(|(_, value)| !value.is_null())
            .map(|(key, value)| match value {
                serde_json::Value::String(text) => format!("{key}={text}"),
                other => format!("{key}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn report_computes_rates_and_percentiles() {
        let mut a = WorkerStats::new();
        let mut b = WorkerStats::new();
        for i in 1..=1000u64 {
            a.record_success(10, 1000, Duration::from_micros(i * 10));
        }
        b.record_success(10, 1000, Duration::from_secs(2));
        b.record_error("POST /v1/topics/t/messages failed: HTTP 503");
        a.merge(&b).unwrap();
        let report = Report::new("produce", json!({"topic": "t"}), &a, Duration::from_secs(2));
        assert_eq!(report.messages, 10_010);
        assert_eq!(report.requests, 1001);
        assert_eq!(report.errors, 1);
        assert!((report.messages_per_sec - 5005.0).abs() < 1e-9);
        assert!((report.mb_per_sec - 1_001_000.0 / 1e6 / 2.0).abs() < 1e-9);
        // p50 of 10 µs .. 10 ms in 10 µs steps is about 5 ms (3 significant digits).
        assert!(
            (report.latency_ms.p50 - 5.0).abs() < 0.05,
            "{:?}",
            report.latency_ms
        );
        assert!(
            (report.latency_ms.max - 2000.0).abs() < 2.0,
            "{:?}",
            report.latency_ms
        );
        let text = report.render_text();
        assert!(text.starts_with("bench produce: topic=t\n"), "{text}");
        assert!(text.contains("errors        1"), "{text}");
        let as_json = serde_json::to_value(&report).unwrap();
        assert_eq!(as_json["latency_ms"]["p999"], json!(report.latency_ms.p999));
        assert!(as_json.get("slow_requests").is_none(), "{as_json}");
    }

    #[test]
    fn slow_requests_are_listed_in_start_order_and_capped() {
        let mut a = WorkerStats::new();
        let mut b = WorkerStats::new();
        a.record_slow(Duration::from_millis(900), Duration::from_millis(40));
        b.record_slow(Duration::from_millis(100), Duration::from_millis(85));
        a.merge(&b).unwrap();
        let report = Report::new("produce", json!({}), &a, Duration::from_secs(1));
        let starts: Vec<f64> = report.slow_requests.iter().map(|slow| slow.at_ms).collect();
        assert_eq!(starts, vec![100.0, 900.0]);
        assert_eq!(report.slow_requests[0].latency_ms, 85.0);
        assert!(report.render_text().contains("slow requests 2"));

        let mut many = WorkerStats::new();
        for i in 0..MAX_SLOW_REQUESTS + 5 {
            many.record_slow(Duration::from_millis(i as u64), Duration::from_millis(30));
        }
        many.merge(&a).unwrap();
        assert_eq!(many.slow.len(), MAX_SLOW_REQUESTS);
    }

    #[test]
    fn empty_runs_do_not_divide_by_zero() {
        let report = Report::new("consume", json!({}), &WorkerStats::new(), Duration::ZERO);
        assert_eq!(report.messages_per_sec, 0.0);
        assert_eq!(
            report.latency_ms,
            Latency {
                p50: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0
            }
        );
    }

    #[test]
    fn error_samples_are_bounded() {
        let mut stats = WorkerStats::new();
        for i in 0..20 {
            stats.record_error(format!("error {i}"));
        }
        assert_eq!(stats.errors, 20);
        assert_eq!(stats.error_samples.len(), ERROR_SAMPLES);
    }
}
