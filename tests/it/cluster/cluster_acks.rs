//! What each `acks` level waits for, black box, on three real nodes: `acks=leader` is answered
//! once the leader has the batch on its own disk, so it is answered while both followers are
//! frozen (within the leader's lease), at the offsets the batch is later read at; `acks=all`
//! waits for a quorum, so the same situation leaves it unanswered until a follower returns
//! (and, queued behind the unacknowledged batch, it is answered after it).
//!
//! A leader takes writes only within its lease (the maximum election timeout after a quorum
//! last acknowledged it); past it, writes are refused. The cluster runs with a 10 s lease, so
//! the frozen phase fits in it with room to spare on a loaded machine, and the followers,
//! frozen for less than their 8 s election timeout, do not elect anyone when they continue.
//!
//! The harness (`common::cluster`) runs one cluster at a time.

use std::time::{Duration, Instant};

use crate::common::cluster::{create_replicated, messages_url, produce_client, TestCluster};
use crate::common::parse_offsets;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Raft timing of this test's cluster: a 10 s lease (the maximum election timeout).
const NODE_ARGS: &[&str] = &[
    "--heartbeat-interval-ms",
    "500",
    "--election-timeout-min-ms",
    "8000",
    "--election-timeout-max-ms",
    "10000",
];
/// Frozen for less than this, the followers do not start an election when they continue.
const ELECTION_TIMEOUT_MIN: Duration = Duration::from_secs(8);
/// An `acks=leader` answer while the followers are frozen proves it did not wait for them
/// (`acks=all` is not answered at all then); the bound only says it was prompt, with room for
/// a loaded machine's fsync, and half the lease.
const LEADER_ACK_BOUND: Duration = Duration::from_secs(5);

async fn produce(
    client: &reqwest::Client,
    url: &str,
    acks: &str,
    values: &[&str],
) -> reqwest::Result<(StatusCode, Value)> {
    let messages: Vec<Value> = values
        .iter()
        .map(|value| json!({"partition": 0, "value": value}))
        .collect();
    let response = client
        .post(format!("{url}?acks={acks}"))
        .json(&json!({ "messages": messages }))
        .send()
        .await?;
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    Ok((status, body))
}

#[tokio::test]
async fn leader_acks_come_from_the_leaders_disk_and_all_acks_from_a_quorum() {
    let mut cluster = TestCluster::start_with(3, NODE_ARGS).await;
    let topic = "acks";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let followers = cluster.others_than(leader);
    let client = produce_client();
    // The harness's URL asks for acks=all; each produce here names its own level.
    let url = messages_url(&cluster, leader, topic)
        .split('?')
        .next()
        .unwrap_or_default()
        .to_string();

    // In normal operation both levels answer the offsets the messages are stored at. The
    // acks=all batch goes last: once it is answered, nothing older awaits a quorum.
    let (status, body) = produce(&client, &url, "leader", &["l0", "l1", "l2"])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(parse_offsets(&body), vec![(0, 0), (0, 1), (0, 2)]);
    let (status, body) = produce(&client, &url, "all", &["a0", "a1"]).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(parse_offsets(&body), vec![(0, 3), (0, 4)]);

    // Both followers freeze: no quorum can acknowledge anything.
    for follower in &followers {
        cluster.pause(*follower);
    }
    let frozen_at = Instant::now();
    let (status, body) = produce(&client, &url, "leader", &["frozen-0", "frozen-1"])
        .await
        .unwrap();
    let took = frozen_at.elapsed();
    assert_eq!(
        status,
        StatusCode::OK,
        "acks=leader without followers: {body}"
    );
    assert_eq!(parse_offsets(&body), vec![(0, 5), (0, 6)]);
    assert!(
        took < LEADER_ACK_BOUND,
        "acks=leader took {took:?}: it must not wait for the frozen followers"
    );

    // acks=all cannot be answered now. No event marks its arrival (its batch is proposed while
    // the acks=leader batch before it still awaits its quorum), so it gets a second to be
    // answered wrongly; the 10 s lease keeps that wait from turning into a refusal, so still
    // pending means still waiting for the quorum.
    let pending = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { produce(&client, &url, "all", &["quorum-0"]).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !pending.is_finished(),
        "acks=all was answered while no follower could have the batch"
    );
    // Several batches are in flight per partition: an acks=leader batch proposed behind the
    // acks=all one is answered from the leader's disk, not after that batch's quorum.
    let behind_at = Instant::now();
    let (status, body) = produce(&client, &url, "leader", &["behind-0"])
        .await
        .unwrap();
    let took = behind_at.elapsed();
    assert_eq!(
        status,
        StatusCode::OK,
        "acks=leader behind a batch awaiting its quorum: {body}"
    );
    assert_eq!(parse_offsets(&body), vec![(0, 8)]);
    assert!(
        took < LEADER_ACK_BOUND,
        "acks=leader took {took:?}: it must not wait behind the acks=all batch's quorum"
    );
    assert!(
        !pending.is_finished(),
        "acks=all still waits for its quorum"
    );
    let frozen_for = frozen_at.elapsed();
    for follower in &followers {
        cluster.resume(*follower);
    }
    let answered = tokio::time::timeout(Duration::from_secs(60), pending)
        .await
        .expect("acks=all is answered once the followers are back")
        .expect("the produce task")
        .expect("the produce request");
    // Answered at offset 7 once the quorum is back. Only a freeze longer than the followers'
    // election timeout (a machine stalled for seconds) may have let them elect a new leader,
    // which drops the batch: then it is refused and nothing below may show it.
    let quorum_written = match answered {
        (StatusCode::OK, body) => {
            assert_eq!(parse_offsets(&body), vec![(0, 7)], "{body}");
            true
        }
        (status, body) if frozen_for >= ELECTION_TIMEOUT_MIN => {
            assert!(status.is_server_error(), "{status}: {body}");
            false
        }
        (status, body) => panic!(
            "acks=all was refused after the followers, frozen for {frozen_for:?}, came back: \
             {status}: {body}"
        ),
    };

    // One more acks=all batch: once it is answered, everything before it has its quorum too
    // (behind-0 was only answered from the leader's disk).
    let (status, body) = produce(&client, &url, "all", &["tail"]).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");

    // Everything acknowledged is stored at its acknowledged offset, read through every node.
    let mut expected = vec!["l0", "l1", "l2", "a0", "a1", "frozen-0", "frozen-1"];
    if quorum_written {
        assert_eq!(parse_offsets(&body), vec![(0, 9)], "{body}");
        expected.extend(["quorum-0", "behind-0", "tail"]);
    }
    for via in cluster.ids() {
        let stored = cluster.read_partition(via, topic, 0).await;
        let values: Vec<String> = stored
            .iter()
            .map(|message| message.value.as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            values
                .iter()
                .take(expected.len())
                .cloned()
                .collect::<Vec<_>>(),
            expected,
            "read through node {via}"
        );
        for (offset, message) in stored.iter().enumerate() {
            assert_eq!(message.offset, offset as u64, "read through node {via}");
        }
    }
}
