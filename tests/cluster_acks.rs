//! What each `acks` level waits for, black box, on three real nodes: `acks=leader` is answered
//! once the leader has the batch on its own disk, so it is answered while both followers are
//! frozen (within the leader's lease), at the offsets the batch is later read at; `acks=all`
//! waits for a quorum, so the same situation leaves it unanswered until a follower returns
//! (and, queued behind the unacknowledged batch, it is answered after it).
//!
//! The harness (`common::cluster`) runs one cluster at a time.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{create_replicated, messages_url, produce_client, TestCluster};
use common::parse_offsets;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Well inside the leader's lease (the 2.5 s maximum election timeout after the followers'
/// last acknowledgement), so the leader still takes writes.
const LEADER_ACK_BOUND: Duration = Duration::from_millis(1500);

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
    let mut cluster = TestCluster::start(3).await;
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
    // acks=all batch goes last: once it is answered, nothing older awaits a quorum (a partition
    // appends one batch at a time, so a batch queues behind one still awaiting its quorum).
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

    // acks=all cannot be answered now: it is still pending when the followers come back.
    let pending = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { produce(&client, &url, "all", &["quorum-0"]).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !pending.is_finished(),
        "acks=all was answered while no follower could have the batch"
    );
    for follower in &followers {
        cluster.resume(*follower);
    }
    let answered = tokio::time::timeout(Duration::from_secs(60), pending)
        .await
        .expect("acks=all is answered once the followers are back")
        .expect("the produce task")
        .expect("the produce request");
    // Answered at offset 7 (after the quorum came back), or refused while the leader's lease
    // ran out (then it was never written and nothing below may show it).
    let quorum_written = match answered {
        (StatusCode::OK, body) => {
            assert_eq!(parse_offsets(&body), vec![(0, 7)], "{body}");
            true
        }
        (status, body) => {
            assert!(status.is_server_error(), "{status}: {body}");
            false
        }
    };

    // Everything acknowledged is stored at its acknowledged offset, read through every node.
    let mut expected = vec!["l0", "l1", "l2", "a0", "a1", "frozen-0", "frozen-1"];
    if quorum_written {
        expected.push("quorum-0");
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
