//! Network partitions, black box, on three real nodes under `acks=all` load: a partition leader
//! cut off from both followers (both ways, and one way), and a follower isolated and healed.
//! Links are cut with nftables drop rules between the nodes' own loopback addresses
//! (`common::nft`), so a cut node hears silence, as across a real partition. These tests need
//! root and `nft`, and fail saying so without them.
//!
//! Every attempt sends fresh message ids and is never retried, so each id is sent once: an
//! acknowledged id must be stored exactly once at its acknowledged offset, an unacknowledged
//! one at most once. A leader that cannot reach a quorum must acknowledge nothing, so no two
//! leaders can hand out one offset: two acknowledgements of one offset would fail the check of
//! the log, read back through every node after healing.
//!
//! Each leader test prints what it measured: the time from the cut to the first write
//! acknowledged through the majority, and what the cut-off leader answered and when.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::book::{batch, Book};
use crate::common::cluster::{
    create_replicated, messages_url, produce_client, produce_once, Attempt, TestCluster,
    CATCH_UP_DEADLINE, ELECTION_DEADLINE,
};
use crate::common::poll;
use tokio::task::JoinHandle;

/// A cut-off leader's produces end within these instead of the 30 s and 10 s defaults, so the
/// test sees its errors in seconds. The leader wait stays well above the 2.5 s election timeout.
const NODE_ARGS: &[&str] = &["--produce-timeout-ms", "4000", "--leader-wait-ms", "5000"];
/// Messages per produce request of the load.
const BATCH: usize = 3;
/// How long the load and the probes may take to get what a step waits for.
const STEP_DEADLINE: Duration = Duration::from_secs(30);

/// One produce attempt as a load task saw it.
#[derive(Clone, Debug)]
struct Outcome {
    via: u64,
    sent: Instant,
    answered: Instant,
    /// `Ok` when acknowledged, else what came back.
    result: Result<(), String>,
}

/// What every load task sent and saw, shared by them.
#[derive(Default)]
struct Ledger {
    book: Book,
    outcomes: Vec<Outcome>,
}

type SharedLedger = Arc<Mutex<Ledger>>;

/// One produce of fresh ids through `url`, recorded in the ledger; true when acknowledged.
async fn produce_fresh(
    ledger: &SharedLedger,
    client: &reqwest::Client,
    via: u64,
    url: &str,
    ids: Vec<String>,
) -> bool {
    ledger.lock().unwrap().book.sent.extend(ids.iter().cloned());
    let sent = Instant::now();
    let attempt = produce_once(client, url, &batch(&ids, 0)).await;
    let answered = Instant::now();
    let mut ledger = ledger.lock().unwrap();
    let result = match attempt {
        Attempt::Acknowledged(offsets) => {
            ledger.book.acknowledge(&ids, &offsets, 0, false);
            Ok(())
        }
        Attempt::Retryable(why) => {
            ledger.book.unacknowledged.extend(ids);
            Err(why)
        }
        Attempt::Fatal(why) => panic!("produce through node {via}: {why}"),
    };
    let acknowledged = result.is_ok();
    ledger.outcomes.push(Outcome {
        via,
        sent,
        answered,
        result,
    });
    acknowledged
}

/// A task producing fresh batches through `targets` (node, url), one request at a time, moving
/// to the next target after a failure, until `stop`.
fn spawn_load(
    name: &str,
    ledger: &SharedLedger,
    targets: Vec<(u64, String)>,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (name, ledger, stop) = (name.to_string(), ledger.clone(), stop.clone());
    tokio::spawn(async move {
        let client = produce_client();
        let mut next = 0;
        for request in 0.. {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let (via, url) = &targets[next % targets.len()];
            let ids = (0..BATCH)
                .map(|m| format!("{name}-{request}-{m}"))
                .collect();
            if !produce_fresh(&ledger, &client, *via, url, ids).await {
                next += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    })
}

/// Waits until the ledger holds `count` acknowledgements answered by one of `via` after
/// `since`.
async fn wait_for_acks(
    cluster: &TestCluster,
    ledger: &SharedLedger,
    via: &[u64],
    since: Instant,
    count: usize,
) {
    let acknowledged = poll(STEP_DEADLINE, Duration::from_millis(50), || async {
        let seen = ledger
            .lock()
            .unwrap()
            .outcomes
            .iter()
            .filter(|o| o.result.is_ok() && o.answered >= since && via.contains(&o.via))
            .count();
        if seen >= count {
            Ok(())
        } else {
            Err(seen.to_string())
        }
    })
    .await;
    if let Err(seen) = acknowledged {
        cluster.fail(&format!(
            "only {seen} of {count} produces acknowledged through nodes {via:?} within \
             {STEP_DEADLINE:?}; links cut: {:?}",
            cluster.cut_links()
        ));
    }
}

/// After the cut: a fresh single-message produce through the majority every 100 ms (each
/// waiting for its own answer) until one is acknowledged; answers when that was.
async fn first_majority_ack(
    cluster: &TestCluster,
    ledger: &SharedLedger,
    majority: &[u64],
    topic: &str,
) -> Instant {
    let acknowledged_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut probes = Vec::new();
    let deadline = Instant::now() + STEP_DEADLINE;
    let client = produce_client();
    for probe in 0.. {
        let acknowledged = *acknowledged_at.lock().unwrap();
        if let Some(at) = acknowledged {
            for probe in probes {
                let _ = probe.await;
            }
            return at;
        }
        if Instant::now() >= deadline {
            cluster.fail(&format!(
                "no produce through the majority {majority:?} was acknowledged within {STEP_DEADLINE:?}"
            ));
        }
        let via = majority[probe % majority.len()];
        let url = messages_url(cluster, via, topic);
        let (ledger, client, acknowledged_at) =
            (ledger.clone(), client.clone(), acknowledged_at.clone());
        probes.push(tokio::spawn(async move {
            let ids = vec![format!("probe-{probe}")];
            if produce_fresh(&ledger, &client, via, &url, ids).await {
                let now = Instant::now();
                acknowledged_at.lock().unwrap().get_or_insert(now);
            }
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}

/// After healing: every node reports `leader` leading with all three replicas in sync at one
/// high watermark, every replica holds that many messages itself (its own gauge: reads are
/// served by the leader), every node reads the same log, and it holds what the ledger says.
async fn check_replicas_agree(cluster: &TestCluster, ledger: &SharedLedger, topic: &str) {
    let leader = cluster.stable_leader(topic, 0).await;
    let reference = cluster.read_partition(leader, topic, 0).await;
    let total = reference.len() as u64;
    for via in cluster.ids() {
        cluster
            .wait_for_partition(via, topic, 0, CATCH_UP_DEADLINE, |p| {
                p["leader"] == leader
                    && p["in_sync"].as_array().map(Vec::len) == Some(3)
                    && p["high_watermark"] == total
            })
            .await;
        let node = cluster.node(via);
        poll(CATCH_UP_DEADLINE, Duration::from_millis(100), || async {
            match node
                .partition_gauge("herald_replica_high_watermark", topic, 0)
                .await
            {
                Some(held) if held == total => Ok(()),
                held => Err(format!("node {via}'s replica holds {held:?} of {total}")),
            }
        })
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
        let stored = cluster.read_partition(via, topic, 0).await;
        assert_eq!(
            stored, reference,
            "node {via} reads another log than node {leader}"
        );
    }
    let ledger = ledger.lock().unwrap();
    assert!(
        ledger.book.maybe_duplicated.is_empty(),
        "no attempt is retried"
    );
    ledger.book.check(&reference);
    eprintln!(
        "{topic}: {} messages stored, {} acknowledged, {} unacknowledged (each at most once)",
        reference.len(),
        ledger.book.acked.len(),
        ledger.book.unacknowledged.len()
    );
}

/// How a leader is cut off from its followers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// Nothing passes either way.
    BothWays,
    /// The leader's packets are dropped; the followers' still reach it.
    LeaderCannotSend,
}

/// The shared scenario of the leader tests: under load through every node, the leader of a
/// one-partition topic is cut off; the majority elects a new leader and takes writes; the old
/// leader acknowledges nothing it was sent after the cut; after healing, every replica has the
/// same log, holding every acknowledged message once at its offset.
async fn leader_cut_off(topic: &str, cut: Cut) {
    let mut cluster = TestCluster::start_with(3, NODE_ARGS).await;
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let old = cluster.stable_leader(topic, 0).await;
    let majority = cluster.others_than(old);
    let target = |id: u64| (id, messages_url(&cluster, id, topic));

    let ledger = SharedLedger::default();
    let stop_majority = Arc::new(AtomicBool::new(false));
    let stop_old = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for (n, &first) in majority.iter().enumerate() {
        let other = majority[(n + 1) % majority.len()];
        load.push(spawn_load(
            &format!("majority{n}"),
            &ledger,
            vec![target(first), target(other)],
            &stop_majority,
        ));
    }
    let old_leader_load = spawn_load("old", &ledger, vec![target(old)], &stop_old);
    let started = Instant::now();
    wait_for_acks(&cluster, &ledger, &[old], started, 5).await;
    wait_for_acks(&cluster, &ledger, &majority, started, 10).await;

    match cut {
        Cut::BothWays => cluster.isolate(old),
        Cut::LeaderCannotSend => {
            for &follower in &majority {
                cluster.cut_one_way(old, follower);
            }
        }
    }
    let cut_at = Instant::now();

    // The majority elects a leader of its own and takes writes.
    let first_ack = first_majority_ack(&cluster, &ledger, &majority, topic).await;
    let new = cluster
        .wait_for_partition(majority[0], topic, 0, ELECTION_DEADLINE, |p| {
            p["leader"].as_u64().is_some_and(|leader| leader != old)
        })
        .await["leader"]
        .as_u64()
        .unwrap_or_default();
    assert!(
        majority.contains(&new),
        "new leader {new} is not in {majority:?}"
    );
    wait_for_acks(&cluster, &ledger, &majority, first_ack, 20).await;

    // The old leader answers an error for what it was sent after the cut, and never 200.
    let answered = poll(STEP_DEADLINE, Duration::from_millis(100), || async {
        let errors_after_cut = ledger
            .lock()
            .unwrap()
            .outcomes
            .iter()
            .filter(|o| o.via == old && o.sent > cut_at && o.result.is_err())
            .count();
        if errors_after_cut >= 2 {
            Ok(())
        } else {
            Err(format!("{errors_after_cut} errors"))
        }
    })
    .await;
    if answered.is_err() {
        cluster.fail("the cut-off old leader did not answer its produces with errors");
    }
    stop_old.store(true, Ordering::SeqCst);
    old_leader_load.await.expect("the old leader's load task");
    let old_answers: Vec<Outcome> = ledger
        .lock()
        .unwrap()
        .outcomes
        .iter()
        .filter(|o| o.via == old)
        .cloned()
        .collect();
    for outcome in &old_answers {
        if outcome.sent > cut_at {
            assert!(
                outcome.result.is_err(),
                "the cut-off old leader {old} acknowledged a produce sent {:?} after the cut: {outcome:?}",
                outcome.sent - cut_at
            );
        }
    }
    let since_cut = |at: Instant| at.saturating_duration_since(cut_at);
    let last_ok = old_answers
        .iter()
        .filter(|o| o.result.is_ok())
        .map(|o| o.answered)
        .max();
    let first_error = old_answers
        .iter()
        .filter(|o| o.result.is_err() && o.answered > cut_at)
        .map(|o| o.answered)
        .min();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in old_answers.iter().filter(|o| o.sent > cut_at) {
        if let Err(why) = &outcome.result {
            let kind = ["503", "504", "409", "timed out", "error sending"]
                .into_iter()
                .find(|kind| why.contains(kind))
                .unwrap_or("other");
            *kinds.entry(kind.to_string()).or_default() += 1;
        }
    }
    eprintln!(
        "{topic} ({cut:?}): leader {old} cut off; node {new} leads; first write acknowledged \
         through the majority {:?} after the cut; the old leader's last 200 came {:?} after \
         the cut (for a request sent before it), its first error {:?} after it; its answers \
         to requests sent after the cut: {kinds:?}",
        since_cut(first_ack),
        last_ok.map(|at| if at > cut_at {
            since_cut(at)
        } else {
            Duration::ZERO
        }),
        first_error.map(since_cut),
    );

    // Heal: the old leader learns the new term, and every replica converges.
    cluster.heal();
    let healed_at = Instant::now();
    wait_for_acks(&cluster, &ledger, &majority, healed_at, 10).await;
    stop_majority.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("a load task");
    }
    check_replicas_agree(&cluster, &ledger, topic).await;
}

#[tokio::test]
async fn a_leader_cut_off_both_ways_is_replaced_and_acknowledges_nothing() {
    leader_cut_off("cut-leader", Cut::BothWays).await;
}

#[tokio::test]
async fn a_leader_that_cannot_send_is_replaced_and_acknowledges_nothing() {
    leader_cut_off("mute-leader", Cut::LeaderCannotSend).await;
}

#[tokio::test]
async fn an_isolated_follower_leaves_the_in_sync_set_and_catches_up_after_healing() {
    let mut cluster = TestCluster::start_with(3, NODE_ARGS).await;
    let topic = "isolated-follower";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let followers = cluster.others_than(leader);
    let (isolated, other) = (followers[0], followers[1]);

    let ledger = SharedLedger::default();
    let stop = Arc::new(AtomicBool::new(false));
    let load = [
        spawn_load(
            "leader",
            &ledger,
            vec![(leader, messages_url(&cluster, leader, topic))],
            &stop,
        ),
        spawn_load(
            "other",
            &ledger,
            vec![(other, messages_url(&cluster, other, topic))],
            &stop,
        ),
    ];
    wait_for_acks(&cluster, &ledger, &[leader, other], Instant::now(), 10).await;

    cluster.isolate(isolated);
    let isolated_at = Instant::now();
    // Writes go on with the quorum of two; the leader drops the silent follower from in_sync.
    wait_for_acks(&cluster, &ledger, &[leader, other], isolated_at, 30).await;
    let view = cluster
        .wait_for_partition(leader, topic, 0, ELECTION_DEADLINE, |p| {
            p["leader"] == leader
                && p["in_sync"]
                    .as_array()
                    .is_some_and(|in_sync| !in_sync.iter().any(|id| *id == isolated))
        })
        .await;
    eprintln!(
        "follower {isolated} isolated; out of in_sync after {:?}: {view}",
        isolated_at.elapsed()
    );
    // What the isolated replica holds itself, behind the leader's high watermark.
    let held = cluster
        .node(isolated)
        .partition_gauge("herald_replica_high_watermark", topic, 0)
        .await
        .unwrap_or_default();
    let leader_high = view["high_watermark"].as_u64().unwrap_or_default();
    assert!(
        held < leader_high,
        "isolated node {isolated} holds {held} messages, the leader {leader_high}: it was not cut off"
    );

    // Healed, it catches up with everything written meanwhile (and while it catches up).
    cluster.heal();
    let healed_at = Instant::now();
    wait_for_acks(&cluster, &ledger, &[leader, other], healed_at, 10).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("a load task");
    }
    check_replicas_agree(&cluster, &ledger, topic).await;
    eprintln!(
        "follower {isolated} caught up within {:?} of healing",
        healed_at.elapsed()
    );
}
