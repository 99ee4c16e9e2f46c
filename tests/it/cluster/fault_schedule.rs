//! A randomized fault schedule, black box, on three real nodes: SIGKILLs with restarts,
//! SIGSTOP pauses and network partitions (a node isolated, or unable to send), one node at a
//! time, while idempotent producers (producer id, epoch, sequence) write to every partition and
//! a consumer group member polls and commits after processing. The checker proves:
//!
//! - no acknowledged message is lost: each is in the log at its acknowledged offset;
//! - none is duplicated: every request is retried until acknowledged, through any node, and
//!   the partition's producer state writes a retry at most once;
//! - per-partition order: a producer's messages are stored in the order of its sequences, and a
//!   poll answers each partition's messages in offset order, as they are stored;
//! - committed offsets never move backwards on any node, and the group ends at the log's end.
//!
//! Beside it, a queue topic with size retention (`queue_phase`): a producer, two queue
//! pullers acking through the nodes, and once per run its preferred replica killed until
//! retention moved the log start past all it had (so it comes back through a snapshot and then
//! leads again). Its checker: no message confirmed acked twice, none delivered after its ack was
//! confirmed, none held by two pullers at once, every retained message acked in the end.
//!
//! And a topic read by push streams that resume across the faults (`stream_phase`): a
//! WebSocket and a server-sent event queue stream (each acking every lease), and a WebSocket
//! and a server-sent event consumer group stream (each committing what it processed), each
//! first on a different node and reconnecting to the next one when its connection ends (a
//! killed node) or goes silent (a paused one). Its checker: each queue stream got every stored
//! message, none confirmed acked twice, none delivered after its ack was confirmed, and its
//! subscription ends with nothing left; each group stream got every stored message, skipped
//! none past what it had seen, and its group committed every partition's end. Two topic
//! streams on it (server-sent events resumed with `Last-Event-ID`, a WebSocket resumed with
//! its `resume` token) got exactly the stored log: each message once, in order.
//!
//! The schedule comes from a seed, printed at the start and on failure; set `HERALD_FAULT_SEED`
//! to replay one (the faults repeat; their timing against the load does not exactly). The whole
//! test takes about a minute.

mod producers;
mod queue_phase;
mod seed;
mod stream_phase;
mod stream_report;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::book::Book;
use crate::common::cluster::{create_replicated, messages_url, TestCluster};
use crate::common::fault_consumer::{ConsumerLog, FaultConsumer};
use producers::{register, spawn_producer};
use seed::{seed, Rng, SeedOnFailure};
use serde_json::Value;

/// How long faults are injected.
const FAULT_PHASE: Duration = Duration::from_secs(50);
const PARTITIONS: u32 = 3;
/// Messages per produce request.
const BATCH: usize = 4;
/// One produce attempt: a paused node never answers.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the group gets to commit everything once the faults are over.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);
/// A cut-off leader's produces end within 4 s, and a request waits at most 5 s for a leader
/// (well above the 2.5 s election timeout).
/// Retention is checked every second (the queue topic trims during the run). Event streams and
/// WebSockets hear from their node every second, so a stream client tells a paused node by
/// its silence.
const NODE_ARGS: &[&str] = &[
    "--produce-timeout-ms",
    "4000",
    "--leader-wait-ms",
    "5000",
    "--retention-check-interval-ms",
    "1000",
    "--sse-keepalive-ms",
    "1000",
    "--ws-ping-interval-ms",
    "1000",
];

/// The faults the schedule injects, counted by kind.
#[derive(Debug, Default)]
struct Faults {
    kills: usize,
    /// Kills of the queue partition's preferred replica until retention passed it.
    kills_past_retention: usize,
    /// Snapshots the nodes installed (their counters, read before each kill and at the end).
    snapshot_installs: usize,
    pauses: usize,
    isolations: usize,
    one_way_cuts: usize,
}

/// Per node (and per run of its process: a restarted node may briefly show less than it did
/// before), the committed offsets it showed last; a smaller one later is a commit gone back.
#[derive(Default)]
struct CommittedWatch {
    seen: HashMap<(u64, u32), u64>,
    /// The most any node ever showed, per partition.
    highest: BTreeMap<u32, u64>,
    reads: usize,
}

impl CommittedWatch {
    async fn observe(&mut self, cluster: &TestCluster, group: &str) {
        for via in cluster.live_ids() {
            let Ok(view) = cluster.get_ok(via, &format!("/v1/groups/{group}")).await else {
                continue;
            };
            self.reads += 1;
            for offset in view["offsets"].as_array().cloned().unwrap_or_default() {
                let (Some(partition), Some(committed)) =
                    (offset["partition"].as_u64(), offset["committed"].as_u64())
                else {
                    continue;
                };
                let partition = partition as u32;
                let last = self.seen.entry((via, partition)).or_default();
                assert!(
                    committed >= *last,
                    "node {via} showed partition {partition} committed at {last}, then at {committed}"
                );
                *last = committed;
                let highest = self.highest.entry(partition).or_default();
                *highest = (*highest).max(committed);
            }
        }
    }

    fn restarted(&mut self, node: u64) {
        self.seen.retain(|(via, _), _| *via != node);
    }
}

/// Sleeps `hold` while watching the committed offsets.
async fn hold(cluster: &TestCluster, watch: &mut CommittedWatch, group: &str, hold: Duration) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        watch.observe(cluster, group).await;
        let left = until.saturating_duration_since(Instant::now());
        tokio::time::sleep(Duration::from_millis(200).min(left)).await;
    }
}

#[tokio::test]
async fn a_random_fault_schedule_loses_and_duplicates_nothing() {
    let seed = seed();
    let _print_seed = SeedOnFailure(seed);
    eprintln!("fault schedule seed {seed} (HERALD_FAULT_SEED={seed} replays it)");
    let mut rng = Rng(seed);

    let mut cluster = TestCluster::start_with(3, NODE_ARGS).await;
    let (topic, group) = ("faults", "fault-group");
    create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
    let urls: Vec<String> = cluster
        .ids()
        .into_iter()
        .map(|id| messages_url(&cluster, id, topic))
        .collect();
    let base_urls: Vec<String> = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.node(id).base_url())
        .collect();

    let stop_producers = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for partition in 0..PARTITIONS {
        let name = format!("producer{partition}");
        let identity = register(&cluster, &name).await;
        producers.push(spawn_producer(
            name,
            identity,
            partition,
            urls.clone(),
            stop_producers.clone(),
        ));
    }
    let stop_consumer = Arc::new(AtomicBool::new(false));
    let consumer = {
        let stop = stop_consumer.clone();
        let mut consumer = FaultConsumer::new(base_urls.clone(), group, topic);
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                consumer.step().await;
            }
            consumer.log
        })
    };

    let (queue, streams) = tokio::join!(
        queue_phase::QueuePhase::start(&cluster, base_urls.clone()),
        stream_phase::StreamPhase::start(&cluster, base_urls.clone())
    );

    let mut faults = Faults::default();
    let mut watch = CommittedWatch::default();
    let started = Instant::now();
    hold(&cluster, &mut watch, group, Duration::from_secs(2)).await;
    let mut past_retention_done = false;
    while started.elapsed() < FAULT_PHASE {
        if !past_retention_done && started.elapsed() > FAULT_PHASE / 4 {
            past_retention_done = true;
            let down = queue
                .kill_past_retention(&mut cluster, &mut faults, &mut watch, group)
                .await;
            eprintln!("fault: killed the queue's preferred replica for {down:?}, past retention");
            continue;
        }
        // Half the faults hit a partition leader, the others any node.
        let target = if rng.below(2) == 0 {
            let partition = rng.below(u64::from(PARTITIONS)) as u32;
            match cluster
                .partition_view(cluster.ids()[0], topic, partition)
                .await
            {
                Ok(view) => view["leader"].as_u64().unwrap_or(1),
                Err(_) => 1 + rng.below(3),
            }
        } else {
            1 + rng.below(3)
        };
        match rng.below(4) {
            0 => {
                faults.snapshot_installs += queue_phase::installs(&cluster, target).await;
                cluster.kill(target);
                watch.restarted(target);
                let down = rng.millis(300, 2500);
                hold(&cluster, &mut watch, group, down).await;
                cluster.restart(target).await;
                faults.kills += 1;
                eprintln!("fault: killed node {target} for {down:?}");
            }
            1 => {
                cluster.pause(target);
                let paused = rng.millis(1000, 4000);
                hold(&cluster, &mut watch, group, paused).await;
                cluster.resume(target);
                faults.pauses += 1;
                eprintln!("fault: paused node {target} for {paused:?}");
            }
            2 => {
                cluster.isolate(target);
                let cut = rng.millis(1500, 5000);
                hold(&cluster, &mut watch, group, cut).await;
                cluster.heal();
                faults.isolations += 1;
                eprintln!("fault: isolated node {target} for {cut:?}");
            }
            _ => {
                for other in cluster.others_than(target) {
                    cluster.cut_one_way(target, other);
                }
                let cut = rng.millis(1500, 5000);
                hold(&cluster, &mut watch, group, cut).await;
                cluster.heal();
                faults.one_way_cuts += 1;
                eprintln!("fault: node {target} could not send for {cut:?}");
            }
        }
        let gap = rng.millis(300, 1500);
        hold(&cluster, &mut watch, group, gap).await;
    }
    let faults_took = started.elapsed();

    // Faults over: the producers finish their request in flight; the group catches up.
    stop_producers.store(true, Ordering::SeqCst);
    let (queue_verdict, stream_report) =
        tokio::join!(queue.finish(&cluster), streams.finish(&cluster));
    for id in cluster.live_ids() {
        faults.snapshot_installs += queue_phase::installs(&cluster, id).await;
    }
    let mut logs = Vec::new();
    for producer in producers {
        logs.push(producer.await.expect("a producer panicked"));
    }
    let mut high_watermarks = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let leader = cluster.stable_leader(topic, partition).await;
        let view = cluster
            .partition_view(leader, topic, partition)
            .await
            .unwrap_or_else(|err| cluster.fail(&err));
        high_watermarks.insert(partition, view["high_watermark"].as_u64().unwrap_or(0));
    }
    let drain_deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        watch.observe(&cluster, group).await;
        let done = high_watermarks
            .iter()
            .all(|(p, high)| watch.highest.get(p).copied().unwrap_or(0) >= *high);
        if done {
            break;
        }
        if Instant::now() >= drain_deadline {
            cluster.fail(&format!(
                "the group did not commit up to the high watermarks {high_watermarks:?} within \
                 {DRAIN_DEADLINE:?}; committed: {:?}",
                watch.highest
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_consumer.store(true, Ordering::SeqCst);
    let consumer: ConsumerLog = tokio::time::timeout(Duration::from_secs(30), consumer)
        .await
        .expect("the consumer stops")
        .expect("the consumer panicked");
    watch.observe(&cluster, group).await;

    // The checker.
    let mut acknowledged = 0;
    let mut lost = 0;
    let mut duplicated = 0;
    let mut stored_by_partition = BTreeMap::new();
    for log in &logs {
        let partition = log.partition;
        let stored = cluster
            .read_partition(cluster.ids()[0], topic, partition)
            .await;
        let mut copies: HashMap<&str, usize> = HashMap::new();
        for message in &stored {
            if let Some(id) = message.value["id"].as_str() {
                *copies.entry(id).or_default() += 1;
            }
        }
        for (id, offset) in &log.acked {
            acknowledged += 1;
            let at = stored.get(*offset as usize).map(|m| &m.value["id"]);
            if at.and_then(Value::as_str) != Some(id.as_str()) {
                lost += 1;
            }
            if copies.get(id.as_str()).copied().unwrap_or(0) > 1 {
                duplicated += 1;
            }
        }
        stored_by_partition.insert(partition, stored);
    }
    let delivered_offsets: std::collections::HashSet<(u32, u64)> = consumer
        .delivered
        .iter()
        .map(|(p, offset, _)| (*p, *offset))
        .collect();
    let never_delivered: usize = stored_by_partition
        .iter()
        .map(|(p, stored)| {
            stored
                .iter()
                .filter(|m| !delivered_offsets.contains(&(*p, m.offset)))
                .count()
        })
        .sum();
    eprintln!(
        "fault schedule (seed {seed}): {faults:?} in {faults_took:?}; {acknowledged} messages \
         acknowledged in {} requests ({} retried), lost {lost}, \
         duplicated {duplicated}; group: {} joins, {} polls, {} failed calls, {} commits \
         refused, {} deliveries of {} stored messages ({never_delivered} never delivered), \
         committed {:?}; {} committed-offset reads",
        logs.iter().map(|l| l.requests).sum::<usize>(),
        logs.iter().map(|l| l.retried).sum::<usize>(),
        consumer.joins,
        consumer.polls,
        consumer.failures,
        consumer.refused_commits,
        consumer.delivered.len(),
        stored_by_partition.values().map(Vec::len).sum::<usize>(),
        watch.highest,
        watch.reads,
    );
    eprintln!("fault schedule (seed {seed}): queue: {queue_verdict}");
    eprintln!("fault schedule (seed {seed}): streams: {stream_report}");
    assert!(
        faults.kills + faults.pauses + faults.isolations + faults.one_way_cuts >= 5,
        "too few faults: {faults:?}"
    );
    queue_verdict.assert_clean();
    stream_report.assert_clean();
    assert_eq!(lost, 0, "acknowledged messages lost");
    assert_eq!(duplicated, 0, "idempotently produced messages stored twice");
    for log in &logs {
        let stored = &stored_by_partition[&log.partition];
        // Exactly what was acknowledged, once each, at its offset, nothing else.
        let mut book = Book::default();
        for (id, offset) in &log.acked {
            book.sent.insert(id.clone());
            book.acked.insert(id.clone(), *offset);
        }
        book.check(stored);
        assert_eq!(
            stored.len(),
            log.acked.len(),
            "partition {} holds messages no request was acknowledged for",
            log.partition
        );
        // In sequence order.
        for pair in log.acked.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "partition {}: {} (sent first) at {}, {} at {}",
                log.partition,
                pair[0].0,
                pair[0].1,
                pair[1].0,
                pair[1].1
            );
        }
    }
    // At-least-once: the group reads from `earliest` and ends at every partition's end, so
    // every stored message reached it, lost poll answers included.
    assert_eq!(
        never_delivered, 0,
        "stored messages the group never delivered"
    );
    assert!(consumer.disorder.is_empty(), "{:?}", consumer.disorder);
    for (partition, offset, value) in &consumer.delivered {
        let stored = stored_by_partition[partition]
            .get(*offset as usize)
            .unwrap_or_else(|| panic!("delivered {partition}@{offset} is not in the log"));
        assert_eq!(
            &stored.value, value,
            "delivered {partition}@{offset} is not what the log holds"
        );
    }
    for (partition, committed) in &consumer.committed {
        let highest = watch.highest.get(partition).copied().unwrap_or(0);
        assert!(
            highest >= *committed,
            "partition {partition}: a commit of {committed} was confirmed, the group shows {highest}"
        );
    }
}
