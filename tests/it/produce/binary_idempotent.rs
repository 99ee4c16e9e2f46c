//! Idempotent producers' batches in the stored layout (what `herald topics import` sends): a
//! stamped batch is written once and its retry answered as a duplicate, a gap and a fenced
//! epoch are refused, and a compacted batch keeps the gaps in its offsets.

use crate::common;

use crate::common::Server;
use bytes::Bytes;
use herald::domain::batch::{encode_batch, encode_compacted_batch, ProducerStamp};
use herald::domain::{Compression, Record, RecordKey, RecordValue};
use reqwest::StatusCode;
use serde_json::{json, Value};

const BATCH: &str = "application/vnd.herald.batch";

fn records(deltas: &[u32], timestamp: i64) -> Vec<Record> {
    deltas
        .iter()
        .map(|&offset_delta| Record {
            offset_delta,
            timestamp: timestamp + i64::from(offset_delta),
            key: Some(RecordKey::Text(format!("key-{offset_delta}"))),
            value: RecordValue::Json(Bytes::from(format!(r#"{{"n":{offset_delta}}}"#))),
            headers: vec![("h".into(), format!("v{offset_delta}"))],
        })
        .collect()
}

fn stamp(producer: &Value, base_sequence: i32) -> ProducerStamp {
    ProducerStamp {
        producer_id: producer["producer_id"].as_i64().expect("an id"),
        producer_epoch: producer["producer_epoch"].as_i64().expect("an epoch") as i16,
        base_sequence,
    }
}

async fn send(server: &Server, acks: &str, batch: &[u8]) -> (StatusCode, Value) {
    let response = server
        .post_raw(
            &format!("/v1/topics/copy/partitions/0/messages?acks={acks}"),
            BATCH,
            batch.to_vec(),
        )
        .await;
    server.json(response).await
}

async fn register(server: &Server) -> Value {
    let (status, producer) = server
        .json(
            server
                .post_json("/v1/producers", &json!({"name": "importer"}))
                .await,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{producer}");
    producer
}

#[tokio::test]
async fn a_stamped_batch_is_written_once_in_sequence_and_a_compacted_one_keeps_its_gaps() {
    let server = Server::start().await;
    server.create_topic("copy", 1).await;
    let now = common::now_ms();
    let producer = register(&server).await;

    let first = encode_batch(
        &records(&[0, 1], now),
        Compression::Lz4,
        stamp(&producer, 0),
    )
    .expect("encode");
    let (status, answer) = send(&server, "all", &first).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"partition": 0, "base_offset": 0, "record_count": 2})
    );
    // The retry of a batch whose answer was lost: acknowledged where it was written.
    let (status, answer) = send(&server, "all", &first).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"partition": 0, "base_offset": 0, "record_count": 2, "duplicate": true})
    );
    assert_eq!(server.high_watermarks("copy").await, vec![2]);

    // Sequences 0-1 are written: 5 is a gap, and a stamped batch needs acks=all.
    let gap =
        encode_batch(&records(&[0], now), Compression::None, stamp(&producer, 5)).expect("encode");
    let (status, answer) = send(&server, "all", &gap).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(
        (
            answer["code"].as_str(),
            answer["expected_sequence"].as_i64()
        ),
        (Some("out_of_order_sequence"), Some(2))
    );
    let (status, answer) = send(&server, "leader", &gap).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["code"], "invalid_request");

    // A compacted batch of offsets 0 and 3 of a span of 5: it takes sequences 2 to 6 and
    // offsets 2 to 6, its records at 2 and 5.
    let (status, answer) = send(&server, "all", &compacted(&producer, now)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["base_offset"], 2);
    assert_eq!(server.high_watermarks("copy").await, vec![7]);
    let offsets: Vec<u64> = server
        .read_all("copy", 0)
        .await
        .iter()
        .map(|message| message.offset)
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 5]);

    // The name registered again: the old epoch is fenced, the new one keeps the numbering.
    let again = register(&server).await;
    assert_eq!(again["producer_id"], producer["producer_id"]);
    let late =
        encode_batch(&records(&[0], now), Compression::None, stamp(&producer, 7)).expect("encode");
    let (status, answer) = send(&server, "all", &late).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["code"], "producer_fenced");
    let (status, answer) = send(&server, "all", &compacted(&again, now)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["duplicate"], true, "{answer}");
    assert_eq!(server.high_watermarks("copy").await, vec![7]);
}

/// What compaction left of a batch of 5 offsets: the records at 0 and 3, from sequence 2.
fn compacted(producer: &Value, now: i64) -> Bytes {
    encode_compacted_batch(
        &records(&[0, 3], now),
        Compression::Zstd,
        stamp(producer, 2),
        5,
        now + 4,
    )
    .expect("encode")
}
