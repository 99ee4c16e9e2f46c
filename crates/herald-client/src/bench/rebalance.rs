//! `herald bench rebalance`: how long a consumer group takes to rebalance when one member
//! leaves. A group of `--members` members shares a topic of `--partitions` partitions; one
//! member leaves (`DELETE`), and the clock stops when every remaining member's heartbeat shows
//! the new generation and together they own every partition exactly once. Repeated `--runs`
//! times with a fresh group; the median is the figure.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::group::unique_suffix;
use crate::cli::client::{Api, CreateTopic};

/// How long one rebalance may take before the run is called failed.
const REBALANCE_DEADLINE: Duration = Duration::from_secs(30);

/// Options of `herald bench rebalance`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchRebalanceArgs {
    /// Topic the group reads; created with `--partitions` partitions if missing.
    #[arg(long, default_value = "bench-rebalance")]
    pub topic: String,
    #[arg(long, default_value_t = 30)]
    pub partitions: u32,
    #[arg(long, default_value_t = 10)]
    pub members: usize,
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct RebalanceReport {
    pub bench: &'static str,
    pub params: serde_json::Value,
    /// Each run's rebalance time, in the order run.
    pub runs_ms: Vec<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl RebalanceReport {
    pub fn render_text(&self) -> String {
        format!(
            "rebalance after one member left: median {:.1} ms (min {:.1}, max {:.1}) over {} runs; {}\n",
            self.median_ms,
            self.min_ms,
            self.max_ms,
            self.runs_ms.len(),
            self.params
        )
    }
}

/// One run: a fresh group, everyone joined and settled, one member leaves; the time until
/// the rest settle again.
async fn one_run(api: &Api, args: &BenchRebalanceArgs, run: usize) -> anyhow::Result<Duration> {
    let group = format!("rebalance-{run}-{}", unique_suffix());
    let mut members = Vec::with_capacity(args.members);
    for _ in 0..args.members {
        members.push(
            api.join_group(&group, &[&args.topic], 30_000)
                .await?
                .member_id,
        );
    }
    let settled = settle(api, &group, &members, 0, args.partitions).await?;
    let leaving = members.remove(0);
    let started = Instant::now();
    api.leave_group(&group, &leaving).await?;
    settle(api, &group, &members, settled, args.partitions).await?;
    let took = started.elapsed();
    for member in &members {
        api.leave_group(&group, member).await?;
    }
    Ok(took)
}

/// Heartbeats every member (concurrently) until all report one generation above `after`
/// and own every partition exactly once; answers that generation.
async fn settle(
    api: &Api,
    group: &str,
    members: &[String],
    after: u64,
    partitions: u32,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + REBALANCE_DEADLINE;
    loop {
        let views = futures::future::try_join_all(
            members
                .iter()
                .map(|member| api.group_heartbeat(group, member)),
        )
        .await?;
        let generations: BTreeSet<u64> = views.iter().map(|view| view.generation).collect();
        let owned: Vec<_> = views
            .iter()
            .flat_map(|view| view.assignments.iter())
            .collect();
        let distinct: BTreeSet<_> = owned.iter().collect();
        if generations.len() == 1
            && generations.iter().all(|generation| *generation > after)
            && owned.len() == partitions as usize
            && distinct.len() == owned.len()
        {
            return Ok(views[0].generation);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "group {group} did not settle within {REBALANCE_DEADLINE:?}"
        );
    }
}

/// Runs `herald bench rebalance`.
pub async fn run(server: &str, args: BenchRebalanceArgs) -> anyhow::Result<RebalanceReport> {
    anyhow::ensure!(args.members >= 2, "--members must be at least 2");
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let api = Api::new(server)?;
    if api.get_topic(&args.topic).await.is_err() {
        api.create_topic(&CreateTopic {
            name: args.topic.clone(),
            partitions: args.partitions,
            replication_factor: Some(1),
            config: serde_json::Map::new(),
        })
        .await?;
    }
    let topic = api.get_topic(&args.topic).await?;
    let args = BenchRebalanceArgs {
        partitions: topic.partitions.len() as u32,
        ..args
    };
    let mut runs = Vec::with_capacity(args.runs);
    for run in 0..args.runs {
        runs.push(one_run(&api, &args, run).await?.as_secs_f64() * 1000.0);
    }
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(RebalanceReport {
        bench: "rebalance",
        params: json!({"topic": args.topic, "partitions": args.partitions, "members": args.members}),
        median_ms: sorted[sorted.len() / 2],
        min_ms: sorted[0],
        max_ms: sorted[sorted.len() - 1],
        runs_ms: runs,
    })
}
