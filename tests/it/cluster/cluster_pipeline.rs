//! Pipelined replication, black box: three real nodes on loopback, one partition with
//! replication factor 3, many concurrent producers. The leader keeps several entries and
//! several AppendEntries per follower in flight; every message still lands once, at
//! contiguous offsets in the order of its request, and reads the same through every node.

use std::collections::BTreeMap;

use crate::common::cluster::{create_replicated, messages_url, produce_client, TestCluster};
use crate::common::parse_offsets;
use reqwest::StatusCode;
use serde_json::{json, Value};

const PRODUCERS: usize = 8;
const REQUESTS: usize = 15;
const MESSAGES: usize = 40;

#[tokio::test]
async fn concurrent_produces_to_one_rf3_partition_are_pipelined_and_contiguous() {
    let cluster = TestCluster::start(3).await;
    let topic = "pipelined";
    create_replicated(&cluster, 1, topic, 1, 3).await;
    cluster.wait_until_in_sync(topic, 0, 3).await;
    let leader = cluster.stable_leader(topic, 0).await;
    let url = messages_url(&cluster, leader, topic);
    let client = produce_client();
    let padding = "x".repeat(2000);

    let mut producers = Vec::new();
    for producer in 0..PRODUCERS {
        let (client, url, padding) = (client.clone(), url.clone(), padding.clone());
        producers.push(tokio::spawn(async move {
            let mut landed = Vec::new();
            for request in 0..REQUESTS {
                let values: Vec<String> = (0..MESSAGES)
                    .map(|index| format!("{producer}-{request}-{index}-{padding}"))
                    .collect();
                let messages: Vec<Value> = values
                    .iter()
                    .map(|value| json!({"partition": 0, "value": value}))
                    .collect();
                let response = client
                    .post(&url)
                    .json(&json!({ "messages": messages }))
                    .send()
                    .await
                    .expect("the produce request");
                let status = response.status();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                assert_eq!(status, StatusCode::OK, "{body}");
                let offsets: Vec<u64> = parse_offsets(&body).into_iter().map(|(_, o)| o).collect();
                assert!(
                    offsets.windows(2).all(|pair| pair[1] == pair[0] + 1),
                    "one request's messages are contiguous: {offsets:?}"
                );
                landed.extend(values.into_iter().zip(offsets));
            }
            landed
        }));
    }
    let mut by_offset = BTreeMap::new();
    for producer in producers {
        for (value, offset) in producer.await.expect("the producer task") {
            assert!(
                by_offset.insert(offset, value).is_none(),
                "offset {offset} given twice"
            );
        }
    }
    let total = (PRODUCERS * REQUESTS * MESSAGES) as u64;
    assert_eq!(
        by_offset.keys().copied().collect::<Vec<_>>(),
        (0..total).collect::<Vec<_>>(),
        "every offset from 0 is taken once"
    );

    for via in cluster.ids() {
        let stored = cluster.read_partition(via, topic, 0).await;
        assert_eq!(stored.len() as u64, total, "read through node {via}");
        for message in &stored {
            assert_eq!(
                message.value.as_str(),
                by_offset.get(&message.offset).map(String::as_str),
                "offset {} read through node {via}",
                message.offset
            );
        }
    }

    let pipelined = cluster
        .node(leader)
        .metric("herald_raft_appends_sent_total", &[("sent", "pipelined")])
        .await
        .unwrap_or(0.0);
    assert!(
        pipelined > 0.0,
        "the leader sent no AppendEntries while another was in flight"
    );
}
