//! `herald bench group`: how fast a consumer group of `--members` members reads a topic,
//! each polling its partitions and committing after every poll (at-least-once), or with
//! `--auto-commit`. Compare with `herald bench consume` on the same topic in the same run: the
//! difference is what group coordination costs (a heartbeat per poll, plus the commits; each
//! poll continues from the previous answer's cursor, which costs no write).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::produce::warm_up;
use super::stats::{Report, WorkerStats};
use crate::cli::client::Api;

/// A member stops after this many empty polls in a row (the topic is drained).
const EMPTY_POLLS_TO_STOP: u32 = 3;

/// Options of `herald bench group`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchGroupArgs {
    /// Topic to read (fill it first with `herald bench produce`).
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Group members, each with its own connection.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Messages per poll (shared by the member's partitions).
    #[arg(long, default_value_t = 1000)]
    pub max_messages: u32,
    /// Stop once the group has read this many messages (or the topic is drained).
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    /// Commit inside each poll (at-most-once) instead of after it.
    #[arg(long)]
    pub auto_commit: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Deserialize)]
struct Polled<'a> {
    #[serde(borrow)]
    messages: Vec<PolledMessage<'a>>,
    generation: u64,
    cursor: String,
}

#[derive(Debug, Deserialize)]
struct PolledMessage<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    partition: u32,
    offset: u64,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

/// One member: joins, polls and commits until the group read enough or nothing is left.
async fn member(
    api: Api,
    args: Arc<BenchGroupArgs>,
    group: Arc<str>,
    read: Arc<AtomicU64>,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats::new();
    let joined = api.join_group(&group, &[&args.topic], 30_000).await?;
    let poll_url = api.poll_url(&group, &joined.member_id);
    let mut cursor: Option<String> = None;
    let mut empty_in_a_row = 0;
    while read.load(Ordering::Relaxed) < args.messages && empty_in_a_row < EMPTY_POLLS_TO_STOP {
        let started = Instant::now();
        let body = json!({"max_messages": args.max_messages, "auto_commit": args.auto_commit, "cursor": cursor});
        let request = api.http().post(poll_url.clone()).json(&body);
        let answer = match api.authorized(request).await.send().await {
            Ok(response) if response.status().is_success() => response.bytes().await,
            Ok(response) => {
                stats.record_error(format!("poll: {}", response.status()));
                continue;
            }
            Err(error) => {
                stats.record_error(format!("poll: {error}"));
                continue;
            }
        };
        let Ok(answer) = answer else {
            stats.record_error("poll: reading the answer");
            continue;
        };
        let polled: Polled<'_> = serde_json::from_slice(&answer)?;
        cursor = Some(polled.cursor.clone());
        if polled.messages.is_empty() {
            empty_in_a_row += 1;
            continue;
        }
        empty_in_a_row = 0;
        let count = polled.messages.len() as u64;
        let bytes: u64 = polled
            .messages
            .iter()
            .map(|message| message.value.map_or(0, |value| value.get().len() as u64))
            .sum();
        if !args.auto_commit {
            let mut next: BTreeMap<(&str, u32), u64> = BTreeMap::new();
            for message in &polled.messages {
                let entry = next.entry((&message.topic, message.partition)).or_default();
                *entry = (*entry).max(message.offset + 1);
            }
            let offsets: Vec<_> = next
                .iter()
                .map(|((topic, partition), offset)| {
                    json!({"topic": topic, "partition": partition, "offset": offset})
                })
                .collect();
            let commit = json!({"member_id": joined.member_id, "generation": polled.generation, "offsets": offsets});
            if let Err(error) = api.commit_offsets(&group, &commit).await {
                stats.record_error(format!("commit: {error}"));
            }
        }
        stats.record_success(count, bytes, started.elapsed());
        read.fetch_add(count, Ordering::Relaxed);
    }
    let _ = api.leave_group(&group, &joined.member_id).await;
    Ok(stats)
}

/// Runs `herald bench group`.
pub async fn run(server: &str, args: BenchGroupArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(args.members > 0, "--members must be at least 1");
    anyhow::ensure!(args.max_messages > 0, "--max-messages must be at least 1");
    let admin = Api::new(server)?;
    let topic = admin.get_topic(&args.topic).await?;
    let group: Arc<str> = Arc::from(format!("bench-{}", unique_suffix()).as_str());
    let mut apis = Vec::with_capacity(args.members);
    for _ in 0..args.members {
        apis.push(Api::new(server)?);
    }
    futures::future::join_all(apis.iter().map(warm_up)).await;
    let params = json!({
        "topic": args.topic,
        "partitions": topic.partitions.len(),
        "members": args.members,
        "max_messages": args.max_messages,
        "auto_commit": args.auto_commit,
    });
    let args = Arc::new(args);
    let read = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = apis
        .into_iter()
        .map(|api| {
            tokio::spawn(member(
                api,
                Arc::clone(&args),
                Arc::clone(&group),
                Arc::clone(&read),
            ))
        })
        .collect();
    let mut total = WorkerStats::new();
    for handle in handles {
        let stats = handle
            .await
            .map_err(|error| anyhow::anyhow!("a bench member failed: {error}"))??;
        total.merge(&stats)?;
    }
    // Includes each member's last few empty polls (max_wait_ms 0: a few ms each).
    Ok(Report::new("group", params, &total, started.elapsed()))
}

/// A suffix that keeps benchmark groups of different runs apart.
pub fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos();
    format!("{:x}-{}", nanos, std::process::id())
}
