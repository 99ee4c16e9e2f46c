//! The WebSocket transport in a three-node cluster: a subscriber on one node gets, in order,
//! what is produced through another, and resumes on a third without loss or repeat; a group
//! member on a node that leads none of its partitions reads and commits through it.

use std::time::Duration;

use crate::common::cluster::{
    create_replicated, messages_url, produce_client, produce_retrying, TestCluster,
};
use crate::common::poll;
use crate::common::ws::{batch, connect, next_frame, receive, send, subscribe, values};
use crate::common::ws_streams::{positions, GroupView};
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

#[tokio::test]
async fn a_group_member_on_a_node_that_leads_none_of_its_partitions_reads_and_commits() {
    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "far", 2, 3).await;
    let leaders = [
        cluster.stable_leader("far", 0).await,
        cluster.stable_leader("far", 1).await,
    ];
    let away = cluster
        .ids()
        .into_iter()
        .find(|id| !leaders.contains(id))
        .expect("three nodes, two partition leaders");
    let client = produce_client();
    let via_leader = [messages_url(&cluster, leaders[0], "far")];

    let mut socket = connect(cluster.node(away)).await;
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "g", "group": "remote", "topics": ["far"],
               "session_timeout_ms": 5000}),
    )
    .await;
    let mut view = GroupView::default();
    view.read_until(&mut socket, "g", |view| view.assignments.len() == 2)
        .await;
    for partition in 0..2u32 {
        let base = i64::from(partition) * 100;
        produce_retrying(
            &client,
            &via_leader,
            &batch(base..base + 5, Some(partition)),
            PRODUCE_DEADLINE,
        )
        .await
        .unwrap_or_else(|seen| cluster.fail(&seen));
    }
    view.read_until(&mut socket, "g", |view| view.messages.len() == 10)
        .await;
    let expected: Vec<(u32, u64)> = (0..2u32)
        .flat_map(|p| (0..5u64).map(move |o| (p, o)))
        .collect();
    assert_eq!(positions(&view.messages), expected);

    let offsets: Vec<_> = (0..2u32)
        .map(|p| json!({"topic": "far", "partition": p, "offset": 5}))
        .collect();
    send(
        &mut socket,
        json!({"op": "commit", "id": "g", "offsets": offsets}),
    )
    .await;
    assert_eq!(
        next_frame(&mut socket).await,
        json!({"op": "ok", "id": "g"})
    );
    socket.close(None).await.expect("close");

    // Left at once, with its commits, as any node sees it.
    let other = cluster.others_than(away)[0];
    let done = poll(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let described = cluster.node(other).describe_group("remote").await;
            let members = described["members"].as_array().map(Vec::len);
            let committed: Vec<Option<u64>> = described["offsets"]
                .as_array()
                .map(|o| o.iter().map(|o| o["committed"].as_u64()).collect())
                .unwrap_or_default();
            if members == Some(0) && committed == [Some(5), Some(5)] {
                Ok(())
            } else {
                Err(described.to_string())
            }
        },
    )
    .await;
    assert!(done.is_ok(), "{done:?}");
}
