//! The Grafana dashboard (`deploy/grafana/dashboards/*.json`) and the Prometheus alert rules
//! (`deploy/prometheus/alerts.yml`) query only metrics a node really exports: a 3-node cluster
//! runs a workload that touches every part the dashboard shows (replicated produce, reads, a
//! consumer group, a subscription, a WebSocket and an event stream), and every `herald_*` name
//! the queries use must be in some node's `/metrics`. A renamed metric fails here, not on an
//! operator's empty panel. (`make compose-check` validates the files' syntax and the alerts'
//! unit tests.)

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::cluster::{create_replicated, TestCluster};
use serde_json::{json, Value};

/// Every `herald_*` metric name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("herald_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // `herald_` inside a longer identifier is not a metric name.
        let preceded = rest[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !preceded {
            names.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// The `expr` of every target of every panel (rows nest panels).
fn dashboard_queries(panel: &Value, queries: &mut Vec<String>) {
    if let Some(targets) = panel["targets"].as_array() {
        queries.extend(
            targets
                .iter()
                .filter_map(|target| target["expr"].as_str().map(String::from)),
        );
    }
    for key in ["panels"] {
        if let Some(children) = panel[key].as_array() {
            children
                .iter()
                .for_each(|child| dashboard_queries(child, queries));
        }
    }
}

fn deploy_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|err| panic!("{}: {err}", full.display()))
}

#[tokio::test]
async fn the_dashboard_and_alerts_use_only_metrics_the_nodes_export() {
    let dashboard: Value =
        serde_json::from_str(&deploy_file("deploy/grafana/dashboards/herald.json"))
            .expect("the dashboard is JSON");
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, &mut queries);
    assert!(
        queries.len() >= 20,
        "the dashboard has {} queries",
        queries.len()
    );
    let mut wanted = metric_names(&queries.join("\n"));
    let from_alerts = metric_names(&deploy_file("deploy/prometheus/alerts.yml"));
    assert!(from_alerts.len() >= 5, "alerts use {from_alerts:?}");
    wanted.extend(from_alerts);

    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "orders", 2, 3).await;
    for partition in 0..2 {
        cluster.stable_leader("orders", partition).await;
    }
    let via = cluster.node(1);
    via.produce_ok(
        "orders",
        &json!({"messages": [{"value": 1, "partition": 0}, {"value": 2, "partition": 1}]}),
    )
    .await;
    via.fetch("orders", 0, "offset=0").await;
    let member = via
        .join_group("billing", &json!({"topics": ["orders"]}))
        .await;
    let (status, answer) = via
        .commit(
            "billing",
            &json!({
                "member_id": member.id,
                "generation": member.generation,
                "offsets": [{"topic": "orders", "partition": 0, "offset": 0}],
            }),
        )
        .await;
    assert!(status.is_success(), "commit: {status}: {answer}");
    common::queues::subscribe(via, "workers", json!({"topic": "orders"})).await;
    common::queues::pull(via, "workers", 1, 0).await;
    // A WebSocket and an event stream open on every node while it is scraped.
    let mut sockets = Vec::new();
    let mut streams = Vec::new();
    for id in cluster.ids() {
        sockets.push(common::ws::connect(cluster.node(id)).await);
        streams.push(
            common::sse::open(
                &cluster.node(id).base_url(),
                "/v1/topics/orders/events",
                None,
            )
            .await,
        );
    }

    let wanted_now = wanted.clone();
    let missing = common::poll(
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(250),
        || {
            let wanted = wanted_now.clone();
            let cluster = &cluster;
            async move {
                let mut exported = BTreeSet::new();
                for id in cluster.ids() {
                    let text = cluster
                        .node(id)
                        .get("/metrics")
                        .await
                        .text()
                        .await
                        .unwrap_or_default();
                    for line in text.lines().filter(|line| !line.starts_with('#')) {
                        let series = line.split([' ', '{']).next().unwrap_or_default();
                        exported.insert(series.to_string());
                    }
                }
                let missing: Vec<&String> = wanted.difference(&exported).collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("queried but not exported: {missing:?}"))
                }
            }
        },
    )
    .await;
    if let Err(missing) = missing {
        cluster.fail(&missing);
    }
    drop((sockets, streams));
}

#[test]
fn metric_names_are_found_whole() {
    let names = metric_names(
        "sum(rate(herald_produced_messages_total[1m])) / herald_x{a=\"b\"} not_herald_y",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["herald_produced_messages_total", "herald_x"]
    );
}
