//! The fault schedule's idempotent producers: registered once, each writing its partition
//! and retrying every request (the same body, the same sequence) through the nodes in turn
//! until it is acknowledged; what each got acknowledged is the checker's book.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ATTEMPT_TIMEOUT, BATCH};
use crate::common::book::PRODUCE_DEADLINE;
use crate::common::cluster::{produce_once, Attempt, TestCluster};
use serde_json::{json, Value};

/// What one idempotent producer got acknowledged, in sequence order.
#[derive(Debug, Default)]
pub struct ProducerLog {
    pub partition: u32,
    /// (id, offset), in the order sent (= sequence order).
    pub acked: Vec<(String, u64)>,
    pub requests: usize,
    /// Requests that needed more than one attempt.
    pub retried: usize,
}

/// Registers producer `name` through node 1: (producer id, epoch).
pub async fn register(cluster: &TestCluster, name: &str) -> (u64, u64) {
    let node = cluster.node(1);
    let response = node
        .post_json("/v1/producers", &json!({ "name": name }))
        .await;
    let (status, body) = node.json(response).await;
    assert!(status.is_success(), "register {name}: {status}: {body}");
    (
        body["producer_id"].as_u64().expect("producer_id"),
        body["producer_epoch"].as_u64().expect("producer_epoch"),
    )
}

/// A producer writing `BATCH` messages per request to its partition until `stop`, each request
/// retried (the same body, the same sequence) through the nodes in turn until acknowledged.
pub fn spawn_producer(
    name: String,
    (producer_id, epoch): (u64, u64),
    partition: u32,
    urls: Vec<String>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<ProducerLog> {
    tokio::spawn(async move {
        let client = herald_client::cli::http_client::builder()
            .no_proxy()
            .timeout(ATTEMPT_TIMEOUT)
            .build()
            .expect("build the HTTP client");
        let mut log = ProducerLog {
            partition,
            ..ProducerLog::default()
        };
        let mut next_node = partition as usize;
        let mut sequence = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let ids: Vec<String> = (0..BATCH)
                .map(|m| format!("{name}-{}", sequence + m as u64))
                .collect();
            let messages: Vec<Value> = ids
                .iter()
                .map(|id| json!({"partition": partition, "key": id, "value": {"id": id}}))
                .collect();
            let body = json!({
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "sequence": sequence,
                "messages": messages,
            });
            let deadline = Instant::now() + PRODUCE_DEADLINE;
            let mut attempts = Vec::new();
            let offsets = loop {
                let url = &urls[next_node % urls.len()];
                match produce_once(&client, url, &body).await {
                    Attempt::Acknowledged(offsets) => break offsets,
                    Attempt::Retryable(why) => attempts.push(why),
                    Attempt::Fatal(why) => panic!(
                        "{name} sequence {sequence}: {why}\n(after failed attempts {attempts:#?})"
                    ),
                }
                next_node += 1;
                assert!(
                    Instant::now() < deadline,
                    "{name} sequence {sequence} not acknowledged within {PRODUCE_DEADLINE:?}: {attempts:#?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            log.requests += 1;
            if !attempts.is_empty() {
                log.retried += 1;
            }
            for (id, (p, offset)) in ids.into_iter().zip(offsets) {
                assert_eq!(p, partition, "{id} acknowledged on partition {p}");
                log.acked.push((id, offset));
            }
            sequence += BATCH as u64;
        }
        log
    })
}
