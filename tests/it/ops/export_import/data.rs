//! What the source cluster holds: a topic of several partitions with text and byte keys,
//! messages without a key, headers, JSON and byte values, the producer's own timestamps, in
//! plain batches (JSON produces) and LZ4 and zstd ones (binary produces); and a compacted topic
//! whose cleaning left batches with gaps in their offsets and a batch with no record at all.

use std::time::{Duration, Instant};

use bytes::Bytes;
use herald::domain::batch::{encode_batch, ProducerStamp};
use herald::domain::{Compression, Record, RecordKey, RecordValue};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{b64, Server};

/// How long a produce is retried while the partition has no leader (503: nothing written).
const PRODUCE_PATIENCE: Duration = Duration::from_secs(30);
/// How long the source's cleaner gets to compact the compacted topic.
const COMPACTION_DEADLINE: Duration = Duration::from_secs(90);
const BATCH: &str = "application/vnd.herald.batch";

/// Posts `body` to `path` on `node` until it is not refused with 503; asserts 200.
async fn post(node: &Server, path: &str, content_type: &str, body: Vec<u8>) -> Value {
    let give_up_at = Instant::now() + PRODUCE_PATIENCE;
    loop {
        let response = node.post_raw(path, content_type, body.clone()).await;
        let (status, answer) = node.json(response).await;
        if status == StatusCode::OK {
            return answer;
        }
        if status != StatusCode::SERVICE_UNAVAILABLE || Instant::now() > give_up_at {
            node.fail(&format!("POST {path}: {status}: {answer}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `orders` (`partitions` of them): twelve JSON requests of forty messages, then per partition
/// an LZ4 and a zstd batch in the stored layout.
pub async fn fill_orders(node: &Server, partitions: u32, base_ts: i64) {
    for round in 0..12u32 {
        let messages: Vec<Value> = (0..40u32)
            .map(|index| {
                let n = round * 40 + index;
                let mut message = json!({
                    "timestamp": base_ts + i64::from(n),
                    "headers": {"trace": format!("t-{n}"), "round": round.to_string()},
                });
                if n % 5 != 0 {
                    message["key"] = json!(format!("user-{}", n % 17));
                }
                if n % 3 == 0 {
                    message["value_b64"] = json!(b64(&[n as u8, 0xff, 0x00]));
                } else {
                    message["value"] = json!({"n": n, "text": "é ü"});
                }
                message
            })
            .collect();
        let body = json!({ "messages": messages }).to_string().into_bytes();
        post(node, "/v1/topics/orders/messages", "application/json", body).await;
    }
    for partition in 0..partitions {
        for (codec, compression) in [(0u8, Compression::Lz4), (1, Compression::Zstd)] {
            let records: Vec<Record> = (0..30u32)
                .map(|index| Record {
                    offset_delta: index,
                    timestamp: base_ts + 10_000 + i64::from(index),
                    key: (index % 4 != 0).then(|| {
                        RecordKey::Bytes(Bytes::from(vec![codec, partition as u8, index as u8]))
                    }),
                    value: RecordValue::Bytes(Bytes::from(vec![index as u8; 100])),
                    headers: vec![("codec".into(), format!("{compression:?}"))],
                })
                .collect();
            let batch = encode_batch(&records, compression, ProducerStamp::NONE).expect("encode");
            let path = format!("/v1/topics/orders/partitions/{partition}/messages");
            post(node, &path, BATCH, batch.to_vec()).await;
        }
    }
}

/// One request of `changelog` to `partition`: `keys` with `round`'s value (`null` for a key in
/// `deleted`).
async fn write_keys(
    node: &Server,
    partition: u32,
    round: &str,
    keys: &[u32],
    deleted: &[u32],
    timestamp: i64,
) {
    let messages: Vec<Value> = keys
        .iter()
        .map(|key| {
            let value = if deleted.contains(key) {
                Value::Null
            } else {
                json!({"round": round, "key": key})
            };
            json!({"partition": partition, "key": format!("k{key}"), "value": value, "timestamp": timestamp})
        })
        .collect();
    let body = json!({ "messages": messages }).to_string().into_bytes();
    post(
        node,
        "/v1/topics/changelog/messages",
        "application/json",
        body,
    )
    .await;
}

/// `changelog`, each of `partitions`: batch A holds k0-k9, B k0-k1, C k0-k1 again (k1 deleted),
/// D k2-k4, then a tail. Cleaned, A keeps k5-k9 (offsets 5-9: a gap before them), B nothing,
/// C both, D all three, and the tail stays (the active batch is never cleaned). Answers the
/// keys each partition holds once cleaned, in offset order.
///
/// Every message carries the same timestamp, so the compaction lag ends for all of a
/// partition's batches at once and the one pass cleans them all. (With the time of each write,
/// the cleaner, looking every 200 ms, could pass between the end of the first batch's lag and
/// the second's: it then cleaned the first batch alone, left too little dirty for another pass,
/// and the partition stayed half cleaned.)
pub async fn fill_changelog(node: &Server, partitions: u32) -> Vec<String> {
    let written_at = crate::common::now_ms();
    for partition in 0..partitions {
        let keys: Vec<u32> = (0..10).collect();
        write_keys(node, partition, "a", &keys, &[], written_at).await;
        write_keys(node, partition, "b", &[0, 1], &[], written_at).await;
        write_keys(node, partition, "c", &[0, 1], &[1], written_at).await;
        write_keys(node, partition, "d", &[2, 3, 4], &[], written_at).await;
        let tail =
            json!({"partition": partition, "key": "tail", "value": "end", "timestamp": written_at});
        let body = json!({ "messages": [tail] });
        post(
            node,
            "/v1/topics/changelog/messages",
            "application/json",
            body.to_string().into_bytes(),
        )
        .await;
    }
    [
        "k5", "k6", "k7", "k8", "k9", "k0", "k1", "k2", "k3", "k4", "tail",
    ]
    .iter()
    .map(|key| key.to_string())
    .collect()
}

/// Waits until every partition of `changelog` holds exactly `keys` (in offset order): the
/// cleaner has passed, and with nothing dirty left it will not pass again.
pub async fn wait_until_cleaned(node: &Server, partitions: u32, keys: &[String]) {
    let cleaned = crate::common::poll(COMPACTION_DEADLINE, Duration::from_millis(500), || async {
        for partition in 0..partitions {
            let held: Vec<String> = node
                .read_all("changelog", partition)
                .await
                .into_iter()
                .filter_map(|message| message.key)
                .collect();
            if held != keys {
                return Err(format!("partition {partition} holds {held:?}"));
            }
        }
        Ok(())
    })
    .await;
    if let Err(seen) = cleaned {
        node.fail(&format!("changelog was not cleaned in time: {seen}"));
    }
}
