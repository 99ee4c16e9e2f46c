//! Retention by time and size on one node, black box: expired whole batches go, the log start
//! moves (reads below it answer 416 with the bounds), what is kept reads back unchanged, the
//! raft log prefix is purged and the disk space given back, and all of it survives a restart.

use crate::common;

use std::time::Duration;

use crate::common::{now_ms, poll, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Retention is checked this often in these tests (production default: 5 minutes).
const CHECK_INTERVAL: &str = "200";
/// How long a retention decision may take to show.
const RETENTION_DEADLINE: Duration = Duration::from_secs(30);

async fn start() -> Server {
    Server::start_with(&["--retention-check-interval-ms", CHECK_INTERVAL]).await
}

/// Waits until the partition's log start reaches `at_least`; answers it.
async fn wait_for_log_start(server: &Server, topic: &str, at_least: u64) -> u64 {
    let reached = poll(RETENTION_DEADLINE, Duration::from_millis(100), || async {
        let described = server.describe(topic).await;
        let start = described["partitions"][0]["log_start_offset"]
            .as_u64()
            .unwrap_or(0);
        if start >= at_least {
            Ok(start)
        } else {
            Err(format!("{start}: {described}"))
        }
    })
    .await;
    reached.unwrap_or_else(|seen| {
        server.fail(&format!(
            "log start of {topic} stayed at {seen}, expected >= {at_least}"
        ))
    })
}

fn values(server_messages: &[common::RawMessage]) -> Vec<String> {
    server_messages
        .iter()
        .map(|message| message.value_text().to_string())
        .collect()
}

#[tokio::test]
async fn time_retention_removes_expired_batches_only() {
    let mut server = start().await;
    server
        .create_topic_with(
            &json!({"name": "aged", "partitions": 1, "config": {"retention_ms": 60000}}),
        )
        .await;
    let old = now_ms() - 3_600_000;
    // Three batches of an hour-old messages, then one batch of new ones.
    for batch in 0..3 {
        let messages: Vec<Value> = (0..4)
            .map(|i| json!({"value": format!("old-{batch}-{i}"), "timestamp": old}))
            .collect();
        server
            .produce_ok("aged", &json!({ "messages": messages }))
            .await;
    }
    let kept = server
        .produce_ok(
            "aged",
            &json!({"messages": [{"value": "new-0"}, {"value": "new-1"}]}),
        )
        .await;
    assert_eq!(kept, vec![(0, 12), (0, 13)]);

    assert_eq!(wait_for_log_start(&server, "aged", 12).await, 12);
    let stored = server.read_all("aged", 0).await;
    assert_eq!(values(&stored), vec!["\"new-0\"", "\"new-1\""]);
    assert_eq!(stored[0].offset, 12, "offsets are unchanged by retention");

    // Below the log start: 416 with both bounds.
    let (status, problem) = server.fetch("aged", 0, "offset=3").await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{problem}");
    assert_eq!(problem["code"], "offset_out_of_range");
    assert_eq!(problem["log_start_offset"], 12);
    assert_eq!(problem["high_watermark"], 14);
    // A timestamp before the log start finds the log start.
    assert_eq!(server.offset_for_timestamp("aged", 0, old).await, 12);

    // After a restart: the same log start, the same messages, and appends continue.
    server.restart().await;
    assert_eq!(wait_for_log_start(&server, "aged", 12).await, 12);
    let after = server
        .produce_ok("aged", &json!({"messages": [{"value": "later"}]}))
        .await;
    assert_eq!(after, vec![(0, 14)]);
    let stored = server.read_all("aged", 0).await;
    assert_eq!(values(&stored), vec!["\"new-0\"", "\"new-1\"", "\"later\""]);
}

#[tokio::test]
async fn size_retention_keeps_the_partition_within_its_bytes_and_frees_disk() {
    let server = start().await;
    server.create_topic("sized", 1).await;
    // 40 batches of 50 x 2 KiB incompressible-ish values: about 4 MB.
    let payload = |batch: usize, i: usize| {
        let seed = format!("{batch}-{i}-");
        seed.repeat(2048 / seed.len() + 1)[..2048].to_string()
    };
    for batch in 0..40 {
        let messages: Vec<Value> = (0..50)
            .map(|i| json!({"value": payload(batch, i)}))
            .collect();
        server
            .produce_ok("sized", &json!({ "messages": messages }))
            .await;
    }
    let data_dir = server.data_dir();
    let before = dir_size(&data_dir);

    // Keep at most ~300 KB: the newest batches stay, whole, within the limit plus one batch.
    let response = server
        .patch_json(
            "/v1/topics/sized",
            &json!({"config": {"retention_bytes": 300_000}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let start = wait_for_log_start(&server, "sized", 1).await;
    assert_eq!(start % 50, 0, "the log start is a batch boundary: {start}");
    let stored = server.read_all("sized", 0).await;
    let kept_bytes: usize = stored.iter().map(|m| m.value_text().len()).sum();
    assert!(
        kept_bytes <= 300_000 + 50 * 2100,
        "kept {kept_bytes} bytes of values"
    );
    assert!(!stored.is_empty(), "the newest batch always stays");
    assert_eq!(stored.last().map(|m| m.offset), Some(1999));
    assert_eq!(stored.first().map(|m| m.offset), Some(start));

    // The disk space comes back (purge + RocksDB compaction), within a deadline.
    let shrunk = poll(RETENTION_DEADLINE, Duration::from_millis(250), || async {
        let now = dir_size(&data_dir);
        if now + 2_000_000 < before {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    })
    .await;
    if let Err(now) = shrunk {
        server.fail(&format!(
            "the data directory did not shrink: {before} bytes before, {now} now"
        ));
    }
}

/// Bytes of the files under `dir` (RocksDB's tables and write-ahead log).
fn dir_size(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        if metadata.is_dir() {
            total += dir_size(&path);
        } else {
            total += metadata.len();
        }
    }
    total
}
