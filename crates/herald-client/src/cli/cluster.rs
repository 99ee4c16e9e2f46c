//! `herald cluster`: the cluster's nodes, and rebalancing them (`/v1/cluster`,
//! `/v1/cluster/rebalance`; docs/clustering.md "Balance").

use std::time::Duration;

use serde_json::Value;

use super::client::Api;

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Prints the cluster's nodes, their status and zones, and the metadata leader (JSON).
    Status,
    /// Moves replicas and preferred leaderships until nodes hold about equal shares; prints the
    /// plan: each node's share before and after, then each partition that moves.
    Rebalance {
        /// Only print the plan; move nothing.
        #[arg(long)]
        dry_run: bool,
        /// After starting, wait until nothing is left to move, printing progress.
        #[arg(long, conflicts_with = "dry_run")]
        wait: bool,
        /// How long `--wait` waits, in seconds.
        #[arg(long, default_value_t = 3600)]
        timeout_secs: u64,
        /// Print the plan as JSON instead.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(server: &str, command: ClusterCommand) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    match command {
        ClusterCommand::Status => {
            let view: Value = api
                .send_json(api.http().get(api.url(&["v1", "cluster"])))
                .await?;
            println!("{view}");
        }
        ClusterCommand::Rebalance {
            dry_run,
            wait,
            timeout_secs,
            json,
        } => {
            let url = api.url(&["v1", "cluster", "rebalance"]);
            let request = if dry_run {
                api.http().get(url.clone())
            } else {
                api.http().post(url.clone())
            };
            let plan: Value = api.send_json(request).await?;
            if json {
                println!("{plan}");
            } else {
                print!("{}", describe(&plan, dry_run));
            }
            if wait {
                wait_until_balanced(&api, url, Duration::from_secs(timeout_secs)).await?;
            }
        }
    }
    Ok(())
}

/// Polls the plan until it is empty and nothing is copying.
async fn wait_until_balanced(
    api: &Api,
    url: reqwest::Url,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let plan: Value = api.send_json(api.http().get(url.clone())).await?;
        let left = plan["moves"].as_array().map_or(0, Vec::len);
        let moving = plan["moving"].as_u64().unwrap_or(0);
        if left == 0 && moving == 0 {
            println!("balanced");
            return Ok(());
        }
        eprintln!("{left} partition(s) left to move, {moving} copying");
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("not balanced after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The plan for people: shares per node, then the moves.
fn describe(plan: &Value, dry_run: bool) -> String {
    let mut out = String::new();
    let moves = plan["moves"].as_array().cloned().unwrap_or_default();
    let header = match (moves.is_empty(), dry_run) {
        (true, _) => "balanced: nothing to move",
        (false, true) => "plan (dry run, nothing moved):",
        (false, false) => "rebalancing:",
    };
    out.push_str(header);
    out.push('\n');
    for node in plan["nodes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  node {}: replicas {} -> {}, leaders {} -> {}\n",
            node["node_id"],
            node["replicas_before"],
            node["replicas_after"],
            node["leaders_before"],
            node["leaders_after"]
        ));
    }
    for moved in &moves {
        let what = if moved["copies_data"] == Value::Bool(true) {
            "copy"
        } else {
            "leader"
        };
        out.push_str(&format!(
            "  {}/{}: {} -> {} ({what})\n",
            moved["topic"].as_str().unwrap_or_default(),
            moved["partition"],
            moved["replicas_before"],
            moved["replicas_after"]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plan_reads_as_shares_then_moves() {
        let plan = json!({
            "moves": [
                {"topic": "t", "partition": 0, "replicas_before": [1, 2], "replicas_after": [3, 2], "copies_data": true},
                {"topic": "t", "partition": 1, "replicas_before": [1, 2], "replicas_after": [2, 1], "copies_data": false}
            ],
            "nodes": [{"node_id": 3, "replicas_before": 0, "replicas_after": 1, "leaders_before": 0, "leaders_after": 1}],
            "moving": 0, "started": false
        });
        let text = describe(&plan, true);
        assert!(
            text.starts_with("plan (dry run, nothing moved):\n"),
            "{text}"
        );
        assert!(
            text.contains("node 3: replicas 0 -> 1, leaders 0 -> 1"),
            "{text}"
        );
        assert!(text.contains("t/0: [1,2] -> [3,2] (copy)"), "{text}");
        assert!(text.contains("t/1: [1,2] -> [2,1] (leader)"), "{text}");
        let empty = json!({"moves": [], "nodes": [], "moving": 0, "started": false});
        assert_eq!(describe(&empty, false), "balanced: nothing to move\n");
    }
}
