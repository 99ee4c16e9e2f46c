//! A rolling restart (issue 32): the three nodes of a cluster stopped gracefully (SIGTERM) and
//! started again one after the other, under acks=all producers, fails no request and loses
//! nothing, because each node hands the leadership of its groups to an in-sync replica before
//! it stops taking requests.
//!
//! The producers behave as clients behind a load balancer do: they send to the nodes the test
//! has in rotation, and the test takes a node out of rotation before it stops it (as a load
//! balancer does when `/readyz` fails or a deployment drains it), then puts it back once it
//! is ready and in sync again. Every request is sent once; any answer but 200 is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::book::{batch, Book};
use crate::common::cluster::{
    create_replicated, produce_client, produce_once, Attempt, TestCluster,
};

const TOPIC: &str = "rolling";
const PARTITIONS: u32 = 3;
/// Messages per produce request.
const BATCH: usize = 5;
/// Each producer's most requests: bounds the load loop whatever the roll takes.
const MAX_REQUESTS: usize = 20_000;

/// What one producer saw.
#[derive(Default)]
struct ProducerLog {
    book: Book,
    requests: usize,
    failures: Vec<String>,
    longest: Duration,
}

#[tokio::test]
async fn a_rolling_restart_under_acks_all_producers_fails_no_request_and_loses_nothing() {
    let mut cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, TOPIC, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(TOPIC, partition, 3).await;
    }

    // The nodes in rotation, and their produce URLs.
    let urls: BTreeMap<u64, String> = (1..=3)
        .map(|id| {
            let url = cluster
                .node(id)
                .url(&format!("/v1/topics/{TOPIC}/messages?acks=all"));
            (id, url)
        })
        .collect();
    let rotation = Arc::new(Mutex::new((1..=3).collect::<BTreeSet<u64>>()));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PARTITIONS)
        .map(|partition| {
            let rotation = rotation.clone();
            let stop = stop.clone();
            let urls = urls.clone();
            tokio::spawn(async move {
                let client = produce_client();
                let mut log = ProducerLog::default();
                let mut turn = partition as usize;
                while !stop.load(Ordering::Relaxed) && log.requests < MAX_REQUESTS {
                    let via = {
                        let nodes: Vec<u64> = rotation.lock().unwrap().iter().copied().collect();
                        turn += 1;
                        nodes[turn % nodes.len()]
                    };
                    let ids: Vec<String> = (0..BATCH)
                        .map(|i| format!("p{partition}-r{}-{i}", log.requests))
                        .collect();
                    log.book.sent.extend(ids.iter().cloned());
                    log.requests += 1;
                    let sent_at = Instant::now();
                    let attempt = produce_once(&client, &urls[&via], &batch(&ids, partition)).await;
                    log.longest = log.longest.max(sent_at.elapsed());
                    match attempt {
                        Attempt::Acknowledged(offsets) => {
                            log.book.acknowledge(&ids, &offsets, partition, false)
                        }
                        Attempt::Retryable(line) | Attempt::Fatal(line) => {
                            log.book.unacknowledged.extend(ids);
                            log.failures
                                .push(format!("node {via} after {:?}: {line}", sent_at.elapsed()));
                        }
                    }
                }
                log
            })
        })
        .collect();

    // Let the load settle, then roll the nodes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let roll_started = Instant::now();
    let mut handed_off = BTreeMap::new();
    for id in 1..=3 {
        rotation.lock().unwrap().remove(&id);
        // Requests already sent to it finish; give the producers' next ones time to go
        // elsewhere (a load balancer's health check interval).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = cluster.stop(id).await;
        assert!(status.success(), "node {id} exited with {status}");
        let log = cluster.node(id).logs().last().cloned().unwrap_or_default();
        handed_off.insert(id, log.contains("handed off leadership before stopping"));
        assert!(
            !log.contains("leadership not handed off"),
            "node {id} kept some leadership:\n{}",
            cluster.node(id).log_tail()
        );
        cluster.restart(id).await;
        for partition in 0..PARTITIONS {
            cluster.wait_until_in_sync(TOPIC, partition, 3).await;
        }
        rotation.lock().unwrap().insert(id);
    }
    let roll = roll_started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);

    let mut failures = Vec::new();
    let mut requests = 0;
    let mut longest = Duration::ZERO;
    for (partition, producer) in producers.into_iter().enumerate() {
        let log = producer.await.expect("a producer panicked");
        requests += log.requests;
        longest = longest.max(log.longest);
        failures.extend(log.failures);
        // Nothing acknowledged is lost, moved or stored twice.
        let stored = cluster.read_partition(1, TOPIC, partition as u32).await;
        log.book.check(&stored);
    }
    eprintln!(
        "rolling restart of 3 nodes in {roll:?}: {requests} produce requests, {} failed, \
         longest {longest:?}; handed off: {handed_off:?}",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {requests} requests failed during the roll:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Each node led at least one group when its turn came (the partitions' preferred leaders
    // are spread over the three), and moved it before stopping.
    assert!(
        handed_off.values().all(|moved| *moved),
        "a node stopped without handing off: {handed_off:?}"
    );
}
