//! Backup and restore (docs/operations.md, "Backup and restore"), black box: `herald backup`
//! copies a running node while it takes writes; `herald restore` rebuilds a stopped node, and a
//! whole stopped cluster, from such copies (levelling a node whose backup is older than the
//! others'); the nodes start on them and serve exactly what was acknowledged before the
//! backups. Refusals (a taken name, a bad name, another node's id, a non-empty target, a damaged
//! backup) change nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::export_import::cli::{finish, herald, offline_command, Ran};
use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::Server;

const PARTITIONS: u32 = 3;

/// Produces `count` messages `{"n": first..}` to `topic`.
async fn produce(node: &Server, topic: &str, first: u64, count: u64) {
    let messages: Vec<Value> = (first..first + count)
        .map(|n| json!({"key": format!("k{n}"), "value": {"n": n}}))
        .collect();
    let offsets = node
        .produce_ok(topic, &json!({ "messages": messages }))
        .await;
    assert_eq!(offsets.len() as u64, count);
}

/// Every `n` in `topic`, read through `node`.
async fn numbers(node: &Server, topic: &str) -> BTreeSet<u64> {
    let mut seen = BTreeSet::new();
    for partition in 0..PARTITIONS {
        for message in node.read_all(topic, partition).await {
            let value: Value =
                serde_json::from_str(message.value.expect("a JSON value").get()).expect("JSON");
            let n = value["n"].as_u64().expect("n");
            assert!(seen.insert(n), "message {n} read twice");
        }
    }
    seen
}

/// `herald <args>` without a server (`restore` is offline).
async fn offline(args: &[&str]) -> Ran {
    let child = offline_command(args).spawn().expect("start the herald CLI");
    finish(child, args).await
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Where node `server`'s backups go by default: beside its data directory.
fn backup_dir(server: &Server) -> PathBuf {
    let mut dir = server.data_dir().into_os_string();
    dir.push(".backups");
    dir.into()
}

/// The manifest `herald backup` printed for one node.
fn manifest(ran: &Ran) -> Value {
    serde_json::from_str(ran.stdout.lines().next().expect("a manifest line")).expect("JSON")
}

#[tokio::test]
async fn a_node_restored_from_its_backup_serves_what_was_acknowledged_before_it() {
    let mut node = Server::start().await;
    node.create_topic("orders", PARTITIONS).await;
    node.wait_for_leaders("orders").await;
    produce(&node, "orders", 0, 300).await;

    let taken = herald(&node.base_url(), &["backup", "--name", "before"])
        .await
        .ok("backup");
    let backup = manifest(&taken);
    assert_eq!(backup["name"], "before");
    assert_eq!(backup["node_id"], 1);
    assert!(backup["total_bytes"].as_u64().expect("bytes") > 0);
    assert!(backup["groups"].as_u64().expect("groups") > u64::from(PARTITIONS));
    // After the backup: not in it.
    produce(&node, "orders", 300, 50).await;

    // A taken name, a name that is not one path component, another node's id: refused.
    let again = node
        .http_client()
        .post(node.url("/v1/cluster/nodes/1/backups"))
        .json(&json!({"name": "before"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let problem: Value = again.json().await.expect("problem");
    assert_eq!(problem["code"], "backup_exists");
    for bad in ["../escape", ".hidden", ""] {
        let refused = node
            .http_client()
            .post(node.url("/v1/cluster/nodes/1/backups"))
            .json(&json!({"name": bad}))
            .send()
            .await
            .expect("POST");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{bad:?}");
    }
    let elsewhere = node
        .http_client()
        .post(node.url("/v1/cluster/nodes/7/backups"))
        .send()
        .await
        .expect("POST");
    assert_eq!(elsewhere.status(), StatusCode::NOT_FOUND);
    // An empty body takes a backup with a generated name; the list has both, oldest first.
    let unnamed = node
        .http_client()
        .post(node.url("/v1/cluster/nodes/1/backups"))
        .send()
        .await
        .expect("POST");
    assert_eq!(unnamed.status(), StatusCode::CREATED);
    let listed = herald(&node.base_url(), &["backup", "--list"])
        .await
        .ok("backup --list");
    let listed: Value = serde_json::from_str(listed.stdout.trim()).expect("JSON");
    let names: Vec<&str> = listed["backups"]
        .as_array()
        .expect("backups")
        .iter()
        .map(|backup| backup["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names.len(), 2, "{listed}");
    assert_eq!(names[0], "before");
    assert!(names[1].starts_with("node-1-"), "{names:?}");
    assert!(!backup_dir(&node)
        .read_dir()
        .expect("the backup directory")
        .any(|entry| entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .ends_with(".partial")));

    node.stop().await;
    let data_dir = node.data_dir();
    let before = backup_dir(&node).join("before");
    // Into a directory that holds something: refused, untouched.
    offline(&["restore", "--data-dir", path(&data_dir), path(&before)])
        .await
        .refused("restore over a data directory", "is not empty");
    let lost = data_dir.with_file_name("lost");
    std::fs::rename(&data_dir, &lost).expect("move the data directory aside");
    // A damaged backup (a file cut short) is refused before anything is written.
    let damaged = data_dir.with_file_name("damaged");
    let copied = offline(&["restore", "--data-dir", path(&damaged), path(&before)])
        .await
        .ok("restore into a scratch directory");
    assert!(copied.stdout.contains("node 1:"), "{}", copied.stdout);
    let current = std::fs::read_to_string(damaged.join("CURRENT")).expect("CURRENT");
    let manifest_file = damaged.join(current.trim());
    let length = std::fs::metadata(&manifest_file).expect("MANIFEST").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&manifest_file)
        .and_then(|file| file.set_len(length / 2))
        .expect("cut the copy short");
    std::fs::write(
        damaged.join("herald-backup.json"),
        std::fs::read(before.join("herald-backup.json")).expect("manifest"),
    )
    .expect("copy the manifest");
    offline(&[
        "restore",
        "--data-dir",
        path(&data_dir.with_file_name("from-damaged")),
        path(&damaged),
    ])
    .await
    .refused("restore of a damaged backup", "damaged");
    assert!(!data_dir.with_file_name("from-damaged").exists());

    offline(&["restore", "--data-dir", path(&data_dir), path(&before)])
        .await
        .ok("restore");
    node.restart().await;
    node.wait_for_leaders("orders").await;
    assert_eq!(numbers(&node, "orders").await, (0..300).collect());
    // It takes writes again, after what it holds.
    produce(&node, "orders", 1000, 10).await;
    assert_eq!(numbers(&node, "orders").await.len(), 310);
}

#[tokio::test]
async fn a_cluster_restored_from_one_backup_per_node_serves_every_acknowledged_message() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "orders", PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.leader_of("orders", partition).await;
    }
    produce(cluster.node(1), "orders", 0, 300).await;
    // Node 1 first, then 30 more messages, then every node: node 1's copy of every partition
    // lacks those 30, which the restore must level up from the other copies.
    herald(
        &cluster.node(2).base_url(),
        &["backup", "--node", "1", "--name", "early"],
    )
    .await
    .ok("backup --node 1");
    produce(cluster.node(1), "orders", 300, 30).await;
    let taken = herald(
        &cluster.node(2).base_url(),
        &["backup", "--all", "--name", "nightly"],
    )
    .await
    .ok("backup --all");
    let nodes: BTreeSet<u64> = taken
        .stdout
        .lines()
        .map(|line| {
            let manifest: Value = serde_json::from_str(line).expect("JSON");
            assert_eq!(manifest["name"], "nightly");
            manifest["node_id"].as_u64().expect("node id")
        })
        .collect();
    assert_eq!(nodes, BTreeSet::from([1, 2, 3]));
    // Another node's backups are that node's to take.
    let misdirected = cluster
        .node(1)
        .http_client()
        .get(cluster.node(1).url("/v1/cluster/nodes/2/backups"))
        .send()
        .await
        .expect("GET");
    assert_eq!(misdirected.status(), StatusCode::MISDIRECTED_REQUEST);
    let problem: Value = misdirected.json().await.expect("problem");
    assert_eq!(problem["code"], "not_this_node");
    assert!(problem["detail"]
        .as_str()
        .expect("detail")
        .contains(&cluster.node(2).http_addr()));
    // After every backup: in none of them.
    produce(cluster.node(1), "orders", 1_000, 30).await;

    for id in cluster.ids() {
        cluster.stop(id).await;
    }
    let backups: Vec<PathBuf> = cluster
        .ids()
        .into_iter()
        .map(|id| {
            let name = if id == 1 { "early" } else { "nightly" };
            backup_dir(cluster.node(id)).join(name)
        })
        .collect();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let into = scratch.path().join("restored");
    let mut args = vec!["restore", "--into", path(&into)];
    args.extend(backups.iter().map(|backup| path(backup)));
    let restored = offline(&args).await.ok("restore --into");
    assert!(
        restored.stdout.contains("3 data directories"),
        "{}",
        restored.stdout
    );
    // Backups of one node twice: refused.
    offline(&[
        "restore",
        "--into",
        path(&scratch.path().join("twice")),
        path(&backups[0]),
        path(&backups[0]),
    ])
    .await
    .refused("restore of one node twice", "both backups of node 1");
    for id in cluster.ids() {
        let data_dir = cluster.node(id).data_dir();
        std::fs::rename(&data_dir, data_dir.with_file_name("lost")).expect("move aside");
        std::fs::rename(into.join(format!("node-{id}")), &data_dir).expect("move in");
    }
    cluster.restart_all(&cluster.ids()).await;
    for partition in 0..PARTITIONS {
        cluster.leader_of("orders", partition).await;
    }
    for id in cluster.ids() {
        assert_eq!(
            numbers(cluster.node(id), "orders").await,
            (0..330).collect(),
            "read through node {id}"
        );
    }
    produce(cluster.node(3), "orders", 2_000, 10).await;
    assert_eq!(numbers(cluster.node(1), "orders").await.len(), 340);
}
