//! `herald backup`: asks a node (or every node) to take an online backup of its data
//! (`POST /v1/cluster/nodes/{id}/backups`), and prints each backup's manifest as one JSON line.
//! The backup is written on the node's own disk, under its `storage.backup_dir`.

use std::io::Write;

use anyhow::{bail, Context};
use serde::Deserialize;
use serde_json::Value;

use super::client::Api;

/// `herald backup [--node ID | --all] [--name NAME] [--list]`.
#[derive(clap::Args, Debug, Clone)]
pub struct BackupArgs {
    /// The node to back up [default: the node `--server` names].
    #[arg(long, conflicts_with = "all")]
    pub node: Option<u64>,
    /// Back up every node of the cluster, one after another (what a whole-cluster restore
    /// needs: one backup per node).
    #[arg(long)]
    pub all: bool,
    /// The backup's name (with `--all`, every node's backup gets it) [default:
    /// `node-<id>-<ms since the epoch>`].
    #[arg(long)]
    pub name: Option<String>,
    /// List the backups instead of taking one.
    #[arg(long)]
    pub list: bool,
}

#[derive(Deserialize)]
struct ClusterNodes {
    nodes: Vec<ClusterNode>,
}

#[derive(Deserialize)]
struct ClusterNode {
    id: u64,
    http_addr: String,
}

pub async fn run(server: &str, args: BackupArgs) -> anyhow::Result<()> {
    let api = Api::new(server)?;
    let cluster: ClusterNodes = api
        .send_json(api.http().get(api.url(&["v1", "cluster"])))
        .await?;
    let targets: Vec<&ClusterNode> = if args.all {
        cluster.nodes.iter().collect()
    } else if let Some(id) = args.node {
        match cluster.nodes.iter().find(|node| node.id == id) {
            Some(node) => vec![node],
            None => bail!("the cluster has no node {id}"),
        }
    } else {
        let authority = api.url(&[]);
        let here = format!(
            "{}:{}",
            authority.host_str().unwrap_or_default(),
            authority.port_or_known_default().unwrap_or_default()
        );
        match cluster.nodes.iter().find(|node| node.http_addr == here) {
            Some(node) => vec![node],
            None => bail!(
                "no node of the cluster has the address {here}: name one with --node ID (or \
                 --all)"
            ),
        }
    };
    let stdout = std::io::stdout();
    for node in targets {
        let base = api.url(&[]);
        let node_server = format!("{}://{}", base.scheme(), node.http_addr);
        let node_api = Api::new(&node_server)?;
        let id = node.id.to_string();
        let url = node_api.url(&["v1", "cluster", "nodes", &id, "backups"]);
        let answer: Value = if args.list {
            node_api.send_json(node_api.http().get(url)).await?
        } else {
            let body = serde_json::json!({ "name": args.name });
            node_api
                .send_json(node_api.http().post(url).json(&body))
                .await
                .with_context(|| format!("backing up node {} at {}", node.id, node.http_addr))?
        };
        let mut out = stdout.lock();
        writeln!(out, "{answer}").context("writing to standard output")?;
    }
    Ok(())
}
