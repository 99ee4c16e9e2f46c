//! Upgrades keep the data: for every on-disk format a node still upgrades from (`migrations/`,
//! `herald::format`), today's binary starts on the fixture the release that wrote the format
//! left behind (a node alone, and a three-node cluster on the raft addresses it had), and reads
//! back everything in it: every message with its offset, key, value, headers and timestamp, the
//! log start of a partition retention trimmed and the compacted partition (cleaned again), the
//! idempotent producer (a re-send is a duplicate, a gap and an old epoch refused), the consumer
//! groups' committed offsets (a new member continues there), the subscriptions (a lease and a
//! nack delay redelivered or still held by the time they name, a message delayed for ever,
//! the dead letters, the redrive job), the OAuth2 clients and signing key (their tokens, signed
//! with the fixture's key), the policy (what it grants and denies), and the audit log. Then it
//! writes on the old data and reads that back too.
//!
//! What the fixture holds is `migrations/<N>/<layout>/expected.json`, written by the fixture's
//! `generate.sh` from the node's own answers; times that matter (a lease's deadline, a nack's
//! delay) are recorded as the bounds the script saw, and the test decides from them and its own
//! clock what the node must do now, so it holds whenever it runs.
//!
//! This file starts a fixture and runs the checks in order (reads first, then writes); they are
//! in `access` (clients, keys, policy, members, audit), `logs` (messages, log starts,
//! compaction, idempotent producing, new writes) and `consumers` (groups and subscriptions),
//! all through `api` (requests with a token, spread over the nodes).

mod access;
mod api;
mod consumers;
mod logs;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use herald::format::{FIRST_SUPPORTED_FORMAT, FORMAT_VERSION};
use serde_json::Value;

use crate::common::fixture_nodes::{FixtureNode, FixtureNodes};
use crate::common::{now_ms, Server};
use api::Api;

/// How long a condition that needs the node to act (a compaction pass, an expired group
/// member, a pull) may take.
const ACT_DEADLINE: Duration = Duration::from_secs(30);
/// How long a request answered 503 (no leader yet, nothing done) is tried again.
const UNAVAILABLE_DEADLINE: Duration = Duration::from_secs(30);
/// Around a recorded deadline the outcome is undecided: the test waits until it is past.
const CLOCK_MARGIN_MS: i64 = 2_000;

#[tokio::test]
async fn a_lone_node_reads_back_every_supported_formats_fixture() {
    for format in FIRST_SUPPORTED_FORMAT..=FORMAT_VERSION {
        check_fixture(format, "one-node").await;
    }
}

#[tokio::test]
async fn a_three_node_cluster_reads_back_every_supported_formats_fixture() {
    for format in FIRST_SUPPORTED_FORMAT..=FORMAT_VERSION {
        check_fixture(format, "three-node").await;
    }
}

fn migrations() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}: every supported format needs its fixtures (migrations/README.md)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn int(value: &Value) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("not an integer: {value}"))
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"))
}

fn array(value: &Value) -> &Vec<Value> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
}

/// `value` without the named fields (the ones that depend on when it is read).
fn without(value: &Value, fields: &[&str]) -> Value {
    let mut value = value.clone();
    if let Some(object) = value.as_object_mut() {
        for field in fields {
            object.remove(*field);
        }
    }
    value
}

/// Starts the fixture `migrations/<format>/<layout>/` and checks all of it.
async fn check_fixture(format: u64, layout: &str) {
    let dir = migrations().join(format.to_string()).join(layout);
    let expected = read_json(&dir.join("expected.json"));
    assert_eq!(int(&expected["format"]), format as i64, "{}", dir.display());
    let secret = std::fs::read_to_string(dir.join("cluster-secret"))
        .unwrap_or_else(|err| panic!("{}/cluster-secret: {err}", dir.display()));
    let recorded_nodes = array(&expected["nodes"]);
    let alone = recorded_nodes.len() == 1;
    let nodes: Vec<FixtureNode> = recorded_nodes
        .iter()
        .map(|node| {
            let id = int(&node["node_id"]) as u64;
            FixtureNode {
                id,
                archive: if alone {
                    dir.join("data.tar.gz")
                } else {
                    dir.join(format!("node-{id}.tar.gz"))
                },
                // A node alone may come back on other addresses; a cluster's nodes find each
                // other at the raft addresses its metadata holds.
                raft_addr: (!alone).then(|| {
                    text(&node["raft_addr"])
                        .parse::<SocketAddr>()
                        .expect("a raft address")
                }),
            }
        })
        .collect();
    let args = vec![
        "--config".to_string(),
        dir.join("herald.toml").display().to_string(),
    ];
    let started = Instant::now();
    let fixture =
        FixtureNodes::start(&nodes, &args, &[("HERALD_CLUSTER_SECRET", secret.trim())]).await;
    eprintln!("format {format} {layout}: ready in {:?}", started.elapsed());
    let api = Api::new(&fixture.nodes);
    let since_ms = now_ms();

    check_the_format_log(&fixture.nodes, format);
    let tokens = access::check_auth(&api, &expected, &dir, layout).await;
    access::check_cluster(&api, &tokens, recorded_nodes).await;
    logs::check_topics(&api, &tokens, &expected).await;
    consumers::check_groups(&api, &tokens, &expected).await;
    consumers::check_subscriptions(&api, &tokens, &expected).await;
    access::check_audit(&api, &tokens, &expected, since_ms).await;
    // From here on the checks write.
    logs::check_idempotent_producing(&api, &tokens, &expected).await;
    logs::check_new_writes(&api, &tokens, &expected).await;
    logs::check_compaction(&api, &tokens, &expected).await;
    eprintln!(
        "format {format} {layout}: checked in {:?}",
        started.elapsed()
    );
}

/// A node of this build's format opens its data as it is; an older one upgrades it first.
fn check_the_format_log(nodes: &[Server], format: u64) {
    for node in nodes {
        let log = node.logs().join("\n");
        if format == FORMAT_VERSION {
            assert!(
                !log.contains("upgrading the on-disk format"),
                "a node of the current format upgraded it:\n{}",
                node.log_tail()
            );
        } else {
            assert!(
                log.contains("on-disk format upgraded"),
                "a node of format {format} did not upgrade it:\n{}",
                node.log_tail()
            );
        }
    }
}
