//! Quiescent partition groups on three nodes: idle groups go quiet on every replica (no ticks,
//! no heartbeats), a write wakes its group and is acknowledged as usual, and a quiet group
//! whose leader is killed (SIGKILL) or cut off from the others elects a new leader and loses
//! nothing acknowledged. The node-to-node pings are what notices a silent leader then. A
//! follower that is down does not keep its groups awake, and when it returns its replicas wait,
//! quiet, for their leaders instead of campaigning. Nor does a follower whose election timer
//! runs out campaign while its leader's node is alive.

use std::time::{Duration, Instant};

use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::poll;

const PARTITIONS: u32 = 4;
/// Idle groups go quiet after `raft.quiesce_after_ms` (2 s) and the next offer (each second).
const QUIET_DEADLINE: Duration = Duration::from_secs(30);

/// The partition replicas `node` runs (internal topics' included): its `herald_raft_term`
/// series other than the metadata group's.
async fn replica_count(cluster: &TestCluster, node: u64) -> usize {
    let text = cluster
        .node(node)
        .get("/metrics")
        .await
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|line| line.starts_with("herald_raft_term{"))
        .filter(|line| !line.contains("raft_group=\"metadata\""))
        .count()
}

/// Waits until every partition replica on `node`, and at least `ours` of them, is quiet.
async fn wait_quiet(cluster: &TestCluster, node: u64, ours: usize) {
    let server = cluster.node(node);
    poll(QUIET_DEADLINE, Duration::from_millis(200), || async {
        let replicas = replica_count(cluster, node).await;
        let quiet = server
            .metric("herald_raft_quiet_groups", &[])
            .await
            .unwrap_or(0.0) as usize;
        if quiet == replicas && quiet >= ours {
            Ok(())
        } else {
            Err(format!("{quiet} of {replicas} replicas quiet"))
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("node {node}: not all quiet: {seen}")));
}

/// Campaigns `node`'s replicas withheld since it started, their leader being alive.
async fn withheld(cluster: &TestCluster, node: u64) -> f64 {
    cluster
        .node(node)
        .metric("herald_raft_campaigns_withheld_total", &[])
        .await
        .unwrap_or(0.0)
}

/// Pre-votes `node` sent since it started: what a replica whose election timer ran out sends.
async fn pre_votes(cluster: &TestCluster, node: u64) -> f64 {
    cluster
        .node(node)
        .metric("herald_raft_vote_requests_total", &[("kind", "pre_vote")])
        .await
        .unwrap_or(0.0)
}

#[tokio::test]
async fn idle_groups_go_quiet_wake_for_writes_and_fail_over_when_their_leader_dies() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "quiet";
    create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
        cluster
            .produce_id(
                &cluster.ids(),
                topic,
                partition,
                &format!("first-{partition}"),
            )
            .await;
    }
    for node in cluster.ids() {
        wait_quiet(&cluster, node, PARTITIONS as usize).await;
    }

    // A write wakes its group (the leader renews its lease first) and is acknowledged; the
    // group goes quiet again afterwards.
    let started = Instant::now();
    cluster.produce_id(&cluster.ids(), topic, 0, "woken").await;
    eprintln!("a write to a quiet group took {:?}", started.elapsed());
    for node in cluster.ids() {
        wait_quiet(&cluster, node, PARTITIONS as usize).await;
    }
    assert_eq!(cluster.stored_keys(2, topic, 0).await, ["first-0", "woken"]);

    // The leader of quiet partition 0 dies: the survivors elect one of them at once.
    let leader = cluster.stable_leader(topic, 0).await;
    let survivors = cluster.others_than(leader);
    cluster.kill(leader);
    let killed_at = Instant::now();
    let new_leader = cluster.wait_for_leader_change(topic, 0, leader).await;
    eprintln!(
        "quiet partition: leader {leader} killed, {new_leader} leads after {:?}",
        killed_at.elapsed()
    );
    assert!(survivors.contains(&new_leader));
    cluster.produce_id(&survivors, topic, 0, "after-kill").await;
    assert_eq!(
        cluster.stored_keys(survivors[0], topic, 0).await,
        ["first-0", "woken", "after-kill"]
    );
    // The other partitions kept every acknowledged message too, and take writes.
    for partition in 1..PARTITIONS {
        cluster
            .produce_id(&survivors, topic, partition, "later")
            .await;
        assert_eq!(
            cluster.stored_keys(survivors[0], topic, partition).await,
            [format!("first-{partition}"), "later".to_string()]
        );
    }
}

#[tokio::test]
async fn a_quiet_group_whose_leader_is_cut_off_elects_another() {
    let mut cluster = TestCluster::start(3).await;
    let topic = "quiet-cut";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    cluster.produce_id(&cluster.ids(), topic, 0, "before").await;
    for node in cluster.ids() {
        wait_quiet(&cluster, node, 1).await;
    }
    let leader = cluster.stable_leader(topic, 0).await;
    let others = cluster.others_than(leader);
    // The processes keep running; they only hear silence from the leader's node.
    cluster.isolate(leader);
    let cut_at = Instant::now();
    let new_leader = cluster.wait_for_leader_change(topic, 0, leader).await;
    eprintln!(
        "quiet partition: leader {leader} cut off, {new_leader} leads after {:?}",
        cut_at.elapsed()
    );
    assert!(others.contains(&new_leader));
    cluster.produce_id(&others, topic, 0, "during").await;
    cluster.heal();
    cluster.produce_id(&cluster.ids(), topic, 0, "after").await;
    assert_eq!(
        cluster.stored_keys(leader, topic, 0).await,
        ["before", "during", "after"],
        "read through the old leader once healed"
    );
}

#[tokio::test]
async fn groups_go_quiet_without_a_follower_that_is_down_and_its_replicas_wait_for_their_leaders_when_it_returns(
) {
    let mut cluster = TestCluster::start(3).await;
    let topic = "quiet-absent";
    create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
        cluster
            .produce_id(
                &cluster.ids(),
                topic,
                partition,
                &format!("first-{partition}"),
            )
            .await;
    }
    for node in cluster.ids() {
        wait_quiet(&cluster, node, PARTITIONS as usize).await;
    }

    // Node 3 stops. The groups it led elect on the survivors; then every group goes quiet
    // again without it, and reports it out of sync.
    let away = 3;
    let survivors = cluster.others_than(away);
    cluster.kill(away);
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 2).await;
    }
    for &node in &survivors {
        wait_quiet(&cluster, node, PARTITIONS as usize).await;
    }
    for partition in 0..PARTITIONS {
        let view = cluster.wait_until_in_sync(topic, partition, 2).await;
        let in_sync: Vec<u64> = serde_json::from_value(view["in_sync"].clone()).unwrap_or_default();
        assert!(!in_sync.contains(&away), "{topic}/{partition}: {view}");
    }
    // A write while it is away wakes its group only; the group goes quiet again without it.
    cluster.produce_id(&survivors, topic, 0, "while-away").await;
    for &node in &survivors {
        wait_quiet(&cluster, node, PARTITIONS as usize).await;
    }
    let survivors_pre_votes: Vec<f64> = {
        let mut counts = Vec::new();
        for &node in &survivors {
            counts.push(pre_votes(&cluster, node).await);
        }
        counts
    };

    // It returns: its replicas start quiet and wait for their leaders, which wake the groups
    // that went quiet without it; it catches up without a single election. Those it led when
    // it was killed restart as their leaders, step down at the newer leader's vote and wait
    // too; their stale heartbeats wake no survivor.
    cluster.restart(away).await;
    let replicas = replica_count(&cluster, away).await;
    poll(QUIET_DEADLINE, Duration::from_millis(200), || async {
        let dormant = cluster
            .node(away)
            .metric_total("herald_raft_dormant_starts_total")
            .await;
        if dormant >= replicas as f64 {
            Ok(())
        } else {
            Err(format!(
                "{dormant} of its {replicas} replicas waited dormant"
            ))
        }
    })
    .await
    .unwrap_or_else(|seen| cluster.fail(&format!("node {away}: {seen}")));
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
    }
    for node in cluster.ids() {
        wait_quiet(&cluster, node, PARTITIONS as usize).await;
    }
    assert_eq!(
        pre_votes(&cluster, away).await,
        0.0,
        "a replica of the returning node campaigned"
    );
    for (index, &node) in survivors.iter().enumerate() {
        assert_eq!(
            pre_votes(&cluster, node).await,
            survivors_pre_votes[index],
            "node {node} campaigned when node {away} returned"
        );
    }
    assert_eq!(
        cluster.stored_keys(away, topic, 0).await,
        ["first-0", "while-away"]
    );
}

/// A follower whose election timer runs out while its leader's node is alive waits, quiet, for
/// the leader's next message instead of campaigning (what kept a restarted node holding
/// 10,000 replicas, too loaded to take its leaders' heartbeats in time, campaigning for
/// minutes). Here node 3's election timeout is shorter than the others' heartbeat interval,
/// so its timer runs out between every two heartbeats of a group it follows; it is the
/// metadata group's learner (one metadata voter), so only partition replicas could campaign.
#[tokio::test]
async fn a_follower_does_not_campaign_against_a_leader_that_is_alive() {
    let slow_heartbeats = [
        ("HERALD_HEARTBEAT_INTERVAL_MS", "5000"),
        ("HERALD_ELECTION_TIMEOUT_MIN_MS", "10000"),
        ("HERALD_ELECTION_TIMEOUT_MAX_MS", "11000"),
    ];
    // A follower campaigns once its leader lease (the maximum election timeout) and an
    // election timeout have passed since the last heartbeat: 3.1-3.2 s here, under 5 s.
    let short_timeout = [
        ("HERALD_HEARTBEAT_INTERVAL_MS", "500"),
        ("HERALD_ELECTION_TIMEOUT_MIN_MS", "1500"),
        ("HERALD_ELECTION_TIMEOUT_MAX_MS", "1600"),
    ];
    let env: Vec<(u64, &str, &str)> = [1, 2]
        .into_iter()
        .flat_map(|node| slow_heartbeats.map(|(name, value)| (node, name, value)))
        .chain(short_timeout.map(|(name, value)| (3, name, value)))
        .collect();
    // Groups stay awake: the leaders' heartbeats are what node 3 waits for.
    let cluster = TestCluster::start_with_env(
        3,
        &["--quiesce-after-ms", "0", "--metadata-voters", "1"],
        &env,
    )
    .await;
    let topic = "live-leaders";
    create_replicated(&cluster, 1, topic, PARTITIONS, 3).await;
    let mut leaders = Vec::new();
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(topic, partition, 3).await;
        leaders.push(cluster.stable_leader(topic, partition).await);
    }
    assert!(
        leaders.iter().any(|leader| *leader != 3),
        "node 3 follows no group: {leaders:?}"
    );
    let pre_votes_before = pre_votes(&cluster, 3).await;
    let withheld_before = withheld(&cluster, 3).await;
    // Several of the leaders' heartbeat intervals, each longer than node 3's timeout.
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert_eq!(
        pre_votes(&cluster, 3).await,
        pre_votes_before,
        "node 3 campaigned against a live leader"
    );
    assert!(
        withheld(&cluster, 3).await > withheld_before,
        "node 3's timers never ran out: the test shows nothing"
    );
    for partition in 0..PARTITIONS {
        assert_eq!(
            cluster.leader_of(topic, partition).await,
            leaders[partition as usize],
            "{topic}/{partition}: the leadership moved"
        );
        // A follower waiting quiet still takes its leader's entries.
        cluster
            .produce_id(&cluster.ids(), topic, partition, "later")
            .await;
        let stored = cluster.stored_keys(3, topic, partition).await;
        assert_eq!(stored, ["later"], "{topic}/{partition} on node 3");
    }
}
