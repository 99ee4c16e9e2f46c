//! `herald bench queue --memory`: what a subscription with a large unacked backlog costs the
//! node in memory. Fills the topic (e.g. 1,000,000 small messages), recreates the subscription,
//! and pulls without acking until nothing more is leased: each partition's state stops at its
//! window (`MAX_WINDOW` entries read and not done), the rest of the backlog stays in
//! the log. Reports the node's resident memory (`VmRSS` of `/proc/PID/status`, so the node must
//! run on this machine) before the first pull and after the last, and the subscription's counts.

use serde::Serialize;
use serde_json::{json, Value};

use super::produce::ensure_topic;
use super::queue::{fill, fresh_subscription, BenchQueueArgs};
use crate::cli::client::Api;

/// How long a pull waits for more before the subscription is taken as full.
const LAST_PULL_WAIT_MS: u64 = 1_000;
/// A bound on the pulls (1,000 messages each), far above what the windows allow.
const MAX_PULLS: u64 = 100_000;

/// The figures of a `bench queue --memory` run; also its `--json` form.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub params: Value,
    /// Messages leased (never acked) when pulls stopped getting any.
    pub leased: u64,
    pub rss_before_kb: u64,
    pub rss_after_kb: u64,
    pub rss_delta_kb: i64,
    /// `GET /v1/subscriptions/{sub}` afterwards.
    pub subscription: Value,
}

impl MemoryReport {
    pub fn render_text(&self) -> String {
        format!(
            "bench queue --memory: {}\n  leased (unacked)   {}\n  backlog            {}\n  RSS before         {} kB\n  RSS after          {} kB\n  RSS delta          {} kB\n",
            self.params,
            self.leased,
            self.subscription["backlog"],
            self.rss_before_kb,
            self.rss_after_kb,
            self.rss_delta_kb
        )
    }
}

/// `VmRSS` of process `pid`, in kB.
pub fn rss_kb(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)
        .map_err(|error| anyhow::anyhow!("reading {path}: {error}"))?;
    parse_rss_kb(&status).ok_or_else(|| anyhow::anyhow!("no VmRSS line in {path}"))
}

fn parse_rss_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
}

/// Runs `herald bench queue --memory`.
pub async fn run(server: &str, args: BenchQueueArgs) -> anyhow::Result<MemoryReport> {
    let pid = args
        .pid
        .ok_or_else(|| anyhow::anyhow!("--memory needs --pid, the node's process id"))?;
    let api = Api::new(server)?;
    let partitions =
        ensure_topic(&api, &args.topic, args.partitions, args.replication_factor).await? as u32;
    fill(&api, &args.topic, args.messages, args.message_size).await?;
    fresh_subscription(&api, &args.subscription, &args.topic).await?;
    let rss_before_kb = rss_kb(pid)?;
    let mut leased = 0u64;
    for _ in 0..MAX_PULLS {
        let pulled = api
            .pull(&args.subscription, 1_000, LAST_PULL_WAIT_MS)
            .await?;
        if pulled.is_empty() {
            break;
        }
        leased += pulled.len() as u64;
    }
    let rss_after_kb = rss_kb(pid)?;
    let subscription = api.get_subscription(&args.subscription).await?;
    Ok(MemoryReport {
        params: json!({
            "topic": args.topic,
            "partitions": partitions,
            "messages": args.messages,
            "message_size": args.message_size,
        }),
        leased,
        rss_before_kb,
        rss_after_kb,
        rss_delta_kb: rss_after_kb as i64 - rss_before_kb as i64,
        subscription,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_from_the_status_file() {
        let status = "Name:\therald\nVmPeak:\t  900 kB\nVmRSS:\t   123456 kB\nThreads:\t9\n";
        assert_eq!(parse_rss_kb(status), Some(123_456));
        assert_eq!(parse_rss_kb("Name: x\n"), None);
        // This process has one.
        assert!(rss_kb(std::process::id()).unwrap() > 0);
    }
}
