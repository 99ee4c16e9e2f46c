//! Forwarded client traffic never holds up replication, black box, on three real nodes.
//!
//! One node is flooded with long polls for partitions the two other nodes lead, so it forwards
//! every one of them and fills the forwarding limit of both its peers (lowered with
//! `--rpc-forward-max-concurrent-requests` so a small flood does it). Meanwhile it produces with
//! `acks=all` to the partitions it leads itself, which needs its raft messages to reach the
//! very peers its forwarded calls are queued at. Replication must go on as if nothing happened:
//! produce latency stays low, no group looks for a new leader (no vote requests, leaders and
//! in-sync replicas unchanged). Then the flood's HTTP clients go away, and the long polls must
//! stop on the leaders too (their forwarded-requests gauge back to 0), long before their wait.
//!
//! The harness (`common::cluster`) runs one cluster at a time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::cluster::{create_replicated, TestCluster};
use crate::common::poll;
use reqwest::StatusCode;
use serde_json::{json, Value};

const TOPIC: &str = "lanes";
const PARTITIONS: u32 = 6;
/// The forwarding limit per peer connection the nodes run with.
const FORWARD_LIMIT: usize = 16;
/// Long polls sent per flooded peer: three times its limit, so calls also queue behind it.
const POLLS_PER_PEER: usize = 3 * FORWARD_LIMIT;
/// Each long poll waits this long for a message that never comes: far longer than the test.
const POLL_WAIT_MS: u64 = 30_000;
/// Produces made while the flood holds, one after the other, spanning several election
/// timeouts (1.5 to 2.5 s) so that stalled heartbeats would show as elections.
const PRODUCES: usize = 40;
const PRODUCE_PAUSE: Duration = Duration::from_millis(100);
/// Generous for a loaded 2-core machine; an `acks=all` produce stuck behind forwarded calls
/// waits for an election at least (1.5 s) or for the polls to end (30 s).
const PRODUCE_LATENCY_BOUND: Duration = Duration::from_millis(1500);
/// How long the flood may take to reach the leaders, and aborted polls to stop there.
const SETTLE: Duration = Duration::from_secs(15);

const VOTES: &str = "herald_raft_vote_requests_total";
const FORWARDED_IN_FLIGHT: &str = "herald_forwarded_requests_in_flight";

/// Vote requests (pre-votes and votes) all nodes have sent so far.
async fn vote_requests(cluster: &TestCluster) -> f64 {
    let mut total = 0.0;
    for id in cluster.ids() {
        for kind in ["pre_vote", "vote"] {
            total += cluster
                .node(id)
                .metric(VOTES, &[("kind", kind)])
                .await
                .unwrap_or(0.0);
        }
    }
    total
}

async fn forwarded_in_flight(cluster: &TestCluster, id: u64) -> f64 {
    cluster
        .node(id)
        .metric(FORWARDED_IN_FLIGHT, &[])
        .await
        .unwrap_or(0.0)
}

/// Every partition's leader and in-sync replicas, as node `via` reports them.
async fn leadership(cluster: &TestCluster, via: u64) -> BTreeMap<u32, (u64, usize)> {
    let topic = cluster
        .topic_view(via, TOPIC)
        .await
        .unwrap_or_else(|error| cluster.fail(&error));
    let mut state = BTreeMap::new();
    for partition in topic["partitions"].as_array().into_iter().flatten() {
        let leader = partition["leader"].as_u64().unwrap_or(0);
        let in_sync = partition["in_sync"].as_array().map_or(0, Vec::len);
        state.insert(
            partition["partition"].as_u64().unwrap() as u32,
            (leader, in_sync),
        );
    }
    state
}

#[tokio::test]
async fn long_polls_forwarded_by_a_follower_do_not_stall_the_raft_traffic() {
    let limit = FORWARD_LIMIT.to_string();
    let cluster = TestCluster::start_with(
        3,
        &["--rpc-forward-max-concurrent-requests", limit.as_str()],
    )
    .await;
    create_replicated(&cluster, 1, TOPIC, PARTITIONS, 3).await;
    let mut leaders = BTreeMap::new();
    for partition in 0..PARTITIONS {
        cluster.wait_until_in_sync(TOPIC, partition, 3).await;
        leaders.insert(partition, cluster.stable_leader(TOPIC, partition).await);
    }
    // The flooded node: it leads a partition, and each of its peers leads one too, so the
    // flood fills both of its outgoing connections and its groups' heartbeats need one.
    let led_by = |node: u64| -> Vec<u32> {
        leaders
            .iter()
            .filter(|(_, leader)| **leader == node)
            .map(|(partition, _)| *partition)
            .collect()
    };
    let flooded = cluster
        .ids()
        .into_iter()
        .find(|&node| {
            !led_by(node).is_empty()
                && cluster
                    .others_than(node)
                    .iter()
                    .all(|&peer| !led_by(peer).is_empty())
        })
        .unwrap_or_else(|| {
            cluster.fail(&format!("leaders not spread over the nodes: {leaders:?}"))
        });
    let peers = cluster.others_than(flooded);
    let before = leadership(&cluster, flooded).await;
    assert!(
        before.values().all(|(_, in_sync)| *in_sync == 3),
        "{before:?}"
    );

    // The flood: long polls sent to the flooded node for partitions its peers lead.
    let flood_client = herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(POLL_WAIT_MS) + Duration::from_secs(15))
        .build()
        .unwrap();
    let mut flood = Vec::new();
    for &peer in &peers {
        let partition = led_by(peer)[0];
        let url = cluster.node(flooded).url(&format!(
            "/v1/topics/{TOPIC}/partitions/{partition}/messages?offset=latest&max_wait_ms={POLL_WAIT_MS}"
        ));
        for _ in 0..POLLS_PER_PEER {
            let client = flood_client.clone();
            let url = url.clone();
            flood.push(tokio::spawn(async move {
                client.get(&url).send().await.map(|answer| answer.status())
            }));
        }
    }
    for &peer in &peers {
        poll(SETTLE, Duration::from_millis(100), || async {
            let running = forwarded_in_flight(&cluster, peer).await;
            if running >= FORWARD_LIMIT as f64 {
                Ok(())
            } else {
                Err(format!("node {peer} runs {running} forwarded requests"))
            }
        })
        .await
        .unwrap_or_else(|seen| cluster.fail(&format!("the flood did not fill its limit: {seen}")));
    }
    let votes_before = vote_requests(&cluster).await;

    // Replication through the flooded node's own partitions goes on at its usual pace.
    let client = herald_client::cli::http_client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let own = led_by(flooded);
    let url = cluster
        .node(flooded)
        .url(&format!("/v1/topics/{TOPIC}/messages?acks=all"));
    let mut slowest = Duration::ZERO;
    for index in 0..PRODUCES {
        let partition = own[index % own.len()];
        let started = Instant::now();
        let answer = client
            .post(&url)
            .json(&json!({"messages": [{"partition": partition, "value": format!("m{index}")}]}))
            .send()
            .await;
        let took = started.elapsed();
        let (status, body) = match answer {
            Ok(answer) => (answer.status(), answer.text().await.unwrap_or_default()),
            Err(error) => (StatusCode::REQUEST_TIMEOUT, error.to_string()),
        };
        if status != StatusCode::OK || took > PRODUCE_LATENCY_BOUND {
            cluster.fail(&format!(
                "produce {index} to partition {partition} during the flood: {status} after {took:?}: {body}"
            ));
        }
        slowest = slowest.max(took);
        tokio::time::sleep(PRODUCE_PAUSE).await;
    }
    println!("slowest acks=all produce during the flood: {slowest:?}");

    let votes_after = vote_requests(&cluster).await;
    assert_eq!(
        votes_after, votes_before,
        "a group looked for a new leader during the flood"
    );
    let after = leadership(&cluster, flooded).await;
    assert_eq!(
        after, before,
        "leaders or in-sync replicas changed during the flood"
    );
    assert!(
        flood.iter().all(|poll| !poll.is_finished()),
        "the long polls must still be waiting: the flood held throughout"
    );

    // The flood's clients go away: the leaders stop serving their forwarded polls.
    for poll in &flood {
        poll.abort();
    }
    for &peer in &peers {
        poll(SETTLE, Duration::from_millis(100), || async {
            let running = forwarded_in_flight(&cluster, peer).await;
            if running == 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "node {peer} still runs {running} forwarded requests"
                ))
            }
        })
        .await
        .unwrap_or_else(|seen| {
            cluster.fail(&format!(
                "forwarded long polls outlived their clients by {SETTLE:?}: {seen}"
            ))
        });
    }
    // And the node still forwards: a read of a peer's partition through it answers.
    let partition = led_by(peers[0])[0];
    let answer: Value = client
        .get(cluster.node(flooded).url(&format!(
            "/v1/topics/{TOPIC}/partitions/{partition}/messages?offset=earliest&max_wait_ms=0"
        )))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(answer["messages"].is_array(), "{answer}");
}
