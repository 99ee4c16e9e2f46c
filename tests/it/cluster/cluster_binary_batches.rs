//! Binary batches in a cluster: a batch sent to a node that does not lead its partition is
//! forwarded to the leader unchanged, and a binary read through any node answers the stored
//! bytes.

use crate::common;

use crate::common::cluster::{create_replicated, TestCluster};
use herald::domain::batch::{encode_batch, ProducerStamp};
use herald::domain::{Compression, Record, RecordKey, RecordValue};
use reqwest::StatusCode;
use serde_json::Value;

const BATCH: &str = "application/vnd.herald.batch";

#[tokio::test]
async fn a_batch_sent_to_a_follower_is_stored_as_sent_on_the_leader() {
    let cluster = TestCluster::start(3).await;
    create_replicated(&cluster, 1, "forwarded", 1, 3).await;
    let leader = cluster.stable_leader("forwarded", 0).await;
    let via = cluster.others_than(leader)[0];
    let records: Vec<Record> = (0..20u32)
        .map(|index| Record {
            offset_delta: index,
            timestamp: common::now_ms(),
            key: Some(RecordKey::Text(format!("k{index}"))),
            value: RecordValue::Bytes(bytes::Bytes::from(vec![index as u8; 64])),
            headers: Vec::new(),
        })
        .collect();
    let batch = encode_batch(&records, Compression::Zstd, ProducerStamp::NONE).expect("encode");

    let node = cluster.node(via);
    let response = node
        .post_raw(
            "/v1/topics/forwarded/partitions/0/messages",
            BATCH,
            batch.to_vec(),
        )
        .await;
    let (status, answer) = node.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["base_offset"], 0);
    assert_eq!(answer["record_count"], 20);

    for id in cluster.ids() {
        let node = cluster.node(id);
        let response = node
            .http_client()
            .get(node.url("/v1/topics/forwarded/partitions/0/messages?offset=0"))
            .header("accept", BATCH)
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["herald-next-offset"], "20");
        let body = response.bytes().await.expect("body");
        assert_eq!(&body[..8], &0u64.to_be_bytes());
        assert_eq!(&body[8..], &batch[..], "read through node {id}");
        let (status, answer): (StatusCode, Value) = node.fetch("forwarded", 0, "offset=0").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            answer["messages"].as_array().map(Vec::len),
            Some(20),
            "{answer}"
        );
    }
}
