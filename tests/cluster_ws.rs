//! The WebSocket transport in a three-node cluster: a subscriber on one node gets, in order,
//! what is produced through another, and resumes on a third without loss or repeat.

mod common;

use std::time::Duration;

use common::cluster::{
    create_replicated, messages_url, produce_client, produce_retrying, TestCluster,
};
use common::ws::{batch, connect, receive, subscribe, values};
use serde_json::json;

const PRODUCE_DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_subscriber_follows_other_nodes_writes_and_resumes_on_a_third_node() {
    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "spread", 2, 3).await;
    let client = produce_client();
    let via_two = [messages_url(&cluster, 2, "spread")];

    let mut first = connect(cluster.node(1)).await;
    subscribe(
        &mut first,
        json!({"op": "subscribe", "id": "s", "topic": "spread", "from": "earliest"}),
    )
    .await;
    for partition in 0..2u32 {
        let base = i64::from(partition) * 100;
        produce_retrying(
            &client,
            &via_two,
            &batch(base..base + 5, Some(partition)),
            PRODUCE_DEADLINE,
        )
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
    }
    let seen = receive(&mut first, "s", 10).await;
    for partition in 0..2u64 {
        let in_partition: Vec<_> = seen
            .iter()
            .filter(|m| m["partition"] == partition)
            .cloned()
            .collect();
        let base = partition as i64 * 100;
        assert_eq!(values(&in_partition), (base..base + 5).collect::<Vec<_>>());
    }
    first.close(None).await.expect("close");

    for partition in 0..2u32 {
        let base = i64::from(partition) * 100;
        produce_retrying(
            &client,
            &via_two,
            &batch(base + 5..base + 8, Some(partition)),
            PRODUCE_DEADLINE,
        )
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
    }
    let mut third = connect(cluster.node(3)).await;
    // The last message's token covers both partitions.
    let token = seen.last().expect("messages")["resume"]
        .as_str()
        .expect("token")
        .to_string();
    subscribe(
        &mut third,
        json!({"op": "subscribe", "id": "r", "topic": "spread", "from": token}),
    )
    .await;
    let resumed = receive(&mut third, "r", 6).await;
    for partition in 0..2u64 {
        let in_partition: Vec<_> = resumed
            .iter()
            .filter(|m| m["partition"] == partition)
            .cloned()
            .collect();
        let base = partition as i64 * 100;
        assert_eq!(
            values(&in_partition),
            (base + 5..base + 8).collect::<Vec<_>>()
        );
    }
}
