//! Partition leader failover, black box, on three real nodes: a leader killed (SIGKILL) under
//! load or frozen (SIGSTOP) is replaced without losing, moving or duplicating acknowledged
//! messages, and leadership goes back to the preferred replica once it has returned.
//!
//! The harness (`common::cluster`) runs one cluster at a time, so these tests run one after the
//! other. Every message a test sends carries a unique id, so the log can be checked exactly.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::book::{batch, produce_batches, produce_ids, Book, PRODUCE_DEADLINE};
use crate::common::cluster::{
    assert_placement, create_replicated, messages_url, partition_of, produce_client, produce_once,
    produce_retrying, sorted_ids, Attempt, Stored, TestCluster, CATCH_UP_DEADLINE,
    ELECTION_DEADLINE,
};
use crate::common::poll;
use serde_json::Value;

/// `(offset, value)` pairs of stored messages.
fn offsets_and_values(stored: &[Stored]) -> Vec<(u64, Value)> {
    stored.iter().map(|m| (m.offset, m.value.clone())).collect()
}

/// What one producer of the failover test saw.
#[derive(Debug, Default)]
struct ProducerLog {
    /// (id, offset) in the order acknowledged.
    acked: Vec<(String, u64)>,
    maybe_duplicated: Vec<String>,
    failures: Vec<String>,
}

#[tokio::test]
async fn leader_failover_loses_no_acknowledged_message() {
    const PRODUCERS: usize = 3;
    const REQUESTS: usize = 250;
    const SIZE: usize = 5;
    const KILL_AFTER: usize = 150; // acknowledged requests, of PRODUCERS * REQUESTS

    let mut cluster = TestCluster::start(3).await;
    let topic = "failover";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let survivors = cluster.others_than(leader);
    let urls: Vec<String> = survivors
        .iter()
        .map(|&id| messages_url(&cluster, id, topic))
        .collect();

    let progress = Arc::new(AtomicUsize::new(0));
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        // Each producer starts on its own survivor and moves to the other after a failure.
        let mut urls = urls.clone();
        let shift = p % urls.len();
        urls.rotate_left(shift);
        let progress = progress.clone();
        producers.push(tokio::spawn(async move {
            let client = produce_client();
            let mut log = ProducerLog::default();
            for r in 0..REQUESTS {
                let ids: Vec<String> = (0..SIZE).map(|m| format!("p{p}-{r}-{m}")).collect();
                let produced = produce_retrying(&client, &urls, &batch(&ids, 0), PRODUCE_DEADLINE)
                    .await
                    .unwrap_or_else(|err| panic!("producer {p} request {r}: {err}"));
                assert_eq!(produced.offsets.len(), SIZE, "{produced:?}");
                if !produced.failures.is_empty() {
                    log.maybe_duplicated.extend(ids.iter().cloned());
                    log.failures.extend(produced.failures);
                }
                for (id, (partition, offset)) in ids.into_iter().zip(produced.offsets) {
                    assert_eq!(partition, 0);
                    log.acked.push((id, offset));
                }
                progress.fetch_add(1, Ordering::SeqCst);
            }
            log
        }));
    }

    // Kill the leader once some requests were acknowledged, while the producers are sending.
    poll(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            let acknowledged = progress.load(Ordering::SeqCst);
            if acknowledged >= KILL_AFTER {
                Ok(())
            } else {
                Err(acknowledged.to_string())
            }
        },
    )
    .await
    .unwrap_or_else(|acknowledged| {
        panic!("only {acknowledged} requests acknowledged before the kill deadline")
    });
    for producer in &producers {
        assert!(
            !producer.is_finished(),
            "a producer finished before the kill"
        );
    }
    let at_kill = progress.load(Ordering::SeqCst);
    cluster.kill(leader);
    let killed_at = Instant::now();

    let mut logs = Vec::new();
    for producer in producers {
        logs.push(
            tokio::time::timeout(Duration::from_secs(240), producer)
                .await
                .expect("the producers did not finish")
                .expect("a producer panicked"),
        );
    }
    eprintln!(
        "killed leader {leader} after {at_kill} acknowledged requests; producers done {:?} later; \
         {} requests retried",
        killed_at.elapsed(),
        logs.iter()
            .map(|l| l.maybe_duplicated.len() / SIZE)
            .sum::<usize>()
    );
    let new_leader = cluster.wait_for_leader_change(topic, 0, leader).await;
    assert!(survivors.contains(&new_leader));

    let mut book = Book::default();
    for log in &logs {
        for (id, offset) in &log.acked {
            book.sent.insert(id.clone());
            assert!(book.acked.insert(id.clone(), *offset).is_none());
        }
        book.maybe_duplicated
            .extend(log.maybe_duplicated.iter().cloned());
    }
    assert_eq!(book.acked.len(), PRODUCERS * REQUESTS * SIZE);

    let stored = cluster.read_partition(survivors[0], topic, 0).await;
    book.check(&stored);
    // Per producer, acknowledged messages are in the log in the order they were acknowledged.
    for (p, log) in logs.iter().enumerate() {
        for pair in log.acked.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "producer {p}: {} acknowledged at {} before {} at {}",
                pair[0].0,
                pair[0].1,
                pair[1].0,
                pair[1].1
            );
        }
    }
    let other_read = cluster.read_partition(survivors[1], topic, 0).await;
    assert_eq!(other_read, stored, "the survivors read differently");

    // The killed node comes back, catches up and is in sync again, with the same high
    // watermark as the survivors.
    cluster.restart(leader).await;
    let total = stored.len() as u64;
    for via in [survivors[0], leader] {
        let view = cluster
            .wait_for_partition(via, topic, 0, CATCH_UP_DEADLINE, |p| {
                p["in_sync"].as_array().map(Vec::len) == Some(3) && p["high_watermark"] == total
            })
            .await;
        assert_eq!(sorted_ids(&view["in_sync"]), vec![1, 2, 3], "{view}");
    }
    let through_restarted = cluster.read_partition(leader, topic, 0).await;
    assert_eq!(
        offsets_and_values(&through_restarted),
        offsets_and_values(&stored)
    );
}

#[tokio::test]
async fn paused_leader_steps_down_without_losing_or_duplicating() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "paused";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let old = cluster.stable_leader(topic, 0).await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != old).collect();
    let old_url = messages_url(&cluster, old, topic);
    let other_urls: Vec<String> = others
        .iter()
        .map(|&id| messages_url(&cluster, id, topic))
        .collect();

    let mut book = Book::default();
    produce_batches(&mut book, std::slice::from_ref(&old_url), "before", 10, 3).await;

    // Freeze the leader; the others elect a new one and take writes.
    assert_eq!(
        cluster.leader_of(topic, 0).await,
        old,
        "the leader moved before the pause"
    );
    cluster.pause(old);
    let paused_at = Instant::now();
    let new = cluster.wait_for_leader_change(topic, 0, old).await;
    eprintln!(
        "node {old} paused; node {new} leads after {:?}",
        paused_at.elapsed()
    );
    assert!(others.contains(&new));
    produce_batches(&mut book, &other_urls, "during", 10, 3).await;

    // Requests reach the frozen old leader (the kernel accepts them) and are served the moment
    // it continues, while it may still believe it leads: each either succeeds at true offsets
    // or fails, and is sent once only.
    let mut stale = Vec::new();
    for k in 0..4 {
        let ids: Vec<String> = (0..2).map(|m| format!("stale-{k}-{m}")).collect();
        book.sent.extend(ids.iter().cloned());
        let url = old_url.clone();
        stale.push(tokio::spawn(async move {
            let outcome = produce_once(&produce_client(), &url, &batch(&ids, 0)).await;
            (ids, outcome)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.resume(old);
    for request in stale {
        let (ids, outcome) = request.await.expect("a stale request panicked");
        match outcome {
            Attempt::Acknowledged(offsets) => book.acknowledge(&ids, &offsets, 0, false),
            Attempt::Retryable(why) => {
                eprintln!("request to the resumed old leader failed: {why}");
                book.unacknowledged.extend(ids);
            }
            Attempt::Fatal(why) => panic!("request to the resumed old leader: {why}"),
        }
    }

    // The old leader's node serves produces again (by forwarding, or as leader once elected).
    produce_batches(&mut book, std::slice::from_ref(&old_url), "after", 10, 3).await;

    let mut reads = Vec::new();
    for via in 1..=3 {
        let stored = cluster.read_partition(via, topic, 0).await;
        book.check(&stored);
        reads.push(stored);
    }
    assert_eq!(reads[0], reads[1], "nodes 1 and 2 read differently");
    assert_eq!(reads[0], reads[2], "nodes 1 and 3 read differently");
    assert!(book.acked.len() >= 90, "{} acknowledged", book.acked.len());
}

/// A JSON array of node ids, in its order (the first replica is the preferred leader).
fn replica_list(partition: &Value) -> Vec<u64> {
    partition["replicas"]
        .as_array()
        .unwrap_or_else(|| panic!("no replicas array: {partition}"))
        .iter()
        .map(|v| v.as_u64().unwrap_or_else(|| panic!("not a node id: {v}")))
        .collect()
}

/// Waits until every live node reports each partition of `replicas` led by its preferred
/// replica, the first of its replicas, with the replica lists as given. Returns how long that
/// took.
async fn wait_for_preferred_leaders(
    cluster: &TestCluster,
    topic: &str,
    replicas: &BTreeMap<u32, Vec<u64>>,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    let led = poll(within, Duration::from_millis(100), || async {
        let mut last = None;
        'nodes: for via in cluster.live_ids() {
            let described = match cluster.topic_view(via, topic).await {
                Ok(described) => described,
                Err(err) => {
                    last = Some(err);
                    break;
                }
            };
            for (&partition, want) in replicas {
                let view = partition_of(&described, partition).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(
                    &replica_list(&view),
                    want,
                    "{topic}/{partition}: the replicas changed (node {via}): {view}"
                );
                if view["leader"].as_u64() != Some(want[0]) {
                    last = Some(format!("node {via}: {view}"));
                    break 'nodes;
                }
            }
        }
        match last {
            None => Ok(()),
            Some(last) => Err(last),
        }
    })
    .await;
    if let Err(last) = led {
        cluster.fail(&format!(
            "{topic}: the partitions were not all led by their preferred replicas within \
             {within:?}; last: {last}"
        ));
    }
    started.elapsed()
}

#[tokio::test]
async fn leadership_returns_to_the_preferred_replica() {
    /// How long the preferred replica may take, once it is back, to lead again.
    const HAND_BACK_DEADLINE: Duration = Duration::from_secs(30);
    const PARTITIONS: u32 = 3;

    let mut cluster = TestCluster::start(3).await;
    let topic = "preferred";
    let created = create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    let mut replicas: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for partition in 0..PARTITIONS {
        let view = partition_of(&created, partition).unwrap_or_else(|e| panic!("{e}"));
        assert_placement(&view, 3, &[1, 2, 3]);
        replicas.insert(partition, replica_list(&view));
    }
    let took = wait_for_preferred_leaders(&cluster, topic, &replicas, ELECTION_DEADLINE).await;
    eprintln!("every partition led by its preferred replica {took:?} after {replicas:?}");

    let client = produce_client();
    let mut books: BTreeMap<u32, Book> = BTreeMap::new();
    let all_urls: Vec<String> = cluster
        .ids()
        .into_iter()
        .map(|id| messages_url(&cluster, id, topic))
        .collect();
    for partition in 0..PARTITIONS {
        let ids: Vec<String> = (0..5).map(|i| format!("before-{partition}-{i}")).collect();
        let book = books.entry(partition).or_default();
        produce_ids(&client, book, &all_urls, partition, ids).await;
    }

    // The preferred leader of partition 0 dies; another replica takes over.
    let preferred = replicas[&0][0];
    cluster.kill(preferred);
    let killed_at = Instant::now();
    let stand_in = cluster.wait_for_leader_change(topic, 0, preferred).await;
    eprintln!(
        "node {preferred} killed; node {stand_in} leads {topic}/0 after {:?}",
        killed_at.elapsed()
    );
    assert_ne!(stand_in, preferred);
    assert!(
        replicas[&0].contains(&stand_in),
        "{topic}/0 is led by {stand_in}, not one of its replicas {:?}",
        replicas[&0]
    );

    // Acknowledged writes while it is down, through the survivors.
    let survivor_urls: Vec<String> = cluster
        .live_ids()
        .into_iter()
        .map(|id| messages_url(&cluster, id, topic))
        .collect();
    for round in 0..4 {
        for partition in 0..PARTITIONS {
            let ids: Vec<String> = (0..5)
                .map(|i| format!("down-{round}-{partition}-{i}"))
                .collect();
            let book = books.get_mut(&partition).unwrap();
            produce_ids(&client, book, &survivor_urls, partition, ids).await;
        }
    }

    // It comes back with its own flags, catches up and leads partition 0 again.
    cluster.restart(preferred).await;
    let took = wait_for_preferred_leaders(&cluster, topic, &replicas, HAND_BACK_DEADLINE).await;
    eprintln!(
        "node {preferred} restarted; every partition led by its preferred replica {took:?} later"
    );

    // Every acknowledged message is at its offset, read through every node.
    for partition in 0..PARTITIONS {
        let mut first: Option<Vec<Stored>> = None;
        for via in 1..=3 {
            let stored = cluster.read_partition(via, topic, partition).await;
            books[&partition].check(&stored);
            if let Some(first) = &first {
                assert_eq!(
                    first, &stored,
                    "{topic}/{partition}: node {via} reads differently from node 1"
                );
            }
            first.get_or_insert(stored);
        }
    }
}

/// A follower that was down while its partition kept being written is caught up as soon as it
/// is back, though its leader's retries to it had backed off to seconds apart meanwhile: the
/// leader's node resets that backoff when its connection to the follower returns. (Quiescence
/// is off: waking a group that went quiet without the follower would hide a missing reset.)
#[tokio::test]
async fn a_follower_back_from_a_long_absence_is_caught_up_at_once() {
    /// Writes while the follower is away: long enough for the retries to it to back off to
    /// their longest wait (5 s, reached after about 6 s).
    const WRITES: usize = 40;
    const WRITE_EVERY: Duration = Duration::from_millis(250);
    /// From the follower's readiness to its holding the leader's log: 70 ms on this machine.
    /// Without the reset it took 1.2 s (replication restarted once a heartbeat's answer
    /// showed the follower behind), and a quiet group sends no heartbeats.
    const CAUGHT_UP_WITHIN: Duration = Duration::from_millis(800);

    let mut cluster = TestCluster::start_with(3, &["--quiesce-after-ms", "0"]).await;
    let topic = "back-from-away";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let away = cluster
        .others_than(leader)
        .into_iter()
        .max()
        .unwrap_or_else(|| cluster.fail("no follower"));
    cluster.kill(away);
    let survivors = cluster.others_than(away);
    for index in 0..WRITES {
        cluster
            .produce_id(&survivors, topic, 0, &format!("away-{index}"))
            .await;
        tokio::time::sleep(WRITE_EVERY).await;
    }

    let group = [("raft_group", format!("{topic}/0"))];
    let group: Vec<(&str, &str)> = group.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let leader_last = cluster
        .node(leader)
        .metric("herald_raft_last_log_index", &group)
        .await
        .unwrap_or_else(|| cluster.fail("the leader reports no last log index"));
    cluster.restart(away).await;
    let ready_at = Instant::now();
    poll(CATCH_UP_DEADLINE, Duration::from_millis(20), || async {
        match cluster
            .node(away)
            .metric("herald_raft_last_log_index", &group)
            .await
        {
            Some(last) if last >= leader_last => Ok(()),
            seen => Err(format!(
                "last log index {seen:?}, the leader's {leader_last}"
            )),
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("node {away} never caught up: {seen}")));
    let caught_up = ready_at.elapsed();
    assert!(
        caught_up <= CAUGHT_UP_WITHIN,
        "node {away} held the leader's log {caught_up:?} after it was ready (at most {CAUGHT_UP_WITHIN:?})"
    );
    let expected: Vec<String> = (0..WRITES).map(|index| format!("away-{index}")).collect();
    assert_eq!(cluster.stored_keys(away, topic, 0).await, expected);
}
